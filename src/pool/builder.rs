//! [`PoolBuilder`]: connection settings, pool sizes, timeouts and batching.

use std::fmt;
use std::time::Duration;

use super::Pool;
use crate::backend::Backend;
use crate::config::{BatchConfig, PoolSettings};
use crate::engine::Engine;
use crate::error::Error;
use crate::stats::Counters;

/// The builder's setters of `Option<Duration>` settings (each takes a
/// `Duration` or `None`), with their documentation.
macro_rules! duration_setters {
    ($($(#[$doc:meta])* $name:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, d: impl Into<Option<Duration>>) -> Self {
                self.settings.$name = d.into();
                self
            }
        )*
    };
}

/// Builds a [`Pool`]: from [`Pool::builder`] (a connection string) or the
/// backend's own config type (`postgres::Pool::from_config`,
/// `mysql::Pool::from_opts`).
///
/// ```no_run
/// # fn demo() -> Result<(), batchpool::Error> {
/// use std::time::Duration;
/// use batchpool::BatchConfig;
///
/// let pool = batchpool::postgres::Pool::builder("host=127.0.0.1 user=postgres dbname=app")
///     .max_size(16)
///     .wait_timeout(Duration::from_secs(2))
///     .batching(BatchConfig::default().max_rows(500))
///     .build()?;
/// # let _ = pool; Ok(()) }
/// ```
pub struct PoolBuilder<B: Backend> {
    config: Result<B::Config, Error>,
    pub(crate) settings: PoolSettings,
    pub(crate) options: B::Options,
}

impl<B: Backend> fmt::Debug for PoolBuilder<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Config<'a, B: Backend>(&'a B::Config);
        impl<B: Backend> fmt::Debug for Config<'_, B> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                B::fmt_config(self.0, f)
            }
        }
        f.debug_struct("PoolBuilder")
            .field("backend", &B::NAME)
            .field("config", &self.config.as_ref().map(Config::<B>))
            .field("settings", &self.settings)
            .field("options", &self.options)
            .finish()
    }
}

impl<B: Backend> PoolBuilder<B> {
    pub(crate) fn new(config: Result<B::Config, Error>) -> PoolBuilder<B> {
        PoolBuilder {
            config,
            settings: PoolSettings::default(),
            options: B::Options::default(),
        }
    }

    /// Most connections (default: 2 × CPU cores, at least 4). This also
    /// bounds the batches in flight.
    pub fn max_size(mut self, n: usize) -> Self {
        self.settings.max_size = n;
        self
    }

