//! A MariaDB Galera node dying under load, and a node that is up but not
//! ready for writes, with a pool given every node of the cluster as its
//! host list (`mysql://root@a:p1,b:p2,c:p3/db`).
//!
//! A statement on the wire when its node is killed may or may not have
//! committed: its callers must be told "outcome unknown", never Ok for a
//! row that is not stored, never a plain error for a row that is. Every
//! row a caller was told Ok for was certified by the cluster before the OK
//! was sent, so it must be on every surviving node, and on the killed node
//! once it has rejoined. New connections must go to another node.
//!
//! The tests have a cluster of their own (not the shared one of the other
//! Galera tests), started once, with failure detection shortened (a node
//! silent for 1 s is suspected), and take turns on it: one kills a node,
//! the other cuts one off.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::common::GaleraCluster;
use batchpool::BatchConfig;
use batchpool::mysql::{Pool, PoolBuilder};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

/// Failure detection of the test cluster: a node that stops answering is
/// suspected after 1 s (default 5 s) and dropped from the primary
/// component, so the other nodes take writes again; the other timeouts are
/// shortened to stay consistent with it.
const FAST_DETECTION: &str = "evs.keepalive_period=PT0.25S;evs.inactive_check_period=PT0.25S;\
     evs.suspect_timeout=PT1S;evs.inactive_timeout=PT3S;evs.install_timeout=PT3S";

/// Concurrent writers.
const WRITERS: usize = 32;

/// Rows acknowledged before the kill, and again after it.
const PHASE_ROWS: usize = 1_500;

/// Bound on any wait for the load to reach a phase's rows.
const PATIENCE: Duration = Duration::from_secs(90);

/// The promise is writes again within about 2 s of a node's death (the
/// cluster's 1 s failure detection, then a new connection to another
/// node); the assertion is generous so that a loaded machine does not make
/// it flake. The measured gap is printed.
const RESUME_BOUND: Duration = Duration::from_secs(10);

/// How long a writer waits after an error before its next row.
const BACKOFF: Duration = Duration::from_millis(20);

/// The tests take turns on the one cluster.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The cluster of these tests, started on first use; its nodes' watchdogs
/// remove it when the process exits.
fn cluster() -> &'static GaleraCluster {
    static CLUSTER: std::sync::OnceLock<GaleraCluster> = std::sync::OnceLock::new();
    CLUSTER.get_or_init(|| GaleraCluster::start(FAST_DETECTION))
}

/// Takes this test's turn on the cluster (starting it on first use) and
/// makes it whole first: a test that failed part-way through its fault may
/// have left a node killed or cut off, which must not fail the tests after
/// it.
async fn take_turn() -> (tokio::sync::MutexGuard<'static, ()>, &'static GaleraCluster) {
    let turn = TURN.lock().await;
    let cluster = tokio::task::spawn_blocking(|| {
        let cluster = cluster();
        cluster.heal();
        cluster
    })
    .await
    .expect("the cluster started and whole");
    (turn, cluster)
}

async fn connect(url: &str) -> Conn {
    Conn::new(Opts::from_url(url).expect("url"))
        .await
        .expect("connect")
}

/// One of the node's status or system variables (`SHOW GLOBAL STATUS` /
/// `VARIABLES`), or the error.
async fn status(url: &str, name: &str) -> String {
    let fut = async {
        let mut conn = Conn::new(Opts::from_url(url).map_err(|e| e.to_string())?)
            .await
            .map_err(|e| e.to_string())?;
        let row: Option<(String, String)> = conn
            .query_first(format!("SHOW GLOBAL STATUS LIKE '{name}'"))
            .await
            .map_err(|e| e.to_string())?;
        let _ = conn.disconnect().await;
        Ok::<_, String>(row.map(|(_, v)| v).unwrap_or_default())
    };
    match tokio::time::timeout(Duration::from_secs(5), fut).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => e,
        Err(_) => "timed out".into(),
    }
}

