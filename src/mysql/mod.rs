//! MySQL / MariaDB: a coalescing pool on deadpool + mysql_async.
//!
//! ```no_run
//! # async fn demo() -> Result<(), batchpool::Error> {
//! use batchpool::BatchConfig;
//! use batchpool::mysql::Pool;
//!
//! let pool = Pool::builder("mysql://app@127.0.0.1:3306/app")
//!     .max_size(8)
//!     .batching(BatchConfig::default())
//!     .build()?;
//! let out = pool
//!     .execute("INSERT INTO users (name, email) VALUES (?, ?)", ("ann", "ann@example.com"))
//!     .await?;
//! assert_eq!(out.rows_affected(), 1);
//! let id = out.last_insert_id(); // this caller's own id, when provable
//! # let _ = id; Ok(()) }
//! ```
//!
//! # What is coalesced
//!
//! A single-row `INSERT [IGNORE] ... VALUES (...)`, `REPLACE ... VALUES
//! (...)` (also `VALUE`), optionally with `ON DUPLICATE KEY UPDATE` or
//! MariaDB's `RETURNING`, into a **transactional** table (InnoDB): a failed
//! multi-row statement must leave nothing behind so its rows can be re-run
//! to find the offending one, which MyISAM / Aria / MEMORY do not
//! guarantee. Statements into other tables, views, temporary tables or
//! tables batchpool cannot find in `information_schema` run on their own.
//!
//! The multi-row statement is a prepared statement, one per row count of a
//! bounded set (about 20 per statement text, see the engine's allowed
//! sizes), cached per connection by mysql_async: the pool raises
//! mysql_async's default cache of 32 statements to 256
//! ([`PoolBuilder::statement_cache`]) so a few shapes plus your own
//! statements do not evict each other. Mind the server's
//! `max_prepared_stmt_count` (default 16382) across all connections.
//!
//! A flush is bounded by 65535 placeholders and by the server's
//! `@@max_allowed_packet` (read once, from the first connection): rows are
//! measured as the binary protocol encodes their values plus their share of
//! the statement text, and a statement keeps `min(packet / 4, 8 KiB)` for
//! its fixed text and headers. One row that alone exceeds that fails with
//! [`Error::is_too_large`] for its caller only.
//!
//! MySQL runs one statement at a time per connection (no pipelining), so
//! concurrency comes from the pool's connections.
//!
//! # Per-row outcomes
//!
//! See [`Outcome`]: a plain INSERT's rows get 1 each; `INSERT IGNORE`,
//! `REPLACE` and `ON DUPLICATE KEY UPDATE`, for which MySQL counts 0, 1 or 2
//! per row but reports only a total, are exact only when the total can be
//! split one way ([`Outcome::is_exact`]), or always with
//! [`PoolBuilder::coalesce_upserts(false)`](PoolBuilder::coalesce_upserts).
//! Per-row auto-increment ids are given only when provably consecutive
//! ([`Outcome::last_insert_id`]). `RETURNING` rows go to their callers in
//! VALUES order.
//!
//! # Errors
//!
//! A server error that can belong to one row (duplicate key 1062, NULL
//! 1048, no default 1364, bad value 1366 / 1292, too long 1406, out of
//! range 1264, foreign key 1451 / 1452, check constraint 3819 / 4025,
//! SIGNAL 1644, deadlock 1213, lock wait timeout 1205, any SQLSTATE 22xxx /
//! 23xxx) fails only its own caller; the other rows are re-run in smaller
//! statements. Lock wait timeouts are isolated the same way, which costs up
//! to one `innodb_lock_wait_timeout` per split. Other server errors fail
//! every row of the statement. A connection lost after the statement was
//! sent gives [`Error::is_outcome_unknown`]; before, [`Error::is_closed`].
//! [`Error::code`] is the SQLSTATE, [`Error::as_mysql_error`] the server's
//! error (`code` 1062...).

mod backend;
mod manager;
mod outcome;
mod transaction;

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Params, Row};

