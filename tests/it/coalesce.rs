//! Coalescing, per-row outcomes and error isolation against a real
//! PostgreSQL and a real MariaDB: every test runs as `pg::name` and
//! `mysql::name`, and behind PgBouncer in transaction mode as
//! `pgbouncer::name`. What only one backend has (ON CONFLICT, ON DUPLICATE KEY
//! UPDATE, auto-increment ids, its own SQL dialect) is in `pg_coalesce.rs`
//! and `mysql_coalesce.rs`.

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::common::backend::{
    DbError, TestBackend, TestOutcome, Val, count, max_stat, three, vals,
};
use batchpool::BatchConfig;
use tokio::sync::Barrier;

three! {
    (flavor = "multi_thread", worker_threads = 4) => [
        two_hundred_concurrent_callers_are_coalesced,
        returning_gives_each_caller_its_own_row,
        max_in_flight_bounds_concurrent_flushes,
        the_adaptive_flush_limit_stays_within_the_pool,
    ],
    (flavor = "multi_thread", worker_threads = 2) => [
        duplicate_key_fails_only_its_caller,
        concurrent_violations_fail_only_offenders,
        hostile_values_are_stored_verbatim,
        tricky_statements_are_batched_or_passed_through_correctly,
        bad_input_gets_a_clear_error_for_its_caller_only,
        one_classifier_explains_and_refuses_alike,
    ],
    test => [
        rewritten_statement_inserts_n_rows,
    ],
}

/// A pool on a fresh database holding the table `ddl` creates (`SERIAL`
/// in it is the backend's auto-generated 64-bit key type).
async fn table_with<B: TestBackend>(config: BatchConfig, max_size: usize, ddl: &str) -> B::Pool {
    let pool = B::pool(&B::fresh_db().await, config, max_size);
    let ddl = ddl.replace("SERIAL", B::SERIAL);
    B::execute(&pool, &ddl, &[]).await.unwrap();
    pool
}

/// [`table`] for a test that checks per-row auto-increment ids.
async fn ids_table<B: TestBackend>(ddl: &str) -> B::Pool {
    let pool = table::<B>(ddl).await;
    B::require_consecutive_ids(&pool).await;
    pool
}

/// [`table_with`] the default batching and 4 connections.
async fn table<B: TestBackend>(ddl: &str) -> B::Pool {
    table_with::<B>(BatchConfig::default(), 4, ddl).await
}

/// `n` callers released at once, each inserting its own row.
async fn gated_callers<B: TestBackend, T: Send + 'static>(
    pool: &B::Pool,
    sql: &str,
    n: usize,
    row: impl Fn(usize) -> (T, Vec<Val>),
) -> Vec<(T, Result<B::Outcome, batchpool::Error>)> {
    let gate = Arc::new(Barrier::new(n));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (pool, gate, sql) = (pool.clone(), gate.clone(), sql.to_string());
        let (tag, params) = row(i);
        tasks.spawn(async move {
            gate.wait().await;
            (tag, B::execute(&pool, &sql, &params).await)
        });
    }
    let mut out = Vec::new();
    while let Some(r) = tasks.join_next().await {
        out.push(r.unwrap());
    }
    out
}

async fn two_hundred_concurrent_callers_are_coalesced<B: TestBackend>() {
    let pool = ids_table::<B>(
        "CREATE TABLE users (id SERIAL PRIMARY KEY, name VARCHAR(100) NOT NULL, email VARCHAR(200))",
    )
    .await;
    let sql = B::sql("INSERT INTO users (name, email) VALUES (?, ?)");
    let results = gated_callers::<B, _>(&pool, &sql, 200, |i| {
        let name = format!("user{i}");
        (name.clone(), vals![name, format!("user{i}@example.com")])
    })
    .await;
    let mut ids = HashMap::new();
    for (name, out) in results {
        let out = out.expect("insert ok");
        assert_eq!(out.rows_affected(), 1);
        assert!(out.is_exact());
        if B::INSERT_IDS {
            let id = out.insert_id().expect("a provable per-row id");
            assert!(ids.insert(id, name).is_none(), "id {id} given twice");
        }
    }
    assert_eq!(count::<B>(&pool, "users").await, 200);
    let distinct = B::query_i64(&pool, "SELECT count(DISTINCT name) FROM users", &[])
        .await
        .unwrap();
    assert_eq!(distinct, 200);
    if B::INSERT_IDS {
        // Every caller's id is the row holding its own name.
        let rows = B::query_text(&pool, "SELECT id, name FROM users", &[])
            .await
            .unwrap();
        assert_eq!(rows.len(), 200);
        for row in rows {
            let id: u64 = row[0].as_deref().unwrap().parse().unwrap();
            assert_eq!(ids.get(&id), row[1].as_ref(), "caller got another row's id");
        }
    }
    let stats = B::stats(&pool);
    assert_eq!(stats.rows, 200, "{stats:?}");
    assert!(
        stats.rows_per_batch() > 1.0,
        "no batching happened: {stats:?}"
    );
    assert!(stats.batches < 200);
    assert_eq!(stats.queued, 0);
    B::close(&pool).await;
}

