//! PostgreSQL: a coalescing pool on deadpool + tokio-postgres.
//!
//! ```no_run
//! # async fn demo() -> Result<(), batchpool::Error> {
//! use batchpool::BatchConfig;
//! use batchpool::postgres::Pool;
//!
//! let pool = Pool::builder("host=127.0.0.1 user=postgres dbname=app")
//!     .max_size(8)
//!     .batching(BatchConfig::default())
//!     .build()?;
//! let out = pool
//!     .execute("INSERT INTO users (name) VALUES ($1) RETURNING id", &[&"ann"])
//!     .await?;
//! let id: i64 = out.returned().unwrap().get(0);
//! # let _ = id; Ok(()) }
//! ```

mod backend;
mod manager;
mod outcome;
mod transaction;

use std::sync::Arc;

use futures_util::TryStreamExt;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use self::backend::{PgBackend, PgRow, encode, sent_error, unsent_error};
pub use self::manager::{ClientWrapper, Manager};
pub use self::outcome::Outcome;
pub use self::transaction::Transaction;
use crate::config::{BatchConfig, PoolSettings, pool_builder_setters};
use crate::engine::{Backend, Engine, Route};
pub use crate::error::AtomicError;
use crate::error::{Error, Kind};
use crate::stats::Stats;

/// A pooled connection, from [`Pool::get`]: derefs to
/// [`tokio_postgres::Client`] and goes back to the pool when dropped.
pub type Client = deadpool::managed::Object<Manager>;

/// Connection pool status (sizes), from deadpool.
pub type Status = deadpool::Status;

/// One statement's parameters, as tokio-postgres takes them.
pub type Params<'a> = [&'a (dyn ToSql + Sync)];

/// A coalescing PostgreSQL connection pool. Cheap to clone (an `Arc`
/// inside): put it in axum `State` or actix `web::Data` as it is.
///
/// Single-row `INSERT ... VALUES (...)` statements run through
/// [`execute`](Pool::execute) from concurrent tasks are coalesced into
/// multi-row INSERTs; everything else runs as it is on a pooled connection.
#[derive(Clone)]
pub struct Pool {
    engine: Arc<Engine<PgBackend>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("status", &self.status())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Pool`].
#[derive(Debug)]
pub struct PoolBuilder {
    config: Result<tokio_postgres::Config, Error>,
    settings: PoolSettings,
}

impl PoolBuilder {
    pool_builder_setters!();

    /// Prepared statements kept per connection (default 256).
    pub fn statement_cache(mut self, n: usize) -> Self {
        self.settings.statement_cache = n;
        self
    }

    /// Builds the pool. No connection is opened until first use.
    pub fn build(self) -> Result<Pool, Error> {
        let config = self.config?;
        let manager = Manager::new(config, self.settings.statement_cache);
        let pool = self.settings.build_pool(manager)?;
        Ok(Pool {
            engine: Engine::new(PgBackend { pool }, self.settings.batching)?,
        })
    }
}

impl Pool {
    /// Starts building a pool from a libpq-style connection string
    /// (`host=... user=...` or `postgresql://user@host/db`). Connections use
    /// no TLS.
    pub fn builder(config: &str) -> PoolBuilder {
        let parsed = config
            .parse::<tokio_postgres::Config>()
            .map_err(|e| Error::with_source(Kind::Config, "invalid connection string", e));
        Self::builder_inner(parsed)
    }

    /// Starts building a pool from a parsed tokio-postgres config.
    pub fn from_config(config: tokio_postgres::Config) -> PoolBuilder {
        Self::builder_inner(Ok(config))
    }

    fn builder_inner(config: Result<tokio_postgres::Config, Error>) -> PoolBuilder {
        PoolBuilder {
            config,
            settings: PoolSettings::default(),
        }
    }

    /// Runs one statement and returns this caller's own outcome.
    ///
    /// A single-row `INSERT ... VALUES (...)` (optionally `ON CONFLICT`,
    /// `RETURNING`) waits in the queue of its SQL text and is sent with other
    /// callers' rows as one multi-row INSERT; the future resolves once that
    /// statement has committed, with this row's own count and `RETURNING`
    /// row, or this row's own error. Other statements run as they are.
    ///
    /// Parameter count and types are checked here, before the row is queued.
    /// Dropping the future before its row was taken by a flush means the row
    /// is never sent; after that, the row is written anyway.
    pub async fn execute(&self, sql: &str, params: &Params<'_>) -> Result<Outcome, Error> {
        self.engine.check_open()?;
        match self.engine.route(sql).await? {
            Route::Batch(q) => {
                let row = encode(&q.shape.types, params)?;
                let bytes = row.bytes();
                self.engine.submit(&q, row, bytes).await
            }
            Route::Pass => self.passthrough(sql, params).await,
        }
    }

