//! The pool, written once over the [`Backend`] trait: [`Pool`],
//! [`PoolBuilder`], [`Transaction`] and `atomic` groups.
//!
//! Every call walks the same way: the SQL text is classified (cached per
//! text, see [`Engine::route`]); a batchable row is encoded in the caller's
//! task and queued in the engine; anything else runs on a pooled connection
//! through the backend's [`Driver`](crate::backend::Driver). The backend modules add only the
//! methods whose parameters are the driver's own types (`execute`,
//! `query`, ...), each a one-line call into the generic methods here.

mod builder;
mod guard;
pub(crate) mod hooks;
mod transaction;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

pub use self::builder::PoolBuilder;
pub use self::hooks::{HookError, HookFuture};
pub use self::transaction::Transaction;
use crate::backend::{Backend, Conn, Connections, Ran, Stmt, exchange};
use crate::classify::StatementKind;
use crate::engine::{Detached, Engine, Route, Work};
use crate::error::{AtomicError, Error};
use crate::explain::{Explain, NotCoalesced};
use crate::stats::Stats;

/// Connection pool sizes, from deadpool.
pub type Status = deadpool::Status;

/// A coalescing connection pool for backend `B`: use it as
/// [`postgres::Pool`](crate::postgres::Pool) or
/// [`mysql::Pool`](crate::mysql::Pool). Cheap to clone (an `Arc` inside): put
/// it in axum `State` or actix `web::Data` as it is.
///
/// Single-row `INSERT ... VALUES (...)` statements run through `execute` from
/// concurrent tasks are coalesced into multi-row INSERTs, and each caller gets
/// its own outcome; everything else runs as it is on a pooled connection.
/// The methods that take parameters (`execute`, `execute_many`, `query`,
/// `query_one`, `query_opt`, `atomic`, `get`) are listed per backend below,
/// with each driver's own parameter types.
pub struct Pool<B: Backend> {
    engine: Arc<Engine<B>>,
}

impl<B: Backend> Clone for Pool<B> {
    fn clone(&self) -> Self {
        Pool {
            engine: self.engine.clone(),
        }
    }
}

