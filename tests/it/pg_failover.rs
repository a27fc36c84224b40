//! A PostgreSQL primary with a synchronous streaming standby, failed over
//! under load, and a server turned read-only under a pool.
//!
//! Synchronous replication (`synchronous_standby_names`, `synchronous_commit
//! = on`) means the primary answers a COMMIT only once the standby has the
//! commit record on disk: every row a caller was told Ok for must then be
//! on the promoted standby. A statement on the wire when the primary dies
//! may or may not have committed there (outcome unknown); one that failed
//! with a definite error must be nowhere. Writers reach the servers through
//! a multi-host connection string with `target_session_attrs=read-write`,
//! so new connections go to whichever host accepts writes.
//!
//! These tests always start their own servers (`PG_URL` does not apply):
//! they stop, promote and reconfigure them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::PgServer;
use batchpool::Error;
use batchpool::postgres::Pool;

/// Concurrent writers through the pool.
const WRITERS: usize = 64;

/// How long a writer waits after an error before its next row: callers of
/// a pool with no writable server get connect errors at once, and 64 of
/// them retrying in a tight loop would mostly load the standby being
/// promoted with connection attempts.
const BACKOFF: Duration = Duration::from_millis(50);

/// Rows acknowledged before the primary is stopped, and again after the
/// promotion, before the test goes on.
const PHASE_ROWS: usize = 3_000;

/// The bound on any wait for the servers (replication to catch up, a
/// phase's rows): only "stuck" fails it.
const PATIENCE: Duration = Duration::from_secs(120);

/// The longest time from the end of the failover (promotion done, the
/// promoted server's `synchronous_standby_names` cleared) to the first
/// acknowledged row after it. What happens in that time: each caller's
/// next attempt (at most [`BACKOFF`] later) opens a connection, which
/// passes over the stopped host and lands on the promoted one, the
/// statement is prepared and one INSERT commits. On an idle machine that
/// is a few milliseconds; the bound is the promise users are given, and it
/// holds with a margin of two orders of magnitude for the scheduling and
/// fsync stalls of a loaded 2-core machine. The pool adds no wait of its
/// own: it would have to hold a caller for seconds to fail it.
const RESUME_BOUND: Duration = Duration::from_secs(2);

/// How long the standby's WAL receiver is paused just before the primary
/// stops.
const LAG: Duration = Duration::from_millis(300);

/// Application name of the writers' pools' sessions, to find them on a
/// server.
const APP: &str = "bp_failover";

/// Application name of the pool opened once the old primary is back.
const LATE_APP: &str = "bp_failover_late";

/// What one caller was told.
#[derive(Debug, Clone)]
enum Told {
    Ok,
    /// The row may or may not have committed.
    Unknown(String),
    /// Nothing of the row committed.
    Failed(String),
}

/// One call: its key, when it started and ended, and what it was told.
#[derive(Debug, Clone)]
struct Call {
    key: i64,
    start: Instant,
    end: Instant,
    told: Told,
}

fn classify(r: &Result<batchpool::postgres::Outcome, Error>) -> Told {
    match r {
        Ok(o) if o.rows_affected() == 1 => Told::Ok,
        Ok(o) => Told::Failed(format!("Ok with {} rows", o.rows_affected())),
        Err(e) if e.is_outcome_unknown() => Told::Unknown(e.to_string()),
        Err(e) => Told::Failed(format!("{}: {e}", e.code().unwrap_or("-"))),
    }
}

