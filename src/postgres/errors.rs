//! How tokio-postgres errors map to batchpool's [`Error`] kinds.

use tokio_postgres::error::SqlState;

use crate::backend::transient_sqlstate;
use crate::error::{Error, ServerClass, ServerError};

/// Maps a tokio-postgres error from running a statement that was sent.
pub(crate) fn sent_error(e: tokio_postgres::Error) -> Error {
    map(e, true)
}

/// Maps a tokio-postgres error from a step that cannot have written anything
/// (prepare, or a connection already closed before sending).
pub(crate) fn unsent_error(e: tokio_postgres::Error) -> Error {
    map(e, false)
}

fn map(e: tokio_postgres::Error, after_send: bool) -> Error {
    if e.as_db_error().is_some() {
        Error::db(e)
    } else {
        Error::connection_lost(after_send, e)
    }
}

/// Whether a server error is provably about the statement as a whole, not
/// about one row's values: then every row of a failed multi-row statement
/// gets it. Every other error is treated as possibly a row's own, and the
/// rows are re-run in smaller groups (a failed statement committed nothing).
///
/// The classes: 08 connection exception, 0A feature not supported, 25
/// invalid transaction state, 26 invalid statement name, 28 invalid
/// authorization, 3D / 3F invalid database / schema, 42 syntax error or
/// access rule violation (undefined table or column, no matching ON
/// CONFLICT constraint...) except 42501, which row-level security also
/// raises for one row's values, 57P01-57P05 (the server shutting down or
/// ending the session), 58 system error, XX internal error. Not on the
/// list, so isolated: 57014 (statement timeout or cancel: smaller statements
/// may finish in time, and a row waiting for a lock is one row) and class 53
/// (out of memory, disk full: smaller statements may pass).
pub(crate) fn statement_level(code: &str) -> bool {
    code != SqlState::INSUFFICIENT_PRIVILEGE.code()
        && (code.starts_with("57P")
            || matches!(
                code.get(..2),
                Some("08" | "0A" | "25" | "26" | "28" | "3D" | "3F" | "42" | "58" | "XX")
            ))
}

/// Whether the server refused a prepared statement that no longer fits its
/// table, before running it: the table's columns changed under a cached
/// `RETURNING *` ("cached plan must not change result type"), or the
/// statement is gone ("prepared statement ... does not exist").
pub(crate) fn stale_db(db: &tokio_postgres::error::DbError) -> bool {
    let code = db.code();
    code == &SqlState::INVALID_SQL_STATEMENT_NAME
        || (code == &SqlState::FEATURE_NOT_SUPPORTED
            && db
                .message()
                .contains("cached plan must not change result type"))
}

impl ServerError for tokio_postgres::Error {
    fn classify(&self) -> Option<ServerClass> {
        let db = self.as_db_error()?;
        let code = db.code().code();
        let mut message = format!("{} {code}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            message.push_str(&format!(" (DETAIL: {detail})"));
        }
        if let Some(hint) = db.hint() {
            message.push_str(&format!(" (HINT: {hint})"));
        }
        Some(ServerClass {
            code: code.to_owned(),
            message,
            retryable: transient_sqlstate(code),
            // 57014 is also a cancel request's code; only the time limit's
            // message says "statement timeout".
            statement_timeout: db.code() == &SqlState::QUERY_CANCELED
                && db.message().contains("statement timeout"),
            statement_level: statement_level(code),
        })
    }
}

impl Error {
    /// The PostgreSQL server error behind this error, if any.
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn as_db_error(&self) -> Option<&tokio_postgres::error::DbError> {
        self.driver_source()?
            .downcast_ref::<tokio_postgres::Error>()?
            .as_db_error()
    }
}
