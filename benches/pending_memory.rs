//! pending_memory: what one pending `Pool::execute` caller costs in memory.
//!
//! For each backend and each caller count N, the bench holds every pooled
//! connection (`Pool::get`), so no row can be flushed, spawns N tasks that
//! each call `pool.execute(INSERT ...)` with their own two parameters, waits
//! until `Stats::queued == N`, and reads the live heap bytes counted by the
//! global allocator below. Bytes per pending caller = (live bytes now − live
//! bytes before spawning) / N: the tokio task (its future inline), the
//! caller's own values, the encoded row, its reply channel, its queue slot
//! and the flusher tasks waiting for a connection. Then it releases the
//! connections, checks that every caller got its row written (table count ==
//! N) and closes the pool.
//!
//! ```text
//! cargo bench --bench pending_memory                            # both backends, 10k and 50k callers
//! cargo bench --bench pending_memory -- --backend pg --callers 1000,100000
//! cargo bench --bench pending_memory -- --pg-url postgresql://postgres@127.0.0.1:5432/postgres
//! ```
//!
//! Without `--pg-url` / `--mysql-url` it uses a fresh database on `PG_URL` /
//! `MYSQL_URL`, else on a throwaway server (the tests' harness,
//! `tests/common`). Run without any argument (`cargo test --benches`), it
//! only checks that it works, with 1,000 callers.
//!
//! The allocator is hand-written (no crate): `System` wrapped with atomic
//! counters of live bytes and live allocations (requested sizes, so malloc's
//! own overhead is not in them; the RSS columns show the process' view), plus
//! a per-thread count of bytes allocated, used to measure what
//! `tokio::spawn` itself allocates for each caller (the task cell that holds
//! the future).

// A bench uses only part of the test harness.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::process::ExitCode;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use batchpool::Stats;
use clap::{Parser, ValueEnum};
use tokio::task::JoinHandle;

// ---------------------------------------------------------------------------
// Counting allocator

/// `System`, counting live bytes and live allocations.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_ALLOCS: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// Bytes this thread has allocated (never decremented). Const-initialised
    /// and without `Drop`, so reading it never allocates.
    static THREAD_ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

