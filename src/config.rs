//! Batching configuration shared by both backends.

use std::time::Duration;

use crate::error::{Error, Kind};

/// What `execute` does when the batch queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueFull {
    /// Wait for a slot (backpressure through the caller's future). Default.
    #[default]
    Wait,
    /// Fail at once with an error for which
    /// [`Error::is_overloaded`](crate::error::Error::is_overloaded) is true.
    Reject,
}

/// How rows are coalesced and when a batch is flushed.
///
/// The default is *natural batching*: a row is sent as soon as a connection is
/// free, so a lone caller pays no added latency; while every connection is
/// busy, rows of the same statement accumulate and go out together with the
/// next free connection. Setting [`max_delay`](BatchConfig::max_delay)
/// switches to *timed batching*: the first queued row starts a timer and the
/// batch is sent when it expires or a size limit is reached.
///
/// Build it from [`BatchConfig::default`] with the setters; the fields can be
/// read (and set) directly, but new ones may be added, so it cannot be
/// written as a struct literal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchConfig {
    /// Most rows in one flush (and in one statement). Default 1000.
    pub max_rows: usize,
    /// Most encoded parameter bytes in one flush. Default 16 MiB. A single row
    /// larger than this fails for its caller alone.
    pub max_bytes: usize,
    /// Timed batching: wait at most this long after the first queued row
    /// before flushing. `None` (default) = natural batching.
    pub max_delay: Option<Duration>,
    /// Most rows waiting in queues (all statements together) before callers
    /// wait or are rejected, see [`queue_full`](BatchConfig::queue_full).
    /// Default 65536.
    pub queue_capacity: usize,
    /// Behaviour when the queue is full. Default [`QueueFull::Wait`].
    pub queue_full: QueueFull,
    /// Distinct SQL texts whose classification is cached. Default 1024.
    pub cache_capacity: usize,
    /// Most flushes running at once in the pool, fixed. `None` (the
    /// default): as many as the pool has connections (`max_size`), fewer
    /// while [`adapt_in_flight`](BatchConfig::adapt_in_flight) finds that
    /// fewer carry more rows per second. Natural batching sends what is
    /// queued whenever a flush can start, so this number decides how many
    /// rows each statement carries; on a server that is CPU- or
    /// commit-bound, fewer concurrent flushes make larger statements and
    /// more rows per second, at the cost of a little queueing. A number set
    /// here is kept as it is. Pass-through statements are not counted.
    pub max_in_flight: Option<usize>,
    /// With `max_in_flight` unset, let the number of flushes in flight
    /// adapt to what the server answers (default `true`). It starts at the
    /// pool's `max_size`, and only while it holds flushes back does it try
    /// half as many and (below the pool's size) twice as many, for a
    /// measuring window each, keeping a trial when it carried clearly more
    /// rows per second in two windows running (a hill climb, tried again
    /// every few seconds).
    /// The limit in force is [`Stats::flush_limit`](crate::Stats::flush_limit).
    /// `false`: one flush per connection, always.
    pub adapt_in_flight: bool,
    /// `false` turns coalescing off: every statement runs on its own (useful
    /// for comparison runs). Default `true`.
    pub enabled: bool,
    /// How long what the server said about a statement text (its parameter
    /// types, its table's triggers, rules, engine and key types, which decide
    /// whether and how it is coalesced) is trusted before it is learned
    /// again, in the background. Default 1 s. A statement that fails because
    /// its table changed under it is re-learned at once.
    pub relearn_after: Duration,
    /// Two statements on the wire at once where the backend can (PostgreSQL):
    /// a flush that finds more than one statement's worth queued sends the
    /// second before the first is answered, and `execute_many` keeps its
    /// next statement on the wire. Default `true`; `false` sends one
    /// statement at a time.
    pub pipeline: bool,
    /// Coalesce keyed reads, `SELECT <columns> FROM t WHERE k = $1 [AND
    /// ...]` (both backends; see the guide for the exact rules). Default
    /// `true`; `false` runs each on its own.
    pub reads: bool,
    /// Coalesce keyed updates, `UPDATE t SET c = <expression> WHERE k = $1
    /// [AND ...]` (both backends), callers of texts that differ only in
    /// what they assign together (see the guide). Default `true`.
    pub updates: bool,
    /// Coalesce keyed deletes, `DELETE FROM t WHERE k = $1 [AND ...]`
    /// (both backends). Default `true`.
    pub deletes: bool,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_rows: 1000,
            max_bytes: 16 << 20,
            max_delay: None,
            queue_capacity: 65536,
            queue_full: QueueFull::Wait,
            cache_capacity: 1024,
            max_in_flight: None,
            adapt_in_flight: true,
            enabled: true,
            relearn_after: Duration::from_secs(1),
            pipeline: true,
            reads: true,
            updates: true,
            deletes: true,
        }
    }
}

/// Builder-style setters of a config struct: `field: Type` sets the field
/// to the value, `field: Some(Type)` to `Some(value)`.
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $($some:ident)? ($ty:ty)),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $field(mut self, value: $ty) -> Self {
                self.$field = $($some)?(value);
                self
            }
        )*
    };
}
#[cfg(feature = "tower")]
pub(crate) use setters;

