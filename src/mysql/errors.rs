//! How mysql_async errors map to batchpool's [`Error`] kinds, and which
//! server errors may belong to one row of a multi-row statement.

use mysql_async::DriverError;

use crate::engine::ChunkError;
use crate::error::{Error, Kind};

/// Whether a param-related driver error (raised before anything is sent).
fn params_error(e: &mysql_async::Error) -> bool {
    matches!(
        e,
        mysql_async::Error::Driver(
            DriverError::Params(_)
                | DriverError::MixedParams
                | DriverError::StmtParamsMismatch { .. }
                | DriverError::StmtParamsNumberExceedsLimit { .. }
        )
    )
}

/// Maps a mysql_async error from running a statement that was sent.
pub(crate) fn sent_error(e: mysql_async::Error) -> Error {
    map(e, true)
}

/// Maps a mysql_async error from a step that cannot have written anything
/// (prepare, or a connection already closed before sending).
pub(crate) fn unsent_error(e: mysql_async::Error) -> Error {
    map(e, false)
}

fn map(e: mysql_async::Error, after_send: bool) -> Error {
    match e {
        mysql_async::Error::Server(_) => Error::db(e),
        e if params_error(&e) => Error::with_source(Kind::Params, "bad parameters", e),
        e => Error::connection_lost(after_send, e),
    }
}

/// Server errors that can depend on one row's values: the engine re-runs
/// smaller groups to find the row. Nothing of the failed statement
/// committed (coalescing is limited to transactional tables).
pub(crate) fn row_specific(e: &mysql_async::ServerError) -> bool {
    // SQLSTATE 22 data exception, 23 integrity constraint.
    if matches!(e.state.get(..2), Some("22" | "23")) {
        return true;
    }
    matches!(
        e.code,
        1048 // column cannot be null
            | 1062 // duplicate entry
            | 1205 // lock wait timeout
            | 1213 // deadlock
            | 1216 | 1217 | 1451 | 1452 // foreign keys
            | 1264 // out of range
            | 1292 // truncated incorrect value
            | 1364 // field has no default
            | 1365 // division by zero
            | 1366 // incorrect value for column
            | 1406 // data too long
            | 1526 // no partition for value
            | 1644 // SIGNAL from a trigger
            | 1690 // value out of range in an expression
            | 1748 // row does not match the given partition set
            | 3819 // check constraint (MySQL)
            | 4025 // check constraint (MariaDB)
    )
}

pub(crate) fn chunk_error(e: mysql_async::Error) -> ChunkError {
    let row = matches!(&e, mysql_async::Error::Server(se) if row_specific(se));
    let err = sent_error(e);
    if row {
        ChunkError::Row(err)
    } else {
        ChunkError::Statement(err)
    }
}
