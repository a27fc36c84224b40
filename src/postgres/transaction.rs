//! All-or-nothing statement groups ([`Pool::atomic`]) and transactions with a
//! lazy `BEGIN` ([`Pool::begin`]) that spend no round trip on `BEGIN` or
//! `COMMIT`.
//!
//! # How BEGIN and COMMIT ride along
//!
//! tokio-postgres writes a request into the connection's queue the first time
//! its future is polled, and the connection task writes everything queued in
//! one go before it flushes the socket. Polling `BEGIN`, the statements and
//! `COMMIT` together, in that order, in one poll ([`in_order`]) therefore sends
//! them in one write: the server answers them all after one round trip. Every
//! extended-protocol statement carries its own `Sync`, so when statement *k*
//! fails the server keeps reading: the later statements fail with
//! `25P02 current transaction is aborted`, and the pipelined `COMMIT` answers
//! with the command tag `ROLLBACK` — which tokio-postgres reports as success.
//! The outcome is therefore read from the statements' own results: a failed
//! statement means nothing committed, whatever `COMMIT` said.
//!
//! Statements must be prepared before they can be pipelined: the first time a
//! connection sees a SQL text it prepares it (one round trip, shared by all the
//! new texts of one call), then keeps it in its statement cache
//! ([`ClientWrapper::prepare_cached`](super::ClientWrapper::prepare_cached)).
//!
//! # Clean connections on every path
//!
//! A connection that may be inside a transaction is held by a [`TxConn`]
//! guard. If it is dropped while a transaction may be open (the caller's future
//! was cancelled mid-flight, or an open [`Transaction`] was dropped), the guard
//! spawns a `ROLLBACK` that owns the connection and returns it to the pool once
//! the server has answered; without a tokio runtime, or if that `ROLLBACK`
//! fails, the connection is taken out of the pool and closed (closing the
//! session rolls back on the server).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use futures_util::TryStreamExt;
use tokio_postgres::Row;

use super::backend::{encode, sent_error, unsent_error};
use super::{Client, ClientWrapper, Outcome, Params, Pool, run_statement};
use crate::engine::Backend;
use crate::error::{AtomicError, Error, Kind};

/// One statement's reply in a pipeline.
enum Reply {
    /// `BEGIN` / `COMMIT` / `ROLLBACK` completed (for `COMMIT`, possibly as
    /// `ROLLBACK`: see the module docs).
    Done,
    Outcome(Outcome),
    Rows(Vec<Row>),
}

type Step<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls every future, always in the given order, until all are done, and
/// returns their outputs in that order.
///
/// The first poll polls each future once, in order, without yielding in
/// between: with tokio-postgres every request is queued on the connection,
/// in order, before its task can run and flush, so they leave in one write.
async fn in_order<T>(steps: Vec<Step<'_, T>>) -> Vec<T> {
    enum Slot<'a, T> {
        Running(Step<'a, T>),
        Done(T),
    }
    let mut slots: Vec<Slot<'_, T>> = steps.into_iter().map(Slot::Running).collect();
    std::future::poll_fn(|cx| {
        let mut all_done = true;
        for slot in slots.iter_mut() {
            if let Slot::Running(fut) = slot {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(out) => *slot = Slot::Done(out),
                    Poll::Pending => all_done = false,
                }
            }
        }
        if all_done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    slots
        .into_iter()
        .filter_map(|slot| match slot {
            Slot::Done(out) => Some(out),
            Slot::Running(_) => None,
        })
        .collect()
}

fn simple<'a>(conn: &'a ClientWrapper, sql: &'static str) -> Step<'a, Result<Reply, Error>> {
    Box::pin(async move {
        conn.batch_execute(sql)
            .await
            .map(|()| Reply::Done)
            .map_err(sent_error)
    })
}

fn statement<'a>(
    conn: &'a ClientWrapper,
    stmt: &'a tokio_postgres::Statement,
    row: &'a super::backend::PgRow,
) -> Step<'a, Result<Reply, Error>> {
    Box::pin(async move { run_statement(conn, stmt, row).await.map(Reply::Outcome) })
}

