//! Connection hooks (`post_create`, `pre_recycle`) on both backends, against
//! real servers: what a hook sets holds for coalesced rows, survives a
//! session reset, and a failing hook fails only the callers that needed the
//! connection, with an error that names it.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use batchpool::BatchConfig;
use mysql_async::prelude::Queryable;

async fn pg_admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn pg_count(admin: &tokio_postgres::Client, table: &str) -> i64 {
    admin
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// A `post_create` hook's `search_path` and `application_name` hold on
/// every connection, for coalesced rows too, and again after a `Pool::get`
/// user changed the session (the reset runs the hook again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_post_create_sets_every_session_and_survives_reset() {
    let url = common::pg_fresh_db().await;
    let admin = pg_admin(&url).await;
    admin
        .batch_execute(
            "CREATE SCHEMA app; CREATE SCHEMA other; \
             CREATE TABLE app.t (k int PRIMARY KEY, v text); \
             CREATE TABLE other.t (k int PRIMARY KEY, v text)",
        )
        .await
        .unwrap();
    let created = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&created);
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(2)
        .post_create(move |client| {
            let counter = Arc::clone(&counter);
            Box::pin(async move {
                client
                    .batch_execute("SET search_path = app; SET application_name = 'hooked'")
                    .await?;
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        })
        .build()
        .unwrap();

    let calls = (0..200).map(|k| {
        let pool = pool.clone();
        async move {
            pool.execute("INSERT INTO t (k, v) VALUES ($1, $2)", &[&k, &"x"])
                .await
        }
    });
    for out in futures_util::future::join_all(calls).await {
        assert_eq!(out.unwrap().rows_affected(), 1);
    }
    assert_eq!(pg_count(&admin, "app.t").await, 200);
    assert_eq!(pg_count(&admin, "other.t").await, 0);
    let name: String = pool
        .query_one("SELECT current_setting('application_name')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, "hooked");
    let opened = created.load(Ordering::SeqCst);
    assert!((1..=2).contains(&opened), "hook ran {opened} times");

    // A user of `get` points the session elsewhere; after the reset the
    // hook's setting is back, for every connection.
    {
        let conn = pool.get().await.unwrap();
        conn.batch_execute("SET search_path = other").await.unwrap();
    }
    let calls = (200..400).map(|k| {
        let pool = pool.clone();
        async move {
            pool.execute("INSERT INTO t (k, v) VALUES ($1, $2)", &[&k, &"y"])
                .await
        }
    });
    for out in futures_util::future::join_all(calls).await {
        assert_eq!(out.unwrap().rows_affected(), 1);
    }
    assert_eq!(pg_count(&admin, "app.t").await, 400);
    assert_eq!(pg_count(&admin, "other.t").await, 0);
    pool.close().await;
}

/// A failing `post_create` hook: each caller gets a connect error naming
/// the hook and its message, nothing is written; a `pre_recycle` error
/// retires the connection and the caller gets a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_failing_hooks() {
    let url = common::pg_fresh_db().await;
    let admin = pg_admin(&url).await;
    admin
        .batch_execute("CREATE TABLE t (k int PRIMARY KEY)")
        .await
        .unwrap();
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(2)
        .post_create(|client| {
            Box::pin(async move {
                client.batch_execute("SELECT no_such_function()").await?;
                Ok(())
            })
        })
        .build()
        .unwrap();
    for k in 0..3 {
        let e = pool
            .execute("INSERT INTO t (k) VALUES ($1)", &[&k])
            .await
            .unwrap_err();
        assert!(e.is_connect(), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("post_create hook failed"), "{text}");
        assert!(text.contains("no_such_function"), "{text}");
    }
    assert_eq!(pg_count(&admin, "t").await, 0);
    pool.close().await;

    // pre_recycle: refuse the idle connection once; the caller still gets
    // its row written, on a new connection.
    let created = Arc::new(AtomicUsize::new(0));
    let refuse = Arc::new(AtomicBool::new(false));
    let (counter, flag) = (Arc::clone(&created), Arc::clone(&refuse));
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(1)
        .post_create(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        })
        .pre_recycle(move |_| {
            let refuse = flag.swap(false, Ordering::SeqCst);
            Box::pin(async move {
                if refuse {
                    return Err("retired by the test".into());
                }
                Ok(())
            })
        })
        .build()
        .unwrap();
    let insert = "INSERT INTO t (k) VALUES ($1)";
    assert_eq!(
        pool.execute(insert, &[&1]).await.unwrap().rows_affected(),
        1
    );
    assert_eq!(created.load(Ordering::SeqCst), 1);
    pool.execute(insert, &[&2]).await.unwrap();
    assert_eq!(created.load(Ordering::SeqCst), 1, "recycled, not reopened");
    refuse.store(true, Ordering::SeqCst);
    assert_eq!(
        pool.execute(insert, &[&3]).await.unwrap().rows_affected(),
        1
    );
    assert_eq!(
        created.load(Ordering::SeqCst),
        2,
        "refused connection replaced"
    );
    assert_eq!(pg_count(&admin, "t").await, 3);
    pool.close().await;
}

