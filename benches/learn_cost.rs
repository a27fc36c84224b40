//! learn_cost: what the pool's background re-learning of batchable texts
//! costs the server in a steady state — catalog queries and statement
//! prepares per second — counted by the server itself.
//!
//! ```text
//! cargo bench --profile dev --bench learn_cost -- --seconds 60
//! cargo bench --profile dev --bench learn_cost -- --targets postgres --texts 20
//! ```
//!
//! Each target runs `--tasks` callers for `--seconds`, each inserting one
//! row every `--interval-ms` with one of `--texts` distinct single-row
//! INSERT texts into one table (every text learned before the window opens).
//!
//! * PostgreSQL: a throwaway cluster started with `pg_stat_statements`
//!   preloaded (`track = all`) and `log_min_duration_statement = 0`, so every
//!   Parse message is a `parse` line in the server log. Reported: the calls
//!   of each non-INSERT statement in `pg_stat_statements` (the catalog
//!   queries) and the Parse messages (prepares) in the log, per second.
//! * MariaDB: a throwaway server; reported: the differences of its global
//!   status counters (`Com_stmt_prepare`, `Com_stmt_execute`, `Com_select`,
//!   `Questions`, `Com_insert`) over the window, per second.
//!
//! The counts are of the server (not of batchpool), so the load shape and
//! the machine do not change them beyond the few statements of the bench's
//! own bookkeeping.

// A bench uses only part of the test harness.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

type Res<T> = Result<T, String>;

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

#[derive(Parser, Debug)]
#[command(about = "server-side cost of the pool's background re-learning of statement texts")]
struct Args {
    /// Length of the measured window.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Distinct single-row INSERT texts, all into one table.
    #[arg(long, default_value_t = 8)]
    texts: usize,
    /// Concurrent callers.
    #[arg(long, default_value_t = 16)]
    tasks: usize,
    /// Pause of each caller between its rows.
    #[arg(long, default_value_t = 10)]
    interval_ms: u64,
    /// Comma-separated: postgres, mariadb.
    #[arg(long, default_value = "postgres,mariadb")]
    targets: String,
    /// Passed by `cargo bench` to every harness = false bench; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Runs the load: every caller inserts with `insert(i)` (`i`: its row
/// number) until `end`. Returns the rows inserted.
async fn load<F, Fut>(tasks: usize, interval: Duration, end: Instant, insert: F) -> Res<u64>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Res<()>> + Send,
{
    let insert = Arc::new(insert);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let insert = insert.clone();
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < end {
                insert(t, n).await?;
                n += 1;
                tokio::time::sleep(interval).await;
            }
            Ok::<u64, String>(n)
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.map_err(text)??;
    }
    Ok(total)
}

mod pg {
    use super::*;
    use batchpool::postgres::Pool;

    fn sql(i: usize) -> String {
        format!("INSERT INTO lc (a, b) VALUES ($1, 'text {i}')")
    }

    pub(super) async fn run(args: &Args) -> Res<()> {
        let server = common::PgServer::start(&[
            ("shared_preload_libraries", "pg_stat_statements"),
            ("pg_stat_statements.track", "all"),
            ("log_min_duration_statement", "0"),
        ]);
        let url = server.url();
        let log = server.dir().join("postgres.log");
        let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .map_err(text)?;
        tokio::spawn(conn);
        admin
            .batch_execute(
                "CREATE EXTENSION pg_stat_statements;
                 CREATE TABLE lc (id bigserial PRIMARY KEY, a int NOT NULL, b text)",
            )
            .await
            .map_err(text)?;
        let pool = Pool::builder(&url).max_size(8).build().map_err(text)?;
        for i in 0..args.texts {
            let why = pool.explain(&sql(i)).await.map_err(text)?;
            if !why.is_coalesced() {
                return Err(format!("{} is not coalesced: {why}", sql(i)));
            }
        }
        let texts = args.texts;
        let interval = Duration::from_millis(args.interval_ms);
        let insert = {
            let pool = pool.clone();
            move |t: usize, n: u64| {
                let pool = pool.clone();
                async move {
                    let a = i32::try_from(n % 1_000_000).unwrap_or(0);
                    pool.execute(&sql(t % texts), &[&a]).await.map_err(text)?;
                    Ok(())
                }
            }
        };
        // Warm up: every text in use, every connection open.
        load(
            args.tasks,
            interval,
            Instant::now() + Duration::from_secs(3),
            insert.clone(),
        )
        .await?;
        admin
            .batch_execute("SELECT pg_stat_statements_reset()")
            .await
            .map_err(text)?;
        let from = std::fs::metadata(&log).map_err(text)?.len();
        let start = Instant::now();
        let rows = load(
            args.tasks,
            interval,
            start + Duration::from_secs(args.seconds),
            insert,
        )
        .await?;
        let secs = start.elapsed().as_secs_f64();
        let stats = admin
            .query(
                "SELECT calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_statements
                 WHERE query NOT ILIKE 'insert%' AND query NOT ILIKE '%pg_stat_statements%'
                 ORDER BY calls DESC",
                &[],
            )
            .await
            .map_err(text)?;
        let all = std::fs::read(&log).map_err(text)?;
        let window = String::from_utf8_lossy(&all[usize::try_from(from).unwrap_or(0)..]);
        let parses: Vec<&str> = window.lines().filter(|l| l.contains("  parse ")).collect();
        let insert_parses = parses
            .iter()
            .filter(|l| l.contains("INSERT INTO lc"))
            .count();
        println!(
            "PostgreSQL: {} texts on one table, {} callers, {:.0} s, {rows} rows ({:.0}/s)",
            args.texts,
            args.tasks,
            secs,
            rows as f64 / secs
        );
        let mut catalog = 0i64;
        for row in &stats {
            let calls: i64 = row.get(0);
            let q: String = row.get(1);
            println!("  {:>8.2}/s  {q}", calls as f64 / secs);
            if q.contains("pg_") || q.contains("to_regclass") {
                catalog += calls;
            }
        }
        println!(
            "  catalog queries: {:.2}/s; prepares (Parse messages): {:.2}/s, of INSERT texts {:.2}/s",
            catalog as f64 / secs,
            parses.len() as f64 / secs,
            insert_parses as f64 / secs
        );
        pool.close().await;
        drop(server);
        Ok(())
    }
}