use self::backend::{MyBackend, closed_before_send, encode, sent_error, unsent_error};
use self::manager::Redacted;
pub use self::manager::{ConnWrapper, Manager};
pub use self::outcome::Outcome;
pub use self::transaction::Transaction;
use crate::config::{BatchConfig, PoolSettings, pool_builder_setters};
use crate::engine::{Backend, Engine, Route};
pub use crate::error::AtomicError;
use crate::error::{Error, Kind};
use crate::stats::Stats;

/// A pooled connection, from [`Pool::get`]: derefs to
/// [`mysql_async::Conn`] and goes back to the pool when dropped (after a
/// `COM_RESET_CONNECTION`).
pub type PooledConn = deadpool::managed::Object<Manager>;

/// Connection pool status (sizes), from deadpool.
pub type Status = deadpool::Status;

/// A coalescing MySQL / MariaDB connection pool. Cheap to clone (an `Arc`
/// inside): put it in axum `State` or actix `web::Data` as it is.
///
/// Single-row `INSERT ... VALUES (...)` statements run through
/// [`execute`](Pool::execute) from concurrent tasks are coalesced into
/// multi-row INSERTs; everything else runs as it is on a pooled connection.
/// Parameters are mysql_async [`Params`]: tuples such as `("ann", 7)`,
/// `vec![Value::from(1)]`, `()` for none; named parameters (`params!`) work
/// for statements that are not coalesced.
#[derive(Clone)]
pub struct Pool {
    engine: Arc<Engine<MyBackend>>,
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
pub struct PoolBuilder {
    opts: Result<Opts, Error>,
    settings: PoolSettings,
    coalesce_upserts: bool,
}

impl std::fmt::Debug for PoolBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opts = self.opts.as_ref().map(Redacted);
        f.debug_struct("PoolBuilder")
            .field("opts", &opts)
            .field("settings", &self.settings)
            .field("coalesce_upserts", &self.coalesce_upserts)
            .finish()
    }
}

impl PoolBuilder {
    pool_builder_setters!();

    /// Prepared statements mysql_async keeps per connection (default 256,
    /// replacing the URL's `stmt_cache_size`; at least 1, as statements
    /// leave the cache only by being closed). Each coalesced statement text
    /// uses up to about 20 (one per allowed row count).
    pub fn statement_cache(mut self, n: usize) -> Self {
        self.settings.statement_cache = n;
        self
    }
    /// Whether `INSERT IGNORE`, `REPLACE` and `ON DUPLICATE KEY UPDATE`
    /// are coalesced (default `true`). Their per-row counts are then exact
    /// only in the cases listed at [`Outcome::is_exact`] and their per-row
    /// `last_insert_id` is `None`; with `false` they run one by one and
    /// report MySQL's exact counts and ids.
    pub fn coalesce_upserts(mut self, on: bool) -> Self {
        self.coalesce_upserts = on;
        self
    }
    /// Builds the pool. No connection is opened until first use.
    pub fn build(self) -> Result<Pool, Error> {
        let opts = self.opts?;
        if self.settings.statement_cache == 0 {
            // mysql_async never closes statements it does not cache.
            return Err(Error::new(
                Kind::Config,
                "statement_cache must be at least 1 (batchpool prepares every statement)",
            ));
        }
        let found_rows = opts.client_found_rows();
        let opts: Opts = OptsBuilder::from_opts(opts)
            .stmt_cache_size(self.settings.statement_cache)
            .into();
        let manager = Manager::new(opts);
        let server = manager.server.clone();
        let pool = self.settings.build_pool(manager)?;
        let backend = MyBackend {
            pool,
            server,
            coalesce_upserts: self.coalesce_upserts,
            found_rows,
            learning: Default::default(),
        };
        Ok(Pool {
            engine: Engine::new(backend, self.settings.batching)?,
        })
    }
}

impl Pool {
    /// Starts building a pool from a `mysql://user:password@host:port/db`
    /// URL (mysql_async's URL parameters apply).
    pub fn builder(url: &str) -> PoolBuilder {
        let opts = Opts::from_url(url)
            .map_err(|e| Error::with_source(Kind::Config, "invalid MySQL URL", e));
        Self::builder_inner(opts)
    }