    /// Runs one statement once per parameter row, like JDBC
    /// `addBatch`/`executeBatch`, and returns each row's own outcome in order.
    ///
    /// Batchable rows go through the same queues as [`execute`](Pool::execute)
    /// (so one call of 1000 rows is typically one statement). A row with bad
    /// parameters fails alone. The outer error is for the statement as a
    /// whole (it cannot be prepared, the pool is closed).
    pub async fn execute_many<'p, I, P>(
        &self,
        sql: &str,
        rows: I,
    ) -> Result<Vec<Result<Outcome, Error>>, Error>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Params<'p>>,
    {
        self.engine.check_open()?;
        match self.engine.route(sql).await? {
            Route::Batch(q) => {
                let mut results: Vec<Option<Result<Outcome, Error>>> = Vec::new();
                let mut queued = Vec::new();
                for params in rows {
                    let checked = encode(&q.shape.types, params.as_ref()).and_then(|row| {
                        let bytes = row.bytes();
                        self.engine.check_row(&q, bytes).map(|()| (row, bytes))
                    });
                    match checked {
                        Ok(row) => {
                            queued.push(row);
                            results.push(None);
                        }
                        Err(e) => results.push(Some(Err(e))),
                    }
                }
                let mut done = self.engine.submit_many(&q, queued).await?.into_iter();
                let out = results
                    .into_iter()
                    .map(|slot| match slot {
                        Some(failed) => failed,
                        None => done.next().unwrap_or_else(|| Err(Error::lost())),
                    })
                    .collect();
                Ok(out)
            }
            Route::Pass => {
                let conn = self.engine.backend.get().await?;
                let stmt = conn.prepare_cached(sql).await.map_err(unsent_error)?;
                let encoded: Vec<Result<PgRow, Error>> = rows
                    .into_iter()
                    .map(|p| encode(stmt.params(), p.as_ref()))
                    .collect();
                // Pipelined on one connection: each is its own autocommit
                // statement, sent without waiting for the previous reply.
                let runs = encoded.iter().map(|row| async {
                    let row = row.as_ref().map_err(Clone::clone)?;
                    run_statement(&conn, &stmt, row).await
                });
                let out = futures_util::future::join_all(runs).await;
                self.engine.counters.passthrough();
                Ok(out)
            }
        }
    }

    /// Runs a query (never coalesced) and returns all its rows.
    pub async fn query(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, Error> {
        self.engine.check_open()?;
        let conn = self.engine.backend.get().await?;
        let stmt = conn.prepare_cached(sql).await.map_err(unsent_error)?;
        let row = encode(stmt.params(), params)?;
        let stream = conn.query_raw(&stmt, row.raw()).await.map_err(sent_error)?;
        stream.try_collect().await.map_err(sent_error)
    }

    /// Runs a query expected to return exactly one row.
    pub async fn query_one(&self, sql: &str, params: &Params<'_>) -> Result<Row, Error> {
        let mut rows = self.query(sql, params).await?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(Error::new(
                Kind::Params,
                format!("query_one expected 1 row, the query returned {n}"),
            )),
        }
    }

    /// Runs a query returning zero or one row.
    pub async fn query_opt(&self, sql: &str, params: &Params<'_>) -> Result<Option<Row>, Error> {
        let mut rows = self.query(sql, params).await?;
        match rows.len() {
            0 => Ok(None),
            1 => Ok(Some(rows.remove(0))),
            n => Err(Error::new(
                Kind::Params,
                format!("query_opt expected at most 1 row, the query returned {n}"),
            )),
        }
    }

    async fn passthrough(&self, sql: &str, params: &Params<'_>) -> Result<Outcome, Error> {
        // Each call may run on another pooled connection: a bare BEGIN would
        // leave one connection inside a transaction for some later caller.
        if let Some(keyword) = transaction::transaction_control(sql) {
            return Err(Error::params(format!(
                "{keyword} through Pool::execute would run on an arbitrary pooled connection; \
                 use Pool::begin / Pool::atomic, or Pool::get for manual transaction control"
            )));
        }
        let conn = self.engine.backend.get().await?;
        let stmt = conn.prepare_cached(sql).await.map_err(unsent_error)?;
        let row = encode(stmt.params(), params)?;
        self.engine.counters.passthrough();
        run_statement(&conn, &stmt, &row).await
    }

    /// Benchmark hook: the cached classification of `sql` (`None` when it was
    /// not classified yet). Not part of the API.
    #[doc(hidden)]
    pub fn __cached_is_batchable(&self, sql: &str) -> Option<bool> {
        self.engine.cached_is_batchable(sql)
    }

    /// Runs `statements` as one all-or-nothing group and returns each
    /// statement's outcome, in order.
    ///
    /// * One statement is sent alone in autocommit: no `BEGIN`, no `COMMIT`
    ///   reach the server. One round trip.
    /// * Several are written as `BEGIN`, the statements and `COMMIT` in one
    ///   flush (pipelined): one round trip. If statement *k* fails, the server
    ///   rejects the rest and `COMMIT` rolls back; the error says which
    ///   ([`AtomicError::index`]) and why ([`AtomicError::error`], with its
    ///   SQLSTATE), and nothing of the group committed.
    /// * No statements: nothing is sent and no connection is taken.
    ///
    /// Every statement must be prepared on the connection before it can be
    /// pipelined: the first time a connection sees one of the texts costs one
    /// extra round trip (all the group's new texts are prepared together),
    /// after that the per-connection statement cache serves them. Parameters
    /// are checked before anything is sent.
    ///
    /// The statements run as they are on one pooled connection, never
    /// coalesced with other callers' rows. Transaction control statements
    /// (`BEGIN`, `COMMIT`, `SAVEPOINT`, ...) are refused.
    ///
    /// Cancellation: dropping the future before the group was written sends
    /// nothing; once written (the first poll after the statements are
    /// prepared), the server runs the whole group to its `COMMIT`, and the
    /// connection goes back to the pool only after a `ROLLBACK` sent after it
    /// was answered (so never inside a transaction).
    ///
    /// ```no_run
    /// # async fn demo(pool: batchpool::postgres::Pool) -> Result<(), batchpool::Error> {
    /// let (from, to, amount) = (1i64, 2i64, 50i64);
    /// let outcomes = pool
    ///     .atomic(&[
    ///         ("UPDATE account SET balance = balance - $2 WHERE id = $1", &[&from, &amount]),
    ///         ("UPDATE account SET balance = balance + $2 WHERE id = $1", &[&to, &amount]),
    ///         ("INSERT INTO transfer (src, dst, amount) VALUES ($1, $2, $3)", &[&from, &to, &amount]),
    ///     ])
    ///     .await?;
    /// assert_eq!(outcomes.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn atomic(
        &self,
        statements: &[(&str, &Params<'_>)],
    ) -> Result<Vec<Outcome>, AtomicError> {
        transaction::atomic(self, statements).await
    }

    /// Starts a [`Transaction`] with a lazy `BEGIN`: no connection is taken
    /// and nothing is sent until its first statement, which carries the
    /// `BEGIN` in the same round trip. See [`Transaction`] for the round-trip
    /// counts.
    pub fn begin(&self) -> Transaction {
        Transaction::new(self.clone())
    }

    /// A pooled connection, for anything batchpool does not wrap
    /// (transactions, COPY, LISTEN). It is never used for coalesced rows while
    /// you hold it.
    pub async fn get(&self) -> Result<Client, Error> {
        self.engine.check_open()?;
        self.engine.backend.get().await
    }

    /// Batching counters since the pool was built.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// The engine's queue slots and batching config, for `crate::tower`.
    #[cfg(feature = "tower")]
    pub(crate) fn queue_slots(&self) -> (&Arc<tokio::sync::Semaphore>, &BatchConfig) {
        (self.engine.queue_slots(), &self.engine.config)
    }

    /// Connection pool sizes (deadpool's status).
    pub fn status(&self) -> Status {
        self.engine.backend.pool.status()
    }

    /// Whether [`close`](Pool::close) has been called.
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }

    /// Stops accepting work, flushes every queued row, waits for all
    /// in-flight batches, then closes the connections. Calls made after this
    /// began fail with an error for which
    /// [`is_closed`](Error::is_closed) is true. Idempotent.
    pub async fn close(&self) {
        self.engine.close().await;
        self.engine.backend.pool.close();
    }
}

