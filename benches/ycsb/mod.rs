//! The YCSB bench (`cargo bench --bench ycsb_load`): the load phase through
//! every write path, then the run phase's workloads, as a module shared by
//! the bench binary (`benches/ycsb_load.rs`) and its smoke test
//! (`tests/it/ycsb_smoke.rs`, which runs every mode and workload on a few
//! hundred rows).
//!
//! * [`workload`]: the YCSB `usertable` rows (hashed keys, random fields),
//!   generated before any timing, and the SQL of both phases.
//! * [`ops`]: the run phase's workloads (`--workload a,b,c,f`): reads,
//!   updates and read-modify-writes, keys by [`zipf`]'s scrambled zipfian
//!   choice, drawn before any timing.
//! * [`Database`]: what differs between the databases under test —
//!   PostgreSQL ([`pg`]) and MariaDB ([`mysql`]): connection, schema,
//!   driver calls, bulk path.
//! * [`modes`]: the write paths ([`Mode`]s) and the run phase's loop,
//!   written once over [`Database`].
//! * [`run`]: loads every mode into a freshly truncated table (alternating
//!   order when repeated), verifies `count(*)`, runs each workload on the
//!   loaded table through batchpool and the plain pool, and returns a
//!   [`Report`].
//! * [`report`]: the text table, JSON and SVG; [`cli`]: the command line.
//! * [`statements`]: PostgreSQL's statement mode (`--statements`), for
//!   batchpool and the peers alike.
#![allow(dead_code)] // the bench and the smoke test each use a different part

pub mod cli;
pub mod cpu;
pub mod modes;
pub mod mysql;
pub mod ops;
pub mod pg;
pub mod report;
pub mod statements;
pub mod workload;
pub mod zipf;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use batchpool::BatchConfig;
use batchpool::postgres::Statements;
use serde::Serialize;

use self::ops::{Operations, Workload};
pub use self::report::Report;
use self::report::{
    Batching, Latency, ModeResult, ModeRun, OpsRun, SweepPoint, TasksPoint, WorkloadResult,
};
use self::workload::Dataset;

/// Any error of the bench: it fails the run loudly with this message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Result of the bench's fallible steps.
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// Makes a [`BoxError`] from a message.
pub fn fail(msg: impl Into<String>) -> BoxError {
    msg.into().into()
}

/// An error with its chain of sources (`db error: ERROR: duplicate key ...`),
/// each source added unless the message already says it.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let msg = s.to_string();
        if !out.contains(&msg) {
            out.push_str(": ");
            out.push_str(&msg);
        }
        source = s.source();
    }
    out
}

/// A write path that loads the YCSB rows.
///
/// Each database runs seven: the bulk mode is its own (`Copy` on PostgreSQL,
/// `LoadData` on MariaDB), and so is how it runs `Batch`; a database lists
/// its modes in [`Database::MODES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One autocommit INSERT per row, one connection, sequential (the peer:
    /// plain deadpool-postgres / tokio-postgres).
    Nobatch,
    /// Single-row INSERTs pipelined in groups of `--batch-size` on one
    /// connection, each its own autocommit statement (JDBC `executeBatch`
    /// without rewrite).
    Batch,
    /// batchpool `execute_many` in groups of `--batch-size` (JDBC
    /// `executeBatch` with rewrite to multi-row INSERTs).
    Batchrewrite,
    /// The statements of `batchrewrite` built by hand on the plain driver:
    /// each group of `--batch-size` rows one multi-row `INSERT ... VALUES
    /// (...), (...)`, its text built once per row count and prepared once
    /// (cached), every value bound, sequential on one plain connection.
    /// `batchrewrite ÷ rewrite-peer` is what batchpool's machinery costs.
    RewritePeer,
    /// `--tasks` tasks, each awaiting one single-row batchpool `execute` at
    /// a time, pool of `--pool-size` (the web-service case).
    Coalesce,
    /// The same tasks and pool size on plain deadpool-postgres with cached
    /// prepared statements.
    CoalescePeer,
    /// Binary COPY in one stream: the physical limit (in `--sweep`, one
    /// COPY per group).
    Copy,
    /// MariaDB `LOAD DATA LOCAL INFILE` streamed from memory in one
    /// statement: MariaDB's bulk limit (in `--sweep`, one per group).
    LoadData,
}

impl Mode {
    /// Every mode, in the order the table shows them.
    pub const ALL: [Mode; 7] = [
        Mode::Nobatch,
        Mode::Batch,
        Mode::Batchrewrite,
        Mode::RewritePeer,
        Mode::Coalesce,
        Mode::CoalescePeer,
        Mode::Copy,
    ];

