//! PostgreSQL-only coalescing behaviour: `ON CONFLICT`, the dialect's
//! quoting and casts, its parameter types and limits, and the escape hatch.
//! What both backends share is in `coalesce.rs`. Every test runs as
//! `pg::name` and, behind PgBouncer in transaction mode, as
//! `pgbouncer::name`.

use crate::common;

use crate::common::backend::{TestBackend, pg_and_bouncer};
use batchpool::BatchConfig;
use batchpool::postgres::Pool;

pg_and_bouncer! {
    (flavor = "multi_thread", worker_threads = 2) => [
        duplicate_conflict_keys_in_one_do_update_batch_succeed,
        on_conflict_do_nothing_reports_exact_per_row_counts,
        wrong_types_transaction_control_and_too_many_parameters_are_refused,
        escape_hatch_and_status,
        table_facts_decide_what_is_coalesced,
        returning_old_and_new_are_each_callers_own,
        stored_keys_fail_their_callers_in_the_failed_statement,
    ],
}

/// Takes `n` connections of `pool` (all of them, so that nothing flushes
/// until they go back).
pub(crate) async fn hold_all(pool: &Pool, n: usize) -> Vec<batchpool::postgres::Client> {
    futures_util::future::join_all((0..n).map(|_| pool.get()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// Lets `held` (every connection of `pool`, taken so that nothing flushes)
/// go once `queued` rows wait in the pool's queues, and returns what
/// `burst`, the task of the callers of those rows, gives: the rows go out
/// together, in the order they were queued.
pub(crate) async fn release_when_queued<H, T>(
    pool: &Pool,
    held: H,
    queued: usize,
    burst: tokio::task::JoinHandle<T>,
) -> T {
    while pool.stats().queued < queued as u64 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    drop(held);
    burst.await.expect("the callers' task")
}

/// A pool on a fresh database holding the table `ddl` creates.
async fn table<B: TestBackend<Pool = Pool>>(ddl: &str) -> Pool {
    let pool = pool::<B>().await;
    B::execute(&pool, ddl, &[]).await.unwrap();
    pool
}

async fn pool<B: TestBackend<Pool = Pool>>() -> Pool {
    B::pool(&B::fresh_db().await, BatchConfig::default(), 4)
}

async fn count<B: TestBackend<Pool = Pool>>(pool: &Pool, table: &str) -> i64 {
    common::backend::count::<B>(pool, table).await
}

async fn duplicate_conflict_keys_in_one_do_update_batch_succeed<B: TestBackend<Pool = Pool>>() {
    let pool = table::<B>("CREATE TABLE kv (k int PRIMARY KEY, v text NOT NULL)").await;
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
    assert_eq!(count::<B>(&pool, "kv").await, 20);
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

async fn on_conflict_do_nothing_reports_exact_per_row_counts<B: TestBackend<Pool = Pool>>() {
    let pool = table::<B>("CREATE TABLE seen (k int PRIMARY KEY, note text)").await;
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
    assert_eq!(count::<B>(&pool, "seen").await, 4);
    assert!(pool.stats().batches >= 1);
}

/// PostgreSQL's own refusals; those both backends share are in
/// `coalesce.rs` (`bad_input_gets_a_clear_error_for_its_caller_only`).
async fn wrong_types_transaction_control_and_too_many_parameters_are_refused<
    B: TestBackend<Pool = Pool>,
>() {
    let pool = table::<B>("CREATE TABLE p (a int, b text)").await;
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
    assert_eq!(count::<B>(&pool, "p").await, 1);
}

async fn escape_hatch_and_status<B: TestBackend<Pool = Pool>>() {
    let pool = pool::<B>().await;
    let client = pool.get().await.unwrap();
    // Behind a pooler the raw client is the user's to keep to unnamed
    // statements (its `query` prepares a named one).
    let row = if B::BEHIND_POOLER {
        // (`query_typed`: the oldest tokio-postgres the crate supports has
        // no `query_typed_one`.)
        let mut rows = client.query_typed("SELECT 41 + 1", &[]).await.unwrap();
        assert_eq!(rows.len(), 1);
        rows.remove(0)
    } else {
        client.query_one("SELECT 41 + 1", &[]).await.unwrap()
    };
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

/// What the catalog says about a table decides whether its INSERT is
/// coalesced: one statement per table, `Pool::explain` says why not (the
/// reason naming the culprit), and a coalesced one really runs as one
/// multi-row statement.
async fn table_facts_decide_what_is_coalesced<B: TestBackend<Pool = Pool>>() {
    let pool = pool::<B>().await;
    let setup = "
        CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN RETURN NEW; END $$;
        CREATE FUNCTION noisy(x int) RETURNS int LANGUAGE sql VOLATILE AS $$ SELECT x $$;
        CREATE TABLE plain (k int PRIMARY KEY, v text);
        CREATE TABLE trig (k int PRIMARY KEY, v text);
        CREATE TRIGGER trig_audit BEFORE INSERT ON trig FOR EACH ROW EXECUTE FUNCTION audit();
        CREATE TABLE stmt_trig (k int PRIMARY KEY, v text);
        CREATE TRIGGER per_statement AFTER INSERT ON stmt_trig
            FOR EACH STATEMENT EXECUTE FUNCTION audit();
        CREATE TABLE upd_trig (k int PRIMARY KEY, v text);
        CREATE TRIGGER on_update BEFORE UPDATE ON upd_trig FOR EACH ROW EXECUTE FUNCTION audit();
        CREATE TABLE parted (k int, v text) PARTITION BY RANGE (k);
        CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (100);
        CREATE TABLE parted_trig (k int, v text) PARTITION BY RANGE (k);
        CREATE TABLE parted_trig_low PARTITION OF parted_trig FOR VALUES FROM (0) TO (100);
        CREATE TRIGGER part_audit BEFORE INSERT ON parted_trig_low
            FOR EACH ROW EXECUTE FUNCTION audit();
        CREATE TABLE ruled (k int, v text);
        CREATE TABLE ruled_log (k int);
        CREATE RULE log_it AS ON INSERT TO ruled DO ALSO INSERT INTO ruled_log VALUES (NEW.k);
        CREATE VIEW plain_view AS SELECT k, v FROM plain;
        CREATE TABLE noisy_default (k int PRIMARY KEY, v int DEFAULT noisy(1));
        CREATE TABLE padded (k char(4) PRIMARY KEY, v text);
        CREATE TABLE cased (k text COLLATE \"C\" PRIMARY KEY, v text);
    ";
    let client = pool.get().await.unwrap();
    client.batch_execute(setup).await.unwrap();
    // Generated columns of the server's default kind: virtual from
    // PostgreSQL 18 on, stored (which must be said) before.
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int4", &[])
        .await
        .unwrap()
        .get(0);
    let stored = if version >= 180_000 { "" } else { " STORED" };
    client
        .batch_execute(&format!(
            "CREATE TABLE generated (k int PRIMARY KEY, v text, \
                 v_len int GENERATED ALWAYS AS (length(v)){stored} CHECK (v_len < 8))"
        ))
        .await
        .unwrap();
    drop(client);

    let coalesced = [
        "INSERT INTO plain (k, v) VALUES ($1, $2)",
        "INSERT INTO generated (k, v) VALUES ($1, $2) RETURNING v_len",
        "INSERT INTO generated (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v \
         RETURNING v_len",
        // UPDATE triggers do not fire for a plain INSERT.
        "INSERT INTO upd_trig (k, v) VALUES ($1, $2)",
        "INSERT INTO parted (k, v) VALUES ($1, $2)",
        "INSERT INTO plain (k, v) VALUES ($1, lower($2)) RETURNING k",
        "INSERT INTO plain (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING",
        "INSERT INTO cased (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING",
    ];
    for sql in coalesced {
        let explain = pool.explain(sql).await.unwrap();
        assert!(explain.is_coalesced(), "{sql}: {explain}");
    }
    let declined = [
        ("INSERT INTO trig (k, v) VALUES ($1, $2)", "trig_audit"),
        (
            "INSERT INTO stmt_trig (k, v) VALUES ($1, $2)",
            "per_statement",
        ),
        (
            "INSERT INTO upd_trig (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
            "on_update",
        ),
        (
            "INSERT INTO parted_trig (k, v) VALUES ($1, $2)",
            "part_audit",
        ),
        ("INSERT INTO ruled (k, v) VALUES ($1, $2)", "rules"),
        (
            "INSERT INTO plain_view (k, v) VALUES ($1, $2)",
            "not a table",
        ),
        ("INSERT INTO plain (k, v) VALUES (noisy($1), $2)", "noisy"),
        (
            "INSERT INTO plain (k, v) VALUES ($1, $2) RETURNING noisy(k)",
            "noisy",
        ),
        ("INSERT INTO noisy_default (k) VALUES ($1)", "noisy"),
        (
            "INSERT INTO padded (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING",
            "column k",
        ),
        (
            "INSERT INTO plain (k, v) VALUES ($1::int8, $2) ON CONFLICT (k) DO NOTHING",
            "bare parameters",
        ),
    ];
    for (sql, culprit) in declined {
        let explain = pool.explain(sql).await.unwrap();
        assert!(
            !explain.is_coalesced() && explain.to_string().contains(culprit),
            "{sql}: {explain}"
        );
    }
    // The coalesced one really goes out as one multi-row statement: with
    // every connection held, the callers queue.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(pool.get().await.unwrap());
    }
    let sql = "INSERT INTO plain (k, v) VALUES ($1, $2)";
    let calls: Vec<_> = (0..10)
        .map(|k| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.execute(sql, &[&k, &"x"]).await })
        })
        .collect();
    // Certain to happen (no connection is free); bounded only so a bug
    // fails instead of hanging.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while pool.stats().queued < 10 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(pool.stats().queued, 10, "every caller queued");
    drop(held);
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().rows_affected(), 1);
    }
    assert!(pool.stats().rows_per_batch() > 1.0, "{:?}", pool.stats());
    assert_eq!(count::<B>(&pool, "plain").await, 10);
}

