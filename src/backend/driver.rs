//! The connection-level role of a backend: opening connections, preparing
//! and running one statement, running a group of statements with
//! `BEGIN`/`COMMIT` (pipelined on PostgreSQL, one command at a time on
//! MySQL), ending a transaction, and telling a dead connection from a live
//! one.

use std::fmt;
use std::future::Future;

use super::batch;
use super::{Capped, Conn, Wire};
use crate::config::PoolSettings;
use crate::error::Error;
use crate::outcome::Outcome;

/// The result of one statement that ran on its own.
#[derive(Debug)]
pub(crate) struct Ran<R> {
    /// Rows the statement affected, as the server counts them (for a query,
    /// the rows it returned).
    pub(crate) affected: u64,
    /// The server's last insert id (MySQL), if it sent one.
    #[cfg_attr(
        not(feature = "mysql"),
        allow(dead_code, reason = "only MySQL reports one")
    )]
    pub(crate) last_insert_id: Option<u64>,
    /// Rows the statement returned: all of them, or only the first when the
    /// caller asked for an outcome.
    pub(crate) rows: Vec<R>,
}

/// How a transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// `COMMIT`.
    Commit,
    /// `ROLLBACK`.
    Rollback,
}

impl End {
    pub(crate) fn sql(self) -> &'static str {
        match self {
            End::Commit => "COMMIT",
            End::Rollback => "ROLLBACK",
        }
    }
}

/// One statement of a [`Group`], prepared and bound.
pub(crate) struct Stmt<'a, B: Driver> {
    pub(crate) sql: &'a str,
    pub(crate) prepared: &'a B::Prepared,
    pub(crate) bound: B::Bound,
    /// Collect every returned row (a query) rather than the first.
    pub(crate) all_rows: bool,
}

/// Statements to run in order on one connection, optionally after `BEGIN`
/// and before `COMMIT`.
pub(crate) struct Group<'a, B: Driver> {
    pub(crate) begin: bool,
    pub(crate) statements: Vec<Stmt<'a, B>>,
    pub(crate) commit: bool,
}

/// What a [`Group`] got back.
///
/// Once a statement fails, nothing after it takes effect: PostgreSQL aborts
/// the transaction itself (later statements answer `25P02`, the pipelined
/// `COMMIT` answers `ROLLBACK`); the MySQL backend sends no further
/// statement and `ROLLBACK` instead of `COMMIT`.
#[derive(Debug)]
pub(crate) struct GroupReplies<R> {
    /// `BEGIN`'s reply, if it was sent.
    pub(crate) begin: Option<Result<(), Error>>,
    /// One reply per statement sent, in order (fewer than given when the
    /// backend stopped sending).
    pub(crate) statements: Vec<Result<Ran<R>, Error>>,
    /// The reply of the `COMMIT` (or the `ROLLBACK` sent in its place) and
    /// whether the session is known to be outside a transaction afterwards;
    /// `None` when nothing was sent to end the transaction.
    pub(crate) end: Option<(Result<(), Error>, bool)>,
}