impl<B: Backend> fmt::Debug for Pool<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("backend", &B::NAME)
            .field("status", &self.status())
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Pool<B> {
    /// Starts building a pool from a connection string: libpq style
    /// (`host=... user=...` or `postgresql://user@host/db`) for PostgreSQL,
    /// `mysql://user:password@host:port/db` for MySQL. No connection is opened
    /// until first use.
    pub fn builder(config: &str) -> PoolBuilder<B> {
        PoolBuilder::new(B::parse_config(config))
    }

    /// Starts a [`Transaction`] with a lazy `BEGIN`: no connection is taken
    /// and nothing is sent until its first statement.
    pub fn begin(&self) -> Transaction<B> {
        Transaction::new(self.clone())
    }

    /// Whether rows of `sql` are coalesced, and if not, why not.
    ///
    /// Classifies the text as `execute` does (and caches the answer for it):
    /// the first call for a new batchable text asks the server about it
    /// (one round trip), on a connection of the pool, so this fails when
    /// none can be had. When the asking itself fails (the connection lost,
    /// no answer within the statement time limit, the server refusing the
    /// text), the reason is [`NotCoalesced::NotLearned`]
    /// with the error, nothing is cached, and the next call asks again. A text that looks
    /// batchable but that the server makes run on its own is also logged
    /// once, at WARN, with this reason.
    ///
    /// ```no_run
    /// # async fn demo(pool: batchpool::postgres::Pool) -> Result<(), batchpool::Error> {
    /// let why = pool.explain("INSERT INTO t (a) SELECT a FROM u").await?;
    /// assert!(!why.is_coalesced());
    /// println!("{why}"); // runs on its own: INSERT form not coalesced: no VALUES tuple ...
    /// # Ok(()) }
    /// ```
    pub async fn explain(&self, sql: &str) -> Result<Explain, Error> {
        let _work = self.engine.enter()?;
        let deadline = self.engine.wait_deadline();
        Ok(self.engine.route(sql, deadline).await?.explain())
    }

    /// Batching counters since the pool was built.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// The longest time one row spent queued since the last call (or since
    /// the pool was built), and a fresh start for
    /// [`Stats::queue_wait_max`]: called once per reporting interval, it
    /// gives each interval's own maximum. Only this resets it; every other
    /// counter keeps counting from the build.
    pub fn take_queue_wait_max(&self) -> std::time::Duration {
        self.engine.counters.take_queue_wait_max()
    }

    /// Connection pool sizes (deadpool's status).
    pub fn status(&self) -> Status {
        self.engine.backend.connections().status()
    }

    /// Whether [`close`](Pool::close) has been called.
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }

    /// Retires every connection open now, so that work runs on new ones:
    /// after a failover or a DNS change (the new connections resolve and
    /// connect afresh), or to spread load over servers added behind a load
    /// balancer. Idle connections are closed at once; a connection in use
    /// (lent by [`get`](crate::postgres::Pool::get), in a
    /// [`Transaction`], carrying a statement) is never
    /// cut: it is closed when it comes back, within about a second. Every
    /// call keeps working meanwhile: new connections open as needed. Needs
    /// a tokio runtime for the connections in use (without one they are
    /// closed when next taken).
    pub fn retire_all(&self) {
        let connections = self.engine.backend.connections();
        crate::backend::Capped::lifecycle(connections.manager()).retire_all();
        crate::backend::lifecycle::sweep(connections);
        crate::backend::lifecycle::ensure_sweeper(connections);
    }

    /// Stops accepting work, flushes every queued row, waits for all
    /// in-flight batches, then closes the connections. Calls made after this
    /// began fail with an error for which [`is_closed`](Error::is_closed) is
    /// true. Idempotent.
    pub async fn close(&self) {
        let _ = self.engine.close(None).await;
        self.engine.backend.connections().close();
    }

    /// [`close`](Pool::close) with a deadline: returns `Ok(())` once every
    /// accepted call has its outcome, or after `limit` with an error for
    /// which [`Error::is_timeout`] is true, saying how many calls were still
    /// running. Those keep running (and their callers get their outcomes);
    /// the pool's idle connections are closed either way, and the busy ones
    /// as they come back.
    pub async fn close_timeout(&self, limit: std::time::Duration) -> Result<(), Error> {
        let result = self.engine.close(Some(limit)).await;
        self.engine.backend.connections().close();
        result
    }

    #[cfg(any(feature = "tower", feature = "postgres"))]
    pub(crate) fn engine(&self) -> &Arc<Engine<B>> {
        &self.engine
    }

    /// A pooled connection for the user (`Pool::get`).
    pub(crate) async fn lend(&self) -> Result<Conn<B>, Error> {
        let _work = self.engine.enter()?;
        let deadline = self.engine.wait_deadline();
        let mut conn = self.engine.backend.connections().checkout(deadline).await?;
        let limit = <B::Connections as Connections>::answer_limit(&conn);
        exchange!(B::Connections, limit, &mut conn, |c| B::lend(c))??;
        Ok(conn.into_inner())
    }

    /// `execute`: coalesced when batchable, else run on its own. `reserved`
    /// is a queue slot taken ahead of time (tower's `poll_ready`).
    pub(crate) async fn execute_args(
        &self,
        sql: &str,
        args: B::Args<'_>,
        reserved: Option<OwnedSemaphorePermit>,
    ) -> Result<B::Output, Error> {
        let work = self.engine.enter()?;
        let deadline = self.engine.wait_deadline();
        let route = self.engine.route(sql, deadline).await?;
        if let Some((q, shape)) = route.queued() {
            let (row, bytes) = self.engine.backend.encode_row(shape, args)?;
            return self
                .engine
                .submit(q, row, bytes, reserved, work, deadline)
                .await;
        }
        if let Route::Pass(reason) = &route {
            refuse_control(reason)?;
        }
        Box::pin(self.run_alone(work, sql, args, deadline, false))
            .await
            .map(Ran::into_outcome)
    }

    /// One statement on its own (autocommit) on a pooled connection:
    /// prepared (cached per connection), bound and run. Once it is sent, a
    /// caller that goes away does not cut it off: it is finished in the
    /// background ([`Detached`]) and its connection returns clean.
    async fn run_alone(
        &self,
        work: Work,
        sql: &str,
        args: B::Args<'_>,
        deadline: Option<Instant>,
        all_rows: bool,
    ) -> Result<Ran<B::QueryRow>, Error> {
        let mut conn = self.engine.backend.connections().checkout(deadline).await?;
        let limit = <B::Connections as Connections>::answer_limit(&conn);
        let (prepared, bound) = prepare_one::<B>(&mut conn, limit, sql, args, false).await?;
        // A statement that may change the session's limit runs without the
        // pool's deadline (the new limit is read before the next use).
        let limit = <B::Connections as Connections>::answer_limit(&conn);
        self.engine.counters.passthrough();
        let sql: Box<str> = sql.into();
        let run = async move {
            let stmt = Stmt {
                sql: &sql,
                prepared: &prepared,
                bound,
                all_rows,
            };
            exchange!(B::Connections, limit, &mut conn, |c| B::run(c, stmt))?
        };
        Detached::new(work, run).await
    }

    /// `execute_many`: each row's own outcome, in order.
    pub(crate) async fn execute_many_args(
        &self,
        sql: &str,
        rows: Vec<B::Args<'_>>,
    ) -> Result<Vec<Result<B::Output, Error>>, Error> {
        let work = self.engine.enter()?;
        let deadline = self.engine.wait_deadline();
        let route = self.engine.route(sql, deadline).await?;
        match (&route, route.queued()) {
            (_, Some((q, shape))) => {
                let mut results: Vec<Option<Result<B::Output, Error>>> = Vec::new();
                let mut queued = Vec::new();
                for args in rows {
                    let checked =
                        self.engine
                            .backend
                            .encode_row(shape, args)
                            .and_then(|(row, bytes)| {
                                self.engine.check_row(q, bytes).map(|()| (row, bytes))
                            });
                    match checked {
                        Ok(row) => {
                            queued.push(row);
                            results.push(None);
                        }
                        Err(e) => results.push(Some(Err(e))),
                    }
                }
                let mut done = self
                    .engine
                    .submit_many(work, q, queued, deadline)
                    .await?
                    .into_iter();
                Ok(results
                    .into_iter()
                    .map(|slot| match slot {
                        Some(failed) => failed,
                        None => done.next().unwrap_or_else(|| Err(Error::lost())),
                    })
                    .collect())
            }
            (route, None) => {
                if let Route::Pass(reason) = route {
                    refuse_control(reason)?;
                }
                let mut conn = self.engine.backend.connections().checkout(deadline).await?;
                let limit = <B::Connections as Connections>::answer_limit(&conn);
                let texts = [(sql, rows.iter().any(B::has_params))];
                let prepared =
                    single(exchange!(
                        B::Connections,
                        limit,
                        &mut conn,
                        |c| B::prepare(c, &texts, false)
                    )?)?;
                let bound: Vec<_> = rows.into_iter().map(|a| B::bind(&prepared, a)).collect();
                let limit = <B::Connections as Connections>::answer_limit(&conn);
                self.engine.counters.passthrough();
                // Pipelined (PostgreSQL): each statement may take the limit.
                let n = u32::try_from(bound.len()).unwrap_or(u32::MAX).max(1);
                let ran = exchange!(B::Connections, limit.map(|l| l * n), &mut conn, |c| {
                    B::run_many(c, sql, &prepared, bound)
                });
                match ran {
                    Ok(ran) => Ok(ran.into_iter().map(|r| r.map(Ran::into_outcome)).collect()),
                    Err(timeout) => Err(timeout),
                }
            }
        }
    }

    /// `query`: every row of the statement; a keyed read, update or
    /// delete is coalesced (an INSERT's query runs on its own, as every
    /// other statement).
    pub(crate) async fn query_args(
        &self,
        sql: &str,
        args: B::Args<'_>,
    ) -> Result<Vec<B::QueryRow>, Error> {
        let work = self.engine.enter()?;
        let deadline = self.engine.wait_deadline();
        let route = self.engine.route(sql, deadline).await?;
        match (&route, route.queued()) {
            (Route::Pass(reason), _) => refuse_control(reason)?,
            (_, Some((q, shape))) if q.form().keyed().is_some() => {
                let (row, bytes) = self.engine.backend.encode_row(shape, args)?;
                return self
                    .engine
                    .submit(q, row, bytes, None, work, deadline)
                    .await
                    .map(crate::outcome::Outcome::into_rows);
            }
            _ => {}
        }
        Box::pin(self.run_alone(work, sql, args, deadline, true))
            .await
            .map(|ran| ran.rows)
    }

    /// `query_one`: exactly one row.
    pub(crate) async fn query_one_args(
        &self,
        sql: &str,
        args: B::Args<'_>,
    ) -> Result<B::QueryRow, Error> {
        exactly_one(self.query_args(sql, args).await?)
    }

    /// `query_opt`: zero or one row.
    pub(crate) async fn query_opt_args(
        &self,
        sql: &str,
        args: B::Args<'_>,
    ) -> Result<Option<B::QueryRow>, Error> {
        at_most_one(self.query_args(sql, args).await?)
    }

    /// `atomic`: see the backend's `Pool::atomic`.
    pub(crate) async fn atomic_args(
        &self,
        statements: Vec<(&str, B::Args<'_>)>,
    ) -> Result<Vec<B::Output>, AtomicError> {
        transaction::atomic(self, statements).await
    }
}