async fn returning_gives_each_caller_its_own_row<B: TestBackend>() {
    let pool = table::<B>(
        "CREATE TABLE items (id SERIAL PRIMARY KEY, label VARCHAR(50) NOT NULL, \
         made TIMESTAMP DEFAULT CURRENT_TIMESTAMP)",
    )
    .await;
    let sql = B::sql("INSERT INTO items (label) VALUES (?) RETURNING id, label");
    let results = gated_callers::<B, _>(&pool, &sql, 150, |i| {
        let label = format!("label-{i}");
        (label.clone(), vals![label])
    })
    .await;
    let mut ids = HashSet::new();
    let by_id = B::sql("SELECT label FROM items WHERE id = ?");
    for (label, out) in results {
        let out = out.expect("insert");
        let (id, echoed) = out.returned_id_text().expect("returned row");
        assert_eq!(echoed, label);
        if let Some(own) = out.insert_id() {
            assert_eq!(own as i64, id, "last_insert_id disagrees with RETURNING");
        }
        assert!(ids.insert(id), "id {id} returned twice");
        let stored = B::query_text(&pool, &by_id, &vals![id]).await.unwrap();
        assert_eq!(stored, [[Some(label)]], "caller got another row's id");
    }
    let stats = B::stats(&pool);
    assert!(stats.rows_per_batch() > 1.0, "{stats:?}");
}

async fn duplicate_key_fails_only_its_caller<B: TestBackend>() {
    let pool = ids_table::<B>(
        "CREATE TABLE accounts (id SERIAL PRIMARY KEY, email VARCHAR(100) NOT NULL UNIQUE)",
    )
    .await;
    let sql = B::sql("INSERT INTO accounts (email) VALUES (?)");
    B::execute(&pool, &sql, &vals!["taken@example.com"])
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
    let rows: Vec<Vec<Val>> = emails.iter().map(|e| vals![e.as_str()]).collect();
    let before = B::stats(&pool);
    let results = B::execute_many(&pool, &sql, &rows).await.unwrap();
    assert_eq!(results.len(), 100);
    let by_id = B::sql("SELECT email FROM accounts WHERE id = ?");
    for (i, r) in results.iter().enumerate() {
        if i == 50 {
            let e = r.as_ref().expect_err("duplicate must fail");
            let (code, native) = B::codes(DbError::DuplicateKey);
            assert_eq!(e.code(), Some(code), "{e}");
            assert_eq!(B::native_code(e).as_deref(), Some(native), "{e}");
            assert!(e.is_db() && !e.is_outcome_unknown() && !e.is_retryable());
        } else {
            let out = r.as_ref().expect("other rows succeed");
            assert_eq!(out.rows_affected(), 1);
            if B::INSERT_IDS {
                let id = out.insert_id().expect("id") as i64;
                let stored = B::query_text(&pool, &by_id, &vals![id]).await.unwrap();
                assert_eq!(stored, [[Some(emails[i].clone())]]);
            }
        }
    }
    assert_eq!(count::<B>(&pool, "accounts").await, 100);
    let dup = count::<B>(&pool, "accounts WHERE email = 'taken@example.com'").await;
    assert_eq!(dup, 1);
    let after = B::stats(&pool);
    assert!(
        after.split_statements > before.split_statements,
        "{after:?}"
    );
    assert_eq!(after.rows_failed - before.rows_failed, 1);
}

