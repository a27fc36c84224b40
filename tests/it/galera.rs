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
//! certification must not fail callers whose rows did not conflict. Pools
//! on two nodes also increment hot counters by key (coalesced keyed
//! updates, each flush one transaction): each counter ends at exactly the
//! increments acknowledged for it, on every node.

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
    /// Rows affected, and `last_insert_id()`.
    Ok(u64, Option<u64>),
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

/// The key of every row of `t` on the node at `url`, by its id, read as
/// [`rows_on`] reads.
async fn keys_by_id(url: &str, t: &str) -> BTreeMap<u64, i64> {
    let mut conn = connect(url).await;
    conn.query_drop("SET SESSION wsrep_sync_wait = 1")
        .await
        .expect("wsrep_sync_wait");
    let rows: Vec<(u64, i64)> = conn
        .query(format!("SELECT id, k FROM {t}"))
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
    /// Outcomes no single-row INSERT could have had (an id that is not
    /// its row's on some node among them).
    wrong: Vec<String>,
    /// Callers told Ok without an id, where the table has an
    /// auto-increment column.
    no_id: usize,
    rows_per_node: Vec<usize>,
}

impl Round {
    fn clean(&self) -> bool {
        self.lost == 0
            && self.phantom == 0
            && self.collateral <= COLLATERAL_BOUND
            && self.wrong.is_empty()
            && self.bulk == 0
            && self.no_id == 0
    }
}