/// Waits until `check` holds, at most [`PATIENCE`].
async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        let why = match check().await {
            Ok(()) => return,
            Err(why) => why,
        };
        assert!(Instant::now() < deadline, "{what}: still {why}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The keys in `t` on the node at `url`, read once the node has applied
/// every write set it received.
async fn keys_on(url: &str, t: &str) -> BTreeSet<i64> {
    let mut conn = connect(url).await;
    conn.query_drop("SET SESSION wsrep_sync_wait = 1")
        .await
        .expect("wsrep_sync_wait");
    let keys: Vec<i64> = conn
        .query(format!("SELECT k FROM {t}"))
        .await
        .expect("read back");
    let _ = conn.disconnect().await;
    keys.into_iter().collect()
}

/// `mysql://root@h1:p1,h2:p2,h3:p3/<db>` for the database of `url` on
/// the nodes `order`.
fn multi_host_url(cluster: &GaleraCluster, db_url: &str, order: &[usize]) -> String {
    let db = db_url.rsplit('/').next().expect("database in the URL");
    let hosts = cluster.hosts();
    let list: Vec<&str> = order.iter().map(|i| hosts[*i].as_str()).collect();
    format!("mysql://root@{}/{db}", list.join(","))
}

fn builder(url: &str) -> PoolBuilder {
    Pool::builder(url)
        .max_size(4)
        .create_timeout(Duration::from_secs(2))
        .batching(BatchConfig::default())
}

async fn create_table(url: &str, t: &str) {
    let mut admin = connect(url).await;
    admin
        .query_drop(format!(
            "CREATE TABLE {t} (k BIGINT PRIMARY KEY, v VARCHAR(16) NOT NULL) ENGINE=InnoDB"
        ))
        .await
        .expect("create table");
    let _ = admin.disconnect().await;
}

/// The client port of the node a pool's connection is on.
async fn pool_port(pool: &Pool) -> u16 {
    let row = pool.query_one("SELECT @@port", ()).await.expect("@@port");
    row.get::<u16, _>(0).expect("port")
}

fn port_of(cluster: &GaleraCluster, i: usize) -> u16 {
    let host = &cluster.hosts()[i];
    host.rsplit(':').next().unwrap().parse().unwrap()
}

/// What one caller was told.
#[derive(Debug, Clone)]
enum Told {
    Ok,
    Unknown(String),
    /// A definite error: nothing of the row committed.
    Failed(String),
}

/// One call: its key, when it started and ended, what it was told.
#[derive(Debug, Clone)]
struct Call {
    k: i64,
    start: Instant,
    end: Instant,
    told: Told,
}

/// Writers inserting one row per call with fresh keys until `stop`.
fn start_writers(
    pool: &Arc<Pool>,
    t: &str,
    stop: &Arc<AtomicBool>,
    next: &Arc<AtomicI64>,
    oks: &Arc<AtomicI64>,
) -> Vec<tokio::task::JoinHandle<Vec<Call>>> {
    let sql = format!("INSERT INTO {t} (k, v) VALUES (?, ?)");
    (0..WRITERS)
        .map(|_| {
            let (pool, stop, next, oks, sql) = (
                Arc::clone(pool),
                Arc::clone(stop),
                Arc::clone(next),
                Arc::clone(oks),
                sql.clone(),
            );
            tokio::spawn(async move {
                let mut calls = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let start = Instant::now();
                    let r = pool.execute(&sql, (k, format!("v{k}"))).await;
                    let end = Instant::now();
                    let told = match r {
                        Ok(out) if out.rows_affected() == 1 => Told::Ok,
                        Ok(out) => Told::Failed(format!("Ok with {} rows", out.rows_affected())),
                        Err(e) if e.is_outcome_unknown() => Told::Unknown(e.to_string()),
                        Err(e) => Told::Failed(e.to_string()),
                    };
                    let failed = !matches!(told, Told::Ok);
                    if !failed {
                        oks.fetch_add(1, Ordering::Relaxed);
                    }
                    calls.push(Call {
                        k,
                        start,
                        end,
                        told,
                    });
                    if failed {
                        tokio::time::sleep(BACKOFF).await;
                    }
                }
                calls
            })
        })
        .collect()
}

