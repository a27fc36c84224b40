//! How tokio-postgres errors map to batchpool's [`Error`] kinds.

use crate::error::{Error, Kind};

/// Maps a tokio-postgres error from running a statement that was sent.
pub(crate) fn sent_error(e: tokio_postgres::Error) -> Error {
    if e.as_db_error().is_some() {
        Error::with_source(Kind::Db, "database error", e)
    } else {
        Error::with_source(
            Kind::OutcomeUnknown,
            "connection lost while the statement was in flight; it may or may not have committed",
            e,
        )
    }
}

/// Maps a tokio-postgres error from a step that cannot have written anything
/// (prepare, or a connection already closed before sending).
pub(crate) fn unsent_error(e: tokio_postgres::Error) -> Error {
    if e.as_db_error().is_some() {
        Error::with_source(Kind::Db, "database error", e)
    } else {
        Error::with_source(
            Kind::ConnectionClosed,
            "connection lost before the statement was sent",
            e,
        )
    }
}

/// The connection was found closed before anything was written.
pub(crate) fn closed_before_sending() -> Error {
    Error::new(
        Kind::ConnectionClosed,
        "connection closed before the statement was sent",
    )
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