/// `RETURNING old.v, new.v` and `RETURNING WITH (OLD AS o, NEW AS n)`
/// (PostgreSQL 18: the row before and after an `ON CONFLICT DO UPDATE`, old
/// NULL for a row inserted): each row of a coalesced statement gets its own
/// row's old and new values, as its own statement does on the plain driver.
/// Before 18 the server refuses the text: the call fails with the error each
/// row's own statement gets.
async fn returning_old_and_new_are_each_callers_own<B: TestBackend<Pool = Pool>>() {
    let pool = pool::<B>().await;
    let client = pool.get().await.unwrap();
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int4", &[])
        .await
        .unwrap()
        .get(0);
    // Keys 0..20 exist, 20..40 are new, in an order that mixes them.
    let rows: Vec<(i32, String)> = (0..40)
        .map(|i| {
            let k = (i * 7) % 40;
            (k, format!("new{k}"))
        })
        .collect();
    let params: Vec<[&Sql; 2]> = rows.iter().map(|(k, v)| [k as &Sql, v as &Sql]).collect();
    type Returned = Result<(Option<String>, Option<String>), String>;
    for (i, (returning, refused)) in [
        ("RETURNING old.v, new.v", "42P01"),
        ("RETURNING WITH (OLD AS o, NEW AS n) o.v, n.v", "42601"),
    ]
    .into_iter()
    .enumerate()
    {
        for t in ["kv", "twin"] {
            client
                .batch_execute(&format!(
                    "CREATE TABLE {t}{i} (k int PRIMARY KEY, v text NOT NULL); \
                     INSERT INTO {t}{i} SELECT k, 'old' || k FROM generate_series(0, 19) k"
                ))
                .await
                .unwrap();
        }
        let sql = |t: &str| {
            format!(
                "INSERT INTO {t}{i} (k, v) VALUES ($1, $2) \
                 ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v {returning}"
            )
        };
        let mut alone: Vec<Returned> = Vec::new();
        for (k, v) in &rows {
            alone.push(match client.query_one(&sql("twin"), &[k, v]).await {
                Ok(row) => Ok((row.get(0), row.get(1))),
                Err(e) => Err(e.code().map_or("no code".into(), |c| c.code().to_string())),
            });
        }
        let before = pool.stats();
        let coalesced = pool.execute_many(&sql("kv"), &params).await;
        if version < 180_000 {
            // The text is refused when it is learned: the whole call fails
            // with the server's error, as each row's own statement did.
            let e = coalesced.expect_err("a text the server refuses");
            assert_eq!(e.code(), Some(refused), "{returning}: {e}");
            assert!(
                alone.iter().all(|r| *r == Err(refused.into())),
                "{returning}: {alone:?}"
            );
            continue;
        }
        let coalesced: Vec<Returned> = coalesced
            .expect("the batch runs")
            .into_iter()
            .map(|r| match r {
                Ok(out) => {
                    let row = out.returned().expect("a returned row");
                    Ok((row.get(0), row.get(1)))
                }
                Err(e) => Err(e.code().unwrap_or("no code").to_string()),
            })
            .collect();
        assert_eq!(coalesced, alone, "{returning}");
        assert_eq!(
            alone[1],
            Ok((Some("old7".into()), Some("new7".into()))),
            "{returning}: key 7 existed"
        );
        assert_eq!(
            alone[3],
            Ok((None, Some("new21".into()))),
            "{returning}: key 21 is new"
        );
        let after = pool.stats();
        assert!(
            after.rows - before.rows == 40 && after.statements - before.statements < 40,
            "{returning}: not coalesced: before {before:?}, after {after:?}"
        );
    }
}

