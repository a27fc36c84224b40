//! PostgreSQL: the scratch database, `usertable`, and what the six write
//! paths need from tokio-postgres.
//!
//! The peers (`nobatch`, `batch`, `rewrite-peer`, `coalesce-peer`, `copy`) use plain
//! deadpool-postgres / tokio-postgres; `batchrewrite` and `coalesce` use
//! batchpool. Every pool opens its connections before the clock starts.
//!
//! The statement mode (`--statements`, see [`super::statements`]) goes to
//! batchpool's builder; the peers send what batchpool sends: named
//! statements prepared once per connection and cached (`prepare_cached`),
//! or, in unnamed mode (behind a transaction-mode pooler such as
//! PgBouncer), one unnamed Parse/Bind/Execute per row with the table's
//! column types (`execute_typed`). The admin queries use the simple
//! protocol, which works either way.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use batchpool::BatchConfig;
use batchpool::postgres::{Pooler, Statements};
use futures_util::future::try_join_all;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::modes::{
    Batchpool, ReadRow, RowWriter, Session, batchpool_writer, expect_one, open_all,
};
use super::workload::{self, Dataset, FIELD_COUNT, Record};
use super::{
    Cluster, Database, Loaded, Mode, Progress, Result, StatementMode, fail, scratch_name,
    statements,
};

/// How long `--cluster pg-sync` waits for a synchronous standby to stream.
const STANDBY_WAIT: Duration = Duration::from_secs(60);

/// Parameters of one row: key, then the ten fields.
pub type RowParams<'a> = [&'a (dyn ToSql + Sync); 1 + FIELD_COUNT];

/// Binds a record as the 11 parameters of the single-row INSERT.
pub fn params(r: &Record) -> RowParams<'_> {
    let f = &r.fields;
    [
        &r.key, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9],
    ]
}

/// The INSERT's parameter types, as the server infers them from the columns
/// (`YCSB_KEY VARCHAR(255)`, `FIELDn TEXT`): what unnamed statements and
/// binary COPY send.
pub fn types() -> [Type; 1 + FIELD_COUNT] {
    std::array::from_fn(|i| if i == 0 { Type::VARCHAR } else { Type::TEXT })
}

/// A record's parameters with their types, for `execute_typed`.
pub fn typed(r: &Record) -> [(&(dyn ToSql + Sync), Type); 1 + FIELD_COUNT] {
    let (p, t) = (params(r), types());
    std::array::from_fn(|i| (p[i], t[i].clone()))
}

/// `INSERT INTO usertable (YCSB_KEY, FIELD0, ...) VALUES ($1, ..., $11)`.
pub static INSERT: LazyLock<String> = LazyLock::new(|| workload::insert_sql(|i| format!("${i}")));

/// `SELECT * FROM usertable WHERE YCSB_KEY = $1`: the run phase's read.
pub static READ: LazyLock<String> = LazyLock::new(|| workload::read_sql("$1"));

/// `UPDATE usertable SET FIELDn = $1 WHERE YCSB_KEY = $2`, one per field:
/// the run phase's update.
pub static UPDATE: LazyLock<[String; FIELD_COUNT]> =
    LazyLock::new(|| std::array::from_fn(|n| workload::update_sql(n, "$1", "$2")));

/// The statement of `FIELD<field>`'s update.
fn update_text(field: usize) -> Result<&'static str> {
    UPDATE
        .get(field)
        .map(String::as_str)
        .ok_or_else(|| fail(format!("no FIELD{field}")))
}

/// A row the run phase's read returned: its key (the first column) and
/// its number of columns.
fn read_row(row: &tokio_postgres::Row) -> Result<ReadRow> {
    Ok(ReadRow {
        key: row.try_get(0)?,
        columns: row.len(),
    })
}

/// The run phase's read on batchpool's pool (`query`).
async fn batchpool_read(pool: &batchpool::postgres::Pool, key: &str) -> Result<Vec<ReadRow>> {
    let rows = pool.query(&READ, &[&key]).await?;
    rows.iter().map(read_row).collect()
}

/// The run phase's update on batchpool's pool (`execute`).
async fn batchpool_update(
    pool: &batchpool::postgres::Pool,
    key: &str,
    field: usize,
    value: &str,
) -> Result<u64> {
    let sql = update_text(field)?;
    Ok(pool.execute(sql, &[&value, &key]).await?.rows_affected())
}

/// Most bind parameters in one statement (the protocol's Int16 count).
pub const MAX_PARAMS: usize = 65535;

