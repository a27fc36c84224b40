//! How mysql_async errors map to batchpool's [`Error`] kinds, and which
//! server errors are about a multi-row statement as a whole.

use mysql_async::{DriverError, Value};

use crate::backend::batch::ChunkError;
use crate::backend::transient_sqlstate;
use crate::error::{Error, Kind, ServerClass, ServerError};

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
        // A Galera node answers 1047 to a statement it refuses because it
        // is not ready, and also to one whose commit was under way when
        // the node left the primary component: the cluster may have
        // certified and committed that one (rows refused so were on every
        // node once the node rejoined). The two answers are the same.
        mysql_async::Error::Server(ref se) if after_send && se.code == codes::NODE_NOT_READY => {
            Error::with_source(
                Kind::OutcomeUnknown,
                "the Galera node stopped being ready for writes (1047) with the statement \
                 sent; the cluster may or may not have committed it",
                e,
            )
        }
        // 1180, an error during COMMIT: a Galera node answers it when it
        // left the primary component with the statement's commit under
        // way, whose write set the rest of the cluster may have committed
        // (a row so answered was found on the other nodes). Elsewhere too
        // a commit that failed part way may have happened.
        mysql_async::Error::Server(ref se)
            if after_send && se.code == codes::ERROR_DURING_COMMIT =>
        {
            Error::with_source(
                Kind::OutcomeUnknown,
                "the server failed during COMMIT (1180) with the statement sent; it may or may \
                 not have committed (on a Galera node, the cluster may have committed it)",
                e,
            )
        }
        mysql_async::Error::Server(_) => Error::db(e),
        e if params_error(&e) => Error::with_source(Kind::Params, "bad parameters", e),
        e => Error::connection_lost(after_send, e),
    }
}

/// Whether a server error is provably about the statement as a whole, not
/// about one row's values: then every row of a failed multi-row statement
/// gets it. Every other error (including the many that MySQL reports with
/// the generic SQLSTATE `HY000`) is treated as possibly a row's own, and the
/// rows are re-run in smaller groups: coalescing is limited to transactional
/// tables without triggers, so a failed statement left nothing behind.
///
/// A statement ended for a limit is one of them: `max_statement_time`
/// (1969), MySQL's `max_execution_time` (3024), a lock wait past
/// `innodb_lock_wait_timeout` or `lock_wait_timeout` (1205, which in
/// autocommit rolls the statement back), `KILL QUERY` (1317) or `KILL`
/// (1927). Every row of it ran under that limit for the statement's whole
/// time: run again, its rows would run past the limit the user or the
/// server set. Still isolated: deadlocks and Galera certification
/// conflicts (1213: the rows of several callers in one statement can
/// cause them where the callers' own statements would not conflict) and
/// resource errors (out of memory, table or disk full), which smaller
/// statements may pass.
fn statement_level(e: &mysql_async::ServerError) -> bool {
    use codes::*;
    matches!(
        e.code,
        1044 | 1045 | 1142 | 1143 | 1227 | 1370 // access denied
            | 1046 | 1049 | 1051 | 1054 | 1146 // no such database, table, column
            | 1064 // syntax
            | SERVER_SHUTDOWN | CONNECTION_KILLED
            | NODE_NOT_READY // a Galera node not ready for writes (outcome unknown)
            | ERROR_DURING_COMMIT // outcome unknown
            | QUERY_INTERRUPTED | STATEMENT_TIMEOUT | QUERY_TIMEOUT | LOCK_WAIT_TIMEOUT
            | 1290 | 1792 | 1836 // read-only server or transaction
    )
}

/// How the engine takes the error of a coalesced read: a stale prepared
/// statement is prepared again, an error of the server that may be one
/// caller's runs the callers again in smaller groups, anything else ends
/// them all.
pub(crate) fn read_error<O>(e: mysql_async::Error) -> ChunkError<O> {
    if stale(&e) {
        return ChunkError::Stale(sent_error(e));
    }
    let row = matches!(&e, mysql_async::Error::Server(se) if !statement_level(se));
    let err = sent_error(e);
    if row {
        ChunkError::Row(err)
    } else {
        ChunkError::Statement(err)
    }
}

/// Whether the server refused a prepared statement that no longer exists or
/// fits (1243 unknown statement handler, 1615 must be re-prepared), before
/// running it.
pub(crate) fn stale(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(se) if matches!(se.code, 1243 | 1615))
}

