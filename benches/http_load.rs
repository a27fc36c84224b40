//! HTTP load bench: the same axum `POST /events` handler (JSON body → one
//! `INSERT ... RETURNING id` → JSON id) backed by batchpool vs by plain
//! deadpool-postgres, driven by N concurrent keep-alive HTTP clients on
//! loopback. Reports rows/s and p50/p99 request latency.
//!
//! ```text
//! cargo bench --bench http_load -- --clients 64 --requests 20000 --pool-size 8
//! cargo bench --bench http_load -- --pg-url postgresql://postgres@127.0.0.1:5432/postgres --json
//! # the server alone, for an external load tool or another process's clients:
//! cargo bench --bench http_load -- --serve-only --pool batchpool --addr 127.0.0.1:18080
//! wrk -t2 -c256 -d15s --latency -s benches/http_load.lua http://127.0.0.1:18080 -- run1
//! cargo bench --bench http_load -- --target http://127.0.0.1:18080 --clients 256
//! ```
//!
//! Without `--pg-url` (or `PG_URL`), a throwaway PostgreSQL cluster is
//! started (durable settings unless `BATCHPOOL_FAST_SERVER=1`). Each run
//! uses a fresh database. Server, clients and PostgreSQL share the machine:
//! read the numbers as a comparison, not as absolute capacity. `--ceiling`
//! adds a run of the same handler with no database behind it: the most the
//! HTTP stack itself does on this machine.
//!
//! The built-in clients (hyper's HTTP/1.1 client, one keep-alive connection
//! each; `--client reqwest` for reqwest's pooled client, about twice the CPU
//! per request) and the server run on runtimes of their own in one process; the table shows the CPU each side's threads used
//! per 1,000 requests (`/proc/self/task/*/schedstat`), so a client side
//! that costs as much as the server shows. `--serve-only` serves one pool
//! with no clients (until SIGINT/SIGTERM or `--serve-secs`, then prints
//! what it answered, the table's row count and its CPU per request), so
//! `wrk` (`benches/http_load.lua` posts the same JSON bodies, a unique key
//! each) or `--target` (the built-in clients alone, in their own process)
//! can drive it.

// A bench uses only part of the test harness.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::routing::post;
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

const SCHEMA: &str = "CREATE TABLE events (
    id bigserial PRIMARY KEY,
    key text NOT NULL UNIQUE,
    data text NOT NULL
)";
const INSERT: &str = "INSERT INTO events (key, data) VALUES ($1, $2) RETURNING id";

#[derive(Parser, Debug)]
#[command(about = "HTTP load: axum + batchpool vs axum + deadpool-postgres")]
struct Args {
    /// Concurrent HTTP clients (each sends its next request when the last
    /// one answered).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Measured requests per pool (after the warm-up).
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Warm-up requests per pool, not measured.
    #[arg(long, default_value_t = 2_000)]
    warmup: usize,
    /// Connections per pool (both pools).
    #[arg(long, default_value_t = 8)]
    pool_size: usize,
    /// PostgreSQL server (default: PG_URL, else a throwaway cluster).
    #[arg(long)]
    pg_url: Option<String>,
    /// Also serve the handler with no database behind it (answers a fixed
    /// id): the ceiling of the HTTP stack itself on this machine.
    #[arg(long)]
    ceiling: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Serve the handler on --addr with no clients of its own (for wrk or
    /// another process's --target), until SIGINT/SIGTERM or --serve-secs;
    /// then print what it answered.
    #[arg(long)]
    serve_only: bool,
    /// The store behind the handler with --serve-only.
    #[arg(long, value_enum, default_value_t = PoolKind::Batchpool)]
    pool: PoolKind,
    /// Loopback address to serve on with --serve-only (port 0: a free one,
    /// printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// With --serve-only, stop after this many seconds.
    #[arg(long)]
    serve_secs: Option<u64>,
    /// The built-in clients' HTTP stack: `hyper` (one HTTP/1.1 client
    /// connection per client, the lighter) or `reqwest` (its pool).
    #[arg(long, value_enum, default_value_t = ClientKind::Hyper)]
    client: ClientKind,
    /// Run only the built-in clients (--clients, --warmup, --requests)
    /// against the server at this base URL (another process's
    /// --serve-only, e.g. `http://127.0.0.1:18080`).
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Set by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The built-in clients' HTTP stack (`--client`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ClientKind {
    /// hyper's HTTP/1.1 client connection, one per client.
    Hyper,
    /// reqwest's pooled client.
    Reqwest,
}

/// What serves `POST /events` with --serve-only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PoolKind {
    /// batchpool, default batching.
    Batchpool,
    /// Plain deadpool-postgres, one INSERT per request.
    Deadpool,
    /// No database: the HTTP stack alone.
    NoDb,
}

