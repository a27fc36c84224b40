//! PostgreSQL: the scratch database, `usertable`, and the six write paths.
//!
//! The peers (`nobatch`, `batch`, `coalesce-peer`, `copy`) use plain
//! deadpool-postgres / tokio-postgres; `batchrewrite` and `coalesce` use
//! batchpool. Every pool opens its connections before the clock starts.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use batchpool::BatchConfig;
use futures_util::future::try_join_all;
use hdrhistogram::Histogram;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls};

use super::report::Batching;
use super::workload::{self, Dataset, FIELD_COUNT, Record};
use super::{LoadConfig, Loaded, Mode, Progress, Result, ServerInfo, Setting, fail};

/// Parameters of one row: key, then the ten fields.
pub type RowParams<'a> = [&'a (dyn ToSql + Sync); 1 + FIELD_COUNT];

/// Binds a record as the 11 parameters of the single-row INSERT.
pub fn params(r: &Record) -> RowParams<'_> {
    let f = &r.fields;
    [
        &r.key, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9],
    ]
}

/// `INSERT INTO usertable (YCSB_KEY, FIELD0, ...) VALUES ($1, ..., $11)`.
pub fn insert_sql() -> String {
    let cols = workload::columns();
    let params: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
    format!(
        "INSERT INTO {} ({}) VALUES ({})",
        workload::TABLE,
        cols.join(", "),
        params.join(", ")
    )
}

/// `COPY usertable (...) FROM STDIN (FORMAT binary)`.
pub fn copy_sql() -> String {
    format!(
        "COPY {} ({}) FROM STDIN (FORMAT binary)",
        workload::TABLE,
        workload::columns().join(", ")
    )
}

/// A new histogram of microseconds (1 µs to 1 h, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

