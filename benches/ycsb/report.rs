//! What a run measured, and its three renderings: the seed-style text table
//! (stdout), JSON (`--json`) and SVG charts (`--plot`: bars; `--run-plot`:
//! the run phase's ops/s per workload and pool; `--sweep-plot`: rows/s
//! against group size per mode; `--tasks-plot`: rows/s and p99 against
//! tasks).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::ops::{OpKind, Operations, Workload};
use super::{Mode, Options, Result, ServerInfo, ServerSetup, fail};

/// Everything one bench run measured, as `--json` writes it.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The machine the bench ran on.
    pub machine: Machine,
    /// Server version and write-relevant settings.
    pub server: ServerInfo,
    /// How the server was reached.
    pub setup: ServerSetup,
    /// Settings of the run.
    pub options: Options,
    /// Seconds spent generating the rows (before, and outside, any timing).
    pub generate_secs: f64,
    /// Build profile of the bench binary.
    pub build: String,
    /// One entry per mode, in the order of `--modes`.
    pub results: Vec<ModeResult>,
    /// The run phase: one entry per workload, in the order of `--workload`
    /// (empty for `--workload none`).
    pub run_phase: Vec<WorkloadResult>,
    /// `--sweep`: one point per (size, mode), sizes in order, at each size
    /// the modes in `--sweep-modes` order; else empty.
    pub sweep: Vec<SweepPoint>,
    /// `coalesce` vs `coalesce-peer` by task count (`--tasks-sweep`), else
    /// empty.
    pub tasks_sweep: Vec<TasksPoint>,
    /// Modes asked for that the server, as reached, cannot carry.
    pub skipped: Vec<super::Skipped>,
}

/// One load of one mode.
#[derive(Clone, Debug, Serialize)]
pub struct ModeRun {
    /// Wall time of the load, seconds.
    pub elapsed_secs: f64,
    /// Rows per second.
    pub rows_per_sec: f64,
    /// Per-row latency (concurrent single-row modes).
    pub latency: Option<Latency>,
    /// batchpool's batching counters (batchpool modes).
    pub batching: Option<Batching>,
}

/// Per-row latency, microseconds, from an hdrhistogram.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// Rows measured.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Slowest row.
    pub max_us: u64,
    /// Mean.
    pub mean_us: f64,
}

impl Latency {
    /// Reads the percentiles of a histogram of microseconds.
    pub fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> Latency {
        Latency {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: h.mean(),
        }
    }
}

/// batchpool's counters after a load (`Pool::stats`).
#[derive(Clone, Debug, Serialize)]
pub struct Batching {
    /// Flushes (groups of rows taken together onto one connection).
    pub batches: u64,
    /// Multi-row statements sent.
    pub statements: u64,
    /// Of those, statements sent by the bulk path (PostgreSQL COPY,
    /// MariaDB's bulk command).
    pub bulk_statements: u64,
    /// Rows flushed.
    pub rows: u64,
    /// Mean rows per flushed batch.
    pub rows_per_batch: f64,
    /// Mean rows per statement.
    pub rows_per_statement: f64,
    /// Flushes started because a connection was free.
    pub flush_natural: u64,
    /// Flushes started because a batch was full (or explicit batches).
    pub flush_full: u64,
    /// Mean time a row waited in the queue, microseconds.
    pub queue_wait_mean_us: f64,
    /// Longest time a row waited in the queue, microseconds.
    pub queue_wait_max_us: f64,
    /// Statements added to isolate failing rows.
    pub split_statements: u64,
    /// Rows whose outcome was an error.
    pub rows_failed: u64,
    /// Statements run as they are (not coalesced): the run phase's reads
    /// and updates today.
    pub passthrough: u64,
    /// Flushes allowed at once when the load ended (`Stats::flush_limit`:
    /// `max_in_flight`, or where the limit adapts, its value then).
    pub flush_limit: u64,
}

impl Batching {
    /// Copies the counters of a batchpool `Stats` snapshot.
    pub fn from_stats(s: &batchpool::Stats) -> Batching {
        Batching {
            batches: s.batches,
            statements: s.statements,
            bulk_statements: s.bulk_statements,
            rows: s.rows,
            rows_per_batch: s.rows_per_batch(),
            rows_per_statement: if s.statements == 0 {
                0.0
            } else {
                s.rows as f64 / s.statements as f64
            },
            flush_natural: s.flush_natural,
            flush_full: s.flush_full,
            queue_wait_mean_us: s.queue_wait_mean().as_secs_f64() * 1e6,
            queue_wait_max_us: s.queue_wait_max.as_secs_f64() * 1e6,
            split_statements: s.split_statements,
            rows_failed: s.rows_failed,
            passthrough: s.passthrough,
            flush_limit: s.flush_limit,
        }
    }
}

impl Batching {
    /// The counters of several pools (one per node) added up: means
    /// weighted by rows, the longest wait the longest of any; `None` for
    /// no pools.
    pub fn sum(parts: &[Batching]) -> Option<Batching> {
        let total = |f: fn(&Batching) -> u64| parts.iter().map(f).sum::<u64>();
        let (rows, batches, statements) = (
            total(|b| b.rows),
            total(|b| b.batches),
            total(|b| b.statements),
        );
        let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        let wait_sum: f64 = parts
            .iter()
            .map(|b| b.queue_wait_mean_us * b.rows as f64)
            .sum();
        (!parts.is_empty()).then(|| Batching {
            batches,
            statements,
            bulk_statements: total(|b| b.bulk_statements),
            split_statements: total(|b| b.split_statements),
            rows_failed: total(|b| b.rows_failed),
            passthrough: total(|b| b.passthrough),
            flush_limit: parts.iter().map(|b| b.flush_limit).max().unwrap_or(0),
            rows,
            rows_per_batch: per(rows, batches),
            rows_per_statement: per(rows, statements),
            flush_natural: total(|b| b.flush_natural),
            flush_full: total(|b| b.flush_full),
            queue_wait_mean_us: if rows == 0 {
                0.0
            } else {
                wait_sum / rows as f64
            },
            queue_wait_max_us: parts
                .iter()
                .map(|b| b.queue_wait_max_us)
                .fold(0.0, f64::max),
        })
    }
}

/// Index of the median run by rows/s (the lower one for an even count).
fn median_index(runs: &[ModeRun]) -> usize {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| runs[a].rows_per_sec.total_cmp(&runs[b].rows_per_sec));
    order[(runs.len() - 1) / 2]
}

/// One mode's result over the repeats.
#[derive(Clone, Debug, Serialize)]
pub struct ModeResult {
    /// Database label.
    pub database: String,
    /// The mode.
    pub mode: Mode,
    /// Rows/s of the median run (lower median for an even count).
    pub rows_per_sec: f64,
    /// `rows_per_sec / nobatch's` (when nobatch ran).
    pub ratio_to_nobatch: Option<f64>,
    /// `rows_per_sec / copy's` (the bulk mode; when it ran).
    pub ratio_to_copy: Option<f64>,
    /// `batchrewrite` and `rewrite-peer`: `rows_per_sec / rewrite-peer's`
    /// (when it ran): batchpool's explicit batch against the same
    /// statements built by hand on the plain driver.
    pub ratio_to_rewrite_peer: Option<f64>,
    /// Wall time of the median run, seconds.
    pub elapsed_secs: f64,
    /// Latency of the median run.
    pub latency: Option<Latency>,
    /// Batching counters of the median run.
    pub batching: Option<Batching>,
    /// Every run, in the order they ran.
    pub runs: Vec<ModeRun>,
}

