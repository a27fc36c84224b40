//! Cancellation, backpressure and shutdown against a real PostgreSQL and a
//! real MariaDB: every test runs as `pg::name` and `mysql::name`, and behind
//! PgBouncer in transaction mode as `pgbouncer::name`.

use crate::common;

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use crate::common::backend::{
    TestBackend, TestOutcome, all_returned, max_stat, settle, three, vals, wait_for,
};
use batchpool::{BatchConfig, QueueFull};
use rand::Rng;

three! {
    (flavor = "multi_thread", worker_threads = 4) => [
        cancellation_at_random_points_loses_nothing_acknowledged,
        tiny_queue_bound_still_completes_everything,
    ],
    (flavor = "multi_thread", worker_threads = 2) => [
        futures_dropped_before_sending_insert_nothing,
        dropping_futures_at_every_poll_point_is_safe,
        full_queue_fails_fast_when_configured,
        close_flushes_queued_rows_then_refuses_work,
    ],
}

/// A fresh database with table `table (k, v)`, and a pool on it.
async fn pool_with<B: TestBackend>(
    config: BatchConfig,
    max_size: usize,
    table: &str,
) -> (B::Pool, String) {
    let url = B::fresh_db().await;
    let pool = B::pool(&url, config, max_size);
    let ddl = format!("CREATE TABLE {table} (k INT PRIMARY KEY, v VARCHAR(20) NOT NULL)");
    B::execute(&pool, &ddl, &[]).await.unwrap();
    (pool, url)
}

