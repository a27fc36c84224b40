//! All-or-nothing statement groups ([`Pool::atomic`]) and transactions with a
//! lazy `START TRANSACTION` ([`Pool::begin`]) for MySQL / MariaDB.
//!
//! # Round trips
//!
//! mysql_async sends one command and reads its reply before the next (no
//! pipelining), and a prepared statement (`COM_STMT_EXECUTE`) cannot carry a
//! `START TRANSACTION` or a `COMMIT` with it. So with every statement already
//! prepared on the connection (the first use of a text adds one
//! `COM_STMT_PREPARE` round trip; parameterless statements use the text
//! protocol and need none):
//!
//! | call | round trips | sent |
//! |---|---|---|
//! | `atomic([s])` | 1 | `s` in autocommit |
//! | `atomic([s1..sn])`, n ≥ 2 | n + 2 | `START TRANSACTION`, each `si`, `COMMIT` |
//! | `atomic([s1..sn])`, `sk` fails | k + 3 | …, `sk`, `ROLLBACK` |
//! | `begin()` + `commit()`/`rollback()`/drop | 0 | nothing, no connection taken |
//! | `begin()` + `execute(s)` + `commit()` | 3 | `START TRANSACTION`, `s`, `COMMIT` |
//! | `begin()` + `execute_and_commit(s)` | 1 | `s` in autocommit |
//!
//! The saving over an explicit transaction is therefore in the one-statement
//! cases (1 round trip instead of 3), which is where Vitess found it. Sending
//! `START TRANSACTION; s1; s2; COMMIT` as one multi-statement text would be
//! one round trip, but only with the values spliced into the text, which
//! batchpool never does.
//!
//! # Clean connections on every path
//!
//! A connection that may be inside a transaction is held by a [`TxConn`]
//! guard: dropped while a transaction may be open (a cancelled future, a
//! dropped [`Transaction`]), it spawns a `ROLLBACK` and returns the
//! connection to the pool once the server confirms no transaction is open.
//! A connection whose command was cancelled mid-flight is marked broken by
//! mysql_async, and one that cannot be rolled back is closed instead (the
//! server rolls back a closed session). The pool's recycle check also
//! refuses any connection still inside a transaction.

use mysql_async::consts::StatusFlags;
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row};

use super::backend::{closed_before_send, sent_error, unsent_error};
use super::{Outcome, Pool, PooledConn, run, run_statement};
use crate::engine::Backend;
use crate::error::{AtomicError, Error, Kind};

/// What a statement may not be inside a group or transaction: the keyword
/// found, if any. `in_transaction` adds the statements MySQL commits
/// implicitly (DDL and the like), which are fine alone in autocommit.
fn refused_keyword(sql: &str, in_transaction: bool) -> Option<String> {
    let mut words = Words { rest: sql };
    let first = words.next()?.to_ascii_uppercase();
    let control = [
        "BEGIN",
        "START",
        "COMMIT",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
        "XA",
        "LOCK",
        "UNLOCK",
    ];
    if control.contains(&first.as_str()) {
        return Some(first);
    }
    if first == "SET" && sql.to_ascii_lowercase().contains("autocommit") {
        return Some("SET autocommit".to_string());
    }
    if !in_transaction {
        return None;
    }
    let implicit_commit = [
        "ALTER",
        "CREATE",
        "DROP",
        "RENAME",
        "TRUNCATE",
        "GRANT",
        "REVOKE",
        "ANALYZE",
        "OPTIMIZE",
        "REPAIR",
        "FLUSH",
        "INSTALL",
        "UNINSTALL",
    ];
    if implicit_commit.contains(&first.as_str()) {
        // Temporary tables do not commit.
        let temporary = words
            .next()
            .is_some_and(|w| w.eq_ignore_ascii_case("TEMPORARY"));
        if !(temporary && (first == "CREATE" || first == "DROP")) {
            return Some(first);
        }
    }
    None
}

fn refuse(sql: &str, in_transaction: bool) -> Result<(), Error> {
    match refused_keyword(sql, in_transaction) {
        Some(keyword) => Err(Error::params(format!(
            "{keyword} cannot run inside an atomic group or batchpool Transaction: batchpool \
             sends START TRANSACTION/COMMIT/ROLLBACK itself, and MySQL commits implicitly \
             around DDL (use Pool::get for manual transaction control)"
        ))),
        None => Ok(()),
    }
}

