//! batchpool behind PgBouncer in transaction mode.
//!
//! The shared suites also run behind PgBouncer (`pgbouncer::name` in
//! `coalesce.rs`, `lifecycle.rs`, `transactions.rs`, …). This file holds
//! what needs more than one pool: two OS processes writing through ONE
//! PgBouncer, so that their pools share server connections without sharing
//! tokio-postgres' process-global statement counter (both name their
//! prepared statements `s0`, `s1`, …). Each process writes its own rows
//! into its own table; the two tables have the same column types, so a
//! statement bound on a server connection where the other process prepared
//! a statement of the same name would succeed silently, in the wrong table.
//! The parent checks that every row landed in its own table exactly once.
//! (With named statements the collisions do not depend on the two children
//! overlapping in time: PgBouncer resets nothing between transactions, so
//! statements one child prepared stay on the server connections the other
//! gets. The children still start together, behind a rendezvous.)
//!
//! Against named statements (batchpool before its unnamed mode) the
//! default-mode test failed like this: each child got about a third to a
//! half of its 2,000 calls back as errors (`26000 prepared statement "sN"
//! does not exist`, `42P05 prepared statement "sN" already exists`, `08P01
//! bind message supplies 2 parameters, but prepared statement "sN" requires
//! 16`), and of the calls acknowledged, hundreds had written into the OTHER
//! child's table (e.g. table `a`: 1,347 rows, 489 of them `b`'s).
//!
//! The children are this test binary run again (`--exact
//! pgbouncer::child_process`), selected by environment variables;
//! `child_process` does nothing in a normal run.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use batchpool::postgres::{Pool, Statements};
use serde::{Deserialize, Serialize};

/// Rows each child writes.
const ROWS: i32 = 2_000;
/// Concurrent callers in each child.
const CALLERS: i32 = 64;
/// Client connections of each child's pool: with two children, four times
/// the bouncer's server connections for the database.
const CLIENTS: usize = 2 * common::BOUNCER_POOL_SIZE;

/// Selects the child role (`a` or `b`: also its table).
const ROLE_VAR: &str = "BATCHPOOL_PGBOUNCER_CHILD";
/// The URL the child's pool connects to.
const URL_VAR: &str = "BATCHPOOL_PGBOUNCER_CHILD_URL";
/// Marks the child's lines on its stdout.
const MARK: &str = "@@child@@";

/// What a child reports when it is done.
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    role: String,
    /// Rows acknowledged with the caller's own `RETURNING` row.
    ok: u64,
    /// Calls that failed.
    errors: u64,
    /// Calls acknowledged with another row than the caller's.
    wrong_rows: u64,
    /// Distinct error messages, with how often each occurred.
    error_kinds: BTreeMap<String, u64>,
    batches: u64,
    rows_per_batch: f64,
}

/// The child's side: `BATCHPOOL_PGBOUNCER_CHILD=a|b` and
/// `BATCHPOOL_PGBOUNCER_CHILD_URL` set by [`two_processes`]; without them
/// (any normal run) there is nothing to do.
#[test]
fn child_process() {
    let Ok(role) = std::env::var(ROLE_VAR) else {
        return;
    };
    let url = std::env::var(URL_VAR).expect("the child's URL");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(child(role, url));
    println!("{MARK} RESULT {}", serde_json::to_string(&report).unwrap());
}