/// Named mode heals a connection whose prepared statements vanished from
/// the server (`26000`, as behind a pooler that switched server
/// connections, or after `DEALLOCATE ALL`): the cached statement is
/// forgotten, prepared again and run once (nothing ran the first time),
/// for a statement on its own, a coalesced batch and `execute_many`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_mode_heals_statements_gone_from_the_server() {
    let url = common::pg_fresh_db().await;
    let pool = Pool::builder(&url)
        .statements(batchpool::postgres::Statements::Named)
        .max_size(1)
        .build()
        .unwrap();
    pool.execute("CREATE TABLE h (k int PRIMARY KEY, v text)", &[])
        .await
        .unwrap();
    let insert = "INSERT INTO h (k, v) VALUES ($1, $2)";
    let update = "UPDATE h SET v = $2 WHERE k = $1";
    // 50 rows: one multi-row INSERT; 80 rows: one COPY (default
    // threshold), twice in a row (a stale INSERT re-learns the shape, which
    // prepares its COPY afresh too).
    let rows = |from: i32, n: i32| -> Vec<(i32, String)> {
        (from..from + n).map(|k| (k, format!("v{k}"))).collect()
    };
    for (round, n) in [50, 80, 80, 50].into_iter().enumerate() {
        let round = round as i32;
        let data = rows(round * 100, n);
        let params: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 2]> =
            data.iter().map(|(k, v)| [k as _, v as _]).collect();
        for r in pool.execute_many(insert, &params).await.unwrap() {
            assert_eq!(r.expect("batched insert").rows_affected(), 1);
        }
        let k = round * 100;
        let out = pool.execute(update, &[&k, &"updated"]).await.unwrap();
        assert_eq!(out.rows_affected(), 1);
        // Every statement the one connection prepared is dropped on the
        // server; the pool still has them cached.
        let client = pool.get().await.unwrap();
        client.batch_execute("DEALLOCATE ALL").await.unwrap();
        drop(client);
    }
    let n: i64 = pool
        .query_one("SELECT count(*) FROM h", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 260);
    assert!(pool.stats().bulk_statements >= 2, "COPY was used");
    let updated: i64 = pool
        .query_one("SELECT count(*) FROM h WHERE v = 'updated'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(updated, 4);
}

