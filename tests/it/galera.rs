//! Writers on several nodes of a MariaDB Galera cluster: pools on two
//! nodes insert overlapping keys at once. Every caller must get an outcome
//! its single-row INSERT could have had on its own node (Ok, its own
//! duplicate-key error, or the retryable error of a lost certification),
//! every Ok row must be on every node, and no failed row anywhere.
//!
//! Galera checks a transaction's write set against the other nodes' only
//! when it commits ("certification"); the loser is rolled back and, in
//! autocommit, retried `wsrep_retry_autocommit` times, then fails with
//! 1213 (deadlock). The pool must never acknowledge a row through a path
//! the server cannot vouch for, and a coalesced statement that loses
//! certification must not fail callers whose rows did not conflict.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::common::{self, GaleraCluster, galera_cluster};
use batchpool::BatchConfig;
use batchpool::mysql::{Pool, PoolBuilder};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

/// Rows each writer inserts.
const ROWS: i64 = 3_000;

/// Every fifth key is written by both writers (20 %).
const SHARED_EVERY: i64 = 5;

/// Rounds per test: the lost acknowledgements this guards against came in
/// some rounds only.
const ROUNDS: usize = 3;

/// The key writer `w` (0 or 1) inserts as its `i`-th row.
fn key(w: usize, i: i64) -> i64 {
    if w == 0 || i % SHARED_EVERY == 0 {
        i
    } else {
        ROWS + i
    }
}

fn shared(k: i64) -> bool {
    k < ROWS && k % SHARED_EVERY == 0
}

/// What a caller was told.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Told {
    Ok(u64),
    /// A server error: its code and message.
    Server(u16, String),
    /// Any other error.
    Other(String),
}

async fn connect(url: &str) -> Conn {
    Conn::new(Opts::from_url(url).expect("url"))
        .await
        .expect("connect")
}

/// The rows of `t` on the node at `url`, read after the node has applied
/// every write set it had received (`wsrep_sync_wait`).
async fn rows_on(url: &str, t: &str) -> BTreeMap<i64, String> {
    let mut conn = connect(url).await;
    conn.query_drop("SET SESSION wsrep_sync_wait = 1")
        .await
        .expect("wsrep_sync_wait");
    let rows: Vec<(i64, String)> = conn
        .query(format!("SELECT k, w FROM {t}"))
        .await
        .expect("read back");
    let _ = conn.disconnect().await;
    rows.into_iter().collect()
}

/// What one round gave, and what in it breaks the promise.
/// Callers on uncontested keys a round may see fail with a retryable
/// certification error. A lone single-row INSERT can lose too: a node's
/// applier brute-force aborts a local transaction that holds a lock it
/// needs (a gap lock next to another writer's key), whatever the keys. Seen:
/// 1 in a round. A statement failing as a whole instead fails hundreds of
/// innocent callers per round (1,415 to 1,842 when it was tried), far above
/// this bound.
const COLLATERAL_BOUND: usize = 24;

#[derive(Debug, Default)]
struct Round {
    ok: usize,
    duplicate: usize,
    certification: usize,
    /// Callers told Ok whose row (with their writer's mark) is missing on
    /// some node.
    lost: usize,
    /// Rows on some node that no caller was told Ok for.
    phantom: usize,
    /// Callers whose key no other writer touched, and yet failed (each
    /// with a retryable certification error: anything else is `wrong`).
    collateral: usize,
    /// Statements sent as bulk commands.
    bulk: u64,
    /// Transactions on the writers' nodes that lost to another node's
    /// write sets (certification failures and brute-force aborts), for the
    /// log only: the nodes count them for every client, so tests running
    /// at the same time add theirs.
    lost_to_the_cluster: u64,
    /// Outcomes no single-row INSERT could have had.
    wrong: Vec<String>,
    rows_per_node: Vec<usize>,
}

