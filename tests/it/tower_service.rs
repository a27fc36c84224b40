//! The tower integration against a real PostgreSQL: `PoolService` in a
//! `ServiceBuilder` stack, readiness as backpressure, and `CoalesceLayer`
//! over an inner service that runs batches on a pool. The PostgreSQL tests
//! run as `pg::name` and, behind PgBouncer in transaction mode, as
//! `pgbouncer::name` (not through the other poolers: what these test sits
//! on top of the pool, whose own suites run through them).

#[cfg(feature = "mysql")]
use crate::common;

use crate::common::backend::{TestBackend, pg_and_pgbouncer, wait_for};

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use batchpool::postgres::{Outcome, Pool};
use batchpool::tower::future::BatchFuture;
use batchpool::tower::{
    Batch, BatchExecutor, BoxError, CoalesceConfig, CoalesceLayer, PgValue, PoolService,
    ServicePool, Statement,
};
use batchpool::{BatchConfig, QueueFull};
use tower::limit::ConcurrencyLimit;
use tower::timeout::Timeout;
use tower::{Service, ServiceBuilder, ServiceExt};

const INSERT: &str = "INSERT INTO events (body) VALUES ($1) RETURNING id";

pg_and_pgbouncer! {
    (flavor = "multi_thread", worker_threads = 4) => [
        service_builder_stack_with_timeout_and_concurrency_limit,
        coalesce_layer_batches_rows_for_an_inner_service,
    ],
    (flavor = "multi_thread", worker_threads = 2) => [
        timeout_layer_drops_a_queued_row_unsent,
        readiness_blocks_while_the_queue_is_full,
        reserved_slot_is_released_when_the_service_is_dropped,
        fail_fast_pool_rejects_in_call_and_call_without_ready_waits,
        coalesce_readiness_and_dropped_rows,
        a_failed_batch_reaches_every_row_as_outcome_unknown,
    ],
}

async fn pool_with<B: TestBackend<Pool = Pool>>(config: BatchConfig, max_size: usize) -> Pool {
    let url = B::fresh_db().await;
    let pool = Pool::builder(&url)
        .max_size(max_size)
        .batching(config)
        .build()
        .expect("build pool");
    pool.execute(
        "CREATE TABLE events (id bigserial PRIMARY KEY, body text NOT NULL UNIQUE)",
        &[],
    )
    .await
    .expect("create table");
    pool
}

/// Runs `INSERT` once so its SQL text is prepared: later rows queue at once
/// even while every connection is held.
async fn warm(pool: &Pool) {
    let out = pool
        .execute(INSERT, &[&"warm-up".to_string()])
        .await
        .expect("warm-up row");
    assert_eq!(out.rows_affected(), 1);
}

async fn count(pool: &Pool) -> i64 {
    pool.query_one("SELECT count(*) FROM events", &[])
        .await
        .expect("count")
        .get(0)
}

fn insert(body: impl Into<String>) -> Statement<PgValue> {
    Statement::new(INSERT).bind(body.into())
}

/// `PoolService` under a 30 s timeout and a limit of 64 calls at once.
fn stack<P: ServicePool>(pool: P) -> Timeout<ConcurrencyLimit<PoolService<P>>> {
    ServiceBuilder::new()
        .timeout(Duration::from_secs(30))
        .concurrency_limit(64)
        .service(PoolService::new(pool))
}

/// Polls `poll_ready` once, without waiting.
async fn poll_ready_once<S, R>(svc: &mut S) -> Poll<Result<(), S::Error>>
where
    S: Service<R>,
{
    poll_fn(|cx| Poll::Ready(svc.poll_ready(cx))).await
}