/// `INSERT INTO usertable (...) VALUES ($1, ..., $11), ($12, ...), ...`
/// for `rows` rows (`rewrite-peer`).
pub fn insert_rows_sql(rows: usize) -> String {
    workload::insert_rows_sql(rows, |i| format!("${i}"))
}

/// `COPY usertable (...) FROM STDIN (FORMAT binary)`.
pub fn copy_sql() -> String {
    format!(
        "COPY {} ({}) FROM STDIN (FORMAT binary)",
        workload::TABLE,
        workload::columns().join(", ")
    )
}

async fn connect(config: &Config, tls: &MakeRustlsConnect) -> Result<Client> {
    let (client, conn) = config.connect(tls.clone()).await?;
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
    /// The statement mode: `--statements`, else the URL's `statements=`,
    /// else `auto`. batchpool's builder gets it.
    mode: Statements,
    /// `statements=` of the URL (taken out: the peers' drivers refuse it).
    url_mode: Option<Statements>,
    /// A pooler that shares server sessions sits between the bench and the
    /// server (batchpool's own test, [`far`](Self::far)).
    pooler: bool,
    /// What sits between, as batchpool's `auto` finds it
    /// (`batchpool::postgres::find_pooler`).
    far: Pooler,
    /// The URL's TLS settings (`sslmode=require`...), for batchpool's
    /// builder.
    tls: batchpool::postgres::TlsConfig,
    /// The admin connection is encrypted (for the report).
    encrypted: bool,
    /// The peers' TLS connector: the one batchpool builds for the same
    /// settings (unused under `sslmode=disable`).
    connector: MakeRustlsConnect,
    /// `--bulk-threshold` for batchpool's pools (`PoolBuilder::copy_threshold`;
    /// `None`: library default).
    bulk_threshold: Option<Option<usize>>,
}

impl PgTarget {
    /// The scratch database's connection config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the peers send unnamed statements (as batchpool does).
    pub fn peers_unnamed(&self) -> bool {
        statements::peers_unnamed(self.mode, self.pooler)
    }

    /// A plain deadpool-postgres pool of `size` connections (prepared
    /// statements cached), not opened yet: the peers' pool. Each new
    /// connection is checked as batchpool checks its own: a transaction
    /// something between began ahead of its writes (pgpool-II in raw mode)
    /// is committed once (`batchpool::postgres::ensure_autocommit`), or its
    /// rows would never be.
    fn plain_pool(&self, size: usize) -> Result<deadpool_postgres::Pool> {
        let manager = deadpool_postgres::Manager::from_config(
            self.config.clone(),
            self.connector.clone(),
            deadpool_postgres::ManagerConfig::default(),
        );
        let builder = deadpool_postgres::Pool::builder(manager).post_create(
            deadpool_postgres::Hook::async_fn(|client, _| {
                Box::pin(async move {
                    batchpool::postgres::ensure_autocommit(client)
                        .await
                        .map_err(|e| deadpool_postgres::HookError::message(e.to_string()))
                })
            }),
        );
        Ok(builder.max_size(size).build()?)
    }
}

impl Database for PgTarget {
    const NAME: &'static str = "postgresql";
    const BULK: Mode = Mode::Copy;
    const SETTINGS: &'static str = "fsync synchronous_commit synchronous_standby_names full_page_writes wal_level \
         shared_buffers max_wal_size";

    /// `url`: any libpq URL or `key=value` string, possibly with
    /// batchpool's `statements=` (taken out here), possibly a pooler's.
    async fn create(url: &str) -> Result<PgTarget> {
        let (rest, url_mode) =
            statements::split(url).map_err(|e| fail(format!("--pg-url: {e}")))?;
        let (rest, tls, connector) =
            statements::tls(&rest).map_err(|e| fail(format!("--pg-url: {e}")))?;
        let base = Config::from_str(&rest).map_err(|e| fail(format!("bad --pg-url: {e}")))?;
        let server = connect(&base, &connector)
            .await
            .map_err(|e| fail(format!("cannot connect to PostgreSQL: {e}")))?;
        // What is between, as batchpool's `auto` finds it, asked on a
        // connection of its own (PgBouncer in statement mode closes it).
        let far = {
            let probe = connect(&base, &connector)
                .await
                .map_err(|e| fail(format!("cannot connect to PostgreSQL: {e}")))?;
            batchpool::postgres::find_pooler(&probe).await?
        };
        let pooler = matches!(far, Pooler::Transaction | Pooler::Statement);
        let dbname = scratch_name();
        server
            .batch_execute(&format!("CREATE DATABASE \"{dbname}\""))
            .await
            .map_err(|e| fail(format!("CREATE DATABASE {dbname} failed: {e}")))?;
        let mut config = base.clone();
        config.dbname(&dbname);
        let admin = match connect(&config, &connector).await {
            Ok(admin) => admin,
            Err(e) => {
                let _ = server
                    .batch_execute(&format!("DROP DATABASE IF EXISTS \"{dbname}\""))
                    .await;
                let hint = if pooler {
                    " (behind a pooler, the scratch database needs a wildcard entry: \
                     PgBouncer `[databases] * = host=... port=...`)"
                } else {
                    ""
                };
                return Err(fail(format!(
                    "cannot connect to the scratch database {dbname}{hint}: {e}"
                )));
            }
        };
        let encrypted = statements::simple_first(
            &admin,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        )
        .await
        .is_ok_and(|ssl| ssl == "t");
        Ok(PgTarget {
            encrypted,
            base,
            config,
            dbname,
            admin,
            mode: url_mode.unwrap_or_default(),
            url_mode,
            pooler,
            far,
            tls,
            connector,
            bulk_threshold: None,
        })
    }

