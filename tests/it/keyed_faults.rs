//! Keyed statements under faults, against a real PostgreSQL and MariaDB:
//! reads,
//! updates and deletes of one row by its primary key
//! (`SELECT hits FROM counters WHERE id = $1`,
//! `UPDATE counters SET hits = hits + 1 WHERE id = $1`,
//! `UPDATE counters SET hits = hits + $1 WHERE id = $2`,
//! `DELETE FROM doomed WHERE id = $1`) from many callers at once, while the
//! server ends the pool's sessions and the network cuts its connections,
//! callers are dropped, rows of hot keys deadlock, or a lock outlasts the
//! session's `statement_timeout`. Every test runs as `pg::name`; all but
//! the statement limit's also as `my::name`.
//!
//! However the pool runs such statements (each on its own, or many
//! callers' coalesced into one), every caller gets the outcome its own
//! statement would have had run alone in autocommit, or an error that says
//! the outcome is unknown: an increment or delete acknowledged is applied
//! exactly once, one that failed for sure not at all, any other at most
//! once. Each test checks that first, against the table; then, apart and
//! marked as such, that the callers' statements were coalesced
//! ([`assert_coalesced`]), which holds only where the pool coalesces keyed
//! statements.
//!
//! Time bounds only separate "answered" from "stuck", but for the one the
//! session's statement limit sets
//! ([`a_lock_past_the_sessions_statement_timeout_ends_each_blocked_caller`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::backend::{Patience, TestBackend, TestOutcome, all_returned, vals};
use crate::common::proxy::Proxy;
use batchpool::postgres::Pool;
use batchpool::{BatchConfig, Error, Stats};
use rand::Rng;

#[cfg(feature = "mysql")]
mod my {
    crate::common::backend::tests_for!(
        My,
        (flavor = "multi_thread", worker_threads = 2),
        increments_under_kills_are_applied_once_each
        deletes_under_kills_remove_exactly_what_they_report
        dropped_callers_apply_their_increment_at_most_once
        crossed_hot_keys_lose_no_increment_and_keep_each_callers_error
    );
}

mod pg {
    crate::common::backend::tests_for!(
        Pg,
        (flavor = "multi_thread", worker_threads = 2),
        increments_under_kills_are_applied_once_each
        deletes_under_kills_remove_exactly_what_they_report
        dropped_callers_apply_their_increment_at_most_once
        crossed_hot_keys_lose_no_increment_and_keep_each_callers_error
        a_lock_past_the_sessions_statement_timeout_ends_each_blocked_caller
    );
}

/// Concurrent callers of the load tests, each making its calls one after
/// the other.
const TASKS: usize = 64;

/// Calls each task makes at least under kills.
const CALLS_PER_TASK: usize = 25;

/// Under kills, the tasks go on past [`CALLS_PER_TASK`] until the server
/// has ended this many of the pool's sessions...
const MIN_ENDED: usize = 6;

/// ...and the proxy has cut every connection this many times, or
/// [`KILL_WINDOW`] has passed (then the test fails on the kills' count).
const MIN_CUTS: usize = 3;

/// See [`MIN_CUTS`].
const KILL_WINDOW: Duration = Duration::from_secs(15);

/// The longest a caller may wait for its answer before it counts as stuck:
/// far past every limit the pools here set.
const CALL_BOUND: Duration = Duration::from_secs(25);

/// What one caller was told.
#[derive(Debug)]
enum Told {
    /// Ok, with its count of rows.
    Ok(u64),
    /// An error after which the statement may or may not have committed.
    Unknown(Error),
    /// An error after which nothing of the statement committed.
    Failed(Error),
    /// Nothing: the caller's future was dropped before its answer.
    Dropped,
}

impl Told {
    /// What `r` tells its caller.
    fn of<O: TestOutcome>(r: Result<O, Error>) -> Told {
        match r {
            Ok(out) => Told::Ok(out.rows_affected()),
            Err(e) if e.is_outcome_unknown() => Told::Unknown(e),
            Err(e) => Told::Failed(e),
        }
    }

    /// The statement reached the server and came back acknowledged or
    /// with its outcome unknown: it was sent.
    fn sent(&self) -> bool {
        matches!(self, Told::Ok(_) | Told::Unknown(_))
    }
}

