//! All-or-nothing statement groups (`Pool::atomic`) and transactions with a
//! lazy `BEGIN` ([`Transaction`]), written once over the backend's
//! [`Driver`](crate::backend::Driver): the backend decides how a group goes
//! over the wire (PostgreSQL pipelines `BEGIN`, the statements and `COMMIT`
//! in one round trip; MySQL sends one command at a time), this module what
//! the replies mean for the caller.

use std::fmt;
use std::time::Duration;

use super::guard::TxConn;
use super::{Pool, at_most_one, exactly_one, refuse_statement, single};
use crate::backend::{Backend, Connections, End, Group, GroupReplies, Ran, Stmt, exchange};
use crate::error::{AtomicError, Error, Kind};

/// A transaction with a lazy `BEGIN`, from [`Pool::begin`].
///
/// Nothing happens until the first statement: then a connection is taken
/// from the pool and `BEGIN` goes out with that statement (PostgreSQL writes
/// both in one round trip; MySQL sends `START TRANSACTION` first).
/// [`commit`](Transaction::commit) and [`rollback`](Transaction::rollback) of
/// a transaction that ran nothing send nothing; `execute_and_commit` as the
/// only statement runs it alone in autocommit (one round trip, no `BEGIN`, no
/// `COMMIT`). The backend modules list the round trips of each call.
///
/// Statements inside a transaction are never coalesced with other callers'
/// rows: they run as they are, on this transaction's own connection, which no
/// one else uses until the transaction ends. Transaction control statements
/// (`BEGIN`, `COMMIT`, `SAVEPOINT`, ...) and, on MySQL, statements that
/// commit implicitly (DDL, `LOCK TABLES`...) are refused
/// ([`Error::is_refused`]); use the backend's `Pool::get` for those.
///
/// If a statement fails, the transaction is over: [`commit`](Transaction::commit)
/// sends `ROLLBACK` and returns the first failure. PostgreSQL itself answers
/// later statements with `25P02`; on MySQL, which would keep running them
/// (and in autocommit after rolling back a deadlock), later statements are
/// refused with that first failure without being sent.
///
/// Dropping a transaction that sent `BEGIN` without `commit`/`rollback` rolls
/// it back: a spawned task sends `ROLLBACK` and returns the connection to the
/// pool once the server confirms no transaction is open (outside a tokio
/// runtime, or on a broken connection, the connection is closed instead,
/// which also rolls back). The same happens when a statement's future is
/// cancelled mid-flight and the transaction is then dropped.
pub struct Transaction<B: Backend> {
    pool: Pool<B>,
    conn: Option<TxConn<B>>,
    /// First statement error: the transaction is aborted.
    failed: Option<Error>,
}

