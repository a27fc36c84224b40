//! insert_storm: the second seed's vtbench run — many threads each sending
//! single-row INSERTs — comparing three ways to send one write:
//!
//! * `explicit`: `BEGIN`, `INSERT`, `COMMIT` per operation on a plain pool
//!   (deadpool-postgres / mysql_async's own pool): three round trips;
//! * `elided`: batchpool's `Pool::atomic` of the one statement, sent alone in
//!   autocommit: one round trip;
//! * `coalesced`: batchpool's `Pool::execute` (rows of concurrent threads
//!   coalesced into multi-row INSERTs when the pool is saturated).
//!
//! ```text
//! cargo bench --bench insert_storm -- --threads 25 --count 1000
//! cargo bench --bench insert_storm -- --targets postgres \
//!     --pg-url postgresql://postgres@127.0.0.1:5432/postgres --json storm.json
//! cargo bench --bench insert_storm -- --targets postgres --statements unnamed
//! cargo bench --bench insert_storm -- --targets postgres --pool-size 6 \
//!     --pg-url postgresql://postgres@127.0.0.1:6432/postgres   # through PgBouncer
//! ```
//!
//! PostgreSQL's statement mode (`--statements auto|named|unnamed`, default
//! the `--pg-url`'s `statements=`, else `auto`) goes to batchpool's pools,
//! and `explicit` sends the same kind: a cached prepared statement, or an
//! unnamed one (`execute_typed`) when batchpool sends unnamed ones (behind
//! a transaction-mode pooler such as PgBouncer, where `auto` resolves to
//! unnamed). The bench works in the `--pg-url` database itself (table
//! `storm`), so PgBouncer needs no wildcard entry.
//!
//! Targets: `postgres` (table `storm`), `mariadb` (InnoDB table `storm`) and
//! `mariadb-blackhole` (BLACKHOLE engine table `storm_blackhole`, as in the
//! seed: the server parses, logs and commits but stores nothing). Without
//! `--pg-url` / `--mysql-url` the bench uses a fresh database on `PG_URL` /
//! `MYSQL_URL`, else on a throwaway server. Output per run follows vtbench's
//! format (plus a `<1ms` bucket), then one summary line per target with QPS
//! ratios against `explicit`.

// A bench uses only part of the test harness.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "ycsb/statements.rs"]
mod statements;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use batchpool::postgres::Statements;
use clap::{Parser, ValueEnum};
use serde::Serialize;

/// The seed's statement, into `{table}`.
fn default_sql(table: &str) -> String {
    format!("INSERT INTO {table} (i, c) VALUES (1, 'record one')")
}

/// The default `--targets`: every target.
const ALL_TARGETS: &str = "postgres,mariadb,mariadb-blackhole";
/// The default `--modes`: every mode.
const ALL_MODES: &str = "explicit,elided,coalesced";