impl Round {
    fn clean(&self) -> bool {
        self.lost == 0
            && self.phantom == 0
            && self.collateral <= COLLATERAL_BOUND
            && self.wrong.is_empty()
            && self.bulk == 0
    }
}

/// Two pools, on nodes 1 and 2, each insert [`ROWS`] single rows at once,
/// 20 % of the keys written by both; then every node is read back.
async fn round(urls: &[String], t: &str, builder: &impl Fn(&str) -> PoolBuilder) -> Round {
    let mut admin = connect(&urls[0]).await;
    admin
        .query_drop(format!(
            "CREATE TABLE {t} (k INT PRIMARY KEY, w VARCHAR(8) NOT NULL) ENGINE=InnoDB"
        ))
        .await
        .expect("create table");
    let _ = admin.disconnect().await;
    let pools: Vec<Arc<Pool>> = urls[..2]
        .iter()
        .map(|u| Arc::new(builder(u).build().expect("build pool")))
        .collect();
    // Every pool's connections open (and the statement is learned) before
    // the writers start, so they overlap from the first row.
    // Taking a connection here failed once in about ten runs, for a reason
    // not yet known (the error was not kept): the warm-up is not what is
    // under test, so it tries again for a while and logs each error.
    for pool in &pools {
        let patience = std::time::Instant::now();
        loop {
            match pool.get().await {
                Ok(mut conn) => {
                    let _: Vec<i64> = conn.query("SELECT 1").await.expect("SELECT 1");
                    break;
                }
                Err(e) if patience.elapsed() < std::time::Duration::from_secs(20) => {
                    eprintln!("warm-up: {e}; trying again");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(e) => panic!("warm up: {e}"),
            }
        }
    }
    let before = lost_to_the_cluster(&urls[0]).await + lost_to_the_cluster(&urls[1]).await;
    let sql = format!("INSERT INTO {t} (k, w) VALUES (?, ?)");
    let mut tasks = Vec::with_capacity(2 * ROWS as usize);
    for i in 0..ROWS {
        for (w, pool) in pools.iter().enumerate() {
            let pool = Arc::clone(pool);
            let sql = sql.clone();
            let k = key(w, i);
            tasks.push(tokio::spawn(async move {
                let told = match pool.execute(&sql, (k, format!("w{w}"))).await {
                    Ok(out) => Told::Ok(out.rows_affected()),
                    Err(e) => match e.as_mysql_error() {
                        Some(s) => Told::Server(s.code, s.message.clone()),
                        None => Told::Other(e.to_string()),
                    },
                };
                (w, k, told)
            }));
        }
    }
    let mut told = Vec::with_capacity(tasks.len());
    for task in tasks {
        told.push(task.await.expect("writer task"));
    }
    let bulk: u64 = pools.iter().map(|p| p.stats().bulk_statements).sum();
    for pool in &pools {
        pool.close().await;
    }

    let after = lost_to_the_cluster(&urls[0]).await + lost_to_the_cluster(&urls[1]).await;
    let mut r = Round {
        bulk,
        lost_to_the_cluster: after - before,
        ..Round::default()
    };
    let mut nodes = Vec::new();
    for url in urls {
        let rows = rows_on(url, t).await;
        r.rows_per_node.push(rows.len());
        nodes.push(rows);
    }
    let mut acknowledged: BTreeSet<(i64, String)> = BTreeSet::new();
    for (w, k, told) in &told {
        let mark = format!("w{w}");
        match told {
            Told::Ok(1) => {
                r.ok += 1;
                acknowledged.insert((*k, mark.clone()));
                if nodes.iter().any(|n| n.get(k) != Some(&mark)) {
                    r.lost += 1;
                }
            }
            Told::Server(1062, _) if shared(*k) => r.duplicate += 1,
            // Lost certification, after the server's own retries: nothing
            // of it committed, and running it again may succeed.
            Told::Server(1213, _) => r.certification += 1,
            Told::Server(_, m) if m.to_ascii_lowercase().contains("wsrep") => r.certification += 1,
            other => r.wrong.push(format!("key {k} writer {w}: {other:?}")),
        }
        if !shared(*k) && !matches!(told, Told::Ok(1)) {
            r.collateral += 1;
        }
    }
    for n in &nodes {
        r.phantom += n
            .iter()
            .filter(|(k, w)| !acknowledged.contains(&(**k, (*w).clone())))
            .count();
    }
    r.wrong.truncate(10);
    r
}

/// Runs [`ROUNDS`] rounds with pools from `builder`, and checks them all.
async fn rounds(name: &str, builder: impl Fn(&str) -> PoolBuilder) {
    let cluster = galera_cluster();
    let urls = cluster.fresh_db().await;
    let mut seen = Vec::new();
    for n in 0..ROUNDS {
        let r = round(&urls, &format!("t{n}"), &builder).await;
        eprintln!(
            "{name} round {n}: {} transactions lost to the other node; {r:?}",
            r.lost_to_the_cluster
        );
        seen.push(r);
    }
    let bad: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.clean())
        .map(|(n, r)| format!("round {n}: {r:?}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{name}: callers told what their own INSERT could not have been told:\n{}",
        bad.join("\n")
    );
}

fn pool(url: &str) -> PoolBuilder {
    Pool::builder(url)
        .max_size(4)
        .batching(BatchConfig::default())
}

/// The defaults: on Galera, no row goes out as a bulk command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_on_two_nodes_with_the_defaults() {
    rounds("defaults", pool).await;
}