/// MariaDB: a hook that changes `auto_increment_increment` — the setting
/// batchpool derives per-row ids from — still gives every coalesced caller
/// its own exact id, also after a session reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_post_create_session_settings_keep_ids_exact() {
    let url = common::mysql_fresh_db().await;
    let pool = batchpool::mysql::Pool::builder(&url)
        .max_size(2)
        .batching(BatchConfig::default())
        .post_create(|conn| {
            Box::pin(async move {
                conn.query_drop("SET SESSION auto_increment_increment = 5")
                    .await?;
                Ok(())
            })
        })
        .build()
        .unwrap();
    pool.execute(
        "CREATE TABLE t (id bigint AUTO_INCREMENT PRIMARY KEY, v int NOT NULL) ENGINE=InnoDB",
        (),
    )
    .await
    .unwrap();
    for round in 0..2 {
        let calls = (0..150).map(|v| {
            let pool = pool.clone();
            async move {
                let v = round * 1000 + v;
                let out = pool
                    .execute("INSERT INTO t (v) VALUES (?)", (v,))
                    .await
                    .unwrap();
                (v, out.last_insert_id().expect("an id"))
            }
        });
        let got = futures_util::future::join_all(calls).await;
        let mut conn = pool.get().await.unwrap();
        for (v, id) in got {
            let stored: Option<i64> = conn
                .exec_first("SELECT v FROM t WHERE id = ?", (id,))
                .await
                .unwrap();
            assert_eq!(stored, Some(v), "id {id} given to the caller of v={v}");
        }
        // The reset on return must bring the hook's setting back.
        conn.query_drop("SET SESSION auto_increment_increment = 1")
            .await
            .unwrap();
    }
    let steps: Vec<i64> = {
        let mut conn = pool.get().await.unwrap();
        conn.query("SELECT id FROM t ORDER BY id").await.unwrap()
    };
    assert_eq!(steps.len(), 300);
    assert!(
        steps.windows(2).all(|w| (w[1] - w[0]) % 5 == 0),
        "{steps:?}"
    );
    pool.close().await;
}

/// MariaDB: a failing hook fails the callers with an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_failing_post_create() {
    let url = common::mysql_fresh_db().await;
    let pool = batchpool::mysql::Pool::builder(&url)
        .max_size(1)
        .post_create(|conn| {
            Box::pin(async move {
                conn.query_drop("SET SESSION no_such_variable = 1").await?;
                Ok(())
            })
        })
        .build()
        .unwrap();
    let e = pool.execute("SELECT 1", ()).await.unwrap_err();
    assert!(e.is_connect(), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("post_create hook failed"), "{text}");
    assert!(text.contains("no_such_variable"), "{text}");
    pool.close().await;
}
