//! MariaDB / MySQL: the scratch database, `usertable`, and the six write
//! paths.
//!
//! The peers use plain mysql_async: `nobatch` (one autocommit INSERT per
//! row, one connection), `batch` (`exec_batch` in groups of `--batch-size`:
//! MariaDB's COM_STMT_BULK_EXECUTE when the server offers it, else one
//! execute per row), `coalesce-peer` (mysql_async's own pool, statements
//! cached, no reset on return) and `load-data` (`LOAD DATA LOCAL INFILE`
//! streamed from memory: the bulk limit). `batchrewrite` and `coalesce` use
//! batchpool. Every pool opens its connections before the clock starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use batchpool::BatchConfig;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::try_join_all;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, PoolConstraints, PoolOpts, Value};

use super::pg::histogram;
use super::report::Batching;
use super::workload::{self, Dataset, FIELD_COUNT, Record};
use super::{LoadConfig, Loaded, Mode, Progress, Result, ServerInfo, Setting, fail};

/// Binds a record as the 11 parameters of the single-row INSERT.
pub fn params(r: &Record) -> Vec<Value> {
    std::iter::once(&r.key)
        .chain(r.fields.iter())
        .map(|s| Value::from(s.as_str()))
        .collect()
}

/// `INSERT INTO usertable (YCSB_KEY, FIELD0, ...) VALUES (?, ..., ?)`.
pub fn insert_sql() -> String {
    let cols = workload::columns();
    let marks = vec!["?"; cols.len()];
    format!(
        "INSERT INTO {} ({}) VALUES ({})",
        workload::TABLE,
        cols.join(", "),
        marks.join(", ")
    )
}

/// `LOAD DATA LOCAL INFILE` of tab-separated lines into `usertable`.
pub fn load_data_sql() -> String {
    format!(
        "LOAD DATA LOCAL INFILE 'ycsb' INTO TABLE {} CHARACTER SET utf8mb4 \
         FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' ({})",
        workload::TABLE,
        workload::columns().join(", ")
    )
}

/// Appends `s` to a LOAD DATA line, escaping what the format reserves.
fn push_field(out: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0 => out.extend_from_slice(b"\\0"),
            _ => out.push(b),
        }
    }
}

