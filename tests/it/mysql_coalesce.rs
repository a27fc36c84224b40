//! MariaDB-only coalescing behaviour: auto-increment ids, `ON DUPLICATE KEY
//! UPDATE` / `INSERT IGNORE` / `REPLACE` counts, non-transactional tables,
//! the dialect, named parameters, `max_allowed_packet`, and the escape
//! hatch's reset. What both backends share is in `coalesce.rs`.

use crate::common;

use std::collections::HashSet;

use crate::common::backend::{My, TestBackend};
use batchpool::BatchConfig;
use batchpool::mysql::Pool;
use mysql_async::prelude::Queryable;
use mysql_async::{Value, params};

async fn pool_with(config: BatchConfig, max_size: usize) -> Pool {
    My::pool(&My::fresh_db().await, config, max_size)
}

/// A pool on a fresh database holding the table `ddl` creates.
async fn table(ddl: &str) -> Pool {
    let pool = pool().await;
    My::execute(&pool, ddl, &[]).await.unwrap();
    pool
}

async fn pool() -> Pool {
    pool_with(BatchConfig::default(), 4).await
}

async fn count(pool: &Pool, table: &str) -> i64 {
    common::backend::count::<My>(pool, table).await
}

/// Column 0 of the one row `sql` returns.
async fn scalar<T: mysql_async::prelude::FromValue>(
    pool: &Pool,
    sql: &str,
    params: impl Into<mysql_async::Params>,
) -> T {
    let row = pool.query_one(sql, params).await.unwrap();
    row.get(0).expect("a value")
}

const UPSERT: &str = "INSERT INTO kv (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)";

async fn require_consecutive_lock_mode(pool: &Pool) {
    My::require_consecutive_ids(pool).await
}