#[derive(Parser, Debug)]
#[command(about = "vtbench-style insert storm: explicit vs elided vs coalesced transactions")]
struct Args {
    /// Concurrent client tasks ("threads" in vtbench).
    #[arg(long, default_value_t = 25)]
    threads: usize,
    /// Operations per thread.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// The statement each operation sends, on every target (default: an
    /// INSERT into a `(i int, c text)` table the bench creates and drops).
    #[arg(long)]
    sql: Option<String>,
    /// Targets to run, in this order.
    #[arg(long, value_delimiter = ',', default_value = ALL_TARGETS)]
    targets: Vec<Kind>,
    /// PostgreSQL to use (default: a fresh database on `PG_URL`, else on a
    /// throwaway cluster); may be a transaction-mode PgBouncer's, and may
    /// carry batchpool's `statements=` (taken out for deadpool-postgres).
    #[arg(long)]
    pg_url: Option<String>,
    /// PostgreSQL statement mode of batchpool's pools (`elided`,
    /// `coalesced`) and of `explicit`: `named` (prepared, cached), `unnamed`
    /// (one unnamed Parse/Bind/Execute, `execute_typed` for `explicit`:
    /// what a transaction-mode pooler passes) or `auto` (unnamed when a
    /// pooler is detected). Default: --pg-url's `statements=`, else auto.
    #[arg(long, value_name = "auto|named|unnamed", value_parser = statements::parse)]
    statements: Option<Statements>,
    /// MariaDB / MySQL to use (default: a fresh database on `MYSQL_URL`,
    /// else on a throwaway server).
    #[arg(long)]
    mysql_url: Option<String>,
    /// Modes to run, in this order.
    #[arg(long, value_delimiter = ',', default_value = ALL_MODES)]
    modes: Vec<Mode>,
    /// Pooled connections per pool (default: one per thread, like vtbench).
    #[arg(long)]
    pool_size: Option<usize>,
    /// Untimed operations per thread before each mode (opens connections,
    /// prepares statements).
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Run all modes this many times, interleaved (explicit, elided,
    /// coalesced, explicit, ...); the summary uses each mode's median QPS.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    /// BEGIN / statement / COMMIT on a plain pool (deadpool-postgres;
    /// deadpool over bare mysql_async connections).
    Explicit,
    /// `Pool::atomic` of the one statement.
    Elided,
    /// `Pool::execute` (coalescing).
    Coalesced,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Explicit => "explicit",
            Mode::Elided => "elided",
            Mode::Coalesced => "coalesced",
        }
    }
}

/// Which database and table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// PostgreSQL, table `storm`.
    Postgres,
    /// MariaDB / MySQL, InnoDB table `storm`.
    Mariadb,
    /// MariaDB / MySQL, BLACKHOLE engine table `storm_blackhole`.
    MariadbBlackhole,
}

/// A database under test.
struct Target {
    kind: Kind,
    label: String,
    /// Connection string for the drivers (PostgreSQL: without `statements=`).
    url: String,
    /// PostgreSQL's statement mode, and whether a pooler was detected.
    statements: Option<(Statements, bool)>,
    sql: String,
    /// The table the bench created for the default statement (dropped at
    /// the end); `None` with `--sql`.
    table: Option<String>,
    /// The bench installed the BLACKHOLE plugin (uninstalled at the end).
    installed_plugin: std::sync::atomic::AtomicBool,
}

/// One operation of one mode, ready to run many times from many tasks:
/// `explicit` on the plain pool, `elided` or `coalesced` on batchpool's.
enum Op {
    /// The plain pool, the statement, and whether it is sent unnamed.
    PgExplicit(deadpool_postgres::Pool, String, bool),
    Pg(Mode, batchpool::postgres::Pool, String),
    MyExplicit(deadpool::managed::Pool<MyManager>, String),
    My(Mode, batchpool::mysql::Pool, String),
}

/// An error with its sources (`db error: ERROR: prepared statement "s0"
/// does not exist`), each added unless the message already says it.
fn text(e: impl std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let msg = s.to_string();
        if !out.contains(&msg) {
            out.push_str(": ");
            out.push_str(&msg);
        }
        source = s.source();
    }
    out
}