fn query<'a>(
    conn: &'a ClientWrapper,
    stmt: &'a tokio_postgres::Statement,
    row: &'a super::backend::PgRow,
) -> Step<'a, Result<Reply, Error>> {
    Box::pin(async move {
        if conn.is_closed() {
            return Err(closed_before_sending());
        }
        let stream = conn.query_raw(stmt, row.raw()).await.map_err(sent_error)?;
        let rows = stream.try_collect().await.map_err(sent_error)?;
        Ok(Reply::Rows(rows))
    })
}

fn closed_before_sending() -> Error {
    Error::new(
        Kind::ConnectionClosed,
        "connection closed before the statement was sent",
    )
}

fn missing_reply() -> Error {
    Error::new(Kind::OutcomeUnknown, "a pipelined statement gave no reply")
}

/// Transaction control is batchpool's job inside [`Pool::atomic`] and
/// [`Transaction`]: a statement that ends or nests the transaction would make
/// the group's outcome unknowable (and could leave a pooled connection inside
/// a transaction). Returns the offending keyword.
pub(super) fn transaction_control(sql: &str) -> Option<&'static str> {
    let mut words = Words { rest: sql };
    let first = words.next()?;
    let found = [
        "BEGIN",
        "START",
        "COMMIT",
        "END",
        "ROLLBACK",
        "ABORT",
        "SAVEPOINT",
        "RELEASE",
    ]
    .into_iter()
    .find(|k| first.eq_ignore_ascii_case(k));
    if found.is_some() {
        return found;
    }
    if first.eq_ignore_ascii_case("PREPARE")
        && words
            .next()
            .is_some_and(|w| w.eq_ignore_ascii_case("TRANSACTION"))
    {
        return Some("PREPARE TRANSACTION");
    }
    None
}

/// Leading keywords of a statement, skipping whitespace and comments.
struct Words<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        loop {
            let s = self.rest.trim_start();
            if let Some(after) = s.strip_prefix("--") {
                self.rest = after.split_once('\n').map_or("", |(_, r)| r);
            } else if let Some(mut after) = s.strip_prefix("/*") {
                // PostgreSQL block comments nest.
                let mut depth = 1usize;
                while depth > 0 {
                    let open = after.find("/*");
                    let close = after.find("*/")?;
                    match open {
                        Some(o) if o < close => {
                            depth += 1;
                            after = &after[o + 2..];
                        }
                        _ => {
                            depth -= 1;
                            after = &after[close + 2..];
                        }
                    }
                }
                self.rest = after;
            } else {
                let end = s
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(s.len());
                if end == 0 {
                    return None;
                }
                self.rest = &s[end..];
                return Some(&s[..end]);
            }
        }
    }
}

fn reject_transaction_control(sql: &str) -> Result<(), Error> {
    match transaction_control(sql) {
        Some(keyword) => Err(Error::params(format!(
            "{keyword} cannot run inside an atomic group or batchpool Transaction: \
             batchpool sends BEGIN/COMMIT/ROLLBACK itself (use Pool::get for savepoints \
             or manual transaction control)"
        ))),
        None => Ok(()),
    }
}

/// A pooled connection that may be inside a transaction. When dropped with
/// `open` set it never goes back to the pool as it is: a spawned `ROLLBACK`
/// returns it once answered, or it is discarded.
pub(super) struct TxConn {
    conn: Option<Client>,
    /// A `BEGIN` may have been sent without its `COMMIT`/`ROLLBACK` being
    /// answered.
    open: bool,
}

impl TxConn {
    fn new(conn: Client) -> TxConn {
        TxConn {
            conn: Some(conn),
            open: false,
        }
    }

    /// The connection; borrows only the `conn` field, so `open` can be set
    /// while requests borrowing it are in flight.
    fn client(conn: &Option<Client>) -> Result<&ClientWrapper, Error> {
        conn.as_deref()
            .ok_or_else(|| Error::new(Kind::ConnectionClosed, "connection already released"))
    }

