//! Lost connections mid-batch against a real PostgreSQL: no hang, no
//! duplicates, honest errors, and the pool recovers.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use batchpool::BatchConfig;
use batchpool::postgres::Pool;

/// A statement whose rows take ~20 ms each to evaluate, so a batch is
/// reliably in flight when the test strikes.
const SLOW_INSERT: &str =
    "INSERT INTO victim (k, v) VALUES ($1, $2 || (SELECT '' FROM pg_sleep(0.02)))";

fn parse(url: &str) -> tokio_postgres::Config {
    url.parse().expect("test url")
}

fn upstream(url: &str) -> SocketAddr {
    let config = parse(url);
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_string(),
    };
    let host = if host == "localhost" {
        "127.0.0.1".to_string()
    } else {
        host
    };
    format!("{host}:{port}").parse().expect("upstream address")
}

fn via(url: &str, proxy: SocketAddr) -> tokio_postgres::Config {
    let parsed = parse(url);
    let mut config = tokio_postgres::Config::new();
    config.host(proxy.ip().to_string()).port(proxy.port());
    if let Some(user) = parsed.get_user() {
        config.user(user);
    }
    if let Some(db) = parsed.get_dbname() {
        config.dbname(db);
    }
    config
}

async fn setup(url: &str) {
    let pool = Pool::builder(url).max_size(1).build().unwrap();
    pool.execute(
        "CREATE TABLE victim (k int PRIMARY KEY, v text NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    pool.close().await;
}

async fn present(url: &str) -> Vec<i32> {
    let pool = Pool::builder(url).max_size(1).build().unwrap();
    let keys = pool
        .query("SELECT k FROM victim ORDER BY k", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    pool.close().await;
    keys
}

#[derive(Default, Debug)]
struct Tally {
    ok: HashSet<i32>,
    unknown: HashSet<i32>,
    failed: HashSet<i32>,
}

async fn run_batch(pool: &Pool, keys: std::ops::Range<i32>) -> Tally {
    let mut tasks = tokio::task::JoinSet::new();
    for k in keys {
        let pool = pool.clone();
        tasks.spawn(async move {
            let v = format!("v{k}");
            (k, pool.execute(SLOW_INSERT, &[&k, &v]).await)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_terminating_the_backend_mid_batch() {
    let url = common::pg_fresh_db().await;
    setup(&url).await;
    let pool = Pool::builder(&url)
        .max_size(1)
        .batching(BatchConfig::default())
        .build()
        .unwrap();
    // Warm the connection and the shape so the batch goes out at once.
    pool.execute(SLOW_INSERT, &[&-1i32, &"warm"]).await.unwrap();

    let killer = {
        let url = url.clone();
        tokio::spawn(async move {
            let admin = Pool::builder(&url).max_size(1).build().unwrap();
            for _ in 0..400 {
                let killed = admin
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE query LIKE 'INSERT INTO victim%' AND state = 'active' \
                         AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .await
                    .unwrap();
                if !killed.is_empty() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            false
        })
    };
    let tally = run_batch(&pool, 0..60).await;
    assert!(killer.await.unwrap(), "never saw the batch running");
    assert!(
        !tally.unknown.is_empty() || !tally.failed.is_empty(),
        "terminating the backend should fail someone: {tally:?}"
    );
    let mut present_keys = present(&url).await;
    present_keys.retain(|k| *k >= 0);
    check(&tally, &present_keys);
    // The pool throws the dead connection away and serves again.
    let out = pool
        .execute(SLOW_INSERT, &[&1000i32, &"after"])
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 1);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_cut_while_batch_in_flight_is_outcome_unknown() {
    let url = common::pg_fresh_db().await;
    setup(&url).await;
    let proxy = common::proxy::Proxy::start(upstream(&url)).await;
    let pool = Pool::from_config(via(&url, proxy.addr()))
        .max_size(2)
        .build()
        .unwrap();
    pool.execute(SLOW_INSERT, &[&-1i32, &"warm"]).await.unwrap();

    let cutter = {
        let url = url.clone();
        tokio::spawn(async move {
            let admin = Pool::builder(&url).max_size(1).build().unwrap();
            for _ in 0..400 {
                let running = admin
                    .query(
                        "SELECT 1 FROM pg_stat_activity WHERE query LIKE 'INSERT INTO victim%' \
                         AND state = 'active'",
                        &[],
                    )
                    .await
                    .unwrap();
                if !running.is_empty() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            false
        })
    };
    let batch = {
        let pool = pool.clone();
        tokio::spawn(async move { run_batch(&pool, 0..40).await })
    };
    assert!(cutter.await.unwrap(), "never saw the batch running");
    // Keep the server's answers from reaching the client, so the statements
    // now running are certainly in flight when the connections drop.
    proxy.hold_replies(true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.kill_all();
    proxy.hold_replies(false);
    let tally = batch.await.unwrap();
    assert!(
        !tally.unknown.is_empty(),
        "rows in flight when the connection dropped must be outcome-unknown: {tally:?}"
    );
    // Let the server finish or abort the orphaned statement before reading.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut present_keys = present(&url).await;
    present_keys.retain(|k| *k >= 0);
    check(&tally, &present_keys);
    // New connections through the proxy work: the pool recovered.
    let out = pool
        .execute(SLOW_INSERT, &[&1000i32, &"after"])
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 1);
    pool.close().await;
}
