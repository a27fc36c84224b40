//! The `metrics` feature: a burst of coalesced INSERTs (multi-row INSERTs
//! and the bulk path — COPY on PostgreSQL, the bulk command on MariaDB —
//! one failing row, a few statements run as they are) on a real PostgreSQL
//! and a real MariaDB, scraped in Prometheus' text format and compared with
//! each pool's own `stats()`.

use crate::common;

use std::sync::OnceLock;
use std::time::Duration;

use batchpool::Stats;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process's one recorder, installed before the first pool is built
/// (a pool registers its metrics when it is built). Histograms with
/// buckets, as a Prometheus user sets them, so `_count` and `_sum` cover
/// every value since the start. The tests' pools tell their samples apart
/// by the `backend` label.
fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .set_buckets(&[0.000_1, 0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0])
            .unwrap()
            .install_recorder()
            .unwrap()
    })
}

/// One scrape of pool "orders" of one backend: every sample line, as
/// (name, labels, value).
struct Scrape {
    backend: &'static str,
    samples: Vec<(String, String, f64)>,
}

impl Scrape {
    fn of(handle: &PrometheusHandle, backend: &'static str) -> Scrape {
        let text = handle.render();
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let (key, value) = l.rsplit_once(' ').expect("a sample line");
                let (name, labels) = match key.split_once('{') {
                    Some((name, labels)) => (name, labels.trim_end_matches('}')),
                    None => (key, ""),
                };
                let value: f64 = value.parse().expect("a number");
                (name.to_owned(), labels.to_owned(), value)
            })
            .collect();
        Scrape { backend, samples }
    }

    /// The value of the one sample `name` of pool "orders" on this scrape's
    /// backend with the `extra` labels too; `None` when there is none.
    fn find(&self, name: &str, extra: &[(&str, &str)]) -> Option<f64> {
        let mut want = vec![("pool", "orders"), ("backend", self.backend)];
        want.extend_from_slice(extra);
        let hits: Vec<f64> = self
            .samples
            .iter()
            .filter(|(n, labels, _)| {
                n == name
                    && want
                        .iter()
                        .all(|(k, v)| labels.split(',').any(|l| l == format!("{k}=\"{v}\"")))
            })
            .map(|s| s.2)
            .collect();
        assert!(
            hits.len() <= 1,
            "{name} {extra:?}: several samples {hits:?}"
        );
        hits.first().copied()
    }

    /// Like `find`, for a metric that must be there.
    fn get(&self, name: &str, extra: &[(&str, &str)]) -> u64 {
        let v = self
            .find(name, extra)
            .unwrap_or_else(|| panic!("no sample {name} {extra:?} in the scrape"));
        assert_eq!(v.fract(), 0.0, "{name}: {v}");
        v as u64
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_metrics_match_stats_after_a_burst() {
    let handle = recorder();
    let url = common::pg_fresh_db().await;
    let pool = batchpool::postgres::Pool::builder(&url)
        .name("orders")
        .max_size(2)
        // COPY for every flush of two rows or more into `plain`.
        .copy_threshold(Some(2))
        .build()
        .unwrap();
    pool.execute("CREATE TABLE plain (id int PRIMARY KEY, v text)", &[])
        .await
        .unwrap();
    pool.execute(
        "CREATE TABLE keyed (id serial PRIMARY KEY, v text NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    pool.execute("INSERT INTO plain (id, v) SELECT 0, 'taken'", &[])
        .await
        .unwrap();

    // Ids 0..300: id 0 is taken, so exactly one row fails.
    const N: i32 = 300;
    let plain = (0..N).map(|id| {
        let pool = pool.clone();
        async move {
            let v = format!("p{id}");
            pool.execute("INSERT INTO plain (id, v) VALUES ($1, $2)", &[&id, &v])
                .await
        }
    });
    let returning = (0..N).map(|i| {
        let pool = pool.clone();
        async move {
            let v = format!("r{i}");
            pool.execute("INSERT INTO keyed (v) VALUES ($1) RETURNING id", &[&v])
                .await
        }
    });
    let (plain, returning) = tokio::join!(
        futures_util::future::join_all(plain),
        futures_util::future::join_all(returning)
    );
    let failed = plain.iter().filter(|r| r.is_err()).count();
    assert_eq!(failed, 1, "only the taken id fails");
    assert!(plain[0].is_err());
    assert!(returning.iter().all(Result::is_ok));

    // Every call is answered; close() waits for the pool's own tasks too
    // (a flush counts its failed rows after its callers heard), so both
    // sides are final.
    pool.close().await;
    let stats = pool.stats();
    let m = Scrape::of(handle, "postgres");
    compare(&m, &stats, 2 * N as u64);
    // The maximum queue wait, taken: returned once, then counted afresh.
    let max = stats.queue_wait_max;
    assert!(max <= stats.queue_wait_total);
    assert_eq!(pool.take_queue_wait_max(), max);
    assert_eq!(pool.stats().queue_wait_max, Duration::ZERO);
    assert_eq!(pool.take_queue_wait_max(), Duration::ZERO);
}

/// The scrape `m` says what `stats` says, for a finished burst of `rows`
/// rows with one failing row and a few statements run as they are.
fn compare(m: &Scrape, stats: &Stats, rows: u64) {
    // The failing row was sent too.
    assert_eq!(stats.rows, rows, "{stats:?}");
    assert_eq!(m.get("batchpool_rows_total", &[]), stats.rows);
    assert_eq!(m.get("batchpool_statements_total", &[]), stats.statements);
    assert_eq!(
        m.get("batchpool_bulk_statements_total", &[]),
        stats.bulk_statements
    );
    assert_eq!(
        m.get("batchpool_pipelined_statements_total", &[]),
        stats.pipelined_statements
    );
    assert_eq!(
        m.get("batchpool_split_statements_total", &[]),
        stats.split_statements
    );
    assert_eq!(
        m.get("batchpool_passthrough_statements_total", &[]),
        stats.passthrough
    );
    assert!(stats.passthrough >= 3, "{stats:?}");
    assert_eq!(m.get("batchpool_rows_failed_total", &[]), stats.rows_failed);
    assert_eq!(stats.rows_failed, 1, "{stats:?}");
    assert_eq!(m.get("batchpool_rows_unsent_total", &[]), stats.rows_unsent);
    assert_eq!(
        m.get("batchpool_rows_cancelled_total", &[]),
        stats.rows_cancelled
    );
    assert_eq!(m.get("batchpool_learns_total", &[]), stats.learns);
    assert_eq!(
        m.get("batchpool_learn_checks_total", &[]),
        stats.learn_checks
    );
    for (reason, want) in [
        ("natural", stats.flush_natural),
        ("full", stats.flush_full),
        ("timer", stats.flush_timer),
        ("close", stats.flush_close),
    ] {
        assert_eq!(
            m.get("batchpool_flushes_total", &[("reason", reason)]),
            want,
            "{reason}"
        );
    }
    assert_eq!(
        stats.flush_natural + stats.flush_full + stats.flush_timer + stats.flush_close,
        stats.batches
    );
    // Idle: nothing queued, nothing in flight.
    assert_eq!(m.get("batchpool_queued_rows", &[]), 0);
    assert_eq!(stats.queued, 0);
    assert_eq!(m.get("batchpool_flushes_in_flight", &[]), 0);
    assert_eq!(stats.in_flight, 0);

    // One value per statement, carrying its rows (re-runs that isolate
    // the failing row carry some rows twice).
    assert!(stats.statements > 0);
    assert_eq!(
        m.get("batchpool_statement_rows_count", &[]),
        stats.statements
    );
    assert!(m.get("batchpool_statement_rows_sum", &[]) >= stats.rows);
    // One round trip per statement, a pipelined pair timed as one.
    assert_eq!(
        m.get("batchpool_statement_duration_seconds_count", &[]),
        stats.statements - stats.pipelined_statements
    );
    // The queue wait's sum is `queue_wait_total`, in the same whole
    // microseconds (the sum of floats may differ in its last bits).
    let waited = m
        .find("batchpool_queue_wait_seconds_sum", &[])
        .unwrap_or(0.0);
    let total = stats.queue_wait_total.as_secs_f64();
    assert!(
        (waited - total).abs() <= 1e-9 * (1.0 + total) * rows as f64,
        "histogram sum {waited} vs queue_wait_total {total}"
    );
    if stats.queue_wait_total > Duration::ZERO {
        assert!(m.get("batchpool_queue_wait_seconds_count", &[]) > 0);
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_metrics_match_stats_after_a_burst_on_mariadb() {
    let handle = recorder();
    let url = common::mysql_fresh_db().await;
    let pool = batchpool::mysql::Pool::builder(&url)
        .name("orders")
        .max_size(2)
        .build()
        .unwrap();
    pool.execute(
        "CREATE TABLE plain (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB",
        (),
    )
    .await
    .unwrap();
    pool.execute(
        "CREATE TABLE keyed (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20) NOT NULL) \
         ENGINE=InnoDB",
        (),
    )
    .await
    .unwrap();
    pool.execute("INSERT INTO plain (id, v) SELECT 0, 'taken'", ())
        .await
        .unwrap();

    // Ids 0..300: id 0 is taken, so exactly one row fails. `plain` names
    // every column: the bulk command carries its flushes. `keyed` gets
    // its ids from the auto-increment column: multi-row INSERTs.
    const N: i32 = 300;
    let plain = (0..N).map(|id| {
        let pool = pool.clone();
        async move {
            pool.execute(
                "INSERT INTO plain (id, v) VALUES (?, ?)",
                (id, format!("p{id}")),
            )
            .await
        }
    });
    let keyed = (0..N).map(|i| {
        let pool = pool.clone();
        async move {
            pool.execute("INSERT INTO keyed (v) VALUES (?)", (format!("k{i}"),))
                .await
        }
    });
    let (plain, keyed) = tokio::join!(
        futures_util::future::join_all(plain),
        futures_util::future::join_all(keyed)
    );
    let failed = plain.iter().filter(|r| r.is_err()).count();
    assert_eq!(failed, 1, "only the taken id fails");
    assert!(plain[0].is_err());
    assert!(keyed.iter().all(Result::is_ok));

    pool.close().await;
    let stats = pool.stats();
    let m = Scrape::of(handle, "mysql");
    compare(&m, &stats, 2 * N as u64);
}