    /// The name used on the command line, in the table and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nobatch => "nobatch",
            Mode::Batch => "batch",
            Mode::Batchrewrite => "batchrewrite",
            Mode::RewritePeer => "rewrite-peer",
            Mode::Coalesce => "coalesce",
            Mode::CoalescePeer => "coalesce-peer",
            Mode::Copy => "copy",
            Mode::LoadData => "load-data",
        }
    }

    /// Whether per-row latency is measured (the concurrent single-row modes).
    pub fn has_latency(self) -> bool {
        matches!(self, Mode::Coalesce | Mode::CoalescePeer)
    }

    /// Whether `--sweep` can run it: the modes that send the rows in groups
    /// of a size, one group after the other on one connection (the bulk
    /// modes one statement per group in the sweep, see
    /// [`LoadConfig::bulk_group`]).
    pub fn sweeps(self) -> bool {
        matches!(
            self,
            Mode::Batch | Mode::Batchrewrite | Mode::RewritePeer | Mode::Copy | Mode::LoadData
        )
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one run loads and how.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    /// Rows loaded by each mode.
    pub records: usize,
    /// Rows per group in `batch` and `batchrewrite`.
    pub batch_size: usize,
    /// Concurrent tasks in `coalesce` and `coalesce-peer`.
    pub tasks: usize,
    /// Connections in the `coalesce` and `coalesce-peer` pools.
    pub pool_size: usize,
    /// `BatchConfig::max_in_flight` for `coalesce` (`None`: the default).
    pub max_in_flight: Option<usize>,
    /// `BatchConfig::max_rows` for `coalesce` (`None`: the default).
    pub max_rows: Option<usize>,
    /// `BatchConfig::max_delay` for `coalesce`, in µs (`None`: natural
    /// batching).
    pub max_delay_us: Option<u64>,
    /// `BatchConfig::pipeline` for `coalesce`.
    pub pipeline: bool,
    /// Runs of every mode (the report shows the median).
    pub repeat: usize,
    /// Modes, in the order of the first repeat.
    pub modes: Vec<Mode>,
    /// Group sizes of the sweep (`None`: no sweep).
    pub sweep: Option<Vec<usize>>,
    /// Modes the sweep runs at each size, in this order (each one
    /// [`Mode::sweeps`]); default `batchrewrite` alone.
    pub sweep_modes: Vec<Mode>,
    /// Task counts of the `coalesce` vs `coalesce-peer` sweep (`None`: no
    /// tasks sweep).
    pub tasks_sweep: Option<Vec<usize>>,
    /// Fewest rows a tasks-sweep point loads (see
    /// [`sweep_records`](Options::sweep_records)).
    pub sweep_min_records: usize,
    /// Rows per task a tasks-sweep point loads above the minimum.
    pub sweep_rows_per_task: usize,
    /// batchpool's bulk path in its pools: PostgreSQL
    /// `PoolBuilder::copy_threshold` (binary COPY), MariaDB
    /// `PoolBuilder::bulk_threshold` (COM_STMT_BULK_EXECUTE); `None`: the
    /// library default; `Some(None)`: off. Applied by
    /// [`Database::set_bulk_threshold`].
    pub bulk_threshold: Option<Option<usize>>,
    /// Bytes per field (YCSB's `fieldlength`, 100).
    pub field_len: usize,
    /// Seed of the field generator, so runs load the same bytes.
    pub seed: u64,
    /// `--fail-rate`: percent of rows whose INSERT fails with a duplicate
    /// key (`coalesce` and `coalesce-peer` only).
    pub fail_rate: Option<f64>,
    /// The run phase's workloads, in order (empty: no run phase).
    pub workloads: Vec<Workload>,
    /// Operations of each run of a workload.
    pub operations: usize,
    /// Show a progress bar on stderr.
    #[serde(skip)]
    pub progress: bool,
    /// Print each run's CPU time (client, server, machine).
    #[serde(skip)]
    pub cpu: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            records: 100_000,
            batch_size: 1000,
            tasks: 64,
            pool_size: 8,
            max_in_flight: None,
            max_rows: None,
            max_delay_us: None,
            pipeline: true,
            repeat: 1,
            modes: Mode::ALL.to_vec(),
            sweep: None,
            sweep_modes: vec![Mode::Batchrewrite],
            tasks_sweep: None,
            sweep_min_records: 20_000,
            sweep_rows_per_task: 100,
            bulk_threshold: None,
            field_len: workload::FIELD_LEN,
            seed: 0x5eed_1cb5,
            fail_rate: None,
            workloads: vec![Workload::A],
            operations: 100_000,
            progress: true,
            cpu: false,
        }
    }
}