/// The multi-row INSERT path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_on_two_nodes_with_multi_row_inserts() {
    rounds("multi-row", |u| pool(u).bulk_threshold(None)).await;
}

/// Sessions that do not let the server retry an autocommit statement that
/// lost certification (`wsrep_retry_autocommit = 0`, a user's setting the
/// pool keeps): such a statement fails with 1213. A coalesced statement
/// that loses certification must still leave every caller whose key no
/// other writer touched with its Ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_on_two_nodes_without_autocommit_retries() {
    rounds("no retries", |u| {
        pool(u).post_create(|conn| {
            Box::pin(async move {
                conn.query_drop("SET SESSION wsrep_retry_autocommit = 0")
                    .await?;
                Ok(())
            })
        })
    })
    .await;
}

/// What the pool builds on: a multi-row INSERT that loses certification
/// (1213, no autocommit retry) committed none of its rows, on any node.
/// Two plain connections on two nodes each insert 1,000 rows at once, a
/// fifth of the keys shared, over several rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_row_insert_that_loses_certification_leaves_nothing() {
    let urls = galera_cluster().fresh_db().await;
    let mut conns = Vec::new();
    for url in &urls[..2] {
        let mut c = connect(url).await;
        c.query_drop("SET SESSION wsrep_retry_autocommit = 0")
            .await
            .unwrap();
        conns.push(c);
    }
    let n = 1_000i64;
    let mut lost_certification = 0;
    for round in 0..20 {
        let t = format!("m{round}");
        conns[0]
            .query_drop(format!(
                "CREATE TABLE {t} (k INT PRIMARY KEY, w VARCHAR(8) NOT NULL) ENGINE=InnoDB"
            ))
            .await
            .unwrap();
        // The table exists on node 2 before its writer starts.
        conns[1]
            .query_drop("SET SESSION wsrep_sync_wait = 1")
            .await
            .unwrap();
        conns[1]
            .query_drop(format!("SELECT 1 FROM {t}"))
            .await
            .unwrap();
        conns[1]
            .query_drop("SET SESSION wsrep_sync_wait = 0")
            .await
            .unwrap();
        let mut handles = Vec::new();
        for (w, mut conn) in std::mem::take(&mut conns).into_iter().enumerate() {
            let t = t.clone();
            handles.push(tokio::spawn(async move {
                let values: Vec<String> = (0..n)
                    .map(|i| {
                        let k = if w == 0 || i % SHARED_EVERY == 0 {
                            i
                        } else {
                            n + i
                        };
                        format!("({k}, 'w{w}')")
                    })
                    .collect();
                let r = conn
                    .query_drop(format!(
                        "INSERT INTO {t} (k, w) VALUES {}",
                        values.join(", ")
                    ))
                    .await;
                let r = match r {
                    Ok(()) => Ok(conn.affected_rows()),
                    Err(mysql_async::Error::Server(e)) => Err(e.code),
                    Err(e) => panic!("writer {w}: {e}"),
                };
                (conn, r)
            }));
        }
        let mut results = Vec::new();
        for h in handles {
            let (conn, r) = h.await.unwrap();
            conns.push(conn);
            results.push(r);
        }
        lost_certification += results.iter().filter(|r| **r == Err(1213)).count();
        for url in &urls {
            let rows = rows_on(url, &t).await;
            for (w, r) in results.iter().enumerate() {
                let mark = format!("w{w}");
                let mine = rows.values().filter(|v| **v == mark).count() as i64;
                match r {
                    Ok(affected) => {
                        assert_eq!(*affected, n as u64, "writer {w} round {round}");
                        assert_eq!(mine, n, "writer {w} round {round}: Ok, rows on {url}");
                    }
                    Err(code) => {
                        assert!(
                            matches!(code, 1062 | 1213),
                            "writer {w} round {round}: error {code}"
                        );
                        assert_eq!(
                            mine, 0,
                            "writer {w} round {round}: failed ({code}), yet rows"
                        );
                    }
                }
            }
        }
    }
    eprintln!("statements that lost certification: {lost_certification}");
}

