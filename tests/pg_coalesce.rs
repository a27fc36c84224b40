//! Coalescing, per-row outcomes and error isolation against a real PostgreSQL.

mod common;

use std::sync::Arc;

use batchpool::BatchConfig;
use batchpool::postgres::Pool;
use tokio::sync::Barrier;

async fn pool_with(config: BatchConfig, max_size: usize) -> Pool {
    let url = common::pg_fresh_db().await;
    Pool::builder(&url)
        .max_size(max_size)
        .batching(config)
        .build()
        .expect("build pool")
}

async fn pool() -> Pool {
    pool_with(BatchConfig::default(), 4).await
}

async fn count(pool: &Pool, table: &str) -> i64 {
    pool.query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("count")
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_callers_are_coalesced() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE users (id bigserial PRIMARY KEY, name text NOT NULL, email text)",
        &[],
    )
    .await
    .unwrap();
    let gate = Arc::new(Barrier::new(200));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (pool, gate) = (pool.clone(), gate.clone());
        tasks.spawn(async move {
            gate.wait().await;
            let name = format!("user{i}");
            let email = format!("user{i}@example.com");
            pool.execute(
                "INSERT INTO users (name, email) VALUES ($1, $2)",
                &[&name, &email],
            )
            .await
        });
    }
    while let Some(r) = tasks.join_next().await {
        let out = r.unwrap().expect("insert ok");
        assert_eq!(out.rows_affected(), 1);
        assert!(out.is_exact());
    }
    assert_eq!(count(&pool, "users").await, 200);
    let distinct: i64 = pool
        .query_one("SELECT count(DISTINCT name) FROM users", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(distinct, 200);
    let stats = pool.stats();
    assert_eq!(stats.rows, 200, "{stats:?}");
    assert!(
        stats.rows_per_batch() > 1.0,
        "no batching happened: {stats:?}"
    );
    assert!(stats.batches < 200);
    assert_eq!(stats.queued, 0);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn returning_gives_each_caller_its_own_row() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE items (id bigserial PRIMARY KEY, label text NOT NULL, made timestamptz DEFAULT now())",
        &[],
    )
    .await
    .unwrap();
    let gate = Arc::new(Barrier::new(150));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..150 {
        let (pool, gate) = (pool.clone(), gate.clone());
        tasks.spawn(async move {
            gate.wait().await;
            let label = format!("label-{i}");
            let out = pool
                .execute(
                    "INSERT INTO items (label) VALUES ($1) RETURNING id, label",
                    &[&label],
                )
                .await
                .expect("insert");
            let row = out.returned().expect("returned row");
            let id: i64 = row.get(0);
            let echoed: &str = row.get(1);
            assert_eq!(echoed, label);
            (id, label)
        });
    }
    let mut ids = std::collections::HashSet::new();
    while let Some(r) = tasks.join_next().await {
        let (id, label) = r.unwrap();
        assert!(ids.insert(id), "id {id} returned twice");
        let stored: String = pool
            .query_one("SELECT label FROM items WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        assert_eq!(stored, label, "caller got another row's id");
    }
    assert!(pool.stats().rows_per_batch() > 1.0, "{:?}", pool.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_violation_fails_only_its_caller() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE accounts (id serial PRIMARY KEY, email text UNIQUE NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    pool.execute(
        "INSERT INTO accounts (email) VALUES ($1)",
        &[&"taken@example.com"],
    )
    .await
    .unwrap();
    let emails: Vec<String> = (0..100)
        .map(|i| {
            if i == 50 {
                "taken@example.com".to_string()
            } else {
                format!("free{i}@example.com")
            }
        })
        .collect();
    let rows: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 1]> =
        emails.iter().map(|e| [e as _]).collect();
    let before = pool.stats();
    let results = pool
        .execute_many("INSERT INTO accounts (email) VALUES ($1)", &rows)
        .await
        .unwrap();
    assert_eq!(results.len(), 100);
    for (i, r) in results.iter().enumerate() {
        if i == 50 {
            let e = r.as_ref().expect_err("duplicate must fail");
            assert_eq!(e.code(), Some("23505"), "{e}");
            assert!(e.as_db_error().is_some());
            assert!(!e.is_outcome_unknown());
        } else {
            assert_eq!(r.as_ref().expect("other rows succeed").rows_affected(), 1);
        }
    }
    assert_eq!(count(&pool, "accounts").await, 100);
    let dup: i64 = pool
        .query_one(
            "SELECT count(*) FROM accounts WHERE email = 'taken@example.com'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(dup, 1);
    let after = pool.stats();
    assert!(
        after.split_statements > before.split_statements,
        "{after:?}"
    );
    assert_eq!(after.rows_failed - before.rows_failed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_violations_fail_only_offenders() {
    let pool = pool_with(
        BatchConfig::default().max_delay(std::time::Duration::from_millis(50)),
        2,
    )
    .await;
    pool.execute(
        "CREATE TABLE t (k int PRIMARY KEY, v text CHECK (v <> 'bad'))",
        &[],
    )
    .await
    .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..100i32 {
        let pool = pool.clone();
        tasks.spawn(async move {
            // 10 check violations, and key 7 inserted twice.
            let k = if i == 99 { 7 } else { i };
            let v = if i % 10 == 3 { "bad" } else { "good" };
            (
                i,
                pool.execute("INSERT INTO t (k, v) VALUES ($1, $2)", &[&k, &v])
                    .await,
            )
        });
    }
    let mut ok = 0;
    let mut codes = std::collections::BTreeMap::new();
    while let Some(r) = tasks.join_next().await {
        let (i, r) = r.unwrap();
        match r {
            Ok(out) => {
                assert_eq!(out.rows_affected(), 1);
                ok += 1;
            }
            Err(e) => {
                assert!(i % 10 == 3 || i == 99 || i == 7, "row {i} failed: {e}");
                *codes.entry(e.code().unwrap().to_string()).or_insert(0) += 1;
            }
        }
    }
    assert_eq!(codes.get("23514"), Some(&10), "{codes:?}");
    assert_eq!(codes.get("23505"), Some(&1), "{codes:?}");
    assert_eq!(ok, 89);
    assert_eq!(count(&pool, "t").await, 89);
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
async fn hostile_values_are_stored_verbatim() {
    let pool = pool().await;
    pool.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)", &[])
        .await
        .unwrap();
    let values: Vec<Option<String>> = vec![
        Some("it's".into()),
        Some("'); DROP TABLE notes; --".into()),
        Some("$1".into()),
        Some("$2, $3)".into()),
        Some("\"quoted\" \\ backslash".into()),
        Some("$$ dollar $$".into()),
        Some("E'\\n'".into()),
        Some("/* comment */ -- line".into()),
        Some("ünïcödé ✓".into()),
        Some(String::new()),
        None,
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for (i, v) in values.iter().cloned().enumerate() {
        let pool = pool.clone();
        tasks.spawn(async move {
            let id = i as i32;
            pool.execute("INSERT INTO notes (id, body) VALUES ($1, $2)", &[&id, &v])
                .await
                .unwrap();
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let rows = pool
        .query("SELECT id, body FROM notes ORDER BY id", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), values.len());
    for row in rows {
        let id: i32 = row.get(0);
        let body: Option<String> = row.get(1);
        assert_eq!(body, values[id as usize]);
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_for_its_caller_only() {
    let pool = pool().await;
    pool.execute("CREATE TABLE p (a int, b text)", &[])
        .await
        .unwrap();
    let sql = "INSERT INTO p (a, b) VALUES ($1, $2)";
    // Too few parameters.
    let e = pool.execute(sql, &[&1i32]).await.unwrap_err();
    assert!(e.is_params(), "{e}");
    assert!(e.to_string().contains("2 parameters"), "{e}");
    // Wrong type: a string for an int column.
    let e = pool.execute(sql, &[&"x", &"y"]).await.unwrap_err();
    assert!(e.is_params(), "{e}");
    // Malformed SQL and unknown tables: the server's own error.
    let e = pool
        .execute("INSRT INTO p VALUES (1)", &[])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("42601"));
    let e = pool
        .execute("INSERT INTO missing_table (a) VALUES ($1)", &[&1i32])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("42P01"));
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
    // Good rows still go through, in a mixed execute_many too.
    let rows: Vec<Vec<&(dyn tokio_postgres::types::ToSql + Sync)>> =
        vec![vec![&1i32, &"one"], vec![&2i32], vec![&3i32, &"three"]];
    let results = pool.execute_many(sql, &rows).await.unwrap();
    assert!(results[0].is_ok() && results[2].is_ok());
    assert!(results[1].as_ref().unwrap_err().is_params());
    assert_eq!(count(&pool, "p").await, 2);
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

mod property {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]
        /// The rewritten statement for n rows executes and inserts exactly n rows,
        /// whatever max_rows splits it into.
        #[test]
        fn rewritten_statement_inserts_n_rows(n in 1usize..400, max_rows in 1usize..300) {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let pool = pool_with(BatchConfig::default().max_rows(max_rows), 3).await;
                pool.execute("CREATE TABLE r (a bigint, b text, c double precision, d bool)", &[]).await.unwrap();
                let data: Vec<(i64, String, f64, bool)> =
                    (0..n).map(|i| (i as i64, format!("row {i} '$1'"), i as f64 / 3.0, i % 2 == 0)).collect();
                let rows: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 4]> =
                    data.iter().map(|(a, b, c, d)| [a as _, b as _, c as _, d as _]).collect();
                let results = pool
                    .execute_many("INSERT INTO r (a, b, c, d) VALUES ($1, $2, $3, upper($2) IS NOT NULL AND $4)", &rows)
                    .await
                    .unwrap();
                assert!(results.iter().all(|r| r.as_ref().map(|o| o.rows_affected()).ok() == Some(1)));
                let got: i64 = pool.query_one("SELECT count(*) FROM r", &[]).await.unwrap().get(0);
                assert_eq!(got as usize, n);
                let sum: i64 = pool.query_one("SELECT coalesce(sum(a), 0)::bigint FROM r", &[]).await.unwrap().get(0);
                assert_eq!(sum as usize, n * (n - 1) / 2);
                pool.close().await;
            });
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_in_flight_bounds_concurrent_flushes() {
    let pool = pool_with(BatchConfig::default().max_in_flight(1), 4).await;
    pool.execute("CREATE TABLE mif (k int PRIMARY KEY)", &[])
        .await
        .unwrap();
    let sampler = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut max = 0;
            for _ in 0..300 {
                max = max.max(pool.stats().in_flight);
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            max
        })
    };
    let gate = Arc::new(Barrier::new(300));
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..300i32 {
        let (pool, gate) = (pool.clone(), gate.clone());
        tasks.spawn(async move {
            gate.wait().await;
            pool.execute("INSERT INTO mif (k) VALUES ($1)", &[&k]).await
        });
    }
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap().unwrap().rows_affected(), 1);
    }
    assert_eq!(count(&pool, "mif").await, 300);
    assert!(
        sampler.await.unwrap() <= 1,
        "more than one flush ran at once"
    );
    assert!(pool.stats().rows_per_batch() > 1.0, "{:?}", pool.stats());
}