fn count_alloc(size: usize) {
    LIVE_BYTES.fetch_add(size as isize, Relaxed);
    LIVE_ALLOCS.fetch_add(1, Relaxed);
    let _ = THREAD_ALLOCATED.try_with(|c| c.set(c.get() + size as u64));
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are
// updated around it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded; `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as isize, Relaxed);
        LIVE_ALLOCS.fetch_sub(1, Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded; `ptr` came from `System` with this layout.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
            let grown = new_size.saturating_sub(layout.size()) as u64;
            let _ = THREAD_ALLOCATED.try_with(|c| c.set(c.get() + grown));
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> isize {
    LIVE_BYTES.load(Relaxed)
}

fn live_allocs() -> isize {
    LIVE_ALLOCS.load(Relaxed)
}

fn thread_allocated() -> u64 {
    THREAD_ALLOCATED.try_with(Cell::get).unwrap_or(0)
}

// ---------------------------------------------------------------------------
// CLI

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    /// PostgreSQL only.
    Pg,
    /// MariaDB / MySQL only.
    Mysql,
    /// Both, PostgreSQL first.
    Both,
}

#[derive(Parser, Debug)]
#[command(about = "Heap bytes per pending Pool::execute caller (all connections held)")]
struct Args {
    /// Backends to measure.
    #[arg(long, value_enum, default_value = "both")]
    backend: Which,
    /// Pending caller counts to measure, in this order.
    #[arg(long, value_delimiter = ',', default_value = "10000,50000")]
    callers: Vec<usize>,
    /// PostgreSQL to use (default: a fresh database on `PG_URL`, else on a
    /// throwaway cluster).
    #[arg(long)]
    pg_url: Option<String>,
    /// MariaDB / MySQL to use (default: a fresh database on `MYSQL_URL`,
    /// else on a throwaway server).
    #[arg(long)]
    mysql_url: Option<String>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

// ---------------------------------------------------------------------------
// One measurement

/// What one (backend, N) run measured.
struct Measured {
    backend: &'static str,
    callers: usize,
    /// Live heap bytes per pending caller.
    per_caller: f64,
    /// Live allocations per pending caller.
    allocs_per_caller: f64,
    /// Bytes `tokio::spawn` allocated per caller (the task cell).
    task_bytes: f64,
    /// `size_of_val` of the spawned future (the caller's async block, which
    /// holds the `execute` future).
    task_future: usize,
    /// `size_of_val` of one `pool.execute(...)` future.
    execute_future: usize,
    /// Encoded parameter bytes of one row (as assumed, see `params_note`).
    params_bytes: usize,
    /// RSS growth per pending caller.
    rss_per_caller: f64,
    /// VmHWM after the measurement (kB).
    peak_rss_kb: u64,
}

/// Sizes of the public futures of one backend's pool.
struct FutureSizes {
    backend: &'static str,
    sizes: Vec<(&'static str, usize)>,
}

type Res<T> = Result<T, String>;

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A `/proc/self/status` field in kB (`VmRSS`, `VmHWM`).
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Each caller's text value: 16 bytes.
fn value(i: usize) -> String {
    format!("value-{i:010}")
}

const VALUE_LEN: usize = 16;

/// Spawns `n` callers (`spawn(i)` each) while the pool's connections are
/// held, waits until all `n` rows are queued and measures. Returns the
/// partial measurement and the callers' handles.
async fn pend<T>(
    n: usize,
    stats: impl Fn() -> Stats,
    mut spawn: impl FnMut(usize) -> JoinHandle<T>,
) -> Res<(f64, f64, f64, f64, Vec<JoinHandle<T>>)> {
    // Allocated before the baseline: the bench's own bookkeeping.
    let mut handles = Vec::with_capacity(n);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (bytes0, allocs0, rss0) = (live_bytes(), live_allocs(), status_kb("VmRSS"));
    let spawned0 = thread_allocated();
    for i in 0..n {
        handles.push(spawn(i));
    }
    let task_bytes = (thread_allocated() - spawned0) as f64 / n as f64;
    let started = Instant::now();
    loop {
        let queued = stats().queued;
        if queued == n as u64 {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("only {queued} of {n} callers queued after 120 s"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Let the last callers reach their `rx.await`.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if stats().queued != n as u64 {
        return Err(format!(
            "{} rows queued, expected {n}: a row left the queue while every connection was held",
            stats().queued
        ));
    }
    let per_caller = (live_bytes() - bytes0) as f64 / n as f64;
    let allocs = (live_allocs() - allocs0) as f64 / n as f64;
    let rss = (status_kb("VmRSS") as f64 - rss0 as f64) * 1024.0 / n as f64;
    Ok((per_caller, allocs, task_bytes, rss, handles))
}

/// What both backends measure alike: with every connection `held`, `n`
/// callers spawned by `spawn` queue their rows ([`pend`]); then the
/// connections are released and every caller must write its one row.
#[allow(clippy::too_many_arguments)]
async fn measure<H>(
    backend: &'static str,
    params_bytes: usize,
    n: usize,
    held: H,
    sizes: &FutureSizes,
    stats: impl Fn() -> Stats,
    spawn: impl FnMut(usize) -> JoinHandle<Result<u64, batchpool::Error>>,
) -> Res<Measured> {
    let (per_caller, allocs_per_caller, task_bytes, rss_per_caller, handles) =
        pend(n, stats, spawn).await?;
    let peak_rss_kb = status_kb("VmHWM");
    drop(held);
    finish(handles).await?;
    Ok(Measured {
        backend,
        callers: n,
        per_caller,
        allocs_per_caller,
        task_bytes,
        execute_future: sizes.sizes[0].1,
        task_future: sizes.sizes[1].1,
        params_bytes,
        rss_per_caller,
        peak_rss_kb,
    })
}

/// Waits for every caller; each must have written its one row.
async fn finish(handles: Vec<JoinHandle<Result<u64, batchpool::Error>>>) -> Res<()> {
    let n = handles.len();
    let mut failed = Vec::new();
    for h in handles {
        match tokio::time::timeout(Duration::from_secs(120), h).await {
            Err(_) => return Err("a caller did not finish within 120 s".into()),
            Ok(Err(e)) => return Err(format!("a caller panicked: {e}")),
            Ok(Ok(Ok(1))) => {}
            Ok(Ok(Ok(rows))) => failed.push(format!("{rows} rows affected")),
            Ok(Ok(Err(e))) => failed.push(e.to_string()),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {n} callers failed, first: {}",
            failed.len(),
            failed[0]
        ))
    }
}

fn check_count(table: &str, count: i64, n: usize) -> Res<()> {
    if count == n as i64 {
        Ok(())
    } else {
        Err(format!("{table} holds {count} rows, expected {n}"))
    }
}

// ---------------------------------------------------------------------------
// PostgreSQL

mod pg {
    use super::*;
    use batchpool::postgres::Pool;

    pub(super) const PARAMS_NOTE: &str =
        "PostgreSQL: int4 binary 4 B + text 16 B = 20 B per row (the encoded buffer)";

    const SQL: &str = "INSERT INTO pm (k, v) VALUES ($1, $2)";

    /// One caller: its own values, then `execute`.
    async fn caller(pool: Pool, i: usize) -> Result<u64, batchpool::Error> {
        let k = i as i32;
        let v = value(i);
        pool.execute(SQL, &[&k, &v])
            .await
            .map(|o| o.rows_affected())
    }

    /// Sizes of the public futures (created, never polled, dropped).
    pub(super) fn future_sizes(pool: &Pool) -> FutureSizes {
        let (k, v) = (1i32, value(1));
        let sql = SQL;
        let rows: [&batchpool::postgres::Params<'_>; 1] = [&[&k, &v]];
        let sizes = vec![
            ("execute", size_of_val(&pool.execute(sql, &[&k, &v]))),
            (
                "caller task (async block around execute)",
                size_of_val(&caller(pool.clone(), 1)),
            ),
            (
                "explain (route: cached lookup or learning a new text)",
                size_of_val(&pool.explain(sql)),
            ),
            (
                "query (route + pass-through prepare/run)",
                size_of_val(&pool.query(sql, &[&k, &v])),
            ),
            ("execute_many", size_of_val(&pool.execute_many(sql, rows))),
            ("atomic", size_of_val(&pool.atomic(&[(sql, &[&k, &v])]))),
            ("get (checkout)", size_of_val(&pool.get())),
            ("close", size_of_val(&pool.close())),
            (
                "Result<Outcome, Error> (oneshot payload)",
                size_of::<Result<batchpool::postgres::Outcome, batchpool::Error>>(),
            ),
        ];
        FutureSizes {
            backend: "PostgreSQL",
            sizes,
        }
    }

    pub(super) async fn run(url: &str, n: usize) -> Res<(Measured, FutureSizes)> {
        let pool = Pool::builder(url).max_size(2).build().map_err(text)?;
        pool.execute("DROP TABLE IF EXISTS pm", &[])
            .await
            .map_err(text)?;
        pool.execute("CREATE TABLE pm (k int PRIMARY KEY, v text NOT NULL)", &[])
            .await
            .map_err(text)?;
        let why = pool.explain(SQL).await.map_err(text)?;
        if !why.is_coalesced() {
            return Err(format!("{SQL} is not coalesced: {why}"));
        }
        // Every connection held: the rows stay queued.
        let held = [
            pool.get().await.map_err(text)?,
            pool.get().await.map_err(text)?,
        ];
        let sizes = future_sizes(&pool);
        let m = measure(
            "PostgreSQL",
            4 + VALUE_LEN,
            n,
            held,
            &sizes,
            || pool.stats(),
            |i| tokio::spawn(caller(pool.clone(), i)),
        )
        .await?;
        let count: i64 = pool
            .query_one("SELECT count(*) FROM pm", &[])
            .await
            .map_err(text)?
            .get(0);
        check_count("pm", count, n)?;
        pool.execute("DROP TABLE pm", &[]).await.map_err(text)?;
        pool.close().await;
        Ok((m, sizes))
    }
}

// ---------------------------------------------------------------------------
// MariaDB / MySQL

mod my {
    use super::*;
    use batchpool::mysql::Pool;

    pub(super) const PARAMS_NOTE: &str = "MariaDB: binary protocol INT as i64 8 B + \
         VARCHAR 1 B length + 16 B = 25 B per row (mysql_async `Value`s; the engine's row \
         size also counts 2 B type per value, the NULL bitmap and the row's `(?,?)` text)";

    const SQL: &str = "INSERT INTO pm (k, v) VALUES (?, ?)";

    async fn caller(pool: Pool, i: usize) -> Result<u64, batchpool::Error> {
        let k = i as i32;
        let v = value(i);
        pool.execute(SQL, (k, v)).await.map(|o| o.rows_affected())
    }

    pub(super) fn future_sizes(pool: &Pool) -> FutureSizes {
        let sizes = vec![
            ("execute", size_of_val(&pool.execute(SQL, (1i32, value(1))))),
            (
                "caller task (async block around execute)",
                size_of_val(&caller(pool.clone(), 1)),
            ),
            (
                "explain (route: cached lookup or learning a new text)",
                size_of_val(&pool.explain(SQL)),
            ),
            (
                "query (route + pass-through prepare/run)",
                size_of_val(&pool.query(SQL, (1i32, value(1)))),
            ),
            (
                "execute_many",
                size_of_val(&pool.execute_many(SQL, [(1i32, value(1))])),
            ),
            (
                "atomic",
                size_of_val(&pool.atomic([(SQL, mysql_async::Params::from((1i32, value(1))))])),
            ),
            ("get (checkout)", size_of_val(&pool.get())),
            ("close", size_of_val(&pool.close())),
            (
                "Result<Outcome, Error> (oneshot payload)",
                size_of::<Result<batchpool::mysql::Outcome, batchpool::Error>>(),
            ),
        ];
        FutureSizes {
            backend: "MariaDB",
            sizes,
        }
    }

    pub(super) async fn run(url: &str, n: usize) -> Res<(Measured, FutureSizes)> {
        let pool = Pool::builder(url).max_size(2).build().map_err(text)?;
        pool.execute("DROP TABLE IF EXISTS pm", ())
            .await
            .map_err(text)?;
        pool.execute(
            "CREATE TABLE pm (k INT PRIMARY KEY, v VARCHAR(32) NOT NULL) ENGINE=InnoDB",
            (),
        )
        .await
        .map_err(text)?;
        let why = pool.explain(SQL).await.map_err(text)?;
        if !why.is_coalesced() {
            return Err(format!("{SQL} is not coalesced: {why}"));
        }
        let held = [
            pool.get().await.map_err(text)?,
            pool.get().await.map_err(text)?,
        ];
        let sizes = future_sizes(&pool);
        let m = measure(
            "MariaDB",
            8 + 1 + VALUE_LEN,
            n,
            held,
            &sizes,
            || pool.stats(),
            |i| tokio::spawn(caller(pool.clone(), i)),
        )
        .await?;
        let rows = pool
            .query("SELECT COUNT(*) FROM pm", ())
            .await
            .map_err(text)?;
        let count: i64 = rows
            .first()
            .and_then(|r| r.get(0))
            .ok_or("COUNT(*) returned no row")?;
        check_count("pm", count, n)?;
        pool.execute("DROP TABLE pm", ()).await.map_err(text)?;
        pool.close().await;
        Ok((m, sizes))
    }
}

// ---------------------------------------------------------------------------
// Report

fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("MemTotal")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .unwrap_or(0);
    format!(
        "machine: {nproc} CPUs ({model}), {:.1} GiB RAM; build: {}",
        mem_kb as f64 / (1024.0 * 1024.0),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    )
}

fn render(results: &[Measured], sizes: &[FutureSizes]) -> String {
    let mut out = String::new();
    out.push_str(
        "| backend | callers | bytes/pending caller | of which task (tokio::spawn alloc) | \
         task future / execute future | params bytes/row | allocs/caller | RSS growth/caller | peak RSS (VmHWM) |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for m in results {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {} / {} | {} | {:.2} | {:.0} | {:.1} MiB |\n",
            m.backend,
            m.callers,
            m.per_caller,
            m.task_bytes,
            m.task_future,
            m.execute_future,
            m.params_bytes,
            m.allocs_per_caller,
            m.rss_per_caller,
            m.peak_rss_kb as f64 / 1024.0,
        ));
    }
    for s in sizes {
        out.push_str(&format!(
            "\n{} future sizes (size_of_val, bytes):\n",
            s.backend
        ));
        for (name, size) in &s.sizes {
            out.push_str(&format!("  {size:>6}  {name}\n"));
        }
    }
    out
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    if !args.bench && std::env::args_os().len() == 1 {
        eprintln!("pending_memory: test mode (no --bench flag): 1,000 callers per backend");
        args.callers = vec![1000];
    }
    if args.callers.contains(&0) {
        eprintln!("pending_memory: --callers must be at least 1");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pending_memory: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(&args));
    drop(runtime);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pending_memory: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Res<()> {
    let mut results = Vec::new();
    let mut sizes = Vec::new();
    let mut notes = Vec::new();
    if matches!(args.backend, Which::Pg | Which::Both) {
        let url = match &args.pg_url {
            Some(url) => url.clone(),
            None => common::pg_fresh_db().await,
        };
        notes.push(pg::PARAMS_NOTE);
        for &n in &args.callers {
            eprintln!("pending_memory: PostgreSQL, {n} pending callers...");
            let (m, s) = pg::run(&url, n).await?;
            results.push(m);
            if sizes.iter().all(|x: &FutureSizes| x.backend != s.backend) {
                sizes.push(s);
            }
        }
    }
    if matches!(args.backend, Which::Mysql | Which::Both) {
        let url = match &args.mysql_url {
            Some(url) => url.clone(),
            None => common::mysql_fresh_db().await,
        };
        notes.push(my::PARAMS_NOTE);
        for &n in &args.callers {
            eprintln!("pending_memory: MariaDB, {n} pending callers...");
            let (m, s) = my::run(&url, n).await?;
            results.push(m);
            if sizes.iter().all(|x: &FutureSizes| x.backend != s.backend) {
                sizes.push(s);
            }
        }
    }
    println!("{}", machine());
    println!(
        "pool: max_size 2, both connections held with Pool::get while the callers queue; \
         bytes = live heap bytes (requested sizes) counted by the bench's global allocator\n"
    );
    print!("{}", render(&results, &sizes));
    println!("\nparameter bytes assumed:");
    for n in notes {
        println!("  {n}");
    }
    println!(
        "every caller's row written and counted back (table count == callers); \
         goal: <= 2048 bytes per pending caller beyond its parameter bytes"
    );
    Ok(())
}