/// `wsrep_local_cert_failures + wsrep_local_bf_aborts` of the node at
/// `url`: local transactions that lost to another node's write set.
async fn lost_to_the_cluster(url: &str) -> u64 {
    let mut conn = connect(url).await;
    let rows: Vec<(String, u64)> = conn
        .query(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')",
        )
        .await
        .expect("wsrep status");
    let _ = conn.disconnect().await;
    rows.iter().map(|(_, v)| v).sum()
}

/// Callers per pool in [`per_row_ids_are_each_rows_own`].
const ID_CALLERS: i64 = 300;

/// Pools on nodes 1 and 2 insert [`ID_CALLERS`] rows each at once into
/// `t`, after `meanwhile` ran with their connections open; then each
/// caller's `last_insert_id()` is checked against its row's id on every
/// node. Returns how many callers were given an id, and the rows per
/// statement.
async fn ids_round(urls: &[String], t: &str, meanwhile: &[(usize, &str)]) -> (usize, f64) {
    common::mysql_exec(
        &urls[0],
        &format!(
            "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, caller INT NOT NULL UNIQUE) \
             ENGINE=InnoDB"
        ),
    )
    .await;
    let pools: Vec<Arc<Pool>> = urls[..2]
        .iter()
        .map(|u| Arc::new(pool(u).build().expect("build pool")))
        .collect();
    let sql = format!("INSERT INTO {t} (caller) VALUES (?)");
    // Every connection opened and the text learned before the writers.
    for pool in &pools {
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(pool.get().await.expect("warm up"));
        }
        drop(held);
        pool.explain(&sql).await.expect("explain");
    }
    for (node, sql) in meanwhile {
        common::mysql_exec(&urls[*node], sql).await;
    }
    let mut tasks = Vec::new();
    for i in 0..ID_CALLERS {
        for (w, pool) in pools.iter().enumerate() {
            let pool = Arc::clone(pool);
            let sql = sql.clone();
            let caller = (w as i64) * ID_CALLERS + i;
            tasks.push(tokio::spawn(async move {
                let out = pool.execute(&sql, (caller,)).await;
                (caller, out.map(|o| o.last_insert_id()))
            }));
        }
    }
    let mut told = Vec::new();
    for task in tasks {
        told.push(task.await.expect("caller task"));
    }
    let stats: Vec<_> = pools.iter().map(|p| p.stats()).collect();
    for pool in &pools {
        pool.close().await;
    }
    let mut nodes = Vec::new();
    for url in urls {
        let mut conn = connect(url).await;
        conn.query_drop("SET SESSION wsrep_sync_wait = 1")
            .await
            .expect("wsrep_sync_wait");
        let rows: Vec<(i64, u64)> = conn
            .query(format!("SELECT caller, id FROM {t}"))
            .await
            .expect("read back");
        let _ = conn.disconnect().await;
        nodes.push(rows.into_iter().collect::<BTreeMap<i64, u64>>());
    }
    let mut given = 0;
    let mut wrong = Vec::new();
    for (caller, out) in &told {
        match out {
            Ok(id) => {
                for (n, rows) in nodes.iter().enumerate() {
                    let stored = rows.get(caller).copied();
                    if stored.is_none() || id.is_some_and(|id| Some(id) != stored) {
                        wrong.push(format!(
                            "caller {caller}: told {id:?}, node {n} has {stored:?}"
                        ));
                    }
                }
                given += usize::from(id.is_some());
            }
            Err(e) => wrong.push(format!("caller {caller}: {e}")),
        }
    }
    wrong.truncate(10);
    assert!(wrong.is_empty(), "{t}: {}", wrong.join("\n"));
    let rows: u64 = stats.iter().map(|s| s.rows).sum();
    let statements: u64 = stats.iter().map(|s| s.statements).sum();
    (given, rows as f64 / statements.max(1) as f64)
}