/// The connection-level role of a backend (see the module docs).
pub(crate) trait Driver:
    batch::Backend<
        Connections = deadpool::managed::Pool<Self::Manager>,
        Output = Outcome<Self::QueryRow>,
    >
{
    /// The deadpool manager of this backend's connections.
    type Manager: Capped<
            Type: Send + Wire,
            Error: Into<Box<dyn std::error::Error + Send + Sync>> + fmt::Debug + fmt::Display,
        > + Send
        + Sync
        + 'static;
    /// Connection settings (`tokio_postgres::Config`, `mysql_async::Opts`).
    type Config: Send + Sync + 'static;
    /// Backend-only builder options.
    type Options: Default + fmt::Debug + Send + Sync + 'static;
    /// One row a query returned.
    type QueryRow: Send + 'static;
    /// One statement's parameters as the caller gave them.
    type Args<'a>: Send + 'a;
    /// A statement ready to run on one connection.
    type Prepared: Send + Sync + 'static;
    /// Parameters checked (and encoded) against a prepared statement.
    type Bound: Send + Sync + 'static;

    /// Name for messages and `Debug`.
    const NAME: &'static str;
    /// The `backend` label of the pool's metrics (the cargo feature's name).
    const LABEL: &'static str;
    /// After a statement fails inside a transaction the server aborts the
    /// transaction itself and answers every later statement with an error,
    /// so later statements may be sent (PostgreSQL). When `false`, the pool
    /// refuses them without sending: the server would run them, possibly in
    /// autocommit after it rolled back a deadlock (MySQL).
    const SERVER_ABORTS_FAILED_TRANSACTION: bool;
    /// A connection whose exchange was cut off (its future dropped before
    /// the answer was read) can still be used: the driver reads the pending
    /// answers, in order, before the next one (tokio-postgres). When
    /// `false`, such a connection is closed (mysql_async).
    const RESUMES_AFTER_CUT: bool;

    /// Parses a connection string.
    fn parse_config(config: &str) -> Result<Self::Config, Error>;

    /// Formats a config without its password.
    fn fmt_config(config: &Self::Config, f: &mut fmt::Formatter<'_>) -> fmt::Result;

    /// Replaces the config's password (a [`PoolConfig`](crate::PoolConfig)
    /// with its password apart from the connection string).
    #[cfg_attr(not(feature = "serde"), allow(dead_code, reason = "PoolConfig only"))]
    fn set_password(config: Self::Config, password: &str) -> Self::Config;

    /// Adds a `post_create` hook running `sql` (one or more statements).
    #[cfg_attr(not(feature = "serde"), allow(dead_code, reason = "PoolConfig only"))]
    fn add_on_connect(options: &mut Self::Options, sql: String);

    /// Applies the backend's own settings of a [`PoolConfig`](crate::PoolConfig),
    /// refusing those of the other backend.
    #[cfg(feature = "serde")]
    fn apply_config(
        builder: crate::PoolBuilder<Self>,
        config: &crate::PoolConfig,
    ) -> Result<crate::PoolBuilder<Self>, Error>
    where
        Self: super::Backend;

    /// Builds the backend and its (lazily connecting) deadpool pool.
    fn open(
        config: Self::Config,
        settings: &PoolSettings,
        options: Self::Options,
    ) -> Result<Self, Error>;

    /// Encodes a caller's row of a batchable shape (in the caller's task),
    /// checking its parameters; returns it with its size in bytes.
    fn encode_row(
        &self,
        shape: &Self::Shape,
        args: Self::Args<'_>,
    ) -> Result<(Self::Row, usize), Error>;

    /// Whether the caller gave any parameter (MySQL runs parameterless
    /// statements over the text protocol).
    fn has_params(args: &Self::Args<'_>) -> bool;

    /// Prepares statements on `conn`, in order; `(sql, has_params)` each.
    /// PostgreSQL sends all the new texts in one round trip.
    /// `in_transaction`: the connection is inside an open transaction.
    fn prepare<'a>(
        conn: &'a mut Conn<Self>,
        texts: &'a [(&'a str, bool)],
        in_transaction: bool,
    ) -> impl Future<Output = Vec<Result<Self::Prepared, Error>>> + Send + 'a;

    /// Checks and encodes a caller's parameters for a prepared statement.
    fn bind(prepared: &Self::Prepared, args: Self::Args<'_>) -> Result<Self::Bound, Error>;

    /// Runs one prepared statement on its own (autocommit, or inside the
    /// connection's open transaction).
    fn run<'a>(
        conn: &'a mut Conn<Self>,
        stmt: Stmt<'a, Self>,
    ) -> impl Future<Output = Result<Ran<Self::QueryRow>, Error>> + Send + 'a;

    /// Runs one prepared statement once per bound row, each its own
    /// autocommit statement, on one connection: one after the other, unless
    /// the backend can pipeline them (PostgreSQL). A row that failed to bind
    /// gets its error.
    fn run_many<'a>(
        conn: &'a mut Conn<Self>,
        sql: &'a str,
        prepared: &'a Self::Prepared,
        rows: Vec<Result<Self::Bound, Error>>,
    ) -> impl Future<Output = Vec<Result<Ran<Self::QueryRow>, Error>>> + Send + 'a {
        async move {
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                out.push(match row {
                    Ok(bound) => {
                        let stmt = Stmt {
                            sql,
                            prepared,
                            bound,
                            all_rows: false,
                        };
                        Self::run(conn, stmt).await
                    }
                    Err(e) => Err(e),
                });
            }
            out
        }
    }

    /// Runs a [`Group`] (see [`GroupReplies`] for what happens after a
    /// failure). PostgreSQL writes it in one round trip.
    fn run_group<'a>(
        conn: &'a mut Conn<Self>,
        group: Group<'a, Self>,
    ) -> impl Future<Output = GroupReplies<Self::QueryRow>> + Send + 'a;

    /// Ends the open transaction; returns the reply and whether the session
    /// is known to be outside a transaction afterwards. The MySQL backend
    /// follows a refused `COMMIT` with `ROLLBACK`.
    fn end<'a>(
        conn: &'a mut Conn<Self>,
        end: End,
    ) -> impl Future<Output = (Result<(), Error>, bool)> + Send + 'a;

    /// The connection is known to be unusable (closed, killed): it must not
    /// go back to the pool, and nothing sent on it can run.
    fn is_broken(conn: &Conn<Self>) -> bool;

    /// The error for `what` (a group or transaction statement), which needs
    /// a transaction block, where none can reach the server (a pooler that
    /// refuses them); `None` where they can. Asked once a connection is
    /// open, before anything of `what` is sent.
    fn transaction_refusal(&self, what: &str) -> Option<Error> {
        let _ = what;
        None
    }

    /// Re-reads the session's statement time limit on `conn` if a statement
    /// of the user's that may have changed it ran there (its text names the
    /// setting); no round trip otherwise.
    fn refresh_limit(conn: &mut Conn<Self>) -> impl Future<Output = Result<(), Error>> + Send + '_;

    /// Marks a connection handed to the user by `Pool::get` (its session
    /// is reset when it comes back), and gives its session back its own
    /// statement time limit where the pool set the user's
    /// `statement_timeout` for its own statements.
    fn lend(conn: &mut Conn<Self>) -> impl Future<Output = Result<(), Error>> + Send + '_;
}

impl<R> Ran<R> {
    /// The outcome of a statement that ran on its own: the server's count
    /// and id, and its first returned row.
    pub(crate) fn into_outcome(self) -> Outcome<R> {
        Outcome::new(
            self.affected,
            true,
            self.last_insert_id,
            self.rows.into_iter().next(),
        )
    }
}