impl ModeResult {
    /// Summarises the runs of one mode (at least one).
    pub fn from_runs(database: &str, mode: Mode, runs: Vec<ModeRun>) -> ModeResult {
        let m = runs[median_index(&runs)].clone();
        ModeResult {
            database: database.into(),
            mode,
            rows_per_sec: m.rows_per_sec,
            ratio_to_nobatch: None,
            ratio_to_copy: None,
            ratio_to_rewrite_peer: None,
            elapsed_secs: m.elapsed_secs,
            latency: m.latency,
            batching: m.batching,
            runs,
        }
    }
}

/// Sets each result's ratios to the `base` and `bulk` modes' rows/s, and
/// those of `batchrewrite` and `rewrite-peer` to `rewrite-peer`'s.
pub fn fill_ratios(results: &mut [ModeResult], base: Mode, bulk: Mode) {
    let of = |m: Mode, rs: &[ModeResult]| rs.iter().find(|r| r.mode == m).map(|r| r.rows_per_sec);
    let (b, k) = (of(base, results), of(bulk, results));
    let peer = of(Mode::RewritePeer, results);
    for r in results.iter_mut() {
        r.ratio_to_nobatch = b.map(|b| r.rows_per_sec / b);
        r.ratio_to_copy = k.map(|k| r.rows_per_sec / k);
        if matches!(r.mode, Mode::Batchrewrite | Mode::RewritePeer) {
            r.ratio_to_rewrite_peer = peer.map(|p| r.rows_per_sec / p);
        }
    }
}

/// One mode at one group size (`--sweep`).
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// The mode.
    pub mode: Mode,
    /// Rows per group: per `execute_many` call (`batchrewrite`), per batch
    /// (`batch`), per multi-row INSERT (`rewrite-peer`), per COPY or LOAD
    /// DATA statement (the bulk mode).
    pub batch_size: usize,
    /// Rows/s of the median run.
    pub rows_per_sec: f64,
    /// `rows_per_sec` over the same mode's at the first size.
    pub ratio_to_first: f64,
    /// `rows_per_sec` over `batchrewrite`'s at the same size (when it ran).
    pub ratio_to_batchrewrite: Option<f64>,
    /// Batching counters of the median run (`batchrewrite`).
    pub batching: Option<Batching>,
    /// Every run, in the order they ran.
    pub runs: Vec<ModeRun>,
}

impl SweepPoint {
    /// Summarises the runs of one mode at one size (at least one).
    pub fn from_runs(mode: Mode, batch_size: usize, runs: Vec<ModeRun>) -> SweepPoint {
        let m = runs[median_index(&runs)].clone();
        SweepPoint {
            mode,
            batch_size,
            rows_per_sec: m.rows_per_sec,
            ratio_to_first: 1.0,
            ratio_to_batchrewrite: None,
            batching: m.batching,
            runs,
        }
    }
}

/// Sets each point's ratios: to the same mode's first point, and to
/// `batchrewrite`'s point of the same size.
pub fn fill_sweep_ratios(points: &mut [SweepPoint]) {
    let all = points.to_vec();
    let rate = |mode: Mode, size: Option<usize>| {
        all.iter()
            .find(|p| p.mode == mode && size.is_none_or(|s| p.batch_size == s))
            .map(|p| p.rows_per_sec)
    };
    for p in points.iter_mut() {
        if let Some(first) = rate(p.mode, None) {
            p.ratio_to_first = p.rows_per_sec / first;
        }
        p.ratio_to_batchrewrite =
            rate(Mode::Batchrewrite, Some(p.batch_size)).map(|b| p.rows_per_sec / b);
    }
}

/// The sweep's modes, in the order they ran at each size.
pub fn sweep_modes(points: &[SweepPoint]) -> Vec<Mode> {
    let mut modes = Vec::new();
    for p in points {
        if !modes.contains(&p.mode) {
            modes.push(p.mode);
        }
    }
    modes
}

/// The sweep's sizes, in order.
pub fn sweep_sizes(points: &[SweepPoint]) -> Vec<usize> {
    let mut sizes = Vec::new();
    for p in points {
        if !sizes.contains(&p.batch_size) {
            sizes.push(p.batch_size);
        }
    }
    sizes
}

/// `coalesce` and `coalesce-peer` at one task count (`--tasks-sweep`).
#[derive(Clone, Debug, Serialize)]
pub struct TasksPoint {
    /// Concurrent tasks, each awaiting one single-row INSERT at a time.
    pub tasks: usize,
    /// Rows each mode loaded at this point.
    pub records: usize,
    /// batchpool `execute`.
    pub coalesce: TasksSide,
    /// Plain pool, one statement per row.
    pub peer: TasksSide,
    /// `coalesce.rows_per_sec / peer.rows_per_sec`.
    pub ratio: f64,
    /// `coalesce.p50_us / peer.p50_us`.
    pub p50_ratio: f64,
    /// `coalesce.p99_us / peer.p99_us`.
    pub p99_ratio: f64,
}

/// One mode at one task count, over the repeats: each figure the (lower)
/// median of the runs' own, so rows/s and p99 may come from different runs.
#[derive(Clone, Debug, Serialize)]
pub struct TasksSide {
    /// Median rows/s.
    pub rows_per_sec: f64,
    /// Median of the runs' p50, microseconds.
    pub p50_us: u64,
    /// Median of the runs' p99, microseconds.
    pub p99_us: u64,
    /// Median of the runs' slowest row, microseconds.
    pub max_us: u64,
    /// Batching counters of the median run by rows/s (batchpool only).
    pub batching: Option<Batching>,
    /// Every run, in the order they ran.
    pub runs: Vec<ModeRun>,
}

/// The lower median of `values` (0 when empty).
fn median_u64(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values
        .get(values.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0)
}

impl TasksSide {
    /// Summarises the runs of one mode at one point (at least one).
    pub fn from_runs(runs: Vec<ModeRun>) -> TasksSide {
        let m = runs[median_index(&runs)].clone();
        let of = |f: fn(&Latency) -> u64| {
            median_u64(
                runs.iter()
                    .filter_map(|r| r.latency.as_ref().map(f))
                    .collect(),
            )
        };
        TasksSide {
            rows_per_sec: m.rows_per_sec,
            p50_us: of(|l| l.p50_us),
            p99_us: of(|l| l.p99_us),
            max_us: of(|l| l.max_us),
            batching: m.batching,
            runs,
        }
    }
}

