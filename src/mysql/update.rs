//! Keyed updates on MySQL / MariaDB: many callers' `UPDATE t SET c =
//! <expression> WHERE k = ? [AND ...]` of one text as one statement, each
//! caller told its own count.
//!
//! MySQL has no `UPDATE ... RETURNING`: a statement reports only its total
//! count. The callers' statement ([`KeyedShape::render_case`]) therefore
//! runs inside `START TRANSACTION` ... `COMMIT`, and commits only when its
//! total splits one way over its callers:
//!
//! - each caller's condition meets at most one row: the key columns hold
//!   every column of a unique index, and each key is compared exactly in
//!   its column's type (an integer column with an integer, a `CHAR` /
//!   `VARCHAR` / `BINARY` / `VARBINARY` column with a string: then the
//!   comparison is the index's own, collation and `PAD SPACE` included);
//!   a row whose key is bound otherwise goes as its own statement;
//! - so a total of `n` means every caller's row was counted (changed, or
//!   found with `client_found_rows`), and no row met that none was;
//! - another total is checked by reading which callers' conditions the
//!   rows meet, in the same transaction (see [`counts`]): where every row
//!   met is one caller's and was counted, a caller's count is whether its
//!   condition met a row (a missing key counts 0);
//! - otherwise (a value already stored, two callers meeting one row
//!   through keys the server finds equal) the transaction is rolled back,
//!   and each caller's own statement runs on its own, in call order.
//!
//! Rows whose keys have equal bytes go in successive statements (see
//! [`Keys::runs`]), as do rows that bind values of other kinds for the
//! assignments (a `CASE` of branches of one type converts nothing the
//! caller's own assignment would not). A failed statement is rolled back
//! and its callers re-run in smaller groups, as INSERTs are. The table
//! must be a transactional base table without triggers, in a strict
//! session, the assigned columns in no unique index and not generated, and
//! the expressions call no function (a stored function could write
//! elsewhere). The counts are read from the server's English info text
//! (`Rows matched: ...`); a server speaking another language
//! (`lc_messages`) gives none, and a total other than `n` then runs each
//! caller on its own.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use mysql_async::Value;
use mysql_async::prelude::Queryable;

use super::Client;
use super::row::MyRow;
use super::table::{TableFacts, locate};
use crate::classify::{KeyedShape, MASK_BITS};
use crate::error::Error;
use crate::explain::NotCoalesced;

/// How a key column compares with what a caller binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyClass {
    /// An integer or `DECIMAL` column: exact for integers.
    Integer,
    /// A `CHAR`, `VARCHAR`, `BINARY` or `VARBINARY` column: the column's
    /// collation for strings.
    Text,
}

impl KeyClass {
    /// Of a column's `DATA_TYPE`.
    fn of(data_type: &str) -> Option<KeyClass> {
        match data_type.to_ascii_lowercase().as_str() {
            "tinyint" | "smallint" | "mediumint" | "int" | "bigint" | "decimal" => {
                Some(KeyClass::Integer)
            }
            "char" | "varchar" | "binary" | "varbinary" => Some(KeyClass::Text),
            _ => None,
        }
    }

    /// Whether `value` compares with the column exactly (NULL meets no
    /// row).
    fn exact(self, value: &Value) -> bool {
        matches!(
            (self, value),
            (_, Value::NULL)
                | (KeyClass::Integer, Value::Int(_) | Value::UInt(_))
                | (KeyClass::Text, Value::Bytes(_))
        )
    }
}

/// What a keyed update's rows need: each key parameter's class, and the
/// order the many-caller statement binds a caller's parameters in.
#[derive(Debug)]
pub(crate) struct Keys {
    /// Key parameters (0-based) and their columns' classes.
    keys: Vec<(usize, KeyClass)>,
    /// Per assigned column, the parameters bound for each caller.
    columns: Vec<Vec<usize>>,
    /// The parameters of the WHERE clause, for each caller.
    cond: Vec<usize>,
    /// Whether the text may join a family (see `super::family`): per
    /// column it sets, whether an integer keeps its value there; `None`
    /// when a column's type or an expression keeps it out.
    pub(crate) family: Option<Vec<bool>>,
    /// The table's columns and their types as learned, in the family key
    /// (a text learned after the table changed starts another family).
    columns_seen: String,
}

