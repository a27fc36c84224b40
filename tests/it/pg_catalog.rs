//! A PostgreSQL-wire server whose catalog the pool's role cannot fully read
//! (as on engines that lack `pg_partition_tree`, `pg_rewrite` or
//! `pg_trigger`): the table facts cannot be learned, so nothing is
//! coalesced; `explain()` says why, a warning is logged once per pool, and
//! every caller gets its own single-row statement's outcome, never an error
//! from the pool's catalog reads.

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use batchpool::BatchConfig;
use batchpool::postgres::{Pool, Statements};

/// Everything tracing writes, at every level, into one buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Words of the warning the pool logs when the catalog cannot be read.
const WARNING: &str = "cannot read the catalog facts";

async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Each way the catalog is out of reach, as a superuser runs it in a fresh
/// database (these catalogs are per database, so nothing else is touched).
const HIDDEN: &[(&str, &str)] = &[
    (
        "pg_trigger",
        "REVOKE SELECT ON pg_catalog.pg_trigger FROM PUBLIC",
    ),
    (
        "pg_rewrite",
        "REVOKE SELECT ON pg_catalog.pg_rewrite FROM PUBLIC",
    ),
    (
        "pg_partition_tree",
        "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_partition_tree(regclass) FROM PUBLIC",
    ),
];

const INSERT: &str = "INSERT INTO t (k, v) VALUES ($1, $2)";
const RETURNING: &str = "INSERT INTO t (k, v) VALUES ($1, $2) RETURNING k";

// One thread: the capturing subscriber is this thread's default, and the
// pool's tasks (flushers, connection tasks) run on it too.
#[tokio::test(flavor = "current_thread")]
async fn unreadable_catalog_turns_coalescing_off_without_errors() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = crate::capture::set_default(subscriber);

    for (hidden, revoke) in HIDDEN {
        for statements in [Statements::Named, Statements::Unnamed] {
            run_case(hidden, revoke, statements, &captured).await;
        }
    }
}

async fn run_case(hidden: &str, revoke: &str, statements: Statements, captured: &Captured) {
    let what = format!("{hidden} hidden, {statements:?} statements");
    let url = common::pg_fresh_db().await;
    let role = format!(
        "bp_role_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let su = admin(&url).await;
    su.batch_execute(&format!(
        "{revoke};
         CREATE ROLE \"{role}\" LOGIN;
         CREATE TABLE t (k int PRIMARY KEY, v text NOT NULL);
         GRANT SELECT, INSERT ON t TO \"{role}\";"
    ))
    .await
    .unwrap();

    // The superuser still reads everything: the same text is coalesced for
    // it, so what follows comes from the hidden catalog alone.
    let full = Pool::builder(&url).build().unwrap();
    let explained = full.explain(INSERT).await.unwrap();
    assert!(explained.is_coalesced(), "{what}: superuser: {explained}");
    full.close().await;

    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config.user(&role);
    let before = captured.text().matches(WARNING).count();
    let pool = Pool::from_config(config)
        .statements(statements)
        .batching(BatchConfig::default())
        .max_size(4)
        .build()
        .unwrap();

    for sql in [INSERT, RETURNING] {
        let explained = pool.explain(sql).await.unwrap();
        assert!(!explained.is_coalesced(), "{what}: {sql}: {explained}");
        let shown = explained.to_string();
        assert!(
            shown.contains("catalog") && shown.contains(hidden),
            "{what}: {sql}: the reason names the catalog and what is hidden: {shown}"
        );
    }

    // Concurrent callers, one key taken twice: each gets its own
    // single-row outcome.
    let keys: Vec<i32> = (0..40).chain([7]).collect();
    let calls = keys.iter().enumerate().map(|(i, &k)| {
        let pool = pool.clone();
        async move {
            let v = format!("v{i}");
            if i % 2 == 0 {
                pool.execute(INSERT, &[&k, &v])
                    .await
                    .map(|o| o.rows_affected())
            } else {
                pool.query(RETURNING, &[&k, &v]).await.map(|rows| {
                    assert_eq!(rows.len(), 1);
                    assert_eq!(rows[0].get::<_, i32>(0), k);
                    1
                })
            }
        }
    });
    let results = futures_util::future::join_all(calls).await;
    let mut duplicate = 0;
    for (r, k) in results.iter().zip(&keys) {
        match r {
            Ok(n) => assert_eq!(*n, 1, "{what}: key {k}"),
            Err(e) => {
                assert_eq!(*k, 7, "{what}: key {k}: {e}");
                assert_eq!(e.code(), Some("23505"), "{what}: key {k}: {e}");
                duplicate += 1;
            }
        }
    }
    assert_eq!(duplicate, 1, "{what}: exactly the second key 7 fails");
    let n: i64 = su
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 40, "{what}");
    let stats = pool.stats();
    assert_eq!(stats.batches, 0, "{what}: nothing coalesced: {stats:?}");

    let log = captured.text();
    let warned = log.matches(WARNING).count() - before;
    assert_eq!(
        warned, 1,
        "{what}: one warning for the pool, whatever the number of texts and callers: {log}"
    );
    pool.close().await;
    su.batch_execute(&format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\""))
        .await
        .unwrap();
}
