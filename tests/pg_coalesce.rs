//! PostgreSQL-only coalescing behaviour: `ON CONFLICT`, the dialect's
//! quoting and casts, its parameter types and limits, and the escape hatch.
//! What both backends share is in `coalesce.rs`.

mod common;

use batchpool::BatchConfig;
use batchpool::postgres::Pool;
use common::backend::{Pg, TestBackend};

/// A pool on a fresh database holding the table `ddl` creates.
async fn table(ddl: &str) -> Pool {
    let pool = pool().await;
    Pg::execute(&pool, ddl, &[]).await.unwrap();
    pool
}

async fn pool() -> Pool {
    Pg::pool(&Pg::fresh_db().await, BatchConfig::default(), 4)
}

async fn count(pool: &Pool, table: &str) -> i64 {
    common::backend::count::<Pg>(pool, table).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_conflict_keys_in_one_do_update_batch_succeed() {
    let pool = table("CREATE TABLE kv (k int PRIMARY KEY, v text NOT NULL)").await;
    let data: Vec<(i32, String)> = (0..60).map(|i| (i % 20, format!("v{i}"))).collect();
    let rows: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 2]> =
        data.iter().map(|(k, v)| [k as _, v as _]).collect();
    let results = pool
        .execute_many(
            "INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
            &rows,
        )
        .await
        .unwrap();
    for r in &results {
        assert_eq!(r.as_ref().expect("upsert ok").rows_affected(), 1);
    }
    assert_eq!(count(&pool, "kv").await, 20);
    // Rows are applied in order: the last value of each key wins.
    for k in 0..20i32 {
        let v: String = pool
            .query_one("SELECT v FROM kv WHERE k = $1", &[&k])
            .await
            .unwrap()
            .get(0);
        assert_eq!(v, format!("v{}", k + 40));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_conflict_do_nothing_reports_exact_per_row_counts() {
    let pool = table("CREATE TABLE seen (k int PRIMARY KEY, note text)").await;
    pool.execute("INSERT INTO seen (k, note) VALUES (1, 'old')", &[])
        .await
        .unwrap();
    let keys = [1i32, 2, 3, 2, 4, 1];
    let notes = ["a", "b", "c", "d", "e", "f"];
    let rows: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 2]> = keys
        .iter()
        .zip(&notes)
        .map(|(k, n)| [k as _, n as _])
        .collect();
    let results = pool
        .execute_many(
            "INSERT INTO seen (k, note) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING",
            &rows,
        )
        .await
        .unwrap();
    let counts: Vec<u64> = results
        .iter()
        .map(|r| r.as_ref().unwrap().rows_affected())
        .collect();
    assert_eq!(counts, vec![0, 1, 1, 0, 1, 0]);
    assert!(results.iter().all(|r| r.as_ref().unwrap().is_exact()));
    assert_eq!(count(&pool, "seen").await, 4);
    assert!(pool.stats().batches >= 1);
}

/// PostgreSQL's own refusals; those both backends share are in
/// `coalesce.rs` (`bad_input_gets_a_clear_error_for_its_caller_only`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_transaction_control_and_too_many_parameters_are_refused() {
    let pool = table("CREATE TABLE p (a int, b text)").await;
    let sql = "INSERT INTO p (a, b) VALUES ($1, $2)";
    // Wrong type: a string for an int column.
    let e = pool.execute(sql, &[&"x", &"y"]).await.unwrap_err();
    assert!(e.is_params(), "{e}");
    // Transaction control cannot go through the pool's arbitrary connections.
    let e = pool.execute("BEGIN", &[]).await.unwrap_err();
    assert!(
        e.is_refused() && e.to_string().contains("Pool::begin"),
        "{e}"
    );
    // More parameters than the protocol allows.
    let many: Vec<i32> = (0..70_000).collect();
    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        many.iter().map(|v| v as _).collect();
    let e = pool.execute(sql, &refs).await.unwrap_err();
    assert!(e.is_too_large() || e.is_params(), "{e}");
    assert!(
        e.to_string().contains("65535") || e.to_string().contains("parameters"),
        "{e}"
    );
    // Good rows still go through.
    pool.execute(sql, &[&1i32, &"one"]).await.unwrap();
    assert_eq!(count(&pool, "p").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_hatch_and_status() {
    let pool = pool().await;
    let client = pool.get().await.unwrap();
    let row = client.query_one("SELECT 41 + 1", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
    let status = pool.status();
    assert_eq!(status.max_size, 4);
    drop(client);
    pool.close().await;
    assert!(pool.is_closed());
    let e = pool.execute("SELECT 1", &[]).await.unwrap_err();
    assert!(e.is_closed() && e.is_pool_closed(), "{e}");
    assert!(pool.get().await.unwrap_err().is_closed());
}
