//! The crate's one error type.
//!
//! Modelled on `tokio_postgres::Error`: opaque, cheap to clone (every caller of
//! a failed batch can hold the same error), with predicates instead of a public
//! enum so new failure kinds can be added without breaking users.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What went wrong, coarsely. Private: users ask through the predicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The database answered this statement with an error.
    Db,
    /// The connection was lost after the statement was sent and before its
    /// reply arrived: it may or may not have committed.
    OutcomeUnknown,
    /// The connection was lost (or the pool closed) before the statement was
    /// sent: it certainly did not run.
    ConnectionClosed,
    /// The pool was closed by [`close`](crate::postgres::Pool::close).
    PoolClosed,
    /// Waiting for a connection or queue slot took longer than configured.
    Timeout,
    /// The statement was sent and its answer did not come within the
    /// statement deadline: it may or may not have committed, and its
    /// connection was closed.
    StatementTimeout,
    /// The queue was full and the pool is configured to fail fast.
    Overloaded,
    /// Wrong number or type of bind parameters.
    Params,
    /// A row or statement exceeds a protocol or server limit.
    TooLarge,
    /// Creating a new connection failed.
    Connect,
    /// Invalid configuration.
    Config,
    /// batchpool refused to run the statement where it was given
    /// (transaction control through `execute`, DDL inside a MySQL
    /// transaction).
    Refused,
    /// A query returned another number of rows than the call expects
    /// (`query_one`, `query_opt`).
    RowCount,
    /// An internal invariant did not hold (a bug in batchpool).
    Internal,
}

struct Inner {
    kind: Kind,
    message: String,
    source: Option<BoxError>,
    /// What the backend found out about a server error when it mapped it.
    server: Option<ServerClass>,
}

/// What a backend finds out about one of its server's errors, once, when it
/// maps the driver's error into an [`Error`]: the core never looks inside a
/// driver's error type.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerClass {
    /// The SQLSTATE.
    pub(crate) code: String,
    /// The server's error as one line, shown as the error's `Display`.
    pub(crate) message: String,
    /// Sending the statement again is safe and may succeed (deadlock,
    /// serialization failure, server shutting down, too many connections...).
    pub(crate) retryable: bool,
    /// The server cancelled the statement at its statement time limit.
    pub(crate) statement_timeout: bool,
    /// The error is about a multi-row statement as a whole, not about one
    /// row's values.
    #[cfg_attr(
        not(feature = "postgres"),
        allow(dead_code, reason = "the MySQL backend judges its raw errors")
    )]
    pub(crate) statement_level: bool,
}

/// A driver error its backend can classify: implemented by each backend for
/// its driver's error type.
pub(crate) trait ServerError: StdError + Send + Sync + Sized + 'static {
    /// The classification when the error is the server's answer to a
    /// statement; `None` for any other error of the driver.
    fn classify(&self) -> Option<ServerClass>;
}

/// An error from batchpool: a database error for this caller's own row, a lost
/// connection, a closed or overloaded pool, or bad input.
///
/// Cloning is cheap (an `Arc`); when a whole batch fails for a reason that is
/// not specific to one row, every caller receives a clone of the same error.
///
/// Ask what happened through the predicates: [`code`](Error::code),
/// [`is_outcome_unknown`](Error::is_outcome_unknown),
/// [`is_closed`](Error::is_closed), [`is_timeout`](Error::is_timeout),
/// [`is_overloaded`](Error::is_overloaded),
/// [`is_retryable`](Error::is_retryable), and (per backend)
/// `as_db_error()` / `as_mysql_error()`.
#[derive(Clone)]
pub struct Error(Arc<Inner>);

/// `pub fn is_x(&self) -> bool` for each `is_x => Kind | Kind;`.
macro_rules! kind_predicates {
    ($($(#[$doc:meta])* $name:ident => $($kind:ident)|+;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> bool {
                matches!(self.0.kind, $(Kind::$kind)|+)
            }
        )*
    };
}