/// `POST /events` body.
#[derive(Serialize, Deserialize)]
struct NewEvent {
    key: String,
    data: String,
}

/// `POST /events` answer.
#[derive(Serialize, Deserialize)]
struct Created {
    id: i64,
}

/// What the handler needs from a pool: insert one event, return its id.
trait Store: Clone + Send + Sync + 'static {
    fn insert(&self, key: String, data: String)
    -> impl Future<Output = Result<i64, String>> + Send;
}

#[derive(Clone)]
struct Batchpool(batchpool::postgres::Pool);

impl Store for Batchpool {
    async fn insert(&self, key: String, data: String) -> Result<i64, String> {
        let out = self
            .0
            .execute(INSERT, &[&key, &data])
            .await
            .map_err(|e| e.to_string())?;
        out.returned()
            .map(|r| r.get(0))
            .ok_or_else(|| "no RETURNING row".to_string())
    }
}

#[derive(Clone)]
struct Plain(deadpool_postgres::Pool);

impl Store for Plain {
    async fn insert(&self, key: String, data: String) -> Result<i64, String> {
        let client = self.0.get().await.map_err(|e| e.to_string())?;
        let stmt = client
            .prepare_cached(INSERT)
            .await
            .map_err(|e| e.to_string())?;
        let row = client
            .query_one(&stmt, &[&key, &data])
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.get(0))
    }
}

/// No database: the handler's HTTP and JSON work only.
#[derive(Clone)]
struct NoDb;

impl Store for NoDb {
    async fn insert(&self, _key: String, _data: String) -> Result<i64, String> {
        Ok(0)
    }
}

/// A store that counts what it answered (--serve-only's summary).
#[derive(Clone)]
struct Counted<S> {
    inner: S,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl<S: Store> Store for Counted<S> {
    async fn insert(&self, key: String, data: String) -> Result<i64, String> {
        let out = self.inner.insert(key, data).await;
        let counter = if out.is_ok() { &self.ok } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
        out
    }
}

/// On-CPU time of this process's threads whose name starts with `prefix`
/// (`/proc/self/task/*/schedstat`, nanoseconds); threads that ended are
/// not counted.
fn threads_cpu(prefix: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut ns = 0u64;
    for task in tasks.flatten() {
        let dir = task.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !name.trim_end().starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        ns += stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Duration::from_nanos(ns)
}

/// Runtime thread names: the server's and the built-in clients' CPU is
/// told apart by them.
const SERVER_THREADS: &str = "http-server";
const CLIENT_THREADS: &str = "http-client";

/// The one handler both pools serve.
async fn create_event<S: Store>(
    State(store): State<S>,
    Json(event): Json<NewEvent>,
) -> Result<(StatusCode, Json<Created>), (StatusCode, String)> {
    let id = store
        .insert(event.key, event.data)
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e))?;
    Ok((StatusCode::CREATED, Json(Created { id })))
}

fn router<S: Store>(store: S) -> Router {
    Router::new()
        .route("/events", post(create_event::<S>))
        .with_state(store)
}

struct RunResult {
    name: &'static str,
    rows: u64,
    errors: u64,
    elapsed: Duration,
    hist: Histogram<u64>,
    rows_per_batch: Option<f64>,
    /// CPU of the client runtime's threads during the measured load.
    client_cpu: Duration,
    /// CPU of the server runtime's threads during the measured load.
    server_cpu: Duration,
}

impl RunResult {
    fn rows_per_sec(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64()
    }
    fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
    /// Milliseconds of CPU per 1,000 answered requests.
    fn per_1k(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e3 / (self.rows.max(1) as f64 / 1e3)
    }
}