/// The LOAD DATA file for `rows`: one line per record.
fn tsv_chunk(rows: &[Record]) -> Bytes {
    let mut out = Vec::with_capacity(rows.len() * (FIELD_COUNT + 1) * 110);
    for r in rows {
        push_field(&mut out, &r.key);
        for f in &r.fields {
            out.push(b'\t');
            push_field(&mut out, f);
        }
        out.push(b'\n');
    }
    Bytes::from(out)
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The MariaDB side of the bench: a scratch database on the server, created
/// by [`create`](MysqlTarget::create) and dropped by
/// [`cleanup`](MysqlTarget::cleanup).
pub struct MysqlTarget {
    /// Options for the server (no database).
    base: Opts,
    /// Options for the scratch database.
    opts: Opts,
    /// Name of the scratch database.
    dbname: String,
    /// Connection to the scratch database (schema, TRUNCATE, count).
    admin: tokio::sync::Mutex<Conn>,
}

impl MysqlTarget {
    /// Connects to `url` (`mysql://user:password@host:port/db`) and creates
    /// a uniquely named scratch database there (`bp_<pid>_<n>_<nanos>`, the
    /// test harness' pattern, so leftovers of a killed run are swept).
    pub async fn create(url: &str) -> Result<MysqlTarget> {
        let base = Opts::from_url(url).map_err(|e| fail(format!("bad --mysql-url: {e}")))?;
        let mut server = Conn::new(base.clone())
            .await
            .map_err(|e| fail(format!("cannot connect to MariaDB: {e}")))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dbname = format!("bp_{}_7{}_{nanos}", std::process::id(), nanos % 1000);
        server
            .query_drop(format!("CREATE DATABASE `{dbname}`"))
            .await
            .map_err(|e| fail(format!("CREATE DATABASE {dbname} failed: {e}")))?;
        let _ = server.disconnect().await;
        let opts: Opts = OptsBuilder::from_opts(base.clone())
            .db_name(Some(dbname.clone()))
            .into();
        let admin = Conn::new(opts.clone()).await?;
        Ok(MysqlTarget {
            base,
            opts,
            dbname,
            admin: tokio::sync::Mutex::new(admin),
        })
    }

    /// The scratch database's connection options.
    pub fn opts(&self) -> &Opts {
        &self.opts
    }

    /// Host:port of the server, for the report.
    pub fn address(&self) -> String {
        format!("{}:{}", self.opts.ip_or_hostname(), self.opts.tcp_port())
    }

    pub(super) async fn describe(&self) -> Result<ServerInfo> {
        let mut admin = self.admin.lock().await;
        let version: Option<String> = admin.query_first("SELECT VERSION()").await?;
        let mut settings = Vec::new();
        for name in [
            "innodb_flush_log_at_trx_commit",
            "sync_binlog",
            "log_bin",
            "innodb_doublewrite",
            "innodb_buffer_pool_size",
            "innodb_autoinc_lock_mode",
            "max_allowed_packet",
        ] {
            let value: Option<String> = admin.query_first(format!("SELECT @@{name}")).await?;
            settings.push(Setting {
                name: name.to_string(),
                value: value.unwrap_or_default(),
            });
        }
        Ok(ServerInfo {
            database: "mariadb".into(),
            version: version.unwrap_or_default(),
            settings,
        })
    }

    pub(super) async fn prepare(&self) -> Result<()> {
        let fields: Vec<String> = (0..FIELD_COUNT).map(|i| format!("FIELD{i} TEXT")).collect();
        let mut admin = self.admin.lock().await;
        admin
            .query_drop(format!("DROP TABLE IF EXISTS {}", workload::TABLE))
            .await?;
        admin
            .query_drop(format!(
                "CREATE TABLE {} (YCSB_KEY VARCHAR(255) PRIMARY KEY, {}) \
                 ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
                workload::TABLE,
                fields.join(", "),
            ))
            .await?;
        Ok(())
    }

    /// Empties the table (TRUNCATE recreates it: no pages of the previous
    /// mode left to purge).
    pub(super) async fn reset(&self) -> Result<()> {
        let mut admin = self.admin.lock().await;
        admin
            .query_drop(format!("TRUNCATE TABLE {}", workload::TABLE))
            .await?;
        Ok(())
    }

    pub(super) async fn count(&self) -> Result<u64> {
        let mut admin = self.admin.lock().await;
        let n: Option<u64> = admin
            .query_first(format!("SELECT COUNT(*) FROM {}", workload::TABLE))
            .await?;
        Ok(n.unwrap_or(0))
    }

    pub(super) async fn load(
        &self,
        mode: Mode,
        data: &Arc<Dataset>,
        cfg: LoadConfig,
        progress: &Progress,
    ) -> Result<Loaded> {
        match mode {
            Mode::Nobatch => self.nobatch(data, progress).await,
            Mode::Batch => self.batch(data, cfg, progress).await,
            Mode::Batchrewrite => self.batchrewrite(data, cfg, progress).await,
            Mode::Coalesce => self.coalesce(data, cfg, progress).await,
            Mode::CoalescePeer => self.coalesce_peer(data, cfg, progress).await,
            Mode::LoadData => self.load_data(data, progress).await,
            other => Err(fail(format!("mariadb has no mode {other}"))),
        }
    }

    /// Drops the scratch database (best effort).
    pub async fn cleanup(self) {
        let admin = self.admin.into_inner();
        let _ = admin.disconnect().await;
        let Ok(mut server) = Conn::new(self.base.clone()).await else {
            return;
        };
        let _ = server
            .query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.dbname))
            .await;
        let _ = server.disconnect().await;
    }

    /// A batchpool pool, `size` connections opened.
    async fn batch_pool(
        &self,
        size: usize,
        batching: BatchConfig,
    ) -> Result<batchpool::mysql::Pool> {
        let pool = batchpool::mysql::Pool::from_opts(self.opts.clone())
            .max_size(size)
            .batching(batching)
            .build()?;
        let open = try_join_all((0..size).map(|_| pool.get())).await?;
        drop(open);
        Ok(pool)
    }

    async fn nobatch(&self, data: &Dataset, progress: &Progress) -> Result<Loaded> {
        let mut conn = Conn::new(self.opts.clone()).await?;
        let sql = insert_sql();
        let started = Instant::now();
        let stmt = conn.prep(&sql).await?;
        for r in &data.rows {
            conn.exec_drop(&stmt, params(r)).await?;
            expect_one(conn.affected_rows(), &r.key)?;
            progress.add(1);
        }
        let elapsed = started.elapsed();
        let _ = conn.disconnect().await;
        Ok(Loaded {
            elapsed,
            latency: None,
            batching: None,
        })
    }

    async fn batch(&self, data: &Dataset, cfg: LoadConfig, progress: &Progress) -> Result<Loaded> {
        let mut conn = Conn::new(self.opts.clone()).await?;
        let sql = insert_sql();
        let started = Instant::now();
        let stmt = conn.prep(&sql).await?;
        for group in data.rows.chunks(cfg.batch_size) {
            conn.exec_batch(&stmt, group.iter().map(params)).await?;
            progress.add(group.len() as u64);
        }
        let elapsed = started.elapsed();
        let _ = conn.disconnect().await;
        Ok(Loaded {
            elapsed,
            latency: None,
            batching: None,
        })
    }

    async fn batchrewrite(
        &self,
        data: &Dataset,
        cfg: LoadConfig,
        progress: &Progress,
    ) -> Result<Loaded> {
        // One caller: one connection; a group of batch-size rows is one
        // statement (within 65535 placeholders and max_allowed_packet).
        let batching = BatchConfig::default().max_rows(cfg.batch_size);
        let pool = self.batch_pool(1, batching).await?;
        let sql = insert_sql();
        let started = Instant::now();
        for group in data.rows.chunks(cfg.batch_size) {
            let outcomes = pool.execute_many(&sql, group.iter().map(params)).await?;
            if outcomes.len() != group.len() {
                return Err(fail(format!(
                    "execute_many returned {} outcomes for {} rows",
                    outcomes.len(),
                    group.len()
                )));
            }
            for (out, r) in outcomes.into_iter().zip(group) {
                expect_one(out?.rows_affected(), &r.key)?;
            }
            progress.add(group.len() as u64);
        }
        let elapsed = started.elapsed();
        let batching = Batching::from_stats(&pool.stats());
        pool.close().await;
        Ok(Loaded {
            elapsed,
            latency: None,
            batching: Some(batching),
        })
    }

    async fn coalesce(
        &self,
        data: &Arc<Dataset>,
        cfg: LoadConfig,
        progress: &Progress,
    ) -> Result<Loaded> {
        let pool = self
            .batch_pool(cfg.pool_size, cfg.coalesce_batching())
            .await?;
        let sql: Arc<str> = insert_sql().into();
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..cfg.tasks)
            .map(|_| {
                let (pool, sql, next, data) =
                    (pool.clone(), sql.clone(), next.clone(), data.clone());
                let done = progress.counter();
                tokio::spawn(async move {
                    let mut hist = histogram();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(r) = data.rows.get(i) else { break };
                        let t = Instant::now();
                        let out = pool.execute(&sql, params(r)).await?;
                        hist.saturating_record(micros(t.elapsed()));
                        expect_one(out.rows_affected(), &r.key)?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, super::BoxError>(hist)
                })
            })
            .collect();
        let hist = join_histograms(tasks).await;
        let elapsed = started.elapsed();
        let batching = Batching::from_stats(&pool.stats());
        pool.close().await;
        Ok(Loaded {
            elapsed,
            latency: Some(hist?),
            batching: Some(batching),
        })
    }

    async fn coalesce_peer(
        &self,
        data: &Arc<Dataset>,
        cfg: LoadConfig,
        progress: &Progress,
    ) -> Result<Loaded> {
        // mysql_async's own pool, as a service would configure it for speed:
        // exactly `pool_size` connections, prepared statements kept, no
        // COM_RESET_CONNECTION when a connection comes back.
        let constraints = PoolConstraints::new(cfg.pool_size, cfg.pool_size)
            .ok_or_else(|| fail("bad --pool-size for mysql_async"))?;
        let opts: Opts = OptsBuilder::from_opts(self.opts.clone())
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(constraints)
                    .with_reset_connection(false),
            )
            .into();
        let pool = mysql_async::Pool::new(opts);
        let open = try_join_all((0..cfg.pool_size).map(|_| pool.get_conn())).await?;
        drop(open);
        let sql: Arc<str> = insert_sql().into();
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..cfg.tasks)
            .map(|_| {
                let (pool, sql, next, data) =
                    (pool.clone(), sql.clone(), next.clone(), data.clone());
                let done = progress.counter();
                tokio::spawn(async move {
                    let mut hist = histogram();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(r) = data.rows.get(i) else { break };
                        let t = Instant::now();
                        let mut conn = pool.get_conn().await?;
                        conn.exec_drop(&*sql, params(r)).await?;
                        let n = conn.affected_rows();
                        drop(conn);
                        hist.saturating_record(micros(t.elapsed()));
                        expect_one(n, &r.key)?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, super::BoxError>(hist)
                })
            })
            .collect();
        let hist = join_histograms(tasks).await;
        let elapsed = started.elapsed();
        let _ = pool.disconnect().await;
        Ok(Loaded {
            elapsed,
            latency: Some(hist?),
            batching: None,
        })
    }

    async fn load_data(&self, data: &Arc<Dataset>, progress: &Progress) -> Result<Loaded> {
        let mut conn = Conn::new(self.opts.clone()).await?;
        let started = Instant::now();
        // The file is encoded while it streams, 1024 rows a chunk (the
        // clock includes encoding, as COPY's does).
        let rows = data.clone();
        let done = progress.counter();
        conn.set_infile_handler(async move {
            let chunks = futures_util::stream::iter(0..rows.len().div_ceil(1024)).map(move |i| {
                let end = ((i + 1) * 1024).min(rows.len());
                let chunk = tsv_chunk(&rows.rows[i * 1024..end]);
                done.fetch_add((end - i * 1024) as u64, Ordering::Relaxed);
                Ok(chunk)
            });
            Ok(chunks.boxed())
        });
        conn.query_drop(load_data_sql()).await?;
        let n = conn.affected_rows();
        let warnings = conn.get_warnings();
        let elapsed = started.elapsed();
        let _ = conn.disconnect().await;
        if n != data.len() as u64 || warnings != 0 {
            return Err(fail(format!(
                "LOAD DATA reported {n} rows and {warnings} warnings, expected {} and 0",
                data.len()
            )));
        }
        Ok(Loaded {
            elapsed,
            latency: None,
            batching: None,
        })
    }
}

/// Each single-row INSERT must report exactly one row.
fn expect_one(n: u64, key: &str) -> Result<()> {
    if n == 1 {
        Ok(())
    } else {
        Err(fail(format!(
            "INSERT of {key} reported {n} rows, expected 1"
        )))
    }
}

/// Awaits every task and merges their histograms; the first error wins.
async fn join_histograms(
    tasks: Vec<tokio::task::JoinHandle<Result<hdrhistogram::Histogram<u64>>>>,
) -> Result<hdrhistogram::Histogram<u64>> {
    let mut all = histogram();
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(h)) => all.add(&h).map_err(|e| fail(format!("histogram: {e:?}")))?,
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(e.into());
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(all),
    }
}