impl Options {
    /// Rejects settings that cannot run, with a message naming the option.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("--records", self.records),
            ("--batch-size", self.batch_size),
            ("--tasks", self.tasks),
            ("--pool-size", self.pool_size),
            ("--repeat", self.repeat),
        ] {
            if v == 0 {
                return Err(fail(format!("{name} must be at least 1")));
            }
        }
        if self.modes.is_empty()
            && self.sweep.is_none()
            && self.tasks_sweep.is_none()
            && self.workloads.is_empty()
        {
            return Err(fail(
                "nothing to run: no --modes (or --sweeps-only), no --sweep, no --tasks-sweep, \
                 --workload none",
            ));
        }
        if !self.workloads.is_empty() && self.operations == 0 {
            return Err(fail("--operations must be at least 1"));
        }
        if let Some(sizes) = &self.sweep {
            if sizes.is_empty() || sizes.contains(&0) {
                return Err(fail("--sweep-sizes must be a list of sizes of at least 1"));
            }
            if self.sweep_modes.is_empty() {
                return Err(fail("--sweep-modes: no mode to sweep"));
            }
            if let Some(m) = self.sweep_modes.iter().find(|m| !m.sweeps()) {
                return Err(fail(format!(
                    "--sweep-modes: {m} sends no groups of a size; the sweep runs \
                     batch, batchrewrite, rewrite-peer, copy and load-data"
                )));
            }
        }
        if let Some(p) = self.fail_rate {
            if !(0.0..100.0).contains(&p) {
                return Err(fail("--fail-rate must be a percentage from 0 up to 100"));
            }
            if self.sweep.is_some()
                || self.tasks_sweep.is_some()
                || self.modes.is_empty()
                || self
                    .modes
                    .iter()
                    .any(|m| !matches!(m, Mode::Coalesce | Mode::CoalescePeer))
            {
                return Err(fail(
                    "--fail-rate runs only --modes coalesce,coalesce-peer (no sweeps)",
                ));
            }
        }
        if let Some(tasks) = &self.tasks_sweep {
            if tasks.is_empty() || tasks.contains(&0) {
                return Err(fail(
                    "--tasks-sweep must be a list of task counts of at least 1",
                ));
            }
        }
        Ok(())
    }

    /// Rows the tasks-sweep point of `tasks` tasks loads:
    /// `max(--sweep-min-records, --sweep-rows-per-task × tasks)`, at most
    /// `--records` (the first rows of the run's data). Few tasks write
    /// slowly, so they get the minimum (a point of 1 task does not take
    /// minutes); many tasks get enough rows each that start and tail stay a
    /// small part of the run.
    pub fn sweep_records(&self, tasks: usize) -> usize {
        self.sweep_rows_per_task
            .saturating_mul(tasks)
            .max(self.sweep_min_records)
            .min(self.records)
    }

    /// The modes of repeat `r` (0-based): the given order, reversed on every
    /// other repeat so no mode always runs first or last.
    pub fn order(&self, r: usize) -> Vec<Mode> {
        alternate(&self.modes, r)
    }
}

/// Per-mode settings handed to a database's `load`.
#[derive(Clone, Copy, Debug)]
pub struct LoadConfig {
    /// Rows per group (`batch`, `batchrewrite`).
    pub batch_size: usize,
    /// Concurrent tasks (`coalesce`, `coalesce-peer`).
    pub tasks: usize,
    /// Pool connections (`coalesce`, `coalesce-peer`).
    pub pool_size: usize,
    /// `BatchConfig::max_in_flight` for `coalesce` (`None`: the default).
    pub max_in_flight: Option<usize>,
    /// `BatchConfig::max_rows` for `coalesce` (`None`: the default).
    pub max_rows: Option<usize>,
    /// `BatchConfig::max_delay` for `coalesce`, in µs (`None`: natural
    /// batching).
    pub max_delay_us: Option<u64>,
    /// `BatchConfig::pipeline` for `coalesce`.
    pub pipeline: bool,
    /// The bulk mode (`copy`, `load-data`): `None` loads every row in one
    /// stream (one statement); `Some(n)` sends one statement per group of
    /// `n` rows, one after the other on one connection (the sweep only).
    pub bulk_group: Option<usize>,
}

impl LoadConfig {
    /// The batching config of the `coalesce` mode.
    pub fn coalesce_batching(&self) -> batchpool::BatchConfig {
        let mut config = batchpool::BatchConfig::default().pipeline(self.pipeline);
        if let Some(n) = self.max_in_flight {
            config = config.max_in_flight(n);
        }
        if let Some(n) = self.max_rows {
            config = config.max_rows(n);
        }
        if let Some(us) = self.max_delay_us {
            config = config.max_delay(std::time::Duration::from_micros(us));
        }
        config
    }
}

/// How the bench reached its server (for the block under the table).
#[derive(Clone, Debug, Serialize)]
pub struct ServerSetup {
    /// A throwaway cluster started by the bench (tests/common), removed
    /// afterwards; `false` for `--pg-url`.
    pub throwaway: bool,
    /// Throwaway server started with `fsync=off, synchronous_commit=off`
    /// (`BATCHPOOL_FAST_SERVER=1`).
    pub fast: bool,
    /// Host and port, without credentials.
    pub address: String,
    /// A replicated setup (`--cluster`, several `--mysql-url`): its nodes
    /// and where the writers went ([`Database::topology`]); `None` for one
    /// server.
    pub topology: Option<String>,
}

/// A replicated setup the bench loads (`--cluster`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Cluster {
    /// MariaDB Galera, every node a primary: `coalesce` and `coalesce-peer`
    /// get one pool per node, their tasks split evenly over the nodes; the
    /// single-connection modes and the run phase's tasks on the first
    /// node. Without `--mysql-url` a throwaway 3-node cluster on loopback.
    Galera,
    /// A PostgreSQL primary with a synchronous streaming standby
    /// (`synchronous_standby_names`, `synchronous_commit=on`): every commit
    /// waits for the standby. Writers on the primary. Without `--pg-url` a
    /// throwaway pair.
    PgSync,
}

impl std::fmt::Display for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cluster::Galera => "galera",
            Cluster::PgSync => "pg-sync",
        })
    }
}