/// The pool's coalescing counters between two snapshots.
#[derive(Debug)]
struct Counted {
    /// Statements the pool sent for coalesced calls.
    statements: u64,
    /// Statements run on their own.
    passthrough: u64,
    /// Calls taken for coalescing (sent, cancelled unsent, or failed
    /// unsent).
    coalesced: u64,
    /// Extra statements run to isolate failing rows.
    split: u64,
}

impl Counted {
    /// `after` less `before`.
    fn since(before: &Stats, after: &Stats) -> Counted {
        let coalesced = |s: &Stats| s.rows + s.rows_cancelled + s.rows_unsent;
        Counted {
            statements: after.statements - before.statements,
            passthrough: after.passthrough - before.passthrough,
            coalesced: coalesced(after) - coalesced(before),
            split: after.split_statements - before.split_statements,
        }
    }
}

/// COALESCING, checked apart from the outcomes and after them: holds only
/// where the pool coalesces keyed statements (running each on its own, it
/// fails here, every outcome check before it passed). `sent` callers'
/// statements reached the server by what they were told; the pool took
/// calls for coalescing, and sent fewer statements (coalesced ones and
/// those run on their own together) than those callers.
fn assert_coalesced(test: &str, counted: &Counted, sent: u64) {
    eprintln!("{test}: every outcome check passed; coalescing: {counted:?}, {sent} sent");
    assert!(
        counted.coalesced > 0 && counted.statements + counted.passthrough < sent,
        "COALESCING (not outcomes): {test}: {sent} callers' statements reached the server in \
         {} coalesced statements and {} statements on their own; {} calls were taken for \
         coalescing",
        counted.statements,
        counted.passthrough,
        counted.coalesced
    );
}

/// A fresh database holding `counters`: ids `0..keys`, every `hits` at
/// `initial`. Its URL.
async fn counters<B: TestBackend>(keys: i32, initial: i64) -> String {
    let url = B::fresh_db().await;
    let mut admin = B::admin(&url).await;
    B::admin_run(
        &mut admin,
        &format!(
            "CREATE TABLE counters (id INT PRIMARY KEY, hits BIGINT NOT NULL); \
             INSERT INTO counters (id, hits) {}",
            if B::IS_PG {
                format!(
                    "SELECT i, {initial} FROM generate_series(0, {}) i",
                    keys - 1
                )
            } else {
                format!("SELECT seq, {initial} FROM seq_0_to_{}", keys - 1)
            }
        ),
    )
    .await;
    url
}

/// Every counter's `hits` by id, read on a connection of its own.
async fn read_hits<B: TestBackend>(url: &str) -> BTreeMap<i32, i64> {
    let mut admin = B::admin(url).await;
    B::admin_rows(&mut admin, "SELECT id, hits FROM counters")
        .await
        .expect("read counters")
        .into_iter()
        .map(|r| {
            let id = r[0].as_deref().expect("an id").parse().expect("an INT");
            let hits = r[1].as_deref().expect("hits").parse().expect("a BIGINT");
            (id, hits)
        })
        .collect()
}

/// The ids left in `doomed`, read on a connection of its own.
async fn doomed_ids<B: TestBackend>(url: &str) -> BTreeSet<i32> {
    let mut admin = B::admin(url).await;
    B::admin_rows(&mut admin, "SELECT id FROM doomed")
        .await
        .expect("read doomed")
        .into_iter()
        .map(|r| r[0].as_deref().expect("an id").parse().expect("an INT"))
        .collect()
}

/// `url` with one more query parameter.
fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// Whether `e`, a definite error of a call under kills, is one a fault
/// explains: the session ended by the server (57P01, a transient code),
/// the connection closed, no connection in time.
fn a_faults_error(e: &Error) -> bool {
    e.is_retryable() || e.is_closed() || e.is_timeout()
}

/// What [`under_kills`] saw.
struct Killed {
    /// Each call's key and what its caller was told.
    calls: Vec<(i32, Told)>,
    /// Sessions of the pool the server ended.
    ended: usize,
    /// Times the proxy cut every connection.
    cuts: usize,
    /// The pool's counters over the calls.
    counted: Counted,
}

