//! A statement the server ends for a limit ends its callers' calls: every
//! caller whose row was in it gets the server's error, definite (nothing of
//! it committed), and none of its rows is sent again. Against a real
//! PostgreSQL and a real MariaDB, for each kind of limit: the session's own
//! statement limit (PostgreSQL's connection string, MariaDB's `init`), the
//! builder's `statement_timeout`, a lock wait limit (PostgreSQL
//! `lock_timeout`, MariaDB `innodb_lock_wait_timeout`) and an operator's
//! cancel (`pg_cancel_backend`, `KILL QUERY`).
//!
//! Each test holds a lock on the table from a connection of its own, so
//! that every INSERT waits for it, and keeps it until every caller has its
//! answer. One caller's row goes out alone on the pool's only connection;
//! [`GROUP`] more queue behind it and go out as one statement. A pool that
//! re-ran a cancelled statement's rows would send them again under the
//! lock (`split_statements` above 0), and its callers would wait one more
//! limit per re-run. Time bounds only separate "ended at the limit" from
//! "re-run": they are the statements at the limit plus several seconds of
//! slack for a loaded machine, while a re-running pool takes about
//! `2 × GROUP` limits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::backend::{Patience, TestBackend, TestOutcome, Val, both, count, vals};
use batchpool::{BatchConfig, Error};

both! {
    (flavor = "multi_thread", worker_threads = 2) => [
        a_statement_cancelled_at_the_builders_limit_fails_each_caller_once,
        a_statement_cancelled_by_an_operator_fails_each_caller_once,
    ],
}

/// Rows queued behind the first caller's statement: an allowed statement
/// size, so they go out as one statement.
const GROUP: usize = 16;

/// The statement limit of the tests that set one.
const LIMIT: Duration = Duration::from_secs(2);

/// Slack on top of the time the statements take at their limit: a loaded
/// 2-core machine may be slow to send a statement or to read its answer.
const SLACK: Duration = Duration::from_secs(5);

/// How the test's own connection makes every INSERT into `t` wait.
#[derive(Clone, Copy)]
enum Hold {
    /// PostgreSQL `LOCK TABLE ... ACCESS EXCLUSIVE` in an open transaction;
    /// MariaDB `LOCK TABLES ... WRITE` (a metadata lock).
    Table,
    /// MariaDB: `SELECT ... FOR UPDATE` in an open transaction, whose gap
    /// locks every InnoDB INSERT waits for (a row lock wait, bounded by
    /// `innodb_lock_wait_timeout`).
    Gaps,
}

/// While the INSERTs wait, the test's own connection cancels each of them
/// as an operator would (`pg_cancel_backend`, `KILL QUERY`), or leaves them
/// to the limit.
#[derive(Clone, Copy, PartialEq)]
enum Operator {
    Waits,
    Cancels,
}

/// What one caller got, and how long its call took.
type Call = (i32, Duration, Result<u64, Error>);

/// A fresh database with the table `t`: its URL.
async fn fresh<B: TestBackend>() -> String {
    let url = B::fresh_db().await;
    let mut admin = B::admin(&url).await;
    B::admin_run(
        &mut admin,
        "CREATE TABLE t (k INT PRIMARY KEY, v INT NOT NULL)",
    )
    .await;
    url
}

fn insert<B: TestBackend>() -> String {
    B::sql("INSERT INTO t (k, v) VALUES (?, ?)")
}

/// Learns the INSERT and prepares its statements on `pool`'s only
/// connection (a learning or a prepare would itself wait for the lock): one
/// row alone, then [`GROUP`] rows as one batch. Returns how many rows it
/// wrote.
async fn warm_up<B: TestBackend>(pool: &B::Pool) -> i64 {
    let sql = insert::<B>();
    let why = B::explain(pool, &sql).await.expect("explain");
    assert!(why.is_coalesced(), "{sql} is not coalesced: {why}");
    B::execute(pool, &sql, &vals![-1, 0])
        .await
        .expect("warm-up row");
    let rows: Vec<Vec<Val>> = (0..GROUP as i32).map(|i| vals![-2 - i, 0]).collect();
    for r in B::execute_many(pool, &sql, &rows)
        .await
        .expect("warm-up batch")
    {
        r.expect("warm-up batch row");
    }
    1 + GROUP as i64
}