impl TasksPoint {
    /// Summarises one point from the runs of both modes.
    pub fn from_runs(
        tasks: usize,
        records: usize,
        coalesce: Vec<ModeRun>,
        peer: Vec<ModeRun>,
    ) -> TasksPoint {
        let (coalesce, peer) = (TasksSide::from_runs(coalesce), TasksSide::from_runs(peer));
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        TasksPoint {
            tasks,
            records,
            ratio: div(coalesce.rows_per_sec, peer.rows_per_sec),
            p50_ratio: div(coalesce.p50_us as f64, peer.p50_us as f64),
            p99_ratio: div(coalesce.p99_us as f64, peer.p99_us as f64),
            coalesce,
            peer,
        }
    }
}

/// One run of one pool through one workload (the run phase).
#[derive(Clone, Debug, Serialize)]
pub struct OpsRun {
    /// Wall time of the run, seconds.
    pub elapsed_secs: f64,
    /// Operations per second (a read-modify-write is one operation).
    pub ops_per_sec: f64,
    /// Latency of the reads, microseconds (`None`: the workload has none).
    pub read: Option<Latency>,
    /// Latency of the updates.
    pub update: Option<Latency>,
    /// Latency of the read-modify-writes, from the read to the update's
    /// reply.
    pub read_modify_write: Option<Latency>,
    /// Statements sent: batchpool's `Stats::statements +
    /// Stats::passthrough`; the plain pool one per read and update, two per
    /// read-modify-write.
    pub statements: u64,
    /// `statements / operations`.
    pub statements_per_op: f64,
    /// batchpool's counters (batchpool's pool only).
    pub batching: Option<Batching>,
}

impl OpsRun {
    /// Latency of operations of `kind`.
    pub fn latency(&self, kind: OpKind) -> Option<&Latency> {
        match kind {
            OpKind::Read => self.read.as_ref(),
            OpKind::Update => self.update.as_ref(),
            OpKind::ReadModifyWrite => self.read_modify_write.as_ref(),
        }
    }
}

/// One pool through one workload over the repeats: the figures of the
/// median run by ops/s (the lower one for an even count), and every run.
#[derive(Clone, Debug, Serialize)]
pub struct RunSide {
    /// The median run.
    #[serde(flatten)]
    pub median: OpsRun,
    /// Every run, in the order they ran.
    pub runs: Vec<OpsRun>,
}

impl RunSide {
    /// Summarises the runs of one pool (at least one).
    pub fn from_runs(runs: Vec<OpsRun>) -> RunSide {
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&a, &b| runs[a].ops_per_sec.total_cmp(&runs[b].ops_per_sec));
        RunSide {
            median: runs[order[(runs.len() - 1) / 2]].clone(),
            runs,
        }
    }
}

/// One workload of the run phase: batchpool against the plain pool on the
/// same operations.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResult {
    /// The workload: `a`, `b`, `c` or `f`.
    pub workload: Workload,
    /// Its mix (`50% read / 50% update`).
    pub mix: String,
    /// Operations of each run.
    pub operations: usize,
    /// Of those, reads.
    pub reads: usize,
    /// Updates.
    pub updates: usize,
    /// Read-modify-writes.
    pub read_modify_writes: usize,
    /// Loaded records the keys were chosen among.
    pub records: usize,
    /// Distinct records the operations touch.
    pub distinct_records: usize,
    /// The most popular record's share of the operations.
    pub hottest_share: f64,
    /// batchpool (`query`, `execute`; the `coalesce` mode's pool).
    pub coalesce: RunSide,
    /// The plain pool (`coalesce-peer`'s).
    pub peer: RunSide,
    /// `coalesce.ops_per_sec / peer.ops_per_sec`.
    pub ratio: f64,
}

impl WorkloadResult {
    /// Summarises a workload from its operations and both pools' runs.
    pub fn from_runs(ops: &Operations, coalesce: Vec<OpsRun>, peer: Vec<OpsRun>) -> WorkloadResult {
        let (coalesce, peer) = (RunSide::from_runs(coalesce), RunSide::from_runs(peer));
        WorkloadResult {
            workload: ops.workload,
            mix: ops.workload.mix(),
            operations: ops.len(),
            reads: ops.count(OpKind::Read),
            updates: ops.count(OpKind::Update),
            read_modify_writes: ops.count(OpKind::ReadModifyWrite),
            records: ops.records,
            distinct_records: ops.distinct_records(),
            hottest_share: ops.hottest_share(),
            ratio: if peer.median.ops_per_sec > 0.0 {
                coalesce.median.ops_per_sec / peer.median.ops_per_sec
            } else {
                0.0
            },
            coalesce,
            peer,
        }
    }
}

/// The machine: cores, CPU, OS.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical CPUs available to the process.
    pub cores: usize,
    /// `model name` of /proc/cpuinfo.
    pub cpu: String,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os: String,
    /// Kernel release.
    pub kernel: String,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// /proc/loadavg (1, 5, 15 min) when the report was made: other work
    /// on the machine skews every figure.
    pub load_avg: String,
}