/// Leading keywords of a MySQL statement, skipping whitespace and comments
/// (`#`, `-- `, `/* */`; the body of a `/*! */` executable comment is read).
struct Words<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        loop {
            let s = self.rest.trim_start();
            if s.starts_with('#') || s.starts_with("-- ") || s.starts_with("--\t") || s == "--" {
                self.rest = s.split_once('\n').map_or("", |(_, r)| r);
            } else if let Some(after) = s.strip_prefix("/*!").or_else(|| s.strip_prefix("/*M!")) {
                // Executable comment: its body is SQL, after an optional
                // version number.
                self.rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
            } else if let Some(after) = s.strip_prefix("/*") {
                self.rest = after.split_once("*/")?.1;
            } else if let Some(after) = s.strip_prefix("*/") {
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

/// Whether the server's last reply on `conn` says a transaction is open.
fn in_transaction(conn: &PooledConn) -> bool {
    conn.last_ok_packet().is_none_or(|ok| {
        ok.status_flags()
            .contains(StatusFlags::SERVER_STATUS_IN_TRANS)
    })
}

/// A pooled connection that may be inside a transaction. When dropped with
/// `open` set it never goes back to the pool as it is: a spawned `ROLLBACK`
/// returns it once answered, or it is discarded.
pub(super) struct TxConn {
    conn: Option<PooledConn>,
    /// `START TRANSACTION` may have been sent without its `COMMIT` /
    /// `ROLLBACK` being answered.
    open: bool,
}

fn released() -> Error {
    Error::new(Kind::ConnectionClosed, "connection already released")
}

fn discard(conn: PooledConn) {
    drop(deadpool::managed::Object::take(conn));
}

impl TxConn {
    fn new(conn: PooledConn) -> TxConn {
        TxConn {
            conn: Some(conn),
            open: false,
        }
    }

    /// Ends the transaction with `sql` (`COMMIT` / `ROLLBACK`).
    async fn end(&mut self, sql: &'static str) -> Result<(), Error> {
        let conn = self.conn.as_mut().ok_or_else(released)?;
        if conn.is_disconnected() {
            return Err(Error::new(
                Kind::ConnectionClosed,
                format!("connection lost before {sql}; the transaction was rolled back"),
            ));
        }
        match conn.query_drop(sql).await {
            Ok(()) => {
                if !in_transaction(conn) {
                    self.open = false;
                }
                Ok(())
            }
            Err(e) => {
                conn.note_error(&e);
                Err(sent_error(e))
            }
        }
    }
}

impl Drop for TxConn {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let Some(conn) = self.conn.take() else {
            return;
        };
        if conn.is_disconnected() || conn.broken {
            discard(conn);
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let mut guard = Discard(Some(conn));
                    let clean = match guard.0.as_mut() {
                        Some(c) => c.query_drop("ROLLBACK").await.is_ok() && !in_transaction(c),
                        None => false,
                    };
                    if clean {
                        drop(guard.0.take());
                    }
                });
            }
            Err(_) => discard(conn),
        }
    }
}

/// Discards the connection unless it was taken back out.
struct Discard(Option<PooledConn>);

impl Drop for Discard {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            discard(conn);
        }
    }
}

/// A lost connection inside a transaction: the server rolls it back.
fn lost_inside(e: Error) -> Error {
    if e.is_outcome_unknown() {
        Error::with_source(
            Kind::ConnectionClosed,
            "connection lost inside the transaction; it was rolled back",
            e,
        )
    } else {
        e
    }
}

/// Prepares a parameterized statement (cached per connection by
/// mysql_async) so a bad text or parameter count fails before anything
/// runs. Parameterless statements use the text protocol.
async fn check_params(conn: &mut PooledConn, sql: &str, params: &Params) -> Result<(), Error> {
    if matches!(params, Params::Empty) {
        return Ok(());
    }
    let stmt = match conn.prep(sql).await {
        Ok(stmt) => stmt,
        Err(e) => {
            conn.note_error(&e);
            return Err(unsent_error(e));
        }
    };
    if let Params::Positional(values) = params
        && values.len() != usize::from(stmt.num_params())
    {
        return Err(Error::params(format!(
            "statement takes {} parameter{}, {} given",
            stmt.num_params(),
            if stmt.num_params() == 1 { "" } else { "s" },
            values.len()
        )));
    }
    Ok(())
}

