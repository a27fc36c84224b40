//! The axum and actix-web example services on a loopback port against a
//! real PostgreSQL, driven by a real HTTP client (reqwest). Every test runs
//! as `pg::name` and, behind PgBouncer in transaction mode, as
//! `pgbouncer::name` (not through the other poolers: what these test sits
//! on top of the pool, whose own suites run through them).

use crate::common;

#[path = "../../examples/actix_service.rs"]
mod actix_service;
#[path = "../../examples/axum_service.rs"]
mod axum_service;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::backend::{Patience, TestBackend, pg_and_pgbouncer, wait_for};
use batchpool::BatchConfig;
use batchpool::postgres::Pool;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// The JSON shapes both examples speak (kept separate here so the test
/// checks the wire format, not the examples' own types).
#[derive(Debug, Clone, Serialize)]
struct NewEvent {
    key: String,
    data: String,
}

#[derive(Debug, Deserialize)]
struct Created {
    id: i64,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Event {
    id: i64,
    key: String,
    data: String,
}

pg_and_pgbouncer! {
    (flavor = "multi_thread", worker_threads = 4) => [
        axum_service_two_thousand_concurrent_posts,
    ],
    (flavor = "multi_thread", worker_threads = 2) => [
        actix_service_concurrent_posts,
        axum_service_maps_overload_to_503,
        axum_service_maps_outcome_unknown_to_500,
        axum_service_answers_a_write_cut_by_the_deadline_as_outcome_unknown,
        axum_service_keeps_server_text_out_of_answers,
    ],
}

async fn pool<B: TestBackend<Pool = Pool>>(max_size: usize) -> Pool {
    let url = B::fresh_db().await;
    let pool = Pool::builder(&url)
        .max_size(max_size)
        .build()
        .expect("build pool");
    pool.execute(axum_service::SCHEMA, &[])
        .await
        .expect("create table");
    pool
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .expect("http client")
}

/// POSTs `n` distinct events with at most `in_flight` requests at once and
/// returns id → posted body.
async fn post_all(base: &str, n: usize, in_flight: usize) -> HashMap<i64, NewEvent> {
    let http = client();
    let limit = Arc::new(Semaphore::new(in_flight));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (http, limit) = (http.clone(), limit.clone());
        let url = format!("{base}/events");
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await.unwrap();
            let event = NewEvent {
                key: format!("key-{i}"),
                data: format!("payload {i} {}", "x".repeat(i % 50)),
            };
            let resp = http.post(&url).json(&event).send().await.expect("POST");
            assert_eq!(resp.status(), 201, "POST {i}");
            let created: Created = resp.json().await.expect("POST body");
            (created.id, event)
        });
    }
    let mut sent = HashMap::new();
    while let Some(r) = tasks.join_next().await {
        let (id, event) = r.unwrap();
        assert!(sent.insert(id, event).is_none(), "id {id} returned twice");
    }
    sent
}

/// GETs every id and checks it reads back the body that was posted.
async fn read_back(base: &str, sent: &HashMap<i64, NewEvent>, in_flight: usize) {
    let http = client();
    let limit = Arc::new(Semaphore::new(in_flight));
    let mut tasks = tokio::task::JoinSet::new();
    for (&id, event) in sent {
        let (http, limit, event) = (http.clone(), limit.clone(), event.clone());
        let url = format!("{base}/events/{id}");
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await.unwrap();
            let resp = http.get(&url).send().await.expect("GET");
            assert_eq!(resp.status(), 200, "GET {id}");
            let got: Event = resp.json().await.expect("GET body");
            assert_eq!(
                got,
                Event {
                    id,
                    key: event.key,
                    data: event.data
                }
            );
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
}

/// The error answers: duplicate key, unknown id, malformed path.
async fn check_errors(base: &str) {
    let http = client();
    let dup = NewEvent {
        key: "key-0".into(),
        data: "again".into(),
    };
    let resp = http
        .post(format!("{base}/events"))
        .json(&dup)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("already exists"),
        "{body}"
    );
    let resp = http
        .get(format!("{base}/events/987654321"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = http
        .get(format!("{base}/events/not-a-number"))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_client_error(), "{}", resp.status());
}

/// `n` POSTs (at most `in_flight` at once) read back, the error answers,
/// and every row coalesced and stored once.
async fn exercise(service: &str, base: &str, pool: &Pool, n: usize, in_flight: usize) {
    let sent = post_all(base, n, in_flight).await;
    assert_eq!(sent.len(), n);
    read_back(base, &sent, in_flight).await;
    check_errors(base).await;
    assert_eq!(count(pool).await, n as i64);

    let stats = pool.stats();
    eprintln!(
        "{service}: {:.1} rows per batch, {stats:?}",
        stats.rows_per_batch()
    );
    // Every call is coalesced: the n POSTs and the duplicate, the n reads
    // by id and the read of a missing id.
    assert_eq!(
        stats.rows,
        2 * n as u64 + 2,
        "{n} rows, the duplicate and n + 1 reads: {stats:?}"
    );
    assert!(
        stats.rows_per_batch() > 1.0,
        "POSTs were coalesced: {stats:?}"
    );
}

async fn count(pool: &Pool) -> i64 {
    pool.query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0)
}