/// Runs `1 + GROUP` callers against `t` while `hold` makes their INSERTs
/// wait (and `operator` cancels them, or not), keeps the lock until each
/// has its answer, and checks what every limit must give: every caller an
/// error that `expected` accepts, definite; no row re-run
/// (`split_statements` unchanged); nothing written; the pool serving
/// afterwards. Returns each call's duration, for the test's own bound.
async fn run_under_lock<B: TestBackend>(
    url: &str,
    pool: &B::Pool,
    hold: Hold,
    operator: Operator,
    expected: impl Fn(&Error) -> bool,
) -> Vec<Call> {
    let warm = warm_up::<B>(pool).await;
    let before = B::stats(pool);
    let sql = insert::<B>();
    let mut locker = B::admin(url).await;
    match hold {
        Hold::Table if B::IS_PG => {
            B::admin_run(&mut locker, "BEGIN").await;
            B::admin_run(&mut locker, "LOCK TABLE t IN ACCESS EXCLUSIVE MODE").await;
        }
        Hold::Table => B::admin_run(&mut locker, "LOCK TABLES t WRITE").await,
        Hold::Gaps => {
            assert!(!B::IS_PG, "gap locks are InnoDB's");
            B::admin_run(&mut locker, "BEGIN").await;
            B::admin_rows(&mut locker, "SELECT * FROM t FOR UPDATE")
                .await
                .expect("lock the table's gaps");
        }
    }
    let mut watcher = B::admin(url).await;
    let done = Arc::new(AtomicUsize::new(0));
    let call = |k: i32| {
        let (pool, sql, done) = (pool.clone(), sql.clone(), done.clone());
        tokio::spawn(async move {
            let start = Instant::now();
            let r = B::execute(&pool, &sql, &vals![k, k]).await;
            let took = start.elapsed();
            done.fetch_add(1, Ordering::SeqCst);
            (k, took, r.map(|o| o.rows_affected()))
        })
    };
    // The first row goes out alone and waits for the lock; the others queue
    // behind it.
    let mut calls = vec![call(0)];
    let patience = Patience::new("the first caller's statement on the server");
    while !B::running(&mut watcher, "INSERT").await {
        patience.wait().await;
    }
    calls.extend((1..=GROUP as i32).map(call));
    let patience = Patience::new("the group to queue");
    while B::stats(pool).queued < GROUP as u64 && done.load(Ordering::SeqCst) == 0 {
        patience.wait().await;
    }
    // Every caller answered while the lock is still held.
    let patience = Patience::new("every caller's answer under the lock");
    while done.load(Ordering::SeqCst) < calls.len() {
        if operator == Operator::Cancels {
            for id in running_inserts::<B>(&mut watcher).await {
                let cancel = B::pick(
                    format!("SELECT pg_cancel_backend({id})"),
                    format!("KILL QUERY {id}"),
                );
                // The statement may have ended meanwhile (MariaDB: 1094).
                let _ = B::admin_rows(&mut watcher, &cancel).await;
            }
        }
        patience.wait().await;
    }
    let mut results = Vec::new();
    for c in calls {
        results.push(c.await.expect("caller task"));
    }
    let release = match hold {
        Hold::Table if !B::IS_PG => "UNLOCK TABLES",
        _ => "COMMIT",
    };
    B::admin_run(&mut locker, release).await;

    let after = B::stats(pool);
    let report = format!("{:?}; stats before {before:?}, after {after:?}", results);
    for (k, _, r) in &results {
        match r {
            Err(e) if expected(e) && !e.is_outcome_unknown() => {}
            other => panic!("caller {k}: {other:?}, expected the server's limit error; {report}"),
        }
    }
    assert_eq!(
        after.split_statements, before.split_statements,
        "rows of a cancelled statement were sent again: {report}"
    );
    assert_eq!(
        after.rows - before.rows,
        1 + GROUP as u64,
        "each row sent once: {report}"
    );
    assert_eq!(count::<B>(pool, "t").await, warm, "nothing committed");
    // The pool serves on as before.
    let out = B::execute(pool, &sql, &vals![1_000, 0])
        .await
        .expect("after the lock");
    assert_eq!(out.rows_affected(), 1);
    results
}

/// Session ids of the pool's INSERTs running on the server.
async fn running_inserts<B: TestBackend>(admin: &mut B::Admin) -> Vec<String> {
    let sql = B::pick(
        "SELECT pid::text FROM pg_stat_activity WHERE state = 'active' \
         AND starts_with(query, 'INSERT') AND datname = current_database() \
         AND pid <> pg_backend_pid()",
        "SELECT ID FROM information_schema.PROCESSLIST WHERE LEFT(INFO, 6) = 'INSERT' \
         AND DB = DATABASE() AND ID <> CONNECTION_ID()",
    );
    B::admin_rows(admin, sql)
        .await
        .expect("running statements")
        .into_iter()
        .filter_map(|row| row.into_iter().next().flatten())
        .collect()
}

/// Every call ended within `bound`.
fn assert_within(results: &[Call], bound: Duration) {
    let slowest = results.iter().map(|(_, took, _)| *took).max().unwrap();
    assert!(
        slowest <= bound,
        "a call took {slowest:?}, past {bound:?}: a cancelled statement's rows were run again"
    );
}

/// The first statement waits for the lock until the limit; the group's,
/// behind it on the only connection, until its own limit: two limits.
fn two_limits() -> Duration {
    2 * LIMIT + SLACK
}

/// Whether `e` is the server's cancellation at its statement limit.
fn statement_timeout(e: &Error) -> bool {
    e.is_statement_timeout() && e.is_db()
}

