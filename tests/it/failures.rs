//! Lost connections mid-batch against a real PostgreSQL and a real MariaDB:
//! no hang, no duplicates, honest errors, and the pool recovers. Every test
//! runs as `pg::name` and `mysql::name`.
//!
//! To strike while a statement is certainly on the server, another session
//! holds row 0 in an open transaction: the statement carrying row 0 then
//! waits for that row lock on the server (sent, running, unanswered) until
//! the test acts, whatever the machine's load.

use std::collections::HashSet;
use std::time::Duration;

use crate::common::backend::{Patience, TestBackend, TestOutcome, all_returned, both, vals};
use crate::common::proxy::Proxy;
use batchpool::BatchConfig;

both! {
    (flavor = "multi_thread", worker_threads = 4) => [
        server_kills_the_connection_mid_batch,
        connection_cut_while_batch_in_flight_is_outcome_unknown,
    ],
}

/// A statement whose rows take ~20 ms each to evaluate.
fn slow_insert<B: TestBackend>() -> &'static str {
    B::pick(
        "INSERT INTO victim (k, v) VALUES ($1, $2 || (SELECT '' FROM pg_sleep(0.02)))",
        "INSERT INTO victim (k, v) VALUES (?, CONCAT(?, LEFT(SLEEP(0.02), 0)))",
    )
}

const VICTIM: &str = "INSERT INTO victim";

async fn setup<B: TestBackend>(url: &str) {
    let pool = B::pool(url, BatchConfig::default(), 1);
    let ddl = "CREATE TABLE victim (k INT PRIMARY KEY, v VARCHAR(50) NOT NULL)";
    B::execute(&pool, ddl, &[]).await.unwrap();
    B::close(&pool).await;
}

async fn present<B: TestBackend>(url: &str) -> Vec<i32> {
    let pool = B::pool(url, BatchConfig::default(), 1);
    let keys = B::query_i32(&pool, "SELECT k FROM victim ORDER BY k", &[])
        .await
        .unwrap();
    B::close(&pool).await;
    keys
}

/// A session holding row 0 of `victim` in an open transaction.
async fn lock_row_0<B: TestBackend>(url: &str) -> B::Admin {
    let mut locker = B::admin(url).await;
    B::admin_run(&mut locker, "BEGIN").await;
    B::admin_run(&mut locker, "INSERT INTO victim (k, v) VALUES (0, 'lock')").await;
    locker
}

/// Waits until a statement of the batch waits for the lock on row 0, and
/// returns its session.
async fn waiting_for_row_0<B: TestBackend>(admin: &mut B::Admin) -> u64 {
    let patience = Patience::new("the batch to wait for row 0");
    loop {
        if let Some(session) = B::lock_waiters(admin, VICTIM).await.first() {
            return *session;
        }
        patience.wait().await;
    }
}

#[derive(Default, Debug)]
struct Tally {
    ok: HashSet<i32>,
    unknown: HashSet<i32>,
    failed: HashSet<i32>,
}