fn base(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

async fn axum_service_two_thousand_concurrent_posts<B: TestBackend<Pool = Pool>>() {
    let pool = pool::<B>(4).await;
    let (base, server) = serve_axum(pool.clone()).await;
    exercise("axum", &base, &pool, 2000, 200).await;
    server.abort();
}

async fn actix_service_concurrent_posts<B: TestBackend<Pool = Pool>>() {
    let pool = pool::<B>(2).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // actix-web runs on its own system (one current-thread runtime per
    // worker), in a thread of its own.
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let data = actix_web::web::Data::new(pool.clone());
    let server = std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = actix_web::HttpServer::new(move || {
                actix_web::App::new()
                    .app_data(data.clone())
                    .configure(actix_service::configure)
            })
            .workers(2)
            .listen(listener)
            .expect("listen")
            .run();
            handle_tx.send(server.handle()).unwrap();
            server.await
        })
    });
    let handle = handle_rx.recv().expect("server started");
    exercise("actix", &base(addr), &pool, 200, 50).await;
    handle.stop(true).await;
    server.join().unwrap().expect("server ran");
}

async fn serve_axum(pool: Pool) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum_service::app(pool);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    (base(addr), server)
}

async fn post(base: &str, key: &str) -> (u16, serde_json::Value) {
    let resp = client()
        .post(format!("{base}/events"))
        .json(&NewEvent {
            key: key.into(),
            data: "d".into(),
        })
        .send()
        .await
        .expect("POST");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("JSON body"))
}

async fn axum_service_maps_overload_to_503<B: TestBackend<Pool = Pool>>() {
    let url = B::fresh_db().await;
    let config = BatchConfig::default()
        .queue_capacity(1)
        .queue_full(batchpool::QueueFull::Reject);
    let pool = B::pool(&url, config, 1);
    pool.execute(axum_service::SCHEMA, &[]).await.unwrap();
    let (base, server) = serve_axum(pool.clone()).await;
    assert_eq!(post(&base, "warm").await.0, 201); // prepares the INSERT

    // With the only connection held, one POST fills the one-row queue.
    let held = pool.get().await.unwrap();
    let first = tokio::spawn({
        let base = base.clone();
        async move { post(&base, "first").await }
    });
    wait_for("the first POST queued", || pool.stats().queued == 1).await;
    assert_eq!(pool.stats().queued, 1);
    let (status, body) = post(&base, "second").await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("busy"), "{body}");
    drop(held);
    assert_eq!(first.await.unwrap().0, 201);
    server.abort();
}

async fn axum_service_maps_outcome_unknown_to_500<B: TestBackend<Pool = Pool>>() {
    let url = B::fresh_db().await;
    let proxy = common::proxy::Proxy::start(B::upstream(&url)).await;
    let pool = B::pool_via(&url, proxy.addr(), BatchConfig::default(), 1);
    pool.execute(axum_service::SCHEMA, &[]).await.unwrap();
    let (base, server) = serve_axum(pool.clone()).await;
    assert_eq!(post(&base, "warm").await.0, 201);

    // The INSERT reaches the server and commits, its reply is held, then
    // the connection is cut: nobody can tell whether it committed.
    proxy.hold_replies(true);
    let sent_before = proxy.client_bytes();
    let pending = tokio::spawn({
        let base = base.clone();
        async move { post(&base, "in-doubt").await }
    });
    let direct = B::pool(&url, BatchConfig::default(), 1);
    let patience = Patience::new("the INSERT to commit");
    loop {
        let rows = direct
            .query("SELECT 1 FROM events WHERE key = 'in-doubt'", &[])
            .await
            .unwrap();
        if !rows.is_empty() {
            break;
        }
        patience.wait().await;
    }
    assert!(proxy.client_bytes() > sent_before, "the INSERT was sent");
    proxy.kill_all();
    proxy.hold_replies(false);
    let (status, body) = pending.await.unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("outcome unknown"),
        "{body}"
    );
    server.abort();
}