/// Writers load `pool` until [`PHASE_ROWS`] are acknowledged, `fault`
/// comes (named `what` in messages), and the load goes on until as many
/// again are acknowledged. Returns every call, when the fault came, and
/// when writes resumed (the first Ok of a call started after it).
async fn load_through_fault<F, Fut>(
    pool: &Arc<Pool>,
    t: &str,
    what: &str,
    fault: F,
) -> (Vec<Call>, Instant, Instant)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicI64::new(1));
    let oks = Arc::new(AtomicI64::new(0));
    let writers = start_writers(pool, t, &stop, &next, &oks);
    let started = Instant::now();
    while oks.load(Ordering::Relaxed) < PHASE_ROWS as i64 {
        assert!(started.elapsed() < PATIENCE, "no load before the {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let at = Instant::now();
    fault().await;
    let before = oks.load(Ordering::Relaxed);
    while oks.load(Ordering::Relaxed) < before + PHASE_ROWS as i64 {
        assert!(
            at.elapsed() < PATIENCE,
            "writes did not resume after the {what}: {} Ok since",
            oks.load(Ordering::Relaxed) - before
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut calls = Vec::new();
    for w in writers {
        calls.extend(w.await.expect("writer task"));
    }
    let resumed = calls
        .iter()
        .filter(|c| c.start >= at && matches!(c.told, Told::Ok))
        .map(|c| c.end)
        .min()
        .unwrap_or_else(|| panic!("an Ok after the {what}"));
    (calls, at, resumed)
}

/// A pool with every node in its host list writes under load; the node it
/// writes through is killed with SIGKILL mid-load, then restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_under_load() {
    let (_turn, cluster) = take_turn().await;
    let urls = cluster.fresh_db().await;
    let t = "under_load";
    create_table(&urls[0], t).await;
    let url = multi_host_url(cluster, &urls[0], &[0, 1, 2]);
    let pool = Arc::new(builder(&url).build().expect("build pool"));

    // The pool writes through the first host of its list.
    let port = pool_port(&pool).await;
    let victim = (0..urls.len())
        .find(|i| port_of(cluster, *i) == port)
        .expect("the pool's node is one of the cluster's");
    assert_eq!(
        victim, 0,
        "the first host of the list is used while it is up"
    );
    let survivors: Vec<usize> = (0..urls.len()).filter(|i| *i != victim).collect();

    let (calls, killed_at, resumed) =
        load_through_fault(&pool, t, "kill", || async { cluster.kill(victim) }).await;
    let port_after = pool_port(&pool).await;
    let stats = pool.stats();
    pool.close().await;
    assert_ne!(port_after, port, "new connections went to another node");
    let gap = resumed - killed_at;

    let mut on: BTreeMap<usize, BTreeSet<i64>> = BTreeMap::new();
    for i in &survivors {
        on.insert(*i, keys_on(&urls[*i], t).await);
    }
    let (ok, unknown, failed, mut wrong) = judge(&calls, &on, killed_at, Some(resumed));
    eprintln!(
        "node {victim} killed: writes resumed after {} ms; calls {}: {ok} Ok, {unknown} outcome \
         unknown, {failed} failed; rows per statement {:.1}",
        gap.as_millis(),
        calls.len(),
        stats.rows as f64 / stats.statements.max(1) as f64
    );
    wrong.truncate(20);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        gap < RESUME_BOUND,
        "writes resumed {} ms after the kill (bound {RESUME_BOUND:?})",
        gap.as_millis()
    );

    // The killed node rejoins and has the same rows.
    let restarted_at = Instant::now();
    tokio::task::spawn_blocking(move || cluster.restart(victim))
        .await
        .expect("restart");
    eprintln!(
        "node {victim} rejoined in {} ms",
        restarted_at.elapsed().as_millis()
    );
    for url in &urls {
        assert_eq!(status(url, "wsrep_cluster_size").await, "3", "{url}");
    }
    let back = keys_on(&urls[victim], t).await;
    assert_eq!(
        back, on[&survivors[0]],
        "the rejoined node has the survivors' rows"
    );
}

/// What the callers were told against what the nodes in `on` hold, for a
/// fault at `at`: every Ok row on every node, no definitely failed row on
/// any, no definite failure before the fault, no row no caller sent, and,
/// with `resumed` (when writes resumed), no outcome unknown for a call
/// started after it. Returns the counts of Ok, unknown and failed calls,
/// and what is wrong.
fn judge(
    calls: &[Call],
    on: &BTreeMap<usize, BTreeSet<i64>>,
    at: Instant,
    resumed: Option<Instant>,
) -> (usize, usize, usize, Vec<String>) {
    let (mut ok, mut unknown, mut failed) = (0, 0, 0);
    let mut wrong = Vec::new();
    for c in calls {
        match &c.told {
            Told::Ok => {
                ok += 1;
                for (i, keys) in on {
                    if !keys.contains(&c.k) {
                        wrong.push(format!("key {}: Ok, but not on node {i}", c.k));
                    }
                }
            }
            Told::Unknown(e) => {
                unknown += 1;
                // Only statements on the wire (or sent on a connection
                // to the node) when the fault came.
                if resumed.is_some_and(|r| c.start >= r) {
                    wrong.push(format!(
                        "key {}: outcome unknown for a call started after writes resumed: {e}",
                        c.k
                    ));
                }
            }
            Told::Failed(e) => {
                failed += 1;
                if c.end < at {
                    wrong.push(format!("key {}: failed before the fault: {e}", c.k));
                }
                for (i, keys) in on {
                    if keys.contains(&c.k) {
                        wrong.push(format!("key {}: failed ({e}), yet on node {i}", c.k));
                    }
                }
            }
        }
    }
    // Every stored row is some caller's.
    let issued: BTreeSet<i64> = calls.iter().map(|c| c.k).collect();
    for (i, keys) in on {
        for k in keys.difference(&issued) {
            wrong.push(format!("key {k} on node {i}: no caller sent it"));
        }
    }
    (ok, unknown, failed, wrong)
}

/// The node a pool writes through is cut off from the cluster mid-load
/// (`gmcast.isolate=1`: up, but out of the primary component), then let
/// back in. It answers 1047 to the statements on its connections, both to
/// those it refused and to those whose commit was under way, which the
/// other nodes may have committed: no caller may be told Ok for a row not
/// on every node, or a definite error for a row that is on one. Each of
/// its connections is closed after one such answer (the outcome-unknown
/// calls are not bounded in time, as a node killed makes them: a
/// connection busy on another statement learns it only then); writes go
/// on through the other nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_under_load() {
    let (_turn, cluster) = take_turn().await;
    let urls = cluster.fresh_db().await;
    let t = "cut_under_load";
    create_table(&urls[0], t).await;
    let cut = 0;
    let url = multi_host_url(cluster, &urls[0], &[cut, 1, 2]);
    let pool = Arc::new(builder(&url).build().expect("build pool"));
    let port = pool_port(&pool).await;
    assert_eq!(port, port_of(cluster, cut), "the first host of the list");

    let (calls, cut_at, resumed) =
        load_through_fault(&pool, t, "cut", || isolate(&urls, cut)).await;
    let port_after = pool_port(&pool).await;
    pool.close().await;
    rejoin(cluster, &urls, cut).await;

    let mut on: BTreeMap<usize, BTreeSet<i64>> = BTreeMap::new();
    for (i, url) in urls.iter().enumerate() {
        on.insert(i, keys_on(url, t).await);
    }
    let (ok, unknown, failed, mut wrong) = judge(&calls, &on, cut_at, None);
    eprintln!(
        "node {cut} cut off: writes resumed after {} ms; calls {}: {ok} Ok, {unknown} outcome \
         unknown, {failed} failed",
        (resumed - cut_at).as_millis(),
        calls.len(),
    );
    wrong.truncate(20);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_ne!(
        port_after,
        port_of(cluster, cut),
        "new connections went to another node"
    );
}

