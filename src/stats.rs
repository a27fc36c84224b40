//! Batching counters, kept with relaxed atomics on the hot path and read as a
//! [`Stats`] snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Why a batch was flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlushReason {
    /// A connection was free (natural batching).
    Natural,
    /// A size limit (rows, parameters, bytes) was reached.
    Full,
    /// The `max_delay` timer expired.
    Timer,
    /// The pool is closing.
    Close,
}

pub(crate) struct Counters {
    batches: AtomicU64,
    statements: AtomicU64,
    rows: AtomicU64,
    rows_failed: AtomicU64,
    rows_cancelled: AtomicU64,
    rows_unsent: AtomicU64,
    split_statements: AtomicU64,
    bulk_statements: AtomicU64,
    pipelined_statements: AtomicU64,
    passthrough: AtomicU64,
    flush_natural: AtomicU64,
    flush_full: AtomicU64,
    flush_timer: AtomicU64,
    flush_close: AtomicU64,
    queue_wait_total_us: AtomicU64,
    queue_wait_max_us: AtomicU64,
    queued: AtomicU64,
    in_flight: AtomicU64,
    learns: AtomicU64,
    learn_checks: AtomicU64,
    /// The same counts as `metrics` metrics.
    #[cfg(feature = "metrics")]
    exported: crate::metrics::Exported,
}

/// When a statement's round trip started: nothing without the `metrics`
/// feature, which alone needs it.
pub(crate) struct Started {
    #[cfg(feature = "metrics")]
    at: crate::metrics::Started,
}

/// The rows of one flush, counted as sent when the flush ends (dropped),
/// less those found not sent after all: a Prometheus counter only goes up,
/// so `batchpool_rows_total` is added to once, with the final number.
pub(crate) struct Flushed<'a> {
    counters: &'a Counters,
    #[cfg(feature = "metrics")]
    rows: usize,
}

impl Flushed<'_> {
    /// Rows of this flush counted as flushed that were not sent after all.
    pub(crate) fn not_sent(&mut self, n: usize) {
        #[cfg(feature = "metrics")]
        {
            self.rows -= n;
        }
        self.counters.not_sent(n);
    }
}

#[cfg(feature = "metrics")]
impl Drop for Flushed<'_> {
    fn drop(&mut self) {
        if self.rows > 0 {
            self.counters.exported.rows.increment(self.rows as u64);
        }
    }
}

/// Adds to a `metrics` counter, with the feature on.
macro_rules! export {
    ($self:ident . $name:ident, $n:expr) => {
        #[cfg(feature = "metrics")]
        $self.exported.$name.increment($n as u64);
    };
}

/// Adds `$n` to a counter and to its exported metric.
macro_rules! count {
    ($self:ident . $name:ident, $n:expr) => {{
        $self.$name.fetch_add($n as u64, Relaxed);
        export!($self.$name, $n);
    }};
}

