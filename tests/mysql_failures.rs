//! Lost connections mid-batch and the server's packet limit, against a real
//! MariaDB: no hang, no duplicates, honest errors, and the pool recovers.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use batchpool::BatchConfig;
use batchpool::mysql::Pool;
use mysql_async::{Opts, OptsBuilder};

/// A statement whose rows take ~20 ms each to evaluate, so a batch is
/// reliably in flight when the test strikes.
const SLOW_INSERT: &str = "INSERT INTO victim (k, v) VALUES (?, CONCAT(?, LEFT(SLEEP(0.02), 0)))";

/// TCP only (mysql_async would otherwise move to the server's unix socket).
fn tcp_opts(url: &str) -> OptsBuilder {
    OptsBuilder::from_opts(Opts::from_url(url).expect("test url")).prefer_socket(false)
}

fn upstream(url: &str) -> SocketAddr {
    let opts = Opts::from_url(url).expect("test url");
    let host = match opts.ip_or_hostname() {
        "localhost" => "127.0.0.1".to_string(),
        h => h.to_string(),
    };
    format!("{host}:{}", opts.tcp_port())
        .parse()
        .expect("upstream address")
}

async fn setup(url: &str) {
    let pool = Pool::builder(url).max_size(1).build().unwrap();
    pool.execute(
        "CREATE TABLE victim (k INT PRIMARY KEY, v VARCHAR(50) NOT NULL)",
        (),
    )
    .await
    .unwrap();
    pool.close().await;
}