async fn child(role: String, url: String) -> Report {
    let pool = Pool::builder(&url)
        .max_size(CLIENTS)
        .build()
        .expect("build the child's pool");
    // Both children start writing together (see `two_processes`).
    println!("{MARK} READY");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    assert_eq!(go.trim(), "GO", "the parent's start signal");

    let sql = format!("INSERT INTO {role} (k, v) VALUES ($1, $2) RETURNING k, v");
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let (pool, sql, role) = (pool.clone(), sql.clone(), role.clone());
        callers.spawn(async move {
            let mut outcomes = Vec::new();
            for k in (caller..ROWS).step_by(CALLERS as usize) {
                let v = format!("{role}:{k}");
                let r = pool.execute(&sql, &[&k, &v]).await.map(|out| {
                    let row = out.returned().expect("RETURNING row");
                    (row.get::<_, i32>(0), row.get::<_, String>(1)) == (k, v)
                });
                outcomes.push(r);
            }
            outcomes
        });
    }
    let mut report = Report {
        role,
        ok: 0,
        errors: 0,
        wrong_rows: 0,
        error_kinds: BTreeMap::new(),
        batches: 0,
        rows_per_batch: 0.0,
    };
    while let Some(outcomes) = callers.join_next().await {
        for r in outcomes.expect("caller task") {
            match r {
                Ok(true) => report.ok += 1,
                Ok(false) => report.wrong_rows += 1,
                Err(e) => {
                    report.errors += 1;
                    *report.error_kinds.entry(error_kind(&e)).or_insert(0) += 1;
                }
            }
        }
    }
    let stats = pool.stats();
    report.batches = stats.batches;
    report.rows_per_batch = stats.rows_per_batch();
    pool.close().await;
    report
}