/// Whether the pool's server is a Galera node (`wsrep_on`), and the
/// increment it gives every session when its auto-increment control is on
/// (a session's own setting is then overridden before each command).
/// `(false, None)` for a server without the wsrep variables.
async fn galera_node(pool: &Pool) -> (bool, Option<u64>) {
    let row = pool
        .query_opt(
            "SELECT @@GLOBAL.wsrep_on, @@GLOBAL.wsrep_auto_increment_control, \
             @@GLOBAL.auto_increment_increment",
            (),
        )
        .await;
    match row
        .ok()
        .flatten()
        .map(mysql_async::from_row::<(u64, u64, u64)>)
    {
        Some((on, control, step)) => (on != 0, (on != 0 && control != 0).then_some(step)),
        None => (false, None),
    }
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
    // The INSERTs' flushes (the reads below are coalesced too).
    let inserted = pool.stats();
    let mut seen = HashSet::new();
    for (tag, r) in tags.iter().zip(&results) {
        let id = r.as_ref().unwrap().last_insert_id().expect("id");
        assert!(seen.insert(id));
        let stored: String = scalar(&pool, "SELECT tag FROM steps WHERE id = ?", (id,)).await;
        assert_eq!(&stored, tag);
    }
    let ids: Vec<u64> = results
        .iter()
        .map(|r| r.as_ref().unwrap().last_insert_id().unwrap())
        .collect();
    // A Galera node with its auto-increment control on steps every
    // session's ids by the cluster's increment instead.
    let step = galera_node(&pool).await.1.unwrap_or(5);
    assert!(
        ids.windows(2)
            .all(|w| w[1] > w[0] && (w[1] - w[0]) % step == 0),
        "{ids:?}"
    );
    assert!(inserted.batches < 40, "{inserted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_not_claimed_when_not_provable() {
    let url = My::fresh_db().await;
    let pool = My::pool(&url, BatchConfig::default(), 4);
    My::execute(
        &pool,
        "CREATE TABLE expl (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    // The statement names the auto-increment column: ids are the caller's
    // own (or generated for NULL), not consecutive. A single server keeps
    // the bulk command for such rows, and gives no id; a Galera node reads
    // each row's id back from the statement.
    let rows: Vec<(Option<i32>, i32)> = (0..20)
        .map(|i| (if i % 2 == 0 { Some(1000 + i) } else { None }, i))
        .collect();
    let results = pool
        .execute_many("INSERT INTO expl (id, v) VALUES (?, ?)", rows.clone())
        .await
        .unwrap();
    let galera = galera_node(&pool).await.0;
    for ((given, v), r) in rows.iter().zip(&results) {
        let out = r.as_ref().unwrap();
        assert_eq!(out.rows_affected(), 1);
        if galera {
            let id = out.last_insert_id().expect("a Galera node's id");
            let stored: i32 = scalar(&pool, "SELECT v FROM expl WHERE id = ?", (id,)).await;
            assert_eq!(stored, *v, "id {id}");
            assert!(given.is_none_or(|given| u64::try_from(given) == Ok(id)));
        } else {
            assert_eq!(out.last_insert_id(), None);
        }
    }
    assert_eq!(count(&pool, "expl").await, 20);
    // INSERT IGNORE is not coalesced by default (its count may not be
    // exact): it runs alone and reports the server's id.
    let out = pool
        .execute("INSERT IGNORE INTO expl (v) VALUES (?)", (7,))
        .await
        .unwrap();
    assert!(out.last_insert_id().is_some(), "{out:?}");
    assert_eq!(out.rows_affected(), 1);
    // Coalesced when asked: no per-row ids.
    let opted = upsert_pool(&url).await;
    let out = opted
        .execute("INSERT IGNORE INTO expl (v) VALUES (?)", (8,))
        .await
        .unwrap();
    assert_eq!(out.last_insert_id(), None);
    assert_eq!(out.rows_affected(), 1);
}

/// A pool on the database of `pool` that coalesces `INSERT IGNORE`,
/// `REPLACE` and `ON DUPLICATE KEY UPDATE` (an opt-in to inexact counts).
async fn upsert_pool(url: &str) -> Pool {
    Pool::builder(url)
        .max_size(4)
        .coalesce_upserts(true)
        .build()
        .unwrap()
}

/// Lock mode 2 lets statements whose row count is not known in advance
/// (`INSERT ... SELECT`) take ids interleaved with other statements'; a
/// coalesced INSERT is a "simple insert", whose ids InnoDB reserves at
/// once. Callers inserting through a pool of 4 while a plain connection
/// runs `INSERT ... SELECT` into the same table: every caller is given its
/// row's own id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_each_rows_own_under_interleaved_lock_mode() {
    let server = common::MysqlServer::start(&["--innodb-autoinc-lock-mode=2"]);
    let pool = Pool::builder(&server.url()).max_size(4).build().unwrap();
    pool.execute(
        "CREATE TABLE il (id INT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL UNIQUE)",
        (),
    )
    .await
    .unwrap();
    pool.execute("CREATE TABLE src (n INT NOT NULL)", ())
        .await
        .unwrap();
    pool.execute(
        "INSERT INTO src (n) VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9), (10)",
        (),
    )
    .await
    .unwrap();
    let callers = 400;
    let bulk = {
        let url = server.url();
        tokio::spawn(async move {
            let mut conn = mysql_async::Conn::from_url(&url).await.unwrap();
            for round in 0..40 {
                conn.query_drop(format!(
                    "INSERT INTO il (v) SELECT n + {} FROM src",
                    1_000_000 + round * 100
                ))
                .await
                .unwrap();
            }
            conn.disconnect().await.unwrap();
        })
    };
    let calls = (0..callers).map(|i: i32| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let out = pool
                .execute("INSERT INTO il (v) VALUES (?)", (i,))
                .await
                .unwrap();
            assert_eq!(out.rows_affected(), 1);
            (i, out.last_insert_id())
        })
    });
    let mut told = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        told.push(call.await.unwrap());
    }
    bulk.await.unwrap();
    let stored: std::collections::HashMap<i32, u64> = pool
        .query("SELECT v, id FROM il", ())
        .await
        .unwrap()
        .into_iter()
        .map(mysql_async::from_row::<(i32, u64)>)
        .collect();
    for (v, id) in &told {
        assert_eq!(*id, stored.get(v).copied(), "caller {v}");
    }
    let stats = pool.stats();
    assert!(
        stats.rows > stats.statements,
        "rows were coalesced: {stats:?}"
    );
    assert_eq!(count(&pool, "il").await, i64::from(callers) + 400);
    // A statement that ran on its own still reports the server's id.
    let out = pool
        .execute("INSERT INTO il (v) VALUES (-1), (-2)", ())
        .await
        .unwrap();
    assert!(out.last_insert_id().is_some());
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_counts_are_exact_or_say_so() {
    let url = My::fresh_db().await;
    let plain = My::pool(&url, BatchConfig::default(), 4);
    My::execute(
        &plain,
        "CREATE TABLE kv (k INT PRIMARY KEY, v VARCHAR(20) NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    let explain = plain.explain(UPSERT).await.unwrap();
    assert!(!explain.is_coalesced(), "exact by default: {explain}");
    let pool = upsert_pool(&url).await;
    // ODKU over keys repeated inside the batch: rows apply in order, the
    // last value of each key wins, exactly as one by one.
    let data: Vec<(i32, String)> = (0..60).map(|i| (i % 20, format!("v{i}"))).collect();
    let results = pool.execute_many(UPSERT, data.clone()).await.unwrap();
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
        let v: String = scalar(&pool, "SELECT v FROM kv WHERE k = ?", (k,)).await;
        assert_eq!(v, format!("v{}", k + 40));
    }
    // Statements whose rows all count alike are exact; a mix is not.
    let ignore = "INSERT IGNORE INTO kv (k, v) VALUES (?, ?)";
    let cases = [
        ("all updates: 2 each", UPSERT, 0..20, "w", Some(2)),
        (
            "INSERT IGNORE, every row new",
            ignore,
            100..110,
            "new",
            Some(1),
        ),
        (
            "INSERT IGNORE, every row exists",
            ignore,
            100..110,
            "again",
            Some(0),
        ),
        // 8 rows (one statement): 5 exist, 3 are new.
        ("INSERT IGNORE, mixed", ignore, 105..113, "mixed", None),
    ];
    for (case, sql, keys, value, per_row) in cases {
        let rows = keys.map(|k| (k, format!("{value}{k}")));
        for r in pool.execute_many(sql, rows).await.unwrap() {
            let out = r.unwrap();
            assert_eq!(out.is_exact(), per_row.is_some(), "{case}: {out:?}");
            if let Some(n) = per_row {
                assert_eq!(out.rows_affected(), n, "{case}: {out:?}");
            }
        }
    }
    assert_eq!(count(&pool, "kv").await, 33);
    let stored: String = scalar(&pool, "SELECT v FROM kv WHERE k = 100", ()).await;
    assert_eq!(stored, "new100", "INSERT IGNORE must not overwrite");
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
async fn upserts_run_one_by_one_by_default_and_are_exact() {
    let url = common::mysql_fresh_db().await;
    // The default: upserts run one by one.
    let pool = Pool::builder(&url).max_size(2).build().unwrap();
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
async fn non_transactional_tables_are_not_coalesced() {
    let pool = table("CREATE TABLE m (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=MyISAM").await;
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

/// MariaDB's own refusals; those both backends share are in `coalesce.rs`
/// (`bad_input_gets_a_clear_error_for_its_caller_only`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_parameters_run_alone_and_bad_configuration_is_refused() {
    let pool = table("CREATE TABLE p (a INT, b VARCHAR(10))").await;
    let sql = "INSERT INTO p (a, b) VALUES (?, ?)";
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
    // Positional values work as a Vec too.
    let rows: Vec<Vec<Value>> = vec![vec![1.into(), "one".into()]];
    let results = pool.execute_many(sql, rows).await.unwrap();
    assert!(results[0].is_ok(), "{results:?}");
    // Named parameters run on their own.
    let passthrough = pool.stats().passthrough;
    let out = pool
        .execute(
            "INSERT INTO p (a, b) VALUES (:a, :b)",
            params! { "a" => 2, "b" => "named" },
        )
        .await
        .unwrap();
    assert_eq!(out.rows_affected(), 1);
    assert!(pool.stats().passthrough > passthrough, "{:?}", pool.stats());
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
    let db: String = scalar(&pool, "SELECT DATABASE()", ()).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_respect_max_allowed_packet() {
    const PACKET: usize = 65536;
    let server = common::MysqlServer::start(&[&format!("--max-allowed-packet={PACKET}")]);
    let pool = Pool::builder(&server.url()).max_size(2).build().unwrap();
    let packet: u64 = scalar(&pool, "SELECT @@max_allowed_packet", ()).await;
    assert_eq!(packet as usize, PACKET);
    pool.execute(
        "CREATE TABLE blobs (id INT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL, body MEDIUMTEXT)",
        (),
    )
    .await
    .unwrap();
    let sql = "INSERT INTO blobs (k, body) VALUES (?, ?)";

    // Ten 20 KiB rows: 200 KiB in all, 3 rows would already be 60 KiB of
    // values. Sent as one statement the server would refuse the packet;
    // split by bytes, every row is written.
    let body = |k: usize, len: usize| -> String {
        let unit = format!("{k:04}-");
        unit.repeat(len / unit.len() + 1)[..len].to_string()
    };
    let rows: Vec<(i32, String)> = (0..10).map(|k| (k as i32, body(k, 20 << 10))).collect();
    let before = pool.stats();
    let results = pool.execute_many(sql, rows.clone()).await.unwrap();
    for r in &results {
        assert_eq!(r.as_ref().expect("row fits").rows_affected(), 1);
    }
    let after = pool.stats();
    let statements = after.statements - before.statements;
    assert!(
        (4..10).contains(&statements),
        "10 rows of 20 KiB under a 64 KiB packet: {statements} statements ({after:?})"
    );

    // Concurrent callers: one row larger than the packet fails alone,
    // a row just under the limit and the small ones go through.
    let mut tasks = tokio::task::JoinSet::new();
    for k in 100..120 {
        let pool = pool.clone();
        let len = match k {
            105 => PACKET + 100, // cannot fit any statement
            110 => 50 << 10,     // fits alone
            _ => 2 << 10,
        };
        let text = body(k, len);
        tasks.spawn(async move { (k, len, pool.execute(sql, (k as i32, text)).await) });
    }
    while let Some(r) = tasks.join_next().await {
        let (k, len, r) = r.unwrap();
        if k == 105 {
            let e = r.expect_err("over the packet limit");
            assert!(e.is_too_large(), "{e}");
            assert!(!e.is_retryable() && !e.is_outcome_unknown());
            assert!(e.to_string().contains("max_allowed_packet"), "{e}");
        } else {
            assert_eq!(
                r.unwrap_or_else(|e| panic!("row {k} ({len} B): {e}"))
                    .rows_affected(),
                1
            );
        }
    }
    // Everything stored intact.
    let stored: Vec<(i32, u64)> = pool
        .query("SELECT k, LENGTH(body) FROM blobs ORDER BY k", ())
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect();
    assert_eq!(stored.len(), 29);
    assert!(stored.iter().all(|(k, _)| *k != 105));
    assert!(stored.contains(&(110, 50 << 10)));
    for (k, row) in rows.iter().enumerate() {
        let got: String = scalar(&pool, "SELECT body FROM blobs WHERE k = ?", (k as i32,)).await;
        assert!(got == row.1, "row {k} changed");
    }
    let status = pool.status();
    assert_eq!(status.size, status.available, "{status:?}");
    pool.close().await;
}

/// What the server says about a table and a session decides whether an
/// INSERT is coalesced: triggers, stored functions and a non-strict
/// `sql_mode` keep it on its own, and `Pool::explain` names why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_and_session_facts_decide_what_is_coalesced() {
    let url = My::fresh_db().await;
    let pool = My::pool(&url, BatchConfig::default(), 2);
    for ddl in [
        "CREATE TABLE plain (k INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE trig (k INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TRIGGER trig_audit BEFORE INSERT ON trig FOR EACH ROW SET NEW.v = LOWER(NEW.v)",
        "CREATE TABLE upd_trig (k INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TRIGGER on_update BEFORE UPDATE ON upd_trig FOR EACH ROW SET NEW.v = NEW.v",
        "CREATE FUNCTION noisy(x INT) RETURNS INT DETERMINISTIC RETURN x",
    ] {
        My::execute(&pool, ddl, &[]).await.unwrap();
    }
    let explain = pool
        .explain("INSERT INTO plain (k, v) VALUES (?, UPPER(?))")
        .await
        .unwrap();
    assert!(explain.is_coalesced(), "{explain}");
    for (sql, culprit) in [
        ("INSERT INTO trig (k, v) VALUES (?, ?)", "triggers"),
        // Any trigger: MariaDB's run inside the statement however they fire.
        ("INSERT INTO upd_trig (k, v) VALUES (?, ?)", "triggers"),
        ("INSERT INTO plain (k, v) VALUES (noisy(?), ?)", "noisy"),
    ] {
        let explain = pool.explain(sql).await.unwrap();
        assert!(
            !explain.is_coalesced() && explain.to_string().contains(culprit),
            "{sql}: {explain}"
        );
    }
    // A pool whose sessions are not strict: not coalesced, and the single
    // statement's own error reaches the caller.
    let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url).unwrap())
        .init(vec!["SET SESSION sql_mode = ''"])
        .setup(vec!["SET SESSION sql_mode = ''"]);
    let lenient = Pool::from_opts(opts).max_size(2).build().unwrap();
    let sql = "INSERT INTO plain (k, v) VALUES (?, ?)";
    let explain = lenient.explain(sql).await.unwrap();
    assert!(
        !explain.is_coalesced() && explain.to_string().contains("strict"),
        "{explain}"
    );
    let e = lenient
        .execute("INSERT INTO plain (k) VALUES (?)", (Value::NULL,))
        .await
        .unwrap_err();
    assert_eq!(e.as_mysql_error().map(|e| e.code), Some(1048), "{e}");
}

