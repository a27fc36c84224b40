//! batchpool behind pgpool-II and behind PgBouncer in statement mode, with
//! connection strings that name no parameter of batchpool's: the pool finds
//! out what is in between (see `Pooler` in the guide's "Behind a pooler").
//!
//! The shared suites run through these poolers too (`pgbouncer_statement::`,
//! `pgpool::`, `pgpool_raw::` in `coalesce.rs`, `transactions.rs`, …). This
//! file holds what is particular to each: the fixtures are what they claim
//! to be, and show the failures the pool works around (the plain driver's
//! COPY stalls behind pgpool-II; its autocommit writes behind pgpool-II in
//! raw mode stay uncommitted; PgBouncer in statement mode closes a
//! connection that opens a transaction block); 300 concurrent INSERTs
//! commit through each; what needs a transaction block is refused behind
//! PgBouncer in statement mode, before anything is sent; pgpool-II's idea
//! of a session that ended a failed transaction is checked.
//!
//! Waits on the poolers are bounded by `tokio::time::timeout` as a guard
//! against a hang (the failure this file is about), not as a speed goal:
//! each bound is minutes for work of a second.

use crate::common;

use std::time::Duration;

use batchpool::postgres::{Pool, Pooler};
use common::PgpoolMode;
use tokio_postgres::SimpleQueryMessage;

/// How long a step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(120);

/// Concurrent single-row INSERTs, as in the report this file answers.
const CALLERS: i32 = 300;

/// A direct connection to `url`'s database on the server itself.
async fn direct(url: &str) -> tokio_postgres::Client {
    let url = common::direct_url_for(url);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("direct connection: {e}"));
    tokio::spawn(conn);
    client
}

/// A plain tokio-postgres connection to `url` (through the pooler).
async fn plain(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("plain connection through the pooler: {e}"));
    tokio::spawn(conn);
    client
}

/// The first column of the first row of a simple query.
async fn first(client: &tokio_postgres::Client, sql: &str) -> Option<String> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
}

/// Rows in `t`, read on the server directly: committed rows only.
async fn committed(direct: &tokio_postgres::Client, t: &str) -> i64 {
    direct
        .query_one(&format!("SELECT count(*) FROM {t}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// Sessions on `direct`'s database left inside a transaction.
async fn open_transactions(direct: &tokio_postgres::Client) -> i64 {
    direct
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND state LIKE 'idle in transaction%'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// `url`, a fresh database through a pooler, with table `t (id int PRIMARY
/// KEY, v text)` made in it, and a direct connection to it.
async fn fresh(url: String) -> (String, tokio_postgres::Client) {
    let direct = direct(&url).await;
    direct
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL)")
        .await
        .unwrap();
    (url, direct)
}

/// `CALLERS` concurrent single-row INSERTs: each caller's own outcome.
async fn storm(pool: &Pool, from: i32) -> Vec<Result<u64, batchpool::Error>> {
    let calls = (from..from + CALLERS).map(|id| {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.execute("INSERT INTO t (id, v) VALUES ($1, $2)", &[&id, &"x"])
                .await
                .map(|o| o.rows_affected())
        })
    });
    let joined = tokio::time::timeout(HANG, futures_util::future::join_all(calls))
        .await
        .expect("300 concurrent INSERTs did not finish: a hang");
    joined.into_iter().map(|r| r.unwrap()).collect()
}

/// The fixtures: pgpool-II in the clustering mode each route says, with
/// load balancing in streaming replication mode; PgBouncer in statement
/// mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poolers_are_what_the_routes_say() {
    // `SHOW pool_status` gives the modes as numbers: pgpool-II's
    // streaming_replication is 1, raw is 5; load balancing on is 1.
    for (mode, clustering) in [
        (PgpoolMode::StreamingReplication, "1"),
        (PgpoolMode::Raw, "5"),
    ] {
        let pgpool = plain(&common::pgpool_url(mode)).await;
        let status = pgpool.simple_query("SHOW pool_status").await.unwrap();
        let setting = |name: &str| {
            status.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(r) if r.get(0) == Some(name) => r.get(1).map(str::to_owned),
                _ => None,
            })
        };
        assert_eq!(
            setting("backend_clustering_mode").as_deref(),
            Some(clustering)
        );
        if mode == PgpoolMode::StreamingReplication {
            assert_eq!(setting("load_balance_mode").as_deref(), Some("1"));
        }
    }
    let admin = common::bouncer_statement_admin_url();
    let console = plain(&admin).await;
    let config = console.simple_query("SHOW CONFIG").await.unwrap();
    let mode = config.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) if r.get(0) == Some("pool_mode") => r.get(1).map(str::to_owned),
        _ => None,
    });
    assert_eq!(mode.as_deref(), Some("statement"), "PgBouncer pool_mode");
}

