//! Proving that a failed multi-row INSERT's duplicate key is one row's own.
//!
//! A duplicate-key error (1062, `Duplicate entry 'v' for key 'k'`) of a
//! multi-row INSERT or a bulk command names the key of the row it is about.
//! It is that row's own error, the one its single-row INSERT would have had
//! run alone at the instant the statement ran, when the key was in the
//! table before the statement: then the row's own INSERT meets the same
//! row, through the same index, with the same message. The key was in the
//! table already when no other row of the statement can have written it:
//!
//! - the index is unique and on whole integer columns (`TINYINT` to
//!   `BIGINT`, whose equality is their values') that the statement binds
//!   bare, one parameter each;
//! - the named row binds them integers, and no other row's key can equal
//!   its key: another row's value of another kind (a string or a float the
//!   server would convert) may equal it, and so may a 0 or NULL in an
//!   auto-increment column, which the server numbers;
//! - nothing runs between the rows: the statement is a plain INSERT (no
//!   `IGNORE`, `REPLACE` or `ON DUPLICATE KEY UPDATE`) into a base table
//!   with no INSERT trigger, and the session is strict (the pool sends
//!   multi-row statements only then), so a value out of a column's range
//!   fails its row instead of landing on another row's key.
//!
//! The rows' part is checked against the statement's rows at once, the
//! index's part once per index (a catalog read, kept with the shape; the
//! table's fingerprint covers its indexes, so a changed index has the
//! shape learned again). A row not proven this way is only a lead, and runs
//! on its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value};

use super::Client;
use super::row::MyRow;
use super::table::locate;
use crate::classify::{Conflict, InsertShape, Verb};
use crate::sync::lock;

/// A unique index's columns with the facts the proof needs, in the index's
/// order, each filtered by literal schema and table (see `TABLE_FACTS`):
/// the index name, whether it is unique, whole-column, the column's type
/// and `EXTRA`; then the table's INSERT triggers and its type.
const UNIQUE_INDEX: &str = "SELECT s.COLUMN_NAME, c.DATA_TYPE, c.EXTRA, s.NON_UNIQUE, s.SUB_PART, \
     (SELECT COUNT(*) FROM information_schema.TRIGGERS g \
       WHERE g.EVENT_OBJECT_SCHEMA = ? AND g.EVENT_OBJECT_TABLE = ? \
         AND g.EVENT_MANIPULATION = 'INSERT'), \
     (SELECT t.TABLE_TYPE FROM information_schema.TABLES t \
       WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ?) \
     FROM information_schema.STATISTICS s \
     JOIN information_schema.COLUMNS c \
       ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME \
      AND c.COLUMN_NAME = s.COLUMN_NAME \
     WHERE s.TABLE_SCHEMA = ? AND s.TABLE_NAME = ? AND s.INDEX_NAME = ? \
       AND c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ? \
     ORDER BY s.SEQ_IN_INDEX";

/// The integer types whose equality is their values'.
const INTEGERS: [&str; 5] = ["tinyint", "smallint", "mediumint", "int", "bigint"];

/// Most indexes remembered per shape (a table has few).
const MAX_INDEXES: usize = 64;

/// A unique index whose violations can be a row's own: its columns, in
/// order, each with whether the server numbers it (auto-increment).
#[derive(Debug)]
struct KeyColumns(Vec<(String, bool)>);

/// What is known of the unique indexes a shape's rows have violated, by
/// index name (lowercased): `None` for an index whose violations are never
/// proven.
#[derive(Debug, Default)]
pub(crate) struct OwnFailures {
    indexes: Mutex<HashMap<String, Option<Arc<KeyColumns>>>>,
}

impl OwnFailures {
    /// Whether the server's error `code` / `message` to the statement of
    /// `rows` (of `shape`) is provably row `at`'s own (see the module's
    /// text). Reads the catalog at most once per index; a catalog that
    /// cannot be read answers no.
    pub(crate) async fn proven(
        &self,
        conn: &mut Client,
        shape: &InsertShape,
        (code, message): (u16, &str),
        rows: &[MyRow],
        at: usize,
    ) -> bool {
        let Some((entry, index)) = duplicate(code, message, shape, rows, at) else {
            return false;
        };
        let key = index.to_ascii_lowercase();
        let known = lock(&self.indexes).get(&key).cloned();
        let columns = match known {
            Some(columns) => columns,
            None => {
                // Not remembered when the read fails: the next failure asks
                // again.
                let Some(columns) = read_index(conn, &shape.table, index).await else {
                    return false;
                };
                let mut indexes = lock(&self.indexes);
                if indexes.len() >= MAX_INDEXES {
                    indexes.clear();
                }
                indexes.insert(key, columns.clone());
                columns
            }
        };
        columns.is_some_and(|columns| rows_allow(&columns, shape, entry, rows, at))
    }
}