/// A plain connection to `url`.
async fn plain_conn(url: &str) -> mysql_async::Conn {
    mysql_async::Conn::new(mysql_async::Opts::from_url(url).unwrap())
        .await
        .expect("plain connection")
}

/// What a pool reading ids back from `INSERT ... RETURNING` (on a Galera
/// node) builds on, checked with the plain driver on the server at `url`:
/// the id a single-row INSERT reports is the value it stored in the
/// auto-increment column, whether generated (NULL, 0, DEFAULT, omitted) or
/// given (a negative one as the OK packet's unsigned field carries it); 0
/// stored under `NO_AUTO_VALUE_ON_ZERO`, a table without such a column and
/// a statement with a `RETURNING` of its own report none.
pub(crate) async fn single_row_ids_are_the_stored_values(url: &str) {
    let mut conn = plain_conn(url).await;
    for ddl in [
        "CREATE TABLE sv (id BIGINT AUTO_INCREMENT PRIMARY KEY, tag INT NOT NULL UNIQUE) \
         ENGINE=InnoDB",
        "CREATE TABLE sv_u (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, tag INT NOT NULL \
         UNIQUE) ENGINE=InnoDB",
        "CREATE TABLE sv_none (k INT PRIMARY KEY, tag INT NOT NULL UNIQUE) ENGINE=InnoDB",
    ] {
        conn.query_drop(ddl).await.unwrap();
    }
    let cases: Vec<(&str, &str, Vec<Value>, bool)> = vec![
        ("generated", "INSERT INTO sv (tag) VALUES (?)", vec![], true),
        (
            "NULL",
            "INSERT INTO sv (id, tag) VALUES (?, ?)",
            vec![Value::NULL],
            true,
        ),
        (
            "0",
            "INSERT INTO sv (id, tag) VALUES (?, ?)",
            vec![Value::Int(0)],
            true,
        ),
        (
            "DEFAULT",
            "INSERT INTO sv (id, tag) VALUES (DEFAULT, ?)",
            vec![],
            true,
        ),
        (
            "given",
            "INSERT INTO sv (id, tag) VALUES (?, ?)",
            vec![Value::Int(500_000)],
            true,
        ),
        (
            "negative",
            "INSERT INTO sv (id, tag) VALUES (?, ?)",
            vec![Value::Int(-5)],
            true,
        ),
        (
            "no column list",
            "INSERT INTO sv VALUES (?, ?)",
            vec![Value::Int(600_001)],
            true,
        ),
        (
            "above i64",
            "INSERT INTO sv_u (id, tag) VALUES (?, ?)",
            vec![Value::UInt(10_000_000_000_000_000_000)],
            true,
        ),
        (
            "own RETURNING",
            "INSERT INTO sv (tag) VALUES (?) RETURNING id",
            vec![],
            false,
        ),
        (
            "no auto-increment column",
            "INSERT INTO sv_none (k, tag) VALUES (?, ?)",
            vec![Value::Int(1)],
            false,
        ),
    ];
    for (i, (what, sql, mut values, reports)) in cases.into_iter().enumerate() {
        let tag = i as i64 + 1;
        values.push(Value::Int(tag));
        let _: Vec<mysql_async::Row> = conn.exec(sql, values).await.unwrap();
        let reported = conn.last_insert_id();
        let table = sql.split_whitespace().nth(2).unwrap();
        let stored: Option<i128> = if table == "sv_none" {
            None
        } else {
            let v: Value = conn
                .exec_first(format!("SELECT id FROM {table} WHERE tag = ?"), (tag,))
                .await
                .unwrap()
                .unwrap();
            match v {
                Value::Int(i) => Some(i128::from(i)),
                Value::UInt(u) => Some(i128::from(u)),
                other => panic!("{what}: stored {other:?}"),
            }
        };
        let expected = stored
            .filter(|_| reports)
            .map(|s| s as u64)
            .filter(|&id| id != 0);
        assert_eq!(reported, expected, "{what}: stored {stored:?}");
        assert!(!reports || reported.is_some(), "{what}: reports an id");
    }
    // 0 kept as a value: stored, and no id reported.
    conn.query_drop("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')")
        .await
        .unwrap();
    conn.exec_drop("INSERT INTO sv (id, tag) VALUES (?, ?)", (0, 100))
        .await
        .unwrap();
    assert_eq!(conn.last_insert_id(), None);
    let stored: i64 = conn
        .query_first("SELECT id FROM sv WHERE tag = 100")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, 0);
    let _ = conn.disconnect().await;
}