async fn concurrent_violations_fail_only_offenders<B: TestBackend>() {
    let ddl = format!(
        "CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR(10) NOT NULL CHECK (v <> 'bad'), n {})",
        B::pick("INT", "TINYINT")
    );
    let config = BatchConfig::default().max_delay(std::time::Duration::from_millis(50));
    let pool = table_with::<B>(config, 2, &ddl).await;
    // 10 check violations and key 7 inserted twice; for MySQL also one
    // NULL into NOT NULL (1048), one string too long (1406), one
    // out-of-range value (1264).
    let check = B::codes(DbError::CheckViolation).1;
    let duplicate = B::codes(DbError::DuplicateKey).1;
    let mut expected = BTreeMap::from([(check, 10), (duplicate, 1)]);
    let extra: &[(i32, &str)] = B::pick(&[], &[(41, "1048"), (42, "1406"), (44, "1264")]);
    expected.extend(extra.iter().map(|&(_, code)| (code, 1)));
    let offenders: Vec<i32> = extra.iter().map(|&(i, _)| i).chain([99, 7]).collect();
    let mut tasks = tokio::task::JoinSet::new();
    let sql = B::sql("INSERT INTO t (k, v, n) VALUES (?, ?, ?)");
    for i in 0..100i32 {
        let (pool, sql) = (pool.clone(), sql.clone());
        let bad = |row: i32| extra.iter().any(|&(r, _)| r == row);
        let k = if i == 99 { 7 } else { i };
        let v: Option<&str> = match i {
            _ if i % 10 == 3 => Some("bad"),
            41 if bad(41) => None,
            42 if bad(42) => Some("far too long for ten"),
            _ => Some("good"),
        };
        let n = if bad(44) && i == 44 { 1000 } else { 1 };
        let params = vals![k, v, n];
        tasks.spawn(async move { (i, B::execute(&pool, &sql, &params).await) });
    }
    let mut ok = 0;
    let mut codes = BTreeMap::new();
    while let Some(r) = tasks.join_next().await {
        let (i, r) = r.unwrap();
        match r {
            Ok(out) => {
                assert_eq!(out.rows_affected(), 1);
                ok += 1;
            }
            Err(e) => {
                assert!(i % 10 == 3 || offenders.contains(&i), "row {i} failed: {e}");
                let code = B::native_code(&e).expect("server error");
                *codes.entry(code).or_insert(0) += 1;
            }
        }
    }
    let codes: BTreeMap<&str, i32> = codes.iter().map(|(c, n)| (c.as_str(), *n)).collect();
    assert_eq!(codes, expected);
    let failed: i32 = expected.values().sum();
    assert_eq!(ok, 100 - failed);
    assert_eq!(count::<B>(&pool, "t").await, i64::from(100 - failed));
}

async fn hostile_values_are_stored_verbatim<B: TestBackend>() {
    let charset = B::pick("", " DEFAULT CHARSET=utf8mb4");
    let pool = table::<B>(&format!(
        "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT){charset}"
    ))
    .await;
    let mut values: Vec<Option<String>> = [
        "it's",
        "'); DROP TABLE notes; --",
        "$1",
        "$2, $3)",
        "?",
        "?, ?)",
        "\"quoted\" \\ backslash \\' \\\\",
        "$$ dollar $$",
        "E'\\n'",
        "`backtick` # hash",
        "/* comment */ -- line",
        ":name @var $1",
        "ünïcödé ✓ 😀",
        "",
    ]
    .into_iter()
    .map(|v| Some(v.to_string()))
    .collect();
    if B::pick(false, true) {
        // PostgreSQL text cannot hold NUL.
        values.push(Some("\0nul\x1a".into()));
    }
    values.push(None);
    let sql = B::sql("INSERT INTO notes (id, body) VALUES (?, ?)");
    let results = gated_callers::<B, _>(&pool, &sql, values.len(), |i| {
        ((), vals![i as i32, values[i].clone()])
    })
    .await;
    for (_, r) in results {
        r.unwrap();
    }
    let rows = B::query_text(&pool, "SELECT body FROM notes ORDER BY id", &[])
        .await
        .unwrap();
    let ids = B::query_i32(&pool, "SELECT id FROM notes ORDER BY id", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), values.len());
    for (id, row) in ids.into_iter().zip(rows) {
        assert_eq!(row[0], values[id as usize]);
    }
    assert_eq!(count::<B>(&pool, "notes").await, values.len() as i64);
}

