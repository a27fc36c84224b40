//! How tokio-postgres errors map to batchpool's [`Error`] kinds.

use crate::error::Error;

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

/// SQLSTATE classes whose errors can depend on one row's values.
pub(crate) fn row_specific(code: &str) -> bool {
    // 21 cardinality (ON CONFLICT DO UPDATE hitting a row twice), 22 data
    // exception, 23 integrity constraint, 27 triggered data change, 40
    // rollback (deadlock/serialization: nothing committed, retry smaller),
    // 44 WITH CHECK OPTION, P0 PL/pgSQL RAISE from a trigger.
    matches!(
        code.get(..2),
        Some("21" | "22" | "23" | "27" | "40" | "44" | "P0")
    )
}