/// The row a server error names: MariaDB and MySQL end the message of an
/// error about one row's value with ` at row N` (1-based, the row's place
/// in the multi-row VALUES list or in the bulk command's array). `None`
/// when the message does not end so.
fn named_row(message: &str) -> Option<usize> {
    let (_, n) = message.rsplit_once(" at row ")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse::<usize>().ok()?.checked_sub(1)
}

/// How a failed statement's error reaches the engine: about the statement
/// as a whole, stale, or possibly one row's, with the row it names or
/// matches (see [`matched_row`]) where there is one. `rows` are the values
/// of the statement's rows.
pub(crate) fn chunk_error<O>(
    e: mysql_async::Error,
    shape: &crate::classify::InsertShape,
    rows: &[&[Value]],
) -> ChunkError<O> {
    if stale(&e) {
        return ChunkError::Stale(sent_error(e));
    }
    let row = match &e {
        mysql_async::Error::Server(se) if !statement_level(se) => {
            Some(named_row(&se.message).or_else(|| matched_row(se, shape, rows)))
        }
        _ => None,
    };
    let err = sent_error(e);
    match row {
        // A lead the engine checks: that row runs on its own, getting its
        // own statement's outcome.
        Some(Some(at)) => ChunkError::RowAt(at, err),
        Some(None) => ChunkError::Row(err),
        None => ChunkError::Statement(err),
    }
}

/// The row of a failed multi-row statement that the server's error
/// describes, found by matching its message against the rows' values: the
/// key value of a duplicate entry (1062, `Duplicate entry 'v' for key 'k'`,
/// a composite key's parts joined by `-`), the column of a NULL into a NOT
/// NULL column (1048, `Column 'c' cannot be null`). Only a lead for the
/// engine, which runs that row on its own. Rows sharing a duplicate key:
/// the second of them is named (the first was written before it, unless
/// the key was in the table, and then the first is named next).
fn matched_row(
    se: &mysql_async::ServerError,
    shape: &crate::classify::InsertShape,
    rows: &[&[Value]],
) -> Option<usize> {
    match se.code {
        1062 => {
            let rest = se.message.strip_prefix("Duplicate entry '")?;
            let key = &rest[..rest.rfind("' for key '")?];
            let mut hits = rows
                .iter()
                .enumerate()
                .filter(|(_, values)| key_in(key, values))
                .map(|(i, _)| i);
            let first = hits.next()?;
            Some(hits.next().unwrap_or(first))
        }
        1048 => {
            let rest = se.message.strip_prefix("Column '")?;
            let column = rest.strip_suffix("' cannot be null")?;
            let columns = shape.columns.as_ref()?;
            let at = columns
                .iter()
                .position(|c| c.eq_ignore_ascii_case(column))?;
            let k = (*shape.tuple_params.get(at)?)?;
            rows.iter()
                .position(|values| matches!(values.get(k), Some(Value::NULL)))
        }
        _ => None,
    }
}

/// Whether `key` (a duplicate entry as MariaDB shows it) is the text of one
/// of `values`, or of a run of them joined by `-`.
fn key_in(key: &str, values: &[Value]) -> bool {
    let texts: Vec<Option<String>> = values.iter().map(text_of).collect();
    (0..texts.len()).any(|from| {
        let mut joined = String::new();
        for (n, t) in texts[from..].iter().enumerate() {
            let Some(t) = t else {
                return false;
            };
            if n > 0 {
                joined.push('-');
            }
            joined.push_str(t);
            if joined == key {
                return true;
            }
            if joined.len() >= key.len() {
                return false;
            }
        }
        false
    })
}

/// The text MariaDB shows for a bound value, where it is plain.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::Bytes(b) => String::from_utf8(b.clone()).ok(),
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        _ => None,
    }
}