/// A database under test: its scratch database, `usertable`, and what its
/// write paths need. [`modes`] runs every mode the same way on each
/// database; an implementation says only what differs (its SQL, its driver
/// calls, its bulk path). [`pg::PgTarget`] and [`mysql::MysqlTarget`] are
/// the two.
pub trait Database: Sized {
    /// Label in the table and in JSON (`postgresql`, `mariadb`).
    const NAME: &'static str;
    /// Its bulk-load mode (its physical limit), which the `× copy` column
    /// divides by.
    const BULK: Mode;
    /// Modes it runs, in the order its table shows them: the six every
    /// database has, then its bulk mode.
    const MODES: [Mode; 7] = [
        Mode::Nobatch,
        Mode::Batch,
        Mode::Batchrewrite,
        Mode::RewritePeer,
        Mode::Coalesce,
        Mode::CoalescePeer,
        Self::BULK,
    ];
    /// Write-relevant server settings shown under the table, separated by
    /// white space.
    const SETTINGS: &'static str;

    /// Connects to `url` and creates a uniquely named scratch database
    /// there ([`scratch_name`]).
    async fn create(url: &str) -> Result<Self>;
    /// [`create`](Database::create) on the nodes of one cluster, the
    /// scratch database made on the first and seen by every node. Only
    /// MariaDB takes several (Galera); the default takes exactly one URL.
    async fn create_on(urls: &[String]) -> Result<Self> {
        match urls {
            [url] => Self::create(url).await,
            _ => Err(fail(format!(
                "{} takes one server URL, got {}",
                Self::NAME,
                urls.len()
            ))),
        }
    }
    /// Checks that the server is the replicated setup `cluster` says (ready,
    /// every node or standby in place) and describes it for the report;
    /// `None` for one plain server. Fails for a `cluster` of another
    /// database or one not in place.
    async fn topology(&self, cluster: Option<Cluster>) -> Result<Option<String>> {
        match cluster {
            None => Ok(None),
            Some(c) => Err(fail(format!("--cluster {c} is not for {}", Self::NAME))),
        }
    }
    /// Host:port of the server, for the report.
    fn address(&self) -> String;
    /// The server's main process on this machine, whose process tree's
    /// CPU time is shown after each mode; `None` where unknown.
    async fn server_pid(&self) -> Option<u32> {
        None
    }
    /// The server's version string.
    async fn version(&self) -> Result<String>;
    /// The value of one of [`SETTINGS`](Database::SETTINGS).
    async fn setting(&self, name: &str) -> Result<String>;
    /// Creates the (empty) `usertable`.
    async fn prepare(&self) -> Result<()>;
    /// Empties `usertable` before a mode.
    async fn reset(&self) -> Result<()>;
    /// Before each run of the run phase: lets the server write out what
    /// the runs before left dirty (PostgreSQL: a checkpoint, best effort).
    /// The default does nothing.
    async fn settle(&self) {}
    /// `SELECT count(*) FROM usertable`.
    async fn count(&self) -> Result<u64>;
    /// Removes what [`create`](Database::create) made (the scratch
    /// database). Best effort; never fails the run.
    async fn cleanup(self);
    /// Applies `--statements` (`None`: not given). Only PostgreSQL has
    /// statement modes; the others ignore it.
    fn set_statements(&mut self, _flag: Option<Statements>) -> Result<()> {
        Ok(())
    }
    /// Applies `--bulk-threshold` to batchpool's pools (`None`: not given,
    /// the library default; `Some(None)`: the bulk path off): PostgreSQL's
    /// `PoolBuilder::copy_threshold`, MariaDB's
    /// `PoolBuilder::bulk_threshold`.
    fn set_bulk_threshold(&mut self, rows: Option<Option<usize>>);
    /// The statement mode of the run, for the report; `None` where the
    /// database has no such mode.
    fn statements(&self) -> Option<StatementMode> {
        None
    }
    /// Why `mode` cannot run on this server as it is reached (a pooler that
    /// cannot carry it), if it cannot: the run skips it and says so.
    fn unavailable(&self, mode: Mode) -> Option<String> {
        let _ = mode;
        None
    }
    /// One plain connection (`nobatch`, `batch`, `rewrite-peer`), opened.
    async fn session(&self) -> Result<impl modes::Session>;
    /// A batchpool pool of `size` connections, not opened yet
    /// (`batchrewrite`, `coalesce`).
    fn batch_pool(&self, size: usize, batching: BatchConfig) -> Result<impl modes::Batchpool>;
    /// The plain pool of `coalesce-peer`, `size` connections, not opened yet.
    fn peer_pool(&self, size: usize) -> Result<impl modes::RowWriter>;
    /// Its bulk path ([`BULK`](Database::BULK)): loads and times `data`, in
    /// one stream (`group` `None`) or one statement per `group` rows, one
    /// after the other on one connection; checks each statement's count.
    async fn bulk(
        &self,
        data: &Arc<Dataset>,
        group: Option<usize>,
        progress: &Progress,
    ) -> Result<Loaded>;

    /// Server version and write-relevant settings.
    async fn describe(&self) -> Result<ServerInfo> {
        let version = self.version().await?;
        let mut settings = Vec::new();
        for name in Self::SETTINGS.split_whitespace() {
            let value = self.setting(name).await?;
            settings.push(Setting {
                name: name.to_string(),
                value,
            });
        }
        Ok(ServerInfo {
            database: Self::NAME.into(),
            version,
            settings,
            statements: self.statements(),
        })
    }