    /// Starts building a pool from mysql_async options.
    pub fn from_opts(opts: impl Into<Opts>) -> PoolBuilder {
        Self::builder_inner(Ok(opts.into()))
    }

    fn builder_inner(opts: Result<Opts, Error>) -> PoolBuilder {
        PoolBuilder {
            opts,
            settings: PoolSettings::default(),
            coalesce_upserts: true,
        }
    }

    /// Runs one statement and returns this caller's own outcome.
    ///
    /// A single-row INSERT (see the [module docs](self)) waits in the queue
    /// of its SQL text and is sent with other callers' rows as one
    /// multi-row INSERT; the future resolves once that statement has
    /// committed, with this row's own count, id and `RETURNING` row, or this
    /// row's own error. Other statements run as they are (with no
    /// parameters, over the text protocol, so any statement works).
    ///
    /// The parameter count is checked here, before the row is queued.
    /// Dropping the future before its row was taken by a flush means the
    /// row is never sent; after that, the row is written anyway.
    pub async fn execute(&self, sql: &str, params: impl Into<Params>) -> Result<Outcome, Error> {
        self.execute_params(sql, params.into()).await
    }

    async fn execute_params(&self, sql: &str, params: Params) -> Result<Outcome, Error> {
        self.engine.check_open()?;
        match self.engine.route(sql).await? {
            Route::Batch(q) => {
                let row = encode(&q.shape, params)?;
                self.check_packet(row.bytes)?;
                let bytes = row.bytes;
                self.engine.submit(&q, row, bytes).await
            }
            Route::Pass => {
                let mut conn = self.engine.backend.get().await?;
                self.engine.counters.passthrough();
                run_statement(&mut conn, sql, params).await
            }
        }
    }

    /// A row too big for any statement fails with a message naming the
    /// server's limit.
    fn check_packet(&self, bytes: usize) -> Result<(), Error> {
        let (limit, packet) = self.engine.backend.row_limit();
        if bytes > limit {
            return Err(Error::too_large(format!(
                "row of {bytes} bytes does not fit the server's max_allowed_packet of {packet} \
                 bytes ({} kept for the statement text and headers)",
                packet - limit
            )));
        }
        Ok(())
    }

    /// Runs one statement once per parameter row, like JDBC
    /// `addBatch`/`executeBatch`, and returns each row's own outcome in
    /// order.
    ///
    /// Batchable rows go through the same queues as
    /// [`execute`](Pool::execute) (so one call of 1000 rows is typically
    /// one statement). A row with bad parameters fails alone. The outer
    /// error is for the statement as a whole (it cannot be prepared, the
    /// pool is closed).
    pub async fn execute_many<I, P>(
        &self,
        sql: &str,
        rows: I,
    ) -> Result<Vec<Result<Outcome, Error>>, Error>
    where
        I: IntoIterator<Item = P>,
        P: Into<Params>,
    {
        let rows: Vec<Params> = rows.into_iter().map(Into::into).collect();
        self.execute_many_params(sql, rows).await
    }