/// Runs one prepared statement with an encoded row on `conn`.
async fn run_statement(
    conn: &tokio_postgres::Client,
    stmt: &tokio_postgres::Statement,
    row: &PgRow,
) -> Result<Outcome, Error> {
    if conn.is_closed() {
        return Err(Error::new(
            Kind::ConnectionClosed,
            "connection closed before the statement was sent",
        ));
    }
    if stmt.columns().is_empty() {
        let n = conn
            .execute_raw(stmt, row.raw())
            .await
            .map_err(sent_error)?;
        Ok(Outcome::new(n, true, None))
    } else {
        let stream = conn.query_raw(stmt, row.raw()).await.map_err(sent_error)?;
        futures_util::pin_mut!(stream);
        let mut first = None;
        let mut count = 0u64;
        while let Some(r) = stream.try_next().await.map_err(sent_error)? {
            count += 1;
            if first.is_none() {
                first = Some(r);
            }
        }
        let n = stream.rows_affected().unwrap_or(count);
        Ok(Outcome::new(n, true, first))
    }
}

/// Benchmark hooks for the per-row work a batch costs. Not part of the API.
#[doc(hidden)]
pub mod __bench {
    use tokio_postgres::types::Type;

    use super::Params;
    use crate::classify::{Classified, Dialect, classify};

    /// Encodes `rows` as callers do and builds the bind list as a flush does;
    /// returns the number of bound values.
    pub fn encode_and_bind(types: &[Type], rows: &[&Params<'_>]) -> usize {
        let encoded: Vec<_> = rows
            .iter()
            .filter_map(|p| super::encode(types, p).ok())
            .collect();
        let mut bind = Vec::with_capacity(encoded.len() * types.len());
        for row in &encoded {
            bind.extend(row.raw());
        }
        std::hint::black_box(&bind);
        bind.len()
    }

    /// Classifies `sql` (uncached) and renders its statement for `rows` rows.
    pub fn render(sql: &str, rows: usize) -> Option<String> {
        match classify(Dialect::Postgres, sql) {
            Classified::Batchable(shape) => Some(shape.render(rows, None)),
            Classified::PassThrough => None,
        }
    }
}