/// The columns of a table: name (lowercased), `DATA_TYPE`, `EXTRA`.
const COLUMNS: &str = "SELECT COLUMN_NAME, DATA_TYPE, EXTRA FROM information_schema.COLUMNS \
     WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?";

/// The index columns of a table: index, column, `NON_UNIQUE`, `SUB_PART`.
const INDEXES: &str = "SELECT INDEX_NAME, COLUMN_NAME, NON_UNIQUE, SUB_PART \
     FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?";

/// A refusal.
fn declined(why: impl std::fmt::Display) -> Result<Result<Keys, NotCoalesced>, Error> {
    Ok(Err(NotCoalesced::Declined(format!("keyed updates: {why}"))))
}

impl Keys {
    /// Learns `form` on `conn` (`facts`: the table's, `None` when it is not
    /// a base table the catalog shows): whether its callers may share a
    /// statement, and how.
    pub(crate) async fn learn(
        conn: &mut Client,
        form: &KeyedShape,
        facts: Option<&TableFacts>,
    ) -> Result<Result<Keys, NotCoalesced>, Error> {
        match facts {
            None => {
                return declined(
                    "the table is not a base table batchpool finds in information_schema",
                );
            }
            Some(f) if !f.transactional => {
                return declined("the table's engine is not transactional");
            }
            Some(f) if f.triggers != 0 => return declined("the table has triggers"),
            Some(_) => {}
        }
        if !conn.session.strict {
            return declined("the session's sql_mode is not strict");
        }
        if !form.calls.is_empty() {
            return declined("the SET clause calls a function");
        }
        let read = async {
            let Some((schema, name)) = locate(conn, &form.table).await? else {
                return Ok(None);
            };
            let columns: Vec<(String, String, String)> =
                conn.exec(COLUMNS, (&schema, &name)).await?;
            let indexes: Vec<(String, String, u64, Option<u64>)> =
                conn.exec(INDEXES, (&schema, &name)).await?;
            Ok::<_, mysql_async::Error>(Some((columns, indexes)))
        };
        let (columns, indexes) = match read.await {
            Ok(Some(read)) => read,
            Ok(None) => return declined("the table's schema is not known"),
            Err(e @ mysql_async::Error::Server(_)) => {
                return declined(format!("the catalog cannot be read: {e}"));
            }
            Err(e) => {
                conn.note_error(&e);
                return Err(super::errors::unsent_error(e));
            }
        };
        Ok(Self::check(form, &columns, &indexes))
    }