    async fn execute_many_params(
        &self,
        sql: &str,
        rows: Vec<Params>,
    ) -> Result<Vec<Result<Outcome, Error>>, Error> {
        self.engine.check_open()?;
        match self.engine.route(sql).await? {
            Route::Batch(q) => {
                let mut results: Vec<Option<Result<Outcome, Error>>> = Vec::new();
                let mut queued = Vec::new();
                for params in rows {
                    let checked = encode(&q.shape, params).and_then(|row| {
                        self.check_packet(row.bytes)?;
                        let bytes = row.bytes;
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
                Ok(results
                    .into_iter()
                    .map(|slot| match slot {
                        Some(failed) => failed,
                        None => done.next().unwrap_or_else(|| Err(Error::lost())),
                    })
                    .collect())
            }
            Route::Pass => {
                let mut conn = self.engine.backend.get().await?;
                let mut out = Vec::with_capacity(rows.len());
                // One connection, one statement at a time: MySQL has no
                // pipelining. Each row is its own autocommit statement.
                for params in rows {
                    out.push(run_statement(&mut conn, sql, params).await);
                }
                self.engine.counters.passthrough();
                Ok(out)
            }
        }
    }

    /// Runs a query (never coalesced) and returns the rows of its first
    /// result set.
    pub async fn query(&self, sql: &str, params: impl Into<Params>) -> Result<Vec<Row>, Error> {
        self.query_params(sql, params.into()).await
    }

    async fn query_params(&self, sql: &str, params: Params) -> Result<Vec<Row>, Error> {
        self.engine.check_open()?;
        let mut conn = self.engine.backend.get().await?;
        run(&mut conn, sql, params).await.map(|r| r.rows)
    }

    /// Runs a query expected to return exactly one row.
    pub async fn query_one(&self, sql: &str, params: impl Into<Params>) -> Result<Row, Error> {
        let mut rows = self.query_params(sql, params.into()).await?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(Error::new(
                Kind::Params,
                format!("query_one expected 1 row, the query returned {n}"),
            )),
        }
    }

    /// Runs a query returning zero or one row.
    pub async fn query_opt(
        &self,
        sql: &str,
        params: impl Into<Params>,
    ) -> Result<Option<Row>, Error> {
        let mut rows = self.query_params(sql, params.into()).await?;
        match rows.len() {
            0 => Ok(None),
            1 => Ok(Some(rows.remove(0))),
            n => Err(Error::new(
                Kind::Params,
                format!("query_opt expected at most 1 row, the query returned {n}"),
            )),
        }
    }

    /// Runs `statements` as one all-or-nothing group and returns each
    /// statement's outcome, in order.
    ///
    /// * One statement is sent alone in autocommit: no `START TRANSACTION`,
    ///   no `COMMIT` reach the server. One round trip.
    /// * Several run as `START TRANSACTION`, the statements one by one, and
    ///   `COMMIT`: n + 2 round trips (mysql_async cannot pipeline, and a
    ///   prepared statement cannot carry `BEGIN`/`COMMIT`). If statement *k*
    ///   fails, the rest is not sent, `ROLLBACK` follows, and the error says
    ///   which ([`AtomicError::index`]) and why; nothing of the group
    ///   committed.
    /// * No statements: nothing is sent and no connection is taken.
    ///
    /// Parameterized statements are prepared (and cached per connection)
    /// before the transaction starts, so a bad text or parameter count fails
    /// before anything runs; the first use of a text on a connection costs one
    /// `COM_STMT_PREPARE` round trip. Statements run as they are on one pooled
    /// connection, never coalesced with other callers' rows. Transaction
    /// control is refused, and in groups of two or more so are statements
    /// MySQL commits implicitly (DDL, `LOCK TABLES`...).
    ///
    /// Cancellation: the connection never goes back to the pool inside a
    /// transaction (see [`Transaction`]); a group cancelled before its
    /// `COMMIT` was sent is rolled back.
    ///
    /// ```no_run
    /// # async fn demo(pool: batchpool::mysql::Pool) -> Result<(), batchpool::Error> {
    /// let outcomes = pool
    ///     .atomic([
    ///         ("UPDATE account SET balance = balance - ? WHERE id = ?", (50, 1).into()),
    ///         ("UPDATE account SET balance = balance + ? WHERE id = ?", (50, 2).into()),
    ///     ])
    ///     .await?;
    /// assert_eq!(outcomes.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn atomic<'a, I>(&self, statements: I) -> Result<Vec<Outcome>, AtomicError>
    where
        I: IntoIterator<Item = (&'a str, Params)>,
    {
        transaction::atomic(self, statements.into_iter().collect()).await
    }

    /// Starts a [`Transaction`] with a lazy `START TRANSACTION`: no
    /// connection is taken and nothing is sent until its first statement.
    pub fn begin(&self) -> Transaction {
        Transaction::new(self.clone())
    }

    /// A pooled connection, for anything batchpool does not wrap
    /// (transactions, `LOAD DATA`, session settings). It is never used for
    /// coalesced rows while you hold it, and is reset
    /// (`COM_RESET_CONNECTION`) when it comes back.
    pub async fn get(&self) -> Result<PooledConn, Error> {
        self.engine.check_open()?;
        let mut conn = self.engine.backend.get().await?;
        conn.lent = true;
        Ok(conn)
    }

    /// The engine's queue slots and batching config, for `crate::tower`.
    #[cfg(feature = "tower")]
    pub(crate) fn queue_slots(&self) -> (&Arc<tokio::sync::Semaphore>, &BatchConfig) {
        (self.engine.queue_slots(), &self.engine.config)
    }

    /// Batching counters since the pool was built.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
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
    /// in-flight batches, then closes the connections. Calls made after
    /// this began fail with an error for which
    /// [`is_closed`](Error::is_closed) is true. Idempotent.
    pub async fn close(&self) {
        self.engine.close().await;
        self.engine.backend.pool.close();
    }
}

/// The first result set of one statement and its OK packet.
struct Ran {
    rows: Vec<Row>,
    affected: u64,
    last_insert_id: Option<u64>,
}

/// Runs one statement on `conn`: with no parameters over the text protocol,
/// otherwise as a (cached) prepared statement.
async fn run(conn: &mut PooledConn, sql: &str, params: Params) -> Result<Ran, Error> {
    if conn.is_disconnected() {
        return Err(closed_before_send());
    }
    let result = match params {
        Params::Empty => {
            let run = async {
                let mut result = conn.query_iter(sql).await?;
                let rows: Vec<Row> = result.collect().await?;
                let ran = Ran {
                    rows,
                    affected: result.affected_rows(),
                    last_insert_id: result.last_insert_id(),
                };
                result.drop_result().await?;
                Ok::<_, mysql_async::Error>(ran)
            };
            run.await.map_err(sent_error_of)
        }
        params => {
            let stmt = match conn.prep(sql).await {
                Ok(stmt) => stmt,
                Err(e) => {
                    conn.note_error(&e);
                    return Err(unsent_error(e));
                }
            };
            if let Params::Positional(values) = &params
                && values.len() != usize::from(stmt.num_params())
            {
                // mysql_async would close the connection over this.
                return Err(Error::params(format!(
                    "statement takes {} parameter{}, {} given",
                    stmt.num_params(),
                    if stmt.num_params() == 1 { "" } else { "s" },
                    values.len()
                )));
            }
            if conn.is_disconnected() {
                return Err(closed_before_send());
            }
            let run = async {
                let mut result = conn.exec_iter(&stmt, params).await?;
                let rows: Vec<Row> = result.collect().await?;
                let ran = Ran {
                    rows,
                    affected: result.affected_rows(),
                    last_insert_id: result.last_insert_id(),
                };
                result.drop_result().await?;
                Ok::<_, mysql_async::Error>(ran)
            };
            run.await.map_err(sent_error_of)
        }
    };
    if let Err((_, Some(code))) = &result {
        conn.note_code(*code);
    }
    result.map_err(|(e, _)| e)
}

/// Maps an error of a sent statement, keeping its server code aside.
fn sent_error_of(e: mysql_async::Error) -> (Error, Option<u16>) {
    let code = match &e {
        mysql_async::Error::Server(se) => Some(se.code),
        _ => None,
    };
    (sent_error(e), code)
}

/// Runs one statement that is not coalesced and returns its outcome.
async fn run_statement(conn: &mut PooledConn, sql: &str, params: Params) -> Result<Outcome, Error> {
    let ran = run(conn, sql, params).await?;
    let affected = if ran.affected == 0 && !ran.rows.is_empty() {
        ran.rows.len() as u64
    } else {
        ran.affected
    };
    Ok(Outcome::new(
        affected,
        true,
        ran.last_insert_id,
        ran.rows.into_iter().next(),
    ))
}
