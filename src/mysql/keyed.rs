//! Keyed reads on MySQL / MariaDB: many callers' `SELECT <list> FROM t
//! WHERE k = ? [AND ...]` of one text as one statement of the callers'
//! own statements joined by `UNION ALL`, each numbered by a first column
//! (see [`KeyedShape::render_union`]).
//!
//! Each branch is the caller's own statement with its own parameters: its
//! conditions are compared as the caller's statement compares them (the
//! parameter's type and coercibility, the column's collation, `PAD SPACE`,
//! a number compared with a string), whatever the table, its keys or a
//! view behind it, so no table facts are needed. The branches run in one
//! statement, on one snapshot taken after every caller in it began its
//! call; each caller gets the rows of its number, without that column. A
//! statement that fails for an error that may be one caller's runs again in
//! smaller groups, as INSERTs do. Keyed updates and deletes run on their
//! own on these servers: MySQL has no `UPDATE ... RETURNING` to tell each
//! caller its count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Value};

use super::batch::MyRow;
use super::errors::{read_error, unsent_error};
use super::{Client, Outcome};
use crate::backend::batch::{ChunkError, ChunkResult};
use crate::classify::KeyedShape;
use crate::error::{Error, Kind};
use crate::explain::NotCoalesced;
use crate::sync::lock;

/// A keyed read shape.
pub(crate) struct MyKeyed {
    form: Arc<KeyedShape>,
    /// The caller's own text.
    sql: Box<str>,
    /// Placeholders of one caller's statement.
    pub(crate) params: usize,
    /// Text bytes each further caller adds.
    pub(crate) text_per_row: usize,
    /// Rendered texts by caller count.
    texts: Mutex<HashMap<usize, Arc<str>>>,
}

impl MyKeyed {
    /// Learns `form` (the text `sql`) on `conn`: the server's count of its
    /// placeholders, and that it takes the many-caller text.
    pub(crate) async fn learn(
        conn: &mut Client,
        sql: &str,
        form: Arc<KeyedShape>,
    ) -> Result<Result<MyKeyed, NotCoalesced>, Error> {
        let one = match conn.prep(sql).await {
            Ok(stmt) => stmt,
            Err(e) => {
                conn.note_error(&e);
                return Err(unsent_error(e));
            }
        };
        if usize::from(one.num_params()) != form.params_per_row {
            return Ok(Err(NotCoalesced::Declined(format!(
                "the server counts {} parameters where the text shows {}",
                one.num_params(),
                form.params_per_row
            ))));
        }
        let two = form.render_union(2);
        match conn.prep(&two).await {
            Ok(stmt) => {
                if usize::from(stmt.num_params()) != 2 * form.params_per_row {
                    return Ok(Err(NotCoalesced::Declined(
                        "the server counts the coalesced form's parameters otherwise".into(),
                    )));
                }
            }
            Err(mysql_async::Error::Server(e)) => {
                return Ok(Err(NotCoalesced::Declined(format!(
                    "the server refused the coalesced form: {e}"
                ))));
            }
            Err(e) => {
                conn.note_error(&e);
                return Err(unsent_error(e));
            }
        }
        let text_per_row = form.render_union(3).len().saturating_sub(two.len()).max(1);
        Ok(Ok(MyKeyed {
            params: form.params_per_row,
            text_per_row,
            form,
            sql: sql.into(),
            texts: Mutex::new(HashMap::new()),
        }))
    }

    /// Whether a re-learned shape is this one.
    pub(crate) fn same(&self, other: &MyKeyed) -> bool {
        self.params == other.params && self.sql == other.sql
    }

    /// The statement text for `n` callers.
    fn text(&self, n: usize) -> Arc<str> {
        if n == 1 {
            return self.sql.as_ref().into();
        }
        let mut texts = lock(&self.texts);
        Arc::clone(
            texts
                .entry(n)
                .or_insert_with(|| self.form.render_union(n).into()),
        )
    }

    /// Runs `rows`, each caller's parameters: one as its own statement,
    /// more as the many-caller statement.
    pub(crate) async fn execute(&self, conn: &mut Client, rows: &[MyRow]) -> ChunkResult<Outcome> {
        let n = rows.len();
        let stmt = match conn.prep(&*self.text(n)).await {
            Ok(stmt) => stmt,
            Err(e) => {
                conn.note_error(&e);
                return Err(ChunkError::Statement(unsent_error(e)));
            }
        };
        if conn.is_disconnected() {
            return Err(ChunkError::Statement(Error::closed_before_send()));
        }
        if usize::from(stmt.num_params()) != n * self.params {
            return Err(ChunkError::Statement(Error::new(
                Kind::Params,
                format!(
                    "the {n}-caller read takes {} parameters, not {}",
                    stmt.num_params(),
                    n * self.params
                ),
            )));
        }
        let params: Vec<Value> = rows.iter().flat_map(|r| r.values.iter().cloned()).collect();
        let params = if params.is_empty() {
            Params::Empty
        } else {
            Params::Positional(params)
        };
        let returned: Vec<Row> = match conn.exec(&stmt, params).await {
            Ok(rows) => rows,
            Err(e) => {
                conn.note_error(&e);
                if super::errors::stale(&e) {
                    let _ = conn.close(stmt).await;
                }
                return Err(read_error(e));
            }
        };
        if n == 1 {
            return Ok(vec![Outcome::read(returned)]);
        }
        let mut per_caller: Vec<Vec<Row>> = (0..n).map(|_| Vec::new()).collect();
        let mut columns: Option<Arc<[mysql_async::Column]>> = None;
        for row in returned {
            let columns = columns.get_or_insert_with(|| row.columns_ref()[1..].into());
            let mut values = row.unwrap();
            let ord = match values.first() {
                Some(Value::Int(i)) => usize::try_from(*i).ok(),
                Some(Value::UInt(u)) => usize::try_from(*u).ok(),
                _ => None,
            };
            let Some(caller) = ord.and_then(|o| o.checked_sub(1)).filter(|&c| c < n) else {
                return Err(ChunkError::Row(Error::internal(
                    "a coalesced read returned a row of no caller",
                )));
            };
            values.remove(0);
            per_caller[caller].push(mysql_common::row::new_row(values, Arc::clone(columns)));
        }
        Ok(per_caller.into_iter().map(Outcome::read).collect())
    }
}
