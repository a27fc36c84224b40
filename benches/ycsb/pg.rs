//! PostgreSQL: the scratch database, `usertable`, and what the six write
//! paths need from tokio-postgres.
//!
//! The peers (`nobatch`, `batch`, `coalesce-peer`, `copy`) use plain
//! deadpool-postgres / tokio-postgres; `batchrewrite` and `coalesce` use
//! batchpool. Every pool opens its connections before the clock starts.

use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use batchpool::BatchConfig;
use futures_util::future::try_join_all;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::modes::{Batchpool, RowWriter, Session, batchpool_writer, expect_one, open_all};
use super::workload::{self, Dataset, FIELD_COUNT, Record};
use super::{Database, Loaded, Mode, Progress, Result, fail, scratch_name};

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
pub static INSERT: LazyLock<String> = LazyLock::new(|| workload::insert_sql(|i| format!("${i}")));

/// `COPY usertable (...) FROM STDIN (FORMAT binary)`.
pub fn copy_sql() -> String {
    format!(
        "COPY {} ({}) FROM STDIN (FORMAT binary)",
        workload::TABLE,
        workload::columns().join(", ")
    )
}

async fn connect(config: &Config) -> Result<Client> {
    let (client, conn) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The PostgreSQL side of the bench: a scratch database on the server,
/// created by [`create`](Database::create) and dropped by
/// [`cleanup`](Database::cleanup).
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
    /// The scratch database's connection config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A plain deadpool-postgres pool of `size` connections (prepared
    /// statements cached), not opened yet: the peers' pool.
    fn plain_pool(&self, size: usize) -> Result<deadpool_postgres::Pool> {
        let manager = deadpool_postgres::Manager::from_config(
            self.config.clone(),
            NoTls,
            deadpool_postgres::ManagerConfig::default(),
        );
        let builder = deadpool_postgres::Pool::builder(manager);
        Ok(builder.max_size(size).build()?)
    }
}

impl Database for PgTarget {
    const NAME: &'static str = "postgresql";
    const BULK: Mode = Mode::Copy;
    const SETTINGS: &'static str =
        "fsync synchronous_commit full_page_writes wal_level shared_buffers max_wal_size";

    /// `url`: any libpq URL or `key=value` string.
    async fn create(url: &str) -> Result<PgTarget> {
        let base = Config::from_str(url).map_err(|e| fail(format!("bad --pg-url: {e}")))?;
        let server = connect(&base)
            .await
            .map_err(|e| fail(format!("cannot connect to PostgreSQL: {e}")))?;
        let dbname = scratch_name();
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

    fn address(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!("{host}:{port}")
    }

    async fn version(&self) -> Result<String> {
        Ok(self.admin.query_one("SELECT version()", &[]).await?.get(0))
    }

    async fn setting(&self, name: &str) -> Result<String> {
        let row = self.admin.query_one(&format!("SHOW {name}"), &[]).await?;
        Ok(row.get(0))
    }

    async fn prepare(&self) -> Result<()> {
        let sql = format!(
            "DROP TABLE IF EXISTS {}; {}",
            workload::TABLE,
            workload::create_table_sql()
        );
        self.admin.batch_execute(&sql).await?;
        Ok(())
    }

    /// Empties the table, then asks for a checkpoint (best effort: it needs
    /// superuser or pg_checkpoint) so every mode starts with no dirty pages
    /// of the previous one to write.
    async fn reset(&self) -> Result<()> {
        self.admin
            .batch_execute(&format!("TRUNCATE {}", workload::TABLE))
            .await?;
        let _ = self.admin.batch_execute("CHECKPOINT").await;
        Ok(())
    }

    async fn count(&self) -> Result<u64> {
        let sql = format!("SELECT count(*) FROM {}", workload::TABLE);
        let n: i64 = self.admin.query_one(&sql, &[]).await?.get(0);
        Ok(n as u64)
    }

    /// Drops the scratch database (best effort).
    async fn cleanup(self) {
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

    /// A connection of a one-connection deadpool-postgres pool.
    async fn session(&self) -> Result<impl Session> {
        Ok(self.plain_pool(1)?.get().await?)
    }

    fn batch_pool(&self, size: usize, batching: BatchConfig) -> Result<impl Batchpool> {
        let builder = batchpool::postgres::Pool::from_config(self.config.clone());
        Ok(builder.max_size(size).batching(batching).build()?)
    }

    fn peer_pool(&self, size: usize) -> Result<impl RowWriter> {
        self.plain_pool(size)
    }

    /// Binary COPY in one stream.
    async fn bulk(&self, data: &Arc<Dataset>, progress: &Progress) -> Result<Loaded> {
        let client = self.plain_pool(1)?.get().await?;
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
        Ok(Loaded::plain(elapsed))
    }
}

/// `nobatch`, `batch` (and `copy`) run on one deadpool-postgres connection.
impl Session for deadpool_postgres::Object {
    type Stmt = Statement;

    async fn prepare(&mut self) -> Result<Statement> {
        Ok(self.prepare_cached(&INSERT).await?)
    }

    async fn insert(&mut self, stmt: &Statement, r: &Record) -> Result<u64> {
        Ok(self.execute(stmt, &params(r)).await?)
    }

    async fn insert_group(&mut self, stmt: &Statement, group: &[Record]) -> Result<()> {
        let c: &Client = self;
        // All of the group's statements are sent before the first reply is
        // awaited (tokio-postgres pipelines concurrent requests on a
        // connection); each one commits on its own.
        let counts = try_join_all(
            group
                .iter()
                .map(|r| async move { c.execute(stmt, &params(r)).await }),
        )
        .await?;
        for (n, r) in counts.into_iter().zip(group) {
            expect_one(n, &r.key)?;
        }
        Ok(())
    }

    async fn close(self) {}
}

batchpool_writer!(batchpool::postgres::Pool, &INSERT, |r| &params(r), params);

/// `coalesce-peer`: each row takes a pooled connection and its cached
/// prepared statement.
impl RowWriter for deadpool_postgres::Pool {
    async fn open(&self, size: usize) -> Result<()> {
        open_all(size, |_| self.get()).await
    }

    async fn insert(&self, r: &Record) -> Result<u64> {
        let client = self.get().await?;
        let stmt = client.prepare_cached(&INSERT).await?;
        Ok(client.execute(&stmt, &params(r)).await?)
    }

    async fn release(self) {
        self.close();
    }
}