/// An error's message with statement names (`"s123"`) made generic, so
/// that alike errors are counted together.
fn error_kind(e: &batchpool::Error) -> String {
    let message = e.to_string();
    let mut out = String::with_capacity(message.len());
    let mut rest = message.as_str();
    while let Some(at) = rest.find("\"s") {
        out.push_str(&rest[..at + 2]);
        rest = &rest[at + 2..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push('N');
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// A child process of this binary, its stdout lines arriving on a channel.
struct Running {
    role: &'static str,
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn start(role: &'static str, url: &str) -> Running {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "pgbouncer::child_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_VAR, role)
            .env(URL_VAR, url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a child process");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest may have written `test child_process ... ` first.
                if let Some((_, mine)) = line.split_once(MARK) {
                    if tx.send(mine.trim().to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Running { role, child, lines }
    }

    /// The child's next marked line starting with `word`, within `limit`
    /// (a bound for a bug, not a pace: the child is certain to get there).
    fn expect(&mut self, word: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(word) {
                        return rest.trim().to_string();
                    }
                }
                Err(e) => {
                    let _ = self.child.kill();
                    let status = self.child.wait();
                    panic!(
                        "child {} never said {word} ({e:?}; exit: {status:?}); its stderr is above",
                        self.role
                    );
                }
            }
        }
    }

    fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"GO\n").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A fresh database with tables `a` and `b (k int, v text)`: its direct URL.
async fn two_tables() -> String {
    let url = common::pg_fresh_db().await;
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("CREATE TABLE a (k int, v text); CREATE TABLE b (k int, v text);")
        .await
        .unwrap();
    url
}

/// Every row of `table` (read directly from the server), as `(k, v)`.
async fn rows(direct: &str, table: &str) -> Vec<(i32, String)> {
    let (client, conn) = tokio_postgres::connect(direct, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .query(&format!("SELECT k, v FROM {table} ORDER BY k, v"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Two children, `a` and `b`, each writing [`ROWS`] rows into its own
/// table through `url_for(database)`, started together; then every row must
/// be in its own table, exactly once, and each child must report no error.
async fn two_processes(mode: Option<&str>) {
    let direct = two_tables().await;
    let url = common::with_statements(&common::bouncer_url_for(&direct), mode);
    eprintln!("children connect to {url}");
    let mut children = [Running::start("a", &url), Running::start("b", &url)];
    for child in &mut children {
        child.expect("READY", Duration::from_secs(120));
    }
    for child in &mut children {
        child.go();
    }
    let mut reports = Vec::new();
    for child in &mut children {
        let json = child.expect("RESULT", Duration::from_secs(600));
        let report: Report = serde_json::from_str(&json).expect("a child's report");
        eprintln!("child {}: {report:?}", child.role);
        reports.push(report);
        let status = child.child.wait().unwrap();
        assert!(
            status.success(),
            "child {} exited with {status}",
            child.role
        );
    }

    let mut problems = Vec::new();
    for report in &reports {
        if report.errors != 0 || report.wrong_rows != 0 || report.ok != ROWS as u64 {
            problems.push(format!(
                "child {}: {} rows acknowledged, {} errors, {} acknowledged with another row; \
                 errors: {:?}",
                report.role, report.ok, report.errors, report.wrong_rows, report.error_kinds
            ));
        }
    }
    for table in ["a", "b"] {
        let found = rows(&direct, table).await;
        let mut seen = BTreeMap::new();
        let mut foreign = 0;
        for (k, v) in &found {
            if *v == format!("{table}:{k}") {
                *seen.entry(*k).or_insert(0) += 1;
            } else {
                foreign += 1;
            }
        }
        let missing = (0..ROWS).filter(|k| !seen.contains_key(k)).count();
        let doubled = seen.values().filter(|&&n| n > 1).count();
        eprintln!(
            "table {table}: {} rows, {missing} of its own missing, {doubled} doubled, \
             {foreign} written by the other child",
            found.len()
        );
        if found.len() != ROWS as usize || missing + doubled + foreign != 0 {
            problems.push(format!(
                "table {table}: {} rows ({missing} missing, {doubled} doubled, {foreign} foreign)",
                found.len()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for report in &reports {
        assert!(
            report.rows_per_batch > 1.0,
            "child {}: {CALLERS} callers on {CLIENTS} connections were not coalesced: {report:?}",
            report.role
        );
    }
}

/// Both children with `statements=unnamed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_through_one_pgbouncer_unnamed() {
    two_processes(Some("unnamed")).await;
}

/// Both children with the default statement mode (`auto`): the pool must
/// notice that it talks to a pooler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_through_one_pgbouncer_auto() {
    two_processes(None).await;
}

/// Writes rows `(k, "<table>:k")` for `k` in `0..n` into `table`, one
/// concurrent caller per row, each acknowledged.
async fn write_concurrently(pool: &Pool, table: &str, n: i32) {
    let sql = format!("INSERT INTO {table} (k, v) VALUES ($1, $2)");
    let mut callers = tokio::task::JoinSet::new();
    for k in 0..n {
        let (pool, sql, v) = (pool.clone(), sql.clone(), format!("{table}:{k}"));
        callers.spawn(async move {
            pool.execute(&sql, &[&k, &v])
                .await
                .map(|out| out.rows_affected())
        });
    }
    while let Some(r) = callers.join_next().await {
        assert_eq!(r.unwrap().expect("insert"), 1);
    }
}

/// `table` (read directly) holds exactly the rows [`write_concurrently`]
/// wrote.
async fn assert_written(direct: &str, table: &str, n: i32) {
    let expected: Vec<(i32, String)> = (0..n).map(|k| (k, format!("{table}:{k}"))).collect();
    let mut found = rows(direct, table).await;
    found.sort();
    assert_eq!(found, expected, "table {table}");
}

/// The default mode on a direct connection still writes every row, with
/// named (prepared, cached) statements: the one connection has some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_on_a_direct_connection_uses_named_statements() {
    let direct = two_tables().await;
    let pool = Pool::builder(&direct).max_size(1).build().unwrap();
    write_concurrently(&pool, "a", 500).await;
    assert_written(&direct, "a", 500).await;
    assert!(pool.stats().rows_per_batch() > 1.0, "{:?}", pool.stats());
    let client = pool.get().await.unwrap();
    let prepared = client
        .simple_query("SELECT count(*) FROM pg_prepared_statements")
        .await
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        });
    let prepared: i64 = prepared.expect("a count").parse().unwrap();
    assert!(
        prepared > 0,
        "a direct connection in the default mode should use named statements"
    );
}

/// Unnamed mode from the `key=value` form of the connection string.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_value_connection_string_selects_unnamed_mode() {
    let direct = two_tables().await;
    let through = common::bouncer_url_for(&direct);
    let parsed: tokio_postgres::Config = common::strip_param(&through, "statements")
        .0
        .parse()
        .unwrap();
    let kv = format!(
        "host=127.0.0.1 port={} user={} dbname={} statements=unnamed",
        parsed.get_ports()[0],
        parsed.get_user().unwrap(),
        parsed.get_dbname().unwrap()
    );
    let pool = Pool::builder(&kv).max_size(CLIENTS).build().unwrap();
    write_concurrently(&pool, "b", 300).await;
    assert_written(&direct, "b", 300).await;
}

/// Unnamed mode from `PoolBuilder::statements`, the URL naming no mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builder_selects_unnamed_mode() {
    let direct = two_tables().await;
    let through = common::with_statements(&common::bouncer_url_for(&direct), None);
    let pool = Pool::builder(&through)
        .statements(Statements::Unnamed)
        .max_size(CLIENTS)
        .build()
        .unwrap();
    write_concurrently(&pool, "a", 300).await;
    assert_written(&direct, "a", 300).await;
    assert!(pool.stats().rows_per_batch() > 1.0, "{:?}", pool.stats());
}

/// The fixture itself: PgBouncer runs in transaction mode, and its server
/// connections are shared: many client connections, each running
/// statements, never see more than `default_pool_size` server backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bouncer_shares_few_server_connections_in_transaction_mode() {
    let direct = common::pg_fresh_db().await;
    let through = common::strip_param(&common::bouncer_url_for(&direct), "statements").0;

    let admin = common::bouncer_admin_url();
    let (console, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PgBouncer admin console ({admin}): {e}"));
    tokio::spawn(conn);
    let mode = console
        .simple_query("SHOW CONFIG")
        .await
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("pool_mode") => {
                r.get(1).map(str::to_owned)
            }
            _ => None,
        });
    assert_eq!(mode.as_deref(), Some("transaction"), "PgBouncer pool_mode");

    let mut clients = Vec::new();
    for _ in 0..3 * common::BOUNCER_POOL_SIZE {
        let (client, conn) = tokio_postgres::connect(&through, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        clients.push(client);
    }
    let mut pids = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let rounds = clients
            .iter()
            .map(|c| c.simple_query("SELECT pg_backend_pid()"));
        for messages in futures_util::future::join_all(rounds).await {
            for m in messages.unwrap() {
                if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                    pids.insert(r.get(0).unwrap().to_string());
                }
            }
        }
    }
    assert!(
        !pids.is_empty() && pids.len() <= common::BOUNCER_POOL_SIZE,
        "{} client connections used {} server connections",
        clients.len(),
        pids.len()
    );
}

/// The database's own types (an enum, a domain over an enum array, a
/// composite) behind the bouncer in unnamed mode: parameters, `RETURNING`
/// columns and queries of them, from many callers on many connections.
/// tokio-postgres looks such types up with a named statement of its own;
/// each connection must have them before a statement needing them is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_types_work_in_unnamed_mode() {
    let direct = common::pg_fresh_db().await;
    let (admin, conn) = tokio_postgres::connect(&direct, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    admin
        .batch_execute(
            "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
             CREATE DOMAIN moods AS mood[];
             CREATE TYPE pair AS (a int4, b text);
             CREATE TABLE m (id serial PRIMARY KEY, k int4, feel mood, many moods, p pair)",
        )
        .await
        .unwrap();
    let through = common::bouncer_url_for(&direct);
    let pool = Pool::builder(&through).max_size(CLIENTS).build().unwrap();
    let mut callers = tokio::task::JoinSet::new();
    for k in 0..400i32 {
        let pool = pool.clone();
        callers.spawn(async move {
            // Coalesced: the enum is a RETURNING column.
            let one = pool
                .execute(
                    "INSERT INTO m (k, feel) VALUES ($1, 'ok') RETURNING feel::text, k",
                    &[&k],
                )
                .await
                .expect("enum insert");
            let row = one.returned().expect("returned row");
            assert_eq!((row.get::<_, String>(0), row.get::<_, i32>(1)), ("ok".into(), k));
            // Passed through: the domain and composite come back as
            // columns of the catalog types.
            let two = pool
                .execute(
                    "INSERT INTO m (k, many, p) VALUES ($1, ARRAY['sad', 'happy']::mood[], ROW($1, 'x')) \
                     RETURNING many, p",
                    &[&k],
                )
                .await
                .expect("domain and composite insert");
            assert_eq!(two.rows_affected(), 1);
            let rows = pool
                .query("SELECT feel, many, p FROM m WHERE k = $1", &[&k])
                .await
                .expect("query");
            assert_eq!(rows.len(), 2);
        });
    }
    while let Some(r) = callers.join_next().await {
        r.unwrap();
    }
    let count: i64 = admin
        .query_one("SELECT count(*) FROM m", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 800);
}

/// A transaction whose statements are all new texts to the pool: learning
/// a text's types inside the open transaction must not end it. Behind the
/// bouncer and on a direct connection in unnamed mode, `execute`,
/// `query` and `execute_and_commit` of texts never seen before commit
/// everything the transaction wrote, and a rollback undoes all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_of_new_texts_keep_every_statement() {
    let direct = two_tables().await;
    for url in [
        common::bouncer_url_for(&direct),
        common::with_statements(&direct, Some("unnamed")),
    ] {
        let pool = Pool::builder(&url).max_size(2).build().unwrap();
        let fresh = pool.clone();
        for round in 0..3i32 {
            // Each round's texts are new: a different literal each.
            let mut tx = pool.begin();
            let k = round * 10;
            tx.execute(
                &format!("INSERT INTO a (k, v) VALUES ($1, 'r{round}')"),
                &[&k],
            )
            .await
            .unwrap();
            let seen = tx
                .query(
                    &format!("SELECT k FROM a WHERE v = 'r{round}' AND k = $1"),
                    &[&k],
                )
                .await
                .unwrap();
            assert_eq!(seen.len(), 1);
            let k2 = k + 1;
            tx.execute_and_commit(
                &format!("INSERT INTO a (k, v) VALUES ($1, 'r{round}-last')"),
                &[&k2],
            )
            .await
            .unwrap();
            let mut tx = fresh.begin();
            let k3 = k + 2;
            tx.execute(
                &format!("INSERT INTO b (k, v) VALUES ($1, 'x{round}')"),
                &[&k3],
            )
            .await
            .unwrap();
            tx.execute(&format!("UPDATE b SET v = 'y{round}' WHERE k = $1"), &[&k3])
                .await
                .unwrap();
            tx.rollback().await.unwrap();
        }
        let a = rows(&direct, "a").await;
        assert_eq!(a.len(), 6, "{url}: every committed row, {a:?}");
        assert!(rows(&direct, "b").await.is_empty(), "{url}: rolled back");
        let (admin, conn) = tokio_postgres::connect(&direct, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        admin.batch_execute("TRUNCATE a, b").await.unwrap();
    }
}

/// Behind the bouncer a connection from `Pool::get` that comes back inside
/// a transaction holds a server connection, and the next batch would run
/// inside that transaction: the pool ends it first, and later coalesced
/// inserts commit on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lent_connection_left_in_a_transaction_is_rolled_back() {
    let direct = two_tables().await;
    let pool = Pool::builder(&common::bouncer_url_for(&direct))
        .max_size(1)
        .build()
        .unwrap();
    // The insert's text is learned first (learning it later would end the
    // transaction by itself).
    let explained = pool
        .explain("INSERT INTO a (k, v) VALUES ($1, $2)")
        .await
        .unwrap();
    assert!(explained.is_coalesced(), "{explained:?}");
    let client = pool.get().await.unwrap();
    client
        .batch_execute("BEGIN; INSERT INTO a (k, v) VALUES (-1, 'left open')")
        .await
        .unwrap();
    drop(client);
    write_concurrently(&pool, "a", 50).await;
    assert_written(&direct, "a", 50).await;
}