/// `query_one`'s rule.
pub(crate) fn exactly_one<R>(mut rows: Vec<R>) -> Result<R, Error> {
    match rows.len() {
        1 => Ok(rows.remove(0)),
        n => Err(Error::row_count("query_one", "1 row", n)),
    }
}

/// `query_opt`'s rule.
pub(crate) fn at_most_one<R>(mut rows: Vec<R>) -> Result<Option<R>, Error> {
    match rows.len() {
        0 => Ok(None),
        1 => Ok(Some(rows.remove(0))),
        n => Err(Error::row_count("query_opt", "at most 1 row", n)),
    }
}

/// The one reply of a one-element call.
fn single<T>(mut replies: Vec<Result<T, Error>>) -> Result<T, Error> {
    match (replies.pop(), replies.is_empty()) {
        (Some(reply), true) => reply,
        _ => Err(Error::internal("expected exactly one reply")),
    }
}

/// Prepares (within `limit`) and binds one statement on `conn`, which is
/// inside an open transaction when `in_transaction`.
async fn prepare_one<B: Backend>(
    conn: &mut Conn<B>,
    limit: Option<Duration>,
    sql: &str,
    args: B::Args<'_>,
    in_transaction: bool,
) -> Result<(B::Prepared, B::Bound), Error> {
    let texts = [(sql, B::has_params(&args))];
    let prepared = single(exchange!(B::Connections, limit, conn, |c| B::prepare(
        c,
        &texts,
        in_transaction
    ))?)?;
    let bound = B::bind(&prepared, args)?;
    Ok((prepared, bound))
}

