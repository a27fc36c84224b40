//! [`PoolBuilder`]: connection settings, pool sizes, timeouts and batching.

use std::fmt;
use std::time::Duration;

use super::Pool;
use crate::backend::Backend;
use crate::config::{BatchConfig, PoolSettings};
use crate::engine::Engine;
use crate::error::Error;

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

    /// Longest wait for a free connection (default: unbounded).
    pub fn wait_timeout(mut self, d: Duration) -> Self {
        self.settings.wait_timeout = Some(d);
        self
    }

    /// Longest time to open a new connection (default: unbounded).
    pub fn create_timeout(mut self, d: Duration) -> Self {
        self.settings.create_timeout = Some(d);
        self
    }

    /// Longest time to check a returning connection (default: unbounded).
    pub fn recycle_timeout(mut self, d: Duration) -> Self {
        self.settings.recycle_timeout = Some(d);
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
        Ok(Pool {
            engine: Engine::new(backend, self.settings.batching)?,
        })
    }
}
