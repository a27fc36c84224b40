//! MariaDB / MySQL: the scratch database, `usertable`, and the seven write
//! paths.
//!
//! The peers use plain mysql_async: `nobatch` (one autocommit INSERT per
//! row, one connection), `batch` (`exec_batch` in groups of `--batch-size`:
//! MariaDB's COM_STMT_BULK_EXECUTE when the server offers it, else one
//! execute per row), `rewrite-peer` (each group one hand-built multi-row
//! INSERT, prepared once per row count), `coalesce-peer` (mysql_async's own pool, statements
//! cached, no reset on return) and `load-data` (`LOAD DATA LOCAL INFILE`
//! streamed from memory: the bulk limit). `batchrewrite` and `coalesce` use
//! batchpool. Every pool opens its connections before the clock starts.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use batchpool::BatchConfig;
use bytes::Bytes;
use futures_util::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, PoolConstraints, PoolOpts, Statement, Value};

use super::modes::{Batchpool, ReadRow, RowWriter, Session, Spread, batchpool_writer, open_all};
use super::workload::{self, Dataset, FIELD_COUNT, Record};
use super::{Cluster, Database, Loaded, Mode, Progress, Result, fail, scratch_name};

/// How long the other nodes of a cluster may take to show what the first
/// node did (the scratch database, the emptied table, the loaded rows).
const NODE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Binds a record as the 11 parameters of the single-row INSERT.
pub fn params(r: &Record) -> Vec<Value> {
    std::iter::once(&r.key)
        .chain(r.fields.iter())
        .map(|s| Value::from(s.as_str()))
        .collect()
}

/// `INSERT INTO usertable (YCSB_KEY, FIELD0, ...) VALUES (?, ..., ?)`.
pub static INSERT: LazyLock<String> = LazyLock::new(|| workload::insert_sql(|_| "?".into()));

/// `SELECT * FROM usertable WHERE YCSB_KEY = ?`: the run phase's read.
pub static READ: LazyLock<String> = LazyLock::new(|| workload::read_sql("?"));

/// `UPDATE usertable SET FIELDn = ? WHERE YCSB_KEY = ?`, one per field:
/// the run phase's update.
pub static UPDATE: LazyLock<[String; FIELD_COUNT]> =
    LazyLock::new(|| std::array::from_fn(|n| workload::update_sql(n, "?", "?")));

/// The statement of `FIELD<field>`'s update.
fn update_text(field: usize) -> Result<&'static str> {
    UPDATE
        .get(field)
        .map(String::as_str)
        .ok_or_else(|| fail(format!("no FIELD{field}")))
}

/// A row the run phase's read returned: its key (the first column) and
/// its number of columns.
fn read_row(row: &mysql_async::Row) -> Result<ReadRow> {
    let key = match row.get_opt::<String, usize>(0) {
        Some(Ok(key)) => key,
        Some(Err(e)) => return Err(fail(format!("YCSB_KEY: {e}"))),
        None => return Err(fail("a row without columns")),
    };
    Ok(ReadRow {
        key,
        columns: row.len(),
    })
}

/// The run phase's read on batchpool's pool (`query`).
async fn batchpool_read(pool: &batchpool::mysql::Pool, key: &str) -> Result<Vec<ReadRow>> {
    let rows = pool.query(&READ, (key,)).await?;
    rows.iter().map(read_row).collect()
}

/// The run phase's update on batchpool's pool (`execute`).
async fn batchpool_update(
    pool: &batchpool::mysql::Pool,
    key: &str,
    field: usize,
    value: &str,
) -> Result<u64> {
    let sql = update_text(field)?;
    Ok(pool.execute(sql, (value, key)).await?.rows_affected())
}

/// Most placeholders in one prepared statement (the protocol's 2-byte count).
pub const MAX_PARAMS: usize = 65535;