    /// Loads every row of `data` through `mode`; the clock runs from the
    /// first statement (connections already open) to the last reply.
    async fn load(
        &self,
        mode: Mode,
        data: &Arc<Dataset>,
        cfg: LoadConfig,
        progress: &Progress,
    ) -> Result<Loaded> {
        use modes::RowWriter;
        if !Self::MODES.contains(&mode) {
            return Err(fail(format!("{} has no mode {mode}", Self::NAME)));
        }
        let size = cfg.pool_size;
        match mode {
            Mode::Nobatch => modes::nobatch(self.session().await?, data, progress).await,
            Mode::Batch => {
                modes::batch(self.session().await?, data, cfg.batch_size, progress).await
            }
            Mode::Batchrewrite => {
                // One caller: one connection; a group of batch-size rows is
                // one statement (within the server's parameter and packet
                // limits).
                let pool = self.batch_pool(1, BatchConfig::default().max_rows(cfg.batch_size))?;
                pool.open(1).await?;
                modes::batchrewrite(pool, data, cfg.batch_size, progress).await
            }
            Mode::RewritePeer => {
                modes::rewrite_peer(self.session().await?, data, cfg.batch_size, progress).await
            }
            Mode::Coalesce => {
                let pool = self.batch_pool(size, cfg.coalesce_batching())?;
                pool.open(size).await?;
                modes::concurrent(pool, data, cfg.tasks, progress).await
            }
            Mode::CoalescePeer => {
                let pool = self.peer_pool(size)?;
                pool.open(size).await?;
                modes::concurrent(pool, data, cfg.tasks, progress).await
            }
            Mode::Copy | Mode::LoadData => self.bulk(data, cfg.bulk_group, progress).await,
        }
    }

    /// Runs `ops` on the loaded table through `mode`: `coalesce`
    /// (batchpool's pool with the load phase's `coalesce` settings) or
    /// `coalesce-peer` (the plain pool), `cfg.tasks` tasks on `cfg.pool_size`
    /// connections; `values[i]` is what operation `i` writes. The clock
    /// runs from the first operation (connections already open) to the last
    /// reply.
    async fn operate(
        &self,
        mode: Mode,
        data: &Arc<Dataset>,
        ops: &Arc<Operations>,
        values: Vec<String>,
        cfg: LoadConfig,
        progress: &Progress,
    ) -> Result<Ran> {
        use modes::RowWriter;
        let size = cfg.pool_size;
        let values = Arc::new(values);
        match mode {
            Mode::Coalesce => {
                let pool = self.batch_pool(size, cfg.coalesce_batching())?;
                pool.open(size).await?;
                modes::operate(pool, data, ops, values, cfg.tasks, progress).await
            }
            Mode::CoalescePeer => {
                let pool = self.peer_pool(size)?;
                pool.open(size).await?;
                modes::operate(pool, data, ops, values, cfg.tasks, progress).await
            }
            _ => Err(fail(format!(
                "the run phase runs coalesce and coalesce-peer, not {mode}"
            ))),
        }
    }
}

/// A scratch database name unique to this process and moment
/// (`bp_<pid>_<n>_<nanos>`, the test harness' pattern, so leftovers of a
/// killed run are swept).
pub fn scratch_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("bp_{}_7{}_{nanos}", std::process::id(), nanos % 1000)
}