/// Statements the pool must read right, each backend in its own dialect
/// (case, quoting, comments, placeholders inside strings and calls,
/// `DEFAULT`), and statements it must pass through unchanged.
async fn tricky_statements_are_batched_or_passed_through_correctly<B: TestBackend>() {
    let pool = table::<B>(B::pick(
        "CREATE TABLE \"values\" (id serial PRIMARY KEY, \"Name\" text, doc jsonb, \
         n int DEFAULT 7, at timestamptz)",
        "CREATE TABLE `values` (id INT AUTO_INCREMENT PRIMARY KEY, `Name` VARCHAR(50), \
         doc JSON, n INT DEFAULT 7, at DATETIME)",
    ))
    .await;
    let json = "{\"a\": 1}";
    let statements = B::pick(
        [
            (
                "insert into \"values\" (\"Name\", doc) values (lower($1), ($2::text)::jsonb)",
                vals!["N0", json],
            ),
            (
                "INSERT INTO \"values\" (\"Name\", n, at) VALUES ($1, DEFAULT, now()) -- trailing $9 comment",
                vals!["N1"],
            ),
            (
                "/* lead */ INSERT INTO public.\"values\" (\"Name\") VALUES ($1 || ' $1 ' || $1);",
                vals!["N2"],
            ),
        ],
        [
            (
                "insert into `values` (`Name`, doc) value (lower(?), ?)",
                vals!["N0", json],
            ),
            (
                "INSERT INTO `values` (`Name`, n, at) VALUES (?, DEFAULT, now()) -- trailing ? comment",
                vals!["N1"],
            ),
            (
                "/* lead */ INSERT INTO `values` (`Name`) VALUES (CONCAT(?, ' ? ', ?)) # tail ?",
                vals!["N2", "x"],
            ),
        ],
    );
    for (sql, params) in &statements {
        let r = B::execute(&pool, sql, params).await;
        assert_eq!(r.unwrap().rows_affected(), 1, "{sql}");
    }
    let read = B::pick(
        "SELECT \"Name\", doc::text, n::text FROM \"values\" ORDER BY id",
        "SELECT `Name`, doc, CAST(n AS CHAR) FROM `values` ORDER BY id",
    );
    let text = |v: &str| Some(v.to_string());
    assert_eq!(
        B::query_text(&pool, read, &[]).await.unwrap(),
        [
            [text("n0"), text(json), text("7")],
            [text("N1"), None, text("7")],
            [text(B::pick("N2 $1 N2", "N2 ? x")), None, text("7")],
        ]
    );
    // Not batchable, but must still work unchanged.
    let q = B::pick("\"", "`");
    let update = format!("UPDATE {q}values{q} SET n = n + 1 WHERE {q}Name{q} = ?");
    let out = B::execute(&pool, &B::sql(&update), &vals!["N1"]).await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    let returning = B::pick(" RETURNING id", "");
    let two = format!("INSERT INTO {q}values{q} ({q}Name{q}) VALUES (?), (?){returning}");
    let out = B::execute(&pool, &B::sql(&two), &vals!["a", "b"])
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 2);
    if B::INSERT_IDS {
        assert!(out.insert_id().is_some());
    }
    let stats = B::stats(&pool);
    assert!(stats.passthrough >= 2, "{stats:?}");
}

/// What both backends refuse alike; each one's own refusals are in its
/// `*_coalesce.rs`.
async fn bad_input_gets_a_clear_error_for_its_caller_only<B: TestBackend>() {
    let pool = table::<B>("CREATE TABLE p (a INT, b VARCHAR(10))").await;
    let sql = B::sql("INSERT INTO p (a, b) VALUES (?, ?)");
    // Too few parameters.
    let e = B::execute(&pool, &sql, &vals![1]).await.unwrap_err();
    assert!(e.is_params(), "{e}");
    assert!(e.to_string().contains("2 parameters"), "{e}");
    // Malformed SQL and unknown tables: the server's own error.
    for ((code, native), bad, params) in [
        (
            B::codes(DbError::SyntaxError),
            "INSRT INTO p VALUES (1)",
            vals![],
        ),
        (
            B::codes(DbError::NoSuchTable),
            "INSERT INTO missing_table (a) VALUES (?)",
            vals![1],
        ),
    ] {
        let e = B::execute(&pool, &B::sql(bad), &params).await.unwrap_err();
        assert_eq!(B::native_code(&e).as_deref(), Some(native), "{e}");
        assert_eq!(e.code(), Some(code), "{e}");
    }
    // Good rows still go through, in a mixed execute_many too.
    let rows = [vals![1, "one"], vals![2], vals![3, "three"]];
    let results = B::execute_many(&pool, &sql, &rows).await.unwrap();
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(results[1].as_ref().unwrap_err().is_params());
    assert_eq!(count::<B>(&pool, "p").await, 2);
    common::backend::all_returned::<B>(&pool).await;
}