/// What one load measured: successes, errors, wall time, latency (µs).
type Measured = (u64, u64, Duration, Histogram<u64>);

/// Sends `total` POSTs from `clients` concurrent clients of `kind`.
async fn load(kind: ClientKind, base: &str, clients: usize, total: usize, tag: &str) -> Measured {
    match kind {
        ClientKind::Hyper => load_hyper(base, clients, total, tag).await,
        ClientKind::Reqwest => load_reqwest(base, clients, total, tag).await,
    }
}

/// The `index`-th request's body (unique key).
fn event(tag: &str, i: usize) -> NewEvent {
    NewEvent {
        key: format!("{tag}-{i}"),
        data: format!("event {i} payload {:0>64}", i),
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds")
}

/// An HTTP/1.1 client connection to `addr` (its connection task spawned).
async fn connect(
    addr: SocketAddr,
) -> Option<hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>> {
    use hyper_util::rt::TokioIo;
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    tcp.set_nodelay(true).ok()?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// The built-in clients on hyper's HTTP/1.1 client connection: each client
/// its own keep-alive TCP connection, opened before the clock starts (a
/// burst of connects is not a burst of requests; one lost to a full accept
/// queue would add a 1 s SYN retry to a request), reopened after an error;
/// the next request sent when the last one's answer has been read.
async fn load_hyper(base: &str, clients: usize, total: usize, tag: &str) -> Measured {
    use http_body_util::{BodyExt, Full};
    let authority = base
        .strip_prefix("http://")
        .unwrap_or(base)
        .trim_end_matches('/')
        .to_string();
    let addr: SocketAddr = authority
        .parse()
        .unwrap_or_else(|e| panic!("{base}: not http://IP:PORT ({e})"));
    let next = Arc::new(AtomicUsize::new(0));
    let senders = futures_util::future::join_all((0..clients).map(|_| connect(addr))).await;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut sender in senders {
        let (next, tag, authority) = (next.clone(), tag.to_string(), authority.clone());
        tasks.spawn(async move {
            let mut hist = histogram();
            let (mut ok, mut err) = (0u64, 0u64);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let body = serde_json::to_vec(&event(&tag, i)).expect("json body");
                let request = axum::http::Request::post("/events")
                    .header(axum::http::header::HOST, &authority)
                    .header(axum::http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(bytes::Bytes::from(body)))
                    .expect("request");
                let t = Instant::now();
                if sender.is_none() {
                    sender = connect(addr).await;
                }
                let Some(s) = sender.as_mut() else {
                    err += 1;
                    continue;
                };
                let answered = async {
                    s.ready().await.ok()?;
                    let resp = s.send_request(request).await.ok()?;
                    let created = resp.status() == StatusCode::CREATED;
                    resp.into_body().collect().await.ok()?;
                    Some(created)
                };
                match answered.await {
                    Some(true) => {
                        hist.saturating_record(t.elapsed().as_micros() as u64);
                        ok += 1;
                    }
                    Some(false) => err += 1,
                    None => {
                        err += 1;
                        sender = None;
                    }
                }
            }
            (ok, err, hist)
        });
    }
    let mut hist = histogram();
    let (mut ok, mut err) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let (o, e, h) = r.expect("client task");
        ok += o;
        err += e;
        hist.add(h).expect("merge histograms");
    }
    (ok, err, started.elapsed(), hist)
}

/// The built-in clients on reqwest (its connection pool, `json` bodies):
/// heavier per request than [`load_hyper`] (`--client reqwest`).
async fn load_reqwest(base: &str, clients: usize, total: usize, tag: &str) -> Measured {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
        .expect("http client");
    let next = Arc::new(AtomicUsize::new(0));
    let url = format!("{base}/events");
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (http, next, url, tag) = (http.clone(), next.clone(), url.clone(), tag.to_string());
        tasks.spawn(async move {
            let mut hist = histogram();
            let (mut ok, mut err) = (0u64, 0u64);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let event = event(&tag, i);
                let t = Instant::now();
                match http.post(&url).json(&event).send().await {
                    Ok(resp) if resp.status() == StatusCode::CREATED => {
                        let _ = resp.bytes().await;
                        hist.saturating_record(t.elapsed().as_micros() as u64);
                        ok += 1;
                    }
                    _ => err += 1,
                }
            }
            (ok, err, hist)
        });
    }
    let mut hist = histogram();
    let (mut ok, mut err) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let (o, e, h) = r.expect("client task");
        ok += o;
        err += e;
        hist.add(h).expect("merge histograms");
    }
    (ok, err, started.elapsed(), hist)
}