/// A connection from `Pool::get` comes back with its session reset: a
/// `search_path` pointing elsewhere, a temporary table shadowing the real
/// one, a changed role setting and a transaction left open must not
/// redirect, hide or swallow later coalesced inserts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lent_connection_comes_back_with_a_clean_session() {
    let url = common::pg_fresh_db().await;
    let pool = Pool::builder(&url).max_size(1).build().unwrap();
    pool.execute("CREATE TABLE t (v int)", &[]).await.unwrap();
    pool.execute("CREATE SCHEMA other", &[]).await.unwrap();
    pool.execute("CREATE TABLE other.t (v int)", &[])
        .await
        .unwrap();
    for (round, session) in [
        "SET search_path = other",
        "CREATE TEMP TABLE t (v int)",
        "SET search_path = other; BEGIN; INSERT INTO other.t VALUES (99)",
        "BEGIN; INSERT INTO t VALUES (99); SAVEPOINT s",
    ]
    .into_iter()
    .enumerate()
    {
        let client = pool.get().await.unwrap();
        client.batch_execute(session).await.unwrap();
        drop(client);
        // A text new to the pool each round, from many callers at once.
        let sql = format!("INSERT INTO t (v) VALUES ($1) /* round {round} */");
        let inserts = (0..20i32).map(|v| {
            let (pool, sql) = (pool.clone(), sql.clone());
            async move { pool.execute(&sql, &[&v]).await.map(drop) }
        });
        for r in futures_util::future::join_all(inserts).await {
            r.unwrap();
        }
        let direct = common::backend::count::<common::backend::Pg>(&pool, "public.t").await;
        assert_eq!(direct, 20 * (round as i64 + 1), "after: {session}");
    }
    assert_eq!(
        common::backend::count::<common::backend::Pg>(&pool, "other.t").await,
        0
    );
}

type Sql = dyn tokio_postgres::types::ToSql + Sync;

/// `execute_many` of `rows` through a pool whose COPY threshold is `copy`:
/// each row's outcome as (rows affected, exact) or its SQLSTATE, and the
/// pool's `bulk_statements` afterwards.
async fn many_with_copy(
    url: &str,
    copy: Option<usize>,
    sql: &str,
    rows: &[Vec<Box<Sql>>],
) -> (Vec<Result<(u64, bool), String>>, u64) {
    many_with(url, copy, 1000, sql, rows).await
}

/// [`many_with_copy`] with at most `max_rows` rows per statement.
async fn many_with(
    url: &str,
    copy: Option<usize>,
    max_rows: usize,
    sql: &str,
    rows: &[Vec<Box<Sql>>],
) -> (Vec<Result<(u64, bool), String>>, u64) {
    let pool = Pool::builder(url)
        .max_size(2)
        .copy_threshold(copy)
        .batching(batchpool::BatchConfig::default().max_rows(max_rows))
        .build()
        .unwrap();
    let refs: Vec<Vec<&Sql>> = rows
        .iter()
        .map(|r| r.iter().map(|v| &**v).collect())
        .collect();
    let out = pool.execute_many(sql, &refs).await.expect("the batch runs");
    let outcomes = out
        .into_iter()
        .map(|r| match r {
            Ok(o) => Ok((o.rows_affected(), o.is_exact())),
            Err(e) => Err(e.code().unwrap_or("no code").to_string()),
        })
        .collect();
    let bulk = pool.stats().bulk_statements;
    pool.close().await;
    (outcomes, bulk)
}

/// What each row's own single-row INSERT gives on the plain driver, into a
/// twin table.
async fn one_by_one(
    url: &str,
    sql: &str,
    rows: &[Vec<Box<Sql>>],
) -> Vec<Result<(u64, bool), String>> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut out = Vec::new();
    for row in rows {
        let refs: Vec<&Sql> = row.iter().map(|v| &**v).collect();
        out.push(match client.execute(sql, &refs).await {
            Ok(n) => Ok((n, true)),
            Err(e) => Err(e.code().map_or("no code".into(), |c| c.code().to_string())),
        });
    }
    out
}