async fn max_in_flight_bounds_concurrent_flushes<B: TestBackend>() {
    let config = BatchConfig::default().max_in_flight(1);
    let pool = table_with::<B>(config, 4, "CREATE TABLE mif (k INT PRIMARY KEY)").await;
    let in_flight = |s: &batchpool::Stats| s.in_flight;
    let sampler = max_stat::<B>(&pool, 300, std::time::Duration::from_millis(1), in_flight);
    let sql = B::sql("INSERT INTO mif (k) VALUES (?)");
    let results = gated_callers::<B, _>(&pool, &sql, 300, |k| ((), vals![k as i32])).await;
    for (_, r) in results {
        assert_eq!(r.unwrap().rows_affected(), 1);
    }
    assert_eq!(count::<B>(&pool, "mif").await, 300);
    assert!(
        sampler.await.unwrap() <= 1,
        "more than one flush ran at once"
    );
    let stats = B::stats(&pool);
    assert!(stats.rows_per_batch() > 1.0, "{stats:?}");
    assert_eq!(stats.flush_limit, 1, "a limit set is kept");
}

/// With no `max_in_flight`, the number of flushes in flight adapts, but
/// stays between 1 and the pool's size, and every flush in flight holds a
/// slot of it; every caller still gets its own outcome.
async fn the_adaptive_flush_limit_stays_within_the_pool<B: TestBackend>() {
    let pool = table_with::<B>(
        BatchConfig::default(),
        4,
        "CREATE TABLE afl (k INT PRIMARY KEY)",
    )
    .await;
    assert_eq!(
        B::stats(&pool).flush_limit,
        4,
        "it starts at the pool's size"
    );
    let over = |s: &batchpool::Stats| {
        let out_of_range = !(1..=4).contains(&s.flush_limit);
        u64::from(out_of_range) + s.in_flight.saturating_sub(4)
    };
    let sampler = max_stat::<B>(&pool, 600, std::time::Duration::from_millis(1), over);
    let sql = B::sql("INSERT INTO afl (k) VALUES (?)");
    for round in 0..3 {
        let base = round * 400;
        let results =
            gated_callers::<B, _>(&pool, &sql, 400, |k| ((), vals![(base + k) as i32])).await;
        for (_, r) in results {
            assert_eq!(r.unwrap().rows_affected(), 1);
        }
    }
    assert_eq!(count::<B>(&pool, "afl").await, 1200);
    assert_eq!(
        sampler.await.unwrap(),
        0,
        "a limit or a flush count out of range"
    );
    common::backend::all_returned::<B>(&pool).await;
}