/// A write whose answer misses the pool's statement deadline may have
/// committed: the service must say the outcome is unknown (500), never
/// "busy, retry later" (503), which would make a client store it twice.
async fn axum_service_answers_a_write_cut_by_the_deadline_as_outcome_unknown<
    B: TestBackend<Pool = Pool>,
>() {
    let url = B::fresh_db().await;
    let proxy = common::proxy::Proxy::start(B::upstream(&url)).await;
    // An explicit limit: the pool waits for an answer at most this plus its
    // grace period, then fails the write as outcome unknown.
    let pool = B::pool_with(&url, Some(proxy.addr()), BatchConfig::default(), 1, |b| {
        b.statement_timeout(Duration::from_secs(1))
    });
    pool.execute(axum_service::SCHEMA, &[]).await.unwrap();
    let (base, server) = serve_axum(pool.clone()).await;
    assert_eq!(post(&base, "warm").await.0, 201);

    // The INSERT reaches the server and commits; its answer is held past
    // the deadline.
    proxy.hold_replies(true);
    let (status, body) = post(&base, "in-doubt").await;
    proxy.hold_replies(false);
    assert_ne!(status, 503, "{body}");
    assert_eq!(status, 500, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("outcome unknown"), "{body}");
    assert!(message.contains("check before retrying"), "{body}");
    assert!(!message.contains("retry later"), "{body}");
    // The pool's own text (the deadline in ms) stays in the log.
    assert!(!message.contains(" ms)"), "{body}");

    // And it had been stored: a retry on "retry later" would have been a
    // second write.
    let direct = B::pool(&url, BatchConfig::default(), 1);
    let patience = Patience::new("the cut INSERT to be visible");
    loop {
        let rows = direct
            .query("SELECT 1 FROM events WHERE key = 'in-doubt'", &[])
            .await
            .unwrap();
        if !rows.is_empty() {
            break;
        }
        patience.wait().await;
    }
    server.abort();
}

/// The server's messages (values, table and constraint names) go to the
/// log, not to HTTP clients: a rejected value, a broken rule and an
/// unexpected error each answer with their class only.
async fn axum_service_keeps_server_text_out_of_answers<B: TestBackend<Pool = Pool>>() {
    let pool = pool::<B>(1).await;
    let (base, server) = serve_axum(pool.clone()).await;
    let http = client();
    let post_event = |key: &str, data: &str| {
        http.post(format!("{base}/events"))
            .json(&NewEvent {
                key: key.into(),
                data: data.into(),
            })
            .send()
    };

    // A NUL byte: the server refuses the value (22021).
    let resp = post_event("nul", "a\u{0}b").await.unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("22021"), "{body}");
    assert!(!message.contains("byte sequence"), "{body}");

    // A CHECK rule with a telling name: 422, its name not given away.
    pool.execute(
        "ALTER TABLE events ADD CONSTRAINT secret_rule_name CHECK (length(data) < 5)",
        &[],
    )
    .await
    .unwrap();
    let resp = post_event("long", "far too long").await.unwrap();
    assert_eq!(resp.status(), 422);
    let body: serde_json::Value = resp.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("23514"), "{body}");
    assert!(!message.contains("secret_rule_name"), "{body}");
    assert!(!message.contains("violates"), "{body}");

    // Anything else: 500 with no detail.
    pool.execute("DROP TABLE events", &[]).await.unwrap();
    let resp = http.get(format!("{base}/events/1")).send().await.unwrap();
    assert_eq!(resp.status(), 500);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "internal error", "{body}");
    server.abort();
}