impl Machine {
    /// Reads the machine description (fields it cannot read say "unknown").
    pub fn detect() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let os = read("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| std::env::consts::OS.into());
        let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
        let memory_gib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            os,
            kernel: if kernel.is_empty() {
                "unknown".into()
            } else {
                kernel
            },
            memory_gib,
            load_avg: read("/proc/loadavg")
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// `1234567.8` → `"1,234,568"`.
pub fn thousands(v: f64) -> String {
    let n = v.round().max(0.0) as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ratio(v: Option<f64>) -> String {
    match v {
        Some(r) if r >= 10.0 => format!("{r:.1}×"),
        Some(r) => format!("{r:.2}×"),
        None => "-".into(),
    }
}

fn opt_u64(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| thousands(v as f64))
}

/// The report as text: the seed-style table (database × mode, rows/s), the
/// per-mode details (ratios, latency, batching), the sweep, and the block
/// describing machine, server and settings.
pub fn render_text(r: &Report) -> String {
    let mut out = String::new();
    let mariadb = r.server.database == "mariadb";
    let o = &r.options;
    let runs = if o.repeat == 1 {
        "one run".to_string()
    } else {
        format!("median of {} runs, alternating order", o.repeat)
    };
    let loads = !(r.results.is_empty() && r.sweep.is_empty() && r.tasks_sweep.is_empty());
    let _ = writeln!(
        out,
        "YCSB load: {} records (key + {} fields × {} B) into usertable, {}",
        thousands(o.records as f64),
        super::workload::FIELD_COUNT,
        o.field_len,
        if loads {
            format!("rows/s ({runs})")
        } else {
            format!(
                "untimed, by {} (no load mode: the table of the run phase)",
                if mariadb {
                    "LOAD DATA LOCAL INFILE"
                } else {
                    "binary COPY"
                }
            )
        }
    );
    if let Some(s) = &r.server.statements {
        let _ = writeln!(
            out,
            "statements: {}, batchpool and peers alike; between: {}",
            super::statements::describe(s.mode.parse().unwrap_or_default(), s.pooler),
            s.between,
        );
    }
    for s in &r.skipped {
        let _ = writeln!(out, "skipped {}: {}", s.mode, s.reason);
    }
    out.push('\n');

    if !r.results.is_empty() {
        // The seed's table: one line per database, one column per mode.
        let mut head = format!("{:<12}", "database");
        let mut line = format!("{:<12}", r.server.database);
        for m in &r.results {
            let w = m.mode.name().len().max(9) + 2;
            let _ = write!(head, "{:>w$}", m.mode.name());
            let _ = write!(line, "{:>w$}", thousands(m.rows_per_sec));
        }
        let _ = writeln!(out, "{head}\n{line}\n");

        // The ×rewrite-peer column only when rewrite-peer ran.
        let rw = r.results.iter().any(|m| m.ratio_to_rewrite_peer.is_some());
        let rw_head = if rw {
            format!("{:>15}", "×rewrite-peer")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:<14}{:>10}{:>10}{:>8}{rw_head}{:>10}{:>10}{:>10}{:>10}{:>11}{:>11}",
            "mode",
            "rows/s",
            "×nobatch",
            if mariadb { "×load" } else { "×copy" },
            "elapsed",
            "p50 µs",
            "p99 µs",
            "max µs",
            "rows/batch",
            "statements"
        );
        for m in &r.results {
            let l = m.latency.as_ref();
            let b = m.batching.as_ref();
            let rw_cell = if rw {
                format!("{:>15}", ratio(m.ratio_to_rewrite_peer))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{:<14}{:>10}{:>10}{:>8}{rw_cell}{:>10}{:>10}{:>10}{:>10}{:>11}{:>11}",
                m.mode.name(),
                thousands(m.rows_per_sec),
                ratio(m.ratio_to_nobatch),
                ratio(m.ratio_to_copy),
                format!("{:.2} s", m.elapsed_secs),
                opt_u64(l.map(|l| l.p50_us)),
                opt_u64(l.map(|l| l.p99_us)),
                opt_u64(l.map(|l| l.max_us)),
                b.map_or_else(|| "-".into(), |b| format!("{:.1}", b.rows_per_batch)),
                opt_u64(b.map(|b| b.statements)),
            );
        }
        let bulk_path = if mariadb { "bulk command" } else { "COPY" };
        for m in &r.results {
            if let Some(b) = m.batching.as_ref().filter(|b| b.bulk_statements > 0) {
                let _ = writeln!(
                    out,
                    "  {}: {} of {} statements went out by the bulk path ({bulk_path})",
                    m.mode.name(),
                    thousands(b.bulk_statements as f64),
                    thousands(b.statements as f64)
                );
            }
        }
        for m in &r.results {
            if let Some(b) = m.batching.as_ref().filter(|b| b.flush_limit > 0) {
                let _ = writeln!(
                    out,
                    "  {}: {} flushes allowed at once at the end",
                    m.mode.name(),
                    b.flush_limit
                );
            }
        }
        for m in &r.results {
            if let Some(b) = m.batching.as_ref().filter(|b| b.rows_failed > 0) {
                // Each failed multi-row statement is re-run as split
                // statements: those are what the failing rows cost.
                let _ = writeln!(
                    out,
                    "  {}: {} failing rows, {} statements added to isolate them: {:.2} per failing row",
                    m.mode.name(),
                    thousands(b.rows_failed as f64),
                    thousands(b.split_statements as f64),
                    b.split_statements as f64 / b.rows_failed as f64
                );
            }
        }
        if o.repeat > 1 {
            let _ = writeln!(out, "\nall runs (rows/s, in run order):");
            for m in &r.results {
                let all: Vec<String> = m.runs.iter().map(|x| thousands(x.rows_per_sec)).collect();
                let _ = writeln!(out, "  {:<14}{}", m.mode.name(), all.join("  "));
            }
        }
    }

    if !r.run_phase.is_empty() {
        render_run_phase(&mut out, r, mariadb);
    }

    if !r.sweep.is_empty() {
        render_sweep(&mut out, r, mariadb);
    }

    if !r.tasks_sweep.is_empty() {
        let _ = writeln!(
            out,
            "\ntasks sweep: coalesce (batchpool execute) vs coalesce-peer (plain pool), pool size {}{}\n",
            o.pool_size,
            if o.repeat > 1 {
                format!(", median of {} runs per point", o.repeat)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "{:>6}{:>9}{:>11}{:>11}{:>8}{:>10}{:>10}{:>10}{:>10}{:>8}{:>11}",
            "tasks",
            "records",
            "coalesce",
            "peer",
            "×peer",
            "p50 µs",
            "peer p50",
            "p99 µs",
            "peer p99",
            "p99 ×",
            "rows/stmt"
        );
        for p in &r.tasks_sweep {
            let (c, q) = (&p.coalesce, &p.peer);
            let _ = writeln!(
                out,
                "{:>6}{:>9}{:>11}{:>11}{:>8}{:>10}{:>10}{:>10}{:>10}{:>8}{:>11}",
                thousands(p.tasks as f64),
                thousands(p.records as f64),
                thousands(c.rows_per_sec),
                thousands(q.rows_per_sec),
                ratio(Some(p.ratio)),
                thousands(c.p50_us as f64),
                thousands(q.p50_us as f64),
                thousands(c.p99_us as f64),
                thousands(q.p99_us as f64),
                ratio(Some(p.p99_ratio)),
                c.batching
                    .as_ref()
                    .map_or_else(|| "-".into(), |b| format!("{:.1}", b.rows_per_statement)),
            );
        }
        if o.repeat > 1 {
            let _ = writeln!(out, "\nall runs (rows/s coalesce / peer, in run order):");
            for p in &r.tasks_sweep {
                let all = |s: &TasksSide| {
                    s.runs
                        .iter()
                        .map(|x| thousands(x.rows_per_sec))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let _ = writeln!(
                    out,
                    "  {:>6} tasks: {} / {}",
                    p.tasks,
                    all(&p.coalesce),
                    all(&p.peer)
                );
            }
        }
    }

    let m = &r.machine;
    let _ = writeln!(
        out,
        "\nmachine:  {} cores, {}, {}, Linux {}, {:.1} GiB RAM, load average {} at the end",
        m.cores, m.cpu, m.os, m.kernel, m.memory_gib, m.load_avg
    );
    let _ = writeln!(out, "server:   {}", r.server.version);
    let where_ = if mariadb {
        if r.setup.throwaway {
            format!(
                "throwaway server on {} (tests/common MysqlServer, removed afterwards), {}",
                r.setup.address,
                if r.setup.fast {
                    "fast mode (BATCHPOOL_FAST_SERVER=1: innodb_flush_log_at_trx_commit=2, no doublewrite, no binlog)"
                } else {
                    "durable (fast mode off)"
                }
            )
        } else {
            format!(
                "external server {} (--mysql-url), scratch database",
                r.setup.address
            )
        }
    } else if r.setup.throwaway {
        format!(
            "throwaway cluster on {} (tests/common PgServer, removed afterwards), {}",
            r.setup.address,
            if r.setup.fast {
                "fast mode (BATCHPOOL_FAST_SERVER=1: fsync=off, synchronous_commit=off)"
            } else {
                "durable (fast mode off)"
            }
        )
    } else {
        format!(
            "external server {} (--pg-url), scratch database",
            r.setup.address
        )
    };
    let _ = writeln!(out, "          {where_}");
    if let Some(topology) = &r.setup.topology {
        let _ = writeln!(out, "cluster:  {topology}");
    }
    let settings: Vec<String> = r
        .server
        .settings
        .iter()
        .map(|s| format!("{}={}", s.name, s.value))
        .collect();
    let _ = writeln!(out, "          {}", settings.join(" "));
    let modes: Vec<&str> = o.modes.iter().map(|m| m.name()).collect();
    let workloads: Vec<&str> = o.workloads.iter().map(|w| w.name()).collect();
    let _ = writeln!(
        out,
        "settings: --records {} --batch-size {} --tasks {} --pool-size {} --repeat {} {} {}{}{}{}",
        o.records,
        o.batch_size,
        o.tasks,
        o.pool_size,
        o.repeat,
        if modes.is_empty() {
            "--sweeps-only".to_string()
        } else {
            format!("--modes {}", modes.join(","))
        },
        if workloads.is_empty() {
            "--workload none".to_string()
        } else {
            format!(
                "--workload {} --operations {}",
                workloads.join(","),
                o.operations
            )
        },
        o.sweep.as_ref().map_or_else(String::new, |s| {
            let s: Vec<String> = s.iter().map(usize::to_string).collect();
            let m: Vec<&str> = o.sweep_modes.iter().map(|m| m.name()).collect();
            format!(
                " --sweep-sizes {} --sweep-modes {}",
                s.join(","),
                m.join(",")
            )
        }),
        o.tasks_sweep.as_ref().map_or_else(String::new, |t| {
            let t: Vec<String> = t.iter().map(usize::to_string).collect();
            format!(
                " --tasks-sweep {} --sweep-min-records {} --sweep-rows-per-task {}",
                t.join(","),
                o.sweep_min_records,
                o.sweep_rows_per_task
            )
        }),
        r.server
            .statements
            .as_ref()
            .map_or_else(String::new, |s| format!(" --statements {}", s.mode)),
    );
    let (builder, path) = if mariadb {
        ("bulk_threshold", "COM_STMT_BULK_EXECUTE")
    } else {
        ("copy_threshold", "binary COPY")
    };
    let _ = writeln!(
        out,
        "          batchpool bulk path: {}",
        match o.bulk_threshold {
            None => format!("the library default (PoolBuilder::{builder}: {path})"),
            Some(None) => "off (--bulk-threshold off: multi-row INSERTs only)".to_string(),
            Some(Some(n)) => {
                format!("--bulk-threshold {n} rows (PoolBuilder::{builder}: {path})")
            }
        }
    );
    let _ = writeln!(
        out,
        "          keys \"user\"+fnvhash64(index) (YCSB hashed order); fields printable ASCII, seed {:#x}, generated untimed ({:.2} s)",
        o.seed, r.generate_secs
    );
    let _ = writeln!(
        out,
        "          each mode: TRUNCATE{}, connections opened before the clock, count(*) verified after; build {}",
        if mariadb { "" } else { " + CHECKPOINT" },
        r.build
    );
    let mut coalesce = Vec::new();
    if let Some(n) = o.max_in_flight {
        coalesce.push(format!(".max_in_flight({n})"));
    }
    if let Some(n) = o.max_rows {
        coalesce.push(format!(".max_rows({n})"));
    }
    if let Some(us) = o.max_delay_us {
        coalesce.push(format!(".max_delay({us} µs)"));
    }
    if !o.pipeline {
        coalesce.push(".pipeline(false)".to_string());
    }
    let _ = writeln!(
        out,
        "          batchpool: batchrewrite = execute_many on 1 connection, max_rows = batch size; coalesce = {}",
        if coalesce.is_empty() {
            "BatchConfig::default() (natural batching, max_rows 1000)".to_string()
        } else {
            format!("BatchConfig::default(){}", coalesce.join(""))
        }
    );
    if mariadb {
        let _ = writeln!(
            out,
            "          peers: mysql_async 0.37, prepared statements cached; batch = exec_batch (COM_STMT_BULK_EXECUTE on MariaDB); rewrite-peer = the multi-row INSERT built by hand, prepared once per row count; coalesce-peer = mysql_async::Pool, no reset on return; load-data = LOAD DATA LOCAL INFILE streamed from memory in one statement (the sweep: one per group)"
        );
    } else {
        let unnamed = r
            .server
            .statements
            .as_ref()
            .is_some_and(|s| s.sent == "unnamed");
        let _ = writeln!(
            out,
            "          peers: deadpool-postgres 0.14 / tokio-postgres 0.7, {}; rewrite-peer = the multi-row INSERT built by hand{}; copy = binary COPY FROM STDIN in one stream{} (the sweep: one per group)",
            if unnamed {
                "unnamed statements (execute_typed, one Parse/Bind/Execute per row)"
            } else {
                "prepared statements cached"
            },
            if unnamed {
                ", unnamed (execute_typed)"
            } else {
                ", prepared once per row count"
            },
            if unnamed {
                " (in BEGIN/COMMIT: tokio-postgres prepares it named)"
            } else {
                ""
            }
        );
    }
    out
}

/// The run phase's table: a line per workload and pool (ops/s, its ratio to
/// the plain pool's, p50 and p99 per operation kind, statements per
/// operation), the workloads' key spread, and every run when repeated.
fn render_run_phase(out: &mut String, r: &Report, mariadb: bool) {
    let o = &r.options;
    let _ = writeln!(
        out,
        "\nYCSB run: {} operations per workload, keys by YCSB's scrambled zipfian choice (constant 0.99) over the {} loaded records, {} tasks, pool of {} ({})",
        thousands(o.operations as f64),
        thousands(o.records as f64),
        o.tasks,
        o.pool_size,
        if o.repeat == 1 {
            "one run".to_string()
        } else {
            format!("median of {} runs, alternating order", o.repeat)
        }
    );
    for w in &r.run_phase {
        let _ = writeln!(out, "  {:<14}{}", w.workload.name(), w.mix);
    }
    let _ = writeln!(
        out,
        "  read = SELECT * FROM usertable WHERE YCSB_KEY = key (every field); update = UPDATE usertable SET FIELDn = value WHERE YCSB_KEY = key (one field, picked at random); rmw = a read, then an update of the same record by the same task"
    );
    let _ = writeln!(
        out,
        "  coalesce = batchpool query / execute, the pool of the load's coalesce mode; coalesce-peer = {}",
        if mariadb {
            "mysql_async::Pool"
        } else {
            "deadpool-postgres"
        }
    );
    let _ = writeln!(
        out,
        "  ×peer = ops/s over coalesce-peer's; p50 / p99 in µs per operation kind; stmts/op = statements per operation (batchpool: Stats statements + passthrough)\n"
    );
    let _ = writeln!(
        out,
        "{:<10}{:<15}{:>10}{:>8}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "workload",
        "mode",
        "ops/s",
        "×peer",
        "elapsed",
        "read p50",
        "read p99",
        "upd p50",
        "upd p99",
        "rmw p50",
        "rmw p99",
        "stmts/op"
    );
    for w in &r.run_phase {
        for (mode, side, ratio_) in [
            (Mode::Coalesce, &w.coalesce, w.ratio),
            (Mode::CoalescePeer, &w.peer, 1.0),
        ] {
            let m = &side.median;
            let mut line = format!(
                "{:<10}{:<15}{:>10}{:>8}{:>10}",
                w.workload.name(),
                mode.name(),
                thousands(m.ops_per_sec),
                ratio(Some(ratio_)),
                format!("{:.2} s", m.elapsed_secs)
            );
            for kind in OpKind::ALL {
                let l = m.latency(kind);
                let _ = write!(
                    line,
                    "{:>10}{:>10}",
                    opt_u64(l.map(|l| l.p50_us)),
                    opt_u64(l.map(|l| l.p99_us))
                );
            }
            let _ = write!(line, "{:>10.2}", m.statements_per_op);
            let _ = writeln!(out, "{line}");
        }
    }
    for w in &r.run_phase {
        let _ = writeln!(
            out,
            "  {}: {} reads, {} updates, {} read-modify-writes on {} distinct records; the most popular one {:.1}% of the operations",
            w.workload.name(),
            thousands(w.reads as f64),
            thousands(w.updates as f64),
            thousands(w.read_modify_writes as f64),
            thousands(w.distinct_records as f64),
            w.hottest_share * 100.0
        );
    }
    if o.repeat > 1 {
        let _ = writeln!(out, "\nall runs (ops/s, in run order):");
        for w in &r.run_phase {
            for (mode, side) in [(Mode::Coalesce, &w.coalesce), (Mode::CoalescePeer, &w.peer)] {
                let all: Vec<String> = side.runs.iter().map(|x| thousands(x.ops_per_sec)).collect();
                let label = format!("{} {}", w.workload.name(), mode.name());
                let _ = writeln!(out, "  {label:<18}{}", all.join("  "));
            }
        }
    }
}

/// What a mode sends per group in the sweep, for the legend.
fn sweep_legend(mode: Mode, mariadb: bool) -> &'static str {
    match mode {
        Mode::Batchrewrite => "batchpool execute_many of the group (max_rows = size)",
        Mode::RewritePeer => "the group as one hand-built multi-row INSERT, prepared once per size",
        Mode::Batch if mariadb => "exec_batch of the group (one COM_STMT_BULK_EXECUTE)",
        Mode::Batch => "the group's single-row INSERTs pipelined, each its own statement",
        Mode::Copy => "one binary COPY FROM STDIN per group",
        Mode::LoadData => "one LOAD DATA LOCAL INFILE per group",
        _ => "-",
    }
}

/// The sweep's table: one line per size, a rows/s column per mode (and its
/// ratio to `batchrewrite` at that size when `batchrewrite` ran), then
/// `batchrewrite`'s statements, bulk statements and rows per statement.
fn render_sweep(out: &mut String, r: &Report, mariadb: bool) {
    let modes = sweep_modes(&r.sweep);
    let br = modes.contains(&Mode::Batchrewrite);
    let _ = writeln!(
        out,
        "\nsweep: rows/s by group size (--sweep-sizes), one connection, each group sent after the previous one's reply{}",
        if r.options.repeat > 1 {
            format!(", median of {} runs per point", r.options.repeat)
        } else {
            String::new()
        }
    );
    for &m in &modes {
        let _ = writeln!(out, "  {:<14}{}", m.name(), sweep_legend(m, mariadb));
    }
    if br {
        let _ = writeln!(
            out,
            "  ×br = rows/s over batchrewrite's at the same size; statements, bulk (of them, sent by batchpool's bulk path: {}), rows/stmt: batchrewrite's",
            if mariadb { "bulk command" } else { "COPY" }
        );
    }
    out.push('\n');
    let width = |m: Mode| m.name().len().max(9) + 2;
    let mut head = format!("{:>8}", "size");
    for &m in &modes {
        let _ = write!(head, "{:>w$}", m.name(), w = width(m));
        if br && m != Mode::Batchrewrite {
            let _ = write!(head, "{:>7}", "×br");
        }
    }
    if br {
        let _ = write!(head, "{:>12}{:>8}{:>11}", "statements", "bulk", "rows/stmt");
    }
    let _ = writeln!(out, "{head}");
    for size in sweep_sizes(&r.sweep) {
        let at = |m: Mode| r.sweep.iter().find(|p| p.mode == m && p.batch_size == size);
        let mut line = format!("{:>8}", thousands(size as f64));
        for &m in &modes {
            let p = at(m);
            let rate = p.map_or_else(|| "-".into(), |p| thousands(p.rows_per_sec));
            let _ = write!(line, "{rate:>w$}", w = width(m));
            if br && m != Mode::Batchrewrite {
                let _ = write!(
                    line,
                    "{:>7}",
                    ratio(p.and_then(|p| p.ratio_to_batchrewrite))
                );
            }
        }
        if br {
            let b = at(Mode::Batchrewrite).and_then(|p| p.batching.as_ref());
            let _ = write!(
                line,
                "{:>12}{:>8}{:>11}",
                opt_u64(b.map(|b| b.statements)),
                opt_u64(b.map(|b| b.bulk_statements)),
                b.map_or_else(|| "-".into(), |b| format!("{:.1}", b.rows_per_statement)),
            );
        }
        let _ = writeln!(out, "{line}");
    }
    if r.options.repeat > 1 {
        let _ = writeln!(out, "\nall runs (rows/s, in run order):");
        for p in &r.sweep {
            let all: Vec<String> = p.runs.iter().map(|x| thousands(x.rows_per_sec)).collect();
            let label = format!("{}@{}", p.mode, p.batch_size);
            let _ = writeln!(out, "  {label:<20}{}", all.join("  "));
        }
    }
}

/// Writes the report as pretty JSON.
pub fn write_json(r: &Report, path: &Path) -> Result<()> {
    let file = std::fs::File::create(path)
        .map_err(|e| fail(format!("cannot create {}: {e}", path.display())))?;
    serde_json::to_writer_pretty(std::io::BufWriter::new(file), r)?;
    Ok(())
}

/// Bars of rows/s per write path, batchpool's mode and the plain driver's
/// peer of it side by side in two colours: the explicit batches
/// (`batchrewrite`, `rewrite-peer`), the concurrent single-row callers
/// (`coalesce`, `coalesce-peer`), then the plain driver's references
/// (`nobatch`, `batch`, and the bulk mode: `copy` or `load-data`), in the
/// peer's colour. Modes that did not run are left out.
pub fn plot_modes(r: &Report, path: &Path) -> Result<()> {
    use plotters::style::Color;
    let groups = [
        (
            format!(
                "execute_many, {} rows",
                thousands(r.options.batch_size as f64)
            ),
            vec![Mode::Batchrewrite, Mode::RewritePeer],
        ),
        (
            format!("{} tasks, one row each", r.options.tasks),
            vec![Mode::Coalesce, Mode::CoalescePeer],
        ),
        (
            "plain driver alone".to_string(),
            vec![Mode::Nobatch, Mode::Batch, Mode::Copy, Mode::LoadData],
        ),
    ];
    let mut bars = Vec::new();
    let mut sizes = Vec::new();
    let mut captions = Vec::new();
    for (caption, modes) in groups {
        let before = bars.len();
        for mode in modes {
            if let Some(m) = r.results.iter().find(|m| m.mode == mode) {
                let color = if matches!(mode, Mode::Batchrewrite | Mode::Coalesce) {
                    BATCHPOOL_COLOR
                } else {
                    PEER_COLOR
                };
                bars.push((mode.name().to_string(), m.rows_per_sec, color.mix(0.85)));
            }
        }
        if bars.len() > before {
            sizes.push(bars.len() - before);
            captions.push(caption);
        }
    }
    let title = format!(
        "YCSB load, {} records, {} — rows/s{}",
        thousands(r.options.records as f64),
        r.server.database,
        if r.options.repeat > 1 {
            format!(", median of {}", r.options.repeat)
        } else {
            String::new()
        }
    );
    let legend = [
        ("batchpool", BATCHPOOL_COLOR.mix(0.85)),
        ("plain driver (the peer)", PEER_COLOR.mix(0.85)),
    ];
    let x_desc = "write path: batchpool and the same work on the plain driver";
    draw_bars(
        path,
        &title,
        x_desc,
        "rows/s",
        &bars,
        &Layout {
            groups: &sizes,
            captions: &captions,
            legend: &legend,
        },
    )
}

/// batchpool's colour in the charts (blue).
const BATCHPOOL_COLOR: plotters::style::RGBColor = plotters::style::RGBColor(31, 119, 180);
/// The plain driver's colour in the charts (red): the peers and references.
const PEER_COLOR: plotters::style::RGBColor = plotters::style::RGBColor(214, 39, 40);

/// The run phase as bars of ops/s: per workload batchpool (`coalesce`,
/// blue) and the plain pool (`coalesce-peer`, red, as in the tasks sweep's
/// chart) side by side.
pub fn plot_run(r: &Report, path: &Path) -> Result<()> {
    use plotters::style::Color;
    if r.run_phase.is_empty() {
        return Err(fail("no run phase to plot"));
    }
    let mut bars = Vec::new();
    for w in &r.run_phase {
        for (side, short, color) in [
            (&w.coalesce, "coalesce", BATCHPOOL_COLOR),
            (&w.peer, "peer", PEER_COLOR),
        ] {
            bars.push((
                format!("{}: {short}", w.workload.name().to_uppercase()),
                side.median.ops_per_sec,
                color.mix(0.8),
            ));
        }
    }
    let title = format!(
        "YCSB run, {} — ops/s per workload ({} operations, {} tasks, pool {}{})",
        r.server.database,
        thousands(r.options.operations as f64),
        r.options.tasks,
        r.options.pool_size,
        if r.options.repeat > 1 {
            format!(", median of {}", r.options.repeat)
        } else {
            String::new()
        }
    );
    let x_desc = "workload: coalesce = batchpool, peer = the plain pool";
    let groups = vec![2; r.run_phase.len()];
    draw_bars(
        path,
        &title,
        x_desc,
        "ops/s",
        &bars,
        &Layout {
            groups: &groups,
            ..Layout::default()
        },
    )
}

/// One labelled line with a dot at each point, on a chart of `f64` pairs.
fn draw_line<DB, CT>(
    chart: &mut plotters::chart::ChartContext<'_, DB, CT>,
    label: &str,
    color: plotters::style::RGBColor,
    line: &[(f64, f64)],
) -> std::result::Result<(), Box<dyn std::error::Error>>
where
    DB: plotters::prelude::DrawingBackend,
    DB::ErrorType: 'static,
    CT: plotters::coord::CoordTranslate<From = (f64, f64)>,
{
    use plotters::prelude::*;
    chart
        .draw_series(LineSeries::new(line.to_vec(), color.stroke_width(2)))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart.draw_series(line.iter().map(|&xy| Circle::new(xy, 4, color.filled())))?;
    Ok(())
}

fn mode_color(mode: Mode) -> plotters::style::RGBColor {
    use plotters::style::RGBColor;
    match mode {
        Mode::Batchrewrite => RGBColor(31, 119, 180),
        Mode::RewritePeer => RGBColor(255, 127, 14),
        Mode::Batch => RGBColor(44, 160, 44),
        Mode::Copy | Mode::LoadData => RGBColor(214, 39, 40),
        Mode::Nobatch => RGBColor(148, 103, 189),
        Mode::Coalesce => RGBColor(140, 86, 75),
        Mode::CoalescePeer => RGBColor(227, 119, 194),
    }
}

/// The sweep as an SVG: rows/s (log scale) against group size (log
/// scale), one line per mode.
pub fn plot_sweep(r: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let points = &r.sweep;
    if points.is_empty() {
        return Err(fail("no sweep to plot"));
    }
    let size = |p: &SweepPoint| p.batch_size as f64;
    let x_lo = points.iter().map(size).fold(f64::MAX, f64::min) / 1.5;
    let x_hi = points.iter().map(size).fold(0.0, f64::max) * 1.5;
    let rate = |p: &SweepPoint| p.rows_per_sec.max(1.0);
    // From a power of ten, so the lowest line has a labelled tick under it.
    let y_lo = 10f64.powf(
        (points.iter().map(rate).fold(f64::MAX, f64::min) / 1.2)
            .log10()
            .floor(),
    );
    let y_hi = points.iter().map(rate).fold(0.0, f64::max) * 1.5;
    let title = format!(
        "{} — rows/s by group size, {} records{}",
        r.server.database,
        thousands(r.options.records as f64),
        if r.options.repeat > 1 {
            format!(", median of {}", r.options.repeat)
        } else {
            String::new()
        }
    );
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(90)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| thousands(*v))
            .y_label_formatter(&|v| thousands(*v))
            .x_desc("rows per group (log scale)")
            .y_desc("rows/s (log scale)")
            .draw()?;
        for mode in sweep_modes(points) {
            let color = mode_color(mode);
            let line: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.mode == mode)
                .map(|p| (size(p), rate(p)))
                .collect();
            draw_line(&mut chart, mode.name(), color, &line)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| fail(format!("cannot draw {}: {e}", path.display())))
}