/// The rewritten statement for n rows executes and inserts exactly n rows,
/// whatever max_rows splits it into (PostgreSQL: with a repeated `$2`).
fn rewritten_statement_inserts_n_rows<B: TestBackend>() {
    use proptest::test_runner::{Config, TestRunner};
    let config = Config {
        cases: B::pick(12, 10),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&(1usize..400, 1usize..300), |(n, max_rows)| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(inserts_n_rows::<B>(n, max_rows));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

async fn inserts_n_rows<B: TestBackend>(n: usize, max_rows: usize) {
    let config = BatchConfig::default().max_rows(max_rows);
    let ddl =
        "CREATE TABLE r (id SERIAL PRIMARY KEY, a BIGINT, b TEXT, c DOUBLE PRECISION, d BOOL)";
    let pool = table_with::<B>(config, 3, ddl).await;
    B::require_consecutive_ids(&pool).await; // the test checks per-row ids
    let sql = B::pick(
        "INSERT INTO r (a, b, c, d) VALUES ($1, $2, $3, upper($2) IS NOT NULL AND $4)",
        "INSERT INTO r (a, b, c, d) VALUES (?, ?, ?, UPPER(?) IS NOT NULL AND ?)",
    );
    let rows: Vec<Vec<Val>> = (0..n)
        .map(|i| {
            let (a, b, c, d) = (
                i as i64,
                format!("row {i} '$1' '?'"),
                i as f64 / 3.0,
                i % 2 == 0,
            );
            B::pick(vals![a, b.clone(), c, d], vals![a, b.clone(), c, b, d])
        })
        .collect();
    let results = B::execute_many(&pool, sql, &rows).await.unwrap();
    let by_id = B::sql("SELECT a FROM r WHERE id = ?");
    for (i, r) in results.iter().enumerate() {
        let out = r.as_ref().unwrap();
        assert_eq!(out.rows_affected(), 1);
        if B::INSERT_IDS {
            let id = out.insert_id().unwrap() as i64;
            let a = B::query_i64(&pool, &by_id, &vals![id]).await.unwrap();
            assert_eq!(a, i as i64);
        }
    }
    assert_eq!(count::<B>(&pool, "r").await as usize, n);
    let sum = B::pick(
        "SELECT coalesce(sum(a), 0)::bigint FROM r",
        "SELECT CAST(COALESCE(SUM(a), 0) AS SIGNED) FROM r",
    );
    let sum = B::query_i64(&pool, sum, &[]).await.unwrap();
    assert_eq!(sum as usize, n * (n - 1) / 2);
    B::close(&pool).await;
}

/// Both backends answer "what is this statement" from one classifier:
/// `explain` says why a text runs on its own, transaction control is
/// refused through `execute` and `query` (before anything is sent, so the
/// pool's connections stay clean), and a row-count mismatch is its own kind
/// of error.
async fn one_classifier_explains_and_refuses_alike<B: TestBackend>() {
    use batchpool::NotCoalesced;

    let pool = table::<B>("CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR(20))").await;
    let insert = B::sql("INSERT INTO t (k, v) VALUES (?, ?)");
    let explain = B::explain(&pool, &insert).await.unwrap();
    assert!(explain.is_coalesced(), "{explain}");
    assert_eq!(explain.reason(), None);
    let read = B::explain(&pool, "SELECT 1").await.unwrap();
    assert!(
        matches!(read.reason(), Some(NotCoalesced::KeyedForm(_))),
        "SELECT 1: {read}"
    );
    for (sql, why) in [
        ("SHOW x", NotCoalesced::NotAnInsert),
        ("begin", NotCoalesced::TransactionControl("BEGIN")),
        ("/* c */ COMMIT", NotCoalesced::TransactionControl("COMMIT")),
    ] {
        let explain = B::explain(&pool, sql).await.unwrap();
        assert_eq!(explain.reason(), Some(&why), "{sql}: {explain}");
    }
    let select = B::explain(&pool, "INSERT INTO t (k, v) SELECT k, v FROM t")
        .await
        .unwrap();
    assert!(
        matches!(select.reason(), Some(NotCoalesced::InsertForm(_))),
        "{select}"
    );
    let two_rows = B::sql("INSERT INTO t (k, v) VALUES (?, ?), (?, ?)");
    let two_rows = B::explain(&pool, &two_rows).await.unwrap();
    assert!(
        matches!(two_rows.reason(), Some(NotCoalesced::InsertForm(_))),
        "{two_rows}"
    );

    // A bare BEGIN (or one hidden after another statement) would leave an
    // arbitrary pooled connection inside a transaction: refused alike.
    for sql in ["BEGIN", "START TRANSACTION", "SELECT 1; COMMIT"] {
        let e = B::execute(&pool, sql, &[]).await.unwrap_err();
        assert!(e.is_refused() && !e.is_params(), "{sql}: {e}");
        let e = B::query_text(&pool, sql, &[]).await.unwrap_err();
        assert!(e.is_refused(), "{sql}: {e}");
    }
    assert_eq!(B::stats(&pool).passthrough, 1, "only the CREATE TABLE ran");
    // Every connection is still in autocommit: a row written now commits.
    B::execute(&pool, &insert, &vals![1, "one"]).await.unwrap();
    assert_eq!(count::<B>(&pool, "t").await, 1);

    let none = B::query_i64(&pool, &B::sql("SELECT k FROM t WHERE k = ?"), &vals![2])
        .await
        .unwrap_err();
    assert!(none.is_row_count() && !none.is_params(), "{none}");

    // Coalescing off: the insert runs alone, and says so; control is still
    // refused.
    let off = B::pool(
        &B::fresh_db().await,
        BatchConfig::default().enabled(false),
        1,
    );
    let why = B::explain(&off, &insert).await.unwrap();
    assert_eq!(why.reason(), Some(&NotCoalesced::Disabled), "{why}");
    assert!(
        B::execute(&off, "COMMIT", &[])
            .await
            .unwrap_err()
            .is_refused()
    );
}