/// One server setting (`SHOW name`).
#[derive(Clone, Debug, Serialize)]
pub struct Setting {
    /// Setting name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// What the server says about itself.
#[derive(Clone, Debug, Serialize)]
pub struct ServerInfo {
    /// Database label in the table (`postgresql`).
    pub database: String,
    /// `SELECT version()`.
    pub version: String,
    /// Settings that matter for write speed (`fsync`, `synchronous_commit`...).
    pub settings: Vec<Setting>,
    /// PostgreSQL: the statement mode of batchpool and the peers
    /// (`--statements`). `None` for MariaDB.
    pub statements: Option<StatementMode>,
}

/// PostgreSQL's statement mode in a run (`--statements`).
#[derive(Clone, Debug, Serialize)]
pub struct StatementMode {
    /// What batchpool's builder got: `auto`, `named` or `unnamed`.
    pub mode: String,
    /// A pooler sits between the bench and the server (batchpool's `auto`
    /// test: the session's backend pid is not the cancel key's).
    pub pooler: bool,
    /// What batchpool and the peers sent: `named` (prepared per connection,
    /// cached) or `unnamed` (`execute_typed`; COPY inside a transaction).
    pub sent: String,
    /// What sits between, as batchpool's `auto` finds it (`none`,
    /// `transaction`, `statement`, `pgpool`: `batchpool::postgres::Pooler`).
    pub between: String,
}

/// What one mode's load measured.
#[derive(Debug)]
pub struct Loaded {
    /// Wall time of the load.
    pub elapsed: Duration,
    /// Per-row latency, microseconds (modes with [`Mode::has_latency`]).
    pub latency: Option<hdrhistogram::Histogram<u64>>,
    /// batchpool's counters after the load (batchpool modes).
    pub batching: Option<Batching>,
}

impl Loaded {
    /// A load measured by its wall time only.
    pub fn plain(elapsed: Duration) -> Loaded {
        Loaded {
            elapsed,
            latency: None,
            batching: None,
        }
    }
}

/// What one run of a workload measured (the run phase).
#[derive(Debug)]
pub struct Ran {
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Latency per operation kind, microseconds, in [`ops::OpKind::ALL`] order;
    /// `None` for a kind the workload has none of.
    pub latency: [Option<hdrhistogram::Histogram<u64>>; 3],
    /// batchpool's counters after the run (batchpool's pool).
    pub batching: Option<Batching>,
}

/// Counts loaded rows for the progress bar (stderr), drawn by a ticker task
/// so the hot loops only bump an atomic.
pub struct Progress {
    done: Arc<AtomicU64>,
    bar: Option<indicatif::ProgressBar>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// A bar for `total` rows labelled `label`, or a silent counter.
    pub fn start(show: bool, label: &str, total: u64) -> Progress {
        let done = Arc::new(AtomicU64::new(0));
        if !show {
            return Progress {
                done,
                bar: None,
                ticker: None,
            };
        }
        let bar = indicatif::ProgressBar::new(total);
        let style = indicatif::ProgressStyle::with_template(
            "{prefix:>28} [{bar:32}] {pos:>7}/{len:7} {per_sec:>14} eta {eta}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        let (b, d) = (bar.clone(), done.clone());
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(100));
            loop {
                every.tick().await;
                b.set_position(d.load(Ordering::Relaxed));
            }
        });
        Progress {
            done,
            bar: Some(bar),
            ticker: Some(ticker),
        }
    }

    /// Adds `n` loaded rows.
    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// The shared counter, for spawned tasks.
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.done.clone()
    }

    /// Rows counted so far.
    pub fn count(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Removes the bar.
    pub fn finish(self) {
        if let Some(t) = &self.ticker {
            t.abort();
        }
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(t) = &self.ticker {
            t.abort();
        }
    }
}

/// Fails unless `usertable` holds exactly `expected` rows.
pub async fn verify_count<D: Database>(db: &D, expected: u64, label: &str) -> Result<()> {
    let n = db.count().await?;
    if n == expected {
        Ok(())
    } else {
        Err(fail(format!(
            "{} {label}: count(*) = {n} after the load, expected {expected}",
            D::NAME
        )))
    }
}

/// Loads `data` with `mode` into a freshly emptied table and checks that
/// `count(*)` is exactly the number of records.
async fn run_one<D: Database>(
    db: &D,
    mode: Mode,
    data: &Arc<Dataset>,
    cfg: LoadConfig,
    opts: &Options,
    label: String,
) -> Result<ModeRun> {
    db.reset().await?;
    let server = db.server_pid().await;
    let progress = Progress::start(opts.progress, &label, data.len() as u64);
    let before = cpu::Sample::now(server);
    let loaded = db.load(mode, data, cfg, &progress).await;
    let used = before.until(&cpu::Sample::now(server));
    let counted = progress.count();
    progress.finish();
    if opts.cpu {
        println!("cpu {label}: {}", used.describe(data.len()));
    }
    let name = D::NAME;
    let loaded =
        loaded.map_err(|e| fail(format!("{name} {label}: load failed: {}", error_chain(&*e))))?;
    if counted != data.len() as u64 {
        return Err(fail(format!(
            "{name} {label}: {counted} rows acknowledged, expected {}",
            data.len()
        )));
    }
    verify_count(db, written(data), &label).await?;
    let secs = loaded.elapsed.as_secs_f64().max(1e-9);
    Ok(ModeRun {
        elapsed_secs: secs,
        rows_per_sec: data.len() as f64 / secs,
        latency: loaded.latency.as_ref().map(Latency::from_histogram),
        batching: loaded.batching,
    })
}

/// Rows a load of `data` writes: all but those with a duplicate key
/// (`--fail-rate`).
fn written(data: &Dataset) -> u64 {
    data.rows.iter().filter(|r| !r.duplicate).count() as u64
}