type Sql = dyn tokio_postgres::types::ToSql + Sync;

/// One row's outcome, comparable between the pool and the plain driver:
/// (rows affected, exact), or the server's SQLSTATE and message.
type RowOutcome = Result<(u64, bool), (String, String)>;

/// Rows `(k, v, amount, code, flag, data)` for `0..n`, with the faults
/// `bad` names at their rows: `dup` (k of row 10 again), `null` (v NULL
/// into NOT NULL), `long` (v too long for varchar(6)), `check` (amount
/// breaks its CHECK), `char` (code too long for char(3)).
fn fault_rows(n: i32, bad: &[(i32, &str)]) -> Vec<Vec<Box<Sql>>> {
    (0..n)
        .map(|i| {
            let fault = bad.iter().find(|(at, _)| *at == i).map(|(_, f)| *f);
            let k: Box<Sql> = Box::new(if fault == Some("dup") { 10 } else { i });
            let v: Box<Sql> = match fault {
                Some("null") => Box::new(None::<String>),
                Some("long") => Box::new(format!("toolong{i}")),
                _ => Box::new(format!("v{i}")),
            };
            let amount: Box<Sql> = Box::new(if fault == Some("check") {
                1e9f64
            } else {
                f64::from(i) / 4.0
            });
            let code: Box<Sql> = Box::new(if fault == Some("char") {
                "abcd".to_string()
            } else {
                format!("c{}", i % 10)
            });
            let flag: Box<Sql> = Box::new(if i % 3 == 0 { None } else { Some(i % 2 == 0) });
            let data: Box<Sql> = Box::new(vec![i as u8; (i % 5) as usize]);
            vec![k, v, amount, code, flag, data]
        })
        .collect()
}