    /// The catalog's answer for `form`: its `columns` (name, type, extra)
    /// and `indexes` (index, column, non-unique, prefix).
    fn check(
        form: &KeyedShape,
        columns: &[(String, String, String)],
        indexes: &[(String, String, u64, Option<u64>)],
    ) -> Result<Keys, NotCoalesced> {
        let refuse = |why: String| Err(NotCoalesced::Declined(format!("keyed updates: {why}")));
        let column = |name: &str| columns.iter().find(|c| c.0.eq_ignore_ascii_case(name));
        let seen = {
            let mut seen: Vec<String> = columns
                .iter()
                .map(|(name, ty, _)| format!("{}:{}", name.to_lowercase(), ty.to_lowercase()))
                .collect();
            seen.sort_unstable();
            seen.join(",")
        };
        let mut keys = Vec::new();
        for (name, param) in &form.keys {
            let Some((_, data_type, _)) = column(name) else {
                return refuse(format!("no column {name} in the catalog"));
            };
            match KeyClass::of(data_type) {
                Some(class) => keys.push((*param, class)),
                None => {
                    return refuse(format!(
                        "the key column {name} is of type {data_type} (integers, CHAR, VARCHAR, \
                         BINARY and VARBINARY keys are coalesced)"
                    ));
                }
            }
        }
        let is_key = |c: &str| form.keys.iter().any(|(k, _)| k.eq_ignore_ascii_case(c));
        let mut unique: Vec<&str> = indexes
            .iter()
            .filter(|i| i.2 == 0)
            .map(|i| i.0.as_str())
            .collect();
        unique.sort_unstable();
        unique.dedup();
        let covered = unique.iter().any(|index| {
            indexes
                .iter()
                .filter(|i| i.0 == *index)
                .all(|i| i.3.is_none() && is_key(&i.1))
        });
        if !covered {
            return refuse("the key columns hold no whole unique index".into());
        }
        for name in &form.assigned {
            let Some((_, _, extra)) = column(name) else {
                return refuse(format!("no column {name} in the catalog"));
            };
            if extra.to_ascii_uppercase().contains("GENERATED") {
                return refuse(format!("the assigned column {name} is generated"));
            }
            let in_unique = is_key(name)
                || indexes
                    .iter()
                    .any(|i| i.2 == 0 && i.1.eq_ignore_ascii_case(name));
            if in_unique {
                return refuse(format!("the assigned column {name} is in a unique index"));
            }
        }
        let (columns, cond) = form.case_params();
        let family = form
            .assigned
            .iter()
            .enumerate()
            .map(|(j, name)| {
                form.bare_param(j)?;
                family_class(&column(name)?.1)
            })
            .collect();
        Ok(Keys {
            keys,
            columns,
            cond,
            family,
            columns_seen: seen,
        })
    }

    /// The parameters of the conditions, in order.
    pub(crate) fn cond(&self) -> &[usize] {
        &self.cond
    }

    /// The key parameters' classes and the table's columns as learned, as
    /// text (texts of one family compare their keys alike and saw one
    /// table).
    pub(crate) fn classes(&self) -> String {
        format!("{:?}\0{}", self.keys, self.columns_seen)
    }

    /// Parameters one caller binds in the many-caller statement.
    pub(crate) fn bound(&self) -> usize {
        self.columns.iter().map(Vec::len).sum::<usize>() + self.cond.len()
    }

    /// The many-caller statement's parameters for `rows`, in the order of
    /// [`KeyedShape::render_case`].
    pub(crate) fn params(&self, rows: &[MyRow]) -> Vec<Value> {
        let mut out = Vec::with_capacity(rows.len() * self.bound());
        for column in self.columns.iter().chain(std::iter::once(&self.cond)) {
            for row in rows {
                out.extend(column.iter().map(|&p| row.values[p].clone()));
            }
        }
        out
    }

    /// The mask read's parameters for `rows` (see
    /// [`KeyedShape::render_or`]): each caller's condition's, for the masks
    /// and again for the WHERE clause.
    pub(crate) fn mask_params(&self, rows: &[MyRow]) -> Vec<Value> {
        let mut out = Vec::with_capacity(2 * rows.len() * self.cond.len());
        for _ in 0..2 {
            for row in rows {
                out.extend(self.cond.iter().map(|&p| row.values[p].clone()));
            }
        }
        out
    }