    fn set_bulk_threshold(&mut self, rows: Option<Option<usize>>) {
        self.bulk_threshold = rows;
    }

    fn set_statements(&mut self, flag: Option<Statements>) -> Result<()> {
        self.mode = statements::effective(flag, self.url_mode).map_err(fail)?;
        Ok(())
    }

    fn statements(&self) -> Option<StatementMode> {
        let sent = if self.peers_unnamed() {
            "unnamed"
        } else {
            "named"
        };
        Some(StatementMode {
            mode: self.mode.to_string(),
            pooler: self.pooler,
            sent: sent.into(),
            between: self.far.to_string(),
        })
    }

    /// `copy` where the far end cannot carry it, as batchpool leaves COPY
    /// out there: the peers' COPY runs inside a transaction behind a pooler
    /// (which PgBouncer in statement mode refuses), and tokio-postgres's COPY
    /// stalls behind pgpool-II.
    fn unavailable(&self, mode: Mode) -> Option<String> {
        match (mode, self.far) {
            (Mode::Copy, Pooler::Statement) => Some(
                "PgBouncer in statement mode refuses the transaction block the COPY runs in \
                 (batchpool sends multi-row INSERTs there)"
                    .into(),
            ),
            (Mode::Copy, Pooler::Pgpool) => Some(
                "tokio-postgres's COPY (an extended-query COPY) never gets its data through \
                 pgpool-II: the server waits for data pgpool-II does not pass on (batchpool \
                 sends multi-row INSERTs there)"
                    .into(),
            ),
            _ => None,
        }
    }

    /// The postmaster: the parent of the admin connection's backend.
    async fn server_pid(&self) -> Option<u32> {
        let pid = statements::simple_first(&self.admin, "SELECT pg_backend_pid()")
            .await
            .ok()?
            .parse()
            .ok()?;
        let backend = super::cpu::local_process(pid, &["postgres"])?;
        super::cpu::local_process(super::cpu::parent(backend)?, &["postgres"])
    }

    fn address(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let tls = if self.encrypted { " (TLS)" } else { "" };
        format!("{host}:{port}{tls}")
    }

    async fn version(&self) -> Result<String> {
        Ok(statements::simple_first(&self.admin, "SELECT version()").await?)
    }