/// What a pool reading ids back from `INSERT ... RETURNING` relies on,
/// checked with the plain driver on the server at `url`: a multi-row
/// `INSERT ... VALUES (...), (...) RETURNING` (a prepared statement, as
/// the pool sends it) returns one row per VALUES tuple, in VALUES order,
/// with generated and given ids interleaved; a statement with a failing row
/// fails whole and leaves nothing; the rows run again without it come back
/// in order again.
pub(crate) async fn multi_row_returning_comes_back_in_values_order(url: &str) {
    let mut conn = plain_conn(url).await;
    conn.query_drop(
        "CREATE TABLE ro (id BIGINT AUTO_INCREMENT PRIMARY KEY, tag INT NOT NULL UNIQUE) \
         ENGINE=InnoDB",
    )
    .await
    .unwrap();
    conn.query_drop("INSERT INTO ro (id, tag) VALUES (900000000, -1)")
        .await
        .unwrap();
    // Every third row gives its id, out of order (a permutation of
    // 100_000.. by a stride coprime with the count); the others leave it to
    // the server.
    let rows = |tags: std::ops::Range<i64>, failing: Option<i64>| -> Vec<(Option<i64>, i64)> {
        tags.map(|tag| {
            if Some(tag) == failing {
                (None, -1)
            } else if tag % 3 == 0 {
                (Some(100_000 + (tag * 37) % 1_000), tag)
            } else {
                (None, tag)
            }
        })
        .collect()
    };
    let run = |rows: Vec<(Option<i64>, i64)>| {
        let tuples = vec!["(?, ?)"; rows.len()].join(", ");
        let sql = format!("INSERT INTO ro (id, tag) VALUES {tuples} RETURNING id, tag");
        let params: Vec<Value> = rows
            .iter()
            .flat_map(|(id, tag)| [id.map_or(Value::NULL, Value::Int), Value::Int(*tag)])
            .collect();
        (sql, params)
    };
    let check = |rows: &[(Option<i64>, i64)], returned: &[(i64, i64)]| {
        assert_eq!(returned.len(), rows.len(), "one returned row per row");
        for (i, ((given, tag), (id, returned_tag))) in rows.iter().zip(returned).enumerate() {
            assert_eq!(returned_tag, tag, "row {i} came back in VALUES order");
            if let Some(given) = given {
                assert_eq!(id, given, "row {i} stored its given id");
            }
        }
    };
    let first = rows(0..500, None);
    let (sql, params) = run(first.clone());
    let returned: Vec<(i64, i64)> = conn.exec(&sql, params).await.unwrap();
    check(&first, &returned);
    // Row 250 takes the tag -1, already in the table.
    let second = rows(1_000..1_500, Some(1_250));
    let (sql, params) = run(second.clone());
    let e = conn
        .exec::<(i64, i64), _, _>(&sql, params)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, mysql_async::Error::Server(s) if s.code == 1062),
        "{e}"
    );
    let count: i64 = conn
        .query_first("SELECT COUNT(*) FROM ro")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count, 501, "the failed statement left nothing");
    let rest: Vec<(Option<i64>, i64)> = second.into_iter().filter(|(_, tag)| *tag != -1).collect();
    let (sql, params) = run(rest.clone());
    let returned: Vec<(i64, i64)> = conn.exec(&sql, params).await.unwrap();
    check(&rest, &returned);
    // Every returned id is its row's, as stored.
    let stored: std::collections::HashMap<i64, i64> = conn
        .query::<(i64, i64), _>("SELECT tag, id FROM ro")
        .await
        .unwrap()
        .into_iter()
        .collect();
    for (id, tag) in &returned {
        assert_eq!(stored.get(tag), Some(id), "tag {tag}");
    }
    let _ = conn.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_row_ids_are_the_values_stored() {
    single_row_ids_are_the_stored_values(&common::mysql_fresh_db().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_rows_follow_values_order() {
    multi_row_returning_comes_back_in_values_order(&common::mysql_fresh_db().await).await;
}