/// A node that is up but cut off from the cluster (not in the primary
/// component, `wsrep_ready` OFF) is first in the pool's host list: every
/// write goes through another node and no caller gets an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_not_ready_is_passed_over() {
    let (_turn, cluster) = take_turn().await;
    let urls = cluster.fresh_db().await;
    let t = "not_ready";
    create_table(&urls[0], t).await;
    // The table is on node 0 before it is cut off.
    keys_on(&urls[0], t).await;

    let cut = 0;
    isolate(&urls, cut).await;

    let url = multi_host_url(cluster, &urls[0], &[cut, 1, 2]);
    let pool = Arc::new(builder(&url).build().expect("build pool"));
    let sql = format!("INSERT INTO {t} (k, v) VALUES (?, ?)");
    let rows = 1_000i64;
    let mut tasks = Vec::new();
    for k in 0..rows {
        let (pool, sql) = (Arc::clone(&pool), sql.clone());
        tasks.push(tokio::spawn(async move {
            (k, pool.execute(&sql, (k, format!("v{k}"))).await)
        }));
    }
    let mut errors = Vec::new();
    for task in tasks {
        let (k, r) = task.await.expect("caller");
        if let Err(e) = r {
            errors.push(format!("key {k}: {e}"));
        }
    }
    let port = pool_port(&pool).await;
    let stats = pool.stats();
    pool.close().await;
    // Still cut off: the test tested what it meant to.
    let ready = status(&urls[cut], "wsrep_ready").await;

    rejoin(cluster, &urls, cut).await;

    errors.truncate(10);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert_eq!(ready, "OFF", "the node stayed cut off during the writes");
    assert_ne!(port, port_of(cluster, cut), "the pool's node");
    eprintln!(
        "{rows} rows through node on port {port}, rows per statement {:.1}",
        stats.rows as f64 / stats.statements.max(1) as f64
    );
    for url in &urls {
        let keys = keys_on(url, t).await;
        assert_eq!(keys.len() as i64, rows, "every row on {url}");
    }
}