/// [`TASKS`] tasks run the texts `sqls` in turn, each call with one random
/// key of `0..keys`,
/// through a proxy, on a pool of 8 (5 s statement and wait limits), while
/// another task ends the pool's connections every 20–120 ms: in three
/// rounds of four the server ends one of the database's other sessions
/// (`pg_terminate_backend`), in the fourth the proxy cuts every connection
/// through it. Every caller must be answered within [`CALL_BOUND`]; the
/// pool is closed (every accepted call done) before this returns.
async fn under_kills<B: TestBackend>(url: &str, sqls: &[String], keys: i32) -> Killed {
    let proxy = Arc::new(Proxy::start(B::upstream(url)).await);
    let pool = B::pool_with(url, Some(proxy.addr()), BatchConfig::default(), 8, |b| {
        b.statement_timeout(Duration::from_secs(5))
            .wait_timeout(Duration::from_secs(5))
    });
    // Learned before the first kill: a kill that ends the learning would
    // leave the text run on its own for a while.
    for sql in sqls {
        let _ = B::explain(&pool, sql).await;
    }
    let before = B::stats(&pool);
    let stop = Arc::new(AtomicBool::new(false));
    let (ended, cuts) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (ready, killing) = tokio::sync::oneshot::channel();
    let killer = {
        let (url, proxy, stop) = (url.to_string(), proxy.clone(), stop.clone());
        let (ended, cuts) = (ended.clone(), cuts.clone());
        tokio::spawn(async move {
            let mut admin = B::admin(&url).await;
            let others = if B::IS_PG {
                "SELECT pid::text FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 AND backend_type = 'client backend'"
            } else {
                "SELECT ID FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND <> 'Daemon'"
            };
            ready.send(()).expect("the test waits");
            let mut round = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let pause = rand::rng().random_range(20..120);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                round += 1;
                if round % 4 == 0 {
                    proxy.kill_all();
                    cuts.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let Ok(rows) = B::admin_rows(&mut admin, others).await else {
                    continue;
                };
                if rows.is_empty() {
                    continue;
                }
                let pick = rand::rng().random_range(0..rows.len());
                if let Some(Ok(id)) = rows[pick][0].as_deref().map(str::parse) {
                    B::kill_session(&mut admin, id).await;
                    ended.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    killing.await.expect("the killer started");
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let (pool, sqls) = (pool.clone(), sqls.to_vec());
        let (ended, cuts) = (ended.clone(), cuts.clone());
        tasks.spawn(async move {
            let mut calls = Vec::new();
            loop {
                let killed_enough = ended.load(Ordering::SeqCst) >= MIN_ENDED
                    && cuts.load(Ordering::SeqCst) >= MIN_CUTS;
                if calls.len() >= CALLS_PER_TASK
                    && (killed_enough || started.elapsed() > KILL_WINDOW)
                {
                    return calls;
                }
                let key = rand::rng().random_range(0..keys);
                let params = vals![key];
                let sql = &sqls[calls.len() % sqls.len()];
                let r = tokio::time::timeout(CALL_BOUND, B::execute(&pool, sql, &params))
                    .await
                    .unwrap_or_else(|_| panic!("key {key}: no answer within {CALL_BOUND:?}"));
                calls.push((key, Told::of(r)));
            }
        });
    }
    let mut calls = Vec::new();
    while let Some(done) = tasks.join_next().await {
        calls.extend(done.expect("a caller task"));
    }
    stop.store(true, Ordering::SeqCst);
    killer.await.expect("the killer");
    // One of each kind of error, for the log.
    let unknown = calls.iter().find_map(|(_, t)| match t {
        Told::Unknown(e) => Some(e.to_string()),
        _ => None,
    });
    let failed = calls.iter().find_map(|(_, t)| match t {
        Told::Failed(e) => Some(e.to_string()),
        _ => None,
    });
    eprintln!("{}: e.g. unknown: {unknown:?}; failed: {failed:?}", B::NAME);
    tokio::time::timeout(CALL_BOUND, B::close(&pool))
        .await
        .expect("close() returns");
    let counted = Counted::since(&before, &B::stats(&pool));
    let (ended, cuts) = (ended.load(Ordering::SeqCst), cuts.load(Ordering::SeqCst));
    assert!(
        ended >= MIN_ENDED && cuts >= MIN_CUTS,
        "only {ended} sessions ended and {cuts} cuts in {:?}",
        started.elapsed()
    );
    Killed {
        calls,
        ended,
        cuts,
        counted,
    }
}

/// 64 tasks increment 50 hot counters by 1, each call one key, by two
/// texts that coalesce together (`UPDATE counters SET hits = hits + 1
/// WHERE id = $1` and `... SET hits = 1 + hits ...`), while the server
/// ends the pool's sessions and the proxy cuts its connections.
/// Each counter ends between its acknowledged increments and those plus
/// the ones whose outcome is unknown: none acknowledged is lost or applied
/// twice, none that failed for sure is applied. With no outcome unknown,
/// the total is exactly the acknowledged count.
async fn increments_under_kills_are_applied_once_each<B: TestBackend>() {
    const KEYS: i32 = 50;
    let url = counters::<B>(KEYS, 0).await;
    let sqls = [
        B::sql("UPDATE counters SET hits = hits + 1 WHERE id = ?"),
        B::sql("UPDATE counters SET hits = 1 + hits WHERE id = ?"),
    ];
    let killed = under_kills::<B>(&url, &sqls, KEYS).await;
    let (mut ok, mut unknown) = (BTreeMap::new(), BTreeMap::new());
    let (mut failed, mut bad) = (0, Vec::new());
    for (key, told) in &killed.calls {
        match told {
            Told::Ok(1) => *ok.entry(*key).or_insert(0i64) += 1,
            Told::Unknown(_) => *unknown.entry(*key).or_insert(0i64) += 1,
            Told::Failed(e) if a_faults_error(e) => failed += 1,
            other => bad.push(format!("key {key}: {other:?}")),
        }
    }
    let hits = read_hits::<B>(&url).await;
    let report = format!(
        "{} calls: {} acknowledged, {} unknown, {failed} failed; {} sessions ended, {} cuts",
        killed.calls.len(),
        ok.values().sum::<i64>(),
        unknown.values().sum::<i64>(),
        killed.ended,
        killed.cuts
    );
    eprintln!("{}: {report}", B::NAME);
    assert!(
        bad.is_empty(),
        "unexpected outcomes: {:?} ({report})",
        &bad[..bad.len().min(5)]
    );
    let mut wrong = Vec::new();
    for (key, n) in &hits {
        let acked = ok.get(key).copied().unwrap_or(0);
        let maybe = unknown.get(key).copied().unwrap_or(0);
        if *n < acked || *n > acked + maybe {
            wrong.push(format!(
                "key {key}: hits {n}, {acked} acknowledged, {maybe} unknown"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:?} ({report})");
    let total: i64 = hits.values().sum();
    if unknown.is_empty() {
        assert_eq!(total, ok.values().sum::<i64>(), "{report}");
    }

    let sent = killed.calls.iter().filter(|(_, t)| t.sent()).count() as u64;
    assert_coalesced("increments under kills", &killed.counted, sent);
}

/// 64 tasks delete random keys of the first 1,200 of 2,000
/// (`DELETE FROM doomed WHERE id = $1`, many keys more than once) while
/// the server ends the pool's sessions and the proxy cuts its connections.
/// A key deleted with Ok(1) is gone, and no two callers were told Ok(1)
/// for one key; a key still there was deleted by no one (no Ok(1), and no
/// Ok(0), which says another delete had taken it); a key gone was taken
/// by a delete acknowledged or of unknown outcome, never by one that
/// failed for sure alone; keys no one deleted are all there.
async fn deletes_under_kills_remove_exactly_what_they_report<B: TestBackend>() {
    const ROWS: i32 = 2000;
    const TARGETED: i32 = 1200;
    let url = B::fresh_db().await;
    let mut admin = B::admin(&url).await;
    let ids = if B::IS_PG {
        format!("SELECT generate_series(0, {})", ROWS - 1)
    } else {
        format!("SELECT seq FROM seq_0_to_{}", ROWS - 1)
    };
    B::admin_run(
        &mut admin,
        &format!("CREATE TABLE doomed (id INT PRIMARY KEY); INSERT INTO doomed (id) {ids}"),
    )
    .await;
    drop(admin);
    let sqls = [B::sql("DELETE FROM doomed WHERE id = ?")];
    let killed = under_kills::<B>(&url, &sqls, TARGETED).await;

    /// What the deletes of one key were told.
    #[derive(Default, Debug)]
    struct Deletes {
        gone: usize,
        absent: usize,
        unknown: usize,
        failed: usize,
    }
    let mut by_key: BTreeMap<i32, Deletes> = BTreeMap::new();
    let mut bad = Vec::new();
    for (key, told) in &killed.calls {
        let d = by_key.entry(*key).or_default();
        match told {
            Told::Ok(1) => d.gone += 1,
            Told::Ok(0) => d.absent += 1,
            Told::Unknown(_) => d.unknown += 1,
            Told::Failed(e) if a_faults_error(e) => d.failed += 1,
            other => bad.push(format!("key {key}: {other:?}")),
        }
    }
    let left = doomed_ids::<B>(&url).await;
    let count = |f: fn(&Deletes) -> usize| by_key.values().map(f).sum::<usize>();
    let report = format!(
        "{} deletes of {} keys: {} Ok(1), {} Ok(0), {} unknown, {} failed; {} rows left; \
         {} sessions ended, {} cuts",
        killed.calls.len(),
        by_key.len(),
        count(|d| d.gone),
        count(|d| d.absent),
        count(|d| d.unknown),
        count(|d| d.failed),
        left.len(),
        killed.ended,
        killed.cuts
    );
    eprintln!("{}: {report}", B::NAME);
    assert!(
        bad.is_empty(),
        "unexpected outcomes: {:?} ({report})",
        &bad[..bad.len().min(5)]
    );
    let mut wrong = Vec::new();
    for (key, d) in &by_key {
        let there = left.contains(key);
        if d.gone > 1 {
            wrong.push(format!("key {key}: deleted by {} callers: {d:?}", d.gone));
        }
        if there && (d.gone > 0 || d.absent > 0) {
            wrong.push(format!("key {key}: still there, yet {d:?}"));
        }
        if !there && d.gone + d.unknown == 0 {
            wrong.push(format!(
                "key {key}: gone, but no delete was acknowledged or unknown: {d:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{:?} ({report})",
        &wrong[..wrong.len().min(10)]
    );
    let untouched: Vec<i32> = (0..ROWS)
        .filter(|k| !by_key.contains_key(k) && !left.contains(k))
        .collect();
    assert!(
        untouched.is_empty(),
        "rows no one deleted are gone: {untouched:?}"
    );

    let sent = killed.calls.iter().filter(|(_, t)| t.sent()).count() as u64;
    assert_coalesced("deletes under kills", &killed.counted, sent);
}

/// 64 tasks make 60 calls each, one after the other, every call
/// incrementing a counter of its own by 1
/// (`UPDATE counters SET hits = hits + 1 WHERE id = $1`), on a pool of 4;
/// every other call is dropped 0–5 ms into it (`tokio::time::timeout`):
/// queued, or on the wire. Every caller not dropped is told Ok(1); after
/// `close()` each counter is 0 or 1, 1 for every caller told Ok: the total
/// is the acknowledged increments plus some of the dropped ones, each at
/// most once. Nothing changes after `close()` returned.
async fn dropped_callers_apply_their_increment_at_most_once<B: TestBackend>() {
    const CALLS: i32 = 60;
    let url = counters::<B>(TASKS as i32 * CALLS, 0).await;
    let pool = B::pool_with(&url, None, BatchConfig::default(), 4, |b| b);
    let sql = B::sql("UPDATE counters SET hits = hits + 1 WHERE id = ?");
    let _ = B::explain(&pool, &sql).await;
    let before = B::stats(&pool);
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS as i32 {
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.spawn(async move {
            let mut calls = Vec::new();
            for i in 0..CALLS {
                let key = task * CALLS + i;
                let drop_after =
                    (i % 2 == 1).then(|| Duration::from_micros(rand::rng().random_range(0..5000)));
                let params = vals![key];
                let call = B::execute(&pool, &sql, &params);
                let told = match drop_after {
                    Some(after) => match tokio::time::timeout(after, call).await {
                        Ok(r) => Told::of(r),
                        Err(_) => Told::Dropped,
                    },
                    None => match tokio::time::timeout(CALL_BOUND, call).await {
                        Ok(r) => Told::of(r),
                        Err(_) => panic!("key {key}: no answer within {CALL_BOUND:?}"),
                    },
                };
                calls.push((key, told));
            }
            calls
        });
    }
    let mut calls = BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        calls.extend(done.expect("a caller task"));
    }
    tokio::time::timeout(CALL_BOUND, B::close(&pool))
        .await
        .expect("close() returns");
    let counted = Counted::since(&before, &B::stats(&pool));
    let hits = read_hits::<B>(&url).await;
    let (mut acked, mut dropped, mut dropped_applied) = (0, 0, 0);
    let mut wrong = Vec::new();
    for (key, told) in &calls {
        let n = hits[key];
        match told {
            Told::Ok(1) if n == 1 => acked += 1,
            Told::Dropped if n <= 1 => {
                dropped += 1;
                dropped_applied += n;
            }
            other => wrong.push(format!("key {key}: hits {n}, told {other:?}")),
        }
    }
    let total: i64 = hits.values().sum();
    let report = format!(
        "{acked} acknowledged, {dropped} dropped ({dropped_applied} of them applied); \
         total {total}; {counted:?}"
    );
    eprintln!("{}: {report}", B::NAME);
    assert!(
        wrong.is_empty(),
        "{:?} ({report})",
        &wrong[..wrong.len().min(10)]
    );
    assert_eq!(total, acked + dropped_applied, "{report}");
    assert!(dropped > 0, "no caller was dropped before its answer");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        read_hits::<B>(&url).await,
        hits,
        "a counter changed after close() returned"
    );

    assert_coalesced("dropped callers", &counted, acked as u64);
}

/// 64 tasks, each round taking a random pair of 16 hot counters and
/// incrementing both at once (two calls, one key each, of
/// `UPDATE counters SET hits = hits + $1 WHERE id = $2`), even tasks the
/// lower key first, odd ones the higher: coalesced statements of several
/// callers lock their rows in opposite orders and can deadlock, where no
/// caller's own statement could. No `statement_timeout`. One call in 32
/// adds `i64::MAX` to a counter that is at least 1: alone it fails with
/// 22003 (bigint out of range), so that is its caller's answer; every
/// other caller is told Ok(1), and each counter ends exactly at its
/// acknowledged increments.
async fn crossed_hot_keys_lose_no_increment_and_keep_each_callers_error<B: TestBackend>() {
    const KEYS: i32 = 16;
    const ROUNDS: usize = 15;
    let url = counters::<B>(KEYS, 1).await;
    let pool = B::pool_with(&url, None, BatchConfig::default(), 8, |b| b);
    {
        let mut admin = B::admin(&url).await;
        let limit = if B::IS_PG {
            "SHOW statement_timeout"
        } else {
            "SELECT CAST(@@max_statement_time AS SIGNED)"
        };
        let limit = B::admin_rows(&mut admin, limit).await.expect(limit);
        assert_eq!(
            limit,
            vec![vec![Some("0".to_string())]],
            "the session has no statement limit"
        );
    }
    let sql = B::sql("UPDATE counters SET hits = hits + ? WHERE id = ?");
    let _ = B::explain(&pool, &sql).await;
    let before = B::stats(&pool);
    let call = {
        let (pool, sql) = (pool.clone(), sql.clone());
        move |key: i32, by: i64| {
            let (pool, sql) = (pool.clone(), sql.clone());
            async move {
                let params = vals![by, key];
                let r = tokio::time::timeout(CALL_BOUND, B::execute(&pool, &sql, &params))
                    .await
                    .unwrap_or_else(|_| panic!("key {key}: no answer within {CALL_BOUND:?}"));
                (key, by, Told::of(r))
            }
        }
    };
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let call = call.clone();
        tasks.spawn(async move {
            let mut calls = Vec::new();
            for round in 0..ROUNDS {
                let (a, b) = {
                    let mut rng = rand::rng();
                    let a = rng.random_range(0..KEYS);
                    let b = (a + rng.random_range(1..KEYS)) % KEYS;
                    (a.min(b), a.max(b))
                };
                let (first, second) = if task % 2 == 0 { (a, b) } else { (b, a) };
                let by = if (task * ROUNDS + round) % 32 == 0 {
                    i64::MAX
                } else {
                    1
                };
                let (one, two) = tokio::join!(call(first, by), call(second, 1));
                calls.extend([one, two]);
            }
            calls
        });
    }
    let mut calls = Vec::new();
    while let Some(done) = tasks.join_next().await {
        calls.extend(done.expect("a caller task"));
    }
    tokio::time::timeout(CALL_BOUND, B::close(&pool))
        .await
        .expect("close() returns");
    let counted = Counted::since(&before, &B::stats(&pool));
    let mut ok: BTreeMap<i32, i64> = BTreeMap::new();
    let (mut overflows, mut wrong) = (0, Vec::new());
    for (key, by, told) in &calls {
        match (*by, told) {
            (1, Told::Ok(1)) => *ok.entry(*key).or_default() += 1,
            (i64::MAX, Told::Failed(e)) if e.code() == Some("22003") => overflows += 1,
            _ => wrong.push(format!("key {key} by {by}: {told:?}")),
        }
    }
    let hits = read_hits::<B>(&url).await;
    let mut admin = B::admin(&url).await;
    let deadlocks = B::admin_rows(
        &mut admin,
        if B::IS_PG {
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        } else {
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
             WHERE VARIABLE_NAME = 'INNODB_DEADLOCKS'"
        },
    )
    .await
    .ok()
    .and_then(|rows| rows.into_iter().next()?.into_iter().next()?);
    let report = format!(
        "{} calls: {} acknowledged, {overflows} out of range; deadlocks the server counted \
         so far: {}; {counted:?}",
        calls.len(),
        ok.values().sum::<i64>(),
        deadlocks.as_deref().unwrap_or("?")
    );
    eprintln!("{}: {report}", B::NAME);
    assert!(
        wrong.is_empty(),
        "{} callers not told their own statement's outcome: {:?} ({report})",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    assert!(overflows > 0, "no out-of-range call was made");
    let off: Vec<String> = hits
        .iter()
        .filter(|(key, n)| **n != 1 + ok.get(key).copied().unwrap_or(0))
        .map(|(key, n)| format!("key {key}: hits {n}, {:?} acknowledged", ok.get(key)))
        .collect();
    assert!(off.is_empty(), "{off:?} ({report})");

    let sent = calls
        .iter()
        .filter(|(_, _, t)| matches!(t, Told::Ok(_) | Told::Failed(_)))
        .count() as u64;
    assert_coalesced("crossed hot keys", &counted, sent);
}

/// `statement_timeout` 1.5 s in the connection string
/// (`options=-c statement_timeout=1500`), a pool of 16 that has served
/// both texts: another connection holds `LOCK TABLE counters IN ACCESS
/// EXCLUSIVE MODE` for at least 4 s (and until every caller has its
/// answer), while 8 callers increment a counter each
/// (`UPDATE counters SET hits = hits + 1 WHERE id = $1`) and 8 read one
/// (`SELECT hits FROM counters WHERE id = $1`). Each is blocked, and gets
/// the server's cancellation at the limit: 57014, definite, within 3.5 s
/// of its call (the limit and a margin; a caller whose statement was run
/// again would wait one more limit). Nothing is re-run
/// (`split_statements` unchanged) and nothing is applied, also after the
/// lock is released; the pool then serves as before.
async fn a_lock_past_the_sessions_statement_timeout_ends_each_blocked_caller<
    B: TestBackend<Pool = Pool>,
>() {
    const BLOCKED: i32 = 8;
    const SPARE_KEY: i32 = 31;
    let hold = Duration::from_secs(4);
    let bound = Duration::from_millis(3500);
    let url = counters::<B>(32, 0).await;
    let limited = with_param(&url, "options=-c%20statement_timeout%3D1500");
    let pool = B::pool_with(&limited, None, BatchConfig::default(), 16, |b| b);
    let update = B::sql("UPDATE counters SET hits = hits + 1 WHERE id = ?");
    let read = B::sql("SELECT hits FROM counters WHERE id = ?");
    {
        let conn = pool.get().await.expect("a connection");
        let limit: String = conn
            .query_one("SHOW statement_timeout", &[])
            .await
            .expect("SHOW statement_timeout")
            .get(0);
        assert_eq!(limit, "1500ms", "the connection string's limit");
    }
    // Serving: every connection open, both texts learned and run.
    let _ = B::explain(&pool, &update).await;
    let _ = B::explain(&pool, &read).await;
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(B::hold(&pool).await);
    }
    drop(held);
    for _ in 0..2 {
        let mut warm = tokio::task::JoinSet::new();
        for key in 0..16 {
            let (pool, update, read) = (pool.clone(), update.clone(), read.clone());
            warm.spawn(async move {
                B::execute(&pool, &update, &vals![key])
                    .await
                    .expect("a warm-up update");
                pool.query(&read, &[&key]).await.expect("a warm-up read");
            });
        }
        while let Some(done) = warm.join_next().await {
            done.expect("a warm-up task");
        }
    }
    all_returned::<B>(&pool).await;
    let warm = read_hits::<B>(&url).await;
    let before = B::stats(&pool);

    let mut locker = B::admin(&url).await;
    B::admin_run(&mut locker, "BEGIN").await;
    B::admin_run(&mut locker, "LOCK TABLE counters IN ACCESS EXCLUSIVE MODE").await;
    let locked = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for key in 0..BLOCKED {
        for reading in [false, true] {
            let (pool, done) = (pool.clone(), done.clone());
            let sql = if reading {
                read.clone()
            } else {
                update.clone()
            };
            calls.push(tokio::spawn(async move {
                let start = Instant::now();
                let call = async {
                    if reading {
                        pool.query(&sql, &[&key])
                            .await
                            .map(|rows| rows.len() as u64)
                    } else {
                        B::execute(&pool, &sql, &vals![key])
                            .await
                            .map(|o| o.rows_affected())
                    }
                };
                let r = tokio::time::timeout(CALL_BOUND, call).await;
                done.fetch_add(1, Ordering::SeqCst);
                (key, reading, start.elapsed(), r)
            }));
        }
    }
    let patience = Patience::new("every blocked caller's answer");
    while locked.elapsed() < hold || done.load(Ordering::SeqCst) < calls.len() {
        patience.wait().await;
    }
    B::admin_run(&mut locker, "COMMIT").await;
    let mut results = Vec::new();
    for c in calls {
        results.push(c.await.expect("a caller task"));
    }

    let counted = Counted::since(&before, &B::stats(&pool));
    // The pool serves on; then nothing more runs.
    let out = B::execute(&pool, &update, &vals![SPARE_KEY])
        .await
        .expect("an update after the lock");
    assert_eq!(out.rows_affected(), 1);
    tokio::time::timeout(CALL_BOUND, B::close(&pool))
        .await
        .expect("close() returns");
    let mut wrong = Vec::new();
    for (key, reading, took, r) in &results {
        let what = if *reading { "read" } else { "update" };
        match r {
            Ok(Err(e))
                if e.code() == Some("57014")
                    && e.is_statement_timeout()
                    && !e.is_outcome_unknown()
                    && *took < bound => {}
            Ok(Ok(n)) => wrong.push(format!("{what} of {key}: Ok({n}) after {took:?}")),
            Ok(Err(e)) => wrong.push(format!("{what} of {key}: {e} after {took:?}")),
            Err(_) => wrong.push(format!("{what} of {key}: no answer after {took:?}")),
        }
    }
    let slowest = results.iter().map(|(_, _, took, _)| *took).max();
    let report = format!(
        "{} callers, slowest answered after {slowest:?}; {counted:?}",
        results.len()
    );
    eprintln!("{}: {report}", B::NAME);
    assert!(
        wrong.is_empty(),
        "not the server's cancellation within {bound:?}: {wrong:?} ({report})"
    );
    assert_eq!(
        counted.split, 0,
        "a cancelled statement was re-run: {report}"
    );
    let mut expected = warm;
    *expected.get_mut(&SPARE_KEY).expect("the spare key") += 1;
    assert_eq!(
        read_hits::<B>(&url).await,
        expected,
        "a blocked update was applied: {report}"
    );

    assert_coalesced(
        "a lock past the statement limit",
        &counted,
        results.len() as u64,
    );
}