/// Two pools, on nodes 1 and 2, each insert [`ROWS`] single rows at once,
/// 20 % of the keys written by both; then every node is read back. With
/// `ids`, the table has an auto-increment `id` as well, and every caller
/// told Ok must be given the id of its row on every node.
async fn round(
    urls: &[String],
    t: &str,
    builder: &impl Fn(&str) -> PoolBuilder,
    ids: bool,
) -> Round {
    let mut admin = connect(&urls[0]).await;
    let ddl = if ids {
        format!(
            "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL UNIQUE, \
             w VARCHAR(8) NOT NULL) ENGINE=InnoDB"
        )
    } else {
        format!("CREATE TABLE {t} (k INT PRIMARY KEY, w VARCHAR(8) NOT NULL) ENGINE=InnoDB")
    };
    admin.query_drop(ddl).await.expect("create table");
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
                    Ok(out) => Told::Ok(out.rows_affected(), out.last_insert_id()),
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
    let mut node_ids = Vec::new();
    for url in urls {
        let rows = rows_on(url, t).await;
        r.rows_per_node.push(rows.len());
        nodes.push(rows);
        if ids {
            node_ids.push(keys_by_id(url, t).await);
        }
    }
    let mut acknowledged: BTreeSet<(i64, String)> = BTreeSet::new();
    for (w, k, told) in &told {
        let mark = format!("w{w}");
        match told {
            Told::Ok(1, id) => {
                r.ok += 1;
                acknowledged.insert((*k, mark.clone()));
                if nodes.iter().any(|n| n.get(k) != Some(&mark)) {
                    r.lost += 1;
                }
                match id {
                    None if ids => r.no_id += 1,
                    Some(id) if node_ids.iter().any(|n| n.get(id) != Some(k)) => r
                        .wrong
                        .push(format!("key {k} writer {w}: id {id} is not its row's")),
                    _ => {}
                }
            }
            Told::Server(1062, _) if shared(*k) => r.duplicate += 1,
            // Lost certification, after the server's own retries: nothing
            // of it committed, and running it again may succeed.
            Told::Server(1213, _) => r.certification += 1,
            Told::Server(_, m) if m.to_ascii_lowercase().contains("wsrep") => r.certification += 1,
            other => r.wrong.push(format!("key {k} writer {w}: {other:?}")),
        }
        if !shared(*k) && !matches!(told, Told::Ok(1, _)) {
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

/// Runs [`ROUNDS`] rounds with pools from `builder` (tables with an
/// auto-increment `id` with `ids`), and checks them all.
async fn rounds(name: &str, ids: bool, builder: impl Fn(&str) -> PoolBuilder) {
    let cluster = galera_cluster();
    let urls = cluster.fresh_db().await;
    let mut seen = Vec::new();
    for n in 0..ROUNDS {
        let r = round(&urls, &format!("t{n}"), &builder, ids).await;
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
    rounds("defaults", false, pool).await;
}

/// The multi-row INSERT path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_on_two_nodes_with_multi_row_inserts() {
    rounds("multi-row", false, |u| pool(u).bulk_threshold(None)).await;
}

/// Sessions that do not let the server retry an autocommit statement that
/// lost certification (`wsrep_retry_autocommit = 0`, a user's setting the
/// pool keeps): such a statement fails with 1213. A coalesced statement
/// that loses certification must still leave every caller whose key no
/// other writer touched with its Ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_on_two_nodes_without_autocommit_retries() {
    rounds("no retries", false, |u| {
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

/// Tables with an auto-increment id (the cluster's auto-increment control
/// ON): the multi-row statements carry a `RETURNING` of it, and statements
/// losing certification are isolated as before; every caller told Ok is
/// given the id of its own row on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_on_two_nodes_with_ids() {
    rounds("ids", true, pool).await;
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
/// pools' connections are open, then a node really leaves and rejoins
/// while two pools write through the other two; every caller told Ok is
/// given its row's id, read back from the statement's `RETURNING` (while
/// the strides change, a few may lose certification, as their single-row
/// INSERTs could). With it OFF (each
/// node its own offset, a common increment), every caller gets its row's
/// id, computed from the session's own stride. The global settings change
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
    let membership = ids_through_a_membership_change(&cluster, &urls, "ids_membership").await;

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
        "ids given with the cluster's control: {} (rows per statement {:.1}); through a \
         membership change: {} of {} told Ok, {} failed (rows per statement \
         {:.1}); with the sessions' own stride: {} (rows per statement {:.1})",
        controlled.0,
        controlled.1,
        membership.0,
        membership.1,
        membership.2,
        membership.3,
        own.0,
        own.1
    );
    assert!(
        controlled.1 > 1.5 && membership.3 > 1.5 && own.1 > 1.5,
        "rows were coalesced: {controlled:?} {membership:?} {own:?}"
    );
    for (what, given) in [
        ("the cluster's control", controlled.0),
        ("the sessions' own stride", own.0),
    ] {
        assert_eq!(
            given,
            2 * ID_CALLERS as usize,
            "every caller given its id with {what}"
        );
    }
    assert_eq!(
        membership.0, membership.1,
        "every caller told Ok given its id through a membership change"
    );
}

/// `@@GLOBAL.auto_increment_increment` of the node at `url`.
async fn increment_on(url: &str) -> u64 {
    let mut conn = connect(url).await;
    let step: Option<u64> = conn
        .query_first("SELECT @@GLOBAL.auto_increment_increment")
        .await
        .expect("auto_increment_increment");
    let _ = conn.disconnect().await;
    step.expect("a value")
}

/// Writer tasks per pool in [`ids_through_a_membership_change`].
const MEMBERSHIP_WRITERS: usize = 16;

/// Rows acknowledged in each phase of [`ids_through_a_membership_change`]:
/// before node 3 leaves, while it is away, after it rejoined.
const MEMBERSHIP_PHASE_ROWS: usize = 600;

/// Pools on nodes 1 and 2 (the cluster's auto-increment control ON) insert
/// rows with fresh callers from [`MEMBERSHIP_WRITERS`] tasks each, while
/// node 3 is cut off from the cluster (`gmcast.isolate=1`: the others'
/// sessions step ids by 2 from their next command) and let back (by 3
/// again), each phase until [`MEMBERSHIP_PHASE_ROWS`] more are
/// acknowledged; then every caller's `last_insert_id()` is checked against
/// its row on every node. Returns callers given an id, callers told Ok,
/// callers that failed, and rows per statement.
async fn ids_through_a_membership_change(
    cluster: &GaleraCluster,
    urls: &[String],
    t: &str,
) -> (usize, usize, usize, f64) {
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
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
    for pool in &pools {
        pool.explain(&sql).await.expect("explain");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicI64::new(0));
    let oks = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for pool in &pools {
        for _ in 0..MEMBERSHIP_WRITERS {
            let (pool, stop, next, oks, sql) = (
                Arc::clone(pool),
                Arc::clone(&stop),
                Arc::clone(&next),
                Arc::clone(&oks),
                sql.clone(),
            );
            writers.push(tokio::spawn(async move {
                let mut told = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let caller = next.fetch_add(1, Ordering::Relaxed);
                    let out = pool.execute(&sql, (caller,)).await;
                    let failed = out.is_err();
                    if !failed {
                        oks.fetch_add(1, Ordering::Relaxed);
                    }
                    told.push((caller, out.map(|o| o.last_insert_id())));
                    if failed {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
                told
            }));
        }
    }
    let patience = std::time::Duration::from_secs(120);
    let phase = |what: &'static str| {
        let oks = Arc::clone(&oks);
        async move {
            let from = oks.load(Ordering::Relaxed);
            let started = std::time::Instant::now();
            while oks.load(Ordering::Relaxed) < from + MEMBERSHIP_PHASE_ROWS {
                assert!(started.elapsed() < patience, "no load {what}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    phase("before node 3 leaves").await;
    crate::galera_failover::isolate(urls, 2).await;
    // The stride the writers' nodes give their sessions now.
    let away = increment_on(&urls[0]).await;
    phase("while node 3 is away").await;
    common::mysql_exec(
        &urls[2],
        "SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'",
    )
    .await;
    tokio::task::block_in_place(|| cluster.wait_formed());
    let back = increment_on(&urls[0]).await;
    phase("after node 3 rejoined").await;
    stop.store(true, Ordering::Relaxed);
    let mut told = Vec::new();
    for w in writers {
        told.extend(w.await.expect("writer task"));
    }
    let stats: Vec<_> = pools.iter().map(|p| p.stats()).collect();
    for pool in &pools {
        pool.close().await;
    }
    assert_eq!(
        (away, back),
        (2, 3),
        "the writers' stride while node 3 was away, and after"
    );
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
    let (mut given, mut ok, mut lost, mut unknown) = (0, 0, 0, 0);
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
                ok += 1;
                given += usize::from(id.is_some());
            }
            // Lost certification, as the caller's single-row INSERT can
            // while the membership changes (the two nodes' sessions may
            // generate the same id until both have the new stride), or no
            // connection: nothing of it may be stored.
            Err(e) if e.as_mysql_error().is_some_and(|s| s.code == 1213) || e.is_connect() => {
                lost += 1;
                if nodes.iter().any(|rows| rows.contains_key(caller)) {
                    wrong.push(format!("caller {caller}: {e}, yet its row is stored"));
                }
            }
            // A loaded machine can make the writers' nodes lose the primary
            // component for a moment (1047): the row may or may not be
            // stored, and the caller is told so.
            Err(e) if e.is_outcome_unknown() => unknown += 1,
            Err(e) => wrong.push(format!("caller {caller}: {e}")),
        }
    }
    wrong.truncate(10);
    assert!(wrong.is_empty(), "{t}: {}", wrong.join("\n"));
    eprintln!(
        "{t}: {lost} callers lost certification or found no node ready, {unknown} were told \
         the outcome is unknown"
    );
    let rows: u64 = stats.iter().map(|s| s.rows).sum();
    let statements: u64 = stats.iter().map(|s| s.statements).sum();
    (given, ok, lost, rows as f64 / statements.max(1) as f64)
}

/// The server behaviour per-row ids on a Galera node are read from, checked
/// with the plain driver on a node: a single-row INSERT reports the value
/// it stored in the auto-increment column (or none), and a multi-row
/// `INSERT ... RETURNING` returns its rows in VALUES order, also after a
/// failing row was taken out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_and_returning_order_on_a_node() {
    let urls = galera_cluster().fresh_db().await;
    // Node 1, where the database was made: another node may not have it
    // yet.
    crate::mysql_coalesce::single_row_ids_are_the_stored_values(&urls[0]).await;
    crate::mysql_coalesce::multi_row_returning_comes_back_in_values_order(&urls[0]).await;
}

/// One statement text of [`per_row_ids_match_the_plain_driver`]: its
/// table (every one has `tag INT NOT NULL UNIQUE`, and most an
/// auto-increment `id`), rows already there, and each caller's values.
struct IdCase {
    what: &'static str,
    /// `CREATE TABLE {t} ...`.
    ddl: &'static str,
    /// Run once the table exists (`{t}` is its name).
    pre: &'static str,
    sql: &'static str,
    callers: Vec<Vec<mysql_async::Value>>,
    /// Sessions keep a 0 given for the auto-increment column
    /// (`NO_AUTO_VALUE_ON_ZERO`).
    zero_kept: bool,
}

/// What one caller was told: its id (`last_insert_id`), its own RETURNING
/// row (`id, tag`), or its error code.
#[derive(Debug, Clone, PartialEq, Eq)]
enum IdTold {
    Ok(Option<u64>, Option<(i128, i64)>),
    Err(u16),
}

fn id_told(r: Result<(Option<u64>, Vec<mysql_async::Row>), mysql_async::Error>) -> IdTold {
    match r {
        Ok((id, rows)) => IdTold::Ok(
            id,
            rows.first().map(|row| {
                let id: String = row.get(0).expect("returned id");
                let tag: i64 = row.get(1).expect("returned tag");
                (id.parse().expect("an integer id"), tag)
            }),
        ),
        Err(mysql_async::Error::Server(s)) => IdTold::Err(s.code),
        Err(e) => panic!("not a server error: {e}"),
    }
}

/// `tag` of every row of `t` on the node at `url`, by id (as stored: a
/// negative id stays negative), once the node has applied every write set
/// it received.
async fn tags_by_id(url: &str, t: &str) -> BTreeMap<i128, i64> {
    let mut conn = connect(url).await;
    conn.query_drop("SET SESSION wsrep_sync_wait = 1")
        .await
        .expect("wsrep_sync_wait");
    let rows: Vec<(String, i64)> = conn
        .query(format!("SELECT CAST(id AS CHAR), tag FROM {t}"))
        .await
        .expect("read back");
    let _ = conn.disconnect().await;
    rows.into_iter()
        .map(|(id, tag)| (id.parse().expect("an integer id"), tag))
        .collect()
}

/// The row `id` (as `last_insert_id` reports it: a negative stored id is
/// carried as its unsigned 64-bit pattern) names in `rows`.
fn tag_of(rows: &BTreeMap<i128, i64>, id: u64) -> Option<i64> {
    rows.get(&i128::from(id))
        .or_else(|| rows.get(&i128::from(id as i64)))
        .copied()
}

/// Every caller of `callers` runs `sql` through `pool`, all queued behind
/// `holds` connections taken from it (every one of the pool's), so their
/// rows go out as multi-row statements; their outcomes, in caller order.
async fn held_burst(
    pool: &Pool,
    holds: usize,
    sql: &str,
    callers: &[Vec<mysql_async::Value>],
) -> Vec<Result<batchpool::mysql::Outcome, batchpool::Error>> {
    let explain = pool.explain(sql).await.expect("explain");
    assert!(explain.is_coalesced(), "{sql}: {explain}");
    let mut held = Vec::new();
    for _ in 0..holds {
        held.push(pool.get().await.expect("hold a connection"));
    }
    let mut tasks = Vec::new();
    for values in callers {
        let (pool, sql, values) = (pool.clone(), sql.to_string(), values.clone());
        tasks.push(tokio::spawn(
            async move { pool.execute(&sql, values).await },
        ));
    }
    // Every caller queued (or, on a machine too loaded for that, whatever
    // queued in 10 s: only how rows are grouped depends on it).
    let patience = std::time::Instant::now();
    while (pool.stats().queued as usize) < callers.len()
        && patience.elapsed() < std::time::Duration::from_secs(10)
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    drop(held);
    let mut outs = Vec::new();
    for task in tasks {
        outs.push(task.await.expect("caller task"));
    }
    outs
}

/// Options for a case's sessions, pool and plain alike.
fn id_case_opts(url: &str, case: &IdCase) -> mysql_async::OptsBuilder {
    let opts = mysql_async::OptsBuilder::from_opts(Opts::from_url(url).expect("url"));
    if case.zero_kept {
        opts.setup(vec![
            "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')",
        ])
    } else {
        opts
    }
}

/// Runs `case` through a pool on the node at `urls[0]` (every caller queued
/// behind held connections, so the rows go out as multi-row statements)
/// and, one by one, through the plain driver into a twin table; then
/// checks every caller's outcome against its twin's and its id against its
/// row on every node. Returns (callers given an id, rows per statement).
async fn id_case(urls: &[String], case: &IdCase, n: usize) -> (usize, f64) {
    let (ta, tb) = (format!("ida{n}"), format!("idb{n}"));
    let mut admin = connect(&urls[0]).await;
    for t in [&ta, &tb] {
        for sql in [case.ddl, case.pre] {
            admin
                .query_drop(sql.replace("{t}", t))
                .await
                .unwrap_or_else(|e| panic!("{}: {sql}: {e}", case.what));
        }
    }
    let _ = admin.disconnect().await;

    let pool = Pool::from_opts(id_case_opts(&urls[0], case))
        .max_size(3)
        .build()
        .expect("build pool");
    let sql_a = case.sql.replace("{t}", &ta);
    let pooled: Vec<IdTold> = held_burst(&pool, 3, &sql_a, &case.callers)
        .await
        .into_iter()
        .map(|out| match out {
            Ok(out) => IdTold::Ok(
                out.last_insert_id(),
                out.returned().map(|row| {
                    let id: String = row.get(0).expect("returned id");
                    let tag: i64 = row.get(1).expect("returned tag");
                    (id.parse().expect("an integer id"), tag)
                }),
            ),
            Err(e) => IdTold::Err(
                e.as_mysql_error()
                    .unwrap_or_else(|| panic!("not a server error: {e}"))
                    .code,
            ),
        })
        .collect();
    let stats = pool.stats();
    pool.close().await;

    let mut plain = Conn::new(id_case_opts(&urls[0], case))
        .await
        .expect("plain connection");
    let sql_b = case.sql.replace("{t}", &tb);
    let mut alone = Vec::new();
    for values in &case.callers {
        let r = plain
            .exec::<mysql_async::Row, _, _>(&sql_b, values.clone())
            .await;
        let id = plain.last_insert_id();
        alone.push(id_told(r.map(|rows| (id, rows))));
    }
    let _ = plain.disconnect().await;

    let has_id = case.ddl.contains("AUTO_INCREMENT");
    let here_b = if has_id {
        tags_by_id(&urls[0], &tb).await
    } else {
        BTreeMap::new()
    };
    let mut nodes = Vec::new();
    if has_id {
        for url in urls {
            nodes.push(tags_by_id(url, &ta).await);
        }
    }
    let mut wrong = Vec::new();
    let mut given = 0;
    for (i, ((a, b), values)) in pooled.iter().zip(&alone).zip(&case.callers).enumerate() {
        let tag = values.last().cloned();
        let tag = match tag {
            Some(mysql_async::Value::Int(t)) => t,
            other => panic!("{}: caller {i}: tag {other:?}", case.what),
        };
        let bad = |why: &str| {
            format!(
                "{}: caller {i} {values:?}: {why}: pool {a:?}, alone {b:?}",
                case.what
            )
        };
        match (a, b) {
            (IdTold::Err(x), IdTold::Err(y)) if x == y => {}
            (IdTold::Ok(id_a, ret_a), IdTold::Ok(id_b, ret_b)) => {
                match (id_a, id_b) {
                    (None, None) => {}
                    (Some(id_a), Some(id_b)) => {
                        given += 1;
                        if tag_of(&here_b, *id_b) != Some(tag) {
                            wrong.push(bad("the plain driver's id is not its row's"));
                        }
                        for (k, rows) in nodes.iter().enumerate() {
                            if tag_of(rows, *id_a) != Some(tag) {
                                wrong.push(bad(&format!(
                                    "the id reads back {:?} on node {k}",
                                    tag_of(rows, *id_a)
                                )));
                            }
                        }
                    }
                    (Some(_), None) => {
                        wrong.push(bad("an id where the statement alone reports none"))
                    }
                    (None, Some(_)) => {
                        wrong.push(bad("no id where the statement alone reports one"))
                    }
                }
                match (ret_a, ret_b) {
                    (None, None) => {}
                    (Some((id_a, tag_a)), Some((id_b, tag_b))) => {
                        let own_b = here_b.get(id_b) == Some(tag_b);
                        let own_a = nodes.iter().all(|rows| rows.get(id_a) == Some(tag_a));
                        if *tag_a != tag || *tag_b != tag || !own_a || !own_b {
                            wrong.push(bad("RETURNING row"));
                        }
                    }
                    _ => wrong.push(bad("RETURNING row given or not")),
                }
            }
            _ => wrong.push(bad("outcome")),
        }
    }
    wrong.truncate(12);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    (given, stats.rows as f64 / stats.statements.max(1) as f64)
}

/// Every caller of a coalesced INSERT on a Galera node (the cluster's own
/// auto-increment control ON) is told the id its single-row INSERT run
/// alone would have reported through mysql_async, or none where that
/// reports none, and each id reads back the caller's own row on every
/// node: generated ids, ids given (also negative, 0, NULL, above the signed
/// range, without a column list), 0 kept by `NO_AUTO_VALUE_ON_ZERO`, a
/// statement with its own `RETURNING`, a table without an auto-increment
/// column, and callers whose rows fail (duplicates) isolated among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_row_ids_match_the_plain_driver() {
    use mysql_async::Value::{Int, NULL, UInt};
    let urls = galera_cluster().fresh_db().await;
    let callers = |n: i64,
                   row: &dyn Fn(i64) -> Vec<mysql_async::Value>|
     -> Vec<Vec<mysql_async::Value>> { (0..n).map(row).collect() };
    // A row already in every table holds a tag (-1) and an id above every
    // id a caller gives, so generated ids never meet given ones.
    let cases = [
        IdCase {
            what: "generated ids",
            ddl: "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                  tag INT NOT NULL UNIQUE, v VARCHAR(20) NOT NULL) ENGINE=InnoDB",
            pre: "INSERT INTO {t} (tag, v) VALUES (-1, 'taken')",
            sql: "INSERT INTO {t} (v, tag) VALUES (?, ?)",
            callers: callers(90, &|i| {
                let tag = if i % 23 == 11 { -1 } else { i };
                vec![format!("v{i}").into(), Int(tag)]
            }),
            zero_kept: false,
        },
        IdCase {
            what: "ids given, NULL, 0, negative",
            ddl: "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                  tag INT NOT NULL UNIQUE) ENGINE=InnoDB",
            pre: "INSERT INTO {t} (id, tag) VALUES (900000000, -1)",
            sql: "INSERT INTO {t} (id, tag) VALUES (?, ?)",
            callers: callers(90, &|i| {
                let id = match i % 5 {
                    0 => NULL,
                    1 => Int(0),
                    2 => Int(1_000_000 + 7 * i),
                    3 => Int(-(i + 1)),
                    // Now and then the id of the row already there.
                    _ if i % 20 == 4 => Int(900_000_000),
                    _ => NULL,
                };
                vec![id, Int(i)]
            }),
            zero_kept: false,
        },
        IdCase {
            what: "no column list",
            ddl: "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                  tag INT NOT NULL UNIQUE) ENGINE=InnoDB",
            pre: "INSERT INTO {t} (id, tag) VALUES (900000000, -1)",
            sql: "INSERT INTO {t} VALUES (?, ?)",
            callers: callers(60, &|i| {
                let id = if i % 2 == 0 { NULL } else { Int(2_000_000 + i) };
                vec![id, Int(i)]
            }),
            zero_kept: false,
        },
        IdCase {
            what: "0 kept (NO_AUTO_VALUE_ON_ZERO)",
            ddl: "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                  tag INT NOT NULL UNIQUE) ENGINE=InnoDB",
            pre: "INSERT INTO {t} (id, tag) VALUES (900000000, -1)",
            sql: "INSERT INTO {t} (id, tag) VALUES (?, ?)",
            callers: callers(60, &|i| {
                let id = match i {
                    7 => Int(0),
                    _ if i % 3 == 0 => Int(3_000_000 + i),
                    _ => NULL,
                };
                vec![id, Int(i)]
            }),
            zero_kept: true,
        },
        IdCase {
            what: "unsigned ids above the signed range",
            ddl: "CREATE TABLE {t} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
                  tag INT NOT NULL UNIQUE) ENGINE=InnoDB",
            pre: "INSERT INTO {t} (id, tag) VALUES (15000000000000000000, -1)",
            sql: "INSERT INTO {t} (id, tag) VALUES (?, ?)",
            callers: callers(40, &|i| {
                let id = if i % 4 == 0 {
                    UInt(10_000_000_000_000_000_000 + i as u64)
                } else {
                    NULL
                };
                vec![id, Int(i)]
            }),
            zero_kept: false,
        },
        IdCase {
            what: "a RETURNING of its own",
            ddl: "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                  tag INT NOT NULL UNIQUE) ENGINE=InnoDB",
            pre: "INSERT INTO {t} (tag) VALUES (-1)",
            sql: "INSERT INTO {t} (tag) VALUES (?) RETURNING CAST(id AS CHAR), tag",
            callers: callers(60, &|i| vec![Int(if i % 17 == 5 { -1 } else { i })]),
            zero_kept: false,
        },
        IdCase {
            what: "no auto-increment column",
            ddl: "CREATE TABLE {t} (k INT PRIMARY KEY, tag INT NOT NULL UNIQUE) ENGINE=InnoDB",
            pre: "INSERT INTO {t} (k, tag) VALUES (-1, -1)",
            sql: "INSERT INTO {t} (k, tag) VALUES (?, ?)",
            callers: callers(60, &|i| vec![Int(if i % 13 == 3 { -1 } else { i }), Int(i)]),
            zero_kept: false,
        },
    ];
    for (n, case) in cases.iter().enumerate() {
        let (given, per_statement) = id_case(&urls, case, n).await;
        eprintln!(
            "{}: {given} of {} callers given an id, {per_statement:.1} rows per statement",
            case.what,
            case.callers.len()
        );
        assert!(per_statement > 1.5, "{}: rows were coalesced", case.what);
    }
}

/// The server may refuse the `RETURNING` the pool appends where it would
/// not refuse the caller's own statement: a user whose SELECT privilege on
/// the auto-increment column is revoked after the text was learned, a
/// column renamed under the pool. Such a statement runs again at once
/// without it: every caller's row is stored and the caller told Ok, with
/// no id; later statements append none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_returning_costs_ids_not_rows() {
    use mysql_async::Value::Int;
    let urls = galera_cluster().fresh_db().await;
    let db = urls[0].rsplit('/').next().expect("database").to_string();
    let user = format!("ids_{}", std::process::id());
    for sql in [
        "CREATE TABLE granted (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL UNIQUE) \
         ENGINE=InnoDB"
            .to_string(),
        "CREATE TABLE renamed (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL UNIQUE) \
         ENGINE=InnoDB"
            .to_string(),
        format!("CREATE USER '{user}'@'%'"),
        format!("GRANT INSERT, SELECT ON `{db}`.granted TO '{user}'@'%'"),
    ] {
        common::mysql_exec(&urls[0], &sql).await;
    }
    // No relearning in the background: the refusal meets the shape learned
    // before the change.
    let config = BatchConfig::default().relearn_after(std::time::Duration::from_secs(3600));
    let callers = |from: i64| -> Vec<Vec<mysql_async::Value>> {
        (from..from + 40).map(|v| vec![Int(v)]).collect()
    };
    let user_url = urls[0].replacen("root@", &format!("{user}@"), 1);
    for (t, url, change) in [
        (
            "granted",
            user_url.as_str(),
            format!("REVOKE SELECT ON `{db}`.granted FROM '{user}'@'%'"),
        ),
        (
            "renamed",
            urls[0].as_str(),
            "ALTER TABLE renamed RENAME COLUMN id TO ident".to_string(),
        ),
    ] {
        let pool = Pool::builder(url)
            .max_size(3)
            .batching(config.clone())
            .build()
            .expect("build pool");
        let sql = format!("INSERT INTO {t} (v) VALUES (?)");
        let before = held_burst(&pool, 3, &sql, &callers(0)).await;
        assert!(
            before
                .iter()
                .all(|o| o.as_ref().is_ok_and(|o| o.last_insert_id().is_some())),
            "{t}: every caller given an id before the change: {before:?}"
        );
        common::mysql_exec(&urls[0], &change).await;
        let after = held_burst(&pool, 3, &sql, &callers(1000)).await;
        for out in &after {
            let out = out.as_ref().unwrap_or_else(|e| panic!("{t}: {e}"));
            assert_eq!(out.rows_affected(), 1, "{t}");
            assert!(out.is_exact(), "{t}");
            assert_eq!(
                out.last_insert_id(),
                None,
                "{t}: no id without the RETURNING"
            );
        }
        let stats = pool.stats();
        assert!(stats.rows > stats.statements, "{t}: coalesced: {stats:?}");
        pool.close().await;
        for url in &urls {
            let mut conn = connect(url).await;
            conn.query_drop("SET SESSION wsrep_sync_wait = 1")
                .await
                .expect("wsrep_sync_wait");
            let stored: Vec<i64> = conn
                .query(format!("SELECT v FROM {t} ORDER BY v"))
                .await
                .expect("read back");
            let _ = conn.disconnect().await;
            let want: Vec<i64> = (0..40).chain(1000..1040).collect();
            assert_eq!(stored, want, "{t}: every row stored once on {url}");
        }
    }
    common::mysql_exec(&urls[0], &format!("DROP USER '{user}'@'%'")).await;
}