impl<B: Backend> fmt::Debug for Transaction<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("backend", &B::NAME)
            .field("begun", &self.is_begun())
            .field("failed", &self.failed.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Transaction<B> {
    pub(crate) fn new(pool: Pool<B>) -> Transaction<B> {
        Transaction {
            pool,
            conn: None,
            failed: None,
        }
    }

    /// Whether `BEGIN` was sent (a statement ran, or was attempted) and the
    /// transaction is not over yet.
    pub fn is_begun(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.open)
    }

    /// Commits: one round trip, or nothing at all if no statement ran.
    ///
    /// If a statement of this transaction failed, this sends `ROLLBACK`
    /// instead and returns that statement's error. If the connection is lost
    /// while `COMMIT` is in flight, the error says the outcome is unknown
    /// ([`Error::is_outcome_unknown`]).
    pub async fn commit(mut self) -> Result<(), Error> {
        if !self.is_begun() {
            return Ok(());
        }
        // After `close()` began, the transaction is rolled back (on drop).
        let _work = self.pool.engine.enter()?;
        let Some(tx) = self.conn.as_mut() else {
            return Ok(());
        };
        if let Some(e) = self.failed.take() {
            tx.end(End::Rollback).await?;
            return Err(e);
        }
        tx.end(End::Commit).await
    }

    /// Rolls back: one round trip, or nothing at all if no statement ran.
    pub async fn rollback(mut self) -> Result<(), Error> {
        if !self.is_begun() {
            return Ok(());
        }
        // Allowed while closing: it ends work, and `close()` waits for it.
        let _work = self.pool.engine.tracker.more();
        match self.conn.as_mut() {
            Some(tx) => tx.end(End::Rollback).await,
            None => Ok(()),
        }
    }

    /// The transaction's connection, taken from the pool on first use.
    async fn connection<'a>(
        pool: &Pool<B>,
        conn: &'a mut Option<TxConn<B>>,
    ) -> Result<&'a mut TxConn<B>, Error> {
        if conn.is_none() {
            let deadline = pool.engine.wait_deadline();
            let c = pool.engine.backend.connections().checkout(deadline).await?;
            *conn = Some(TxConn::new(c.into_inner(), &pool.engine));
        }
        conn.as_mut()
            .ok_or_else(|| Error::internal("transaction connection missing"))
    }

    /// Runs one statement in the transaction, with `BEGIN` first if it is
    /// the first.
    async fn run(
        &mut self,
        sql: &str,
        args: B::Args<'_>,
        all_rows: bool,
    ) -> Result<Ran<B::QueryRow>, Error> {
        refuse_statement(&self.pool, sql, true)?;
        let _work = self.pool.engine.enter()?;
        let Transaction { pool, conn, failed } = self;
        if let Some(e) = failed {
            if !B::SERVER_ABORTS_FAILED_TRANSACTION {
                return Err(e.clone());
            }
        }
        let tx = Self::connection(pool, conn).await?;
        if !tx.open {
            if let Some(e) = pool.engine.backend.transaction_refusal(
                "a statement of a Transaction (other than execute_and_commit alone)",
            ) {
                // Nothing began: the connection goes back at once.
                *conn = None;
                return Err(e);
            }
        }
        let limit = tx.limit;
        let c = TxConn::<B>::conn(&mut tx.conn)?;
        let texts = [(sql, B::has_params(&args))];
        let prepared = match exchange!(B::Connections, limit, c, |c| B::prepare(c, &texts, tx.open))
            .and_then(single)
        {
            Ok(prepared) => prepared,
            Err(e) => {
                // Inside a transaction block a failed prepare may abort it.
                if tx.open && failed.is_none() && !e.is_params() {
                    *failed = Some(e.clone());
                }
                return Err(e);
            }
        };
        let bound = B::bind(&prepared, args)?;
        // A statement that may change the session's limit runs without the
        // pool's deadline; the limit is read again after it.
        let limit = <B::Connections as Connections>::answer_limit(c);
        let begin = !tx.open;
        if begin && B::is_broken(c) {
            return Err(Error::closed_before_send());
        }
        tx.open = true;
        let group = Group {
            begin,
            statements: vec![Stmt {
                sql,
                prepared: &prepared,
                bound,
                all_rows,
            }],
            commit: false,
        };
        let mut replies = exchange!(B::Connections, group_limit(limit, 2), c, |c| {
            B::run_group(c, group)
        })?;
        pool.engine.counters.passthrough();
        if let Some(Err(e)) = replies.begin {
            if e.is_db() {
                // Not a lost connection: never reported as rolled back.
                let e = begin_failed(e, !replies.statements.is_empty());
                failed.get_or_insert_with(|| e.clone());
                return Err(e);
            }
            return Err(lost_inside(e));
        }
        let result = replies
            .statements
            .pop()
            .unwrap_or_else(|| Err(missing_reply()));
        if result.is_ok() {
            exchange!(B::Connections, limit, c, |c| B::refresh_limit(c))??;
            tx.limit = <B::Connections as Connections>::answer_limit(c);
        }
        result.map_err(|e| {
            let e = lost_inside(e);
            if !e.is_params() {
                failed.get_or_insert_with(|| e.clone());
            }
            e
        })
    }

    pub(crate) async fn execute_args(
        &mut self,
        sql: &str,
        args: B::Args<'_>,
    ) -> Result<B::Output, Error> {
        self.run(sql, args, false).await.map(Ran::into_outcome)
    }

    pub(crate) async fn query_args(
        &mut self,
        sql: &str,
        args: B::Args<'_>,
    ) -> Result<Vec<B::QueryRow>, Error> {
        self.run(sql, args, true).await.map(|ran| ran.rows)
    }

    pub(crate) async fn query_one_args(
        &mut self,
        sql: &str,
        args: B::Args<'_>,
    ) -> Result<B::QueryRow, Error> {
        exactly_one(self.query_args(sql, args).await?)
    }

    pub(crate) async fn query_opt_args(
        &mut self,
        sql: &str,
        args: B::Args<'_>,
    ) -> Result<Option<B::QueryRow>, Error> {
        at_most_one(self.query_args(sql, args).await?)
    }

    /// Runs a last statement and commits (see the backend's
    /// `Transaction::execute_and_commit`).
    pub(crate) async fn execute_and_commit_args(
        mut self,
        sql: &str,
        args: B::Args<'_>,
    ) -> Result<B::Output, Error> {
        let begun = self.is_begun();
        refuse_statement(&self.pool, sql, begun)?;
        let _work = self.pool.engine.enter()?;
        if !begun {
            // The transaction's only statement is its own transaction.
            let tx = Self::connection(&self.pool, &mut self.conn).await?;
            let limit = tx.limit;
            let c = TxConn::<B>::conn(&mut tx.conn)?;
            let (prepared, bound) = super::prepare_one::<B>(c, limit, sql, args, false).await?;
            let limit = <B::Connections as Connections>::answer_limit(c);
            self.pool.engine.counters.passthrough();
            let stmt = Stmt {
                sql,
                prepared: &prepared,
                bound,
                all_rows: false,
            };
            return exchange!(B::Connections, limit, c, |c| B::run(c, stmt))?
                .map(Ran::into_outcome);
        }
        let Transaction { pool, conn, failed } = &mut self;
        let tx = conn
            .as_mut()
            .ok_or_else(|| Error::internal("begun transaction without a connection"))?;
        if let Some(e) = failed.take() {
            tx.end(End::Rollback).await?;
            return Err(e);
        }
        let limit = tx.limit;
        let c = TxConn::<B>::conn(&mut tx.conn)?;
        // Inside the open transaction: preparing must not end it.
        let (prepared, bound) = super::prepare_one::<B>(c, limit, sql, args, tx.open).await?;
        let limit = <B::Connections as Connections>::answer_limit(c);
        pool.engine.counters.passthrough();
        if B::is_broken(c) {
            return Err(Error::new(
                Kind::ConnectionClosed,
                "connection lost before the last statement; the transaction was rolled back",
            ));
        }
        let group = Group {
            begin: false,
            statements: vec![Stmt {
                sql,
                prepared: &prepared,
                bound,
                all_rows: false,
            }],
            commit: true,
        };
        let mut replies = exchange!(B::Connections, group_limit(limit, 2), c, |c| {
            B::run_group(c, group)
        })?;
        if matches!(replies.end, Some((_, true))) {
            tx.open = false;
        }
        let result = replies.statements.pop();
        match (result, replies.end) {
            (Some(Ok(ran)), Some((Ok(()), _))) => Ok(ran.into_outcome()),
            // The statement failed: nothing committed (PostgreSQL's COMMIT
            // answered ROLLBACK; the MySQL backend sent ROLLBACK).
            (Some(Err(e)), Some((Ok(()), _))) => Err(e),
            (Some(Err(e)), Some((Err(_), _))) if e.is_db() => Err(e),
            (_, Some((Err(e), _))) => Err(e),
            // Nothing was sent to end the transaction: a lost connection
            // took it down with the session.
            (Some(Err(e)), None) => Err(lost_inside(e)),
            (_, None) | (None, _) => Err(missing_reply()),
        }
    }
}