const FAULT_TABLE: &str = "(id bigserial PRIMARY KEY, k int UNIQUE, v varchar(6) NOT NULL, \
    amount double precision CHECK (amount < 1e6), code char(3), flag bool, data bytea, \
    at timestamptz DEFAULT now())";

fn fault_insert(table: &str) -> String {
    format!("INSERT INTO {table} (k, v, amount, code, flag, data) VALUES ($1, $2, $3, $4, $5, $6)")
}

/// SQLSTATE and message of a server error, the table's name (which the
/// message may name, also in a constraint's name) replaced by `T`.
fn db_outcome(db: Option<&tokio_postgres::error::DbError>, table: &str) -> (String, String) {
    match db {
        Some(db) => (
            db.code().code().to_string(),
            db.message().replace(table, "T"),
        ),
        None => ("no code".into(), "not a server error".into()),
    }
}

/// Each row's own single-row INSERT on the plain driver, directly.
async fn one_by_one(url: &str, table: &str, rows: &[Vec<Box<Sql>>]) -> Vec<RowOutcome> {
    let sql = fault_insert(table);
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut out = Vec::new();
    for row in rows {
        let refs: Vec<&Sql> = row.iter().map(|v| &**v).collect();
        out.push(match client.execute(&sql, &refs).await {
            Ok(n) => Ok((n, true)),
            Err(e) => Err(db_outcome(e.as_db_error(), table)),
        });
    }
    out
}

