//! `PoolConfig`: settings from the environment or any serde format, applied
//! to real PostgreSQL and MariaDB pools.

use crate::common;

use std::time::Duration;

use batchpool::{PoolConfig, QueueFull};
use mysql_async::prelude::Queryable;

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn every_setting_reads_from_environment_variables() {
    let config = PoolConfig::from_vars(
        "SVC_DB_",
        vars(&[
            ("SVC_DB_URL", "postgresql://app:url-secret@db/app"),
            ("SVC_DB_PASSWORD", "env-secret"),
            ("SVC_DB_MAX_SIZE", "12"),
            ("SVC_DB_WAIT_TIMEOUT", "2s"),
            ("SVC_DB_CREATE_TIMEOUT", "3s"),
            ("SVC_DB_RECYCLE_TIMEOUT", "500ms"),
            ("SVC_DB_STATEMENT_TIMEOUT", "1m 30s"),
            ("SVC_DB_TCP_KEEPALIVE", "10s"),
            ("SVC_DB_TCP_USER_TIMEOUT", "20s"),
            ("SVC_DB_STATEMENT_CACHE", "64"),
            ("SVC_DB_ON_CONNECT", "SET application_name = 'svc'"),
            ("SVC_DB_BATCH_MAX_ROWS", "250"),
            ("SVC_DB_BATCH_MAX_BYTES", "1048576"),
            ("SVC_DB_BATCH_MAX_DELAY", "5ms"),
            ("SVC_DB_BATCH_QUEUE_CAPACITY", "1000"),
            ("SVC_DB_BATCH_QUEUE_FULL", "reject"),
            ("SVC_DB_BATCH_CACHE_CAPACITY", "32"),
            ("SVC_DB_BATCH_MAX_IN_FLIGHT", "3"),
            ("SVC_DB_BATCH_ENABLED", "false"),
            ("SVC_DB_BATCH_RELEARN_AFTER", "10s"),
            ("SVC_DB_BATCH_PIPELINE", "false"),
            ("OTHER_VARIABLE", "ignored"),
        ]),
    )
    .unwrap();
    assert_eq!(config.max_size, Some(12));
    assert_eq!(config.wait_timeout, Some(Duration::from_secs(2)));
    assert_eq!(config.recycle_timeout, Some(Duration::from_millis(500)));
    assert_eq!(config.statement_timeout, Some(Duration::from_secs(90)));
    assert_eq!(config.statement_cache, Some(64));
    let b = config.batching();
    assert_eq!(b.max_rows, 250);
    assert_eq!(b.max_bytes, 1 << 20);
    assert_eq!(b.max_delay, Some(Duration::from_millis(5)));
    assert_eq!(b.queue_capacity, 1000);
    assert_eq!(b.queue_full, QueueFull::Reject);
    assert_eq!(b.cache_capacity, 32);
    assert_eq!(b.max_in_flight, Some(3));
    assert!(!b.enabled);
    assert_eq!(b.relearn_after, Duration::from_secs(10));
    assert!(!b.pipeline);

    // No secret in Debug, of the config or of the builder made from it.
    let shown = format!("{config:?}");
    assert!(!shown.contains("secret"), "{shown}");
    let builder = config.builder::<batchpool::postgres::Postgres>().unwrap();
    let shown = format!("{builder:?}");
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("max_size: 12"), "{shown}");
}