async fn ids_to_bodies(pool: &Pool) -> HashMap<i64, String> {
    pool.query("SELECT id, body FROM events", &[])
        .await
        .expect("select")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn service_builder_stack_with_timeout_and_concurrency_limit<B: TestBackend<Pool = Pool>>() {
    let pool = pool_with::<B>(BatchConfig::default(), 2).await;
    let svc = stack(pool.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..500 {
        let svc = svc.clone();
        tasks.spawn(async move {
            let body = format!("row-{i}");
            let out = svc.oneshot(insert(body.clone())).await?;
            let id: i64 = out.returned().expect("RETURNING row").get(0);
            Ok::<_, BoxError>((id, body))
        });
    }
    let mut sent = HashMap::new();
    while let Some(r) = tasks.join_next().await {
        let (id, body) = r.unwrap().expect("insert through the stack");
        assert!(sent.insert(id, body).is_none(), "id {id} returned twice");
    }
    assert_eq!(sent.len(), 500);
    assert_eq!(
        ids_to_bodies(&pool).await,
        sent,
        "every id reads back its own body"
    );
    let stats = pool.stats();
    assert_eq!(stats.rows, 500);
    assert!(
        stats.rows_per_batch() > 1.0,
        "64 callers on 2 connections coalesce: {stats:?}"
    );

    // A duplicate is this caller's own database error, through the stack.
    let err = svc
        .clone()
        .oneshot(insert("row-7"))
        .await
        .expect_err("duplicate body");
    let err = err
        .downcast_ref::<batchpool::Error>()
        .expect("a batchpool error");
    assert_eq!(err.code(), Some("23505"));
    assert_eq!(count(&pool).await, 500);
}

async fn timeout_layer_drops_a_queued_row_unsent<B: TestBackend<Pool = Pool>>() {
    // Timed batching with a delay longer than the per-row timeout, and both
    // connections held: the timeout drops the row's future while the row
    // is still queued.
    let pool = pool_with::<B>(BatchConfig::default().max_delay(Duration::from_secs(1)), 2).await;
    // Learn the statement (refused for its missing parameter, so nothing
    // is written): the row below queues without a connection.
    assert!(pool.execute(INSERT, &[]).await.unwrap_err().is_params());
    let held = [pool.get().await.unwrap(), pool.get().await.unwrap()];
    let svc = ServiceBuilder::new()
        .timeout(Duration::from_millis(200))
        .service(PoolService::new(pool.clone()));
    let err = svc
        .oneshot(insert("late"))
        .await
        .expect_err("times out while queued");
    assert!(
        err.is::<tower::timeout::error::Elapsed>(),
        "the timeout's own error: {err:?}"
    );
    drop(held);
    // Past the batching delay the flush finds the row's caller gone.
    wait_for("the flush", || pool.stats().rows_cancelled == 1).await;
    let stats = pool.stats();
    assert_eq!(stats.rows_cancelled, 1, "{stats:?}");
    assert_eq!(stats.rows, 0, "{stats:?}");
    assert_eq!(count(&pool).await, 0, "the timed-out row was never sent");
}

async fn readiness_blocks_while_the_queue_is_full<B: TestBackend<Pool = Pool>>() {
    // Two queue slots, one connection. While the connection is held, no
    // flush can take rows, so two queued rows fill the queue.
    let pool = pool_with::<B>(BatchConfig::default().queue_capacity(2), 1).await;
    warm(&pool).await;
    let held = pool.get().await.expect("hold the only connection");
    let svc = PoolService::new(pool.clone());

    let mut queued = Vec::new();
    for i in 0..2 {
        let mut s = svc.clone();
        s.ready().await.expect("a free slot");
        queued.push(tokio::spawn(s.call(insert(format!("q{i}")))));
    }
    let mut third = svc.clone();
    // The spawned rows are queued as soon as their tasks run.
    wait_for("two rows queued", || pool.stats().queued == 2).await;
    assert_eq!(pool.stats().queued, 2);
    assert!(
        poll_ready_once(&mut third).await.is_pending(),
        "queue full: poll_ready must be Pending"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        poll_ready_once(&mut third).await.is_pending(),
        "still full while no flush can run"
    );

    drop(held); // a flush takes the two rows, freeing their slots
    tokio::time::timeout(Duration::from_secs(10), third.ready())
        .await
        .expect("ready after the flush")
        .expect("ready ok");
    let out = third.call(insert("third")).await.expect("third row");
    assert_eq!(out.rows_affected(), 1);
    for q in queued {
        assert_eq!(q.await.unwrap().expect("queued row").rows_affected(), 1);
    }
    assert_eq!(count(&pool).await, 4);
}

async fn reserved_slot_is_released_when_the_service_is_dropped<B: TestBackend<Pool = Pool>>() {
    let pool = pool_with::<B>(BatchConfig::default().queue_capacity(1), 1).await;
    warm(&pool).await;
    let held = pool.get().await.unwrap();
    let mut a = PoolService::new(pool.clone());
    let mut b = a.clone();
    a.ready().await.expect("a reserves the only slot");
    assert!(poll_ready_once(&mut b).await.is_pending(), "b must wait");

    // b waits in the background; dropping a (ready, never called) frees it.
    let waiter = tokio::spawn(async move {
        b.ready().await.expect("b ready");
        b
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "b still waits while a holds the slot"
    );
    drop(a);
    let mut b = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("b ready once a is dropped")
        .unwrap();

    // b's call uses the slot it reserved; the row queues behind the held
    // connection and completes once it is free.
    let call = tokio::spawn(b.call(insert("b")));
    wait_for("b's row queued", || pool.stats().queued == 1).await;
    assert_eq!(pool.stats().queued, 1);
    drop(held);
    call.await.unwrap().expect("b's row");

    // into_inner after ready also gives the slot back.
    let mut c = PoolService::new(pool.clone());
    c.ready().await.unwrap();
    let mut d = PoolService::new(c.into_inner());
    tokio::time::timeout(Duration::from_secs(5), d.ready())
        .await
        .expect("slot given back by into_inner")
        .unwrap();

    // A statement that does not queue gives its slot back when it completes.
    let rows = d
        .call(Statement::new("UPDATE events SET body = body || '!'"))
        .await
        .expect("update");
    assert_eq!(rows.rows_affected(), 2);
    tokio::time::timeout(Duration::from_secs(5), d.ready())
        .await
        .expect("slot back after a pass-through statement")
        .unwrap();
    assert_eq!(count(&pool).await, 2);
}

async fn fail_fast_pool_rejects_in_call_and_call_without_ready_waits<
    B: TestBackend<Pool = Pool>,
>() {
    let pool = pool_with::<B>(
        BatchConfig::default()
            .queue_capacity(1)
            .queue_full(QueueFull::Reject),
        1,
    )
    .await;
    warm(&pool).await;
    let held = pool.get().await.unwrap();
    let mut a = PoolService::new(pool.clone());
    a.ready().await.unwrap();
    let first = tokio::spawn(a.call(insert("first")));
    wait_for("the first row queued", || pool.stats().queued == 1).await;
    assert_eq!(pool.stats().queued, 1);

    let mut b = PoolService::new(pool.clone());
    assert!(
        poll_ready_once(&mut b).await.is_ready(),
        "fail-fast: poll_ready does not wait"
    );
    let err = b.call(insert("second")).await.expect_err("queue full");
    assert!(err.is_overloaded(), "{err:?}");
    drop(held);
    first.await.unwrap().expect("first row");

    // A call without poll_ready behaves like `execute`.
    let mut c = PoolService::new(pool.clone());
    c.call(insert("third")).await.expect("third row");
    assert_eq!(count(&pool).await, 3);

    pool.close().await;
    let mut d = PoolService::new(pool.clone());
    let err = d.ready().await.expect_err("closed pool");
    assert!(err.is_pool_closed(), "{err:?}");
}

/// Records the size of every batch the inner service receives.
#[derive(Clone, Default)]
struct BatchSizes(Arc<Mutex<Vec<usize>>>);

impl Service<Batch<PgValue>> for Recording {
    type Response = Vec<Result<Outcome, batchpool::Error>>;
    type Error = batchpool::Error;
    type Future = BatchFuture<Outcome>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.exec.poll_ready(cx)
    }

    fn call(&mut self, batch: Batch<PgValue>) -> Self::Future {
        self.sizes.0.lock().unwrap().push(batch.len());
        self.exec.call(batch)
    }
}

/// An inner service running batches on a pool, recording their sizes.
#[derive(Clone)]
struct Recording {
    sizes: BatchSizes,
    exec: BatchExecutor<Pool>,
}

fn recording(sizes: BatchSizes, exec: BatchExecutor<Pool>) -> Recording {
    Recording { sizes, exec }
}

async fn coalesce_layer_batches_rows_for_an_inner_service<B: TestBackend<Pool = Pool>>() {
    let pool = pool_with::<B>(BatchConfig::default(), 4).await;
    let sizes = BatchSizes::default();
    let svc = ServiceBuilder::new()
        .timeout(Duration::from_secs(30)) // per row
        .layer(CoalesceLayer::new(CoalesceConfig::default().max_rows(100)))
        .concurrency_limit(2) // batches in flight
        .timeout(Duration::from_secs(30)) // per batch
        .service(recording(sizes.clone(), BatchExecutor::new(pool.clone())));

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..300 {
        let svc = svc.clone();
        // Row 150 duplicates row 0's body: its own unique violation.
        let body = if i == 150 {
            "c-0".to_string()
        } else {
            format!("c-{i}")
        };
        tasks.spawn(async move {
            let r = svc.oneshot(insert(body.clone())).await;
            (i, body, r)
        });
    }
    let mut sent = HashMap::new();
    let mut failed = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let (i, body, r) = r.unwrap();
        match r {
            Ok(out) => {
                let id: i64 = out.returned().expect("own RETURNING row").get(0);
                assert!(sent.insert(id, body).is_none());
            }
            Err(e) => failed.push((i, e)),
        }
    }
    // Exactly one of the two "c-0" rows failed, with its own error.
    assert_eq!(failed.len(), 1, "{failed:?}");
    let (i, e) = &failed[0];
    assert!(*i == 0 || *i == 150);
    let e = e
        .downcast_ref::<batchpool::Error>()
        .expect("batchpool error");
    assert_eq!(e.code(), Some("23505"), "{e:?}");
    assert_eq!(sent.len(), 299);
    assert_eq!(ids_to_bodies(&pool).await, sent);

    let sizes = sizes.0.lock().unwrap().clone();
    assert_eq!(
        sizes.iter().sum::<usize>(),
        300,
        "every row went through a batch"
    );
    assert!(
        sizes.iter().all(|&n| n <= 100),
        "max_rows bounds batches: {sizes:?}"
    );
    assert!(
        sizes.len() < 300 && sizes.iter().any(|&n| n > 1),
        "rows were coalesced: {sizes:?}"
    );
}

async fn coalesce_readiness_and_dropped_rows<B: TestBackend<Pool = Pool>>() {
    let pool = pool_with::<B>(BatchConfig::default(), 1).await;
    let held = pool.get().await.unwrap(); // the inner batch cannot run yet
    let sizes = BatchSizes::default();
    let mut svc = ServiceBuilder::new()
        .layer(CoalesceLayer::new(
            CoalesceConfig::default().queue_capacity(1),
        ))
        .concurrency_limit(1)
        .service(recording(sizes.clone(), BatchExecutor::new(pool.clone())));

    // A is dispatched at once (the inner limit is free) and waits for the
    // connection; its queue slot is free again as soon as it left the queue.
    svc.ready().await.unwrap();
    let a = tokio::spawn(svc.call(insert("a")));
    wait_for("a dispatched", || !sizes.0.lock().unwrap().is_empty()).await;
    assert_eq!(*sizes.0.lock().unwrap(), vec![1]);

    // B takes the only slot and stays queued (the inner limit is in use).
    let mut b_svc = svc.clone();
    b_svc.ready().await.unwrap();
    let mut b = Box::pin(b_svc.call(insert("b")));
    assert!(
        poll_fn(|cx| Poll::Ready(b.as_mut().poll(cx)))
            .await
            .is_pending()
    );
    let mut c_svc = svc.clone();
    assert!(
        poll_ready_once::<_, Statement<PgValue>>(&mut c_svc)
            .await
            .is_pending(),
        "queue full"
    );
    // Dropping B's future removes its unsent row and frees the slot.
    drop(b);
    tokio::time::timeout(
        Duration::from_secs(5),
        ServiceExt::<Statement<PgValue>>::ready(&mut c_svc),
    )
    .await
    .expect("slot freed by the dropped row")
    .unwrap();
    drop(c_svc);

    drop(held);
    a.await.unwrap().expect("row a");
    assert_eq!(count(&pool).await, 1, "b was never sent");
    assert_eq!(sizes.0.lock().unwrap().iter().sum::<usize>(), 1);
}

async fn a_failed_batch_reaches_every_row_as_outcome_unknown<B: TestBackend<Pool = Pool>>() {
    let pool = pool_with::<B>(BatchConfig::default(), 1).await;
    let held = pool.get().await.unwrap();
    // The per-batch timeout expires while the batch waits for a connection.
    let svc = ServiceBuilder::new()
        .layer(CoalesceLayer::new(CoalesceConfig::default()))
        .concurrency_limit(1)
        .timeout(Duration::from_millis(300))
        .service(BatchExecutor::new(pool.clone()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let svc = svc.clone();
        tasks.spawn(async move { svc.oneshot(insert(format!("t{i}"))).await });
    }
    while let Some(r) = tasks.join_next().await {
        let err = r.unwrap().expect_err("the batch timed out");
        let err = err
            .downcast_ref::<batchpool::Error>()
            .expect("a batchpool error for every row");
        assert!(err.is_outcome_unknown(), "{err:?}");
        let source = std::error::Error::source(err).expect("the inner error");
        assert!(source.is::<tower::timeout::error::Elapsed>(), "{source:?}");
    }
    drop(held);
    assert_eq!(count(&pool).await, 0);
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_pool_behind_the_same_service_stack() {
    let url = common::mysql_fresh_db().await;
    let pool = batchpool::mysql::Pool::builder(&url)
        .max_size(2)
        .build()
        .unwrap();
    pool.execute(
        "CREATE TABLE events (id BIGINT AUTO_INCREMENT PRIMARY KEY, body VARCHAR(64) UNIQUE) ENGINE=InnoDB",
        (),
    )
    .await
    .unwrap();
    let svc = stack(pool.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let svc = svc.clone();
        tasks.spawn(async move {
            let stmt =
                Statement::new("INSERT INTO events (body) VALUES (?)").bind(format!("row-{i}"));
            svc.oneshot(stmt).await
        });
    }
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap().expect("insert").rows_affected(), 1);
    }
    let n: i64 = pool
        .query_one("SELECT COUNT(*) FROM events", ())
        .await
        .map(|row| row.get(0).unwrap())
        .unwrap();
    assert_eq!(n, 200);
    assert!(pool.stats().rows_per_batch() > 1.0, "{:?}", pool.stats());
    let err = svc
        .oneshot(Statement::new("INSERT INTO events (body) VALUES (?)").bind("row-7"))
        .await
        .expect_err("duplicate");
    let err = err
        .downcast_ref::<batchpool::Error>()
        .expect("batchpool error");
    assert_eq!(err.as_mysql_error().map(|e| e.code), Some(1062));
    pool.close().await;
}