/// Transaction control through `execute` or `query` would run on an
/// arbitrary pooled connection and leave it inside a transaction for some
/// later caller.
fn refuse_control(reason: &NotCoalesced) -> Result<(), Error> {
    match reason {
        NotCoalesced::TransactionControl(keyword) => Err(Error::refused(format!(
            "{keyword} through the pool would run on an arbitrary pooled connection; \
             use Pool::begin / Pool::atomic, or Pool::get for manual transaction control"
        ))),
        _ => Ok(()),
    }
}

/// Refuses transaction control anywhere batchpool runs a statement for the
/// caller, and (`in_transaction`) statements the server commits implicitly
/// (MySQL DDL), which would end batchpool's transaction behind its back.
pub(crate) fn refuse_statement<B: Backend>(
    pool: &Pool<B>,
    sql: &str,
    in_transaction: bool,
) -> Result<(), Error> {
    match pool.engine.statement_kind(sql) {
        StatementKind::TransactionControl(keyword) => Err(Error::refused(format!(
            "{keyword} is transaction control: batchpool sends BEGIN/COMMIT/ROLLBACK itself \
             (use Pool::begin / Pool::atomic, or Pool::get for manual transaction control)"
        ))),
        StatementKind::ImplicitCommit(keyword) if in_transaction => Err(Error::refused(format!(
            "{keyword} cannot run inside an atomic group or batchpool Transaction: {} commits \
             implicitly around it (run it alone, or use Pool::get)",
            B::NAME
        ))),
        _ => Ok(()),
    }
}
