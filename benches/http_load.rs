//! HTTP load bench: the same axum `POST /events` handler (JSON body → one
//! `INSERT ... RETURNING id` → JSON id) backed by batchpool vs by plain
//! deadpool-postgres, driven by N concurrent keep-alive HTTP clients on
//! loopback. Reports rows/s and p50/p99 request latency.
//!
//! ```text
//! cargo bench --bench http_load -- --clients 64 --requests 20000 --pool-size 8
//! cargo bench --bench http_load -- --pg-url postgresql://postgres@127.0.0.1:5432/postgres --json
//! ```
//!
//! Without `--pg-url` (or `PG_URL`), a throwaway PostgreSQL cluster is
//! started (durable settings unless `BATCHPOOL_FAST_SERVER=1`). Each run
//! uses a fresh database. Server, clients and PostgreSQL share the machine:
//! read the numbers as a comparison, not as absolute capacity. `--ceiling`
//! adds a run of the same handler with no database behind it: the most the
//! HTTP stack itself does on this machine.

#[path = "../tests/common/mod.rs"]
mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Json, State};
use axum::http::StatusCode;
use axum::routing::post;
use clap::Parser;
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
    /// Set by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
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
}

impl RunResult {
    fn rows_per_sec(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64()
    }
    fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Sends `total` POSTs from `clients` concurrent clients; returns successes,
/// errors, wall time and the latency histogram (µs).
async fn load(
    base: &str,
    clients: usize,
    total: usize,
    tag: &str,
) -> (u64, u64, Duration, Histogram<u64>) {
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
            let mut hist = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
            let (mut ok, mut err) = (0u64, 0u64);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let event = NewEvent {
                    key: format!("{tag}-{i}"),
                    data: format!("event {i} payload {:0>64}", i),
                };
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
    let mut hist = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
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
            &base,
            args.clients,
            args.warmup,
            &format!("{name}-warm"),
        ));
    }
    let before = stats_of.map(|p| p.stats());
    let (rows, errors, elapsed, hist) =
        client_rt.block_on(load(&base, args.clients, args.requests, name));
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
    }
}

fn main() {
    let args = Args::parse();
    if let Some(url) = &args.pg_url {
        // SAFETY: set before any other thread (runtimes, harness) exists.
        unsafe { std::env::set_var("PG_URL", url) };
    }
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("server runtime");
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("client runtime");
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

    // batchpool: default batching (natural: a row goes out as soon as a
    // connection is free; rows coalesce while all are busy).
    let url = server_rt.block_on(common::pg_fresh_db());
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(args.pool_size)
        .build()
        .expect("batchpool pool");
    server_rt
        .block_on(pool.execute(SCHEMA, &[]))
        .expect("schema");
    let batched = run(
        "batchpool",
        Batchpool(pool.clone()),
        Some(&pool),
        &args,
        &server_rt,
        &client_rt,
    );
    server_rt.block_on(pool.close());

    // Plain deadpool-postgres: one INSERT per request on a pooled connection.
    let url = server_rt.block_on(common::pg_fresh_db());
    let config: tokio_postgres::Config = url.parse().expect("pg url");
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let plain_pool = deadpool_postgres::Pool::builder(manager)
        .max_size(args.pool_size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .expect("deadpool pool");
    server_rt
        .block_on(async {
            let c = plain_pool.get().await.map_err(|e| e.to_string())?;
            c.batch_execute(SCHEMA).await.map_err(|e| e.to_string())
        })
        .expect("schema");
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
    println!("| pool      |   rows/s | p50 ms | p99 ms | max ms | rows/batch | errors |");
    println!("|-----------|---------:|-------:|-------:|-------:|-----------:|-------:|");
    for r in results {
        println!(
            "| {:<9} | {:>8.0} | {:>6.2} | {:>6.2} | {:>6.1} | {:>10} | {:>6} |",
            r.name,
            r.rows_per_sec(),
            r.ms(0.50),
            r.ms(0.99),
            r.hist.max() as f64 / 1000.0,
            r.rows_per_batch
                .map_or_else(|| "-".to_string(), |b| format!("{b:.1}")),
            r.errors,
        );
    }
    println!();
    println!(
        "batchpool / deadpool: {ratio:.2}x rows/s, p99 {p99_ratio:.2}x (target: >= 3x rows/s, p99 <= 2x)"
    );
}