    duration_setters! {
        /// Longest time a call may wait before its statement is sent: for its
        /// SQL text to be learned, a queue slot, a connection (opening one
        /// included), counted end to end from the call's start (default:
        /// unbounded). A coalesced row not sent when its time is up fails then,
        /// with an error for which [`Error::is_timeout`](crate::Error::is_timeout)
        /// is true and [`is_outcome_unknown`](crate::Error::is_outcome_unknown)
        /// false, and is never sent afterwards — whatever held it: no connection
        /// free, a flush waiting to take more rows, an earlier statement of its
        /// own flush. Rows already sent are bounded by
        /// [`statement_timeout`](PoolBuilder::statement_timeout) instead.
        wait_timeout;

        /// Longest time to open a new connection (default 10 s). `None` for
        /// unbounded.
        create_timeout;

        /// Longest time to check a connection before it is handed out again
        /// (default 5 s). `None` for unbounded.
        recycle_timeout;

        /// Time limit of every statement the pool sends (default `None`: the
        /// session's own limit, from the connection string, the role or user,
        /// the database or the server; the pool sets none).
        ///
        /// Whichever limit a session has is enforced twice. The server cancels
        /// a slow statement at the limit, and every caller of it gets a
        /// definite error for which
        /// [`Error::is_statement_timeout`](crate::Error::is_statement_timeout)
        /// is true (nothing of it committed). And the pool waits for an answer
        /// at most the limit plus 1 s: a statement still unanswered then (a
        /// network black hole, a stalled server) fails its callers with an
        /// error for which [`is_outcome_unknown`](crate::Error::is_outcome_unknown)
        /// and [`is_timeout`](crate::Error::is_timeout) are true, and its
        /// connection is closed, never returned to the pool. The pool reads the
        /// session's limit from the server (`SHOW statement_timeout`,
        /// `@@max_statement_time`) when a connection opens and after every
        /// reset; a session without one gets no deadline from the pool either
        /// (TCP keepalive and [`tcp_user_timeout`](PoolBuilder::tcp_user_timeout)
        /// still notice a vanished peer).
        ///
        /// Set, the pool changes the session for its own statements: `SET
        /// statement_timeout` (PostgreSQL, not behind a pooler) or `SET SESSION
        /// max_statement_time` (MariaDB) on each new connection. A `post_create`
        /// hook that sets the limit itself wins. A `Pool::get` connection gets
        /// the session's own limit back before it is handed out (one round
        /// trip), so a long migration or `VACUUM` on it is not cut by this
        /// setting. Where the server cannot take it (behind a transaction-mode
        /// pooler, MySQL's writes) only the pool's deadline applies.
        statement_timeout;

        /// TCP keepalive idle time of new connections (default 30 s; `None`
        /// turns keepalive off), unless the connection string sets it
        /// (`keepalives_idle` / `keepalives=0`, `tcp_keepalive`). With
        /// [`tcp_user_timeout`](PoolBuilder::tcp_user_timeout) it is how a
        /// connection to a vanished host is noticed while it is idle.
        tcp_keepalive;

        /// `TCP_USER_TIMEOUT` of new connections (default 30 s; `None` for the
        /// OS default, which retransmits for about 15 minutes), unless the
        /// connection string sets `tcp_user_timeout`: how long sent data (or a
        /// keepalive probe) may stay unacknowledged before the OS closes the
        /// connection. PostgreSQL only: mysql_async does not expose it.
        tcp_user_timeout;

        /// Longest time a connection is kept open, counted from when it was
        /// opened (default `None`: no limit). An older connection is closed
        /// instead of being handed out, and an idle one by a background task
        /// within about a quarter of this (at most 1 s) after it reaches the
        /// age; a new one is opened when needed. A connection in use is never
        /// closed under its user: one lent by [`Pool::get`](crate::postgres::Pool::get),
        /// in a [`Transaction`](crate::Transaction) or carrying a statement is
        /// closed when it comes back.
        ///
        /// Set it below any limit between the pool and the server (a load
        /// balancer's or firewall's connection lifetime, a server's
        /// `idle_session_timeout` / `wait_timeout`...), or to spread sessions
        /// over servers added behind a load balancer. Every connection opened
        /// at once reaches the age at once too.
        max_lifetime;

        /// Longest time a connection may sit unused in the pool before it is
        /// closed (default `None`: no limit), by a background task that looks
        /// about four times per `idle_timeout` (at most once a second): an idle
        /// connection is closed between `idle_timeout` and about 1.5 ×
        /// `idle_timeout` after it came back. A connection in use is never
        /// closed. Set it to give connections back to the server after a burst,
        /// or below a firewall's or the server's idle limit (MySQL's
        /// `wait_timeout`, PostgreSQL's `idle_session_timeout`), so that a
        /// connection the other side closed is never handed out.
        idle_timeout;
    }

    /// The pool's name (default `"default"`): the `pool` label of its
    /// metrics (feature `metrics`, see `batchpool::metrics`), to tell the pools
    /// of one process apart.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.name = name.into();
        self
    }

    /// How rows are coalesced (default [`BatchConfig::default`]).
    pub fn batching(mut self, config: BatchConfig) -> Self {
        self.settings.batching = config;
        self
    }

    /// Prepared statements kept per connection (default 256). Each coalesced
    /// statement text uses up to about 20 (one per allowed row count). On
    /// MySQL this replaces the URL's `stmt_cache_size` and must be at least
    /// 1 (statements leave mysql_async's cache only by being closed).
    pub fn statement_cache(mut self, n: usize) -> Self {
        self.settings.statement_cache = n;
        self
    }

    /// Builds the pool. No connection is opened until first use.
    pub fn build(self) -> Result<Pool<B>, Error> {
        let backend = B::open(self.config?, &self.settings, self.options)?;
        let limits = self.settings.limits();
        let counters = Counters::new(&self.settings.name, B::LABEL);
        Ok(Pool {
            engine: Engine::new(backend, self.settings.batching, limits, counters)?,
        })
    }
}
