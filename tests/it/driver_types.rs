//! Column types behind the drivers' own cargo features, turned on through
//! batchpool's (`with-uuid-1` here), named through the re-exported driver
//! crates only: coalesced INSERTs and reads of `uuid::Uuid` values on a
//! real PostgreSQL and a real MariaDB.

use crate::common;

use batchpool::mysql::mysql_async;
use batchpool::postgres::tokio_postgres;

/// Values distinct enough to tell apart.
fn ids() -> Vec<uuid::Uuid> {
    (1..=50u128)
        .map(|n| uuid::Uuid::from_u128(n * 0x0123_4567_89ab_cdef_0123_4567_89ab))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_uuid_columns_through_the_reexported_driver() {
    let url = common::pg_fresh_db().await;
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(2)
        .build()
        .unwrap();
    pool.execute("CREATE TABLE t (id uuid PRIMARY KEY)", &[])
        .await
        .unwrap();
    let calls = ids().into_iter().map(|id| {
        let pool = pool.clone();
        async move {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
            pool.execute("INSERT INTO t (id) VALUES ($1) RETURNING id", &params)
                .await
                .map(|out| (id, out))
        }
    });
    for done in futures_util::future::join_all(calls).await {
        let (id, out) = done.unwrap();
        let returned: &tokio_postgres::Row = out.returned().expect("its RETURNING row");
        assert_eq!(returned.get::<_, uuid::Uuid>(0), id);
    }
    let rows = pool
        .query("SELECT id FROM t ORDER BY id", &[])
        .await
        .unwrap();
    let mut want = ids();
    want.sort();
    let got: Vec<uuid::Uuid> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, want);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_uuid_columns_through_the_reexported_driver() {
    let url = common::mysql_fresh_db().await;
    let pool = batchpool::mysql::Pool::builder(&url)
        .max_size(2)
        .build()
        .unwrap();
    pool.execute("CREATE TABLE t (id BINARY(16) PRIMARY KEY)", ())
        .await
        .unwrap();
    let calls = ids().into_iter().map(|id| {
        let pool = pool.clone();
        async move { pool.execute("INSERT INTO t (id) VALUES (?)", (id,)).await }
    });
    for out in futures_util::future::join_all(calls).await {
        assert_eq!(out.unwrap().rows_affected(), 1);
    }
    let rows: Vec<mysql_async::Row> = pool.query("SELECT id FROM t", ()).await.unwrap();
    let mut got: Vec<uuid::Uuid> = rows
        .into_iter()
        .map(mysql_async::from_row::<uuid::Uuid>)
        .collect();
    got.sort();
    let mut want = ids();
    want.sort();
    assert_eq!(got, want);
    pool.close().await;
}
