//! What the server says about a coalesced statement's target table, read
//! from `information_schema` when a statement text is first seen.

use mysql_async::Row;
use mysql_async::prelude::Queryable;

use super::Client;
use super::errors::unsent_error;
use crate::error::{Error, ServerError};

/// Splits a table name as written (`t`, `` `db`.`t` ``) into schema and
/// table, unquoted.
fn split_table(text: &str) -> Option<(Option<String>, String)> {
    let mut parts = Vec::new();
    let mut chars = text.trim().chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut part = String::new();
        match chars.peek() {
            Some(&q @ ('`' | '"')) => {
                chars.next();
                loop {
                    match chars.next()? {
                        c if c == q => {
                            if chars.next_if_eq(&q).is_some() {
                                part.push(q);
                            } else {
                                break;
                            }
                        }
                        c => part.push(c),
                    }
                }
            }
            Some(_) => {
                while let Some(c) = chars.next_if(|c| *c != '.' && !c.is_whitespace()) {
                    part.push(c);
                }
            }
            None => return None,
        }
        if part.is_empty() {
            return None;
        }
        parts.push(part);
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.next() {
            None => break,
            Some('.') => continue,
            Some(_) => return None,
        }
    }
    match parts.len() {
        1 => parts.pop().map(|t| (None, t)),
        2 => {
            let table = parts.pop()?;
            Some((parts.pop(), table))
        }
        _ => None,
    }
}

/// The schema and table a table name as written (`t`, `` `db`.`t` ``)
/// names: its own schema, else the connection's current database. `None`
/// when the name does not parse or there is no current database.
pub(super) async fn locate(
    conn: &mut Client,
    table: &str,
) -> Result<Option<(String, String)>, mysql_async::Error> {
    let Some((schema, name)) = split_table(table) else {
        return Ok(None);
    };
    let schema = match schema {
        Some(schema) => Some(schema),
        None => conn
            .query_first::<Option<String>, _>("SELECT DATABASE()")
            .await?
            .flatten(),
    };
    Ok(schema.map(|schema| (schema, name)))
}

/// The parameters of a query that filters three catalog tables, each by
/// literal schema and table.
fn three_filters(schema: &str, name: &str) -> (String, String, String, String, String, String) {
    (
        schema.to_owned(),
        name.to_owned(),
        schema.to_owned(),
        name.to_owned(),
        schema.to_owned(),
        name.to_owned(),
    )
}

/// What the server says about the target table.
pub(crate) struct TableFacts {
    /// Storage engine (`InnoDB`...).
    pub(crate) engine: String,
    /// The engine supports transactions.
    pub(crate) transactional: bool,
    /// The auto-increment column, if any.
    pub(crate) auto_increment: Option<String>,
    /// Triggers on the table, for any event (`u64::MAX` when unknown).
    pub(crate) triggers: u64,
}

/// Stored functions (any schema) among `names`, which a statement's VALUES
/// tuple calls: a stored function may write to a non-transactional table,
/// which a re-run of the rows after a failed multi-row statement would
/// repeat.
pub(crate) async fn stored_functions(
    conn: &mut Client,
    names: &[String],
) -> Result<Vec<String>, Error> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let found: Result<Vec<String>, _> = conn
        .query("SELECT DISTINCT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_TYPE = 'FUNCTION'")
        .await;
    match found {
        Ok(found) => Ok(found
            .into_iter()
            .filter(|f| names.iter().any(|n| n.eq_ignore_ascii_case(f)))
            .collect()),
        Err(e) => {
            conn.note_error(&e);
            Err(unsent_error(e))
        }
    }
}

/// Three scalar subqueries, each filtered by literal schema and table so
/// the server opens only that table's metadata (a filter it has to compute,
/// such as `DATABASE()`, makes it scan every schema).
const TABLE_FACTS: &str = "SELECT \
     (SELECT CONCAT(t.ENGINE, ' ', e.TRANSACTIONS) \
       FROM information_schema.TABLES t JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE \
       WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ? AND t.TABLE_TYPE = 'BASE TABLE'), \
     (SELECT c.COLUMN_NAME FROM information_schema.COLUMNS c \
       WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ? AND c.EXTRA LIKE '%auto_increment%' LIMIT 1), \
     (SELECT COUNT(*) FROM information_schema.TRIGGERS g \
       WHERE g.EVENT_OBJECT_SCHEMA = ? AND g.EVENT_OBJECT_TABLE = ?)";

