//! PostgreSQL-only coalescing behaviour: `ON CONFLICT`, the dialect's
//! quoting and casts, its parameter types and limits, and the escape hatch.
//! What both backends share is in `coalesce.rs`.

mod common;

use batchpool::BatchConfig;
use batchpool::postgres::Pool;
use common::backend::{Pg, TestBackend};

async fn pool() -> Pool {
    Pg::pool(&Pg::fresh_db().await, BatchConfig::default(), 4)
}

async fn count(pool: &Pool, table: &str) -> i64 {
    common::backend::count::<Pg>(pool, table).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_conflict_keys_in_one_do_update_batch_succeed() {
    let pool = pool().await;
    pool.execute("CREATE TABLE kv (k int PRIMARY KEY, v text NOT NULL)", &[])
        .await
        .unwrap();
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
    let pool = pool().await;
    pool.execute("CREATE TABLE seen (k int PRIMARY KEY, note text)", &[])
        .await
        .unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tricky_statements_are_batched_or_passed_through_correctly() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE \"values\" (id serial PRIMARY KEY, \"Name\" text, doc jsonb, n int DEFAULT 7, at timestamptz)",
        &[],
    )
    .await
    .unwrap();
    let sqls = [
        "insert into \"values\" (\"Name\", doc) values (lower($1), ($2::text)::jsonb)",
        "INSERT INTO \"values\" (\"Name\", n, at) VALUES ($1, DEFAULT, now()) -- trailing $9 comment",
        "/* lead */ INSERT INTO public.\"values\" (\"Name\") VALUES ($1 || ' $1 ' || $1);",
    ];
    for (i, sql) in sqls.iter().enumerate() {
        let name = format!("N{i}");
        let r = if i == 0 {
            pool.execute(sql, &[&name, &"{\"a\": 1}"]).await
        } else {
            pool.execute(sql, &[&name]).await
        };
        assert_eq!(r.unwrap().rows_affected(), 1, "{sql}");
    }
    let rows = pool
        .query(
            "SELECT \"Name\", doc::text, n FROM \"values\" ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(String, Option<String>, i32)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("n0".to_string(), Some("{\"a\": 1}".to_string()), 7),
            ("N1".to_string(), None, 7),
            ("N2 $1 N2".to_string(), None, 7),
        ]
    );
    // Not batchable, but must still work unchanged.
    pool.execute(
        "UPDATE \"values\" SET n = n + 1 WHERE \"Name\" = $1",
        &[&"N1"],
    )
    .await
    .unwrap();
    let out = pool
        .execute(
            "INSERT INTO \"values\" (\"Name\") VALUES ($1), ($2) RETURNING id",
            &[&"a", &"b"],
        )
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 2);
    assert!(pool.stats().passthrough >= 2);
}

/// PostgreSQL's own refusals; those both backends share are in
/// `coalesce.rs` (`bad_input_gets_a_clear_error_for_its_caller_only`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_transaction_control_and_too_many_parameters_are_refused() {
    let pool = pool().await;
    pool.execute("CREATE TABLE p (a int, b text)", &[])
        .await
        .unwrap();
    let sql = "INSERT INTO p (a, b) VALUES ($1, $2)";
    // Wrong type: a string for an int column.
    let e = pool.execute(sql, &[&"x", &"y"]).await.unwrap_err();
    assert!(e.is_params(), "{e}");
    // Transaction control cannot go through the pool's arbitrary connections.
    let e = pool.execute("BEGIN", &[]).await.unwrap_err();
    assert!(
        e.is_params() && e.to_string().contains("Pool::begin"),
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