impl Counters {
    /// Counters of the pool named `pool` (its `metrics` label) of backend
    /// `backend` (`"postgres"`, `"mysql"`).
    #[cfg_attr(
        not(feature = "metrics"),
        allow(unused_variables, reason = "the labels are for the metrics feature")
    )]
    pub(crate) fn new(pool: &str, backend: &'static str) -> Counters {
        Counters {
            batches: AtomicU64::default(),
            statements: AtomicU64::default(),
            rows: AtomicU64::default(),
            rows_failed: AtomicU64::default(),
            rows_cancelled: AtomicU64::default(),
            rows_unsent: AtomicU64::default(),
            split_statements: AtomicU64::default(),
            bulk_statements: AtomicU64::default(),
            pipelined_statements: AtomicU64::default(),
            passthrough: AtomicU64::default(),
            flush_natural: AtomicU64::default(),
            flush_full: AtomicU64::default(),
            flush_timer: AtomicU64::default(),
            flush_close: AtomicU64::default(),
            queue_wait_total_us: AtomicU64::default(),
            queue_wait_max_us: AtomicU64::default(),
            queued: AtomicU64::default(),
            in_flight: AtomicU64::default(),
            learns: AtomicU64::default(),
            learn_checks: AtomicU64::default(),
            #[cfg(feature = "metrics")]
            exported: crate::metrics::Exported::new(pool, backend),
        }
    }

    pub(crate) fn flushed(&self, reason: FlushReason, rows: usize) {
        self.batches.fetch_add(1, Relaxed);
        self.rows.fetch_add(rows as u64, Relaxed);
        match reason {
            FlushReason::Natural => count!(self.flush_natural, 1),
            FlushReason::Full => count!(self.flush_full, 1),
            FlushReason::Timer => count!(self.flush_timer, 1),
            FlushReason::Close => count!(self.flush_close, 1),
        }
    }
    /// `rows` rows about to be sent by one flush (already counted by
    /// [`flushed`](Counters::flushed)), until the returned guard is dropped.
    #[cfg_attr(
        not(feature = "metrics"),
        allow(unused_variables, reason = "the rows are for the metrics feature")
    )]
    pub(crate) fn sending(&self, rows: usize) -> Flushed<'_> {
        Flushed {
            counters: self,
            #[cfg(feature = "metrics")]
            rows,
        }
    }
    /// One statement of `rows` rows sent.
    #[cfg_attr(
        not(feature = "metrics"),
        allow(unused_variables, reason = "the rows are for the metrics feature")
    )]
    pub(crate) fn statement(&self, rows: usize) {
        count!(self.statements, 1);
        #[cfg(feature = "metrics")]
        self.exported.statement_rows.record(rows as f64);
    }
    /// A round trip (one statement or a pipelined pair) starts.
    pub(crate) fn round_trip(&self) -> Started {
        Started {
            #[cfg(feature = "metrics")]
            at: crate::metrics::Started(std::time::Instant::now()),
        }
    }
    /// The round trip begun at `started` is answered.
    #[cfg_attr(
        not(feature = "metrics"),
        allow(unused_variables, reason = "the timing is for the metrics feature")
    )]
    pub(crate) fn answered(&self, started: Started) {
        #[cfg(feature = "metrics")]
        self.exported
            .statement_duration
            .record(started.at.0.elapsed().as_secs_f64());
    }
    pub(crate) fn pipelined(&self) {
        count!(self.pipelined_statements, 1);
    }
    pub(crate) fn bulk(&self) {
        count!(self.bulk_statements, 1);
    }
    pub(crate) fn split(&self, n: usize) {
        if n > 0 {
            count!(self.split_statements, n);
        }
    }
    pub(crate) fn failed(&self, n: usize) {
        if n > 0 {
            count!(self.rows_failed, n);
        }
    }
    pub(crate) fn cancelled(&self, n: usize) {
        if n > 0 {
            count!(self.rows_cancelled, n);
        }
    }
    /// Rows counted as flushed that were not sent after all (through
    /// [`Flushed::not_sent`], which keeps the exported count right).
    fn not_sent(&self, n: usize) {
        if n > 0 {
            self.rows.fetch_sub(n as u64, Relaxed);
            self.unsent(n);
        }
    }
    pub(crate) fn unsent(&self, n: usize) {
        if n > 0 {
            count!(self.rows_unsent, n);
        }
    }
    pub(crate) fn learned(&self) {
        count!(self.learns, 1);
    }
    pub(crate) fn learn_checked(&self) {
        count!(self.learn_checks, 1);
    }
    pub(crate) fn passthrough(&self) {
        count!(self.passthrough, 1);
    }
    pub(crate) fn waited(&self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        self.queue_wait_total_us.fetch_add(us, Relaxed);
        self.queue_wait_max_us.fetch_max(us, Relaxed);
        // The same whole microseconds as `Stats::queue_wait_total`, so the
        // histogram's sum matches it.
        #[cfg(feature = "metrics")]
        self.exported.queue_wait.record(us as f64 / 1e6);
    }
    /// The longest queue wait since the last call (or since the pool was
    /// built), and a fresh start for `Stats::queue_wait_max`.
    pub(crate) fn take_queue_wait_max(&self) -> Duration {
        Duration::from_micros(self.queue_wait_max_us.swap(0, Relaxed))
    }
    pub(crate) fn queued_delta(&self, add: usize, sub: usize) {
        if add > 0 {
            self.queued.fetch_add(add as u64, Relaxed);
            #[cfg(feature = "metrics")]
            self.exported.queued.increment(add as f64);
        }
        if sub > 0 {
            self.queued.fetch_sub(sub as u64, Relaxed);
            #[cfg(feature = "metrics")]
            self.exported.queued.decrement(sub as f64);
        }
    }
    pub(crate) fn in_flight_delta(&self, up: bool) {
        if up {
            self.in_flight.fetch_add(1, Relaxed);
            #[cfg(feature = "metrics")]
            self.exported.in_flight.increment(1.0);
        } else {
            self.in_flight.fetch_sub(1, Relaxed);
            #[cfg(feature = "metrics")]
            self.exported.in_flight.decrement(1.0);
        }
    }

    /// Reports the flush limit now in force (see [`Stats::flush_limit`]),
    /// to the `metrics` gauge; `Stats` reads it from the engine.
    pub(crate) fn flush_limit_observer(&self) -> impl Fn(usize) + Send + Sync + 'static {
        #[cfg(feature = "metrics")]
        let gauge = self.exported.flush_limit.clone();
        move |_limit| {
            #[cfg(feature = "metrics")]
            gauge.set(_limit as f64);
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let rows = self.rows.load(Relaxed);
        Stats {
            batches: self.batches.load(Relaxed),
            statements: self.statements.load(Relaxed),
            rows,
            rows_failed: self.rows_failed.load(Relaxed),
            rows_cancelled: self.rows_cancelled.load(Relaxed),
            rows_unsent: self.rows_unsent.load(Relaxed),
            split_statements: self.split_statements.load(Relaxed),
            bulk_statements: self.bulk_statements.load(Relaxed),
            pipelined_statements: self.pipelined_statements.load(Relaxed),
            passthrough: self.passthrough.load(Relaxed),
            flush_natural: self.flush_natural.load(Relaxed),
            flush_full: self.flush_full.load(Relaxed),
            flush_timer: self.flush_timer.load(Relaxed),
            flush_close: self.flush_close.load(Relaxed),
            queue_wait_total: Duration::from_micros(self.queue_wait_total_us.load(Relaxed)),
            queue_wait_max: Duration::from_micros(self.queue_wait_max_us.load(Relaxed)),
            queued: self.queued.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            flush_limit: 0,
            learns: self.learns.load(Relaxed),
            learn_checks: self.learn_checks.load(Relaxed),
        }
    }
}