    /// Takes the connection out of the pool for good (it is closed when
    /// dropped; the server rolls back whatever was open).
    fn discard(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(deadpool::managed::Object::take(conn));
        }
    }
}

impl Drop for TxConn {
    fn drop(&mut self) {
        if !self.open {
            // No transaction can be open: back to the pool as it is.
            return;
        }
        let Some(conn) = self.conn.take() else {
            return;
        };
        if conn.is_closed() {
            drop(deadpool::managed::Object::take(conn));
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let mut guard = Discard(Some(conn));
                    let rolled_back = match guard.0.as_deref() {
                        Some(c) => c.batch_execute("ROLLBACK").await.is_ok(),
                        None => false,
                    };
                    if rolled_back {
                        // Clean: back to the pool.
                        drop(guard.0.take());
                    }
                });
            }
            Err(_) => drop(deadpool::managed::Object::take(conn)),
        }
    }
}

/// Discards the connection unless it was taken back out (also when the
/// spawned `ROLLBACK` task is dropped by a runtime shutting down).
struct Discard(Option<Client>);

impl Drop for Discard {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(deadpool::managed::Object::take(conn));
        }
    }
}

/// [`Pool::atomic`].
pub(super) async fn atomic(
    pool: &Pool,
    statements: &[(&str, &Params<'_>)],
) -> Result<Vec<Outcome>, AtomicError> {
    let engine = &pool.engine;
    engine.check_open().map_err(AtomicError::group)?;
    if statements.is_empty() {
        return Ok(Vec::new());
    }
    for (i, (sql, _)) in statements.iter().enumerate() {
        reject_transaction_control(sql).map_err(|e| AtomicError::at(i, e))?;
    }
    let conn = engine.backend.get().await.map_err(AtomicError::group)?;
    let mut guard = TxConn::new(conn);
    let client = TxConn::client(&guard.conn).map_err(AtomicError::group)?;

    // Texts this connection has not prepared yet are prepared together: one
    // round trip, only the first time.
    let prepared_all = if let [(sql, _)] = statements {
        vec![client.prepare_cached(sql).await]
    } else {
        let prepares: Vec<Step<'_, _>> = statements
            .iter()
            .map(|(sql, _)| -> Step<'_, _> { Box::pin(client.prepare_cached(sql)) })
            .collect();
        in_order(prepares).await
    };
    let mut prepared = Vec::with_capacity(statements.len());
    for (i, stmt) in prepared_all.into_iter().enumerate() {
        prepared.push(stmt.map_err(|e| AtomicError::at(i, unsent_error(e)))?);
    }
    let mut rows = Vec::with_capacity(statements.len());
    for (i, ((_, params), stmt)) in statements.iter().zip(&prepared).enumerate() {
        rows.push(encode(stmt.params(), params).map_err(|e| AtomicError::at(i, e))?);
    }
    for _ in statements {
        engine.counters.passthrough();
    }

    if let ([stmt], [row]) = (prepared.as_slice(), rows.as_slice()) {
        // One statement is its own transaction: autocommit, no BEGIN/COMMIT.
        return run_statement(client, stmt, row)
            .await
            .map(|out| vec![out])
            .map_err(|e| AtomicError::at(0, e));
    }

    if client.is_closed() {
        return Err(AtomicError::group(closed_before_sending()));
    }
    let mut steps = Vec::with_capacity(prepared.len() + 2);
    steps.push(simple(client, "BEGIN"));
    for (stmt, row) in prepared.iter().zip(&rows) {
        steps.push(statement(client, stmt, row));
    }
    steps.push(simple(client, "COMMIT"));
    // From the first poll on, BEGIN may be on the wire without its COMMIT
    // answered: if this future is dropped now, the guard cleans up.
    guard.open = true;
    let mut replies = in_order(steps).await;
    let n = statements.len();
    let commit = replies.pop().unwrap_or_else(|| Err(missing_reply()));
    let begin = if replies.is_empty() {
        Err(missing_reply())
    } else {
        replies.remove(0)
    };
    let lost = begin.as_ref().err().is_some_and(|e| !e.is_db())
        || commit.as_ref().err().is_some_and(|e| !e.is_db())
        || replies
            .iter()
            .any(|r| r.as_ref().err().is_some_and(|e| !e.is_db()));
    if lost {
        // The session's state is unknown: never reuse it.
        guard.discard();
    } else {
        // Every reply up to COMMIT's was read: the transaction is over.
        guard.open = false;
    }

    let mut outcomes = Vec::with_capacity(n);
    for (i, reply) in replies.into_iter().enumerate() {
        match reply {
            Ok(Reply::Outcome(out)) => outcomes.push(out),
            Ok(_) => return Err(AtomicError::at(i, missing_reply())),
            // A statement failed: the transaction is aborted, and COMMIT
            // (answered `ROLLBACK`) committed nothing.
            Err(e) if e.is_db() => return Err(AtomicError::at(i, e)),
            // Connection lost before this reply: whether COMMIT ran is
            // unknown, and `commit` holds the error saying so.
            Err(_) => break,
        }
    }
    if let Err(e) = begin {
        return Err(AtomicError::group(begin_failed(e)));
    }
    match commit {
        Ok(_) if outcomes.len() == n => Ok(outcomes),
        Ok(_) => Err(AtomicError::group(missing_reply())),
        Err(e) => Err(AtomicError::group(e)),
    }
}

/// `BEGIN` cannot fail with a server error on a healthy session; if it ever
/// did, the statement pipelined after it ran in autocommit.
fn begin_failed(e: Error) -> Error {
    if e.is_db() {
        Error::with_source(
            Kind::OutcomeUnknown,
            "BEGIN failed; the statements pipelined after it may have run in autocommit",
            e,
        )
    } else {
        e
    }
}

/// A transaction with a lazy `BEGIN`, from [`Pool::begin`].
///
/// Nothing happens until the first statement: then a connection is taken
/// from the pool and `BEGIN` is written together with that statement (one
/// round trip). [`commit`](Transaction::commit) and
/// [`rollback`](Transaction::rollback) of a transaction that ran nothing send
/// nothing; [`execute_and_commit`](Transaction::execute_and_commit) writes its
/// statement and `COMMIT` together, and, as the only statement, runs it alone
/// in autocommit.
///
/// Round trips, with every statement already prepared on the connection (the
/// first use of a SQL text on a connection adds one, to prepare it):
///
/// | calls | round trips | sent |
/// |---|---|---|
/// | `begin()` + `commit()`/`rollback()` or drop | 0 | nothing; no connection taken |
/// | `execute(s)` + `commit()` | 2 | `BEGIN`+`s`, `COMMIT` |
/// | `execute(s1)` … `execute(sn)` + `commit()` | n + 1 | |
/// | `execute(s1)` + `execute_and_commit(s2)` | 2 | `BEGIN`+`s1`, `s2`+`COMMIT` |
/// | `execute_and_commit(s)` alone | 1 | `s` in autocommit |
///
/// Statements inside a transaction are never coalesced with other callers'
/// rows: they run as they are, on this transaction's own connection, which no
/// one else uses until the transaction ends.
///
/// If a statement fails, PostgreSQL aborts the transaction: later statements
/// fail with `25P02`, and [`commit`](Transaction::commit) sends `ROLLBACK`
/// and returns the first failure's error. Transaction control statements
/// (`BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, ...) are refused; use
/// [`Pool::get`] and tokio-postgres' own transactions for savepoints.
///
/// Dropping a transaction that sent `BEGIN` without `commit`/`rollback` rolls
/// it back: a spawned task sends `ROLLBACK` and then returns the connection to
/// the pool (outside a tokio runtime the connection is closed instead, which
/// also rolls back). The same happens when a statement's future is cancelled
/// mid-flight and the transaction is then dropped.
pub struct Transaction {
    pool: Pool,
    conn: Option<TxConn>,
    /// First statement error; the server has aborted the transaction.
    failed: Option<Error>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("begun", &self.is_begun())
            .field("failed", &self.failed.is_some())
            .finish_non_exhaustive()
    }
}

impl Transaction {
    pub(super) fn new(pool: Pool) -> Transaction {
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

    async fn connection(&mut self) -> Result<&mut TxConn, Error> {
        if self.conn.is_none() {
            self.pool.engine.check_open()?;
            let conn = self.pool.engine.backend.get().await?;
            self.conn = Some(TxConn::new(conn));
        }
        self.conn
            .as_mut()
            .ok_or_else(|| Error::new(Kind::ConnectionClosed, "connection already released"))
    }

    /// Runs one statement in the transaction, pipelined with `BEGIN` if it is
    /// the first (one round trip either way, once prepared).
    async fn run(&mut self, sql: &str, params: &Params<'_>, rows: bool) -> Result<Reply, Error> {
        reject_transaction_control(sql)?;
        let engine = self.pool.engine.clone();
        let conn = self.connection().await?;
        let client = TxConn::client(&conn.conn)?;
        let stmt = match client.prepare_cached(sql).await {
            Ok(stmt) => stmt,
            Err(e) => {
                let e = unsent_error(e);
                // Inside a transaction block a failed Parse aborts it too.
                if conn.open && self.failed.is_none() {
                    self.failed = Some(e.clone());
                }
                return Err(e);
            }
        };
        let row = encode(stmt.params(), params)?;
        let run = if rows {
            query(client, &stmt, &row)
        } else {
            statement(client, &stmt, &row)
        };
        let result = if conn.open {
            run.await
        } else {
            let steps = vec![simple(client, "BEGIN"), run];
            conn.open = true;
            let mut replies = in_order(steps).await.into_iter();
            let begin = replies.next().unwrap_or_else(|| Err(missing_reply()));
            let result = replies.next().unwrap_or_else(|| Err(missing_reply()));
            match begin {
                Ok(_) => result,
                Err(e) if e.is_db() => {
                    // Not a lost connection: the statement may have run in
                    // autocommit. Reported as such, never as rolled back.
                    let e = begin_failed(e);
                    self.failed = Some(e.clone());
                    return Err(e);
                }
                Err(e) => Err(e),
            }
        };
        engine.counters.passthrough();
        result.map_err(|e| {
            let e = if e.is_outcome_unknown() && !e.is_db() {
                // The session is gone and with it the open transaction:
                // the server rolled it back, nothing of it committed.
                Error::with_source(
                    Kind::ConnectionClosed,
                    "connection lost inside the transaction; it was rolled back",
                    e,
                )
            } else {
                e
            };
            if self.failed.is_none() {
                self.failed = Some(e.clone());
            }
            e
        })
    }

    /// Runs a statement in the transaction and returns its outcome (its row
    /// count and first `RETURNING` row). Never coalesced.
    pub async fn execute(&mut self, sql: &str, params: &Params<'_>) -> Result<Outcome, Error> {
        match self.run(sql, params, false).await? {
            Reply::Outcome(out) => Ok(out),
            _ => Err(missing_reply()),
        }
    }

    /// Runs a query in the transaction and returns all its rows.
    pub async fn query(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, Error> {
        match self.run(sql, params, true).await? {
            Reply::Rows(rows) => Ok(rows),
            _ => Err(missing_reply()),
        }
    }

    /// Runs a query expected to return exactly one row.
    pub async fn query_one(&mut self, sql: &str, params: &Params<'_>) -> Result<Row, Error> {
        let mut rows = self.query(sql, params).await?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(Error::params(format!(
                "query_one expected 1 row, the query returned {n}"
            ))),
        }
    }

    /// Runs a query returning zero or one row.
    pub async fn query_opt(
        &mut self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Option<Row>, Error> {
        let mut rows = self.query(sql, params).await?;
        match rows.len() {
            0 => Ok(None),
            1 => Ok(Some(rows.remove(0))),
            n => Err(Error::params(format!(
                "query_opt expected at most 1 row, the query returned {n}"
            ))),
        }
    }

    /// Commits: one round trip, or nothing at all if no statement ran.
    ///
    /// If a statement of this transaction failed, the server has already
    /// aborted it: this sends `ROLLBACK` instead and returns that statement's
    /// error. If the connection is lost while `COMMIT` is in flight, the error
    /// says the outcome is unknown ([`Error::is_outcome_unknown`]).
    pub async fn commit(mut self) -> Result<(), Error> {
        if !self.is_begun() {
            return Ok(());
        }
        if let Some(e) = self.failed.take() {
            self.end("ROLLBACK").await?;
            return Err(e);
        }
        self.end("COMMIT").await
    }

    /// Rolls back: one round trip, or nothing at all if no statement ran.
    pub async fn rollback(mut self) -> Result<(), Error> {
        if !self.is_begun() {
            return Ok(());
        }
        self.end("ROLLBACK").await
    }

    async fn end(&mut self, sql: &'static str) -> Result<(), Error> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let client = TxConn::client(&conn.conn)?;
        if client.is_closed() {
            // The session ended, and the server rolled the transaction back.
            return Err(Error::new(
                Kind::ConnectionClosed,
                format!("connection lost before {sql}; the transaction was rolled back"),
            ));
        }
        match client.batch_execute(sql).await {
            Ok(()) => {
                conn.open = false;
                Ok(())
            }
            // A server error ends the transaction block too.
            Err(e) if e.as_db_error().is_some() => {
                conn.open = false;
                Err(sent_error(e))
            }
            Err(e) => Err(sent_error(e)),
        }
    }

    /// Runs a last statement and commits, in one round trip.
    ///
    /// If it is the transaction's only statement it is sent alone, in
    /// autocommit: no `BEGIN`, no `COMMIT`. Otherwise the statement and
    /// `COMMIT` are written together; if the statement fails, nothing
    /// commits and its error is returned.
    pub async fn execute_and_commit(
        mut self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Outcome, Error> {
        reject_transaction_control(sql)?;
        let engine = self.pool.engine.clone();
        if !self.is_begun() {
            let conn = self.connection().await?;
            let client = TxConn::client(&conn.conn)?;
            let stmt = client.prepare_cached(sql).await.map_err(unsent_error)?;
            let row = encode(stmt.params(), params)?;
            engine.counters.passthrough();
            return run_statement(client, &stmt, &row).await;
        }
        if let Some(e) = self.failed.take() {
            self.end("ROLLBACK").await?;
            return Err(e);
        }
        let conn = self.connection().await?;
        let client = TxConn::client(&conn.conn)?;
        let stmt = client.prepare_cached(sql).await.map_err(unsent_error)?;
        let row = encode(stmt.params(), params)?;
        engine.counters.passthrough();
        if client.is_closed() {
            return Err(Error::new(
                Kind::ConnectionClosed,
                "connection lost before the last statement; the transaction was rolled back",
            ));
        }
        let steps = vec![statement(client, &stmt, &row), simple(client, "COMMIT")];
        let mut replies = in_order(steps).await.into_iter();
        let result = replies.next().unwrap_or_else(|| Err(missing_reply()));
        let commit = replies.next().unwrap_or_else(|| Err(missing_reply()));
        let ended = commit.is_ok() || commit.as_ref().err().is_some_and(Error::is_db);
        if ended {
            conn.open = false;
        }
        match (result, commit) {
            (Ok(Reply::Outcome(out)), Ok(_)) => Ok(out),
            (Ok(_), Ok(_)) => Err(missing_reply()),
            // The statement failed: COMMIT answered ROLLBACK.
            (Err(e), Ok(_)) => Err(e),
            (Err(e), Err(_)) if e.is_db() => Err(e),
            (_, Err(e)) => Err(e),
        }
    }
}
