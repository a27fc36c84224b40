//! Coalescing, per-row outcomes and error isolation against a real MariaDB.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use batchpool::BatchConfig;
use batchpool::mysql::Pool;
use mysql_async::prelude::Queryable;
use mysql_async::{Value, params};
use tokio::sync::Barrier;

async fn pool_with(config: BatchConfig, max_size: usize) -> Pool {
    let url = common::mysql_fresh_db().await;
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
    pool.query_one(&format!("SELECT count(*) FROM {table}"), ())
        .await
        .expect("count")
        .get(0)
        .expect("a count")
}

/// Per-row ids are only claimed with `innodb_autoinc_lock_mode` 0 or 1 (the
/// MariaDB default, and the throwaway server's); tests that check them say
/// so when pointed at a server configured otherwise.
async fn require_consecutive_lock_mode(pool: &Pool) {
    let mode: i64 = pool
        .query_one("SELECT @@innodb_autoinc_lock_mode", ())
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert!(
        mode == 0 || mode == 1,
        "this test needs innodb_autoinc_lock_mode 0 or 1 (the default), the server has {mode}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_callers_are_coalesced() {
    let pool = pool().await;
    require_consecutive_lock_mode(&pool).await;
    pool.execute(
        "CREATE TABLE users (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL, \
         email VARCHAR(200)) ENGINE=InnoDB",
        (),
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
            let out = pool
                .execute(
                    "INSERT INTO users (name, email) VALUES (?, ?)",
                    (name.clone(), email),
                )
                .await;
            (name, out)
        });
    }
    let mut ids = HashMap::new();
    while let Some(r) = tasks.join_next().await {
        let (name, out) = r.unwrap();
        let out = out.expect("insert ok");
        assert_eq!(out.rows_affected(), 1);
        assert!(out.is_exact());
        let id = out.last_insert_id().expect("a provable per-row id");
        assert!(ids.insert(id, name).is_none(), "id {id} given twice");
    }
    assert_eq!(count(&pool, "users").await, 200);
    // Every caller's id is the row holding its own name.
    let rows: Vec<(u64, String)> = pool
        .query("SELECT id, name FROM users", ())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect();
    assert_eq!(rows.len(), 200);
    for (id, name) in rows {
        assert_eq!(ids.get(&id), Some(&name), "caller got another row's id");
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_follow_auto_increment_increment() {
    let url = common::mysql_fresh_db().await;
    // Every connection of this pool steps ids by 5.
    let opts = mysql_async::Opts::from_url(&url).unwrap();
    let opts = mysql_async::OptsBuilder::from_opts(opts)
        .setup(vec!["SET SESSION auto_increment_increment = 5"]);
    let pool = Pool::from_opts(opts).max_size(2).build().unwrap();
    require_consecutive_lock_mode(&pool).await;
    pool.execute(
        "CREATE TABLE steps (id INT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(20) NOT NULL)",
        (),
    )
    .await
    .unwrap();
    let tags: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    let results = pool
        .execute_many(
            "INSERT INTO steps (tag) VALUES (?)",
            tags.iter().map(|t| (t.as_str(),)),
        )
        .await
        .unwrap();
    let mut seen = HashSet::new();
    for (tag, r) in tags.iter().zip(&results) {
        let id = r.as_ref().unwrap().last_insert_id().expect("id");
        assert!(seen.insert(id));
        let stored: String = pool
            .query_one("SELECT tag FROM steps WHERE id = ?", (id,))
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(&stored, tag);
    }
    let ids: Vec<u64> = results
        .iter()
        .map(|r| r.as_ref().unwrap().last_insert_id().unwrap())
        .collect();
    assert!(
        ids.windows(2)
            .all(|w| w[1] > w[0] && (w[1] - w[0]) % 5 == 0)
    );
    assert!(pool.stats().batches < 40, "{:?}", pool.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_not_claimed_when_not_provable() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE expl (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)",
        (),
    )
    .await
    .unwrap();
    // The statement names the auto-increment column: ids are the caller's
    // own (or generated for NULL), not consecutive.
    let rows: Vec<(Option<i32>, i32)> = (0..20)
        .map(|i| (if i % 2 == 0 { Some(1000 + i) } else { None }, i))
        .collect();
    let results = pool
        .execute_many("INSERT INTO expl (id, v) VALUES (?, ?)", rows.clone())
        .await
        .unwrap();
    for r in &results {
        let out = r.as_ref().unwrap();
        assert_eq!(out.rows_affected(), 1);
        assert_eq!(out.last_insert_id(), None);
    }
    assert_eq!(count(&pool, "expl").await, 20);
    // INSERT IGNORE: no per-row ids either.
    let out = pool
        .execute("INSERT IGNORE INTO expl (v) VALUES (?)", (7,))
        .await
        .unwrap();
    assert_eq!(out.last_insert_id(), None);
    assert_eq!(out.rows_affected(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_not_claimed_under_interleaved_lock_mode() {
    // Lock mode 2 may interleave the ids of concurrent multi-row inserts.
    let server = common::MysqlServer::start(&["--innodb-autoinc-lock-mode=2"]);
    let pool = Pool::builder(&server.url()).max_size(2).build().unwrap();
    pool.execute(
        "CREATE TABLE il (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)",
        (),
    )
    .await
    .unwrap();
    let results = pool
        .execute_many("INSERT INTO il (v) VALUES (?)", (0..30).map(|i| (i,)))
        .await
        .unwrap();
    for r in &results {
        let out = r.as_ref().unwrap();
        assert_eq!(out.rows_affected(), 1);
        assert_eq!(out.last_insert_id(), None, "{out:?}");
    }
    assert!(pool.stats().batches >= 1);
    assert_eq!(count(&pool, "il").await, 30);
    // A statement that ran on its own still reports the server's id.
    let out = pool
        .execute("INSERT INTO il (v) VALUES (1), (2)", ())
        .await
        .unwrap();
    assert!(out.last_insert_id().is_some());
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn returning_gives_each_caller_its_own_row() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE items (id BIGINT AUTO_INCREMENT PRIMARY KEY, label VARCHAR(50) NOT NULL, \
         made TIMESTAMP DEFAULT CURRENT_TIMESTAMP)",
        (),
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
                    "INSERT INTO items (label) VALUES (?) RETURNING id, label",
                    (label.clone(),),
                )
                .await
                .expect("insert");
            let row = out.returned().expect("returned row");
            let id: u64 = row.get(0).unwrap();
            let echoed: String = row.get(1).unwrap();
            assert_eq!(echoed, label);
            if let Some(own) = out.last_insert_id() {
                assert_eq!(own, id, "last_insert_id disagrees with RETURNING");
            }
            (id, label)
        });
    }
    let mut ids = HashSet::new();
    while let Some(r) = tasks.join_next().await {
        let (id, label) = r.unwrap();
        assert!(ids.insert(id), "id {id} returned twice");
        let stored: String = pool
            .query_one("SELECT label FROM items WHERE id = ?", (id,))
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(stored, label, "caller got another row's id");
    }
    assert!(pool.stats().rows_per_batch() > 1.0, "{:?}", pool.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_key_fails_only_its_caller() {
    let pool = pool().await;
    require_consecutive_lock_mode(&pool).await;
    pool.execute(
        "CREATE TABLE accounts (id INT AUTO_INCREMENT PRIMARY KEY, \
         email VARCHAR(100) NOT NULL UNIQUE)",
        (),
    )
    .await
    .unwrap();
    pool.execute(
        "INSERT INTO accounts (email) VALUES (?)",
        ("taken@example.com",),
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
    let before = pool.stats();
    let results = pool
        .execute_many(
            "INSERT INTO accounts (email) VALUES (?)",
            emails.iter().map(|e| (e.as_str(),)),
        )
        .await
        .unwrap();
    assert_eq!(results.len(), 100);
    for (i, r) in results.iter().enumerate() {
        if i == 50 {
            let e = r.as_ref().expect_err("duplicate must fail");
            assert_eq!(e.code(), Some("23000"), "{e}");
            assert_eq!(e.as_mysql_error().map(|m| m.code), Some(1062), "{e}");
            assert!(e.is_db() && !e.is_outcome_unknown() && !e.is_retryable());
        } else {
            let out = r.as_ref().expect("other rows succeed");
            assert_eq!(out.rows_affected(), 1);
            let id = out.last_insert_id().expect("id");
            let stored: String = pool
                .query_one("SELECT email FROM accounts WHERE id = ?", (id,))
                .await
                .unwrap()
                .get(0)
                .unwrap();
            assert_eq!(stored, emails[i]);
        }
    }
    assert_eq!(count(&pool, "accounts").await, 100);
    let dup: i64 = pool
        .query_one(
            "SELECT count(*) FROM accounts WHERE email = 'taken@example.com'",
            (),
        )
        .await
        .unwrap()
        .get(0)
        .unwrap();
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
        "CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR(10) NOT NULL CHECK (v <> 'bad'), \
         n TINYINT)",
        (),
    )
    .await
    .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..100i32 {
        let pool = pool.clone();
        tasks.spawn(async move {
            // 10 check violations, key 7 inserted twice, one out-of-range
            // value, one NULL into NOT NULL, one string too long.
            let k = if i == 99 { 7 } else { i };
            let v: Option<&str> = match i {
                _ if i % 10 == 3 => Some("bad"),
                41 => None,
                42 => Some("far too long for ten"),
                _ => Some("good"),
            };
            let n = if i == 44 { 1000 } else { 1 };
            (
                i,
                pool.execute("INSERT INTO t (k, v, n) VALUES (?, ?, ?)", (k, v, n))
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
                assert!(
                    i % 10 == 3 || [99, 7, 41, 42, 44].contains(&i),
                    "row {i} failed: {e}"
                );
                let code = e.as_mysql_error().expect("server error").code;
                *codes.entry(code).or_insert(0) += 1;
            }
        }
    }
    assert_eq!(codes.get(&4025), Some(&10), "{codes:?}");
    assert_eq!(codes.get(&1062), Some(&1), "{codes:?}");
    assert_eq!(codes.get(&1048), Some(&1), "{codes:?}");
    assert_eq!(codes.get(&1406), Some(&1), "{codes:?}");
    assert_eq!(codes.get(&1264), Some(&1), "{codes:?}");
    assert_eq!(ok, 86);
    assert_eq!(count(&pool, "t").await, 86);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_counts_are_exact_or_say_so() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE kv (k INT PRIMARY KEY, v VARCHAR(20) NOT NULL)",
        (),
    )
    .await
    .unwrap();
    // ODKU over keys repeated inside the batch: rows apply in order, the
    // last value of each key wins, exactly as one by one.
    let data: Vec<(i32, String)> = (0..60).map(|i| (i % 20, format!("v{i}"))).collect();
    let results = pool
        .execute_many(
            "INSERT INTO kv (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)",
            data.clone(),
        )
        .await
        .unwrap();
    for (i, r) in results.iter().enumerate() {
        let out = r.as_ref().expect("upsert ok");
        // The statement holding the 20 inserts (1 each) also holds updates
        // (2 each): its total cannot be split, and the outcome says so. A
        // statement of updates only (the engine's sizes may cut 60 rows in
        // two) is exact at 2 each.
        if i < 20 || !out.is_exact() {
            assert!(!out.is_exact(), "{i}: {out:?}");
            assert_eq!(out.rows_affected(), 1);
        } else {
            assert_eq!(out.rows_affected(), 2, "{i}: {out:?}");
        }
        assert_eq!(out.last_insert_id(), None);
    }
    assert_eq!(count(&pool, "kv").await, 20);
    for k in 0..20i32 {
        let v: String = pool
            .query_one("SELECT v FROM kv WHERE k = ?", (k,))
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(v, format!("v{}", k + 40));
    }
    // All updates: 2 each, exact.
    let results = pool
        .execute_many(
            "INSERT INTO kv (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)",
            (0..20).map(|k| (k, format!("w{k}"))),
        )
        .await
        .unwrap();
    for r in &results {
        let out = r.as_ref().unwrap();
        assert!(out.is_exact());
        assert_eq!(out.rows_affected(), 2);
    }
    // INSERT IGNORE where every row is new (exact 1) / every row exists
    // (exact 0) / mixed (not exact).
    let fresh = pool
        .execute_many(
            "INSERT IGNORE INTO kv (k, v) VALUES (?, ?)",
            (100..110).map(|k| (k, "new")),
        )
        .await
        .unwrap();
    assert!(fresh.iter().all(|r| {
        let o = r.as_ref().unwrap();
        o.is_exact() && o.rows_affected() == 1
    }));
    let old = pool
        .execute_many(
            "INSERT IGNORE INTO kv (k, v) VALUES (?, ?)",
            (100..110).map(|k| (k, "again")),
        )
        .await
        .unwrap();
    assert!(old.iter().all(|r| {
        let o = r.as_ref().unwrap();
        o.is_exact() && o.rows_affected() == 0
    }));
    let mixed = pool
        .execute_many(
            "INSERT IGNORE INTO kv (k, v) VALUES (?, ?)",
            // 8 rows (one statement): 5 exist, 3 are new.
            (105..113).map(|k| (k, "mixed")),
        )
        .await
        .unwrap();
    assert!(mixed.iter().all(|r| !r.as_ref().unwrap().is_exact()));
    assert_eq!(count(&pool, "kv").await, 33);
    let stored: String = pool
        .query_one("SELECT v FROM kv WHERE k = 100", ())
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(stored, "new", "INSERT IGNORE must not overwrite");
    // REPLACE of new keys: exact 1 each.
    let replaced = pool
        .execute_many(
            "REPLACE INTO kv (k, v) VALUES (?, ?)",
            (200..205).map(|k| (k, "r")),
        )
        .await
        .unwrap();
    assert!(replaced.iter().all(|r| {
        let o = r.as_ref().unwrap();
        o.is_exact() && o.rows_affected() == 1
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_run_one_by_one_when_asked_and_are_exact() {
    let url = common::mysql_fresh_db().await;
    let pool = Pool::builder(&url)
        .max_size(2)
        .coalesce_upserts(false)
        .build()
        .unwrap();
    pool.execute("CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)", ())
        .await
        .unwrap();
    pool.execute("INSERT INTO kv VALUES (1, 1), (2, 2)", ())
        .await
        .unwrap();
    let rows = [(1, 10), (2, 2), (3, 30)];
    let results = pool
        .execute_many(
            "INSERT INTO kv (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)",
            rows,
        )
        .await
        .unwrap();
    let counts: Vec<(u64, bool)> = results
        .iter()
        .map(|r| {
            let o = r.as_ref().unwrap();
            (o.rows_affected(), o.is_exact())
        })
        .collect();
    // updated, unchanged, inserted
    assert_eq!(counts, vec![(2, true), (0, true), (1, true)]);
    let stats = pool.stats();
    assert_eq!(stats.batches, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_values_are_stored_verbatim() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT) DEFAULT CHARSET=utf8mb4",
        (),
    )
    .await
    .unwrap();
    let values: Vec<Option<String>> = vec![
        Some("it's".into()),
        Some("'); DROP TABLE notes; --".into()),
        Some("?".into()),
        Some("?, ?)".into()),
        Some("\"quoted\" \\ backslash \\' \\\\".into()),
        Some("`backtick` # hash".into()),
        Some("/* comment */ -- line".into()),
        Some(":name @var $1".into()),
        Some("ünïcödé ✓ 😀".into()),
        Some("\0nul\x1a".into()),
        Some(String::new()),
        None,
    ];
    let gate = Arc::new(Barrier::new(values.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, v) in values.iter().cloned().enumerate() {
        let (pool, gate) = (pool.clone(), gate.clone());
        tasks.spawn(async move {
            gate.wait().await;
            let id = i as i32;
            pool.execute("INSERT INTO notes (id, body) VALUES (?, ?)", (id, v))
                .await
                .unwrap();
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    // Also through the escape hatch's text protocol read.
    let rows = pool
        .query("SELECT id, body FROM notes ORDER BY id", ())
        .await
        .unwrap();
    assert_eq!(rows.len(), values.len());
    for row in rows {
        let id: i32 = row.get(0).unwrap();
        let body: Option<String> = row.get(1).unwrap();
        assert_eq!(body, values[id as usize]);
    }
    assert_eq!(count(&pool, "notes").await, values.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tricky_statements_are_batched_or_passed_through_correctly() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE `values` (id INT AUTO_INCREMENT PRIMARY KEY, `Name` VARCHAR(50), \
         doc JSON, n INT DEFAULT 7, at DATETIME)",
        (),
    )
    .await
    .unwrap();
    let sqls = [
        "insert into `values` (`Name`, doc) value (lower(?), ?)",
        "INSERT INTO `values` (`Name`, n, at) VALUES (?, DEFAULT, now()) -- trailing ? comment",
        "/* lead */ INSERT INTO `values` (`Name`) VALUES (CONCAT(?, ' ? ', ?)) # tail ?",
    ];
    let r0 = pool.execute(sqls[0], ("N0", "{\"a\": 1}")).await;
    let r1 = pool.execute(sqls[1], ("N1",)).await;
    let r2 = pool.execute(sqls[2], ("N2", "x")).await;
    for (r, sql) in [r0, r1, r2].into_iter().zip(sqls) {
        assert_eq!(r.unwrap().rows_affected(), 1, "{sql}");
    }
    let rows = pool
        .query("SELECT `Name`, doc, n FROM `values` ORDER BY id", ())
        .await
        .unwrap();
    let got: Vec<(String, Option<String>, i32)> = rows
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("n0".to_string(), Some("{\"a\": 1}".to_string()), 7),
            ("N1".to_string(), None, 7),
            ("N2 ? x".to_string(), None, 7),
        ]
    );
    // Not batchable, but must still work unchanged.
    let out = pool
        .execute("UPDATE `values` SET n = n + 1 WHERE `Name` = ?", ("N1",))
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 1);
    let out = pool
        .execute("INSERT INTO `values` (`Name`) VALUES (?), (?)", ("a", "b"))
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 2);
    assert!(out.last_insert_id().is_some());
    // Named parameters run on their own.
    let out = pool
        .execute(
            "INSERT INTO `values` (`Name`, n) VALUES (:name, :n)",
            params! { "name" => "named", "n" => 3 },
        )
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 1);
    assert!(pool.stats().passthrough >= 3, "{:?}", pool.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_transactional_tables_are_not_coalesced() {
    let pool = pool().await;
    pool.execute(
        "CREATE TABLE m (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=MyISAM",
        (),
    )
    .await
    .unwrap();
    // A duplicate in the middle: with MyISAM a multi-row statement would
    // keep the rows before it, so these must run one by one.
    let rows: Vec<(i32, i32)> = (0..10).map(|i| (if i == 6 { 2 } else { i }, i)).collect();
    let results = pool
        .execute_many("INSERT INTO m (k, v) VALUES (?, ?)", rows)
        .await
        .unwrap();
    for (i, r) in results.iter().enumerate() {
        if i == 6 {
            assert_eq!(r.as_ref().unwrap_err().as_mysql_error().unwrap().code, 1062);
        } else {
            assert_eq!(r.as_ref().unwrap().rows_affected(), 1);
        }
    }
    assert_eq!(count(&pool, "m").await, 9);
    let stats = pool.stats();
    assert_eq!(stats.batches, 0, "{stats:?}");
    assert!(stats.passthrough >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_for_its_caller_only() {
    let pool = pool().await;
    pool.execute("CREATE TABLE p (a INT, b VARCHAR(10))", ())
        .await
        .unwrap();
    let sql = "INSERT INTO p (a, b) VALUES (?, ?)";
    // Too few parameters.
    let e = pool.execute(sql, (1,)).await.unwrap_err();
    assert!(e.is_params(), "{e}");
    assert!(e.to_string().contains("2 parameters"), "{e}");
    // Named parameters for a `?` statement.
    let e = pool
        .execute(sql, params! { "a" => 1, "b" => "x" })
        .await
        .unwrap_err();
    assert!(e.is_params(), "{e}");
    // Too few parameters for a statement that is not coalesced: a clear
    // error, and the connection survives.
    let e = pool
        .execute("UPDATE p SET b = ? WHERE a = ?", (1,))
        .await
        .unwrap_err();
    assert!(e.is_params(), "{e}");
    // Malformed SQL and unknown tables: the server's own error.
    let e = pool
        .execute("INSRT INTO p VALUES (1)", ())
        .await
        .unwrap_err();
    assert_eq!(e.as_mysql_error().map(|m| m.code), Some(1064), "{e}");
    assert_eq!(e.code(), Some("42000"));
    let e = pool
        .execute("INSERT INTO missing_table (a) VALUES (?)", (1,))
        .await
        .unwrap_err();
    assert_eq!(e.as_mysql_error().map(|m| m.code), Some(1146), "{e}");
    assert_eq!(e.code(), Some("42S02"));
    // Good rows still go through, in a mixed execute_many too.
    let rows: Vec<Vec<Value>> = vec![
        vec![1.into(), "one".into()],
        vec![2.into()],
        vec![3.into(), "three".into()],
    ];
    let results = pool.execute_many(sql, rows).await.unwrap();
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(results[1].as_ref().unwrap_err().is_params());
    assert_eq!(count(&pool, "p").await, 2);
    let status = pool.status();
    assert_eq!(status.size, status.available, "{status:?}");
    // Debug output never shows the password.
    let builder = Pool::builder("mysql://app:s3cret@127.0.0.1:1/db");
    let shown = format!("{builder:?}");
    assert!(
        shown.contains("app") && !shown.contains("s3cret"),
        "{shown}"
    );
    // Bad configuration fails at build, with the reason.
    let e = Pool::builder("postgres://nope").build().unwrap_err();
    assert!(e.to_string().contains("URL"), "{e}");
    let e = Pool::builder(&common::mysql_url())
        .statement_cache(0)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("statement_cache"), "{e}");
    let e = Pool::builder(&common::mysql_url())
        .max_size(0)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("max_size"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_hatch_is_reset_before_reuse() {
    let pool = pool_with(BatchConfig::default(), 1).await;
    pool.execute("CREATE TABLE h (k INT PRIMARY KEY)", ())
        .await
        .unwrap();
    {
        let mut conn = pool.get().await.unwrap();
        let v: Option<i64> = conn.query_first("SELECT 41 + 1").await.unwrap();
        assert_eq!(v, Some(42));
        // Leave the session in a state that would swallow later rows.
        conn.query_drop("SET autocommit = 0").await.unwrap();
        conn.query_drop("INSERT INTO h VALUES (1)").await.unwrap();
    }
    // The single connection was reset: this row commits on its own and the
    // uncommitted one above is gone.
    pool.execute("INSERT INTO h (k) VALUES (?)", (2,))
        .await
        .unwrap();
    let check = Pool::builder(&common::mysql_url())
        .max_size(1)
        .build()
        .unwrap();
    let db: String = pool
        .query_one("SELECT DATABASE()", ())
        .await
        .unwrap()
        .get(0)
        .unwrap();
    let keys: Vec<i32> = check
        .query(&format!("SELECT k FROM `{db}`.h ORDER BY k"), ())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0).unwrap())
        .collect();
    assert_eq!(keys, vec![2]);
    let status = pool.status();
    assert_eq!(status.max_size, 1);
    pool.close().await;
    assert!(pool.is_closed());
    let e = pool.execute("SELECT 1", ()).await.unwrap_err();
    assert!(e.is_closed() && e.is_pool_closed(), "{e}");
    assert!(pool.get().await.unwrap_err().is_closed());
}

mod property {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 10, failure_persistence: None, ..ProptestConfig::default() })]
        /// The rewritten statement for n rows executes and inserts exactly n
        /// rows, whatever max_rows splits it into.
        #[test]
        fn rewritten_statement_inserts_n_rows(n in 1usize..400, max_rows in 1usize..300) {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let pool = pool_with(BatchConfig::default().max_rows(max_rows), 3).await;
                require_consecutive_lock_mode(&pool).await;
                pool.execute("CREATE TABLE r (id INT AUTO_INCREMENT PRIMARY KEY, a BIGINT, b TEXT, c DOUBLE, d BOOL)", ()).await.unwrap();
                let data: Vec<(i64, String, f64, bool)> =
                    (0..n).map(|i| (i as i64, format!("row {i} '?'"), i as f64 / 3.0, i % 2 == 0)).collect();
                let results = pool
                    .execute_many("INSERT INTO r (a, b, c, d) VALUES (?, ?, ?, UPPER(?) IS NOT NULL AND ?)",
                        data.iter().map(|(a, b, c, d)| (*a, b.clone(), *c, b.clone(), *d)))
                    .await
                    .unwrap();
                for (i, r) in results.iter().enumerate() {
                    let out = r.as_ref().unwrap();
                    assert_eq!(out.rows_affected(), 1);
                    let id = out.last_insert_id().unwrap();
                    let a: i64 = pool.query_one("SELECT a FROM r WHERE id = ?", (id,)).await.unwrap().get(0).unwrap();
                    assert_eq!(a, i as i64);
                }
                assert_eq!(count(&pool, "r").await as usize, n);
                let sum: i64 = pool.query_one("SELECT CAST(COALESCE(SUM(a), 0) AS SIGNED) FROM r", ()).await.unwrap().get(0).unwrap();
                assert_eq!(sum as usize, n * (n - 1) / 2);
                pool.close().await;
            });
        }
    }
}
