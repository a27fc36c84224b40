//! The bench's command line (`cargo bench --bench ycsb_load -- --help`).

use std::path::PathBuf;

use batchpool::postgres::Statements;
use clap::Parser;

use super::ops::Workload;
use super::{Cluster, Mode, Options};

/// YCSB load phase through every write path, side by side: plain
/// tokio-postgres / deadpool-postgres (nobatch, batch, coalesce-peer, copy)
/// and batchpool (batchrewrite, coalesce). Prints the rows/s table. Then
/// the run phase on the loaded table (--workload, default a): YCSB's reads
/// and updates through batchpool and the plain pool, ops/s table.
///
/// Without --pg-url it starts a throwaway PostgreSQL cluster from the local
/// server binaries (as the tests do) and removes it afterwards; with
/// --pg-url it works in a scratch database it creates and drops on that server.
///
/// Behind PgBouncer in transaction mode: give PgBouncer's URL as --pg-url
/// and `--statements unnamed` (or leave `auto`, which detects the pooler).
/// The scratch database is created and dropped through PgBouncer too, so
/// PgBouncer needs a wildcard database entry (`[databases] * = host=...
/// port=...`); its `default_pool_size` caps the server connections a pool
/// of --pool-size gets.
#[derive(Parser, Debug, Clone)]
#[command(name = "ycsb_load", version, about, long_about = None)]
pub struct Args {
    /// Rows loaded by each mode.
    #[arg(long, default_value_t = 100_000)]
    pub records: usize,
    /// Rows per group in `batch` and `batchrewrite`.
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
    /// Concurrent tasks in `coalesce` and `coalesce-peer`.
    #[arg(long, default_value_t = 64)]
    pub tasks: usize,
    /// Connections in the `coalesce` and `coalesce-peer` pools.
    #[arg(long, default_value_t = 8)]
    pub pool_size: usize,
    /// Runs of every mode, in alternating order; the table shows the median.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// `BatchConfig::max_in_flight` for `coalesce` (default: the library default).
    #[arg(long)]
    pub max_in_flight: Option<usize>,
    /// `BatchConfig::max_rows` for `coalesce` (default: the library default).
    #[arg(long, value_name = "ROWS")]
    pub max_rows: Option<usize>,
    /// `BatchConfig::max_delay` for `coalesce`, in microseconds: timed
    /// batching (default: natural batching).
    #[arg(long, value_name = "MICROS")]
    pub max_delay_us: Option<u64>,
    /// `BatchConfig::pipeline(false)` for `coalesce`: one statement on the
    /// wire per connection at a time.
    #[arg(long)]
    pub no_pipeline: bool,
    /// Modes to run, comma separated, in this order (default: all). With
    /// the default, MariaDB runs its own six (`load-data` instead of
    /// `copy`); a given list runs on each database the modes it has.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Mode::ALL.to_vec())]
    pub modes: Vec<Mode>,
    /// Databases to load, comma separated; each prints its own table.
    #[arg(long = "db", value_enum, value_delimiter = ',', default_values_t = vec![Db::Postgresql])]
    pub db: Vec<Db>,
    /// MariaDB / MySQL server to use (`mysql://user:password@host:port/db`);
    /// default: a throwaway `mariadbd`. `MYSQL_URL` is not read. Repeated
    /// or comma separated: the nodes of one multi-primary cluster (Galera),
    /// the scratch database made on the first; `coalesce` and
    /// `coalesce-peer` get one pool per node with the tasks split evenly,
    /// the other modes write on the first.
    #[arg(long, value_delimiter = ',', value_name = "URL")]
    pub mysql_url: Vec<String>,
    /// PostgreSQL server to use (libpq URL or key=value string), or a
    /// pooler in front of one (PgBouncer: see above); default: a throwaway
    /// cluster. `PG_URL` is not read: the bench only uses a server it is
    /// pointed at explicitly. batchpool's `statements=` parameter may be
    /// in it (the bench takes it out for the peers' drivers).
    #[arg(long)]
    pub pg_url: Option<String>,
    /// PostgreSQL statement mode, for batchpool (`batchrewrite`,
    /// `coalesce`: `PoolBuilder::statements`) and the peers alike: `named`
    /// = prepared once per connection and cached (peers: `prepare_cached`);
    /// `unnamed` = one unnamed Parse/Bind/Execute per statement, what a
    /// transaction-mode pooler passes (peers: `execute_typed` with the
    /// table's column types; `copy` inside BEGIN/COMMIT); `auto` =
    /// batchpool's default, unnamed when a pooler is detected, and the
    /// peers follow it. Default: --pg-url's `statements=`, else auto.
    #[arg(long, value_name = "auto|named|unnamed", value_parser = super::statements::parse)]
    pub statements: Option<Statements>,
    /// Load a replicated setup instead of one server: `galera` (with `--db
    /// mariadb`: a throwaway 3-node MariaDB Galera cluster on loopback, or
    /// the nodes given as --mysql-url; every node must be ready) or
    /// `pg-sync` (with `--db postgresql`: a throwaway primary with a
    /// synchronous streaming standby, or the primary given as --pg-url,
    /// which must have one streaming). Every mode of the database runs; the
    /// report says where the writers went.
    #[arg(long, value_enum)]
    pub cluster: Option<Cluster>,
    /// Throwaway servers with TLS (a certificate from a throwaway CA), and
    /// every connection of every mode over it, with no certificate check
    /// (libpq's `require`): PostgreSQL `sslmode=require`, MariaDB
    /// `require_ssl=true&verify_ca=false&verify_identity=false` (with
    /// `prefer_socket=false`). For a server of your own put the parameters
    /// in --pg-url / --mysql-url instead (`sslmode=require`, `verify-full`
    /// with `sslrootcert=`...).
    #[arg(long)]
    pub tls: bool,
    /// The throwaway MariaDB over TCP only (`prefer_socket=false`):
    /// mysql_async otherwise moves every connection to a loopback server
    /// onto the server's Unix socket. Implied by --tls.
    #[arg(long)]
    pub mysql_tcp: bool,
    /// batchpool's bulk path for `batchrewrite` and `coalesce`, on both
    /// databases: the fewest rows of a plain INSERT statement sent by the
    /// bulk path (PostgreSQL `PoolBuilder::copy_threshold`: binary COPY;
    /// MariaDB `PoolBuilder::bulk_threshold`: COM_STMT_BULK_EXECUTE), or
    /// `off` (multi-row INSERTs only, what `rewrite-peer` sends). Default:
    /// the library's. `--copy-threshold` is an alias.
    #[arg(
        long,
        alias = "copy-threshold",
        value_name = "ROWS|off",
        value_parser = parse_threshold
    )]
    pub bulk_threshold: Option<Threshold>,
    /// The run phase after the load: YCSB core workloads, comma separated,
    /// in this order — `a` (50% read / 50% update), `b` (95 / 5), `c` (100%
    /// read), `f` (50% read / 50% read-modify-write) — or `none` (the load
    /// alone). Each runs --operations operations, keys chosen by YCSB's
    /// scrambled zipfian (0.99) over the loaded records, through batchpool
    /// (`coalesce`'s pool and settings) and the plain pool
    /// (`coalesce-peer`'s), --tasks tasks. On the table the last mode
    /// loaded; with --sweeps-only the bulk path loads it first, untimed.
    #[arg(
        long,
        value_name = "a,b,c,f|none",
        default_value = "a",
        value_parser = parse_workloads
    )]
    pub workload: Workloads,
    /// Operations per run of a workload (a read-modify-write is one).
    #[arg(long, default_value_t = 100_000)]
    pub operations: usize,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw rows/s per mode as an SVG bar chart to this file (and the run
    /// phase's chart beside it, see --run-plot).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// SVG of the run phase: ops/s per workload, batchpool and the plain
    /// pool side by side (default: the --plot file name with `-run` before
    /// `.svg`).
    #[arg(long, value_name = "FILE.svg")]
    pub run_plot: Option<PathBuf>,
    /// After the modes, run each of --sweep-modes at each of --sweep-sizes.
    #[arg(long)]
    pub sweep: bool,
    /// Group sizes of the sweep (rows per execute_many, per batch, per
    /// statement).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 10, 100, 1000, 10000])]
    pub sweep_sizes: Vec<usize>,
    /// Modes of the sweep, comma separated, run at each size: of `batch`,
    /// `batchrewrite`, `rewrite-peer` and the bulk mode (`copy` on
    /// PostgreSQL, `load-data` on MariaDB), those the database has. The
    /// bulk mode sends one statement per group of that many rows (one COPY
    /// FROM STDIN, one LOAD DATA LOCAL INFILE), one after the other on one
    /// connection, as the others send their groups.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values_t = vec![Mode::Batchrewrite],
        value_name = "MODES"
    )]
    pub sweep_modes: Vec<Mode>,
    /// SVG of the sweep, rows/s against group size, one line per mode
    /// (default: the --plot file name with `-sweep` before `.svg`).
    #[arg(long, value_name = "FILE.svg")]
    pub sweep_plot: Option<PathBuf>,
    /// Run `coalesce` and `coalesce-peer` at each of these task counts
    /// (same pool size; `--tasks-sweep` alone: 1,8,64,256,1024), after the
    /// modes: a table, the JSON's `tasks_sweep`, and an SVG of rows/s and
    /// p99 against callers (--tasks-plot). With --repeat, the median of
    /// each figure per point.
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 0..=1,
        default_missing_value = "1,8,64,256,1024",
        value_name = "TASKS,..."
    )]
    pub tasks_sweep: Option<Vec<usize>>,
    /// Rows of a tasks-sweep point: max(--sweep-min-records,
    /// --sweep-rows-per-task × tasks), at most --records. For --records at
    /// every point, give --sweep-min-records as large as --records.
    #[arg(long, default_value_t = 20_000)]
    pub sweep_min_records: usize,
    /// Rows per task of a tasks-sweep point (see --sweep-min-records).
    #[arg(long, default_value_t = 100)]
    pub sweep_rows_per_task: usize,
    /// SVG of the tasks sweep, two panels: rows/s and p99 against tasks
    /// (default: the --plot file name with `-tasks` before `.svg`).
    #[arg(long, value_name = "FILE.svg")]
    pub tasks_plot: Option<PathBuf>,
    /// Run only --sweep / --tasks-sweep and the run phase (--workload), not
    /// the load modes.
    #[arg(long)]
    pub sweeps_only: bool,
    /// Percent of rows whose INSERT fails (the key of a row written long
    /// before): `coalesce` against `coalesce-peer` with the same failures.
    /// The report adds batchpool's statements per failing row.
    #[arg(long, value_name = "PERCENT")]
    pub fail_rate: Option<f64>,
    /// Seed of the random field bytes.
    #[arg(long, default_value_t = 0x5eed_1cb5)]
    pub seed: u64,
    /// No progress bar on stderr.
    #[arg(long)]
    pub no_progress: bool,
    /// After each run, print the CPU time it took: the bench process (the
    /// client side), the server's processes, the machine's busy share, and
    /// the bench process's context switches (Linux `/proc`).
    #[arg(long)]
    pub cpu: bool,
    /// Passed by `cargo bench` to every harness = false bench; ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