/// Looks the table up in information_schema. `Ok(None)` when it is not
/// found exactly once (temporary table, view, ambiguous name, no access).
pub(crate) async fn table_facts(
    conn: &mut Client,
    table: &str,
) -> Result<Option<TableFacts>, Error> {
    let run = async {
        let Some((schema, name)) = locate(conn, table).await? else {
            return Ok(None);
        };
        conn.exec_first::<Row, _, _>(TABLE_FACTS, three_filters(&schema, &name))
            .await
    };
    let row = match run.await {
        Ok(Some(row)) => row,
        Ok(None) => return Ok(None),
        // No access, or several tables matched a case-insensitive name.
        // A session killed, a timeout or a deadlock says nothing of the
        // table: the learning fails (its caller's statement runs on its
        // own) and the next call asks again.
        Err(e @ mysql_async::Error::Server(_)) if !transient(&e) => return Ok(None),
        Err(e) => {
            conn.note_error(&e);
            return Err(unsent_error(e));
        }
    };
    let text = |i: usize| -> Option<String> {
        row.get_opt::<Option<String>, _>(i)
            .and_then(Result::ok)
            .flatten()
    };
    let Some(engine) = text(0) else {
        return Ok(None);
    };
    let (engine, transactions) = engine.split_once(' ').unwrap_or((engine.as_str(), ""));
    Ok(Some(TableFacts {
        engine: engine.to_owned(),
        transactional: transactions.eq_ignore_ascii_case("YES"),
        auto_increment: text(1),
        triggers: row
            .get_opt::<Option<u64>, _>(2)
            .and_then(Result::ok)
            .flatten()
            .unwrap_or(u64::MAX),
    }))
}

/// A fingerprint of what [`TABLE_FACTS`] and the server's prepare of a
/// text read about a table: its engine, type and creation time (a rebuild
/// changes it), its columns (name, type, nullability, default, extra,
/// collation, generation), its triggers (name, creation time, event,
/// body) and its indexes (name, columns, uniqueness, prefix), each set as a
/// count and a sum of CRC32s (no `GROUP_CONCAT`, which
/// `group_concat_max_len` would cut). Filtered by literal schema and table,
/// as `TABLE_FACTS` is.
const FINGERPRINT: &str = "SELECT CONCAT_WS('|', \
     (SELECT CONCAT_WS(',', t.ENGINE, t.TABLE_TYPE, t.CREATE_TIME, t.CREATE_OPTIONS) \
       FROM information_schema.TABLES t WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ?), \
     (SELECT CONCAT(COUNT(*), ':', COALESCE(SUM(CRC32(CONCAT_WS(',', c.ORDINAL_POSITION, \
         c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE, c.COLUMN_DEFAULT, c.EXTRA, \
         c.COLLATION_NAME, c.GENERATION_EXPRESSION))), 0)) \
       FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ?), \
     (SELECT CONCAT(COUNT(*), ':', COALESCE(SUM(CRC32(CONCAT_WS(',', g.TRIGGER_NAME, \
         g.CREATED, g.EVENT_MANIPULATION, g.ACTION_TIMING, g.ACTION_STATEMENT))), 0)) \
       FROM information_schema.TRIGGERS g \
       WHERE g.EVENT_OBJECT_SCHEMA = ? AND g.EVENT_OBJECT_TABLE = ?), \
     (SELECT CONCAT(COUNT(*), ':', COALESCE(SUM(CRC32(CONCAT_WS(',', s.INDEX_NAME, \
         s.SEQ_IN_INDEX, s.COLUMN_NAME, s.NON_UNIQUE, s.SUB_PART))), 0)) \
       FROM information_schema.STATISTICS s \
       WHERE s.TABLE_SCHEMA = ? AND s.TABLE_NAME = ?))";