/// MySQL and MariaDB server error codes that batchpool tells apart.
pub(crate) mod codes {
    /// `ER_CON_COUNT_ERROR`: too many connections.
    pub(crate) const TOO_MANY_CONNECTIONS: u16 = 1040;
    /// `ER_UNKNOWN_COM_ERROR` as a Galera node answers while it is not ready
    /// for writes (not in the primary component): to a statement it refused,
    /// or to one whose commit the cluster may have completed without it.
    pub(crate) const NODE_NOT_READY: u16 = 1047;
    /// `ER_ERROR_DURING_COMMIT`: an error during COMMIT (a Galera node that
    /// left the primary component while committing).
    pub(crate) const ERROR_DURING_COMMIT: u16 = 1180;
    /// `ER_SERVER_SHUTDOWN`: the server is shutting down.
    pub(crate) const SERVER_SHUTDOWN: u16 = 1053;
    /// `ER_QUERY_INTERRUPTED`: the statement was interrupted (`KILL
    /// QUERY`).
    pub(crate) const QUERY_INTERRUPTED: u16 = 1317;
    /// `ER_LOCK_WAIT_TIMEOUT`: lock wait timeout exceeded.
    pub(crate) const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// `ER_LOCK_DEADLOCK`: deadlock found when trying to get a lock.
    pub(crate) const LOCK_DEADLOCK: u16 = 1213;
    /// `ER_CONNECTION_KILLED` (MariaDB): the connection was killed.
    pub(crate) const CONNECTION_KILLED: u16 = 1927;
    /// `ER_STATEMENT_TIMEOUT` (MariaDB): `max_statement_time` exceeded.
    pub(crate) const STATEMENT_TIMEOUT: u16 = 1969;
    /// `ER_QUERY_TIMEOUT` (MySQL): `max_execution_time` exceeded.
    pub(crate) const QUERY_TIMEOUT: u16 = 3024;
}

impl ServerError for mysql_async::Error {
    fn classify(&self) -> Option<ServerClass> {
        use codes::*;
        let mysql_async::Error::Server(e) = self else {
            return None;
        };
        Some(ServerClass {
            code: e.state.clone(),
            message: e.to_string(),
            retryable: transient_sqlstate(&e.state)
                || matches!(
                    e.code,
                    LOCK_WAIT_TIMEOUT
                        | LOCK_DEADLOCK
                        | CONNECTION_KILLED
                        | SERVER_SHUTDOWN
                        | TOO_MANY_CONNECTIONS
                        | NODE_NOT_READY
                ),
            statement_timeout: matches!(e.code, STATEMENT_TIMEOUT | QUERY_TIMEOUT),
            statement_level: statement_level(e),
        })
    }
}

impl Error {
    /// The MySQL/MariaDB server error behind this error, if any
    /// (`code` 1062 for a duplicate key).
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub fn as_mysql_error(&self) -> Option<&mysql_async::ServerError> {
        match self.driver_source()?.downcast_ref::<mysql_async::Error>()? {
            mysql_async::Error::Server(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{key_in, named_row, statement_level};
    use mysql_async::Value;

    #[test]
    fn an_error_during_commit_or_a_node_not_ready_is_an_unknown_outcome() {
        for code in [1180, 1047] {
            let e = mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: "Got error 6 during COMMIT".to_owned(),
                state: "HY000".to_owned(),
            });
            assert!(super::sent_error(e).is_outcome_unknown(), "{code}");
        }
    }

    #[test]
    fn limits_end_the_statement_rows_errors_and_conflicts_do_not() {
        let error = |code: u16| mysql_async::ServerError {
            code,
            message: String::new(),
            state: "HY000".to_owned(),
        };
        // max_statement_time, max_execution_time, lock wait timeout, KILL
        // QUERY, KILL.
        for code in [1969, 3024, 1205, 1317, 1927] {
            assert!(statement_level(&error(code)), "{code}");
        }
        // Deadlock or Galera conflict, duplicate key, NULL, too long,
        // SIGNAL.
        for code in [1213, 1062, 1048, 1406, 1644] {
            assert!(!statement_level(&error(code)), "{code}");
        }
    }

    #[test]
    fn duplicate_entries_match_values() {
        let row = [Value::Int(7), Value::Bytes(b"ab".to_vec()), Value::NULL];
        assert!(key_in("7", &row));
        assert!(key_in("ab", &row));
        assert!(key_in("7-ab", &row));
        assert!(!key_in("7-a", &row));
        assert!(!key_in("8", &row));
    }

    #[test]
    fn the_row_an_error_names() {
        assert_eq!(named_row("Data too long for column 'v' at row 2"), Some(1));
        assert_eq!(
            named_row("Incorrect integer value: 'x' for column `d`.`t`.`n` at row 17"),
            Some(16)
        );
        // Not at the end, or not a number: none.
        assert_eq!(
            named_row("Duplicate entry 'a at row 3' for key 'PRIMARY'"),
            None
        );
        assert_eq!(named_row("Column 'v' cannot be null"), None);
        assert_eq!(named_row("Out of range value at row "), None);
        assert_eq!(named_row("Out of range value at row 0"), None);
        assert_eq!(named_row("Out of range value at row 9x"), None);
    }
}