async fn connect(config: &Config) -> Result<Client> {
    let (client, conn) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The PostgreSQL side of the bench: a scratch database on the server,
/// created by [`create`](PgTarget::create) and dropped by
/// [`cleanup`](PgTarget::cleanup).
pub struct PgTarget {
    /// Connection to the server's own database (for DROP DATABASE).
    base: Config,
    /// The scratch database.
    config: Config,
    /// Name of the scratch database.
    dbname: String,
    /// Connection to the scratch database (schema, TRUNCATE, count).
    admin: Client,
}

impl PgTarget {
    /// Connects to `url` (any libpq URL or `key=value` string) and creates a
    /// uniquely named scratch database there (`bp_<pid>_<n>_<nanos>`, the
    /// test harness' pattern, so leftovers of a killed run are swept).
    pub async fn create(url: &str) -> Result<PgTarget> {
        let base = Config::from_str(url).map_err(|e| fail(format!("bad --pg-url: {e}")))?;
        let server = connect(&base)
            .await
            .map_err(|e| fail(format!("cannot connect to PostgreSQL: {e}")))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dbname = format!("bp_{}_7{}_{nanos}", std::process::id(), nanos % 1000);
        server
            .batch_execute(&format!("CREATE DATABASE \"{dbname}\""))
            .await
            .map_err(|e| fail(format!("CREATE DATABASE {dbname} failed: {e}")))?;
        let mut config = base.clone();
        config.dbname(&dbname);
        let admin = connect(&config).await?;
        Ok(PgTarget {
            base,
            config,
            dbname,
            admin,
        })
    }

    /// The scratch database's connection config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Host:port of the server, for the report.
    pub fn address(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!("{host}:{port}")
    }

    pub(super) async fn describe(&self) -> Result<ServerInfo> {
        let version: String = self.admin.query_one("SELECT version()", &[]).await?.get(0);
        let mut settings = Vec::new();
        for name in [
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "wal_level",
            "shared_buffers",
            "max_wal_size",
        ] {
            let row = self.admin.query_one(&format!("SHOW {name}"), &[]).await?;
            settings.push(Setting {
                name: name.to_string(),
                value: row.get(0),
            });
        }
        Ok(ServerInfo {
            database: "postgresql".into(),
            version,
            settings,
        })
    }

    pub(super) async fn prepare(&self) -> Result<()> {
        let fields: Vec<String> = (0..FIELD_COUNT).map(|i| format!("FIELD{i} TEXT")).collect();
        self.admin
            .batch_execute(&format!(
                "DROP TABLE IF EXISTS {t}; \
                 CREATE TABLE {t} (YCSB_KEY VARCHAR(255) PRIMARY KEY, {})",
                fields.join(", "),
                t = workload::TABLE
            ))
            .await?;
        Ok(())
    }

    /// Empties the table, then asks for a checkpoint (best effort: it needs
    /// superuser or pg_checkpoint) so every mode starts with no dirty pages
    /// of the previous one to write.
    pub(super) async fn reset(&self) -> Result<()> {
        self.admin
            .batch_execute(&format!("TRUNCATE {}", workload::TABLE))
            .await?;
        let _ = self.admin.batch_execute("CHECKPOINT").await;
        Ok(())
    }

    pub(super) async fn count(&self) -> Result<u64> {
        let n: i64 = self
            .admin
            .query_one(&format!("SELECT count(*) FROM {}", workload::TABLE), &[])
            .await?
            .get(0);
        Ok(n as u64)
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
            Mode::Copy => self.copy(data, progress).await,
            Mode::LoadData => Err(fail("postgresql has no mode load-data")),
        }
    }

    /// Drops the scratch database (best effort).
    pub async fn cleanup(self) {
        drop(self.admin);
        let Ok(server) = connect(&self.base).await else {
            return;
        };
        let name = &self.dbname;
        if server
            .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
            .await
            .is_err()
        {
            // Before PostgreSQL 13: no FORCE; the closed connections may
            // take a moment to go.
            for _ in 0..20 {
                let sql = format!("DROP DATABASE IF EXISTS \"{name}\"");
                if server.batch_execute(&sql).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// A plain deadpool-postgres pool (the peer), `size` connections opened.
    async fn peer_pool(&self, size: usize) -> Result<deadpool_postgres::Pool> {
        let manager = deadpool_postgres::Manager::from_config(
            self.config.clone(),
            NoTls,
            deadpool_postgres::ManagerConfig::default(),
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(size)
            .build()?;
        let open = try_join_all((0..size).map(|_| pool.get())).await?;
        drop(open);
        Ok(pool)
    }

    /// A batchpool pool, `size` connections opened.
    async fn batch_pool(
        &self,
        size: usize,
        batching: BatchConfig,
    ) -> Result<batchpool::postgres::Pool> {
        let pool = batchpool::postgres::Pool::from_config(self.config.clone())
            .max_size(size)
            .batching(batching)
            .build()?;
        let open = try_join_all((0..size).map(|_| pool.get())).await?;
        drop(open);
        Ok(pool)
    }

    async fn nobatch(&self, data: &Dataset, progress: &Progress) -> Result<Loaded> {
        let pool = self.peer_pool(1).await?;
        let client = pool.get().await?;
        let sql = insert_sql();
        let started = Instant::now();
        let stmt = client.prepare_cached(&sql).await?;
        for r in &data.rows {
            let n = client.execute(&stmt, &params(r)).await?;
            expect_one(n, &r.key)?;
            progress.add(1);
        }
        let elapsed = started.elapsed();
        Ok(Loaded {
            elapsed,
            latency: None,
            batching: None,
        })
    }

    async fn batch(&self, data: &Dataset, cfg: LoadConfig, progress: &Progress) -> Result<Loaded> {
        let pool = self.peer_pool(1).await?;
        let client = pool.get().await?;
        let sql = insert_sql();
        let started = Instant::now();
        let stmt = client.prepare_cached(&sql).await?;
        let c: &Client = &client;
        for group in data.rows.chunks(cfg.batch_size) {
            // All of the group's statements are sent before the first reply
            // is awaited (tokio-postgres pipelines concurrent requests on a
            // connection); each one commits on its own.
            let counts = try_join_all(group.iter().map(|r| {
                let stmt = &stmt;
                async move { c.execute(stmt, &params(r)).await }
            }))
            .await?;
            for (n, r) in counts.into_iter().zip(group) {
                expect_one(n, &r.key)?;
            }
            progress.add(group.len() as u64);
        }
        let elapsed = started.elapsed();
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
        // statement (up to PostgreSQL's 65535-parameter limit).
        let batching = BatchConfig::default().max_rows(cfg.batch_size);
        let pool = self.batch_pool(1, batching).await?;
        let sql = insert_sql();
        let started = Instant::now();
        for group in data.rows.chunks(cfg.batch_size) {
            let rows: Vec<RowParams<'_>> = group.iter().map(params).collect();
            let outcomes = pool.execute_many(&sql, &rows).await?;
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
                        let out = pool.execute(&sql, &params(r)).await?;
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
        let pool = self.peer_pool(cfg.pool_size).await?;
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
                        let client = pool.get().await?;
                        let stmt = client.prepare_cached(&sql).await?;
                        let n = client.execute(&stmt, &params(r)).await?;
                        drop(client);
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
        pool.close();
        Ok(Loaded {
            elapsed,
            latency: Some(hist?),
            batching: None,
        })
    }

    async fn copy(&self, data: &Dataset, progress: &Progress) -> Result<Loaded> {
        let pool = self.peer_pool(1).await?;
        let client = pool.get().await?;
        let mut types = vec![Type::VARCHAR];
        types.extend([Type::TEXT; FIELD_COUNT]);
        let started = Instant::now();
        let sink = client.copy_in(&copy_sql()).await?;
        let writer = tokio_postgres::binary_copy::BinaryCopyInWriter::new(sink, &types);
        let mut writer = std::pin::pin!(writer);
        for (i, r) in data.rows.iter().enumerate() {
            writer.as_mut().write(&params(r)).await?;
            if i % 1024 == 1023 {
                progress.add(1024);
            }
        }
        let n = writer.finish().await?;
        let elapsed = started.elapsed();
        progress.add(data.len() as u64 % 1024);
        if n != data.len() as u64 {
            return Err(fail(format!(
                "COPY reported {n} rows, expected {}",
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
    tasks: Vec<tokio::task::JoinHandle<Result<Histogram<u64>>>>,
) -> Result<Histogram<u64>> {
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