/// What the pool works around, shown with the plain driver: tokio-postgres's
/// COPY stalls behind pgpool-II (the server waits for data pgpool-II never
/// passes on); behind pgpool-II in raw mode its autocommit INSERTs are
/// answered and never committed; PgBouncer in statement mode closes a
/// connection that opens a transaction block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_driver_meets_each_failure() {
    use futures_util::SinkExt;

    let (url, direct) =
        fresh(common::pgpool_fresh_db(PgpoolMode::StreamingReplication).await).await;
    let client = plain(&url).await;
    let copied = tokio::time::timeout(Duration::from_secs(3), async {
        let sink = client
            .copy_in::<_, bytes::Bytes>("COPY t FROM STDIN")
            .await?;
        futures_util::pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"1\ta\n")).await?;
        sink.finish().await
    })
    .await;
    assert!(copied.is_err(), "COPY through pgpool-II ended: {copied:?}");
    drop(client);
    // The stalled session is the server's to end.
    direct
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .await
        .unwrap();

    let (url, direct) = fresh(common::pgpool_fresh_db(PgpoolMode::Raw).await).await;
    let client = plain(&url).await;
    for id in 0..3 {
        let n = client
            .execute("INSERT INTO t (id, v) VALUES ($1, 'x')", &[&id])
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    assert_eq!(committed(&direct, "t").await, 0, "answered, not committed");
    assert_eq!(open_transactions(&direct).await, 1);

    let url = common::bouncer_statement_fresh_db().await;
    let client = plain(&url).await;
    let begun = client.batch_execute("BEGIN").await;
    assert!(begun.is_err(), "{begun:?}");
    tokio::time::timeout(HANG, async {
        while !client.is_closed() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("PgBouncer closes the connection");
}

/// 300 concurrent single-row INSERTs through pgpool-II (streaming
/// replication with load balancing, and raw) and through PgBouncer in
/// statement mode, with the pool's defaults (COPY on from 64 rows): every
/// caller gets its own Ok, every row is committed (read on the server),
/// no session is left in a transaction, and nothing went out as COPY. A
/// single `execute` and a `query` work too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_hundred_concurrent_inserts_commit_through_each_pooler() {
    let urls = [
        (
            "pgpool-II",
            common::pgpool_fresh_db(PgpoolMode::StreamingReplication).await,
        ),
        (
            "pgpool-II raw",
            common::pgpool_fresh_db(PgpoolMode::Raw).await,
        ),
        (
            "PgBouncer statement",
            common::bouncer_statement_fresh_db().await,
        ),
    ];
    for (name, url) in urls {
        let (url, direct) = fresh(url).await;
        let pool = Pool::builder(&url).max_size(4).build().unwrap();
        let outcomes = storm(&pool, 0).await;
        let failed: Vec<_> = outcomes.iter().filter(|o| !matches!(o, Ok(1))).collect();
        assert!(failed.is_empty(), "{name}: {failed:?}");
        assert_eq!(committed(&direct, "t").await, i64::from(CALLERS), "{name}");
        assert_eq!(open_transactions(&direct).await, 0, "{name}");
        let stats = pool.stats();
        assert_eq!(stats.bulk_statements, 0, "{name}: no COPY: {stats:?}");
        assert!(stats.rows_per_batch() > 1.0, "{name}: coalesced: {stats:?}");

        let one = pool
            .execute("INSERT INTO t (id, v) VALUES ($1, $2)", &[&-1i32, &"one"])
            .await
            .unwrap();
        assert_eq!(one.rows_affected(), 1, "{name}");
        let rows = pool
            .query("SELECT count(*) FROM t WHERE v = $1", &[&"one"])
            .await
            .unwrap();
        assert_eq!(rows[0].get::<_, i64>(0), 1, "{name}");
        assert_eq!(
            committed(&direct, "t").await,
            i64::from(CALLERS) + 1,
            "{name}"
        );

        // A statement the pool runs as it is, and a write of the user's
        // through `get`, commit as well.
        let n = pool
            .execute("UPDATE t SET v = $1 WHERE id BETWEEN 0 AND 9", &[&"u"])
            .await
            .unwrap();
        assert_eq!(n.rows_affected(), 10, "{name}");
        let client = pool.get().await.unwrap();
        client
            .execute_typed(
                "DELETE FROM t WHERE id = $1",
                &[(&-1i32, tokio_postgres::types::Type::INT4)],
            )
            .await
            .unwrap();
        drop(client);
        let updated: i64 = direct
            .query_one("SELECT count(*) FROM t WHERE v = 'u'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(updated, 10, "{name}");
        assert_eq!(committed(&direct, "t").await, i64::from(CALLERS), "{name}");
        assert_eq!(open_transactions(&direct).await, 0, "{name}");
        pool.close().await;
    }
}

/// `execute_many` of 500 rows through pgpool-II and PgBouncer in statement
/// mode, COPY allowed from 2 rows: every row's own outcome in order, all
/// committed, none by COPY; behind PgBouncer in statement mode the
/// statements of one call go one after the other (a pipelined pair would
/// be one transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_many_through_each_pooler_is_multi_row_inserts() {
    let urls = [
        (
            "pgpool-II",
            common::pgpool_fresh_db(PgpoolMode::StreamingReplication).await,
        ),
        (
            "PgBouncer statement",
            common::bouncer_statement_fresh_db().await,
        ),
    ];
    for (name, url) in urls {
        let (url, direct) = fresh(url).await;
        let pool = Pool::builder(&url)
            .max_size(2)
            .copy_threshold(Some(2))
            .batching(batchpool::BatchConfig::default().max_rows(100))
            .build()
            .unwrap();
        let ids: Vec<i32> = (0..500).collect();
        let rows: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 2]> =
            ids.iter().map(|id| [id as _, &"m" as _]).collect();
        let outcomes = tokio::time::timeout(
            HANG,
            pool.execute_many("INSERT INTO t (id, v) VALUES ($1, $2)", &rows),
        )
        .await
        .expect("a hang")
        .unwrap();
        assert_eq!(outcomes.len(), 500, "{name}");
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Ok(o) if o.rows_affected() == 1)),
            "{name}"
        );
        assert_eq!(committed(&direct, "t").await, 500, "{name}");
        let stats = pool.stats();
        assert_eq!(stats.bulk_statements, 0, "{name}: {stats:?}");
        assert!(stats.statements >= 5, "{name}: {stats:?}");
        assert_eq!(open_transactions(&direct).await, 0, "{name}");
    }
}