/// `--workload`: the run phase's workloads, in order (empty: `none`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workloads(pub Vec<Workload>);

fn parse_workloads(s: &str) -> Result<Workloads, String> {
    super::ops::parse_workloads(s).map(Workloads)
}

/// `--bulk-threshold`: a row count, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threshold(pub Option<usize>);

fn parse_threshold(s: &str) -> Result<Threshold, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(Threshold(None));
    }
    s.parse()
        .map(|n| Threshold(Some(n)))
        .map_err(|_| format!("{s:?} is neither a row count nor `off`"))
}

/// A database the bench can load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Db {
    /// PostgreSQL (`--pg-url`, or a throwaway cluster).
    Postgresql,
    /// MariaDB (`--mysql-url`, or a throwaway server).
    Mariadb,
}

impl std::fmt::Display for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Db::Postgresql => "postgresql",
            Db::Mariadb => "mariadb",
        })
    }
}

impl Args {
    /// Checks the combination of `--cluster` with the other flags: a
    /// cluster is for its own database only, without `--tls` on throwaway
    /// servers; several `--mysql-url` only for MariaDB.
    pub fn check_cluster(&self) -> Result<(), String> {
        let Some(cluster) = self.cluster else {
            return Ok(());
        };
        let db = match cluster {
            Cluster::Galera => Db::Mariadb,
            Cluster::PgSync => Db::Postgresql,
        };
        if self.db != [db] {
            return Err(format!(
                "--cluster {cluster} needs --db {db} (and no other)"
            ));
        }
        let given = match db {
            Db::Mariadb => !self.mysql_url.is_empty(),
            Db::Postgresql => self.pg_url.is_some(),
        };
        if self.tls && !given {
            return Err(format!(
                "--tls: the throwaway {cluster} cluster has no TLS; give the cluster's URLs \
                 with their TLS parameters instead"
            ));
        }
        Ok(())
    }