mod my {
    use super::*;
    use batchpool::mysql::Pool;
    use mysql_async::prelude::Queryable;

    const COUNTERS: [&str; 5] = [
        "Com_stmt_prepare",
        "Com_stmt_execute",
        "Com_select",
        "Questions",
        "Com_insert",
    ];

    fn sql(i: usize) -> String {
        format!("INSERT INTO lc (a, b) VALUES (?, 'text {i}')")
    }

    async fn counters(conn: &mut mysql_async::Conn) -> Res<Vec<u64>> {
        let rows: Vec<(String, String)> = conn.query("SHOW GLOBAL STATUS").await.map_err(text)?;
        Ok(COUNTERS
            .iter()
            .map(|name| {
                rows.iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0)
            })
            .collect())
    }

    pub(super) async fn run(args: &Args) -> Res<()> {
        let server = common::MysqlServer::start(&[]);
        let base = server.url();
        let mut admin = mysql_async::Conn::from_url(&base).await.map_err(text)?;
        admin.query_drop("CREATE DATABASE lc").await.map_err(text)?;
        admin
            .query_drop(
                "CREATE TABLE lc.lc (id BIGINT AUTO_INCREMENT PRIMARY KEY, a INT NOT NULL, \
                 b VARCHAR(32)) ENGINE=InnoDB",
            )
            .await
            .map_err(text)?;
        let url = match base.rsplit_once('/') {
            Some((server, _)) => format!("{server}/lc"),
            None => return Err(format!("no database in {base}")),
        };
        let pool = Pool::builder(&url).max_size(8).build().map_err(text)?;
        for i in 0..args.texts {
            let why = pool.explain(&sql(i)).await.map_err(text)?;
            if !why.is_coalesced() {
                return Err(format!("{} is not coalesced: {why}", sql(i)));
            }
        }
        let texts = args.texts;
        let interval = Duration::from_millis(args.interval_ms);
        let insert = {
            let pool = pool.clone();
            move |t: usize, n: u64| {
                let pool = pool.clone();
                async move {
                    let a = i32::try_from(n % 1_000_000).unwrap_or(0);
                    pool.execute(&sql(t % texts), (a,)).await.map_err(text)?;
                    Ok(())
                }
            }
        };
        load(
            args.tasks,
            interval,
            Instant::now() + Duration::from_secs(3),
            insert.clone(),
        )
        .await?;
        let before = counters(&mut admin).await?;
        let start = Instant::now();
        let rows = load(
            args.tasks,
            interval,
            start + Duration::from_secs(args.seconds),
            insert,
        )
        .await?;
        let secs = start.elapsed().as_secs_f64();
        let after = counters(&mut admin).await?;
        println!(
            "MariaDB: {} texts on one table, {} callers, {:.0} s, {rows} rows ({:.0}/s)",
            args.texts,
            args.tasks,
            secs,
            rows as f64 / secs
        );
        for ((name, b), a) in COUNTERS.iter().zip(&before).zip(&after) {
            println!("  {name}: {:.2}/s", a.saturating_sub(*b) as f64 / secs);
        }
        pool.close().await;
        let _ = admin.disconnect().await;
        drop(server);
        Ok(())
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("learn_cost: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        for target in args.targets.split(',').map(str::trim) {
            match target {
                "postgres" => pg::run(&args).await?,
                "mariadb" => my::run(&args).await?,
                other => return Err(format!("unknown target {other}")),
            }
        }
        Ok::<(), String>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("learn_cost: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