/// Behind PgBouncer in statement mode what needs a transaction block is
/// refused before anything is sent, with an error that says why: an
/// `atomic` group of several statements, a `Transaction` statement. One
/// statement alone (`atomic([s])`, `execute_and_commit` as a transaction's
/// only statement) is its own transaction and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_refuses_transaction_blocks_before_sending() {
    let (url, direct) = fresh(common::bouncer_statement_fresh_db().await).await;
    let pool = Pool::builder(&url).max_size(2).build().unwrap();
    let ins = "INSERT INTO t (id, v) VALUES ($1, $2)";

    let err = pool
        .atomic(&[(ins, &[&1i32, &"a"]), (ins, &[&2i32, &"b"])])
        .await
        .unwrap_err();
    assert!(err.error().is_refused(), "{err}");
    assert!(err.to_string().contains("statement"), "{err}");
    let mut tx = pool.begin();
    let e = tx.execute(ins, &[&3i32, &"c"]).await.unwrap_err();
    assert!(e.is_refused(), "{e}");
    assert!(e.to_string().contains("refuses transaction blocks"), "{e}");
    let e = tx.query("SELECT 1", &[]).await.unwrap_err();
    assert!(e.is_refused(), "{e}");
    tx.commit().await.unwrap();
    assert_eq!(committed(&direct, "t").await, 0, "nothing of them ran");

    let one = pool.atomic(&[(ins, &[&4i32, &"d"])]).await.unwrap();
    assert_eq!(one[0].rows_affected(), 1);
    let tx = pool.begin();
    let out = tx.execute_and_commit(ins, &[&5i32, &"e"]).await.unwrap();
    assert_eq!(out.rows_affected(), 1);
    assert_eq!(committed(&direct, "t").await, 2);

    // Said in the connection string, nothing is asked and the same holds.
    let said = format!("{url}?pooler=statement");
    let pool = Pool::builder(&said).max_size(1).build().unwrap();
    let err = pool
        .atomic(&[(ins, &[&6i32, &"f"]), (ins, &[&7i32, &"g"])])
        .await
        .unwrap_err();
    assert!(err.error().is_refused(), "{err}");
    pool.execute(ins, &[&8i32, &"h"]).await.unwrap();
    assert_eq!(committed(&direct, "t").await, 3);
}

/// pgpool-II (streaming replication) keeps its own idea of whether each
/// session is in a failed transaction; after a statement failed in a
/// transaction whose messages were pipelined it sometimes kept that idea
/// after the server ended the transaction (answering every statement but
/// `COMMIT` / `ROLLBACK` itself with `25P02`), and a later statement
/// could crash the pgpool-II process serving the session. The pool sends a
/// transaction's messages one at a time through pgpool-II, and asks it
/// afterwards. With one connection, 30 rounds of a failed atomic group and
/// a failed `Transaction` are each followed by an innocent caller's
/// INSERT, which must succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_transaction_through_pgpool_leaves_no_failure_for_the_next_caller() {
    // With COPY on and off: pgpool-II is found either way.
    for copy in [Some(64), None] {
        failed_transactions_then_innocent_callers(copy).await;
    }
}