    /// The modes to run on a database offering `supported`: all of them
    /// for the default `--modes`, else the given ones it has; none with
    /// `--sweeps-only`.
    pub fn modes_for(&self, supported: &[Mode]) -> Vec<Mode> {
        if self.sweeps_only {
            Vec::new()
        } else if self.modes == Mode::ALL {
            supported.to_vec()
        } else {
            self.modes
                .iter()
                .copied()
                .filter(|m| supported.contains(m))
                .collect()
        }
    }

    /// The sweep's modes on a database offering `supported`: the
    /// `--sweep-modes` it has, each once, in the given order. (A mode the
    /// sweep cannot run stays, for [`Options::validate`] to name it.)
    pub fn sweep_modes_for(&self, supported: &[Mode]) -> Vec<Mode> {
        let mut modes = Vec::new();
        for &m in &self.sweep_modes {
            if supported.contains(&m) && !modes.contains(&m) {
                modes.push(m);
            }
        }
        modes
    }

    /// The run's options.
    pub fn options(&self) -> Options {
        Options {
            records: self.records,
            batch_size: self.batch_size,
            tasks: self.tasks,
            pool_size: self.pool_size,
            max_in_flight: self.max_in_flight,
            max_rows: self.max_rows,
            max_delay_us: self.max_delay_us,
            pipeline: !self.no_pipeline,
            repeat: self.repeat,
            modes: if self.sweeps_only {
                Vec::new()
            } else {
                self.modes.clone()
            },
            sweep: self.sweep.then(|| self.sweep_sizes.clone()),
            sweep_modes: self.sweep_modes.clone(),
            tasks_sweep: self.tasks_sweep.clone(),
            bulk_threshold: self.bulk_threshold.map(|t| t.0),
            sweep_min_records: self.sweep_min_records,
            sweep_rows_per_task: self.sweep_rows_per_task,
            field_len: super::workload::FIELD_LEN,
            seed: self.seed,
            fail_rate: self.fail_rate,
            workloads: self.workload.0.clone(),
            operations: self.operations,
            progress: !self.no_progress,
            cpu: self.cpu,
        }
    }