/// [`Pool::atomic`].
pub(super) async fn atomic(
    pool: &Pool,
    statements: Vec<(&str, Params)>,
) -> Result<Vec<Outcome>, AtomicError> {
    let engine = &pool.engine;
    engine.check_open().map_err(AtomicError::group)?;
    let n = statements.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    for (i, (sql, _)) in statements.iter().enumerate() {
        refuse(sql, n > 1).map_err(|e| AtomicError::at(i, e))?;
    }
    let mut guard = TxConn::new(engine.backend.get().await.map_err(AtomicError::group)?);
    let Some(conn) = guard.conn.as_mut() else {
        return Err(AtomicError::group(released()));
    };
    for (i, (sql, params)) in statements.iter().enumerate() {
        check_params(conn, sql, params)
            .await
            .map_err(|e| AtomicError::at(i, e))?;
    }
    if n == 1 {
        // One statement is its own transaction: autocommit, no
        // START TRANSACTION / COMMIT.
        let mut statements = statements;
        let Some((sql, params)) = statements.pop() else {
            return Ok(Vec::new());
        };
        engine.counters.passthrough();
        return run_statement(conn, sql, params)
            .await
            .map(|out| vec![out])
            .map_err(|e| AtomicError::at(0, e));
    }

    if conn.is_disconnected() {
        return Err(AtomicError::group(closed_before_send()));
    }
    guard.open = true;
    let Some(conn) = guard.conn.as_mut() else {
        return Err(AtomicError::group(released()));
    };
    if let Err(e) = conn.query_drop("START TRANSACTION").await {
        conn.note_error(&e);
        return Err(AtomicError::group(lost_inside(sent_error(e))));
    }
    let mut outcomes = Vec::with_capacity(n);
    let mut failure = None;
    for (i, (sql, params)) in statements.into_iter().enumerate() {
        engine.counters.passthrough();
        match run_statement(conn, sql, params).await {
            Ok(out) => outcomes.push(out),
            Err(e) => {
                failure = Some((i, e));
                break;
            }
        }
    }
    if let Some((i, e)) = failure {
        if e.is_outcome_unknown() || conn.is_disconnected() {
            // COMMIT was never sent: the server rolls back the session.
            return Err(AtomicError::at(i, lost_inside(e)));
        }
        // MySQL keeps the transaction open after a failed statement (or has
        // rolled it back already, after a deadlock): end it.
        let _ = guard.end("ROLLBACK").await;
        return Err(AtomicError::at(i, e));
    }
    match guard.end("COMMIT").await {
        Ok(()) => Ok(outcomes),
        Err(e) => {
            if e.is_db() {
                let _ = guard.end("ROLLBACK").await;
            }
            Err(AtomicError::group(e))
        }
    }
}

/// A MySQL / MariaDB transaction with a lazy `START TRANSACTION`, from
/// [`Pool::begin`].
///
/// Nothing happens until the first statement: then a connection is taken
/// from the pool and `START TRANSACTION` is sent before the statement (one
/// more round trip: mysql_async cannot pipeline it, see the
/// [`Pool::atomic`] docs). [`commit`](Transaction::commit) and
/// [`rollback`](Transaction::rollback) of a transaction that ran nothing
/// send nothing; [`execute_and_commit`](Transaction::execute_and_commit) as
/// the only statement runs it alone in autocommit (one round trip instead of
/// three).
///
/// Statements inside a transaction are never coalesced with other callers'
/// rows: they run as they are, on this transaction's own connection.
///
/// If a statement fails, the transaction is over: later statements are
/// refused with that error without being sent, and
/// [`commit`](Transaction::commit) sends `ROLLBACK` and returns it. (MySQL
/// itself would keep the transaction open after most errors, but ends it
/// after a deadlock, and statements sent after that would autocommit one
/// by one.) Transaction control and statements that commit implicitly
/// (`CREATE`, `ALTER`, `DROP`, `TRUNCATE`, `LOCK TABLES`, ...) are refused;
/// use [`Pool::get`] for those.
///
/// Dropping a transaction that sent `START TRANSACTION` without
/// `commit`/`rollback` rolls it back: a spawned task sends `ROLLBACK` and
/// returns the connection to the pool (outside a tokio runtime, or if a
/// statement was cancelled mid-flight, the connection is closed instead,
/// which also rolls back).
pub struct Transaction {
    pool: Pool,
    conn: Option<TxConn>,
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