    /// Where rows must be cut (see
    /// [`Backend::runs`](crate::backend::batch::Backend::runs)): a row whose
    /// key is not bound exactly goes alone; two rows whose keys have equal
    /// bytes go in successive statements, and so do two rows whose values
    /// for the assignments are of other kinds. With `family` (rows of a
    /// family statement), a row that does not fit it goes alone, and the
    /// kinds do not matter (see [`super::family`]).
    pub(crate) fn runs(
        &self,
        rows: &[MyRow],
        family: Option<&dyn Fn(&MyRow) -> bool>,
    ) -> Option<Vec<usize>> {
        if rows.len() < 2 {
            return None;
        }
        let exact = |row: &MyRow| {
            family.is_none_or(|fits| fits(row))
                && self
                    .keys
                    .iter()
                    .all(|&(p, class)| class.exact(&row.values[p]))
        };
        let key = |row: &MyRow| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for &(p, _) in &self.keys {
                // Equal integers are one key whatever their sign type.
                match &row.values[p] {
                    Value::Int(i) => (1u8, i128::from(*i)).hash(&mut h),
                    Value::UInt(u) => (1u8, i128::from(*u)).hash(&mut h),
                    Value::Bytes(b) => (2u8, b).hash(&mut h),
                    _ => 0u8.hash(&mut h),
                }
            }
            h.finish()
        };
        // The kinds of the values the `CASE`s take (the conditions' are
        // compared caller by caller); a family statement's rows fit it
        // whatever their kinds.
        let kinds = |row: &MyRow| -> Vec<std::mem::Discriminant<Value>> {
            if family.is_some() {
                return Vec::new();
            }
            row.values
                .iter()
                .enumerate()
                .filter(|(p, _)| !self.cond.contains(p))
                .map(|(_, v)| std::mem::discriminant(v))
                .collect()
        };
        let mut runs = Vec::new();
        let mut run = 0usize;
        let mut run_kinds = Vec::new();
        let mut seen: HashSet<u64> = HashSet::with_capacity(rows.len());
        for row in rows {
            if !exact(row) {
                if run > 0 {
                    runs.push(run);
                    run = 0;
                }
                runs.push(1);
                continue;
            }
            let k = key(row);
            let these = kinds(row);
            if run > 0 && (these != run_kinds || seen.contains(&k)) {
                runs.push(run);
                run = 0;
            }
            if run == 0 {
                seen.clear();
                run_kinds = these;
            }
            seen.insert(k);
            run += 1;
        }
        if run > 0 {
            runs.push(run);
        }
        (runs.len() > 1).then_some(runs)
    }
}

/// Whether a column of `data_type` may be set in a family statement, whose
/// `CASE ... ELSE <the column> END` passes a kept value through the
/// aggregate of its type and the values' (a string, or a wider number)
/// and back: `Some(true)` for integer and `DECIMAL` columns (integers may
/// be bound too), `Some(false)` for character and date-time columns that
/// a string holds exactly (not `TIMESTAMP`, whose text is ambiguous once
/// a year, nor floating point, binary or `ENUM` / `SET` columns).
fn family_class(data_type: &str) -> Option<bool> {
    match data_type.to_ascii_lowercase().as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" | "decimal" => Some(true),
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "date"
        | "datetime" | "time" | "year" => Some(false),
        _ => None,
    }
}