impl Error {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error(Arc::new(Inner {
            kind,
            message: message.into(),
            source: None,
            server: None,
        }))
    }

    pub(crate) fn with_source(
        kind: Kind,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Error {
        Error(Arc::new(Inner {
            kind,
            message: message.into(),
            source: Some(source.into()),
            server: None,
        }))
    }

    pub(crate) fn pool_closed() -> Error {
        Error::new(Kind::PoolClosed, "the pool is closed")
    }

    pub(crate) fn overloaded(capacity: usize) -> Error {
        Error::new(
            Kind::Overloaded,
            format!("the batch queue is full ({capacity} rows waiting) and the pool fails fast"),
        )
    }

    pub(crate) fn params(message: impl Into<String>) -> Error {
        Error::new(Kind::Params, message)
    }

    pub(crate) fn too_large(message: impl Into<String>) -> Error {
        Error::new(Kind::TooLarge, message)
    }

    /// The server answered the statement with an error. Its `Display` is
    /// the server's own, as the backend words it (for PostgreSQL: severity,
    /// code, message, and detail and hint when present).
    pub(crate) fn db(source: impl ServerError) -> Error {
        let server = source.classify();
        let message = match &server {
            Some(class) => class.message.clone(),
            None => source.to_string(),
        };
        Error(Arc::new(Inner {
            kind: Kind::Db,
            message,
            source: Some(Box::new(source)),
            server,
        }))
    }

    /// The driver's error behind this one, for the backend that made it to
    /// look into.
    pub(crate) fn driver_source(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.0.source.as_deref()
    }

    /// The backend's classification of the server error behind this one.
    fn server(&self) -> Option<&ServerClass> {
        match self.0.kind {
            Kind::Db => self.0.server.as_ref(),
            _ => None,
        }
    }

    /// Whether the server error behind this one is about a multi-row
    /// statement as a whole rather than one row's values (as the backend
    /// judged it). False for any other error.
    #[cfg_attr(
        not(feature = "postgres"),
        allow(dead_code, reason = "the MySQL backend judges its raw errors")
    )]
    pub(crate) fn is_statement_level(&self) -> bool {
        self.server().is_some_and(|class| class.statement_level)
    }

    /// The driver lost the connection: after the statement was sent its
    /// outcome is unknown; before, it certainly did not run.
    pub(crate) fn connection_lost(after_send: bool, source: impl Into<BoxError>) -> Error {
        if after_send {
            Error::with_source(
                Kind::OutcomeUnknown,
                "connection lost while the statement was in flight; it may or may not have \
                 committed",
                source,
            )
        } else {
            Error::with_source(
                Kind::ConnectionClosed,
                "connection lost before the statement was sent",
                source,
            )
        }
    }

    /// The driver lost the connection inside a transaction the pool opened
    /// for a statement, before its `COMMIT` was sent: the server rolls it
    /// back, so the statement certainly did not take effect.
    #[cfg_attr(
        not(feature = "mysql"),
        allow(
            dead_code,
            reason = "only MySQL's coalesced updates open a transaction"
        )
    )]
    pub(crate) fn lost_before_commit(source: impl Into<BoxError>) -> Error {
        Error::with_source(
            Kind::ConnectionClosed,
            "connection lost before the statement's transaction committed; it did not take effect",
            source,
        )
    }

    /// The connection was found closed before anything was written.
    pub(crate) fn closed_before_send() -> Error {
        Error::new(
            Kind::ConnectionClosed,
            "connection closed before the statement was sent",
        )
    }

    pub(crate) fn refused(message: impl Into<String>) -> Error {
        Error::new(Kind::Refused, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Error {
        Error::new(Kind::Internal, message)
    }

    /// `query_one` / `query_opt` got `n` rows.
    pub(crate) fn row_count(call: &str, expected: &str, n: usize) -> Error {
        Error::new(
            Kind::RowCount,
            format!("{call} expected {expected}, the query returned {n}"),
        )
    }

    /// No connection (or queue slot) within `wait_timeout` of the call's
    /// start: nothing was sent.
    pub(crate) fn wait_timeout() -> Error {
        Error::new(
            Kind::Timeout,
            "no connection within wait_timeout of the call's start; the statement was not sent",
        )
    }

    /// The statement was sent and not answered within the deadline.
    pub(crate) fn statement_timeout(deadline: std::time::Duration) -> Error {
        Error::new(
            Kind::StatementTimeout,
            format!(
                "no answer within the statement deadline ({} ms); the statement may or may not \
                 have committed, and its connection was closed",
                deadline.as_millis()
            ),
        )
    }

    /// A row of a failed multi-row statement that is not sent again: the
    /// session's statement time `limit` had passed since the row was first
    /// sent. Nothing of it committed.
    pub(crate) fn not_rerun_after_limit(limit: std::time::Duration) -> Error {
        Error::new(
            Kind::Timeout,
            format!(
                "not sent again: the multi-row statement holding this row failed, and the \
                 session's statement time limit ({} ms) had passed since the row was first \
                 sent; nothing of it was committed",
                limit.as_millis()
            ),
        )
    }

    /// A row of a flush that could not go on after its connection timed out
    /// on an earlier statement of the same flush: nothing of it was sent.
    pub(crate) fn not_sent_after_timeout() -> Error {
        Error::new(
            Kind::ConnectionClosed,
            "not sent: an earlier statement of the same flush timed out and its connection was \
             closed",
        )
    }

    /// The caller's row was handed to a flush whose task died before it could
    /// answer (the runtime shut down). Whether it ran is not known.
    pub(crate) fn lost() -> Error {
        Error::new(
            Kind::OutcomeUnknown,
            "the flush carrying this row ended without a reply (runtime shut down?)",
        )
    }

    /// The SQLSTATE of a database error (`"23505"` for a unique violation),
    /// for either backend. `None` when the error did not come from the server.
    pub fn code(&self) -> Option<&str> {
        self.server().map(|class| class.code.as_str())
    }

    kind_predicates! {
        /// The database rejected this caller's statement or row (constraint
        /// violation, bad value, syntax error...). Nothing of this row committed.
        is_db => Db;
        /// The connection was lost after the statement holding this row was sent
        /// and before the server answered, or the answer did not come within
        /// the statement deadline (then [`is_timeout`](Error::is_timeout) is
        /// true too): the row **may or may not** have been committed.
        /// batchpool never retries such a row by itself.
        is_outcome_unknown => OutcomeUnknown | StatementTimeout;
        /// The pool was closed, or the connection was closed before this row was
        /// sent (the row certainly did not run).
        is_closed => PoolClosed | ConnectionClosed;
        /// The pool has been closed with `close()`; no new work is accepted.
        is_pool_closed => PoolClosed;
        /// A configured time limit expired in the pool: no connection or queue
        /// slot within `wait_timeout` (nothing was sent), a connection not
        /// opened or checked within `create_timeout` / `recycle_timeout`, a
        /// row of a failed multi-row statement not sent again because the
        /// session's statement time limit had passed since it was first sent
        /// (nothing of it committed), or the statement deadline
        /// (`statement_timeout` plus a grace period) passed with the
        /// statement sent (then
        /// [`is_outcome_unknown`](Error::is_outcome_unknown) is true too).
        /// For the server's own statement timeout see
        /// [`is_statement_timeout`](Error::is_statement_timeout).
        is_timeout => Timeout | StatementTimeout;
        /// The batch queue was full and the pool is configured to fail fast
        /// instead of waiting.
        is_overloaded => Overloaded;
        /// Wrong number or types of bind parameters for this statement; detected
        /// before anything was sent.
        is_params => Params;
        /// batchpool refused to run this statement where it was given, before
        /// sending anything: transaction control (`BEGIN`, `COMMIT`,
        /// `SET autocommit`...) through the pool's `execute`, or inside
        /// `atomic` / a [`Transaction`](crate::Transaction); on MySQL, a statement
        /// that commits implicitly (DDL) inside one.
        is_refused => Refused;
        /// `query_one` got no row or several, or `query_opt` several.
        is_row_count => RowCount;
        /// The row or statement exceeds a protocol or server limit (more than
        /// 65535 bind parameters, larger than `max_bytes` or the server's
        /// `max_allowed_packet`); detected before anything was sent.
        is_too_large => TooLarge;
        /// A new connection could not be opened (refused, authentication or
        /// TLS failed, a `post_create` hook failed); nothing of this call
        /// was sent.
        is_connect => Connect;
        /// The pool's configuration is invalid: a bad connection string or
        /// setting (from the builder or a `PoolConfig`).
        is_config => Config;
    }

    /// The statement ran out of time: the server cancelled it at
    /// `statement_timeout` (PostgreSQL `57014` "canceling statement due to
    /// statement timeout", MariaDB `1969`, MySQL `3024`; nothing of it
    /// committed), or its answer did not come within the pool's deadline
    /// (then [`is_outcome_unknown`](Error::is_outcome_unknown) is true).
    pub fn is_statement_timeout(&self) -> bool {
        match self.0.kind {
            Kind::StatementTimeout => true,
            Kind::Db => self.server().is_some_and(|class| class.statement_timeout),
            _ => false,
        }
    }

    /// Sending the same statement again is safe and may succeed: the row
    /// certainly did not commit and the failure was transient (connection
    /// lost before sending, timeout, overload, server shutting down or
    /// terminating the session, deadlock, serialization failure, too many
    /// connections). Never true when the outcome is unknown.
    pub fn is_retryable(&self) -> bool {
        match self.0.kind {
            Kind::ConnectionClosed | Kind::Timeout | Kind::Overloaded | Kind::Connect => true,
            Kind::Db => self.server().is_some_and(|class| class.retryable),
            _ => false,
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.0.kind)
            .field("message", &self.0.message);
        if let Some(source) = &self.0.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)?;
        // A server error's message is already the server's own text.
        if let (Some(source), false) = (&self.0.source, self.0.kind == Kind::Db) {
            // The whole chain: tokio-postgres shows only its own layer
            // ("error performing TLS handshake"), the reason is below it
            // ("invalid peer certificate: UnknownIssuer"). A layer that
            // already shows the next one's text is not repeated.
            let mut shown = source.to_string();
            write!(f, ": {shown}")?;
            let mut next = source.source();
            while let Some(cause) = next {
                let text = cause.to_string();
                if !shown.contains(&text) {
                    write!(f, ": {text}")?;
                }
                shown = text;
                next = cause.source();
            }
        }
        Ok(())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

impl<E: fmt::Debug> From<deadpool::managed::PoolError<E>> for Error
where
    E: Into<BoxError>,
{
    fn from(e: deadpool::managed::PoolError<E>) -> Error {
        use deadpool::managed::PoolError;
        match e {
            PoolError::Timeout(t) => Error::new(
                Kind::Timeout,
                format!("timed out waiting for a pooled connection ({t:?})"),
            ),
            PoolError::Backend(e) => {
                Error::with_source(Kind::Connect, "could not open a database connection", e)
            }
            PoolError::Closed => Error::pool_closed(),
            PoolError::NoRuntimeSpecified => {
                Error::new(Kind::Config, "pool timeouts need a runtime")
            }
            PoolError::PostCreateHook(e) => {
                Error::new(Kind::Connect, format!("post-create hook failed: {e:?}"))
            }
        }
    }
}

/// The error of an all-or-nothing statement group (`Pool::atomic`, for
/// either backend): which statement of the group failed, and why. Nothing of
/// the group committed unless [`is_outcome_unknown`](Error::is_outcome_unknown)
/// is true for [`error`](AtomicError::error).
#[derive(Debug, Clone)]
pub struct AtomicError {
    index: Option<usize>,
    error: Error,
}

impl AtomicError {
    pub(crate) fn at(index: usize, error: Error) -> AtomicError {
        AtomicError {
            index: Some(index),
            error,
        }
    }

    pub(crate) fn group(error: Error) -> AtomicError {
        AtomicError { index: None, error }
    }

    /// Position (from 0) of the statement that failed, in the order given.
    /// `None` when the failure belongs to the group as a whole: no connection,
    /// a closed pool, the connection lost, or `COMMIT` itself failing (a
    /// deferred constraint, a serialization failure).
    ///
    /// After a statement fails, the later ones are not run (PostgreSQL
    /// rejects them with `25P02`); the index is that of the first failure.
    pub fn index(&self) -> Option<usize> {
        self.index
    }

    /// Why it failed: for a database error, [`Error::code`] is its SQLSTATE.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The SQLSTATE of the failure, if the server reported one
    /// (shorthand for `self.error().code()`).
    pub fn code(&self) -> Option<&str> {
        self.error.code()
    }

    /// Takes the error, dropping the index.
    pub fn into_error(self) -> Error {
        self.error
    }
}

impl fmt::Display for AtomicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(
                f,
                "statement {i} of the atomic group failed: {}",
                self.error
            ),
            None => write!(f, "atomic group failed: {}", self.error),
        }
    }
}