/// Hot counters on two nodes: pools on nodes 1 and 2 (4 connections each)
/// increment 40 counters by 1 from 32 tasks each, 30 calls per task
/// (`UPDATE counters SET hits = hits + 1 WHERE id = ?`, coalesced: one
/// statement in a transaction per flush, whose write set the other node's
/// can beat at certification). Every caller is told Ok(1) or the 1213 its
/// own statement can get when it loses certification; every counter, on
/// every node, is exactly the increments acknowledged for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_counters_on_two_nodes_count_each_acknowledged_increment_once() {
    const KEYS: i64 = 40;
    const TASKS: usize = 32;
    const CALLS: usize = 30;
    const UPDATE: &str = "UPDATE counters SET hits = hits + 1 WHERE id = ?";
    let urls = galera_cluster().fresh_db().await;
    let mut admin = connect(&urls[0]).await;
    admin
        .query_drop(
            "CREATE TABLE counters (id INT PRIMARY KEY, hits BIGINT NOT NULL) ENGINE=InnoDB; \
             INSERT INTO counters SELECT seq, 0 FROM seq_0_to_39",
        )
        .await
        .unwrap();
    let pools: Vec<Pool> = urls[..2].iter().map(|u| pool(u).build().unwrap()).collect();
    for (node, p) in pools.iter().enumerate() {
        // The table is on the node before its writers start.
        let mut conn = connect(&urls[node]).await;
        conn.query_drop("SET SESSION wsrep_sync_wait = 1")
            .await
            .unwrap();
        conn.query_drop("SELECT 1 FROM counters").await.unwrap();
        let explain = p.explain(UPDATE).await.unwrap();
        assert!(explain.is_coalesced(), "{explain}");
    }
    let before: Vec<_> = pools.iter().map(Pool::stats).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for (node, p) in pools.iter().enumerate() {
        for task in 0..TASKS {
            let p = p.clone();
            tasks.spawn(async move {
                let mut told = Vec::new();
                for call in 0..CALLS {
                    let id = ((node * 7 + task * 13 + call * 17) as i64) % KEYS;
                    let r = p.execute(UPDATE, (id,)).await;
                    told.push((id, r.map(|o| o.rows_affected()).map_err(|e| e.to_string())));
                }
                told
            });
        }
    }
    let mut acked: BTreeMap<i64, i64> = BTreeMap::new();
    let (mut lost, mut bad) = (0, Vec::new());
    while let Some(done) = tasks.join_next().await {
        for (id, r) in done.unwrap() {
            match r {
                Ok(1) => *acked.entry(id).or_default() += 1,
                Err(e) if e.contains("1213") => lost += 1,
                other => bad.push(format!("counter {id}: {other:?}")),
            }
        }
    }
    assert!(bad.is_empty(), "{:?}", &bad[..bad.len().min(10)]);
    for url in &urls {
        let mut conn = connect(url).await;
        conn.query_drop("SET SESSION wsrep_sync_wait = 1")
            .await
            .unwrap();
        let hits: Vec<(i64, i64)> = conn
            .query("SELECT id, hits FROM counters ORDER BY id")
            .await
            .unwrap();
        for (id, n) in hits {
            assert_eq!(
                n,
                acked.get(&id).copied().unwrap_or(0),
                "counter {id} on {url} ({lost} callers lost certification)"
            );
        }
    }
    let (mut rows, mut statements) = (0, 0);
    for (p, b) in pools.iter().zip(&before) {
        let after = p.stats();
        rows += after.rows - b.rows;
        statements += after.statements - b.statements;
    }
    eprintln!(
        "{} increments acknowledged, {lost} lost certification; {rows} coalesced in {statements} \
         statements",
        acked.values().sum::<i64>()
    );
    assert!(
        statements * 2 < (2 * TASKS * CALLS) as u64,
        "{statements} statements for {} calls",
        2 * TASKS * CALLS
    );
}