/// The entry and the index of a duplicate-key error of a plain multi-row
/// INSERT, when row `at` is one of its rows.
fn duplicate<'m>(
    code: u16,
    message: &'m str,
    shape: &InsertShape,
    rows: &[MyRow],
    at: usize,
) -> Option<(&'m str, &'m str)> {
    if code != 1062
        || shape.verb != Verb::Insert
        || !matches!(shape.conflict, Conflict::None)
        || rows.len() < 2
        || at >= rows.len()
    {
        return None;
    }
    let rest = message.strip_prefix("Duplicate entry '")?;
    let split = rest.rfind("' for key '")?;
    let index = rest[split + "' for key '".len()..].strip_suffix('\'')?;
    Some((&rest[..split], index))
}

/// Reads index `index` of the table named `table`: `Some(None)` when its
/// violations are never proven, `None` when the catalog cannot be read.
async fn read_index(
    conn: &mut Client,
    table: &str,
    index: &str,
) -> Option<Option<Arc<KeyColumns>>> {
    let (schema, name) = match locate(conn, table).await {
        Ok(Some(found)) => found,
        Ok(None) => return Some(None),
        Err(_) => return None,
    };
    let params: Vec<Value> = [
        &*schema, &*name, &*schema, &*name, &*schema, &*name, index, &*schema, &*name,
    ]
    .into_iter()
    .map(Value::from)
    .collect();
    let found: Vec<Row> = match conn.exec(UNIQUE_INDEX, params).await {
        Ok(found) => found,
        Err(e) => {
            conn.note_error(&e);
            return None;
        }
    };
    Some(key_columns(&found).map(Arc::new))
}

/// The columns of an index that the proof may use, from its catalog rows.
fn key_columns(found: &[Row]) -> Option<KeyColumns> {
    let text = |row: &Row, i: usize| -> Option<String> {
        row.get_opt::<Option<String>, _>(i)
            .and_then(Result::ok)
            .flatten()
    };
    let number = |row: &Row, i: usize| -> Option<i64> {
        row.get_opt::<Option<i64>, _>(i)
            .and_then(Result::ok)
            .flatten()
    };
    let first = found.first()?;
    if number(first, 5) != Some(0) || text(first, 6).as_deref() != Some("BASE TABLE") {
        return None;
    }
    let mut columns = Vec::with_capacity(found.len());
    for row in found {
        let data_type = text(row, 1)?.to_ascii_lowercase();
        if number(row, 3) != Some(0)
            || number(row, 4).is_some()
            || !INTEGERS.contains(&data_type.as_str())
        {
            return None;
        }
        let numbered = text(row, 2)?
            .to_ascii_lowercase()
            .contains("auto_increment");
        columns.push((text(row, 0)?, numbered));
    }
    Some(KeyColumns(columns))
}

/// The rows' part of the proof: row `at`'s key (the index's columns, bound
/// bare) is integers that read as `entry`, and no other row's key can
/// equal it.
fn rows_allow(
    index: &KeyColumns,
    shape: &InsertShape,
    entry: &str,
    rows: &[MyRow],
    at: usize,
) -> bool {
    let Some(columns) = shape.columns.as_ref() else {
        return false;
    };
    let params: Option<Vec<(usize, bool)>> = index
        .0
        .iter()
        .map(|(column, numbered)| {
            let at = columns
                .iter()
                .position(|c| c.eq_ignore_ascii_case(column))?;
            Some(((*shape.tuple_params.get(at)?)?, *numbered))
        })
        .collect();
    let Some(params) = params else {
        return false;
    };
    let named: Option<Vec<i128>> = params
        .iter()
        .map(|&(k, numbered)| {
            let v = integer(rows[at].values.get(k)?)?;
            // A 0 in an auto-increment column is numbered by the server.
            (!numbered || v != 0).then_some(v)
        })
        .collect();
    let Some(named) = named else {
        return false;
    };
    let shown: Vec<String> = named.iter().map(i128::to_string).collect();
    if params.is_empty() || shown.join("-") != entry {
        return false;
    }
    !rows.iter().enumerate().any(|(i, row)| {
        i != at
            && params
                .iter()
                .zip(&named)
                .all(|(&(k, numbered), &key)| may_equal(row.values.get(k), key, numbered))
    })
}

/// An integer parameter's value.
fn integer(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) => Some(i128::from(*u)),
        _ => None,
    }
}