/// The stored functions of any schema (what [`stored_functions`] reads),
/// as a count and a sum of CRC32s of their names and change times.
const FUNCTIONS_FINGERPRINT: &str = "SELECT CONCAT(COUNT(*), ':', \
     COALESCE(SUM(CRC32(CONCAT_WS(',', ROUTINE_SCHEMA, ROUTINE_NAME, CREATED, LAST_ALTERED))), 0)) \
     FROM information_schema.ROUTINES WHERE ROUTINE_TYPE = 'FUNCTION'";

/// The fingerprint of `table` (see [`FINGERPRINT`]), and of the stored
/// functions when the text calls functions (`calls`). `None` when the
/// catalog cannot be read.
pub(crate) async fn fingerprint(
    conn: &mut Client,
    table: &str,
    calls: bool,
) -> Result<Option<String>, Error> {
    let run = async {
        let Some((schema, name)) = locate(conn, table).await? else {
            return Ok(None);
        };
        let table: Option<Option<String>> = conn
            .exec_first(FINGERPRINT, {
                let (a, b, c, d, e, f) = three_filters(&schema, &name);
                (a, b, c, d, e, f, schema.clone(), name.clone())
            })
            .await?;
        let functions: Option<Option<String>> = if calls {
            conn.query_first(FUNCTIONS_FINGERPRINT).await?
        } else {
            None
        };
        Ok(table.flatten().map(|table| {
            format!(
                "{schema}|{table}|{}",
                functions.flatten().unwrap_or_default()
            )
        }))
    };
    match run.await {
        Ok(fingerprint) => Ok(fingerprint),
        Err(e @ mysql_async::Error::Server(_)) if !transient(&e) => Ok(None),
        Err(e) => {
            conn.note_error(&e);
            Err(unsent_error(e))
        }
    }
}

/// Whether the server's error `e` to a catalog read is transient (the
/// session killed, the server going down, a lock or statement timeout, a
/// deadlock, too many connections): no answer about the table, unlike an
/// error of the read itself (no access, a name that matched several tables).
fn transient(e: &mysql_async::Error) -> bool {
    e.classify()
        .is_some_and(|class| class.retryable || class.statement_timeout)
}

#[cfg(test)]
mod tests {
    use super::{split_table, transient};
    use crate::mysql::errors::codes;

    fn server(code: u16, state: &str) -> mysql_async::Error {
        mysql_async::Error::Server(mysql_async::ServerError {
            code,
            message: format!("error {code}"),
            state: state.into(),
        })
    }

    #[test]
    fn only_errors_of_the_catalog_read_itself_stop_coalescing() {
        for (code, state) in [
            (codes::CONNECTION_KILLED, "70100"),
            (codes::SERVER_SHUTDOWN, "08S01"),
            (codes::LOCK_WAIT_TIMEOUT, "HY000"),
            (codes::LOCK_DEADLOCK, "40001"),
            (codes::STATEMENT_TIMEOUT, "70100"),
            (codes::QUERY_TIMEOUT, "HY000"),
            (codes::TOO_MANY_CONNECTIONS, "08004"),
            (codes::NODE_NOT_READY, "08S01"),
        ] {
            assert!(transient(&server(code, state)), "{code}");
        }
        // No access to the table's metadata; a name that matched several
        // tables (a subquery of more than one row).
        for (code, state) in [(1142, "42000"), (1044, "42000"), (1242, "21000")] {
            assert!(!transient(&server(code, state)), "{code}");
        }
    }

    #[test]
    fn table_names_split() {
        assert_eq!(split_table("t"), Some((None, "t".into())));
        assert_eq!(
            split_table("`db`.`T`"),
            Some((Some("db".into()), "T".into()))
        );
        assert_eq!(split_table("db . t"), Some((Some("db".into()), "t".into())));
        assert_eq!(split_table("`a``b`"), Some((None, "a`b".into())));
        assert_eq!(split_table("`a.b`"), Some((None, "a.b".into())));
        assert_eq!(split_table("a.b.c"), None);
        assert_eq!(split_table("``"), None);
        assert_eq!(split_table("`open"), None);
        assert_eq!(split_table(""), None);
    }
}