impl StdError for AtomicError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.error)
    }
}

impl From<AtomicError> for Error {
    fn from(e: AtomicError) -> Error {
        e.error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_follow_kind() {
        let e = Error::overloaded(8);
        assert!(e.is_overloaded() && e.is_retryable() && !e.is_outcome_unknown());
        assert!(e.to_string().contains("8 rows"));
        let e = Error::lost();
        assert!(e.is_outcome_unknown() && !e.is_retryable() && !e.is_closed());
        let e = Error::pool_closed();
        assert!(e.is_closed() && e.is_pool_closed() && !e.is_retryable());
        let e = Error::params("expected 2 parameters, got 1");
        assert!(e.is_params() && e.code().is_none() && !e.is_db());
        let e = Error::too_large("row of 70000 parameters");
        assert!(e.is_too_large());
    }

    #[test]
    fn source_chain_is_kept() {
        let io = std::io::Error::other("boom");
        let e = Error::with_source(Kind::Connect, "could not connect", io);
        assert_eq!(e.to_string(), "could not connect: boom");
        assert!(StdError::source(&e).is_some());
        assert!(e.is_retryable());
        // Every layer of the chain is shown, none twice.
        #[derive(Debug)]
        struct Layer(&'static str, Option<std::io::Error>);
        impl fmt::Display for Layer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl StdError for Layer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                self.1.as_ref().map(|e| e as &(dyn StdError + 'static))
            }
        }
        let layered = Layer(
            "handshake failed",
            Some(std::io::Error::other("bad certificate")),
        );
        let e = Error::with_source(Kind::Connect, "could not connect", layered);
        assert_eq!(
            e.to_string(),
            "could not connect: handshake failed: bad certificate"
        );
        let repeats = Layer("io: boom", Some(std::io::Error::other("boom")));
        let e = Error::with_source(Kind::Connect, "could not connect", repeats);
        assert_eq!(e.to_string(), "could not connect: io: boom");
    }
}