async fn keys<B: TestBackend>(pool: &B::Pool, table: &str) -> HashSet<i32> {
    B::query_i32(pool, &format!("SELECT k FROM {table}"), &[])
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// Calls `sql` without its parameter: refused before queuing, but the pool
/// has learned the statement, so every later call queues at once (even
/// while no connection is free).
async fn learn<B: TestBackend>(pool: &B::Pool, sql: &str) {
    let e = B::execute(pool, sql, &[]).await.unwrap_err();
    assert!(e.is_params(), "{e}");
}

async fn cancellation_at_random_points_loses_nothing_acknowledged<B: TestBackend>() {
    let (pool, _) = pool_with::<B>(BatchConfig::default(), 4, "c").await;
    let sql = B::sql("INSERT INTO c (k, v) VALUES (?, ?)");
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..1000i32 {
        let (pool, sql) = (pool.clone(), sql.clone());
        let cancel_after = Duration::from_micros(rand::rng().random_range(0..3000));
        tasks.spawn(async move {
            let params = vals![k, format!("v{k}")];
            let fut = B::execute(&pool, &sql, &params);
            match tokio::time::timeout(cancel_after, fut).await {
                Ok(r) => (k, Some(r.map(|o| o.rows_affected()))),
                Err(_) => (k, None),
            }
        });
    }
    let mut acked = HashSet::new();
    let mut dropped = HashSet::new();
    while let Some(r) = tasks.join_next().await {
        match r.expect("no panic") {
            (k, Some(Ok(1))) => {
                acked.insert(k);
            }
            (k, Some(other)) => panic!("row {k}: {other:?}"),
            (k, None) => {
                dropped.insert(k);
            }
        }
    }
    settle::<B>(&pool).await;
    let present = keys::<B>(&pool, "c").await;
    assert!(acked.is_subset(&present), "an acknowledged row is missing");
    assert!(
        present.is_subset(&acked.union(&dropped).copied().collect()),
        "a row nobody asked for appeared"
    );
    let stats = B::stats(&pool);
    assert_eq!(stats.queued, 0);
    // The pool still serves, and every connection came back.
    B::execute(&pool, &sql, &vals![5000, "after"])
        .await
        .unwrap();
    all_returned::<B>(&pool).await;
    B::close(&pool).await;
}

async fn futures_dropped_before_sending_insert_nothing<B: TestBackend>() {
    // Timed batching with a long delay, and both connections held: no
    // flush can take a row, so every row is still queued when its future
    // is dropped, and none may reach the table.
    let config = BatchConfig::default().max_delay(Duration::from_millis(300));
    let (pool, _) = pool_with::<B>(config, 2, "d").await;
    let sql = B::sql("INSERT INTO d (k, v) VALUES (?, 'x')");
    learn::<B>(&pool, &sql).await;
    let held = [B::hold(&pool).await, B::hold(&pool).await];
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..200i32 {
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.spawn(async move {
            let params = vals![k];
            let fut = B::execute(&pool, &sql, &params);
            tokio::time::timeout(Duration::from_millis(30), fut)
                .await
                .map(|r| r.map(|o| o.rows_affected()))
        });
    }
    while let Some(r) = tasks.join_next().await {
        assert!(r.unwrap().is_err(), "the future should have been cut short");
    }
    drop(held);
    // A row left in the queue would be sent now (by the 300 ms timer at the
    // latest): wait until nothing is queued or in flight.
    settle::<B>(&pool).await;
    assert!(
        keys::<B>(&pool, "d").await.is_empty(),
        "a dropped row was inserted"
    );
    let stats = B::stats(&pool);
    // Every queued call must be dropped unsent (a call cut before it
    // queued is not counted).
    assert!(stats.rows_cancelled > 100, "{stats:?}");
    assert_eq!(stats.rows, 0);
    // Queue slots were all given back.
    B::execute(&pool, &sql, &vals![1]).await.unwrap();
    assert_eq!(keys::<B>(&pool, "d").await.len(), 1);
}

async fn dropping_futures_at_every_poll_point_is_safe<B: TestBackend>() {
    // deadpool-style: poll a call k times, then drop it, for growing k.
    // Includes statements that run on their own (a query cut mid-flight
    // may leave its connection unusable: the pool must notice).
    let (pool, _) = pool_with::<B>(BatchConfig::default(), 2, "e").await;
    let insert_sql = B::sql("INSERT INTO e (k, v) VALUES (?, 'p')");
    let sleep = B::pick("pg_sleep(0.001)", "SLEEP(0.001)");
    let query_sql = B::sql(&format!("SELECT k, {sleep} FROM e WHERE k < ?"));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    for polls in 0..40i32 {
        let params = vals![polls];
        let mut insert = Box::pin(B::execute(&pool, &insert_sql, &params));
        let mut query = Box::pin(B::query_i32(&pool, &query_sql, &params));
        let (mut a, mut b) = (false, false);
        for _ in 0..polls {
            // A finished future must not be polled again.
            a = a || insert.as_mut().poll(&mut cx).is_ready();
            b = b || query.as_mut().poll(&mut cx).is_ready();
            if a && b {
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(insert);
        drop(query);
    }
    settle::<B>(&pool).await;
    // Whatever was cancelled, the pool is consistent and serves.
    B::execute(&pool, &insert_sql, &vals![1000]).await.unwrap();
    assert!(keys::<B>(&pool, "e").await.contains(&1000));
    let one = B::sql("SELECT count(*) FROM e WHERE k = ?");
    for _ in 0..4 {
        let n = B::query_i64(&pool, &one, &vals![1000]).await.unwrap();
        assert_eq!(n, 1);
    }
    all_returned::<B>(&pool).await;
}

async fn tiny_queue_bound_still_completes_everything<B: TestBackend>() {
    let config = BatchConfig::default().queue_capacity(4).max_rows(16);
    let (pool, _) = pool_with::<B>(config, 2, "b").await;
    let sql = B::sql("INSERT INTO b (k, v) VALUES (?, 'q')");
    let queued = |s: &batchpool::Stats| s.queued;
    let sampler = max_stat::<B>(&pool, 400, Duration::from_millis(2), queued);
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..1000i32 {
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.spawn(async move {
            let params = vals![k];
            B::execute(&pool, &sql, &params)
                .await
                .map(|o| o.rows_affected())
        });
    }
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap().unwrap(), 1);
    }
    assert_eq!(keys::<B>(&pool, "b").await.len(), 1000);
    let max_queued = sampler.await.unwrap();
    assert!(max_queued <= 4, "queue grew past its bound: {max_queued}");
    let stats = B::stats(&pool);
    assert!(stats.rows_per_batch() > 1.0, "{stats:?}");
}

async fn full_queue_fails_fast_when_configured<B: TestBackend>() {
    let config = BatchConfig::default()
        .queue_capacity(2)
        .queue_full(QueueFull::Reject)
        .max_delay(Duration::from_millis(400));
    let (pool, _) = pool_with::<B>(config, 1, "f").await;
    let sql = B::sql("INSERT INTO f (k, v) VALUES (?, 'a')");
    learn::<B>(&pool, &sql).await;
    // With the only connection held, no flush takes the two queued rows.
    let held = B::hold(&pool).await;
    let first = {
        let (pool, sql) = (pool.clone(), sql.clone());
        tokio::spawn(async move {
            let (one, two) = (vals![1], vals![2]);
            let a = B::execute(&pool, &sql, &one);
            let b = B::execute(&pool, &sql, &two);
            let (a, b) = tokio::join!(a, b);
            a.and(b).map(|o| o.rows_affected())
        })
    };
    // Once both rows are queued, a third must be rejected at once.
    wait_for("both rows queued", || B::stats(&pool).queued == 2).await;
    let e = B::execute(&pool, &sql, &vals![3]).await.unwrap_err();
    assert!(e.is_overloaded() && e.is_retryable(), "{e}");
    drop(held);
    first.await.unwrap().unwrap();
    assert_eq!(keys::<B>(&pool, "f").await, HashSet::from([1, 2]));
}

async fn close_flushes_queued_rows_then_refuses_work<B: TestBackend>() {
    let config = BatchConfig::default().max_delay(Duration::from_secs(30));
    let (pool, url) = pool_with::<B>(config, 2, "z").await;
    let sql = B::sql("INSERT INTO z (k, v) VALUES (?, 'z')");
    learn::<B>(&pool, &sql).await;
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..100i32 {
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.spawn(async move {
            let params = vals![k];
            B::execute(&pool, &sql, &params).await
        });
    }
    wait_for("100 rows queued", || B::stats(&pool).queued == 100).await;
    assert_eq!(
        B::stats(&pool).queued,
        100,
        "rows should wait for the 30 s timer"
    );
    let started = std::time::Instant::now();
    B::close(&pool).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "close waited for the timer"
    );
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap().expect("acknowledged").rows_affected(), 1);
    }
    let stats = B::stats(&pool);
    assert!(stats.flush_close >= 1, "{stats:?}");
    let e = B::execute(&pool, &sql, &vals![1000]).await.unwrap_err();
    assert!(e.is_closed(), "{e}");
    // Verify on a fresh pool: every acknowledged row is there.
    let check = B::pool(&url, BatchConfig::default(), 1);
    assert_eq!(common::backend::count::<B>(&check, "z").await, 100);
    B::close(&check).await;
}
