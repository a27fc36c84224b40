//! Cancellation, backpressure and shutdown against a real MariaDB.

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use batchpool::mysql::Pool;
use batchpool::{BatchConfig, QueueFull};
use rand::Rng;

async fn pool_with(config: BatchConfig, max_size: usize, table: &str) -> Pool {
    let url = common::mysql_fresh_db().await;
    pool_at(&url, config, max_size, table).await
}

async fn pool_at(url: &str, config: BatchConfig, max_size: usize, table: &str) -> Pool {
    let pool = Pool::builder(url)
        .max_size(max_size)
        .batching(config)
        .build()
        .expect("build pool");
    pool.execute(
        &format!("CREATE TABLE {table} (k INT PRIMARY KEY, v VARCHAR(20) NOT NULL)"),
        (),
    )
    .await
    .unwrap();
    pool
}

async fn keys(pool: &Pool, table: &str) -> HashSet<i32> {
    pool.query(&format!("SELECT k FROM {table}"), ())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0).unwrap())
        .collect()
}

/// Waits until the pool's queues are empty and no flush runs.
async fn settle(pool: &Pool) {
    for _ in 0..500 {
        let s = pool.stats();
        if s.queued == 0 && s.in_flight == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("pool did not settle: {:?}", pool.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancellation_at_random_points_loses_nothing_acknowledged() {
    let pool = pool_with(BatchConfig::default(), 4, "c").await;
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..1000i32 {
        let pool = pool.clone();
        let cancel_after = Duration::from_micros(rand::rng().random_range(0..3000));
        tasks.spawn(async move {
            let fut = pool.execute("INSERT INTO c (k, v) VALUES (?, ?)", (k, format!("v{k}")));
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
    settle(&pool).await;
    let present = keys(&pool, "c").await;
    assert!(acked.is_subset(&present), "an acknowledged row is missing");
    assert!(
        present.is_subset(&acked.union(&dropped).copied().collect()),
        "a row nobody asked for appeared"
    );
    let stats = pool.stats();
    assert_eq!(stats.queued, 0);
    // The pool still serves, and every connection came back.
    pool.execute("INSERT INTO c (k, v) VALUES (?, ?)", (5000, "after"))
        .await
        .unwrap();
    let status = pool.status();
    assert_eq!(status.size, status.available, "{status:?}");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_dropped_before_sending_insert_nothing() {
    // Timed batching with a long delay: every row is still queued when its
    // future is dropped, so none may reach the table.
    let config = BatchConfig::default().max_delay(Duration::from_millis(300));
    let pool = pool_with(config, 2, "d").await;
    // Learn the statement first (a call with a missing parameter is refused
    // after that, before queuing): every call below then queues at once.
    let e = pool
        .execute("INSERT INTO d (k, v) VALUES (?, 'x')", ())
        .await
        .unwrap_err();
    assert!(e.is_params(), "{e}");
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..200i32 {
        let pool = pool.clone();
        tasks.spawn(async move {
            let fut = pool.execute("INSERT INTO d (k, v) VALUES (?, 'x')", (k,));
            tokio::time::timeout(Duration::from_millis(30), fut).await
        });
    }
    while let Some(r) = tasks.join_next().await {
        assert!(r.unwrap().is_err(), "the future should have been cut short");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    settle(&pool).await;
    assert!(
        keys(&pool, "d").await.is_empty(),
        "a dropped row was inserted"
    );
    let stats = pool.stats();
    // Every queued call must be dropped unsent (a few may be cut before
    // they queue, on a loaded machine).
    assert!(stats.rows_cancelled > 100, "{stats:?}");
    assert_eq!(stats.rows, 0);
    // Queue slots were all given back.
    pool.execute("INSERT INTO d (k, v) VALUES (?, 'x')", (1,))
        .await
        .unwrap();
    assert_eq!(keys(&pool, "d").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_futures_at_every_poll_point_is_safe() {
    // deadpool-style: poll a call k times, then drop it, for growing k.
    // Includes statements that run on their own (a query cut mid-flight
    // leaves its connection unusable: the pool must notice).
    let pool = pool_with(BatchConfig::default(), 2, "e").await;
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    for polls in 0..40i32 {
        let k = polls;
        let mut insert = Box::pin(pool.execute("INSERT INTO e (k, v) VALUES (?, 'p')", (k,)));
        let mut query = Box::pin(pool.query("SELECT SLEEP(0.001), k FROM e WHERE k < ?", (k,)));
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
    settle(&pool).await;
    // Whatever was cancelled, the pool is consistent and serves.
    pool.execute("INSERT INTO e (k, v) VALUES (?, 'p')", (1000,))
        .await
        .unwrap();
    assert!(keys(&pool, "e").await.contains(&1000));
    for _ in 0..4 {
        let n: i64 = pool
            .query_one("SELECT COUNT(*) FROM e WHERE k = ?", (1000,))
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(n, 1);
    }
    let status = pool.status();
    assert_eq!(status.size, status.available, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tiny_queue_bound_still_completes_everything() {
    let config = BatchConfig::default().queue_capacity(4).max_rows(16);
    let pool = pool_with(config, 2, "b").await;
    let sampler = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut max = 0;
            for _ in 0..400 {
                max = max.max(pool.stats().queued);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            max
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..1000i32 {
        let pool = pool.clone();
        tasks.spawn(async move {
            pool.execute("INSERT INTO b (k, v) VALUES (?, 'q')", (k,))
                .await
                .map(|o| o.rows_affected())
        });
    }
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap().unwrap(), 1);
    }
    assert_eq!(keys(&pool, "b").await.len(), 1000);
    let max_queued = sampler.await.unwrap();
    assert!(max_queued <= 4, "queue grew past its bound: {max_queued}");
    assert!(pool.stats().rows_per_batch() > 1.0, "{:?}", pool.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_fails_fast_when_configured() {
    let config = BatchConfig::default()
        .queue_capacity(2)
        .queue_full(QueueFull::Reject)
        .max_delay(Duration::from_millis(400));
    let pool = pool_with(config, 1, "f").await;
    let e = pool
        .execute("INSERT INTO f (k, v) VALUES (?, 'a')", ())
        .await
        .unwrap_err();
    assert!(e.is_params(), "{e}");
    let first = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let a = pool.execute("INSERT INTO f (k, v) VALUES (?, 'a')", (1,));
            let b = pool.execute("INSERT INTO f (k, v) VALUES (?, 'a')", (2,));
            let (a, b) = tokio::join!(a, b);
            a.and(b)
        })
    };
    // Wait until both rows are queued, then a third must be rejected at once.
    for _ in 0..100 {
        if pool.stats().queued == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let e = pool
        .execute("INSERT INTO f (k, v) VALUES (?, 'a')", (3,))
        .await
        .unwrap_err();
    assert!(e.is_overloaded() && e.is_retryable(), "{e}");
    first.await.unwrap().unwrap();
    assert_eq!(keys(&pool, "f").await, HashSet::from([1, 2]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_flushes_queued_rows_then_refuses_work() {
    let config = BatchConfig::default().max_delay(Duration::from_secs(30));
    let url = common::mysql_fresh_db().await;
    let pool = pool_at(&url, config, 2, "z").await;
    // Learn the statement first, so the rows below queue at once.
    let e = pool
        .execute("INSERT INTO z (k, v) VALUES (?, 'z')", ())
        .await
        .unwrap_err();
    assert!(e.is_params(), "{e}");
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..100i32 {
        let pool = pool.clone();
        tasks.spawn(async move {
            pool.execute("INSERT INTO z (k, v) VALUES (?, 'z')", (k,))
                .await
        });
    }
    for _ in 0..200 {
        if pool.stats().queued == 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        pool.stats().queued,
        100,
        "rows should wait for the 30 s timer"
    );
    let started = std::time::Instant::now();
    pool.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "close waited for the timer"
    );
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap().expect("acknowledged").rows_affected(), 1);
    }
    let stats = pool.stats();
    assert!(stats.flush_close >= 1, "{stats:?}");
    let e = pool
        .execute("INSERT INTO z (k, v) VALUES (?, 'z')", (1000,))
        .await
        .unwrap_err();
    assert!(e.is_closed(), "{e}");
    // Verify on a fresh pool: every acknowledged row is there.
    let check = Pool::builder(&url).build().unwrap();
    let n: i64 = check
        .query_one("SELECT count(*) FROM z", ())
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 100);
    check.close().await;
}