/// `INSERT INTO usertable (...) VALUES (?, ..., ?), (?, ...), ...` for
/// `rows` rows (`rewrite-peer`).
pub fn insert_rows_sql(rows: usize) -> String {
    workload::insert_rows_sql(rows, |_| "?".into())
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

/// Rows per chunk of the LOAD DATA file as it streams.
const TSV_CHUNK: usize = 1024;

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

/// The MariaDB side of the bench: a scratch database on the server, created
/// by [`create`](Database::create) and dropped by
/// [`cleanup`](Database::cleanup).
///
/// On a cluster ([`create_on`](Database::create_on), Galera) the scratch
/// database is made on the first node; `coalesce` and `coalesce-peer` get
/// one pool per node ([`Spread`]), the single-connection modes write on the
/// first node, and every node must show the same `count(*)` after a load.
pub struct MysqlTarget {
    /// Options for the server (no database).
    base: Opts,
    /// Options for the scratch database.
    opts: Opts,
    /// Name of the scratch database.
    dbname: String,
    /// Connection to the scratch database (schema, TRUNCATE, count).
    admin: tokio::sync::Mutex<Conn>,
    /// `--bulk-threshold` for batchpool's pools
    /// (`PoolBuilder::bulk_threshold`; `None`: library default).
    bulk_threshold: Option<Option<usize>>,
    /// The other nodes of a cluster: the scratch database's options on
    /// each, and a connection to it there (reads wait for the node to
    /// catch up: `wsrep_sync_wait=1` on Galera).
    others: Vec<(Opts, tokio::sync::Mutex<Conn>)>,
    /// Galera replication is on (`@@wsrep_on`).
    wsrep: bool,
}

impl MysqlTarget {
    /// The scratch database's connection options.
    pub fn opts(&self) -> &Opts {
        &self.opts
    }

    /// The first column of the first row of `sql` on the admin connection.
    async fn admin_first<T>(&self, sql: String) -> Result<Option<T>>
    where
        T: mysql_async::prelude::FromRow + Send + 'static,
    {
        Ok(self.admin.lock().await.query_first(sql).await?)
    }

    /// Runs `sql` on the admin connection.
    async fn admin_drop(&self, sql: String) -> Result<()> {
        Ok(self.admin.lock().await.query_drop(sql).await?)
    }

    /// The scratch database's options on every node, the first node's first.
    fn all_opts(&self) -> impl Iterator<Item = &Opts> {
        std::iter::once(&self.opts).chain(self.others.iter().map(|(o, _)| o))
    }

    /// Adds the node at `url` to the cluster: waits (up to [`NODE_WAIT`])
    /// until it shows the scratch database made on the first node.
    async fn join(&mut self, url: &str) -> Result<()> {
        let base = Opts::from_url(url).map_err(|e| fail(format!("bad --mysql-url: {e}")))?;
        let opts: Opts = OptsBuilder::from_opts(base)
            .db_name(Some(self.dbname.clone()))
            .into();
        let deadline = Instant::now() + NODE_WAIT;
        let mut conn = loop {
            match Conn::new(opts.clone()).await {
                Ok(conn) => break conn,
                Err(e) if Instant::now() > deadline => {
                    return Err(fail(format!(
                        "node {}:{} does not show the scratch database {} made on {}: {e} \
                         (are the --mysql-url servers nodes of one cluster?)",
                        opts.ip_or_hostname(),
                        opts.tcp_port(),
                        self.dbname,
                        self.address()
                    )));
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        };
        if self.wsrep {
            conn.query_drop("SET SESSION wsrep_sync_wait = 1").await?;
        }
        self.others.push((opts, tokio::sync::Mutex::new(conn)));
        Ok(())
    }

    /// Waits (up to [`NODE_WAIT`]) until every other node's `usertable`
    /// holds `rows` rows, as the first node's does; fails with the count it
    /// saw last.
    async fn others_agree(&self, rows: u64) -> Result<()> {
        let sql = format!("SELECT COUNT(*) FROM {}", workload::TABLE);
        let deadline = Instant::now() + NODE_WAIT;
        for (opts, conn) in &self.others {
            loop {
                let seen: std::result::Result<Option<u64>, _> =
                    conn.lock().await.query_first(&sql).await;
                let msg = match seen {
                    Ok(Some(n)) if n == rows => break,
                    Ok(n) => format!("{} rows", n.unwrap_or(0)),
                    Err(e) => e.to_string(),
                };
                if Instant::now() > deadline {
                    return Err(fail(format!(
                        "node {}:{} shows {msg} in usertable, the first node {rows}",
                        opts.ip_or_hostname(),
                        opts.tcp_port()
                    )));
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// `wsrep_cluster_size` and `wsrep_ready` of a node.
    async fn wsrep_status(conn: &mut Conn) -> Result<(String, String)> {
        let rows: Vec<(String, String)> = conn
            .query("SHOW STATUS WHERE Variable_name IN ('wsrep_cluster_size', 'wsrep_ready')")
            .await?;
        let get = |name: &str| {
            rows.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map_or_else(String::new, |(_, v)| v.clone())
        };
        Ok((get("wsrep_cluster_size"), get("wsrep_ready")))
    }
}

impl Database for MysqlTarget {
    const NAME: &'static str = "mariadb";
    const BULK: Mode = Mode::LoadData;
    const SETTINGS: &'static str = "innodb_flush_log_at_trx_commit sync_binlog log_bin \
        innodb_doublewrite innodb_buffer_pool_size innodb_autoinc_lock_mode max_allowed_packet";

    /// `url`: `mysql://user:password@host:port/db`.
    async fn create(url: &str) -> Result<MysqlTarget> {
        let base = Opts::from_url(url).map_err(|e| fail(format!("bad --mysql-url: {e}")))?;
        let mut server = Conn::new(base.clone())
            .await
            .map_err(|e| fail(format!("cannot connect to MariaDB: {e}")))?;
        let dbname = scratch_name();
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
            bulk_threshold: None,
            others: Vec::new(),
            wsrep: false,
        })
    }

    /// The scratch database made on the first node, then every other node
    /// joined once it shows it. On Galera every admin connection's reads
    /// wait for its node to catch up (`wsrep_sync_wait=1`).
    async fn create_on(urls: &[String]) -> Result<MysqlTarget> {
        let Some((first, rest)) = urls.split_first() else {
            return Err(fail("no --mysql-url"));
        };
        let mut target = MysqlTarget::create(first).await?;
        let wsrep: Result<Option<String>> = target.admin_first("SELECT @@wsrep_on".into()).await;
        target.wsrep = matches!(wsrep.ok().flatten().as_deref(), Some("1" | "ON"));
        let mut result = Ok(());
        if target.wsrep {
            result = target
                .admin_drop("SET SESSION wsrep_sync_wait = 1".into())
                .await;
        }
        for url in rest {
            if result.is_ok() {
                result = target.join(url).await;
            }
        }
        match result {
            Ok(()) => Ok(target),
            Err(e) => {
                target.cleanup().await;
                Err(e)
            }
        }
    }

    /// Galera (`--cluster galera`): every node ready and in one cluster of
    /// at least as many nodes as given. Several servers without
    /// `--cluster`: described as they are.
    async fn topology(&self, cluster: Option<Cluster>) -> Result<Option<String>> {
        if cluster == Some(Cluster::PgSync) {
            return Err(fail(
                "--cluster pg-sync is PostgreSQL's: use --db postgresql",
            ));
        }
        if cluster.is_none() && self.others.is_empty() {
            return Ok(None);
        }
        let nodes = 1 + self.others.len();
        let mut sizes = Vec::with_capacity(nodes);
        let mut addresses = vec![self.address()];
        if self.wsrep {
            sizes.push(Self::wsrep_status(&mut *self.admin.lock().await).await?);
        }
        for (opts, conn) in &self.others {
            let address = format!("{}:{}", opts.ip_or_hostname(), opts.tcp_port());
            if self.wsrep {
                sizes.push(Self::wsrep_status(&mut *conn.lock().await).await?);
            }
            addresses.push(address);
        }
        let galera = match sizes.first() {
            Some((size, _)) => format!("Galera (wsrep_cluster_size={size})"),
            None => "not Galera (wsrep off)".to_string(),
        };
        if cluster == Some(Cluster::Galera) {
            let ready = sizes.len() == nodes
                && sizes.iter().all(|(size, ready)| {
                    ready == "ON" && size.parse::<usize>().is_ok_and(|s| s >= nodes)
                });
            if !ready {
                return Err(fail(format!(
                    "--cluster galera: the nodes {} are not one ready Galera cluster \
                     (wsrep_cluster_size, wsrep_ready per node: {sizes:?})",
                    addresses.join(", ")
                )));
            }
        }
        Ok(Some(format!(
            "{galera}, {nodes} node(s) written: {}; coalesce and coalesce-peer one pool of \
             --pool-size per node, tasks split evenly over the nodes; the single-connection \
             modes and the run phase's tasks on the first node; count(*) checked on every node",
            addresses.join(", ")
        )))
    }

    fn set_bulk_threshold(&mut self, rows: Option<Option<usize>>) {
        self.bulk_threshold = rows;
    }

    /// The server's process, from its pid file.
    async fn server_pid(&self) -> Option<u32> {
        let file: String = self
            .admin_first("SELECT @@pid_file".to_string())
            .await
            .ok()??;
        let pid = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
        super::cpu::local_process(pid, &["mariadbd", "mysqld"])
    }

    fn address(&self) -> String {
        let path = match (self.opts.ssl_opts(), self.opts.prefer_socket()) {
            (Some(_), _) => " (TLS)",
            (None, true) => " (moved to the Unix socket if reachable)",
            (None, false) => "",
        };
        format!(
            "{}:{}{path}",
            self.opts.ip_or_hostname(),
            self.opts.tcp_port()
        )
    }

    async fn version(&self) -> Result<String> {
        let version = self.admin_first("SELECT VERSION()".into()).await?;
        Ok(version.unwrap_or_default())
    }

    async fn setting(&self, name: &str) -> Result<String> {
        let value = self.admin_first(format!("SELECT @@{name}")).await?;
        Ok(value.unwrap_or_default())
    }

    /// Creates the table (on a cluster: seen empty by every node before a
    /// load starts).
    async fn prepare(&self) -> Result<()> {
        self.admin_drop(format!("DROP TABLE IF EXISTS {}", workload::TABLE))
            .await?;
        let create = workload::create_table_sql();
        self.admin_drop(format!("{create} ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"))
            .await?;
        self.others_agree(0).await
    }

    /// Empties the table (TRUNCATE recreates it: no pages of the previous
    /// mode left to purge); on a cluster, seen empty by every node.
    async fn reset(&self) -> Result<()> {
        self.admin_drop(format!("TRUNCATE TABLE {}", workload::TABLE))
            .await?;
        self.others_agree(0).await
    }

    /// The first node's count; on a cluster every other node must show the
    /// same.
    async fn count(&self) -> Result<u64> {
        let sql = format!("SELECT COUNT(*) FROM {}", workload::TABLE);
        let n = self.admin_first(sql).await?.unwrap_or(0);
        self.others_agree(n).await?;
        Ok(n)
    }

    /// Drops the scratch database (best effort).
    async fn cleanup(self) {
        for (_, conn) in self.others {
            let _ = conn.into_inner().disconnect().await;
        }
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

    /// One bare mysql_async connection.
    async fn session(&self) -> Result<impl Session> {
        let mut conn = Conn::new(self.opts.clone()).await?;
        let packet: Option<u64> = conn.query_first("SELECT @@max_allowed_packet").await?;
        Ok(MySession {
            conn,
            max_packet: packet.map_or(1 << 20, |p| usize::try_from(p).unwrap_or(usize::MAX)),
            multi: HashMap::new(),
        })
    }

    /// One batchpool pool of `size` connections per node ([`Spread`]).
    fn batch_pool(&self, size: usize, batching: BatchConfig) -> Result<impl Batchpool> {
        let mut pools = Vec::new();
        for opts in self.all_opts() {
            let mut builder = batchpool::mysql::Pool::from_opts(opts.clone());
            if let Some(rows) = self.bulk_threshold {
                builder = builder.bulk_threshold(rows);
            }
            pools.push(builder.max_size(size).batching(batching.clone()).build()?);
        }
        Spread::new(pools)
    }

    /// mysql_async's own pool, as a service would configure it for speed:
    /// exactly `size` connections, prepared statements kept, no
    /// COM_RESET_CONNECTION when a connection comes back; one per node
    /// ([`Spread`]).
    fn peer_pool(&self, size: usize) -> Result<impl RowWriter> {
        let constraints = PoolConstraints::new(size, size)
            .ok_or_else(|| fail("bad --pool-size for mysql_async"))?;
        let pool_opts = PoolOpts::default()
            .with_constraints(constraints)
            .with_reset_connection(false);
        let pools = self
            .all_opts()
            .map(|opts| {
                let opts: Opts = OptsBuilder::from_opts(opts.clone())
                    .pool_opts(pool_opts.clone())
                    .into();
                mysql_async::Pool::new(opts)
            })
            .collect();
        Spread::new(pools)
    }

    /// `LOAD DATA LOCAL INFILE` streamed from memory: in one statement,
    /// or (the sweep) one statement per `group` rows, one after the other
    /// on one connection.
    async fn bulk(
        &self,
        data: &Arc<Dataset>,
        group: Option<usize>,
        progress: &Progress,
    ) -> Result<Loaded> {
        let mut conn = Conn::new(self.opts.clone()).await?;
        let group = group.unwrap_or(data.len()).max(1);
        let started = Instant::now();
        let mut result = Ok(());
        for start in (0..data.len()).step_by(group) {
            let rows = start..(start + group).min(data.len());
            result = load_data(&mut conn, data, rows, progress).await;
            if result.is_err() {
                break;
            }
        }
        let elapsed = started.elapsed();
        let _ = conn.disconnect().await;
        result.map(|()| Loaded::plain(elapsed))
    }
}

/// One `LOAD DATA LOCAL INFILE` of `data.rows[rows]` on `conn`, the file
/// encoded while it streams, [`TSV_CHUNK`] rows a chunk (the clock includes
/// encoding, as COPY's does); fails unless it reports exactly those rows and
/// no warnings.
async fn load_data(
    conn: &mut Conn,
    data: &Arc<Dataset>,
    rows: std::ops::Range<usize>,
    progress: &Progress,
) -> Result<()> {
    let (expected, last) = (rows.len() as u64, rows.end);
    let (data, done) = (data.clone(), progress.counter());
    conn.set_infile_handler(async move {
        let chunks = futures_util::stream::iter(rows.step_by(TSV_CHUNK)).map(move |start| {
            let end = (start + TSV_CHUNK).min(last);
            let chunk = tsv_chunk(&data.rows[start..end]);
            done.fetch_add((end - start) as u64, Ordering::Relaxed);
            Ok(chunk)
        });
        Ok(chunks.boxed())
    });
    conn.query_drop(load_data_sql()).await?;
    let n = conn.affected_rows();
    let warnings = conn.get_warnings();
    if n != expected || warnings != 0 {
        return Err(fail(format!(
            "LOAD DATA reported {n} rows and {warnings} warnings, expected {expected} and 0"
        )));
    }
    Ok(())
}

/// `nobatch`, `batch` (`exec_batch`) and `rewrite-peer` run on one bare
/// connection.
pub struct MySession {
    conn: Conn,
    /// The server's `@@max_allowed_packet`.
    max_packet: usize,
    /// `rewrite-peer`: the multi-row statement of each row count, prepared
    /// once.
    multi: HashMap<usize, Statement>,
}

impl Session for MySession {
    type Stmt = Statement;

    async fn prepare(&mut self) -> Result<Statement> {
        Ok(self.conn.prep(&*INSERT).await?)
    }

    async fn insert(&mut self, stmt: &Statement, r: &Record) -> Result<u64> {
        self.conn.exec_drop(stmt, params(r)).await?;
        Ok(self.conn.affected_rows())
    }

    async fn insert_group(&mut self, stmt: &Statement, group: &[Record]) -> Result<()> {
        Ok(self.conn.exec_batch(stmt, group.iter().map(params)).await?)
    }

    /// Within the placeholder limit, and the COM_STMT_EXECUTE packet within
    /// `max_allowed_packet`: per value a length prefix (up to 3 bytes) and
    /// 2 type bytes, per row its NULL-bitmap share, 4 KiB of headroom.
    fn max_rows(&self, row_bytes: usize) -> usize {
        let per_row = row_bytes + (1 + FIELD_COUNT) * 5 + 2;
        let by_packet = self.max_packet.saturating_sub(4096) / per_row;
        (MAX_PARAMS / (1 + FIELD_COUNT)).min(by_packet)
    }

    async fn insert_rows(&mut self, rows: &[Record]) -> Result<u64> {
        let n = rows.len();
        let stmt = match self.multi.entry(n) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(self.conn.prep(insert_rows_sql(n)).await?)
            }
        };
        let values: Vec<Value> = rows.iter().flat_map(params).collect();
        self.conn.exec_drop(&*stmt, values).await?;
        Ok(self.conn.affected_rows())
    }

    async fn close(self) {
        let _ = self.conn.disconnect().await;
    }
}

batchpool_writer!(
    batchpool::mysql::Pool,
    &INSERT,
    |r| params(r),
    params,
    batchpool_read,
    batchpool_update
);

/// `coalesce-peer`: each row (each read, each update) takes a connection
/// of mysql_async's pool.
impl RowWriter for mysql_async::Pool {
    async fn open(&self, size: usize) -> Result<()> {
        open_all(size, |_| self.get_conn()).await
    }

    async fn insert(&self, r: &Record) -> Result<u64> {
        let mut conn = self.get_conn().await?;
        conn.exec_drop(&*INSERT, params(r)).await?;
        Ok(conn.affected_rows())
    }

    async fn read(&self, key: &str) -> Result<Vec<ReadRow>> {
        let mut conn = self.get_conn().await?;
        let rows: Vec<mysql_async::Row> = conn.exec(&*READ, (key,)).await?;
        rows.iter().map(read_row).collect()
    }

    async fn update(&self, key: &str, field: usize, value: &str) -> Result<u64> {
        let sql = update_text(field)?;
        let mut conn = self.get_conn().await?;
        conn.exec_drop(sql, (value, key)).await?;
        Ok(conn.affected_rows())
    }

    async fn release(self) {
        let _ = self.disconnect().await;
    }
}