    /// `--cluster pg-sync`: waits (up to a minute) until the server has a
    /// synchronous standby streaming (`pg_stat_replication`) and its
    /// commits wait for it (`synchronous_commit` on, `remote_write` or
    /// `remote_apply`); describes the standbys.
    async fn topology(&self, cluster: Option<Cluster>) -> Result<Option<String>> {
        match cluster {
            None => return Ok(None),
            Some(Cluster::Galera) => {
                return Err(fail("--cluster galera is MariaDB's: use --db mariadb"));
            }
            Some(Cluster::PgSync) => {}
        }
        let commit = statements::simple_first(&self.admin, "SHOW synchronous_commit").await?;
        if !matches!(commit.as_str(), "on" | "remote_write" | "remote_apply") {
            return Err(fail(format!(
                "--cluster pg-sync: synchronous_commit is {commit}, so commits do not wait \
                 for the standby"
            )));
        }
        let sql = "SELECT string_agg(application_name || ' (' || sync_state || ')', ', ') \
                   FROM pg_stat_replication \
                   WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')";
        let deadline = Instant::now() + STANDBY_WAIT;
        loop {
            let standbys = statements::simple_first(&self.admin, sql).await?;
            if !standbys.is_empty() {
                return Ok(Some(format!(
                    "PostgreSQL primary with synchronous standby {standbys}, \
                     synchronous_commit={commit}: every commit waits for the standby; \
                     every mode writes on the primary"
                )));
            }
            if Instant::now() > deadline {
                return Err(fail(format!(
                    "--cluster pg-sync: no synchronous standby streaming from {} within \
                     {STANDBY_WAIT:?} (pg_stat_replication; synchronous_standby_names)",
                    self.address()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn setting(&self, name: &str) -> Result<String> {
        Ok(statements::simple_first(&self.admin, &format!("SHOW {name}")).await?)
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

    /// A checkpoint (best effort, as in [`reset`](Database::reset)).
    async fn settle(&self) {
        let _ = self.admin.batch_execute("CHECKPOINT").await;
    }

    async fn count(&self) -> Result<u64> {
        let sql = format!("SELECT count(*) FROM {}", workload::TABLE);
        let n = statements::simple_first(&self.admin, &sql).await?;
        n.parse()
            .map_err(|e| fail(format!("count(*) = {n:?}: {e}")))
    }

    /// Drops the scratch database (best effort).
    async fn cleanup(self) {
        drop(self.admin);
        let Ok(server) = connect(&self.base, &self.connector).await else {
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
        Ok(PgSession {
            client: self.plain_pool(1)?.get().await?,
            unnamed: self.peers_unnamed(),
            multi: HashMap::new(),
        })
    }

    fn batch_pool(&self, size: usize, batching: BatchConfig) -> Result<impl Batchpool> {
        let mut builder = batchpool::postgres::Pool::from_config(self.config.clone())
            .statements(self.mode)
            .ssl_mode(self.tls.mode());
        if let Some(root) = self.tls.root_cert() {
            builder = builder.ssl_root_cert(root);
        }
        if let Some(rows) = self.bulk_threshold {
            builder = builder.copy_threshold(rows);
        }
        Ok(builder.max_size(size).batching(batching).build()?)
    }

    fn peer_pool(&self, size: usize) -> Result<impl RowWriter> {
        Ok(PeerPool {
            pool: self.plain_pool(size)?,
            unnamed: self.peers_unnamed(),
        })
    }

    /// Binary COPY: in one stream, or (the sweep) one COPY per `group`
    /// rows, one after the other on one connection, each its own autocommit
    /// statement. tokio-postgres prepares a COPY before running it (a
    /// round trip of its own): in named mode the statement is prepared once
    /// (cached, as the other peers' statements); in unnamed mode each COPY
    /// runs inside `BEGIN` ... `COMMIT` with its own prepare, so a
    /// transaction-mode pooler keeps the one server connection from the
    /// prepare to the statement's close, and none is left behind on the
    /// server.
    async fn bulk(
        &self,
        data: &Arc<Dataset>,
        group: Option<usize>,
        progress: &Progress,
    ) -> Result<Loaded> {
        let client = self.plain_pool(1)?.get().await?;
        let unnamed = self.peers_unnamed();
        let types = types();
        let sql = copy_sql();
        let group = group.unwrap_or(data.len()).max(1);
        let started = Instant::now();
        let stmt = if unnamed {
            None
        } else {
            Some(client.prepare_cached(&sql).await?)
        };
        for rows in data.rows.chunks(group) {
            if unnamed {
                client.batch_execute("BEGIN").await?;
            }
            let sink = match &stmt {
                Some(stmt) => client.copy_in(stmt).await?,
                None => client.copy_in(&sql).await?,
            };
            let writer = tokio_postgres::binary_copy::BinaryCopyInWriter::new(sink, &types);
            let mut writer = std::pin::pin!(writer);
            for (i, r) in rows.iter().enumerate() {
                writer.as_mut().write(&params(r)).await?;
                if i % 1024 == 1023 {
                    progress.add(1024);
                }
            }
            let n = writer.finish().await?;
            if unnamed {
                client.batch_execute("COMMIT").await?;
            }
            progress.add(rows.len() as u64 % 1024);
            if n != rows.len() as u64 {
                return Err(fail(format!(
                    "COPY reported {n} rows, expected {}",
                    rows.len()
                )));
            }
        }
        Ok(Loaded::plain(started.elapsed()))
    }
}

/// `nobatch`, `batch` and `rewrite-peer` run on one deadpool-postgres
/// connection.
pub struct PgSession {
    client: deadpool_postgres::Object,
    /// Unnamed statements (`execute_typed`) instead of a cached prepared one.
    unnamed: bool,
    /// `rewrite-peer`: the multi-row statement of each row count, its text
    /// built once, prepared once (named mode; `None` in unnamed mode).
    multi: HashMap<usize, (String, Option<Statement>)>,
}

impl PgSession {
    /// One INSERT of `r`: the prepared statement, or unnamed (`None`).
    async fn execute(client: &Client, stmt: Option<&Statement>, r: &Record) -> Result<u64> {
        Ok(match stmt {
            Some(stmt) => client.execute(stmt, &params(r)).await?,
            None => client.execute_typed(&INSERT, &typed(r)).await?,
        })
    }
}

impl Session for PgSession {
    /// The cached prepared INSERT; `None` in unnamed mode.
    type Stmt = Option<Statement>;

    async fn prepare(&mut self) -> Result<Option<Statement>> {
        if self.unnamed {
            return Ok(None);
        }
        Ok(Some(self.client.prepare_cached(&INSERT).await?))
    }

    async fn insert(&mut self, stmt: &Option<Statement>, r: &Record) -> Result<u64> {
        PgSession::execute(&self.client, stmt.as_ref(), r).await
    }

    async fn insert_group(&mut self, stmt: &Option<Statement>, group: &[Record]) -> Result<()> {
        let c: &Client = &self.client;
        // All of the group's statements are sent before the first reply is
        // awaited (tokio-postgres pipelines concurrent requests on a
        // connection); each one commits on its own.
        let counts = try_join_all(
            group
                .iter()
                .map(|r| PgSession::execute(c, stmt.as_ref(), r)),
        )
        .await?;
        for (n, r) in counts.into_iter().zip(group) {
            expect_one(n, &r.key)?;
        }
        Ok(())
    }

    fn max_rows(&self, _row_bytes: usize) -> usize {
        MAX_PARAMS / (1 + FIELD_COUNT)
    }

    async fn insert_rows(&mut self, rows: &[Record]) -> Result<u64> {
        let n = rows.len();
        let (sql, stmt) = match self.multi.entry(n) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let sql = insert_rows_sql(n);
                let stmt = if self.unnamed {
                    None
                } else {
                    Some(self.client.prepare(&sql).await?)
                };
                e.insert((sql, stmt))
            }
        };
        Ok(match stmt {
            Some(stmt) => {
                let params: Vec<&(dyn ToSql + Sync)> = rows.iter().flat_map(params).collect();
                self.client.execute(stmt, &params).await?
            }
            // As the other peers in unnamed mode: one unnamed
            // Parse/Bind/Execute with the columns' types.
            None => {
                let typed: Vec<(&(dyn ToSql + Sync), Type)> = rows.iter().flat_map(typed).collect();
                self.client.execute_typed(sql, &typed).await?
            }
        })
    }

    async fn close(self) {}
}

batchpool_writer!(
    batchpool::postgres::Pool,
    &INSERT,
    |r| &params(r),
    params,
    batchpool_read,
    batchpool_update
);

/// `coalesce-peer`: each row (each read, each update) takes a pooled
/// connection and its cached prepared statement (unnamed mode: sends an
/// unnamed one).
#[derive(Clone)]
pub struct PeerPool {
    pool: deadpool_postgres::Pool,
    unnamed: bool,
}

impl RowWriter for PeerPool {
    async fn open(&self, size: usize) -> Result<()> {
        open_all(size, |_| self.pool.get()).await
    }

    async fn insert(&self, r: &Record) -> Result<u64> {
        let client = self.pool.get().await?;
        if self.unnamed {
            return Ok(client.execute_typed(&INSERT, &typed(r)).await?);
        }
        let stmt = client.prepare_cached(&INSERT).await?;
        Ok(client.execute(&stmt, &params(r)).await?)
    }

    async fn read(&self, key: &str) -> Result<Vec<ReadRow>> {
        let client = self.pool.get().await?;
        let rows = if self.unnamed {
            client.query_typed(&READ, &[(&key, Type::VARCHAR)]).await?
        } else {
            let stmt = client.prepare_cached(&READ).await?;
            client.query(&stmt, &[&key]).await?
        };
        rows.iter().map(read_row).collect()
    }

    async fn update(&self, key: &str, field: usize, value: &str) -> Result<u64> {
        let sql = update_text(field)?;
        let client = self.pool.get().await?;
        if self.unnamed {
            let typed: [(&(dyn ToSql + Sync), Type); 2] =
                [(&value, Type::TEXT), (&key, Type::VARCHAR)];
            return Ok(client.execute_typed(sql, &typed).await?);
        }
        let stmt = client.prepare_cached(sql).await?;
        Ok(client.execute(&stmt, &[&value, &key]).await?)
    }

    async fn release(self) {
        self.pool.close();
    }
}