/// Whether a row's value `v` of a key column may be stored as `key`: an
/// equal integer, a value of another kind (the server converts it), or a
/// value the server numbers in an auto-increment column (0, NULL). A NULL
/// elsewhere is never equal.
fn may_equal(v: Option<&Value>, key: i128, numbered: bool) -> bool {
    match v {
        None => true,
        Some(Value::NULL) => numbered,
        Some(v) => match integer(v) {
            Some(n) => n == key || (numbered && n == 0),
            None => true,
        },
    }
}

#[cfg(test)]
mod tests {
    use mysql_async::Value;

    use super::{KeyColumns, duplicate, may_equal, rows_allow};
    use crate::classify::{Dialect, InsertShape, classify};
    use crate::mysql::row::MyRow;

    fn shape(sql: &str) -> std::sync::Arc<InsertShape> {
        classify(Dialect::MySql, sql)
            .shape()
            .expect("batchable")
            .clone()
    }

    fn row(values: Vec<Value>) -> MyRow {
        MyRow::of(values)
    }

    fn rows_of(rows: &[MyRow]) -> Vec<MyRow> {
        rows.iter().map(|r| row(r.values.clone())).collect()
    }

    #[test]
    fn an_integer_key_no_other_row_can_write_is_the_named_rows_own() {
        let s = shape("INSERT INTO t (k, v) VALUES (?, ?)");
        let key = KeyColumns(vec![("k".into(), false)]);
        let rows = vec![
            row(vec![Value::Int(1), Value::from("a")]),
            row(vec![Value::Int(7), Value::from("b")]),
            row(vec![Value::UInt(9), Value::NULL]),
        ];
        assert!(rows_allow(&key, &s, "7", &rows, 1));
        // The entry must be the named row's key.
        assert!(!rows_allow(&key, &s, "9", &rows, 1));
        // Another row with the same integer, or a string the server would
        // convert, may have written the key.
        let mut same = rows_of(&rows);
        same[2].values[0] = Value::UInt(7);
        assert!(!rows_allow(&key, &s, "7", &same, 1));
        let mut text = rows_of(&rows);
        text[0].values[0] = Value::from("7");
        assert!(!rows_allow(&key, &s, "7", &text, 1));
        // A named key that is not an integer is not compared.
        let mut named_text = rows;
        named_text[1].values[0] = Value::from("7");
        assert!(!rows_allow(&key, &s, "7", &named_text, 1));
    }

    #[test]
    fn composite_and_auto_increment_keys() {
        let s = shape("INSERT INTO t (a, v, b) VALUES (?, ?, ?)");
        let key = KeyColumns(vec![("b".into(), false), ("a".into(), true)]);
        let rows = vec![
            row(vec![Value::Int(2), Value::NULL, Value::Int(5)]),
            row(vec![Value::Int(3), Value::NULL, Value::Int(5)]),
        ];
        // The entry shows the index's columns in its order.
        assert!(rows_allow(&key, &s, "5-3", &rows, 1));
        assert!(!rows_allow(&key, &s, "3-5", &rows, 1));
        // A 0 or NULL in the auto-increment column is numbered by the
        // server: it may be any key.
        for numbered in [Value::Int(0), Value::NULL] {
            let mut other = rows_of(&rows);
            other[0].values[0] = numbered;
            assert!(!rows_allow(&key, &s, "5-3", &other, 1));
        }
        assert!(!may_equal(Some(&Value::NULL), 3, false));
        assert!(may_equal(Some(&Value::Double(3.0)), 3, false));
    }

    #[test]
    fn only_a_plain_inserts_duplicate_key_is_read() {
        let rows = vec![row(vec![Value::Int(1)]), row(vec![Value::Int(2)])];
        let plain = shape("INSERT INTO t (k) VALUES (?)");
        let message = "Duplicate entry '2' for key 'PRIMARY'";
        assert_eq!(
            duplicate(1062, message, &plain, &rows, 1),
            Some(("2", "PRIMARY"))
        );
        assert_eq!(duplicate(1048, message, &plain, &rows, 1), None);
        assert_eq!(duplicate(1062, message, &plain, &rows[..1], 0), None);
        for sql in [
            "INSERT IGNORE INTO t (k) VALUES (?)",
            "REPLACE INTO t (k) VALUES (?)",
            "INSERT INTO t (k) VALUES (?) ON DUPLICATE KEY UPDATE k = k + 1",
        ] {
            assert_eq!(
                duplicate(1062, message, &shape(sql), &rows, 1),
                None,
                "{sql}"
            );
        }
    }
}