/// `Pool::atomic`.
pub(super) async fn atomic<B: Backend>(
    pool: &Pool<B>,
    statements: Vec<(&str, B::Args<'_>)>,
) -> Result<Vec<B::Output>, AtomicError> {
    let engine = &pool.engine;
    let _work = engine.enter().map_err(AtomicError::group)?;
    let n = statements.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    for (i, (sql, _)) in statements.iter().enumerate() {
        // One statement is its own transaction: DDL is fine alone.
        refuse_statement(pool, sql, n > 1).map_err(|e| AtomicError::at(i, e))?;
    }
    let conn = engine
        .backend
        .connections()
        .checkout(engine.wait_deadline())
        .await
        .map_err(AtomicError::group)?;
    if n > 1 {
        if let Some(e) = engine
            .backend
            .transaction_refusal("an atomic group of several statements")
        {
            return Err(AtomicError::group(e));
        }
    }
    let mut guard = TxConn::<B>::new(conn.into_inner(), engine);
    let limit = guard.limit;
    let c = TxConn::<B>::conn(&mut guard.conn).map_err(AtomicError::group)?;

    // Texts the connection has not prepared yet are prepared together (one
    // round trip on PostgreSQL), only the first time.
    let texts: Vec<(&str, bool)> = statements
        .iter()
        .map(|(sql, args)| (*sql, B::has_params(args)))
        .collect();
    let mut prepared = Vec::with_capacity(n);
    let all = exchange!(B::Connections, group_limit(limit, n), c, |c| B::prepare(
        c, &texts, false
    ))
    .map_err(AtomicError::group)?;
    for (i, stmt) in all.into_iter().enumerate() {
        prepared.push(stmt.map_err(|e| AtomicError::at(i, e))?);
    }
    if prepared.len() != n {
        return Err(AtomicError::group(missing_reply()));
    }
    // A statement that may change the session's limit runs without the
    // pool's deadline (the new limit is read before the next use).
    let limit = <B::Connections as Connections>::answer_limit(c);
    let mut bound = Vec::with_capacity(n);
    for (i, ((_, args), stmt)) in statements.into_iter().zip(&prepared).enumerate() {
        bound.push(B::bind(stmt, args).map_err(|e| AtomicError::at(i, e))?);
    }
    for _ in 0..n {
        engine.counters.passthrough();
    }
    let stmts: Vec<Stmt<'_, B>> = texts
        .iter()
        .zip(prepared.iter().zip(bound))
        .map(|((sql, _), (prepared, bound))| Stmt {
            sql,
            prepared,
            bound,
            all_rows: false,
        })
        .collect();

    if n == 1 {
        // One statement is its own transaction: autocommit, no BEGIN/COMMIT.
        let stmt = stmts
            .into_iter()
            .next()
            .ok_or_else(|| AtomicError::group(Error::internal("one statement expected")))?;
        return exchange!(B::Connections, limit, c, |c| B::run(c, stmt))
            .and_then(|ran| ran)
            .map(|ran| vec![ran.into_outcome()])
            .map_err(|e| AtomicError::at(0, e));
    }
    if B::is_broken(c) {
        return Err(AtomicError::group(Error::closed_before_send()));
    }
    // From here on BEGIN may be on the wire without its COMMIT answered: if
    // this future is dropped now, the guard cleans up.
    guard.open = true;
    let c = TxConn::<B>::conn(&mut guard.conn).map_err(AtomicError::group)?;
    let group = Group {
        begin: true,
        statements: stmts,
        commit: true,
    };
    let replies = exchange!(B::Connections, group_limit(limit, n + 2), c, |c| {
        B::run_group(c, group)
    })
    .map_err(AtomicError::group)?;
    settle(&mut guard, &replies);
    interpret_group::<B>(replies, n)
}

/// After a group: a connection whose session state is unknown (a reply was
/// lost) is never reused; one whose transaction is known to be over is
/// clean.
fn settle<B: Backend>(guard: &mut TxConn<B>, replies: &GroupReplies<B::QueryRow>) {
    let lost = |r: Option<&Error>| r.is_some_and(|e| !e.is_db());
    let any_lost = lost(replies.begin.as_ref().and_then(|r| r.as_ref().err()))
        || replies.statements.iter().any(|r| lost(r.as_ref().err()))
        || lost(replies.end.as_ref().and_then(|(r, _)| r.as_ref().err()));
    if any_lost {
        guard.discard();
    } else if matches!(replies.end, Some((_, true))) {
        guard.open = false;
    }
}

/// What an atomic group's replies mean for the caller.
fn interpret_group<B: Backend>(
    replies: GroupReplies<B::QueryRow>,
    n: usize,
) -> Result<Vec<B::Output>, AtomicError> {
    let end_sent = replies.end.is_some();
    if let Some(Err(e)) = replies.begin {
        let e = if e.is_db() {
            begin_failed(e, !replies.statements.is_empty())
        } else if end_sent {
            e
        } else {
            lost_inside(e)
        };
        return Err(AtomicError::group(e));
    }
    let mut outcomes = Vec::with_capacity(n);
    for (i, reply) in replies.statements.into_iter().enumerate() {
        match reply {
            Ok(ran) => outcomes.push(ran.into_outcome()),
            // A statement failed: the transaction is aborted and nothing of
            // it committed.
            Err(e) if e.is_db() || e.is_params() => return Err(AtomicError::at(i, e)),
            // Connection lost before this reply. If COMMIT was sent, whether
            // it ran is unknown (its own reply says so); if not, the session
            // took the transaction down with it.
            Err(e) if !end_sent => return Err(AtomicError::at(i, lost_inside(e))),
            Err(_) => break,
        }
    }
    match replies.end {
        Some((Ok(()), _)) if outcomes.len() == n => Ok(outcomes),
        Some((Ok(()), _)) | None => Err(AtomicError::group(missing_reply())),
        Some((Err(e), _)) => Err(AtomicError::group(e)),
    }
}

/// The answer deadline of `n` statements sent together (each may take the
/// server's whole statement timeout).
fn group_limit(limit: Option<Duration>, n: usize) -> Option<Duration> {
    limit.map(|l| l * u32::try_from(n).unwrap_or(u32::MAX))
}

fn missing_reply() -> Error {
    Error::new(
        Kind::OutcomeUnknown,
        "a statement of the group gave no reply",
    )
}

/// `BEGIN` cannot fail with a server error on a healthy session; if it ever
/// did and statements were sent after it (pipelined), they ran in
/// autocommit.
fn begin_failed(e: Error, statements_sent: bool) -> Error {
    if e.is_db() && statements_sent {
        Error::with_source(
            Kind::OutcomeUnknown,
            "BEGIN failed; the statements sent after it may have run in autocommit",
            e,
        )
    } else {
        e
    }
}

/// A connection lost inside a transaction before anything ended it: the
/// server rolled the transaction back with the session.
fn lost_inside(e: Error) -> Error {
    if e.is_outcome_unknown() && !e.is_db() {
        Error::with_source(
            Kind::ConnectionClosed,
            "connection lost inside the transaction; it was rolled back",
            e,
        )
    } else {
        e
    }
}