    /// Where the sweep chart goes: `--sweep-plot`, else derived from `--plot`.
    pub fn sweep_plot_path(&self) -> Option<PathBuf> {
        if !self.sweep {
            return None;
        }
        self.sweep_plot
            .clone()
            .or_else(|| self.plot_beside("sweep"))
    }

    /// Where the run phase's chart goes: `--run-plot`, else derived from
    /// `--plot`; none without a run phase.
    pub fn run_plot_path(&self) -> Option<PathBuf> {
        if self.workload.0.is_empty() {
            return None;
        }
        self.run_plot.clone().or_else(|| self.plot_beside("run"))
    }

    /// Where the tasks-sweep chart goes: `--tasks-plot`, else derived from
    /// `--plot`.
    pub fn tasks_plot_path(&self) -> Option<PathBuf> {
        self.tasks_sweep.as_ref()?;
        self.tasks_plot
            .clone()
            .or_else(|| self.plot_beside("tasks"))
    }

    /// `--plot`'s `dir/name.svg` as `dir/name-<what>.svg`.
    fn plot_beside(&self, what: &str) -> Option<PathBuf> {
        self.plot.as_ref().map(|p| {
            let stem = p
                .file_stem()
                .map_or_else(|| "ycsb".to_string(), |s| s.to_string_lossy().into_owned());
            p.with_file_name(format!("{stem}-{what}.svg"))
        })
    }
}