async fn connect(port: u16) -> tokio_postgres::Client {
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to 127.0.0.1:{port}: {e}"));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Polls `sql` (one `bool` column) on the server at `port` until it is
/// true, for at most [`PATIENCE`].
async fn wait_until(port: u16, sql: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let client = connect(port).await;
        let row = client.query_one(sql, &[]).await;
        if matches!(row, Ok(ref r) if r.get::<_, bool>(0)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not true within {PATIENCE:?} on 127.0.0.1:{port}: {sql} ({row:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The keys of table `t` on the server at `port`.
async fn keys_on(port: u16, t: &str) -> HashSet<i64> {
    let client = connect(port).await;
    client
        .query(&format!("SELECT k FROM {t}"), &[])
        .await
        .expect("read keys")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// `ALTER SYSTEM SET <setting>` and a configuration reload on the server
/// at `port` (two statements: `ALTER SYSTEM` cannot run in the implicit
/// transaction of a multi-statement query).
async fn set_system(port: u16, setting: &str) {
    let client = connect(port).await;
    client
        .batch_execute(&format!("ALTER SYSTEM SET {setting}"))
        .await
        .unwrap_or_else(|e| panic!("ALTER SYSTEM SET {setting}: {e}"));
    client
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .expect("pg_reload_conf()");
}

/// Sessions named `app` on the server at `port`.
async fn pool_sessions_on(port: u16, app: &str) -> i64 {
    let client = connect(port).await;
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .expect("pg_stat_activity")
        .get(0)
}

/// A pool on both servers, for writes: `target_session_attrs=read-write`.
fn pool(ports: [u16; 2], max_size: usize, app: &str) -> Pool {
    let url = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres \
         target_session_attrs=read-write application_name={app} connect_timeout=5",
        ports[0], ports[1]
    );
    Pool::builder(&url)
        .max_size(max_size)
        .build()
        .expect("build pool")
}

/// Writers inserting distinct keys into `t` until told to stop.
struct Writers {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Call>>>,
    /// Acknowledged rows so far, and when the last one was.
    acked: Arc<std::sync::Mutex<Vec<Instant>>>,
}

impl Writers {
    fn start(pool: &Arc<Pool>, t: &str, n: usize, first_key: i64) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sql = format!("INSERT INTO {t} (k, w) VALUES ($1, $2)");
        let tasks = (0..n)
            .map(|w| {
                let (pool, stop, acked, sql) =
                    (Arc::clone(pool), stop.clone(), acked.clone(), sql.clone());
                tokio::spawn(async move {
                    let mut calls = Vec::new();
                    let mut i = 0i64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = first_key + (w as i64) * 10_000_000 + i;
                        i += 1;
                        let start = Instant::now();
                        let r = pool.execute(&sql, &[&key, &(w as i32)]).await;
                        let end = Instant::now();
                        let told = classify(&r);
                        let ok = matches!(told, Told::Ok);
                        if ok {
                            acked.lock().unwrap().push(end);
                        }
                        calls.push(Call {
                            key,
                            start,
                            end,
                            told,
                        });
                        if !ok {
                            tokio::time::sleep(BACKOFF).await;
                        }
                    }
                    calls
                })
            })
            .collect();
        Writers { stop, tasks, acked }
    }

    /// Waits until `n` rows are acknowledged after `since`.
    async fn wait_acked(&self, since: Instant, n: usize, what: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let seen = self
                .acked
                .lock()
                .unwrap()
                .iter()
                .filter(|t| **t >= since)
                .count();
            if seen >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: only {seen} of {n} rows acknowledged within {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn finish(self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        let mut calls = Vec::new();
        for task in self.tasks {
            calls.extend(task.await.expect("writer task"));
        }
        calls
    }
}

/// Sends `sig` (`STOP`, `CONT`) to process `pid` with `kill`.
fn signal(pid: i32, sig: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} {pid} failed");
}

/// Runs a blocking harness step (`pg_ctl`, `pg_basebackup`) off the
/// runtime's threads, so the writers go on meanwhile.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("harness step")
}

/// 64 writers insert through a multi-host pool while the primary is
/// stopped (`-m immediate`), the synchronous standby promoted and its
/// `synchronous_standby_names` cleared, as an HA manager does. Then the old
/// primary comes back as a standby of the new one, and a new pool's
/// connections pass over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_rows_survive_a_failover_to_the_synchronous_standby() {
    let primary = Arc::new(PgServer::start(&[
        ("synchronous_standby_names", "*"),
        ("synchronous_commit", "on"),
    ]));
    // The standby keeps the same requirement for its own standbys: after
    // its promotion, commits wait until the HA step below clears it.
    let standby = Arc::new(
        blocking({
            let primary = Arc::clone(&primary);
            move || {
                PgServer::standby_of(
                    &primary,
                    // Promotion ends the wait for WAL at once, not at the
                    // next retry of the lost primary (5 s by default).
                    &[
                        ("synchronous_commit", "on"),
                        ("wal_retrieve_retry_interval", "100ms"),
                    ],
                    &[("synchronous_standby_names", "*")],
                    None,
                )
            }
        })
        .await,
    );
    let ports = [primary.port(), standby.port()];
    wait_until(
        ports[0],
        "SELECT count(*) = 1 FROM pg_stat_replication \
         WHERE state = 'streaming' AND sync_state = 'sync'",
    )
    .await;
    connect(ports[0])
        .await
        .batch_execute("CREATE TABLE t (k BIGINT PRIMARY KEY, w INT NOT NULL)")
        .await
        .expect("create table");

    let writer_pool = Arc::new(pool(ports, 16, APP));
    let writers = Writers::start(&writer_pool, "t", WRITERS, 0);
    let began = Instant::now();
    writers
        .wait_acked(began, PHASE_ROWS, "before the failover")
        .await;

    // The standby falls behind: its WAL receiver stops reading for a
    // while, as on a congested link, and the primary dies before it
    // catches up. Without synchronous replication the rows acknowledged
    // meanwhile would be missing after the promotion; with it, their
    // COMMITs wait for the standby and none is acknowledged.
    let receiver: i32 = connect(ports[1])
        .await
        .query_one("SELECT pid FROM pg_stat_wal_receiver", &[])
        .await
        .expect("the standby's WAL receiver")
        .get(0);
    signal(receiver, "STOP");
    tokio::time::sleep(LAG).await;

    // The failover.
    let stop_began = Instant::now();
    let stopped = tokio::task::spawn_blocking({
        let primary = Arc::clone(&primary);
        move || primary.stop_immediate()
    })
    .await;
    // Resumed whatever happened: a stopped process would hold up the
    // standby's own shutdown.
    signal(receiver, "CONT");
    stopped.expect("stop the primary");
    let stop_done = Instant::now();
    blocking({
        let standby = Arc::clone(&standby);
        move || standby.promote()
    })
    .await;
    let promoted = Instant::now();
    set_system(ports[1], "synchronous_standby_names = ''").await;
    let ready = Instant::now();
    writers
        .wait_acked(ready, PHASE_ROWS, "after the failover")
        .await;

    // The old primary, back as a standby of the new one on its old port
    // (from a fresh base backup: its own WAL may hold commits the new
    // primary never had). The writers go on meanwhile.
    let old_port = ports[0];
    drop(Arc::into_inner(primary).expect("the only owner"));
    let rejoined = blocking({
        let standby = Arc::clone(&standby);
        move || PgServer::standby_of(&standby, &[], &[], Some(old_port))
    })
    .await;
    wait_until(old_port, "SELECT pg_is_in_recovery()").await;
    // A new pool opens its connections now: the first host is up, and
    // read-only.
    let late_pool = Arc::new(pool(ports, 8, LATE_APP));
    let late = Writers::start(&late_pool, "t", 16, 5_000_000_000);
    let rejoined_at = Instant::now();
    late.wait_acked(rejoined_at, 500, "with the old primary back as a standby")
        .await;
    let mut calls = writers.finish().await;
    let late_calls = late.finish().await;
    // Counted with every call answered: no connection is being opened now
    // (an attempt that reaches the read-only host shows there until
    // tokio-postgres has read its `transaction_read_only` and moved on),
    // and the pools hold what they keep.
    let mut sessions_on_old = 0;
    let mut sessions_on_new = Vec::new();
    for app in [APP, LATE_APP] {
        sessions_on_old += pool_sessions_on(old_port, app).await;
        sessions_on_new.push(pool_sessions_on(ports[1], app).await);
    }
    writer_pool.close().await;
    late_pool.close().await;
    drop(rejoined);

    // Every definite error of the late pool is a failure: nothing failed
    // over while it ran.
    let late_failed: Vec<&Call> = late_calls
        .iter()
        .filter(|c| !matches!(c.told, Told::Ok))
        .collect();
    calls.extend(late_calls.iter().cloned());

    let stored = keys_on(ports[1], "t").await;
    let mut lost = 0;
    let mut stored_after_error = 0;
    let mut unknown = 0;
    let mut unknown_unrelated = Vec::new();
    let mut oks = 0;
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut told_keys = HashSet::new();
    for c in &calls {
        told_keys.insert(c.key);
        match &c.told {
            Told::Ok => {
                oks += 1;
                if !stored.contains(&c.key) {
                    lost += 1;
                }
            }
            Told::Unknown(e) => {
                unknown += 1;
                // On the wire when the primary went: sent before it was
                // gone, answered (or not) after it began to go.
                if !(c.start < stop_done && c.end >= stop_began) {
                    unknown_unrelated.push(format!("key {}: {e}", c.key));
                }
                *errors
                    .entry(format!("unknown: {}", first_words(e)))
                    .or_default() += 1;
            }
            Told::Failed(e) => {
                if stored.contains(&c.key) {
                    stored_after_error += 1;
                }
                *errors
                    .entry(format!("failed: {}", first_words(e)))
                    .or_default() += 1;
            }
        }
    }
    let phantom = stored.iter().filter(|k| !told_keys.contains(k)).count();
    let first_ok_after = |t: Instant| {
        calls
            .iter()
            .filter(|c| matches!(c.told, Told::Ok) && c.end >= t)
            .map(|c| c.end)
            .min()
            .map(|end| end - t)
    };
    let resume = first_ok_after(ready);
    let resume_from_promotion = first_ok_after(promoted);
    let longest = calls
        .iter()
        .map(|c| c.end - c.start)
        .max()
        .unwrap_or_default();
    eprintln!(
        "failover: {} calls, {oks} Ok, {unknown} outcome unknown, {} rows stored; \
         lost {lost}, stored after an error {stored_after_error}, phantom {phantom}; \
         stop {:?}, promote {:?}, clear {:?}; first Ok {resume:?} after the failover \
         ({resume_from_promotion:?} after the promotion); longest call {longest:?}; \
         pool sessions on the old primary {sessions_on_old}, on the new {sessions_on_new:?} \
         (writers', late pool's); \
         errors {errors:?}",
        calls.len(),
        stored.len(),
        stop_done - stop_began,
        promoted - stop_done,
        ready - promoted,
    );

    assert_eq!(lost, 0, "acknowledged rows missing on the promoted server");
    assert_eq!(
        stored_after_error, 0,
        "rows stored whose caller got a definite error"
    );
    assert_eq!(phantom, 0, "rows stored that no caller sent");
    assert!(
        unknown_unrelated.is_empty(),
        "outcome unknown for rows not on the wire when the primary stopped: {unknown_unrelated:?}"
    );
    assert!(
        unknown <= WRITERS,
        "more outcome-unknown calls ({unknown}) than writers ({WRITERS})"
    );
    let resume = resume.expect("no row acknowledged after the failover");
    assert!(
        resume <= RESUME_BOUND,
        "writes resumed {resume:?} after the failover (bound {RESUME_BOUND:?})"
    );
    assert!(
        late_failed.is_empty(),
        "the pool opened after the old primary rejoined failed calls: {:?}",
        &late_failed[..late_failed.len().min(5)]
    );
    assert_eq!(
        sessions_on_old, 0,
        "pool connections on the read-only old primary"
    );
    assert!(
        sessions_on_new[1] >= 1,
        "the late pool holds no connection on the promoted server"
    );
}

/// The first words of an error message, to count errors by kind.
fn first_words(e: &str) -> String {
    e.split_whitespace().take(6).collect::<Vec<_>>().join(" ")
}

/// A server fenced with `default_transaction_read_only` (as an HA manager
/// does with a primary it demotes) under a pool's open connections: a
/// write there fails with 25006 read_only_sql_transaction (nothing ran),
/// and the connection leaves the pool instead of failing every later
/// write. New connections, `target_session_attrs=read-write`, go to the
/// other host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_on_a_server_turned_read_only_are_retired() {
    const MAX_SIZE: usize = 4;
    let servers = [PgServer::start(&[]), PgServer::start(&[])];
    let ports = [servers[0].port(), servers[1].port()];
    for port in ports {
        connect(port)
            .await
            .batch_execute("CREATE TABLE r (k BIGINT PRIMARY KEY, w INT NOT NULL)")
            .await
            .expect("create table");
    }
    let pool = Arc::new(pool(ports, MAX_SIZE, APP));
    let sql = "INSERT INTO r (k, w) VALUES ($1, $2)";
    // Every connection of the pool opened, on the first host.
    let warm: Vec<_> = (0..100i64)
        .map(|k| {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move { pool.execute(sql, &[&k, &0i32]).await })
        })
        .collect();
    for w in warm {
        w.await.unwrap().expect("insert before the fencing");
    }
    assert_eq!(keys_on(ports[0], "r").await.len(), 100);
    let open = pool_sessions_on(ports[0], APP).await;
    assert!(open >= 1, "no pool session on the first host");

    set_system(ports[0], "default_transaction_read_only = on").await;
    wait_until(
        ports[0],
        "SELECT current_setting('transaction_read_only') = 'on'",
    )
    .await;
    // The pool's idle sessions read the new setting before their next
    // command; give the signal time to reach every backend.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut read_only = Vec::new();
    let mut ok = Vec::new();
    let mut other = Vec::new();
    for k in 1_000..1_050i64 {
        match pool.execute(sql, &[&k, &1i32]).await {
            Ok(_) => ok.push(k),
            Err(e) if e.code() == Some("25006") => read_only.push(k),
            Err(e) => other.push(format!("{k}: {e}")),
        }
    }
    let on_first = keys_on(ports[0], "r").await;
    let on_second = keys_on(ports[1], "r").await;
    let sessions_on_fenced = pool_sessions_on(ports[0], APP).await;
    eprintln!(
        "read-only: {open} pool sessions on the fenced host before; {} calls refused \
         (25006), {} Ok, other {other:?}; pool sessions on it after: {sessions_on_fenced}",
        read_only.len(),
        ok.len()
    );
    pool.close().await;

    assert!(other.is_empty(), "unexpected errors: {other:?}");
    // One refusal at most per connection open when the fencing came.
    assert!(
        read_only.len() <= MAX_SIZE,
        "{} writes refused as read-only: the pool kept its connections on the \
         read-only server",
        read_only.len()
    );
    assert!(
        ok.iter()
            .all(|k| on_second.contains(k) && !on_first.contains(k)),
        "acknowledged rows not on the writable host"
    );
    assert!(
        read_only
            .iter()
            .all(|k| !on_first.contains(k) && !on_second.contains(k)),
        "a row refused as read-only was stored"
    );
    assert_eq!(
        sessions_on_fenced, 0,
        "pool connections left on the read-only server"
    );
}