fn copy_rows(n: i32, bad: &[(i32, &str)]) -> Vec<Vec<Box<Sql>>> {
    (0..n)
        .map(|i| {
            let fault = bad.iter().find(|(at, _)| *at == i).map(|(_, f)| *f);
            let k: Box<Sql> = Box::new(if fault == Some("dup") { 10 } else { i });
            let v: Box<Sql> = match fault {
                Some("null") => Box::new(None::<String>),
                Some("long") => Box::new(format!("a long value {i}")),
                _ => Box::new(format!("v{i}")),
            };
            let amount: Box<Sql> = Box::new(if fault == Some("range") {
                1e9f64
            } else {
                f64::from(i) / 4.0
            });
            vec![k, v, amount]
        })
        .collect()
}

/// Large `execute_many` statements of a plain INSERT go out as binary COPY
/// (counted in `bulk_statements`), and every row still gets exactly what its
/// own single-row INSERT gets: a count of 1, or its own error (a duplicate
/// key, a NULL into NOT NULL, an out-of-range value, a row that fits no
/// partition, a generated column's CHECK), the rows around it unharmed; the
/// same with COPY off. The generated columns are of the server's default
/// kind: virtual from PostgreSQL 18 on (computed when read, the CHECK
/// evaluated on the expression), stored before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_path_gives_every_row_its_single_insert_outcome() {
    let url = common::pg_fresh_db().await;
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let version: i32 = admin
        .query_one("SELECT current_setting('server_version_num')::int4", &[])
        .await
        .unwrap()
        .get(0);
    // Before 18 a generated column must say STORED; from 18 on, without
    // it, it is virtual.
    let (generated_kind, stored) = if version >= 180_000 {
        ("v", "")
    } else {
        ("s", " STORED")
    };
    let bad = [
        (0, "null"),
        (37, "dup"),
        (150, "null"),
        (151, "range"),
        (298, "dup"),
        (299, "range"),
    ];
    let mut seen = Vec::new();
    for (i, table_kind) in ["plain", "partitioned", "generated"]
        .into_iter()
        .enumerate()
    {
        let mut bad = bad.to_vec();
        if table_kind == "generated" {
            bad.extend([(5, "long"), (200, "long")]);
        }
        let rows = copy_rows(300, &bad);
        for table in ["a", "b", "c"] {
            let ddl = match table_kind {
                "partitioned" => format!(
                    "CREATE TABLE {table}{i} (id bigserial, k int NOT NULL, v text NOT NULL, \
                     amount double precision CHECK (amount < 1e6), UNIQUE (k)) \
                     PARTITION BY RANGE (k); \
                     CREATE TABLE {table}{i}_lo PARTITION OF {table}{i} FOR VALUES FROM (0) TO (100); \
                     CREATE TABLE {table}{i}_hi PARTITION OF {table}{i} FOR VALUES FROM (101) TO (1000)"
                ),
                "generated" => format!(
                    "CREATE TABLE {table}{i} (id bigserial PRIMARY KEY, k int UNIQUE, \
                     v text NOT NULL, amount double precision CHECK (amount < 1e6), \
                     v_len int GENERATED ALWAYS AS (length(v)){stored} CHECK (v_len < 8), \
                     twice double precision GENERATED ALWAYS AS (amount * 2){stored})"
                ),
                _ => format!(
                    "CREATE TABLE {table}{i} (id bigserial PRIMARY KEY, k int UNIQUE, \
                     v text NOT NULL, amount double precision CHECK (amount < 1e6))"
                ),
            };
            admin.batch_execute(&ddl).await.unwrap();
        }
        if table_kind == "generated" {
            let kinds: Vec<String> = admin
                .query(
                    "SELECT attgenerated::text FROM pg_attribute \
                     WHERE attrelid = 'a2'::regclass AND attgenerated <> ''",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert_eq!(kinds, [generated_kind; 2], "server_version_num {version}");
        }
        let partitioned = table_kind == "partitioned";
        let sql = |t: &str| format!("INSERT INTO {t}{i} (k, v, amount) VALUES ($1, $2, $3)");
        let plain = one_by_one(&url, &sql("a"), &rows).await;
        let (with_copy, bulk) = many_with_copy(&url, Some(64), &sql("b"), &rows).await;
        let (without, no_bulk) = many_with_copy(&url, None, &sql("c"), &rows).await;
        assert!(bulk > 0, "{table_kind}: no statement went out as COPY");
        assert_eq!(no_bulk, 0, "COPY was used while turned off");
        assert_eq!(
            with_copy, plain,
            "{table_kind}: COPY path differs from single INSERTs"
        );
        assert_eq!(
            without, plain,
            "{table_kind}: rewrite differs from single INSERTs"
        );
        let failed = plain.iter().filter(|r| r.is_err()).count();
        // The bad rows, and with partitions the row with k = 100.
        assert_eq!(failed, bad.len() + usize::from(partitioned));
        if table_kind == "generated" {
            assert_eq!(plain[200], Err("23514".to_string()), "the generated CHECK");
            let twice: f64 = admin
                .query_one("SELECT twice FROM b2 WHERE k = 3", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(twice, 1.5, "a generated column of a row written by COPY");
        }
        for table in ["a", "b", "c"] {
            let rows: Vec<(i32, String)> = admin
                .query(&format!("SELECT k, v FROM {table}{i} ORDER BY k"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            seen.push(rows);
        }
        assert_eq!(seen[seen.len() - 3], seen[seen.len() - 2]);
        assert_eq!(seen[seen.len() - 3], seen[seen.len() - 1]);
    }
}

/// COPY is used only where it does what the INSERT does: not for
/// `RETURNING`, `ON CONFLICT`, a value that is not a bare parameter, a
/// table with row-level security, or a `GENERATED ALWAYS` identity written
/// with `OVERRIDING`-free INSERTs; and never through a pooler (unnamed
/// statements).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_is_used_only_where_insert_and_copy_agree() {
    let url = common::pg_fresh_db().await;
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    admin
        .batch_execute(
            "CREATE TABLE p (k int PRIMARY KEY, v text); \
             CREATE TABLE r (k int PRIMARY KEY, v text); \
             ALTER TABLE r ENABLE ROW LEVEL SECURITY; \
             CREATE POLICY anyone ON r USING (true) WITH CHECK (true); \
             CREATE TABLE dflt (k int PRIMARY KEY, v text, made int DEFAULT 7)",
        )
        .await
        .unwrap();
    let rows = |base: i32| -> Vec<Vec<Box<Sql>>> {
        (base..base + 100)
            .map(|i| {
                vec![
                    Box::new(i) as Box<Sql>,
                    Box::new(format!("v{i}")) as Box<Sql>,
                ]
            })
            .collect()
    };
    for (sql, base, copies) in [
        ("INSERT INTO p (k, v) VALUES ($1, $2)", 0, true),
        ("INSERT INTO p (v, k) VALUES ($2, $1)", 100, true),
        ("INSERT INTO dflt (k, v) VALUES ($1, $2)", 0, true),
        (
            "INSERT INTO p (k, v) VALUES ($1, $2) RETURNING k",
            200,
            false,
        ),
        (
            "INSERT INTO p (k, v) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            300,
            false,
        ),
        ("INSERT INTO p (k, v) VALUES ($1, upper($2))", 400, false),
        ("INSERT INTO p VALUES ($1, $2)", 500, false),
        ("INSERT INTO r (k, v) VALUES ($1, $2)", 0, false),
    ] {
        let (out, bulk) = many_with_copy(&url, Some(2), sql, &rows(base)).await;
        assert!(out.iter().all(|r| *r == Ok((1, true))), "{sql}: {out:?}");
        assert_eq!(bulk > 0, copies, "{sql}: bulk_statements = {bulk}");
    }
    let made: i64 = admin
        .query_one("SELECT count(*) FROM dflt WHERE made = 7", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(made, 100, "COPY fills omitted columns with their defaults");
    // Behind a pooler (unnamed statements) the COPY is prepared and closed
    // inside its own transaction.
    let bouncer = common::bouncer_url_for(&url);
    let (out, bulk) = many_with_copy(
        &bouncer,
        Some(2),
        "INSERT INTO p (k, v) VALUES ($1, $2)",
        &rows(1000),
    )
    .await;
    assert!(out.iter().all(|r| *r == Ok((1, true))), "{out:?}");
    assert!(bulk > 0, "no COPY behind the pooler");
}

/// `execute_many` keeps two statements on the wire, the pair in one
/// transaction: when the first fails, the second (already sent) is rolled
/// back and runs again after the first's rows are isolated, so the rows take
/// effect in their order. Here row 20 (second statement) repeats the key of
/// row 10 (first statement, which fails on row 0): run one by one, row 10
/// is written and row 20 fails; a second statement that committed on its
/// own would have taken the key first. The same with COPY, and through a
/// pooler (unnamed statements).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_statements_of_execute_many_keep_the_rows_order() {
    let url = common::pg_fresh_db().await;
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let bouncer = common::bouncer_url_for(&url);
    // (row, fault): 0 NULL into NOT NULL; 20 and 70 reuse k = 10; 45 out of
    // range (a later pair whose first statement is fine and second fails).
    let rows = copy_rows(80, &[(0, "null"), (20, "dup"), (45, "range"), (70, "dup")]);
    let ddl = |t: &str| {
        format!(
            "CREATE TABLE {t} (id bigserial PRIMARY KEY, k int UNIQUE, v text NOT NULL, \
             amount double precision CHECK (amount < 1e6))"
        )
    };
    let sql = |t: &str| format!("INSERT INTO {t} (k, v, amount) VALUES ($1, $2, $3)");
    admin.batch_execute(&ddl("plain")).await.unwrap();
    let plain = one_by_one(&url, &sql("plain"), &rows).await;
    assert_eq!(plain.iter().filter(|r| r.is_err()).count(), 4);
    assert!(plain[10].is_ok() && plain[20].is_err(), "{plain:?}");
    let keys = |t: String| {
        let admin = &admin;
        async move {
            admin
                .query(&format!("SELECT k, v FROM {t} ORDER BY k"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get::<_, i32>(0), r.get::<_, String>(1)))
                .collect::<Vec<_>>()
        }
    };
    let expected = keys("plain".into()).await;
    for (i, (url, copy)) in [(&url, None), (&url, Some(2)), (&bouncer, None)]
        .into_iter()
        .enumerate()
    {
        let t = format!("piped{i}");
        admin.batch_execute(&ddl(&t)).await.unwrap();
        let (out, _) = many_with(url, copy, 8, &sql(&t), &rows).await;
        assert_eq!(out, plain, "copy={copy:?} via {url}: outcomes differ");
        assert_eq!(
            keys(t).await,
            expected,
            "copy={copy:?} via {url}: rows differ"
        );
    }
}

/// A COPY has no text per row count: an `execute_many` of 300 rows is one
/// COPY, where multi-row INSERTs are cut to the allowed sizes (256 + 32 +
/// 12, three statements); the same rows land either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_statements_take_any_row_count() {
    let url = common::pg_fresh_db().await;
    for (copy, statements, bulk) in [(Some(64), 1, 1), (None, 3, 0)] {
        let pool = Pool::builder(&url)
            .max_size(1)
            .copy_threshold(copy)
            .build()
            .unwrap();
        pool.execute("DROP TABLE IF EXISTS sizes", &[])
            .await
            .unwrap();
        pool.execute("CREATE TABLE sizes (k int PRIMARY KEY, v text)", &[])
            .await
            .unwrap();
        let data: Vec<(i32, String)> = (0..300).map(|k| (k, format!("v{k}"))).collect();
        let params: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 2]> =
            data.iter().map(|(k, v)| [k as _, v as _]).collect();
        for r in pool
            .execute_many("INSERT INTO sizes (k, v) VALUES ($1, $2)", &params)
            .await
            .unwrap()
        {
            assert_eq!(r.unwrap().rows_affected(), 1);
        }
        let stats = pool.stats();
        assert_eq!(
            (stats.statements, stats.bulk_statements),
            (statements, bulk),
            "copy threshold {copy:?}: {stats:?}"
        );
        let n: i64 = pool
            .query_one("SELECT count(*) FROM sizes", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 300);
        pool.close().await;
    }
}