/// Per-row ids of coalesced rows on Galera (`innodb_autoinc_lock_mode=2`).
/// With `wsrep_auto_increment_control` ON the node rewrites every session's
/// increment from the cluster's membership before each command: here the
/// global increment changes (as when a node joins or leaves) while the
/// pools' connections are open, and no caller may be given an id that is
/// not its row's. With it OFF (each node its own offset, a common
/// increment), every caller gets its row's id. The global settings change
/// on a cluster of this test's own, so no other test sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_row_ids_are_each_rows_own() {
    let cluster = GaleraCluster::start("");
    let urls = cluster.fresh_db().await;

    // The cluster's own stride (3), then 7 under the open connections.
    let changed = [
        (0, "SET GLOBAL auto_increment_increment = 7"),
        (1, "SET GLOBAL auto_increment_increment = 7"),
    ];
    let controlled = ids_round(&urls, "ids_controlled", &changed).await;
    // Back to the cluster's values.
    for url in &urls {
        common::mysql_exec(url, "SET GLOBAL wsrep_auto_increment_control = ON").await;
    }

    for (i, url) in urls.iter().enumerate() {
        common::mysql_exec(
            url,
            &format!(
                "SET GLOBAL wsrep_auto_increment_control = OFF, \
                 auto_increment_increment = {}, auto_increment_offset = {}",
                urls.len(),
                i + 1
            ),
        )
        .await;
    }
    let own = ids_round(&urls, "ids_own", &[]).await;
    for url in &urls {
        common::mysql_exec(url, "SET GLOBAL wsrep_auto_increment_control = ON").await;
    }
    eprintln!(
        "ids given with the cluster's control: {} (rows per statement {:.1}); \
         with the sessions' own stride: {} (rows per statement {:.1})",
        controlled.0, controlled.1, own.0, own.1
    );
    assert!(
        controlled.1 > 1.5 && own.1 > 1.5,
        "rows were coalesced: {controlled:?} {own:?}"
    );
    assert_eq!(
        own.0,
        2 * ID_CALLERS as usize,
        "every caller given its id when the stride is the session's own"
    );
}