/// One mode's figures of a tasks-sweep point.
type SideOf = fn(&TasksPoint) -> &TasksSide;

/// The tasks sweep as an SVG of two panels, both against tasks on a log
/// scale, one line per mode: rows/s (left) and p99 latency in ms on a log
/// scale (right).
pub fn plot_tasks(r: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let points = &r.tasks_sweep;
    if points.is_empty() {
        return Err(fail("no tasks sweep to plot"));
    }
    let tasks = |p: &TasksPoint| p.tasks as f64;
    let x_lo = points.iter().map(tasks).fold(f64::MAX, f64::min) / 1.5;
    let x_hi = points.iter().map(tasks).fold(0.0, f64::max) * 1.5;
    let modes: [(&str, RGBColor, SideOf); 2] = [
        ("coalesce", RGBColor(31, 119, 180), |p| &p.coalesce),
        ("coalesce-peer", RGBColor(214, 39, 40), |p| &p.peer),
    ];
    let sides = || points.iter().flat_map(|p| [&p.coalesce, &p.peer]);
    let rows_top = sides().map(|s| s.rows_per_sec).fold(1.0, f64::max) * 1.15;
    let ms = |us: u64| (us as f64 / 1000.0).max(0.001);
    let p99_lo = sides().map(|s| ms(s.p99_us)).fold(f64::MAX, f64::min) / 2.0;
    let p99_hi = sides().map(|s| ms(s.p99_us)).fold(0.0, f64::max) * 2.0;
    let title = format!(
        "{} — coalesce vs coalesce-peer by callers (pool size {}{})",
        r.server.database,
        r.options.pool_size,
        if r.options.repeat > 1 {
            format!(", median of {}", r.options.repeat)
        } else {
            String::new()
        }
    );
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(&title, ("sans-serif", 22))?;
        let (left, right) = root.split_horizontally(600);
        let task_label = |v: &f64| thousands(*v);

        let mut chart = ChartBuilder::on(&left)
            .caption("rows/s", ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .build_cartesian_2d((x_lo..x_hi).log_scale().base(2.0), 0.0..rows_top)?;
        chart
            .configure_mesh()
            .x_label_formatter(&task_label)
            .y_label_formatter(&|v| thousands(*v))
            .x_desc("concurrent tasks (log scale)")
            .y_desc("rows/s")
            .draw()?;
        for (name, color, side) in modes {
            let line: Vec<(f64, f64)> = points
                .iter()
                .map(|p| (tasks(p), side(p).rows_per_sec))
                .collect();
            draw_line(&mut chart, name, color, &line)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;

        let mut chart = ChartBuilder::on(&right)
            .caption("p99 latency per row, ms (log scale)", ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (x_lo..x_hi).log_scale().base(2.0),
                (p99_lo..p99_hi).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_label_formatter(&task_label)
            .y_label_formatter(&|v| format!("{v:.1}"))
            .x_desc("concurrent tasks (log scale)")
            .y_desc("p99 ms")
            .draw()?;
        for (name, color, side) in modes {
            let line: Vec<(f64, f64)> = points
                .iter()
                .map(|p| (tasks(p), ms(side(p).p99_us)))
                .collect();
            draw_line(&mut chart, name, color, &line)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| fail(format!("cannot draw {}: {e}", path.display())))
}

/// An SVG bar chart of rows/s, one labelled bar per entry, its value
/// written on top.
pub fn plot_bars(path: &Path, title: &str, x_desc: &str, bars: &[(String, f64)]) -> Result<()> {
    use plotters::style::{BLUE, Color};
    let bars: Vec<_> = bars
        .iter()
        .map(|(label, v)| (label.clone(), *v, BLUE.mix(0.7)))
        .collect();
    let groups = vec![1; bars.len()];
    draw_bars(
        path,
        title,
        x_desc,
        "rows/s",
        &bars,
        &Layout {
            groups: &groups,
            ..Layout::default()
        },
    )
}

/// How [`draw_bars`] arranges its bars.
#[derive(Default)]
struct Layout<'a> {
    /// Sizes of the groups of consecutive bars (adding up to the bars):
    /// the bars of a group stand next to each other.
    groups: &'a [usize],
    /// One caption per group, written above it (none: no captions).
    captions: &'a [String],
    /// Legend entries, colour swatches with their names (none: no legend).
    legend: &'a [(&'a str, plotters::style::RGBAColor)],
}