/// Serves `router` on a loopback port (on `server_rt`), runs the warm-up
/// and the measured load (on `client_rt`), then stops the server.
fn run<S: Store>(
    name: &'static str,
    store: S,
    stats_of: Option<&batchpool::postgres::Pool>,
    args: &Args,
    server_rt: &tokio::runtime::Runtime,
    client_rt: &tokio::runtime::Runtime,
) -> RunResult {
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().unwrap();
    let server = server_rt.spawn(async move { axum::serve(listener, router(store)).await });
    let base = format!("http://{addr}");
    if args.warmup > 0 {
        client_rt.block_on(load(
            args.client,
            &base,
            args.clients,
            args.warmup,
            &format!("{name}-warm"),
        ));
    }
    let before = stats_of.map(|p| p.stats());
    let cpu_before = (threads_cpu(CLIENT_THREADS), threads_cpu(SERVER_THREADS));
    let (rows, errors, elapsed, hist) =
        client_rt.block_on(load(args.client, &base, args.clients, args.requests, name));
    let client_cpu = threads_cpu(CLIENT_THREADS).saturating_sub(cpu_before.0);
    let server_cpu = threads_cpu(SERVER_THREADS).saturating_sub(cpu_before.1);
    let rows_per_batch = stats_of.zip(before).map(|(p, before)| {
        let after = p.stats();
        (after.rows - before.rows) as f64 / (after.batches - before.batches).max(1) as f64
    });
    server.abort();
    RunResult {
        name,
        rows,
        errors,
        elapsed,
        hist,
        rows_per_batch,
        client_cpu,
        server_cpu,
    }
}

/// batchpool, default batching (natural: a row goes out as soon as a
/// connection is free; rows coalesce while all are busy), on a fresh
/// database with the events table.
fn batchpool_pool(args: &Args, rt: &tokio::runtime::Runtime) -> batchpool::postgres::Pool {
    let url = rt.block_on(common::pg_fresh_db());
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(args.pool_size)
        .build()
        .expect("batchpool pool");
    rt.block_on(pool.execute(SCHEMA, &[])).expect("schema");
    pool
}