async fn failed_transactions_then_innocent_callers(copy: Option<usize>) {
    let (url, direct) =
        fresh(common::pgpool_fresh_db(PgpoolMode::StreamingReplication).await).await;
    let pool = Pool::builder(&url)
        .max_size(1)
        .copy_threshold(copy)
        .build()
        .unwrap();
    let ins = "INSERT INTO t (id, v) VALUES ($1, $2)";
    pool.execute(ins, &[&0i32, &"taken"]).await.unwrap();
    for round in 1..=30i32 {
        let (a, b) = (1_000 + round, 2_000 + round);
        let err = pool
            .atomic(&[
                (ins, &[&a, &"a"]),
                (ins, &[&0i32, &"dup"]),
                (ins, &[&b, &"b"]),
            ])
            .await
            .unwrap_err();
        assert_eq!(err.index(), Some(1), "{err}");
        pool.execute(ins, &[&round, &"innocent"])
            .await
            .unwrap_or_else(|e| panic!("round {round}, after a failed group: {e}"));

        let mut tx = pool.begin();
        tx.execute(ins, &[&(3_000 + round), &"c"]).await.unwrap();
        tx.execute(ins, &[&0i32, &"dup"]).await.unwrap_err();
        tx.execute(ins, &[&(4_000 + round), &"d"])
            .await
            .unwrap_err();
        tx.commit().await.unwrap_err();
        pool.execute(ins, &[&(100 + round), &"innocent"])
            .await
            .unwrap_or_else(|e| panic!("round {round}, after a failed transaction: {e}"));
    }
    assert_eq!(committed(&direct, "t").await, 61);
    assert_eq!(open_transactions(&direct).await, 0);
}

/// On a direct connection the pool asks pgpool-II's question once per pool
/// (it shows in the server's log as an error), whatever its number of
/// connections and with COPY on or off; `pooler=none` asks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgpool_is_asked_about_once_per_pool_and_not_when_said() {
    use crate::common::tx::TxBackend;

    let env = <common::backend::Pg as TxBackend>::env(1).await;
    let asked = |log: &[String]| log.iter().filter(|s| *s == "SHOW pool_version").count();
    let url = format!(
        "postgresql://postgres@{}/{}?application_name=pool",
        env.proxy.addr(),
        env.db
    );
    for (pooler, copy, questions) in [
        (None, Some(64), 1),
        (None, None, 1),
        (Some(Pooler::None), Some(64), 0),
    ] {
        let mut builder = Pool::builder(&url).max_size(3).copy_threshold(copy);
        if let Some(pooler) = pooler {
            builder = builder.pooler(pooler);
        }
        let pool = builder.build().unwrap();
        let (_, _, log) = env
            .count(async {
                let held: Vec<_> = futures_util::future::join_all((0..3).map(|_| pool.get())).await;
                assert!(held.iter().all(Result::is_ok));
            })
            .await;
        assert_eq!(asked(&log), questions, "{pooler:?}, copy {copy:?}: {log:?}");
    }
}

/// Through pgpool-II in raw mode the pool commits, once per connection, the
/// transaction pgpool-II began ahead of its check, and the connection's
/// writes commit from then on: coalesced INSERTs one by one, and a write
/// of the user's on each of two `get()` connections, after which no
/// transaction is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgpool_raw_connections_are_committed_for_once() {
    let (url, direct) = fresh(common::pgpool_fresh_db(PgpoolMode::Raw).await).await;
    let pool = Pool::builder(&url).max_size(2).build().unwrap();
    let ins = "INSERT INTO t (id, v) VALUES ($1, $2)";
    for id in 0..20i32 {
        pool.execute(ins, &[&id, &"x"]).await.unwrap();
        assert_eq!(
            committed(&direct, "t").await,
            i64::from(id) + 1,
            "row {id} committed"
        );
    }
    let held: Vec<_> = futures_util::future::join_all((0..2).map(|_| pool.get())).await;
    for client in &held {
        let client = client.as_ref().unwrap();
        client
            .execute("UPDATE t SET v = 'y' WHERE id = 0", &[])
            .await
            .unwrap();
        assert_eq!(
            first(
                client,
                "SELECT transaction_timestamp() = statement_timestamp()"
            )
            .await
            .as_deref(),
            Some("t"),
            "no transaction left open after a write"
        );
    }
    drop(held);
    assert_eq!(open_transactions(&direct).await, 0);
}