/// A snapshot of a pool's batching counters since it was built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Flushes: groups of queued rows taken together onto one connection.
    pub batches: u64,
    /// Multi-row statements sent for those flushes (a flush is split into a
    /// few statements of bounded sizes; error isolation adds more).
    pub statements: u64,
    /// Coalesced rows sent to the server: each a caller's coalesced
    /// statement (an `execute` of an INSERT, or a keyed read, update or
    /// delete through `query`, `query_one`, `query_opt` or `execute`).
    ///
    /// Every row accepted for coalescing ends in exactly one of `rows`,
    /// `rows_cancelled` and `rows_unsent`, whatever happens to its caller
    /// (its future dropped, a timeout, a panic elsewhere).
    pub rows: u64,
    /// Accepted rows whose outcome was an error, sent or not (counted also
    /// when the caller had gone and did not hear it).
    pub rows_failed: u64,
    /// Rows dropped from the queue unsent because their caller's future was
    /// dropped first.
    pub rows_cancelled: u64,
    /// Rows that failed without being sent: no connection within
    /// `wait_timeout`, or no connection could be opened (also counted in
    /// `rows_failed`).
    pub rows_unsent: u64,
    /// Extra statements run to isolate failing rows after a batch error.
    pub split_statements: u64,
    /// Of `statements`, those sent by the backend's bulk path instead of a
    /// multi-row INSERT (PostgreSQL: binary `COPY`, see
    /// `PoolBuilder::copy_threshold`).
    pub bulk_statements: u64,
    /// Of `statements`, those sent while another statement was on the wire
    /// on the same connection (the second of a pipelined pair: PostgreSQL,
    /// when a flush or an `execute_many` holds more than one statement's
    /// worth).
    pub pipelined_statements: u64,
    /// Statements executed as they are (not batchable).
    pub passthrough: u64,
    /// Flushes started because a connection was free (natural batching).
    pub flush_natural: u64,
    /// Flushes started because a size limit was reached.
    pub flush_full: u64,
    /// Flushes started by the `max_delay` timer.
    pub flush_timer: u64,
    /// Flushes started by `close()`.
    pub flush_close: u64,
    /// Total time rows spent queued before their flush took them.
    pub queue_wait_total: Duration,
    /// Longest time one row spent queued since the pool was built, or since
    /// the last [`Pool::take_queue_wait_max`](crate::Pool::take_queue_wait_max).
    pub queue_wait_max: Duration,
    /// Rows queued right now.
    pub queued: u64,
    /// Flushes running right now.
    pub in_flight: u64,
    /// Flushes allowed to run at once now: `BatchConfig::max_in_flight`, or
    /// where it adapts (`BatchConfig::adapt_in_flight`), its value now.
    pub flush_limit: u64,
    /// Batchable statement texts learned from the server: its catalog read
    /// and the text prepared (a text's first use, a change of its table, a
    /// statement failed because its table changed under it).
    pub learns: u64,
    /// Checks whether a table changed since its texts were learned: one
    /// catalog query per table (and functions called) every
    /// `BatchConfig::relearn_after` while its texts are in use, shared by
    /// all of them.
    pub learn_checks: u64,
}

impl Stats {
    /// Mean rows per flushed batch (0 when nothing was flushed).
    pub fn rows_per_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.rows as f64 / self.batches as f64
        }
    }

    /// Mean time a row waited in the queue.
    pub fn queue_wait_mean(&self) -> Duration {
        if self.rows == 0 {
            Duration::ZERO
        } else {
            self.queue_wait_total / (self.rows.min(u32::MAX as u64) as u32)
        }
    }
}