impl BatchConfig {
    setters! {
        /// Sets [`max_rows`](BatchConfig::max_rows).
        max_rows: (usize),
        /// Sets [`max_bytes`](BatchConfig::max_bytes).
        max_bytes: (usize),
        /// Sets [`max_delay`](BatchConfig::max_delay) (timed batching).
        max_delay: Some(Duration),
        /// Sets [`queue_capacity`](BatchConfig::queue_capacity).
        queue_capacity: (usize),
        /// Sets [`queue_full`](BatchConfig::queue_full).
        queue_full: (QueueFull),
        /// Sets [`cache_capacity`](BatchConfig::cache_capacity).
        cache_capacity: (usize),
        /// Sets [`max_in_flight`](BatchConfig::max_in_flight).
        max_in_flight: Some(usize),
        /// Sets [`adapt_in_flight`](BatchConfig::adapt_in_flight).
        adapt_in_flight: (bool),
        /// Sets [`enabled`](BatchConfig::enabled).
        enabled: (bool),
        /// Sets [`relearn_after`](BatchConfig::relearn_after).
        relearn_after: (Duration),
        /// Sets [`pipeline`](BatchConfig::pipeline).
        pipeline: (bool),
        /// Sets [`reads`](BatchConfig::reads).
        reads: (bool),
        /// Sets [`updates`](BatchConfig::updates).
        updates: (bool),
        /// Sets [`deletes`](BatchConfig::deletes).
        deletes: (bool),
    }

    /// Whether statements of `kind` are coalesced.
    pub(crate) fn coalesces(&self, kind: crate::classify::KeyedKind) -> bool {
        match kind {
            crate::classify::KeyedKind::Read => self.reads,
            crate::classify::KeyedKind::Update => self.updates,
            crate::classify::KeyedKind::Delete => self.deletes,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |what: &str| {
            Err(Error::new(
                Kind::Config,
                format!("invalid batch config: {what}"),
            ))
        };
        if self.max_rows == 0 {
            return bad("max_rows must be at least 1");
        }
        if self.max_bytes == 0 {
            return bad("max_bytes must be at least 1");
        }
        if self.queue_capacity == 0 {
            return bad("queue_capacity must be at least 1");
        }
        if self.max_in_flight == Some(0) {
            return bad("max_in_flight must be at least 1");
        }
        if self.cache_capacity == 0 {
            return bad("cache_capacity must be at least 1");
        }
        Ok(())
    }
}

/// How long after a session's statement time limit the pool still waits for
/// the server's own answer (its cancellation error) before it gives up on
/// the connection.
pub(crate) const STATEMENT_GRACE: Duration = Duration::from_secs(1);
/// Default [`PoolBuilder::create_timeout`](crate::PoolBuilder::create_timeout).
pub(crate) const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`PoolBuilder::recycle_timeout`](crate::PoolBuilder::recycle_timeout).
pub(crate) const DEFAULT_RECYCLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`PoolBuilder::tcp_keepalive`](crate::PoolBuilder::tcp_keepalive).
pub(crate) const DEFAULT_TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// Default [`PoolBuilder::tcp_user_timeout`](crate::PoolBuilder::tcp_user_timeout).
pub(crate) const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The time limits the engine enforces itself.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    /// End-to-end bound on a call's wait for a queue slot and a connection.
    pub(crate) wait: Option<Duration>,
}

/// Connection-pool settings of a [`PoolBuilder`](crate::PoolBuilder).
#[derive(Debug, Clone)]
pub(crate) struct PoolSettings {
    pub(crate) max_size: usize,
    pub(crate) wait_timeout: Option<Duration>,
    pub(crate) create_timeout: Option<Duration>,
    pub(crate) recycle_timeout: Option<Duration>,
    pub(crate) statement_timeout: Option<Duration>,
    pub(crate) tcp_keepalive: Option<Duration>,
    pub(crate) tcp_user_timeout: Option<Duration>,
    pub(crate) statement_cache: usize,
    pub(crate) max_lifetime: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) batching: BatchConfig,
    /// The `pool` label of the pool's metrics.
    pub(crate) name: String,
}

impl Default for PoolSettings {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        PoolSettings {
            max_size: (cores * 2).max(4),
            wait_timeout: None,
            create_timeout: Some(DEFAULT_CREATE_TIMEOUT),
            recycle_timeout: Some(DEFAULT_RECYCLE_TIMEOUT),
            // The session's own limit (connection string, role, database,
            // server) unless the user asks for one.
            statement_timeout: None,
            tcp_keepalive: Some(DEFAULT_TCP_KEEPALIVE),
            tcp_user_timeout: Some(DEFAULT_TCP_USER_TIMEOUT),
            statement_cache: 256,
            // No lifetime or idle limit: a connection is closed only when
            // it breaks (or by `Pool::retire_all`), as deadpool does.
            max_lifetime: None,
            idle_timeout: None,
            batching: BatchConfig::default(),
            name: "default".to_owned(),
        }
    }
}

impl PoolSettings {
    /// The limits the engine enforces.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            wait: self.wait_timeout,
        }
    }

    /// The connections' lifecycle, for the manager.
    pub(crate) fn lifecycle(&self) -> crate::backend::Lifecycle {
        crate::backend::Lifecycle::new(self.max_lifetime, self.idle_timeout)
    }

    /// The deadpool pool for `manager`, with these sizes and timeouts.
    pub(crate) fn build_pool<M: deadpool::managed::Manager>(
        &self,
        manager: M,
    ) -> Result<deadpool::managed::Pool<M>, Error> {
        let config_error = |msg: String| Error::new(Kind::Config, msg);
        if self.max_size == 0 {
            return Err(config_error("max_size must be at least 1".into()));
        }
        deadpool::managed::Pool::builder(manager)
            .max_size(self.max_size)
            // The engine bounds every wait itself, end to end from the
            // call's start (`Limits::wait`).
            .wait_timeout(None)
            .create_timeout(self.create_timeout)
            .recycle_timeout(self.recycle_timeout)
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .map_err(|e| config_error(format!("cannot build pool: {e}")))
    }
}