/// An SVG bar chart, one labelled bar per entry in its colour, its value
/// written on top; the bars in groups (`layout.groups`), the bars of a
/// group next to each other, each group's caption above it and a legend in
/// the upper left corner when given.
fn draw_bars(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    bars: &[(String, f64, plotters::style::RGBAColor)],
    layout: &Layout<'_>,
) -> Result<()> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    if bars.is_empty() {
        return Err(fail("nothing to plot"));
    }
    // Each bar's place in its group: (index in the group, group size), and
    // each group's first bar.
    let mut place = Vec::with_capacity(bars.len());
    let mut starts = Vec::with_capacity(layout.groups.len());
    for &g in layout.groups {
        starts.push(place.len());
        place.extend((0..g).map(|k| (k, g)));
    }
    place.resize(bars.len(), (0, 1));
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let highest = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1.0);
        // Room above the bars for the captions and the legend.
        let roomy = !layout.captions.is_empty() || !layout.legend.is_empty();
        let top = highest * if roomy { 1.35 } else { 1.15 };
        let n = bars.len();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(90)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => bars.get(*i).map(|b| b.0.clone()).unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_formatter(&|v| thousands(*v))
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, (_, v, color))| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), *v),
                ],
                color.filled(),
            );
            let (left, right) = bar_margins(place[i]);
            bar.set_margin(0, 0, left, right);
            bar
        }))?;
        chart.draw_series(bars.iter().enumerate().map(|(i, (_, v, _))| {
            Text::new(
                thousands(*v),
                (SegmentValue::CenterOf(i), *v + top * 0.02),
                ("sans-serif", 15)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            )
        }))?;
        // A group's caption above its highest bar's value, centred on the
        // group: on the middle bar, or between the two middle ones.
        chart.draw_series(layout.captions.iter().zip(&starts).zip(layout.groups).map(
            |((caption, &start), &size)| {
                let high = bars[start..start + size]
                    .iter()
                    .map(|b| b.1)
                    .fold(0.0, f64::max);
                let x = if size % 2 == 0 {
                    SegmentValue::Exact(start + size / 2)
                } else {
                    SegmentValue::CenterOf(start + size / 2)
                };
                Text::new(
                    caption.clone(),
                    (x, high + top * 0.09),
                    ("sans-serif", 15)
                        .into_font()
                        .color(&BLACK.mix(0.75))
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            },
        ))?;
        if !layout.legend.is_empty() {
            for &(name, color) in layout.legend {
                chart
                    .draw_series(std::iter::empty::<Rectangle<(SegmentValue<usize>, f64)>>())?
                    .label(name)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled())
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(("sans-serif", 15))
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| fail(format!("cannot draw {}: {e}", path.display())))
}

/// The left and right margins, in pixels, of the `k`-th bar of a group of
/// `g` in [`draw_bars`]: the bars of a group equally wide and a small gap
/// apart, wider gaps between groups (a lone bar: a narrower bar).
fn bar_margins((k, g): (usize, usize)) -> (u32, u32) {
    if g <= 1 {
        return (12, 12);
    }
    let gap = if g == 2 { 2.0 } else { 8.0 };
    // A group's outer margin, no more than its bars' margins can carry.
    let pad = if g == 2 {
        28.0
    } else {
        f64::min(28.0, (g - 1) as f64 * gap / (g - 2) as f64)
    };
    let per_bar = (2.0 * pad + (g - 1) as f64 * gap) / g as f64;
    let left = pad + k as f64 * (gap - per_bar);
    let px = |v: f64| v.round().max(0.0) as u32;
    (px(left), px(per_bar - left))
}