#[test]
fn every_builder_setting_has_a_field() {
    let config = PoolConfig::from_vars(
        "PG_",
        vars(&[
            ("PG_URL", "postgresql://app@db/app"),
            ("PG_MAX_LIFETIME", "30m"),
            ("PG_IDLE_TIMEOUT", "90s"),
            ("PG_COPY_THRESHOLD", "off"),
            ("PG_STATEMENTS", "unnamed"),
            ("PG_POOLER", "statement"),
            ("PG_SSL_MODE", "disable"),
        ]),
    )
    .unwrap();
    assert_eq!(config.max_lifetime, Some(Duration::from_secs(1800)));
    assert_eq!(config.idle_timeout, Some(Duration::from_secs(90)));
    assert_eq!(config.copy_threshold, Some(None));
    let shown = format!(
        "{:?}",
        config.builder::<batchpool::postgres::Postgres>().unwrap()
    );
    for setting in [
        "max_lifetime: Some(1800s)",
        "idle_timeout: Some(90s)",
        "copy_threshold: Some(None)",
        "statements: Some(Unnamed)",
        "pooler: Some(Statement)",
        "mode: Some(Disable)",
    ] {
        assert!(shown.contains(setting), "{setting} in {shown}");
    }

    let config: PoolConfig = serde_json::from_value(serde_json::json!({
        "url": "mysql://app@db/app",
        "max_lifetime": "10m",
        "bulk_threshold": 8,
        "coalesce_upserts": true,
        "ssl_mode": "DISABLED",
    }))
    .unwrap();
    let shown = format!("{:?}", config.builder::<batchpool::mysql::MySql>().unwrap());
    for setting in [
        "max_lifetime: Some(600s)",
        "idle_timeout: None",
        "coalesce_upserts: true",
        "bulk_threshold: Some(Some(8))",
        "mode: Some(Disabled)",
    ] {
        assert!(shown.contains(setting), "{setting} in {shown}");
    }

    // A threshold is a row count (as a number or a string) or "off".
    for (json, want) in [
        (r#"{"copy_threshold": 128}"#, Some(Some(128))),
        (r#"{"copy_threshold": "128"}"#, Some(Some(128))),
        (r#"{"copy_threshold": "OFF"}"#, Some(None)),
        (r#"{}"#, None),
    ] {
        let config: PoolConfig = serde_json::from_str(json).unwrap();
        assert_eq!(config.copy_threshold, want, "{json}");
    }
    for json in [r#"{"copy_threshold": "lots"}"#, r#"{"bulk_threshold": -2}"#] {
        let e = serde_json::from_str::<PoolConfig>(json).unwrap_err();
        assert!(e.to_string().contains("row count"), "{json}: {e}");
    }
}

#[test]
fn the_other_backends_settings_are_refused() {
    let pg_only: PoolConfig = serde_json::from_value(serde_json::json!({
        "url": "mysql://app@db/app",
        "copy_threshold": 16,
    }))
    .unwrap();
    let e = pg_only.builder::<batchpool::mysql::MySql>().unwrap_err();
    assert!(
        e.is_config() && e.to_string().contains("copy_threshold"),
        "{e}"
    );
    let my_only: PoolConfig = serde_json::from_value(serde_json::json!({
        "url": "postgresql://app@db/app",
        "coalesce_upserts": true,
    }))
    .unwrap();
    let e = my_only
        .builder::<batchpool::postgres::Postgres>()
        .unwrap_err();
    assert!(
        e.is_config() && e.to_string().contains("coalesce_upserts"),
        "{e}"
    );
    // A mode the backend does not know.
    let bad_mode: PoolConfig = serde_json::from_value(serde_json::json!({
        "url": "postgresql://app@db/app",
        "ssl_mode": "VERIFY_IDENTITY",
    }))
    .unwrap();
    let e = bad_mode
        .builder::<batchpool::postgres::Postgres>()
        .unwrap_err();
    assert!(e.is_config(), "{e}");
}

#[test]
fn bad_settings_are_errors_that_name_them() {
    for (pairs, needle) in [
        (vec![("P_MAX_SIZ", "3")], "P_MAX_SIZ"),
        (
            vec![("P_URL", "x"), ("P_WAIT_TIMEOUT", "soon")],
            "P_WAIT_TIMEOUT",
        ),
        (vec![("P_BATCH_QUEUE_FULL", "drop")], "P_BATCH_QUEUE_FULL"),
        (vec![("P_MAX_SIZE", "-1"), ("P_URL", "x")], "P_MAX_SIZE"),
    ] {
        let e = PoolConfig::from_vars("P_", vars(&pairs)).unwrap_err();
        assert!(e.is_config(), "{e:?}");
        let text = format!("{e}");
        assert!(text.contains(needle), "{pairs:?}: {text}");
    }
    let e = PoolConfig::default()
        .build::<batchpool::postgres::Postgres>()
        .unwrap_err();
    assert!(e.to_string().contains("url"), "{e}");
    // Validation of the values is the builder's.
    let config: PoolConfig =
        serde_json::from_str(r#"{"url": "host=127.0.0.1", "batch_max_rows": 0}"#).unwrap();
    let e = config.build::<batchpool::postgres::Postgres>().unwrap_err();
    assert!(e.is_config() && e.to_string().contains("max_rows"), "{e}");
}

#[test]
fn reads_from_any_serde_format() {
    let config: PoolConfig = serde_json::from_str(
        r#"{"url": "mysql://root@127.0.0.1/app", "max_size": 4,
            "wait_timeout": "750ms", "batch_max_delay": "2ms"}"#,
    )
    .unwrap();
    assert_eq!(config.max_size, Some(4));
    assert_eq!(config.wait_timeout, Some(Duration::from_millis(750)));
    assert_eq!(config.batching().max_delay, Some(Duration::from_millis(2)));
    let e = serde_json::from_str::<PoolConfig>(r#"{"max_sise": 4}"#).unwrap_err();
    assert!(e.to_string().contains("max_sise"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pool_from_config_has_its_settings() {
    let url = common::pg_fresh_db().await;
    let config = PoolConfig::from_vars(
        "DB_",
        vars(&[
            ("DB_URL", &url),
            ("DB_MAX_SIZE", "3"),
            ("DB_STATEMENT_TIMEOUT", "1500ms"),
            (
                "DB_ON_CONNECT",
                "SET application_name = 'from-config'; SET TIME ZONE 'Asia/Tokyo'",
            ),
        ]),
    )
    .unwrap();
    let pool: batchpool::postgres::Pool = config.build().unwrap();
    assert_eq!(pool.status().max_size, 3);
    let row = pool
        .query_one(
            "SELECT current_setting('application_name'), current_setting('TimeZone'), \
             current_setting('statement_timeout')",
            &[],
        )
        .await
        .unwrap();
    let (name, zone, timeout): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (name.as_str(), zone.as_str(), timeout.as_str()),
        ("from-config", "Asia/Tokyo", "1500ms")
    );
    pool.execute("CREATE TABLE t (k int PRIMARY KEY)", &[])
        .await
        .unwrap();
    let calls = (0..100).map(|k| {
        let pool = pool.clone();
        async move { pool.execute("INSERT INTO t (k) VALUES ($1)", &[&k]).await }
    });
    for out in futures_util::future::join_all(calls).await {
        assert_eq!(out.unwrap().rows_affected(), 1);
    }
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_pool_from_config_has_its_settings() {
    let url = common::mysql_fresh_db().await;
    let config: PoolConfig = serde_json::from_value(serde_json::json!({
        "url": url,
        "max_size": 2,
        "on_connect": "SET SESSION time_zone = '+03:00'; SET SESSION group_concat_max_len = 4321",
    }))
    .unwrap();
    let pool: batchpool::mysql::Pool = config.build().unwrap();
    assert_eq!(pool.status().max_size, 2);
    let mut conn = pool.get().await.unwrap();
    let got: Option<(String, u64)> = conn
        .query_first("SELECT @@session.time_zone, @@session.group_concat_max_len")
        .await
        .unwrap();
    assert_eq!(got, Some(("+03:00".to_string(), 4321)));
    drop(conn);
    pool.close().await;
}