    /// Whether `START TRANSACTION` was sent and the transaction is not over.
    pub fn is_begun(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.open)
    }

    async fn connection(&mut self) -> Result<&mut TxConn, Error> {
        if self.conn.is_none() {
            self.pool.engine.check_open()?;
            let conn = self.pool.engine.backend.get().await?;
            self.conn = Some(TxConn::new(conn));
        }
        self.conn.as_mut().ok_or_else(released)
    }

    /// Runs one statement inside the transaction, starting it first if
    /// needed. After a failure (other than bad parameters, caught before
    /// sending) the transaction is over.
    async fn run(&mut self, sql: &str, params: Params) -> Result<super::Ran, Error> {
        refuse(sql, true)?;
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let pool = self.pool.clone();
        let tx = self.connection().await?;
        let result = run_in(tx, &pool, sql, params).await;
        if let Err(e) = &result
            && !e.is_params()
            && self.is_begun()
        {
            self.failed = Some(e.clone());
        }
        result
    }

    /// Runs a statement in the transaction and returns its outcome. Never
    /// coalesced. Parameters as for [`Pool::execute`].
    pub async fn execute(
        &mut self,
        sql: &str,
        params: impl Into<Params>,
    ) -> Result<Outcome, Error> {
        let ran = self.run(sql, params.into()).await?;
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

    /// Runs a query in the transaction and returns the rows of its first
    /// result set.
    pub async fn query(&mut self, sql: &str, params: impl Into<Params>) -> Result<Vec<Row>, Error> {
        Ok(self.run(sql, params.into()).await?.rows)
    }

    /// Runs a query expected to return exactly one row.
    pub async fn query_one(&mut self, sql: &str, params: impl Into<Params>) -> Result<Row, Error> {
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
        params: impl Into<Params>,
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

    /// Commits: one round trip, or nothing at all if no statement ran. If a
    /// statement failed, sends `ROLLBACK` instead and returns its error.
    pub async fn commit(mut self) -> Result<(), Error> {
        if !self.is_begun() {
            return Ok(());
        }
        let Some(tx) = self.conn.as_mut() else {
            return Ok(());
        };
        if let Some(e) = self.failed.take() {
            tx.end("ROLLBACK").await?;
            return Err(e);
        }
        match tx.end("COMMIT").await {
            Err(e) if e.is_db() => {
                let _ = tx.end("ROLLBACK").await;
                Err(e)
            }
            other => other,
        }
    }

    /// Rolls back: one round trip, or nothing at all if no statement ran.
    pub async fn rollback(mut self) -> Result<(), Error> {
        if !self.is_begun() {
            return Ok(());
        }
        match self.conn.as_mut() {
            Some(tx) => tx.end("ROLLBACK").await,
            None => Ok(()),
        }
    }

    /// Runs a last statement and commits. As the transaction's only
    /// statement it is sent alone in autocommit (one round trip, no
    /// `START TRANSACTION`, no `COMMIT`); otherwise it is followed by
    /// `COMMIT` (two round trips), and if it fails nothing commits.
    pub async fn execute_and_commit(
        mut self,
        sql: &str,
        params: impl Into<Params>,
    ) -> Result<Outcome, Error> {
        let params = params.into();
        if !self.is_begun() {
            refuse(sql, false)?;
            let engine = self.pool.engine.clone();
            let tx = self.connection().await?;
            let conn = tx.conn.as_mut().ok_or_else(released)?;
            engine.counters.passthrough();
            return run_statement(conn, sql, params).await;
        }
        let out = match self.execute(sql, params).await {
            Ok(out) => out,
            Err(e) => {
                if let Some(tx) = self.conn.as_mut() {
                    let _ = tx.end("ROLLBACK").await;
                }
                return Err(e);
            }
        };
        self.commit().await.map(|()| out)
    }
}

/// Runs one statement on the transaction's connection, sending
/// `START TRANSACTION` first if it is the first.
async fn run_in(
    tx: &mut TxConn,
    pool: &Pool,
    sql: &str,
    params: Params,
) -> Result<super::Ran, Error> {
    let conn = tx.conn.as_mut().ok_or_else(released)?;
    check_params(conn, sql, &params).await?;
    if !tx.open {
        if conn.is_disconnected() {
            return Err(closed_before_send());
        }
        tx.open = true;
        if let Err(e) = conn.query_drop("START TRANSACTION").await {
            conn.note_error(&e);
            return Err(lost_inside(sent_error(e)));
        }
    }
    pool.engine.counters.passthrough();
    run(conn, sql, params).await.map_err(lost_inside)
}