async fn present(url: &str) -> Vec<i32> {
    let pool = Pool::builder(url).max_size(1).build().unwrap();
    let keys = pool
        .query("SELECT k FROM victim ORDER BY k", ())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0).unwrap())
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
            (k, pool.execute(SLOW_INSERT, (k, v)).await)
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
async fn server_killing_the_connection_mid_batch() {
    let url = common::mysql_fresh_db().await;
    setup(&url).await;
    // A short timer gathers the callers into one statement of ~1 s.
    let pool = Pool::builder(&url)
        .max_size(1)
        .batching(BatchConfig::default().max_delay(Duration::from_millis(100)))
        .build()
        .unwrap();
    // Warm the connection and the shape so the batch goes out at once.
    pool.execute(SLOW_INSERT, (-1, "warm")).await.unwrap();

    let killer = {
        let url = url.clone();
        tokio::spawn(async move {
            let admin = Pool::builder(&url).max_size(1).build().unwrap();
            for _ in 0..400 {
                let ids: Vec<u64> = admin
                    .query(
                        "SELECT ID FROM information_schema.PROCESSLIST \
                         WHERE INFO LIKE 'INSERT INTO victim%' AND DB = DATABASE() \
                         AND ID <> CONNECTION_ID()",
                        (),
                    )
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0).unwrap())
                    .collect();
                if let Some(id) = ids.first() {
                    admin.execute(&format!("KILL {id}"), ()).await.unwrap();
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
        "killing the connection should fail someone: {tally:?}"
    );
    let mut present_keys = present(&url).await;
    present_keys.retain(|k| *k >= 0);
    check(&tally, &present_keys);
    // The pool throws the dead connection away and serves again.
    let out = pool.execute(SLOW_INSERT, (1000, "after")).await.unwrap();
    assert_eq!(out.rows_affected(), 1);
    let status = pool.status();
    assert_eq!(status.size, status.available, "{status:?}");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_cut_while_batch_in_flight_is_outcome_unknown() {
    let url = common::mysql_fresh_db().await;
    setup(&url).await;
    let proxy = common::proxy::Proxy::start(upstream(&url)).await;
    let via = tcp_opts(&url)
        .ip_or_hostname(proxy.addr().ip().to_string())
        .tcp_port(proxy.addr().port());
    let pool = Pool::from_opts(via).max_size(2).build().unwrap();
    pool.execute(SLOW_INSERT, (-1, "warm")).await.unwrap();

    let cutter = {
        let url = url.clone();
        tokio::spawn(async move {
            let admin = Pool::builder(&url).max_size(1).build().unwrap();
            for _ in 0..400 {
                let running = admin
                    .query(
                        "SELECT 1 FROM information_schema.PROCESSLIST \
                         WHERE INFO LIKE 'INSERT INTO victim%' AND DB = DATABASE()",
                        (),
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
    // Keep the server's answers from reaching the client, so the statement
    // now running is certainly in flight when the connections drop.
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
    let out = pool.execute(SLOW_INSERT, (1000, "after")).await.unwrap();
    assert_eq!(out.rows_affected(), 1);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_respect_max_allowed_packet() {
    const PACKET: usize = 65536;
    let server = common::MysqlServer::start(&[&format!("--max-allowed-packet={PACKET}")]);
    let pool = Pool::builder(&server.url()).max_size(2).build().unwrap();
    let packet: u64 = pool
        .query_one("SELECT @@max_allowed_packet", ())
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(packet as usize, PACKET);
    pool.execute(
        "CREATE TABLE blobs (id INT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL, body MEDIUMTEXT)",
        (),
    )
    .await
    .unwrap();
    let sql = "INSERT INTO blobs (k, body) VALUES (?, ?)";

    // Ten 20 KiB rows: 200 KiB in all, 3 rows would already be 60 KiB of
    // values. Sent as one statement the server would refuse the packet;
    // split by bytes, every row is written.
    let body = |k: usize, len: usize| -> String {
        let unit = format!("{k:04}-");
        unit.repeat(len / unit.len() + 1)[..len].to_string()
    };
    let rows: Vec<(i32, String)> = (0..10).map(|k| (k as i32, body(k, 20 << 10))).collect();
    let before = pool.stats();
    let results = pool.execute_many(sql, rows.clone()).await.unwrap();
    for r in &results {
        assert_eq!(r.as_ref().expect("row fits").rows_affected(), 1);
    }
    let after = pool.stats();
    let statements = after.statements - before.statements;
    assert!(
        (4..10).contains(&statements),
        "10 rows of 20 KiB under a 64 KiB packet: {statements} statements ({after:?})"
    );

    // Concurrent callers: one row larger than the packet fails alone,
    // a row just under the limit and the small ones go through.
    let mut tasks = tokio::task::JoinSet::new();
    for k in 100..120 {
        let pool = pool.clone();
        let len = match k {
            105 => PACKET + 100, // cannot fit any statement
            110 => 50 << 10,     // fits alone
            _ => 2 << 10,
        };
        let text = body(k, len);
        tasks.spawn(async move { (k, len, pool.execute(sql, (k as i32, text)).await) });
    }
    while let Some(r) = tasks.join_next().await {
        let (k, len, r) = r.unwrap();
        if k == 105 {
            let e = r.expect_err("over the packet limit");
            assert!(e.is_too_large(), "{e}");
            assert!(!e.is_retryable() && !e.is_outcome_unknown());
            assert!(e.to_string().contains("max_allowed_packet"), "{e}");
        } else {
            assert_eq!(
                r.unwrap_or_else(|e| panic!("row {k} ({len} B): {e}"))
                    .rows_affected(),
                1
            );
        }
    }
    // Everything stored intact.
    let stored: Vec<(i32, u64)> = pool
        .query("SELECT k, LENGTH(body) FROM blobs ORDER BY k", ())
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect();
    assert_eq!(stored.len(), 29);
    assert!(stored.iter().all(|(k, _)| *k != 105));
    assert!(stored.contains(&(110, 50 << 10)));
    for (k, row) in rows.iter().enumerate() {
        let got: String = pool
            .query_one("SELECT body FROM blobs WHERE k = ?", (k as i32,))
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert!(got == row.1, "row {k} changed");
    }
    let status = pool.status();
    assert_eq!(status.size, status.available, "{status:?}");
    pool.close().await;
}