/// `execute_many` of `rows` through `url`: each row's outcome, and the
/// pool's `bulk_statements`.
async fn many_through(
    url: &str,
    copy: Option<usize>,
    max_rows: usize,
    table: &str,
    rows: &[Vec<Box<Sql>>],
) -> (Vec<RowOutcome>, u64) {
    let pool = Pool::builder(url)
        .max_size(2)
        .copy_threshold(copy)
        .batching(batchpool::BatchConfig::default().max_rows(max_rows))
        .build()
        .unwrap();
    let refs: Vec<Vec<&Sql>> = rows
        .iter()
        .map(|r| r.iter().map(|v| &**v).collect())
        .collect();
    let out = pool
        .execute_many(&fault_insert(table), &refs)
        .await
        .expect("the batch runs");
    let outcomes = out
        .into_iter()
        .map(|r| match r {
            Ok(o) => Ok((o.rows_affected(), o.is_exact())),
            Err(e) => Err(db_outcome(e.as_db_error(), table)),
        })
        .collect();
    let bulk = pool.stats().bulk_statements;
    pool.close().await;
    (outcomes, bulk)
}

/// What `table` holds, in insert order (the serial id), without the id
/// and the default timestamp.
async fn contents(client: &tokio_postgres::Client, table: &str) -> Vec<String> {
    client
        .query(
            &format!(
                "SELECT format('%s|%s|%s|%s|%s|%s', k, v, amount, code, flag, data) \
                 FROM {table} ORDER BY id"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Through PgBouncer in transaction mode (unnamed statements), a plain
/// INSERT's large statements go out as COPY (prepared and closed inside
/// the transaction that runs it) and its smaller ones as the one
/// `unnest` text; either way every row gets exactly what its own
/// single-row INSERT gets on a direct connection (a count of 1, or that
/// statement's own error: a duplicate key, a NULL into NOT NULL, a value
/// too long for its varchar or char column, a CHECK), the rows around a
/// failing row unharmed, and the rows land in the callers' order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_and_unnest_through_pgbouncer_give_each_row_its_own_outcome() {
    let direct = common::pg_fresh_db().await;
    let through = common::bouncer_url_for(&direct);
    let (admin, conn) = tokio_postgres::connect(&direct, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    for table in ["plain", "copied", "unnested"] {
        admin
            .batch_execute(&format!("CREATE TABLE {table} {FAULT_TABLE}"))
            .await
            .unwrap();
    }
    let bad = [
        (0, "null"),
        (37, "dup"),
        (150, "long"),
        (151, "check"),
        (200, "char"),
        (298, "dup"),
        (299, "check"),
    ];
    let rows = fault_rows(300, &bad);
    let plain = one_by_one(&direct, "plain", &rows).await;
    assert_eq!(plain.iter().filter(|r| r.is_err()).count(), bad.len());
    let (copied, bulk) = many_through(&through, Some(64), 1000, "copied", &rows).await;
    assert!(bulk > 0, "no statement went out as COPY through the pooler");
    assert_eq!(
        copied, plain,
        "COPY through the pooler differs from single INSERTs"
    );
    let (unnested, no_bulk) = many_through(&through, None, 40, "unnested", &rows).await;
    assert_eq!(no_bulk, 0, "COPY was used while turned off");
    assert_eq!(
        unnested, plain,
        "unnest through the pooler differs from single INSERTs"
    );
    let expected = contents(&admin, "plain").await;
    assert_eq!(expected.len(), 300 - bad.len());
    assert_eq!(contents(&admin, "copied").await, expected);
    assert_eq!(contents(&admin, "unnested").await, expected);
}

/// The unnest text is what a plain INSERT's multi-row statements are sent
/// as through the pooler (the server connection's last query shows it),
/// and concurrent callers coalesced into it each get their own row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unnamed_mode_sends_the_unnest_text() {
    let direct = two_tables().await;
    let pool = Pool::builder(&common::bouncer_url_for(&direct))
        .max_size(1)
        .copy_threshold(None)
        .build()
        .unwrap();
    // Eight rows: one statement (an explicit batch of more rows would end
    // with the COMMIT of its last pipelined pair).
    let data: Vec<(i32, String)> = (0..8).map(|k| (k, format!("a:{k}"))).collect();
    let rows: Vec<[&Sql; 2]> = data.iter().map(|(k, v)| [k as _, v as _]).collect();
    for r in pool
        .execute_many("INSERT INTO a (k, v) VALUES ($1, $2)", &rows)
        .await
        .unwrap()
    {
        assert_eq!(r.unwrap().rows_affected(), 1);
    }
    pool.close().await;
    let (admin, conn) = tokio_postgres::connect(&direct, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let last: Vec<String> = admin
        .query(
            "SELECT query FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        last.iter().any(|q| q.contains("SELECT * FROM unnest($1::")),
        "no server connection ran the unnest text: {last:?}"
    );
    assert_written(&direct, "a", 8).await;
}