/// COPY's rows commit when its Sync is processed, after the server already
/// sent COPY's CommandComplete: a deferred constraint that fails at that
/// commit must fail the rows, not leave them acknowledged and rolled back.
/// Every caller gets what its single-row INSERT gets (the duplicate its own
/// 23505, the others a count of 1), with COPY and without, and exactly the
/// acknowledged rows are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_rows_fail_with_a_deferred_constraint_checked_at_commit() {
    let url = common::pg_fresh_db().await;
    for (t, copy) in [("deferred_copy", Some(2)), ("deferred_insert", None)] {
        let pool = Pool::builder(&url)
            .max_size(1)
            .copy_threshold(copy)
            .build()
            .unwrap();
        pool.execute(
            &format!(
                "CREATE TABLE {t} (k int UNIQUE DEFERRABLE INITIALLY DEFERRED, v text NOT NULL)"
            ),
            &[],
        )
        .await
        .unwrap();
        pool.execute(&format!("INSERT INTO {t} (k, v) VALUES (5, 'old')"), &[])
            .await
            .unwrap();
        let data: Vec<(i32, String)> = (0..100).map(|k| (k, format!("v{k}"))).collect();
        let params: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 2]> =
            data.iter().map(|(k, v)| [k as _, v as _]).collect();
        let sql = format!("INSERT INTO {t} (k, v) VALUES ($1, $2)");
        let out = pool.execute_many(&sql, &params).await.unwrap();
        for (k, r) in out.iter().enumerate() {
            match r {
                Ok(o) => {
                    assert_ne!(k, 5, "{t}: the duplicate was acknowledged");
                    assert_eq!(o.rows_affected(), 1);
                }
                Err(e) => {
                    assert_eq!(k, 5, "{t}: row {k} failed: {e}");
                    assert_eq!(e.code(), Some("23505"), "{t}: {e}");
                }
            }
        }
        let n: i64 = pool
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 100, "{t}: 99 acknowledged rows and the old one");
        if copy.is_some() {
            assert!(pool.stats().bulk_statements > 0, "{t}: COPY was not used");
        }
        pool.close().await;
    }
}