impl Op {
    /// Runs the operation once; returns the rows it affected.
    async fn run(&self) -> Result<u64, String> {
        use mysql_async::prelude::Queryable;
        match self {
            Op::PgExplicit(pool, sql, unnamed) => {
                let mut client = pool.get().await.map_err(text)?;
                let tx = client.transaction().await.map_err(text)?;
                let n = if *unnamed {
                    tx.execute_typed(sql, &[]).await.map_err(text)?
                } else {
                    let stmt = tx.prepare_cached(sql).await.map_err(text)?;
                    tx.execute(&stmt, &[]).await.map_err(text)?
                };
                tx.commit().await.map_err(text)?;
                Ok(n)
            }
            Op::Pg(Mode::Elided, pool, sql) => {
                let out = pool.atomic(&[(sql.as_str(), &[])]).await.map_err(text)?;
                Ok(out.iter().map(|o| o.rows_affected()).sum())
            }
            Op::Pg(_, pool, sql) => pool
                .execute(sql, &[])
                .await
                .map(|o| o.rows_affected())
                .map_err(text),
            Op::MyExplicit(pool, sql) => {
                let mut conn = pool.get().await.map_err(|e| format!("{e:?}"))?;
                let mut tx = conn
                    .start_transaction(mysql_async::TxOpts::default())
                    .await
                    .map_err(text)?;
                tx.query_drop(sql.as_str()).await.map_err(text)?;
                let n = tx.affected_rows();
                tx.commit().await.map_err(text)?;
                Ok(n)
            }
            Op::My(Mode::Elided, pool, sql) => {
                let out = pool
                    .atomic([(sql.as_str(), mysql_async::Params::Empty)])
                    .await
                    .map_err(text)?;
                Ok(out.iter().map(|o| o.rows_affected()).sum())
            }
            Op::My(_, pool, sql) => pool
                .execute(sql, ())
                .await
                .map(|o| o.rows_affected())
                .map_err(text),
        }
    }

    /// Batching counters, for the batchpool modes.
    fn batching(&self) -> Option<String> {
        let s = match self {
            Op::PgExplicit(..) | Op::MyExplicit(..) => return None,
            Op::Pg(_, pool, _) => pool.stats(),
            Op::My(_, pool, _) => pool.stats(),
        };
        Some(format!(
            "{} rows in {} coalesced statements ({:.1} rows/statement), {} pass-through",
            s.rows,
            s.batches,
            s.rows_per_batch(),
            s.passthrough
        ))
    }

    async fn close(self) {
        match self {
            Op::PgExplicit(pool, ..) => pool.close(),
            Op::Pg(_, pool, _) => pool.close().await,
            Op::MyExplicit(pool, _) => pool.close(),
            Op::My(_, pool, _) => pool.close().await,
        }
    }
}

/// The plain MySQL pool of the `explicit` mode: deadpool over bare
/// mysql_async connections, as deadpool-postgres is for PostgreSQL
/// (mysql_async's own pool resets connections and hands them back through
/// a recycler task, which is not what is measured here).
struct MyManager(mysql_async::Opts);

impl deadpool::managed::Manager for MyManager {
    type Type = mysql_async::Conn;
    type Error = mysql_async::Error;

    async fn create(&self) -> Result<mysql_async::Conn, mysql_async::Error> {
        mysql_async::Conn::new(self.0.clone()).await
    }

    async fn recycle(
        &self,
        conn: &mut mysql_async::Conn,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<mysql_async::Error> {
        if conn.is_disconnected() {
            return Err(deadpool::managed::RecycleError::message("disconnected"));
        }
        Ok(())
    }
}

impl Target {
    fn is_postgres(&self) -> bool {
        self.kind == Kind::Postgres
    }

    /// PostgreSQL: whether `explicit` sends unnamed statements (as
    /// batchpool's pools do).
    fn pg_unnamed(&self) -> bool {
        self.statements
            .is_some_and(|(mode, pooler)| statements::peers_unnamed(mode, pooler))
    }

    /// PostgreSQL: the statement mode for the report.
    fn statements_text(&self) -> Option<String> {
        self.statements
            .map(|(mode, pooler)| statements::describe(mode, pooler))
    }

    fn protocol(&self) -> &'static str {
        if self.is_postgres() {
            "postgres"
        } else {
            "mysql"
        }
    }

    async fn version(&self) -> String {
        if self.is_postgres() {
            // Simple protocol: no prepared statement (a pooler's URL).
            self.admin("SELECT version()").await.unwrap_or_default()
        } else {
            common::mysql_version(&self.url).await
        }
    }