async fn run_batch<B: TestBackend>(pool: B::Pool, keys: std::ops::Range<i32>) -> Tally {
    let mut tasks = tokio::task::JoinSet::new();
    for k in keys {
        let pool = pool.clone();
        tasks.spawn(async move {
            let params = vals![k, format!("v{k}")];
            (k, B::execute(&pool, slow_insert::<B>(), &params).await)
        });
    }
    let mut tally = Tally::default();
    let all = async {
        while let Some(r) = tasks.join_next().await {
            match r.unwrap() {
                (k, Ok(out)) => {
                    assert_eq!(out.rows_affected(), 1);
                    tally.ok.insert(k);
                }
                (k, Err(e)) if e.is_outcome_unknown() => {
                    tally.unknown.insert(k);
                }
                (k, Err(e)) => {
                    assert!(
                        e.is_retryable(),
                        "row {k}: error neither unknown nor retryable: {e}"
                    );
                    tally.failed.insert(k);
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("callers hung after the connection was lost");
    tally
}

fn check(tally: &Tally, present: &[i32]) {
    let set: HashSet<i32> = present.iter().copied().collect();
    assert_eq!(set.len(), present.len(), "duplicate rows");
    assert!(
        tally.ok.is_subset(&set),
        "acknowledged row missing: {tally:?}"
    );
    for k in &tally.failed {
        assert!(
            !set.contains(k),
            "row {k} reported failed (not committed) but is present"
        );
    }
    for k in &set {
        assert!(
            tally.ok.contains(k) || tally.unknown.contains(k),
            "row {k} present without being acknowledged or unknown"
        );
    }
}

/// Reads the table once no statement of the batch runs any more (an
/// orphaned one finishes or aborts on its own), checks it against the
/// tally, and checks that the pool serves again.
async fn check_and_recover<B: TestBackend>(url: &str, pool: &B::Pool, tally: &Tally) {
    let mut admin = B::admin(url).await;
    let patience = Patience::new("orphaned statements to end");
    while B::running(&mut admin, VICTIM).await {
        patience.wait().await;
    }
    let mut present_keys = present::<B>(url).await;
    present_keys.retain(|k| *k >= 0);
    check(tally, &present_keys);
    // The pool throws the dead connections away and serves again.
    let out = B::execute(pool, slow_insert::<B>(), &vals![1000, "after"])
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 1);
}

/// The server ends the session running the batch (PostgreSQL:
/// `pg_terminate_backend`; MariaDB: `KILL`).
async fn server_kills_the_connection_mid_batch<B: TestBackend>() {
    let url = B::fresh_db().await;
    setup::<B>(&url).await;
    // A short timer gathers the callers into few statements.
    let config = BatchConfig::default().max_delay(Duration::from_millis(100));
    let pool = B::pool(&url, config, 1);
    // Warm the connection and the shape so the batch goes out at once.
    B::execute(&pool, slow_insert::<B>(), &vals![-1, "warm"])
        .await
        .unwrap();

    let mut locker = lock_row_0::<B>(&url).await;
    let batch = tokio::spawn(run_batch::<B>(pool.clone(), 0..60));
    let killed = {
        let mut admin = B::admin(&url).await;
        let session = waiting_for_row_0::<B>(&mut admin).await;
        B::kill_session(&mut admin, session).await;
        true
    };
    B::admin_run(&mut locker, "ROLLBACK").await;
    let tally = batch.await.unwrap();
    assert!(killed, "never saw the batch running");
    assert!(
        !tally.unknown.is_empty() || !tally.failed.is_empty(),
        "killing the connection should fail someone: {tally:?}"
    );
    check_and_recover::<B>(&url, &pool, &tally).await;
    all_returned::<B>(&pool).await;
    B::close(&pool).await;
}

/// The connection is cut (by a proxy) while a statement is on the server.
async fn connection_cut_while_batch_in_flight_is_outcome_unknown<B: TestBackend>() {
    let url = B::fresh_db().await;
    setup::<B>(&url).await;
    let proxy = Proxy::start(B::upstream(&url)).await;
    // One connection: the cut leaves no idle connection behind that the
    // pool could only find dead by using it (MySQL notices that only when
    // it pings a connection idle for 5 s).
    let pool = B::pool_via(&url, proxy.addr(), BatchConfig::default(), 1);
    B::execute(&pool, slow_insert::<B>(), &vals![-1, "warm"])
        .await
        .unwrap();

    let mut locker = lock_row_0::<B>(&url).await;
    let batch = tokio::spawn(run_batch::<B>(pool.clone(), 0..40));
    // The statement carrying row 0 was sent and waits on the server: the
    // connection drops with it in flight.
    let mut admin = B::admin(&url).await;
    waiting_for_row_0::<B>(&mut admin).await;
    proxy.kill_all();
    let tally = batch.await.unwrap();
    B::admin_run(&mut locker, "ROLLBACK").await;
    assert!(
        !tally.unknown.is_empty(),
        "rows in flight when the connection dropped must be outcome-unknown: {tally:?}"
    );
    // New connections through the proxy work: the pool recovered.
    check_and_recover::<B>(&url, &pool, &tally).await;
    B::close(&pool).await;
}