/// Cuts node `cut` off from the others (`gmcast.isolate=1`) and waits until
/// it is out of the primary component (`wsrep_ready` OFF) and the others
/// count two nodes.
pub(crate) async fn isolate(urls: &[String], cut: usize) {
    let mut admin = connect(&urls[cut]).await;
    admin
        .query_drop("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'")
        .await
        .expect("isolate");
    let _ = admin.disconnect().await;
    wait_for(
        "the cut-off node to leave the primary component",
        || async {
            let ready = status(&urls[cut], "wsrep_ready").await;
            let mut others = Vec::new();
            for (i, u) in urls.iter().enumerate() {
                if i != cut {
                    others.push(status(u, "wsrep_cluster_size").await);
                }
            }
            if ready == "OFF" && others.iter().all(|s| s == "2") {
                Ok(())
            } else {
                Err(format!("ready {ready}, other nodes' sizes {others:?}"))
            }
        },
    )
    .await;
}

/// Lets node `cut` rejoin and waits until the cluster is whole again.
async fn rejoin(cluster: &'static GaleraCluster, urls: &[String], cut: usize) {
    let mut admin = connect(&urls[cut]).await;
    admin
        .query_drop("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'")
        .await
        .expect("rejoin");
    let _ = admin.disconnect().await;
    tokio::task::spawn_blocking(|| cluster.wait_formed())
        .await
        .expect("cluster whole again");
}