    /// Runs `sql` on a fresh admin connection; returns its first column of
    /// its first row, as text, if any.
    async fn admin(&self, sql: &str) -> Option<String> {
        if self.is_postgres() {
            let (client, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
                .await
                .expect("connect to PostgreSQL");
            tokio::spawn(conn);
            let rows = client
                .simple_query(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            rows.into_iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
        } else {
            use mysql_async::prelude::Queryable;
            let opts = mysql_async::Opts::from_url(&self.url).expect("MySQL URL");
            let mut conn = mysql_async::Conn::new(opts)
                .await
                .expect("connect to MySQL");
            let row: Option<mysql_async::Row> = conn
                .query_first(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let _ = conn.disconnect().await;
            row.and_then(|r| r.get_opt::<String, _>(0))
                .and_then(Result::ok)
        }
    }

    /// Creates the default table (when the default statement is used).
    async fn setup(&self) {
        let Some(table) = &self.table else {
            return;
        };
        self.admin(&format!("DROP TABLE IF EXISTS {table}")).await;
        match self.kind {
            Kind::Postgres => {
                self.admin(&format!("CREATE TABLE {table} (i int, c text)"))
                    .await;
            }
            Kind::Mariadb => {
                self.admin(&format!(
                    "CREATE TABLE {table} (i INT, c TEXT) ENGINE=InnoDB"
                ))
                .await;
            }
            Kind::MariadbBlackhole => {
                let have = self
                    .admin(
                        "SELECT COUNT(*) FROM information_schema.engines \
                         WHERE engine = 'BLACKHOLE' AND support IN ('YES', 'DEFAULT')",
                    )
                    .await;
                if have.as_deref() != Some("1") {
                    self.admin("INSTALL SONAME 'ha_blackhole'").await;
                    self.installed_plugin
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                self.admin(&format!(
                    "CREATE TABLE {table} (i INT, c TEXT) ENGINE=BLACKHOLE"
                ))
                .await;
            }
        }
    }

    /// Empties the default table between modes.
    async fn reset(&self) {
        if let Some(table) = &self.table {
            self.admin(&format!("TRUNCATE TABLE {table}")).await;
        }
    }

    async fn teardown(&self) {
        if let Some(table) = &self.table {
            self.admin(&format!("DROP TABLE IF EXISTS {table}")).await;
        }
        if self
            .installed_plugin
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.admin("UNINSTALL SONAME 'ha_blackhole'").await;
        }
    }

    fn op(&self, mode: Mode, pool_size: usize) -> Op {
        let sql = self.sql.clone();
        let pg = || -> tokio_postgres::Config { self.url.parse().expect("PostgreSQL URL") };
        let my = || mysql_async::Opts::from_url(&self.url).expect("MySQL URL");
        match (self.is_postgres(), mode) {
            (true, Mode::Explicit) => {
                let manager = deadpool_postgres::Manager::new(pg(), tokio_postgres::NoTls);
                let unnamed = self.pg_unnamed();
                Op::PgExplicit(plain_pool(manager, pool_size), sql, unnamed)
            }
            (true, _) => {
                let (mode_pg, _) = self.statements.unwrap_or_default();
                let pool = batchpool::postgres::Pool::from_config(pg())
                    .statements(mode_pg)
                    .max_size(pool_size);
                Op::Pg(mode, pool.build().expect("batchpool pool"), sql)
            }
            (false, Mode::Explicit) => Op::MyExplicit(plain_pool(MyManager(my()), pool_size), sql),
            (false, _) => {
                let pool = batchpool::mysql::Pool::from_opts(my()).max_size(pool_size);
                Op::My(mode, pool.build().expect("batchpool pool"), sql)
            }
        }
    }
}

/// Whether `url` reaches PostgreSQL through a pooler (batchpool's `auto`
/// test).
async fn pg_pooler(url: &str) -> bool {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(conn);
    statements::behind_pooler(&client)
        .await
        .expect("SELECT pg_backend_pid()")
}

/// The plain deadpool pool of the `explicit` mode (deadpool-postgres's is
/// deadpool's own over its manager).
fn plain_pool<M: deadpool::managed::Manager>(
    manager: M,
    size: usize,
) -> deadpool::managed::Pool<M> {
    deadpool::managed::Pool::builder(manager)
        .max_size(size)
        .build()
        .expect("deadpool pool")
}

/// Latency buckets, vtbench's plus `<1ms` (and `500ms+`, printed when used).
const BUCKETS: [(&str, Duration); 7] = [
    ("<1ms", Duration::from_millis(1)),
    ("1ms-5ms", Duration::from_millis(5)),
    ("5ms-10ms", Duration::from_millis(10)),
    ("10ms-50ms", Duration::from_millis(50)),
    ("50ms-100ms", Duration::from_millis(100)),
    ("100ms-500ms", Duration::from_millis(500)),
    ("500ms+", Duration::MAX),
];

#[derive(Serialize, Debug)]
struct Run {
    target: String,
    sql: String,
    protocol: String,
    /// PostgreSQL: the statement mode (`named (direct connection)`,
    /// `auto → unnamed (pooler detected)`...).
    statements: Option<String>,
    mode: Mode,
    threads: usize,
    count: usize,
    operations: u64,
    errors: u64,
    first_error: Option<String>,
    average_rows: f64,
    average_query_ms: f64,
    total_seconds: f64,
    qps_per_thread: f64,
    qps_total: f64,
    p50_ms: f64,
    p99_ms: f64,
    buckets: Vec<(String, u64)>,
}

async fn run_mode(target: &Target, mode: Mode, args: &Args) -> Run {
    let pool_size = args.pool_size.unwrap_or(args.threads).max(1);
    let op = Arc::new(target.op(mode, pool_size));

    // Warm-up: connections opened, statements prepared; not timed.
    let mut warm = tokio::task::JoinSet::new();
    for _ in 0..args.threads {
        let op = op.clone();
        let n = args.warmup;
        warm.spawn(async move {
            for _ in 0..n {
                op.run().await.expect("warm-up operation failed");
            }
        });
    }
    while let Some(r) = warm.join_next().await {
        r.expect("warm-up task");
    }
    target.reset().await;

    println!(
        "Initializing test with {} protocol / {} threads / {} iterations",
        target.protocol(),
        args.threads,
        args.count
    );
    println!("Starting test threads");
    let start = Arc::new(tokio::sync::Barrier::new(args.threads + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..args.threads {
        let (op, start, count) = (op.clone(), start.clone(), args.count);
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(count);
            let (mut rows, mut errors, mut first_error) = (0u64, 0u64, None);
            start.wait().await;
            for _ in 0..count {
                let t = Instant::now();
                let r = op.run().await;
                latencies.push(t.elapsed());
                match r {
                    Ok(n) => rows += n,
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (latencies, rows, errors, first_error)
        });
    }
    start.wait().await;
    let began = Instant::now();
    let mut latencies = Vec::with_capacity(args.threads * args.count);
    let (mut rows, mut errors, mut first_error) = (0u64, 0u64, None);
    while let Some(r) = tasks.join_next().await {
        let (l, r, e, f) = r.expect("bench task");
        latencies.extend(l);
        rows += r;
        errors += e;
        if first_error.is_none() {
            first_error = f;
        }
    }
    let total = began.elapsed();
    let batching = op.batching();
    if let Ok(op) = Arc::try_unwrap(op) {
        op.close().await;
    }

    let ops = latencies.len() as u64;
    let sum: Duration = latencies.iter().sum();
    let average = if ops == 0 {
        Duration::ZERO
    } else {
        sum / ops as u32
    };
    let qps_total = ops as f64 / total.as_secs_f64();
    let qps_per_thread = qps_total / args.threads as f64;
    latencies.sort_unstable();
    let quantile = |q: f64| -> Duration {
        latencies
            .get(((ops as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    let mut buckets: Vec<(String, u64)> = BUCKETS.iter().map(|(n, _)| (n.to_string(), 0)).collect();
    for l in &latencies {
        let i = BUCKETS
            .iter()
            .position(|(_, max)| l < max)
            .unwrap_or(BUCKETS.len() - 1);
        buckets[i].1 += 1;
    }
    let average_rows = if ops == 0 {
        0.0
    } else {
        rows as f64 / ops as f64
    };

    println!("Average Rows Returned: {}", trim_float(average_rows));
    println!("Average Query Time: {}", go_duration(average));
    println!("Total Test Time: {}", go_duration(total));
    println!("QPS (Per Thread): {qps_per_thread}");
    println!("QPS (Total): {qps_total}");
    println!("Query Timings:");
    for (i, (name, n)) in buckets.iter().enumerate() {
        if i < BUCKETS.len() - 1 || *n > 0 {
            println!("{name}: {n}");
        }
    }
    if let Some(b) = &batching {
        println!("Batching (incl. warm-up): {b}");
    }
    if errors > 0 {
        println!(
            "Errors: {errors} (first: {})",
            first_error.as_deref().unwrap_or("?")
        );
    }
    println!();

    Run {
        target: target.label.clone(),
        sql: target.sql.clone(),
        protocol: target.protocol().to_string(),
        statements: target.statements_text(),
        mode,
        threads: args.threads,
        count: args.count,
        operations: ops,
        errors,
        first_error,
        average_rows,
        average_query_ms: average.as_secs_f64() * 1e3,
        total_seconds: total.as_secs_f64(),
        qps_per_thread,
        qps_total,
        p50_ms: quantile(0.50).as_secs_f64() * 1e3,
        p99_ms: quantile(0.99).as_secs_f64() * 1e3,
        buckets,
    }
}

/// `1` for 1.0, else the shortest float text.
fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// A duration the way Go prints `time.Duration` (vtbench is Go):
/// `8.66276ms`, `4m20.365234606s`.
fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    let frac = |value: u128, unit: u128, digits: usize| -> String {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            return whole.to_string();
        }
        let rest = format!("{rest:0digits$}");
        format!("{whole}.{}", rest.trim_end_matches('0'))
    };
    if ns == 0 {
        "0s".to_string()
    } else if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{}µs", frac(ns, 1_000, 3))
    } else if ns < 1_000_000_000 {
        format!("{}ms", frac(ns, 1_000_000, 6))
    } else {
        let secs = ns / 1_000_000_000;
        let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
        let s = frac((s * 1_000_000_000) + ns % 1_000_000_000, 1_000_000_000, 9);
        match (h, m) {
            (0, 0) => format!("{s}s"),
            (0, m) => format!("{m}m{s}s"),
            (h, m) => format!("{h}h{m}m{s}s"),
        }
    }
}

#[derive(Serialize)]
struct Report {
    servers: Vec<(String, String)>,
    fast_server: bool,
    runs: Vec<Run>,
    /// Per target: each mode's median QPS divided by `explicit`'s.
    ratios: Vec<(String, Mode, f64)>,
}

fn main() {
    let args = Args::parse();
    if std::env::args_os().len() == 1 {
        // `cargo test --benches`: also check the statements= handling.
        statements::self_check();
    }
    assert!(
        args.threads > 0 && args.count > 0,
        "--threads and --count must be positive"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async_main(args));
}

async fn async_main(args: Args) {
    let mut targets = Vec::new();
    for &kind in &args.targets {
        let postgres = kind == Kind::Postgres;
        // PostgreSQL's statement mode (`--statements`, or --pg-url's).
        let mut pg_mode = postgres.then(|| args.statements.unwrap_or_default());
        let (given, env) = if postgres {
            (&args.pg_url, "PG_URL")
        } else {
            (&args.mysql_url, "MYSQL_URL")
        };
        let name = match kind {
            Kind::Postgres => "postgres",
            Kind::Mariadb => "mariadb",
            Kind::MariadbBlackhole => "mariadb-blackhole",
        };
        let (label, url) = match given {
            Some(url) if postgres => {
                let (rest, in_url) =
                    statements::split(url).unwrap_or_else(|e| panic!("--pg-url: {e}"));
                let mode = statements::effective(args.statements, in_url)
                    .unwrap_or_else(|e| panic!("{e}"));
                pg_mode = Some(mode);
                (name.to_string(), rest)
            }
            Some(url) => (name.to_string(), url.clone()),
            None => {
                let external = std::env::var(env).is_ok_and(|v| !v.is_empty());
                let server = if external { env } else { "throwaway" };
                let url = if postgres {
                    common::pg_fresh_db().await
                } else {
                    common::mysql_fresh_db().await
                };
                (format!("{name} ({server})"), url)
            }
        };
        let table = args.sql.is_none().then(|| {
            if kind == Kind::MariadbBlackhole {
                "storm_blackhole".to_string()
            } else {
                "storm".to_string()
            }
        });
        let sql = match (&args.sql, &table) {
            (Some(sql), _) => sql.clone(),
            (None, Some(table)) => default_sql(table),
            (None, None) => unreachable!("a table when no --sql"),
        };
        let statements = match pg_mode {
            Some(mode) => Some((mode, pg_pooler(&url).await)),
            None => None,
        };
        targets.push(Target {
            kind,
            label,
            url,
            statements,
            sql,
            table,
            installed_plugin: Default::default(),
        });
    }

    println!(
        "== {} threads x {} operations, pool size {}; throwaway servers durable: {} \
         (BATCHPOOL_FAST_SERVER={})",
        args.threads,
        args.count,
        args.pool_size.unwrap_or(args.threads),
        !common::fast_server(),
        u8::from(common::fast_server()),
    );
    let mut runs = Vec::new();
    let mut servers = Vec::new();
    for target in &targets {
        let version = target.version().await;
        println!("\n== {}: {version}", target.label);
        if let Some(s) = target.statements_text() {
            println!("== statements: {s}, batchpool and explicit alike");
        }
        println!("== sql: {}\n", target.sql);
        servers.push((target.label.clone(), version));
        target.setup().await;
        for round in 1..=args.rounds.max(1) {
            for &mode in &args.modes {
                println!("--- {} / {} (round {round}) ---", target.label, mode.name());
                runs.push(run_mode(target, mode, &args).await);
            }
        }
        target.teardown().await;
    }
    println!();

    let mut ratios = Vec::new();
    for target in &targets {
        // Median QPS of a mode over the rounds.
        let qps = |mode: Mode| {
            let mut all: Vec<f64> = runs
                .iter()
                .filter(|r| r.target == target.label && r.mode == mode)
                .map(|r| r.qps_total)
                .collect();
            all.sort_by(f64::total_cmp);
            all.get(all.len() / 2).copied()
        };
        let Some(base) = qps(Mode::Explicit) else {
            continue;
        };
        let mut line = format!(
            "Summary [{}] (median of {} round(s)): explicit {base:.0} QPS",
            target.label,
            args.rounds.max(1)
        );
        for mode in [Mode::Elided, Mode::Coalesced] {
            if let Some(q) = qps(mode) {
                let ratio = q / base;
                line.push_str(&format!(
                    "; {} {q:.0} QPS = {ratio:.2}x explicit",
                    mode.name()
                ));
                ratios.push((target.label.clone(), mode, ratio));
            }
        }
        println!("{line}");
    }

    if let Some(path) = &args.json {
        let report = Report {
            servers,
            fast_server: common::fast_server(),
            runs,
            ratios,
        };
        let text = serde_json::to_string_pretty(&report).expect("serialize report");
        std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        println!("JSON written to {}", path.display());
    }
}