/// Runs `ops` through `mode` on the loaded table (one run of the run
/// phase): the values it writes drawn first (seeded with `seed`), then
/// timed; the counters checked (every operation acknowledged; the checks of
/// each read and update are in [`modes::operate`]).
#[allow(clippy::too_many_arguments)]
async fn run_ops<D: Database>(
    db: &D,
    mode: Mode,
    data: &Arc<Dataset>,
    ops: &Arc<Operations>,
    cfg: LoadConfig,
    opts: &Options,
    label: String,
    seed: u64,
) -> Result<OpsRun> {
    let values = ops.values(opts.field_len, seed);
    db.settle().await;
    let server = db.server_pid().await;
    let progress = Progress::start(opts.progress, &label, ops.len() as u64);
    let before = cpu::Sample::now(server);
    let ran = db.operate(mode, data, ops, values, cfg, &progress).await;
    let used = before.until(&cpu::Sample::now(server));
    let counted = progress.count();
    progress.finish();
    if opts.cpu {
        println!("cpu {label}: {}", used.describe_per(ops.len(), "op"));
    }
    let name = D::NAME;
    let ran = ran.map_err(|e| fail(format!("{name} {label}: run failed: {}", error_chain(&*e))))?;
    if counted != ops.len() as u64 {
        return Err(fail(format!(
            "{name} {label}: {counted} operations acknowledged, expected {}",
            ops.len()
        )));
    }
    // batchpool counts what it sent (coalesced statements and those run as
    // they are); the plain pool sends each read and update as it is.
    let statements = match &ran.batching {
        Some(b) => b.statements + b.passthrough,
        None => ops.plain_statements(),
    };
    let secs = ran.elapsed.as_secs_f64().max(1e-9);
    let [read, update, read_modify_write] =
        ran.latency.map(|h| h.as_ref().map(Latency::from_histogram));
    Ok(OpsRun {
        elapsed_secs: secs,
        ops_per_sec: ops.len() as f64 / secs,
        read,
        update,
        read_modify_write,
        statements,
        statements_per_op: statements as f64 / ops.len().max(1) as f64,
        batching: ran.batching,
    })
}

/// The run phase on the loaded `data`: per workload of `opts`, its
/// operations drawn once, then `coalesce` and `coalesce-peer` run them next
/// to each other (alternating which goes first per repeat), each run
/// writing values of its own; `count(*)` checked after each workload (reads
/// and updates add and remove no row).
async fn run_phase<D: Database>(
    db: &D,
    data: &Arc<Dataset>,
    cfg: LoadConfig,
    opts: &Options,
) -> Result<Vec<WorkloadResult>> {
    let modes = [Mode::Coalesce, Mode::CoalescePeer];
    let mut results = Vec::new();
    for &workload in &opts.workloads {
        let ops = Arc::new(Operations::generate(
            workload,
            opts.operations,
            data.len(),
            opts.seed,
        ));
        let runs = repeated(&modes, opts.repeat, async |mode, r| {
            let mut label = format!("{workload} {mode}");
            if opts.repeat > 1 {
                label.push_str(&format!(" ({}/{})", r + 1, opts.repeat));
            }
            // A seed per run (workload, repeat, mode), none the load's: no
            // update writes the value its field holds.
            let run = ((workload as u64) << 40) | ((r as u64) << 8) | mode as u64;
            let seed = opts.seed.rotate_left(29) ^ 0x0e11_0000_0000_0000 ^ run;
            run_ops(db, mode, data, &ops, cfg, opts, label, seed).await
        })
        .await?;
        let mut runs = runs.into_iter().map(|(_, runs)| runs);
        let (Some(coalesce), Some(peer)) = (runs.next(), runs.next()) else {
            return Err(fail("run phase: a mode did not run"));
        };
        verify_count(db, written(data), &format!("workload {workload}")).await?;
        results.push(WorkloadResult::from_runs(&ops, coalesce, peer));
    }
    Ok(results)
}

/// `items` in the order of repeat `r` (0-based): as given, reversed on
/// every other repeat so none always runs first or last.
fn alternate<T: Clone>(items: &[T], r: usize) -> Vec<T> {
    let mut order = items.to_vec();
    if r % 2 == 1 {
        order.reverse();
    }
    order
}

/// Runs `one(key, repeat)` for every key, `repeat` times in alternating
/// order, and returns the runs of each key (in run order), in `keys` order.
/// The first failure ends it.
async fn repeated<K: Copy + PartialEq, R: Clone>(
    keys: &[K],
    repeat: usize,
    mut one: impl AsyncFnMut(K, usize) -> Result<R>,
) -> Result<Vec<(K, Vec<R>)>> {
    let mut done: Vec<(K, R)> = Vec::new();
    for r in 0..repeat {
        for key in alternate(keys, r) {
            done.push((key, one(key, r).await?));
        }
    }
    Ok(keys
        .iter()
        .map(|&key| {
            let runs = done.iter().filter(|(k, _)| *k == key);
            (key, runs.map(|(_, run)| run.clone()).collect())
        })
        .collect())
}

