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
/// ending the session), 58 system error, XX internal error. And the
/// statement cancelled for a limit: 57014 (`statement_timeout`, or a cancel
/// request: an operator's `pg_cancel_backend`) and 55P03 when the server
/// says it was `lock_timeout` (not `NOWAIT`, which one row's locking read
/// raises at once). The statement failed as a whole for a limit, and every
/// row of it had run under that limit for the statement's whole time: run
/// again, its rows would run past the limit the user or the server set.
/// Deadlocks (40P01) and serialization failures (40001) stay isolated: the
/// rows of several callers in one statement can cause them where the
/// callers' own statements would not conflict. Not on the list either, so
/// isolated: class 53 (out of memory, disk full: smaller statements may
/// pass).
pub(crate) fn statement_level(code: &str, message: &str) -> bool {
    code != SqlState::INSUFFICIENT_PRIVILEGE.code()
        && (code.starts_with("57P")
            || code == SqlState::QUERY_CANCELED.code()
            || (code == SqlState::LOCK_NOT_AVAILABLE.code() && message.contains("lock timeout"))
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
            statement_level: statement_level(code, db.message()),
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

/// The row of a failed multi-row statement that the server's error
/// describes, found by matching the error's text against the rows' values:
/// the key of a unique (23505) or exclusion (23P01) violation or of a
/// missing foreign key (23503), the column of a not-null violation (23502),
/// the failing row of a check violation (23514). Only a lead for the
/// engine, which runs that row on its own: a wrong one costs a statement,
/// never an outcome. `None` when nothing matches (or a value's text form
/// cannot be told from its binary encoding).
///
/// Rows sharing the key of a unique or exclusion violation: without the key
/// in the table the second of them is the one that failed (the first was
/// written before it), so the second is named; with it in the table, the
/// first fails too, and is named by the next failure.
pub(crate) fn matched_row(
    db: &tokio_postgres::error::DbError,
    shape: &crate::classify::InsertShape,
    types: &[tokio_postgres::types::Type],
    rows: &[super::encode::PgRow],
) -> Option<usize> {
    let columns = shape.columns.as_ref()?;
    // The parameter bound bare to a column.
    let param_of = |name: &str| -> Option<usize> {
        let at = columns.iter().position(|c| c == name)?;
        (*shape.tuple_params.get(at)?).filter(|&k| k < types.len())
    };
    let text = |row: &super::encode::PgRow, k: usize| text_of(&types[k], row.param(k));
    match db.code().code() {
        code @ ("23505" | "23503" | "23P01") => {
            let detail = db.detail()?;
            let (cols, values) = key_of(detail, code)?;
            let params: Vec<usize> = cols.iter().map(|c| param_of(c)).collect::<Option<_>>()?;
            let mut hits = rows.iter().enumerate().filter_map(|(i, row)| {
                let mut shown = Vec::with_capacity(params.len());
                for &k in &params {
                    shown.push(text(row, k)??);
                }
                (shown.join(", ") == values).then_some(i)
            });
            let first = hits.next()?;
            if code == "23503" {
                Some(first)
            } else {
                Some(hits.next().unwrap_or(first))
            }
        }
        "23502" => {
            let k = param_of(db.column()?)?;
            rows.iter().position(|row| row.param(k).is_none())
        }
        "23514" => {
            // `Failing row contains (a, b, ...).`: every value of the table's
            // row; a row matches when each of its bound values is among them.
            let detail = db.detail()?;
            let inner = detail
                .strip_prefix("Failing row contains (")?
                .strip_suffix(").")?;
            let shown: Vec<&str> = inner.split(", ").collect();
            let params: Vec<usize> = shape.tuple_params.iter().flatten().copied().collect();
            rows.iter().position(|row| {
                params.iter().all(|&k| {
                    k < types.len()
                        && match text(row, k) {
                            Some(Some(t)) => shown.contains(&t.as_str()),
                            Some(None) => shown.contains(&"null"),
                            None => false,
                        }
                })
            })
        }
        _ => None,
    }
}

/// The columns and the values' text of a key in an error detail: `Key (a,
/// b)=(1, x) already exists.` (23505), `Key (a)=(1) is not present in table
/// "t".` (23503), `Key (a)=(1) conflicts with existing key (a)=(2).`
/// (23P01). Column names are unquoted.
pub(super) fn key_of<'a>(detail: &'a str, code: &str) -> Option<(Vec<String>, &'a str)> {
    let rest = detail.strip_prefix("Key (")?;
    let eq = rest.find(")=(")?;
    let cols = &rest[..eq];
    let rest = &rest[eq + 3..];
    let values = match code {
        "23505" => rest.strip_suffix(") already exists.")?,
        "23503" => &rest[..rest.rfind(") is not present in table ")?],
        _ => &rest[..rest.find(") conflicts with existing key (")?],
    };
    let cols = cols.split(", ").map(unquote).collect::<Option<_>>()?;
    Some((cols, values))
}

/// A column name as PostgreSQL shows it: bare, or double-quoted with `""`
/// for a quote.
fn unquote(name: &str) -> Option<String> {
    match name.strip_prefix('"') {
        Some(q) => Some(q.strip_suffix('"')?.replace("\"\"", "\"")),
        None => Some(name.to_owned()),
    }
}

/// The text form the server shows for a binary-encoded value of `ty`:
/// `Some(None)` for NULL, `None` when it cannot be told here.
pub(super) fn text_of(
    ty: &tokio_postgres::types::Type,
    raw: Option<&[u8]>,
) -> Option<Option<String>> {
    use tokio_postgres::types::Type;
    let Some(b) = raw else {
        return Some(None);
    };
    let s = match *ty {
        Type::INT2 => i16::from_be_bytes(b.try_into().ok()?).to_string(),
        Type::INT4 => i32::from_be_bytes(b.try_into().ok()?).to_string(),
        Type::INT8 => i64::from_be_bytes(b.try_into().ok()?).to_string(),
        Type::OID => u32::from_be_bytes(b.try_into().ok()?).to_string(),
        Type::BOOL => match b {
            [0] => "f".to_owned(),
            [_] => "t".to_owned(),
            _ => return None,
        },
        Type::TEXT | Type::VARCHAR | Type::NAME => std::str::from_utf8(b).ok()?.to_owned(),
        Type::UUID => {
            let b: [u8; 16] = b.try_into().ok()?;
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!(
                "{}-{}-{}-{}-{}",
                &hex[..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..]
            )
        }
        _ => return None,
    };
    Some(Some(s))
}

#[cfg(test)]
mod tests {
    use super::{key_of, statement_level, text_of};
    use tokio_postgres::types::Type;

    #[test]
    fn limits_end_the_statement_rows_errors_and_conflicts_do_not() {
        for (code, message) in [
            ("57014", "canceling statement due to statement timeout"),
            ("57014", "canceling statement due to user request"),
            ("55P03", "canceling statement due to lock timeout"),
            (
                "57P01",
                "terminating connection due to administrator command",
            ),
            ("42P01", "relation \"t\" does not exist"),
        ] {
            assert!(statement_level(code, message), "{code} {message}");
        }
        for (code, message) in [
            ("55P03", "could not obtain lock on row in relation \"t\""),
            ("40P01", "deadlock detected"),
            (
                "40001",
                "could not serialize access due to concurrent update",
            ),
            (
                "23505",
                "duplicate key value violates unique constraint \"t_pkey\"",
            ),
            (
                "42501",
                "new row violates row-level security policy for table \"t\"",
            ),
            ("53100", "could not extend file"),
        ] {
            assert!(!statement_level(code, message), "{code} {message}");
        }
    }

    #[test]
    fn keys_in_error_details() {
        assert_eq!(
            key_of("Key (a, \"B c\")=(1, x, y) already exists.", "23505"),
            Some((vec!["a".to_owned(), "B c".to_owned()], "1, x, y"))
        );
        assert_eq!(
            key_of("Key (p)=(5) is not present in table \"parent\".", "23503"),
            Some((vec!["p".to_owned()], "5"))
        );
        assert_eq!(
            key_of(
                "Key (r)=([1,3)) conflicts with existing key (r)=([2,4)).",
                "23P01"
            ),
            Some((vec!["r".to_owned()], "[1,3)"))
        );
        assert_eq!(key_of("Failing row contains (1).", "23505"), None);
    }

    #[test]
    fn text_of_binary_values() {
        assert_eq!(
            text_of(&Type::INT4, Some(&[0, 0, 1, 0])),
            Some(Some("256".into()))
        );
        assert_eq!(
            text_of(&Type::INT8, Some(&(-3i64).to_be_bytes())),
            Some(Some("-3".into()))
        );
        assert_eq!(
            text_of(&Type::TEXT, Some(b"a, b")),
            Some(Some("a, b".into()))
        );
        assert_eq!(text_of(&Type::BOOL, Some(&[1])), Some(Some("t".into())));
        assert_eq!(text_of(&Type::INT4, None), Some(None));
        assert_eq!(text_of(&Type::NUMERIC, Some(&[0, 0])), None);
    }
}