/// The pool's connections lie idle on a node that is then cut off from the
/// cluster: the node's readiness is read when each comes out of the pool,
/// so no write is sent there (no caller gets the node's 1047), and new
/// connections open on a node that takes writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_to_a_node_that_stops_being_ready_are_not_used() {
    let (_turn, cluster) = take_turn().await;
    let urls = cluster.fresh_db().await;
    let t = "idle_not_ready";
    create_table(&urls[0], t).await;
    keys_on(&urls[0], t).await;

    let cut = 0;
    let url = multi_host_url(cluster, &urls[0], &[cut, 1, 2]);
    let pool = Arc::new(builder(&url).build().expect("build pool"));
    let sql = format!("INSERT INTO {t} (k, v) VALUES (?, ?)");
    let write = |keys: std::ops::Range<i64>| {
        let tasks: Vec<_> = keys
            .map(|k| {
                let (pool, sql) = (Arc::clone(&pool), sql.clone());
                tokio::spawn(async move { (k, pool.execute(&sql, (k, format!("v{k}"))).await) })
            })
            .collect();
        async move {
            let mut errors = Vec::new();
            for task in tasks {
                let (k, r) = task.await.expect("caller");
                if let Err(e) = r {
                    errors.push(format!("key {k}: {e}"));
                }
            }
            errors
        }
    };
    // Every connection of the pool opened, on the first node of the list.
    let errors = write(0..200).await;
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    let opened = pool.status().size;
    assert_eq!(pool_port(&pool).await, port_of(cluster, cut));

    // Idle past the pool's ping interval (5 s) before the node goes.
    tokio::time::sleep(Duration::from_secs(6)).await;
    isolate(&urls, cut).await;
    let errors = write(200..400).await;
    let port = pool_port(&pool).await;
    pool.close().await;
    let ready = status(&urls[cut], "wsrep_ready").await;
    rejoin(cluster, &urls, cut).await;

    let mut shown = errors.clone();
    shown.truncate(10);
    assert!(
        errors.is_empty(),
        "{} of 200 callers failed ({opened} connections were idle on the node): {}",
        errors.len(),
        shown.join("\n")
    );
    assert_eq!(ready, "OFF", "the node stayed cut off during the writes");
    assert_ne!(port, port_of(cluster, cut), "the pool's node");
    for url in &urls {
        assert_eq!(keys_on(url, t).await.len(), 400, "every row on {url}");
    }
}

/// A malformed host list is the builder's error, for the caller who gave
/// it; so is one combined with a Unix socket.
#[test]
fn a_bad_host_list_is_refused_at_build() {
    for bad in ["", "db:x", "db:0", "::1"] {
        let e = Pool::builder("mysql://root@127.0.0.1/test")
            .hosts(["127.0.0.1:3306", bad])
            .build()
            .expect_err(bad);
        assert!(e.is_config(), "{bad:?}: {e}");
    }
    let e = Pool::builder("mysql://root@127.0.0.1/test")
        .hosts(Vec::<String>::new())
        .build()
        .expect_err("empty list");
    assert!(e.is_config(), "{e}");
    let e = Pool::builder("mysql://root@a:3306,b:3306,:3306/test")
        .build()
        .expect_err("URL list");
    assert!(e.is_config(), "{e}");
    let e = Pool::builder("mysql://root@a:3306,b:3306/test?socket=/tmp/my.sock")
        .build()
        .expect_err("socket");
    assert!(e.is_config(), "{e}");
}

/// On a plain server too: a host that refuses connections is passed over,
/// and the pool stays on the one that took them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_is_down_is_passed_over() {
    let url = common::mysql_fresh_db().await;
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let (head, db) = url.rsplit_once('/').expect("database in the URL");
    let (user, host) = head.rsplit_once('@').expect("user in the URL");
    let url = format!("{user}@127.0.0.1:{dead},{host}/{db}");
    let pool = builder(&url).build().expect("build pool");
    pool.execute("CREATE TABLE t (k INT PRIMARY KEY) ENGINE=InnoDB", ())
        .await
        .expect("create");
    for k in 0..20 {
        pool.execute("INSERT INTO t (k) VALUES (?)", (k,))
            .await
            .expect("insert");
    }
    let n: i64 = pool
        .query_one("SELECT COUNT(*) FROM t", ())
        .await
        .expect("count")
        .get(0)
        .expect("count");
    assert_eq!(n, 20);
    pool.close().await;

    // Only dead hosts: the error names each.
    let pool = builder(&format!(
        "mysql://root@127.0.0.1:{dead},127.0.0.1:{dead}/test"
    ))
    .build()
    .expect("build pool");
    let e = pool.execute("SELECT 1", ()).await.expect_err("no host");
    assert!(e.is_connect(), "{e}");
    let text = format!("{e} {:?}", std::error::Error::source(&e));
    assert!(text.contains(&format!("127.0.0.1:{dead}")), "{text}");
}