/// "Rows matched" of an UPDATE's info text (`Rows matched: 3  Changed: 2
/// Warnings: 0`): the rows its WHERE clause met, each once.
pub(crate) fn matched(info: &str) -> Option<u64> {
    let rest = info.split_once("Rows matched:")?.1.trim_start();
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Each of `n` callers' counts from the masks of the rows its condition
/// meets (`masks`: each row's, see [`KeyedShape::render_or`]) after an
/// update that met `matched` rows and counted `total`: 1 for a caller
/// whose condition met a row, 0 for the others, when that is what each
/// caller's own statement counts: no row met by two callers, as many
/// callers met as rows the update met, and every row met counted (changed,
/// or found with `client_found_rows`). `None` otherwise.
pub(crate) fn counts(masks: &[Vec<u64>], n: usize, matched: u64, total: u64) -> Option<Vec<u64>> {
    let mut counts = vec![0u64; n];
    for row in masks {
        let mut callers = row.iter().enumerate().flat_map(|(column, &mask)| {
            (0..MASK_BITS)
                .filter(move |bit| mask >> bit & 1 == 1)
                .map(move |bit| column * MASK_BITS + bit)
        });
        let caller = callers.next()?;
        if callers.next().is_some() || caller >= n || counts[caller] != 0 {
            return None;
        }
        counts[caller] = 1;
    }
    (masks.len() as u64 == matched && total == matched).then_some(counts)
}

/// What a coalesced update's total says of each of its `n` callers, when
/// it met `matched` rows: every caller's count when the total splits one
/// way (each caller meets at most one row), `None` when it does not. `n`
/// rows counted are one per caller. None counted says nothing when rows
/// were met: two callers may have met one row through keys the server
/// finds equal, where the row took the first one's assignments (which
/// kept its value) and never the second's.
pub(crate) fn split(total: u64, matched: Option<u64>, n: usize) -> Option<u64> {
    match (total, matched) {
        (0, Some(0)) => Some(0),
        (t, _) if t == n as u64 => Some(1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use mysql_async::Value;

    use super::{KeyClass, Keys, counts, matched, split};
    use crate::classify::{Classified, Dialect, Form, KeyedShape, classify};
    use crate::mysql::row::MyRow;

    fn shape(sql: &str) -> std::sync::Arc<KeyedShape> {
        match classify(Dialect::MySql, sql) {
            Classified::Batchable(Form::Keyed(shape)) => shape,
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn col(name: &str, ty: &str) -> (String, String, String) {
        (name.into(), ty.into(), String::new())
    }

    fn idx(index: &str, column: &str, unique: bool) -> (String, String, u64, Option<u64>) {
        (index.into(), column.into(), u64::from(!unique), None)
    }

    fn row(values: Vec<Value>) -> MyRow {
        MyRow::of(values)
    }

    #[test]
    fn a_total_splits_only_as_all_or_none() {
        assert_eq!(split(0, Some(0), 5), Some(0));
        assert_eq!(split(5, Some(5), 5), Some(1));
        assert_eq!(split(5, None, 5), Some(1));
        // Rows met but none changed: two callers may share one.
        assert_eq!(split(0, Some(2), 5), None);
        assert_eq!(split(0, None, 5), None);
        assert_eq!(split(4, Some(5), 5), None);
        assert_eq!(split(6, Some(6), 5), None);
    }

    #[test]
    fn masks_give_counts_only_when_every_row_met_is_one_callers_and_counted() {
        assert_eq!(matched("Rows matched: 3  Changed: 2  Warnings: 0"), Some(3));
        assert_eq!(matched("Rows matched: 0  Changed: 0  Warnings: 0"), Some(0));
        assert_eq!(matched(""), None);
        // Callers 0 and 2 of 4 met a row each, both counted.
        let masks = vec![vec![0b001], vec![0b100]];
        assert_eq!(counts(&masks, 4, 2, 2), Some(vec![1, 0, 1, 0]));
        // One of them unchanged (no `client_found_rows`).
        assert_eq!(counts(&masks, 4, 2, 1), None);
        // A row of two callers; a row the masks place past the callers.
        assert_eq!(counts(&[vec![0b011]], 4, 1, 1), None);
        assert_eq!(counts(&[vec![0b10000]], 4, 1, 1), None);
        // A row the update did not meet (inserted since).
        assert_eq!(counts(&masks, 4, 1, 1), None);
        // A second mask column: its bit 0 is caller 63.
        assert_eq!(
            counts(&[vec![0, 1]], 70, 1, 1).map(|c| c.iter().position(|&x| x == 1)),
            Some(Some(63))
        );
    }

    #[test]
    fn the_catalog_must_show_a_unique_key_compared_exactly_and_no_assigned_key() {
        let form = shape("UPDATE t SET v = ?, n = n + ? WHERE id = ?");
        let columns = [col("id", "bigint"), col("v", "varchar"), col("n", "int")];
        let pk = [idx("PRIMARY", "id", true)];
        let keys = Keys::check(&form, &columns, &pk).unwrap();
        assert_eq!(keys.keys, vec![(2, KeyClass::Integer)]);
        // Per column the condition's parameter and then the expression's;
        // then the condition's.
        assert_eq!(keys.columns, vec![vec![2, 0], vec![2, 1]]);
        assert_eq!(keys.cond, vec![2]);
        assert_eq!(keys.bound(), 5);
        // No unique index; a unique index with a column outside the key; a
        // prefix index.
        assert!(Keys::check(&form, &columns, &[idx("i", "id", false)]).is_err());
        let wider = [idx("u", "id", true), idx("u", "n", true)];
        assert!(Keys::check(&form, &columns, &wider).is_err());
        let mut prefix = idx("u", "id", true);
        prefix.3 = Some(4);
        assert!(Keys::check(&form, &columns, &[prefix]).is_err());
        // An assigned column in a unique index.
        let assigned = [idx("PRIMARY", "id", true), idx("uv", "v", true)];
        assert!(Keys::check(&form, &columns, &assigned).is_err());
        // A key of a type whose comparison the rows' values may not keep.
        let dated = [col("id", "datetime"), col("v", "varchar"), col("n", "int")];
        assert!(Keys::check(&form, &dated, &pk).is_err());
        // A generated assigned column.
        let mut generated = columns.clone();
        generated[1].2 = "VIRTUAL GENERATED".into();
        assert!(Keys::check(&form, &generated, &pk).is_err());
    }

    #[test]
    fn rows_are_cut_at_equal_keys_other_kinds_and_inexact_keys() {
        let form = shape("UPDATE t SET v = ? WHERE k = ?");
        let columns = [col("k", "varchar"), col("v", "varchar")];
        let keys = Keys::check(&form, &columns, &[idx("PRIMARY", "k", true)]).unwrap();
        let s = |v: &str| Value::Bytes(v.as_bytes().to_vec());
        let rows = vec![
            row(vec![s("1"), s("a")]),
            row(vec![s("2"), s("b")]),
            row(vec![s("3"), s("a")]),
            row(vec![Value::Int(4), s("c")]),
            row(vec![s("5"), Value::Int(7)]),
            row(vec![s("6"), s("d")]),
        ];
        // `a` twice: cut before the third; an integer value: its own kind;
        // an integer key on a text column: alone.
        assert_eq!(keys.runs(&rows, None), Some(vec![2, 1, 1, 1, 1]));
        assert_eq!(keys.runs(&rows[..2], None), None);
        // A row that does not fit goes alone.
        let third = |r: &MyRow| r.values[0] != s("3");
        assert_eq!(keys.runs(&rows[..3], Some(&third)), Some(vec![2, 1]));
    }

    #[test]
    fn the_many_caller_text_binds_each_callers_values_where_its_own_would() {
        let form = shape("UPDATE t AS u SET v = ?, n = u.n + ? WHERE id = ?");
        assert_eq!(
            form.render_case(2),
            "UPDATE t AS u SET v = CASE WHEN (id = ?) THEN (?) WHEN (id = ?) THEN (?) END, \
             n = CASE WHEN (id = ?) THEN (u.n + ?) WHEN (id = ?) THEN (u.n + ?) END \
             WHERE (id = ?) OR (id = ?)"
        );
        let columns = [col("id", "int"), col("v", "varchar"), col("n", "int")];
        let keys = Keys::check(&form, &columns, &[idx("PRIMARY", "id", true)]).unwrap();
        let rows = [
            row(vec![Value::Int(10), Value::Int(11), Value::Int(1)]),
            row(vec![Value::Int(20), Value::Int(21), Value::Int(2)]),
        ];
        let ints = |v: &[i64]| v.iter().map(|&i| Value::Int(i)).collect::<Vec<_>>();
        assert_eq!(
            keys.params(&rows),
            ints(&[1, 10, 2, 20, 1, 11, 2, 21, 1, 2])
        );
    }
}