/// Runs the whole bench on `db`: every mode of `opts` (alternating order per
/// repeat), then the run phase's workloads on the table the last mode
/// loaded (loaded by the bulk path, untimed, when no mode ran), then the
/// sweeps if asked, and returns the report. The first failure (an error, a
/// row not acknowledged, a wrong `count(*)`, a read or update that did not
/// find exactly its record) ends the run with an error.
pub async fn run<D: Database>(db: &D, opts: &Options, setup: ServerSetup) -> Result<Report> {
    opts.validate()?;
    // Modes the server, as reached, cannot carry are left out, and said so.
    let mut skipped: Vec<Skipped> = Vec::new();
    for &mode in opts.modes.iter().chain(&opts.sweep_modes) {
        if let Some(reason) = db.unavailable(mode) {
            if !skipped.iter().any(|s| s.mode == mode) {
                println!("{mode}: skipped: {reason}");
                skipped.push(Skipped { mode, reason });
            }
        }
    }
    let mut kept = opts.clone();
    kept.modes.retain(|m| !skipped.iter().any(|s| s.mode == *m));
    kept.sweep_modes
        .retain(|m| !skipped.iter().any(|s| s.mode == *m));
    let opts = &kept;
    let sweep_modes = opts
        .sweep
        .as_ref()
        .map_or(&[][..], |_| &opts.sweep_modes[..]);
    for m in opts.modes.iter().chain(sweep_modes) {
        if !D::MODES.contains(m) {
            return Err(fail(format!("{} has no mode {m}", D::NAME)));
        }
    }
    let server = db.describe().await?;
    let started = std::time::Instant::now();
    let mut data = Dataset::generate(opts.records, opts.field_len, opts.seed)?;
    if let Some(p) = opts.fail_rate {
        let failing = data.add_failures(p, opts.seed);
        println!(
            "--fail-rate {p}: {failing} of {} rows fail (duplicate keys)",
            data.len()
        );
    }
    let data = Arc::new(data);
    let generate_secs = started.elapsed().as_secs_f64();
    db.prepare().await?;

    let cfg = LoadConfig {
        batch_size: opts.batch_size,
        tasks: opts.tasks,
        pool_size: opts.pool_size,
        max_in_flight: opts.max_in_flight,
        max_rows: opts.max_rows,
        max_delay_us: opts.max_delay_us,
        pipeline: opts.pipeline,
        bulk_group: None,
    };
    let runs = repeated(&opts.modes, opts.repeat, async |mode, r| {
        let label = if opts.repeat > 1 {
            format!("{mode} ({}/{})", r + 1, opts.repeat)
        } else {
            mode.to_string()
        };
        run_one(db, mode, &data, cfg, opts, label).await
    })
    .await?;
    let mut results: Vec<ModeResult> = runs
        .into_iter()
        .map(|(mode, runs)| ModeResult::from_runs(D::NAME, mode, runs))
        .collect();
    report::fill_ratios(&mut results, Mode::Nobatch, D::BULK);

    let mut run_results = Vec::new();
    if !opts.workloads.is_empty() {
        if opts.modes.is_empty() {
            // No mode loaded the table: the bulk path loads it, untimed.
            let label = "load for the run phase";
            db.reset().await?;
            let progress = Progress::start(opts.progress, label, data.len() as u64);
            let loaded = db.bulk(&data, None, &progress).await;
            progress.finish();
            loaded.map_err(|e| fail(format!("{} {label}: {}", D::NAME, error_chain(&*e))))?;
            verify_count(db, written(&data), label).await?;
        }
        run_results = run_phase(db, &data, cfg, opts).await?;
    }

    let mut sweep = Vec::new();
    if let Some(sizes) = &opts.sweep {
        // Every mode at each size, sizes in order (the whole list reversed
        // on every other repeat); the bulk mode one statement per group.
        let points: Vec<(usize, Mode)> = sizes
            .iter()
            .flat_map(|&size| opts.sweep_modes.iter().map(move |&m| (size, m)))
            .collect();
        let runs = repeated(&points, opts.repeat, async |(size, mode), r| {
            let label = if opts.repeat > 1 {
                format!("{mode}@{size} ({}/{})", r + 1, opts.repeat)
            } else {
                format!("{mode}@{size}")
            };
            let cfg = LoadConfig {
                batch_size: size,
                bulk_group: Some(size),
                ..cfg
            };
            run_one(db, mode, &data, cfg, opts, label).await
        })
        .await?;
        sweep = runs
            .into_iter()
            .map(|((size, mode), runs)| SweepPoint::from_runs(mode, size, runs))
            .collect();
        report::fill_sweep_ratios(&mut sweep);
    }

    let mut tasks_sweep = Vec::new();
    for &tasks in opts.tasks_sweep.iter().flatten() {
        // Both modes of a point load the same rows, next to each other
        // (alternating which goes first per repeat).
        let records = opts.sweep_records(tasks);
        let point = if records == data.len() {
            data.clone()
        } else {
            Arc::new(data.prefix(records))
        };
        let cfg = LoadConfig { tasks, ..cfg };
        let modes = [Mode::Coalesce, Mode::CoalescePeer];
        let runs = repeated(&modes, opts.repeat, async |mode, r| {
            let label = if opts.repeat > 1 {
                format!("{mode}@{tasks} tasks ({}/{})", r + 1, opts.repeat)
            } else {
                format!("{mode}@{tasks} tasks")
            };
            run_one(db, mode, &point, cfg, opts, label).await
        })
        .await?;
        let mut runs = runs.into_iter().map(|(_, runs)| runs);
        let (Some(coalesce), Some(peer)) = (runs.next(), runs.next()) else {
            return Err(fail("tasks sweep: a mode did not run"));
        };
        tasks_sweep.push(TasksPoint::from_runs(tasks, records, coalesce, peer));
    }

    Ok(Report {
        machine: report::Machine::detect(),
        server,
        setup,
        options: opts.clone(),
        generate_secs,
        build: if cfg!(debug_assertions) {
            "debug (unoptimized)".into()
        } else {
            "optimized".into()
        },
        results,
        run_phase: run_results,
        sweep,
        tasks_sweep,
        skipped,
    })
}

/// A mode left out of a run, and why ([`Database::unavailable`]).
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    /// The mode.
    pub mode: Mode,
    /// Why the server, as reached, cannot carry it.
    pub reason: String,
}