/// Plain deadpool-postgres (one INSERT per request on a pooled
/// connection), on a fresh database with the events table.
fn deadpool_pool(args: &Args, rt: &tokio::runtime::Runtime) -> deadpool_postgres::Pool {
    let url = rt.block_on(common::pg_fresh_db());
    let config: tokio_postgres::Config = url.parse().expect("pg url");
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(args.pool_size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .expect("deadpool pool");
    rt.block_on(async {
        let c = pool.get().await.map_err(|e| e.to_string())?;
        c.batch_execute(SCHEMA).await.map_err(|e| e.to_string())
    })
    .expect("schema");
    pool
}

/// A runtime whose threads are named `name` (their CPU is read by name).
fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Waits for SIGINT, SIGTERM or the end of `secs`.
async fn stopped(secs: Option<u64>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let deadline = async {
        match secs {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        () = deadline => {}
    }
}

/// `--serve-only`: serves `store` on `--addr` until stopped, then prints
/// what it answered, `rows` (the table's count, if any) and its CPU.
fn serve_only<S: Store>(
    args: &Args,
    rt: &tokio::runtime::Runtime,
    store: S,
    stats_of: Option<&batchpool::postgres::Pool>,
    rows: impl AsyncFnOnce() -> Option<i64>,
) {
    use std::io::Write as _;
    let store = Counted {
        inner: store,
        ok: Arc::default(),
        failed: Arc::default(),
    };
    let (ok, failed) = (store.ok.clone(), store.failed.clone());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(args.addr))
        .unwrap_or_else(|e| panic!("cannot listen on {}: {e}", args.addr));
    let addr = listener.local_addr().expect("local address");
    println!(
        "http_load: serving http://{addr}/events ({:?}, pool size {}); stop with SIGINT/SIGTERM{}",
        args.pool,
        args.pool_size,
        args.serve_secs
            .map_or_else(String::new, |s| format!(" or after {s} s"))
    );
    let _ = std::io::stdout().flush();
    let cpu_before = threads_cpu(SERVER_THREADS);
    let started = Instant::now();
    rt.block_on(async {
        axum::serve(listener, router(store))
            .with_graceful_shutdown(stopped(args.serve_secs))
            .await
    })
    .expect("serve");
    let cpu = threads_cpu(SERVER_THREADS).saturating_sub(cpu_before);
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let rows = rt.block_on(rows());
    println!(
        "http_load: served {:.1} s: {ok} inserted, {failed} failed, table rows {}, rows/batch {}, server CPU {:.1} ms per 1,000 requests ({:.2} s)",
        started.elapsed().as_secs_f64(),
        rows.map_or_else(|| "-".into(), |n| n.to_string()),
        stats_of.map_or_else(
            || "-".into(),
            |p| format!("{:.1}", p.stats().rows_per_batch())
        ),
        cpu.as_secs_f64() * 1e6 / (ok + failed).max(1) as f64,
        cpu.as_secs_f64(),
    );
}

/// `--target`: the built-in clients alone, against another process's
/// server.
fn drive(args: &Args, base: &str) {
    let rt = runtime(CLIENT_THREADS);
    // Keys unique to this process and moment: several runs can drive one
    // server.
    let tag = format!(
        "client-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let base = base.trim_end_matches('/');
    if args.warmup > 0 {
        rt.block_on(load(
            args.client,
            base,
            args.clients,
            args.warmup,
            &format!("{tag}-warm"),
        ));
    }
    let cpu_before = threads_cpu(CLIENT_THREADS);
    let (rows, errors, elapsed, hist) =
        rt.block_on(load(args.client, base, args.clients, args.requests, &tag));
    let r = RunResult {
        name: "target",
        rows,
        errors,
        elapsed,
        hist,
        rows_per_batch: None,
        client_cpu: threads_cpu(CLIENT_THREADS).saturating_sub(cpu_before),
        server_cpu: Duration::ZERO,
    };
    println!(
        "http_load --target {base}: {} clients, {} requests (+{} warm-up): {:.0} rows/s, \
         p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, {} errors, client CPU {:.1} ms per 1,000 requests",
        args.clients,
        args.requests,
        args.warmup,
        r.rows_per_sec(),
        r.ms(0.50),
        r.ms(0.99),
        r.hist.max() as f64 / 1000.0,
        r.errors,
        r.per_1k(r.client_cpu),
    );
}

fn main() {
    let args = Args::parse();
    if let Some(base) = &args.target {
        drive(&args, base);
        return;
    }
    if !args.addr.ip().is_loopback() {
        eprintln!(
            "http_load: --addr must be a loopback address, not {}",
            args.addr
        );
        std::process::exit(2);
    }
    if let Some(url) = &args.pg_url {
        // SAFETY: set before any other thread (runtimes, harness) exists.
        unsafe { std::env::set_var("PG_URL", url) };
    }
    let server_rt = runtime(SERVER_THREADS);
    if args.serve_only {
        let count = async |pool: &batchpool::postgres::Pool| {
            let row = pool.query_one("SELECT count(*) FROM events", &[]).await;
            row.ok().map(|r| r.get::<_, i64>(0))
        };
        match args.pool {
            PoolKind::Batchpool => {
                let pool = batchpool_pool(&args, &server_rt);
                let store = Batchpool(pool.clone());
                serve_only(&args, &server_rt, store, Some(&pool), async || {
                    let n = count(&pool).await;
                    pool.close().await;
                    n
                });
            }
            PoolKind::Deadpool => {
                let pool = deadpool_pool(&args, &server_rt);
                serve_only(&args, &server_rt, Plain(pool.clone()), None, async || {
                    let c = pool.get().await.ok()?;
                    let row = c.query_one("SELECT count(*) FROM events", &[]).await;
                    row.ok().map(|r| r.get::<_, i64>(0))
                });
            }
            PoolKind::NoDb => serve_only(&args, &server_rt, NoDb, None, async || None),
        }
        return;
    }
    let client_rt = runtime(CLIENT_THREADS);
    let base_url = common::pg_url();
    let (version, sync_commit) = server_rt.block_on(async {
        let pool = batchpool::postgres::Pool::builder(&base_url)
            .max_size(1)
            .build()
            .expect("pool");
        let v: String = pool
            .query_one("SHOW server_version", &[])
            .await
            .expect("version")
            .get(0);
        let s: String = pool
            .query_one("SHOW synchronous_commit", &[])
            .await
            .expect("synchronous_commit")
            .get(0);
        pool.close().await;
        (v, s)
    });

    let pool = batchpool_pool(&args, &server_rt);
    let batched = run(
        "batchpool",
        Batchpool(pool.clone()),
        Some(&pool),
        &args,
        &server_rt,
        &client_rt,
    );
    server_rt.block_on(pool.close());

    let plain_pool = deadpool_pool(&args, &server_rt);
    let plain = run(
        "deadpool",
        Plain(plain_pool.clone()),
        None,
        &args,
        &server_rt,
        &client_rt,
    );
    plain_pool.close();
    let ceiling = args
        .ceiling
        .then(|| run("no-db", NoDb, None, &args, &server_rt, &client_rt));
    let mut results = vec![&batched, &plain];
    results.extend(ceiling.as_ref());

    let ratio = batched.rows_per_sec() / plain.rows_per_sec();
    let p99_ratio = batched.ms(0.99) / plain.ms(0.99);
    if args.json {
        let row = |r: &RunResult| {
            serde_json::json!({
                "pool": r.name,
                "rows": r.rows,
                "errors": r.errors,
                "seconds": r.elapsed.as_secs_f64(),
                "rows_per_sec": r.rows_per_sec(),
                "p50_ms": r.ms(0.50),
                "p99_ms": r.ms(0.99),
                "max_ms": r.hist.max() as f64 / 1000.0,
                "rows_per_batch": r.rows_per_batch,
                "client_cpu_ms_per_1k": r.per_1k(r.client_cpu),
                "server_cpu_ms_per_1k": r.per_1k(r.server_cpu),
            })
        };
        let out = serde_json::json!({
            "bench": "http_load",
            "clients": args.clients,
            "requests": args.requests,
            "warmup": args.warmup,
            "pool_size": args.pool_size,
            "postgres": version,
            "synchronous_commit": sync_commit,
            "fast_server": common::fast_server(),
            "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "results": results.iter().map(|r| row(r)).collect::<Vec<_>>(),
            "rows_per_sec_ratio": ratio,
            "p99_ratio": p99_ratio,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
        return;
    }
    println!(
        "HTTP load: POST /events (axum, JSON, INSERT ... RETURNING id), {} clients, {} requests \
         (+{} warm-up), pool size {}, PostgreSQL {} (synchronous_commit={}, fast_server={}), {} cores",
        args.clients,
        args.requests,
        args.warmup,
        args.pool_size,
        version,
        sync_commit,
        common::fast_server(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!();
    println!(
        "| pool      |   rows/s | p50 ms | p99 ms | max ms | rows/batch | errors | client CPU ms/1k req | server CPU ms/1k req |"
    );
    println!(
        "|-----------|---------:|-------:|-------:|-------:|-----------:|-------:|---------------------:|---------------------:|"
    );
    for r in results {
        println!(
            "| {:<9} | {:>8.0} | {:>6.2} | {:>6.2} | {:>6.1} | {:>10} | {:>6} | {:>20.1} | {:>20.1} |",
            r.name,
            r.rows_per_sec(),
            r.ms(0.50),
            r.ms(0.99),
            r.hist.max() as f64 / 1000.0,
            r.rows_per_batch
                .map_or_else(|| "-".to_string(), |b| format!("{b:.1}")),
            r.errors,
            r.per_1k(r.client_cpu),
            r.per_1k(r.server_cpu),
        );
    }
    println!();
    println!(
        "batchpool / deadpool: {ratio:.2}x rows/s, p99 {p99_ratio:.2}x (target: >= 3x rows/s at --clients 256, p99 <= 1x the peer's)"
    );
    println!(
        "CPU: on-CPU time of the client runtime's and the server runtime's threads during the measured requests \
         (PostgreSQL's own processes not counted); {} cores shared by clients, server and PostgreSQL",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
}