/// Callers whose INSERT meets a key already in the table get the unique
/// violation from the multi-row statement that met it, without a statement
/// of their own (the row in conflict was there before: no other row of the
/// statement could have written its key), and the rest go once more. Where
/// another row of the statement may have written the key (the same bytes,
/// text equal once `varchar(n)` drops trailing spaces, `-0.0` and `0.0`)
/// the row runs on its own, and the row that wrote the key first but then
/// failed at the end of the statement (a missing foreign key) leaves it
/// free: that caller's own statement succeeds.
async fn stored_keys_fail_their_callers_in_the_failed_statement<B: TestBackend<Pool = Pool>>() {
    let pool = pool::<B>().await;
    for ddl in [
        "CREATE TABLE parent (id bigint PRIMARY KEY)",
        "INSERT INTO parent SELECT generate_series(1, 10)",
        "CREATE TABLE c (k bigint PRIMARY KEY, s varchar(8) UNIQUE, f float8 UNIQUE, \
             parent bigint NOT NULL REFERENCES parent (id))",
        "INSERT INTO c SELECT i, 's' || i, i, 1 FROM generate_series(1, 20) AS i",
    ] {
        B::execute(&pool, ddl, &[]).await.unwrap();
    }
    let sql = "INSERT INTO c (k, s, f, parent) VALUES ($1, $2, $3, $4)";
    pool.execute(sql, &[&100i64, &"warm", &100.0f64, &1i64])
        .await
        .unwrap();

    /// What a caller must be told: Ok, or the SQLSTATE and constraint.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Want {
        Ok,
        Fails(&'static str, &'static str),
    }
    let pkey = Want::Fails("23505", "c_pkey");
    let fk = Want::Fails("23503", "c_parent_fkey");
    let mut calls: Vec<(i64, String, f64, i64, Want)> = Vec::new();
    let mut next = 1_000i64;
    let mut fresh = |calls: &mut Vec<_>| {
        next += 1;
        calls.push((next, format!("f{next}"), next as f64, 1, Want::Ok));
    };
    // Fewer than a COPY's rows (`PoolBuilder::copy_threshold`): multi-row
    // INSERTs.
    for i in 1..=8i64 {
        fresh(&mut calls);
        // A key in the table.
        calls.push((i, format!("x{i}"), 500.0 + i as f64, 1, pkey));
    }
    for i in 0..3i64 {
        fresh(&mut calls);
        // A unique text in the table (each its own: callers sharing one
        // could have written it for each other, and run on their own).
        calls.push((
            600 + i,
            format!("s{}", 3 + i),
            600.0 + i as f64,
            2,
            Want::Fails("23505", "c_s_key"),
        ));
    }
    // Pairs in call order: the first writes the key, then fails on its
    // missing parent; the second's own statement then succeeds.
    type Row<'a> = (i64, &'a str, f64);
    let pairs: [(Row, Row); 3] = [
        ((700, "p1", 700.0), (700, "p2", 701.0)),
        ((702, "abcdefgh ", 702.0), (703, "abcdefgh", 703.0)),
        ((704, "p5", -0.0), (705, "p6", 0.0)),
    ];
    for ((ka, sa, fa), (kb, sb, fb)) in pairs {
        fresh(&mut calls);
        calls.push((ka, sa.to_owned(), fa, 999, fk));
        calls.push((kb, sb.to_owned(), fb, 1, Want::Ok));
    }
    for _ in 0..20 {
        fresh(&mut calls);
    }
    assert!(calls.len() < 64);

    // Queued behind held connections, then let go at once.
    let held = hold_all(&pool, 4).await;
    let before = pool.stats();
    let burst = {
        let pool = pool.clone();
        let calls = calls.clone();
        tokio::spawn(async move {
            futures_util::future::join_all(calls.iter().map(|(k, s, f, parent, _)| {
                let pool = &pool;
                async move { pool.execute(sql, &[k, s, f, parent]).await }
            }))
            .await
        })
    };
    let got = release_when_queued(&pool, held, calls.len(), burst).await;
    let after = pool.stats();

    let mut wrong = Vec::new();
    for ((k, s, f, parent, want), got) in calls.iter().zip(&got) {
        let told = match got {
            Ok(out) if out.rows_affected() == 1 => Want::Ok,
            Ok(out) => {
                wrong.push(format!("k {k}: Ok with {} rows", out.rows_affected()));
                continue;
            }
            Err(e) => match e.as_db_error() {
                Some(db) => match (db.code().code(), db.constraint()) {
                    ("23505", Some("c_pkey")) => pkey,
                    ("23505", Some("c_s_key")) => Want::Fails("23505", "c_s_key"),
                    ("23503", Some("c_parent_fkey")) => fk,
                    _ => {
                        wrong.push(format!("k {k}: {e}"));
                        continue;
                    }
                },
                None => {
                    wrong.push(format!("k {k}: {e}"));
                    continue;
                }
            },
        };
        if told != *want {
            wrong.push(format!(
                "k {k}, s {s:?}, f {f}, parent {parent}: told {told:?}, its own statement: {want:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let oks = calls.iter().filter(|c| c.4 == Want::Ok).count() as i64;
    assert_eq!(count::<B>(&pool, "c").await, 21 + oks);
    let stored: i64 = pool
        .query_one(
            "SELECT count(*) FROM c WHERE (k = 700 AND s = 'p2') OR (k = 703 AND s = 'abcdefgh') \
             OR (k = 705 AND f = 0)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 3, "each pair's second row");

    assert_eq!(after.rows_failed - before.rows_failed, 14);
    let split = after.split_statements - before.split_statements;
    // The 11 failures proven at once cost one statement each (the rest of
    // their statement, as one statement); the pairs cost what finding
    // their rows does. Measured on every route: 23 (34 with a statement of
    // each failing row's own); the bound leaves room for a burst taken in
    // more flushes.
    assert!(
        (11..=28).contains(&split),
        "{split} statements added for 14 failing rows"
    );
}