/// The builder's `statement_timeout` (which the pool sets on its
/// sessions): the server cancels the statements at it, and every caller
/// gets that cancellation.
async fn a_statement_cancelled_at_the_builders_limit_fails_each_caller_once<B: TestBackend>() {
    let url = fresh::<B>().await;
    let pool = B::pool_with(&url, None, BatchConfig::default(), 1, |b| {
        b.statement_timeout(LIMIT)
    });
    let results = run_under_lock::<B>(&url, &pool, Hold::Table, Operator::Waits, |e| {
        statement_timeout(e) && B::native_code(e).as_deref() == Some(B::pick("57014", "1969"))
    })
    .await;
    assert_within(&results, two_limits());
}

/// An operator cancels each statement as it waits: every caller of it
/// gets the cancel (PostgreSQL 57014 "canceling statement due to user
/// request", MariaDB 1317), and nothing is run again. No statement limit:
/// only the operator ends them.
async fn a_statement_cancelled_by_an_operator_fails_each_caller_once<B: TestBackend>() {
    let url = fresh::<B>().await;
    let pool = B::pool_with(&url, None, BatchConfig::default(), 1, |b| b);
    let hold = B::pick(Hold::Table, Hold::Gaps);
    run_under_lock::<B>(&url, &pool, hold, Operator::Cancels, |e| {
        e.is_db()
            && !e.is_statement_timeout()
            && B::native_code(e).as_deref() == Some(B::pick("57014", "1317"))
    })
    .await;
}

/// `url` with one more query parameter.
#[cfg(feature = "postgres")]
fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// The issue a user meets first: `statement_timeout` in the connection
/// string, a table locked past it. The plain driver's statements end with
/// 57014 at the limit; so does every coalesced caller's.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_statement_cancelled_at_the_connection_strings_limit_fails_each_caller_once() {
    use common::backend::Pg;
    let url = fresh::<Pg>().await;
    let limited = with_param(
        &url,
        &format!("options=-c%20statement_timeout%3D{}", LIMIT.as_millis()),
    );
    let pool = Pg::pool(&limited, BatchConfig::default(), 1);
    let results = run_under_lock::<Pg>(&url, &pool, Hold::Table, Operator::Waits, |e| {
        statement_timeout(e) && e.code() == Some("57014")
    })
    .await;
    assert_within(&results, two_limits());
}

/// `lock_timeout` in the connection string: the server cancels each
/// statement when its wait for the lock passes it (55P03), and every
/// caller gets that error.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_statement_cancelled_at_the_lock_timeout_fails_each_caller_once() {
    use common::backend::Pg;
    let url = fresh::<Pg>().await;
    let limited = with_param(
        &url,
        &format!("options=-c%20lock_timeout%3D{}", LIMIT.as_millis()),
    );
    let pool = Pg::pool(&limited, BatchConfig::default(), 1);
    let results = run_under_lock::<Pg>(&url, &pool, Hold::Table, Operator::Waits, |e| {
        e.is_db() && e.code() == Some("55P03")
    })
    .await;
    assert_within(&results, two_limits());
}

/// A MariaDB pool of one connection whose sessions run `init`.
#[cfg(feature = "mysql")]
fn my_pool(url: &str, init: &str) -> batchpool::mysql::Pool {
    let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(url).unwrap())
        .init(vec![init.to_string()]);
    batchpool::mysql::Pool::from_opts(opts)
        .max_size(1)
        .build()
        .unwrap()
}

/// The session's own `max_statement_time` (an `init` statement): the
/// server interrupts each statement at it (1969), and every caller gets
/// that error.
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_a_statement_interrupted_at_the_sessions_limit_fails_each_caller_once() {
    use common::backend::My;
    let url = fresh::<My>().await;
    let pool = my_pool(
        &url,
        &format!("SET SESSION max_statement_time = {}", LIMIT.as_secs()),
    );
    let results = run_under_lock::<My>(&url, &pool, Hold::Table, Operator::Waits, |e| {
        statement_timeout(e) && e.as_mysql_error().is_some_and(|m| m.code == 1969)
    })
    .await;
    assert_within(&results, two_limits());
}

/// The session's `innodb_lock_wait_timeout`: each statement's wait for a
/// row lock ends at it (1205, the statement rolled back), and every caller
/// gets that error.
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_a_statement_past_the_lock_wait_timeout_fails_each_caller_once() {
    use common::backend::My;
    let url = fresh::<My>().await;
    let pool = my_pool(
        &url,
        &format!("SET SESSION innodb_lock_wait_timeout = {}", LIMIT.as_secs()),
    );
    let results = run_under_lock::<My>(&url, &pool, Hold::Gaps, Operator::Waits, |e| {
        e.is_db() && e.as_mysql_error().is_some_and(|m| m.code == 1205)
    })
    .await;
    assert_within(&results, two_limits());
}
