//! Keyed reads, deletes and updates on MySQL / MariaDB: many callers'
//! `SELECT <list> FROM t WHERE k = ? [AND ...]`, `DELETE FROM t WHERE k = ?
//! [AND ...]` or `UPDATE t SET ... WHERE k = ? [AND ...]` of one text (or,
//! for updates, of one family of texts) as one statement.
//!
//! - On a base table, the callers' conditions are joined by `OR`, and each
//!   row carries a mask of the callers whose condition it meets, computed
//!   by the server with that caller's own condition and values (see
//!   [`KeyedShape::render_or`]). A row goes to every caller of its mask.
//! - A read of anything else (a view, a name the catalog does not show)
//!   joins the callers' own statements by `UNION ALL`, each numbered by a
//!   first column (see [`KeyedShape::render_union`]), as a view's rows need
//!   not be the same when it is read twice.
//! - A delete, on a transactional base table without triggers only, joins
//!   the conditions by `OR` and returns each deleted row's mask: the row
//!   counts for the first caller of its mask (see [`deleted_by`]).
//! - An update sets each column to a `CASE` of the callers' conditions,
//!   inside a transaction that commits only where its total count tells
//!   each caller its own (see [`super::update`] and, for texts that set
//!   other columns, [`super::family`]).
//!
//! Either way the server compares each caller's conditions as the caller's
//! statement compares them (the parameter's type and coercibility, the
//! column's collation, `PAD SPACE`, a number compared with a string): the
//! client compares no keys. The statement runs on one snapshot taken after
//! every caller in it began its call; each caller gets its rows without the
//! added columns. A statement that fails for an error that may be one
//! caller's runs again in smaller groups, as INSERTs do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Value};

use super::errors::{read_error, unsent_error};
use super::family::{MyFamilies, MyFamily};
use super::row::MyRow;
use super::update::Keys;
use super::{Client, Outcome};
use crate::backend::batch::{ChunkError, ChunkResult, one_outcome};
use crate::classify::{KeyedKind, KeyedShape, MASK_BITS};
use crate::error::{Error, Kind};
use crate::explain::NotCoalesced;
use crate::sync::lock;

/// How a keyed statement's many-caller text is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rendering {
    /// The callers' conditions joined by `OR`, each row with its callers'
    /// mask (a base table).
    Or,
    /// The callers' statements joined by `UNION ALL`, numbered.
    Union,
    /// An update's assignments as `CASE`s of the callers' conditions (see
    /// [`super::update`]).
    Case,
}

impl Rendering {
    /// The statement for `n` callers.
    fn render(self, form: &KeyedShape, n: usize) -> String {
        match self {
            Rendering::Or => form.render_or(n),
            Rendering::Union => form.render_union(n),
            Rendering::Case => form.render_case(n),
        }
    }

    /// Times each caller's parameters are bound in the statement (for an
    /// update, at most).
    fn copies(self, form: &KeyedShape) -> usize {
        match self {
            Rendering::Or => 2,
            Rendering::Union => 1,
            Rendering::Case => form.assigned.len() + 1,
        }
    }
}

/// A keyed read or delete shape.
pub(crate) struct MyKeyed {
    form: Arc<KeyedShape>,
    rendering: Rendering,
    /// The caller's own text.
    sql: Arc<str>,
    /// Placeholders of one caller's statement.
    pub(crate) params: usize,
    /// Text bytes each further caller adds.
    pub(crate) text_per_row: usize,
    /// Rendered texts by caller count.
    texts: Mutex<HashMap<usize, Arc<str>>>,
    /// An update's keys and parameter order.
    update: Option<Keys>,
    /// An update's family and its number in it (see [`super::family`]).
    family: Option<(Arc<MyFamily>, u16)>,
}

impl MyKeyed {
    /// Learns `form` (the text `sql`) on `conn`: the server's count of its
    /// placeholders, and that it takes the many-caller text.
    pub(crate) async fn learn(
        conn: &mut Client,
        sql: &str,
        form: Arc<KeyedShape>,
        families: &MyFamilies,
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
        let facts = super::table::table_facts(conn, &form.table).await?;
        if form.kind == KeyedKind::Update {
            let keys = match Keys::learn(conn, &form, facts.as_ref()).await? {
                Ok(keys) => keys,
                Err(why) => return Ok(Err(why)),
            };
            let bound = keys.bound();
            if let Err(why) = Self::try_rendering(conn, &form, Rendering::Case, bound).await? {
                return Ok(Err(why));
            }
            let family = match keys.family.clone() {
                Some(integers) => {
                    let (classes, cond) = (keys.classes(), keys.cond().len());
                    families
                        .join(conn, &form, sql, integers, &classes, cond)
                        .await
                }
                None => None,
            };
            let mut shape = Self::new(sql, form, Rendering::Case, Some(keys));
            shape.family = family;
            return Ok(Ok(shape));
        }
        if form.kind == KeyedKind::Delete {
            // One multi-row delete must be all or nothing (a failed one is
            // run again in smaller groups), and must do per row only what
            // the callers' own deletes would: no trigger, which could read
            // what the statement's other rows changed.
            let why = match &facts {
                None => Some("the table is not a base table batchpool finds in information_schema"),
                Some(f) if !f.transactional => Some("the table's engine is not transactional"),
                Some(f) if f.triggers != 0 => Some("the table has triggers"),
                Some(_) => None,
            };
            if let Some(why) = why {
                return Ok(Err(NotCoalesced::Declined(format!("keyed deletes: {why}"))));
            }
            let bound = 2 * form.params_per_row;
            return Ok(Self::try_rendering(conn, &form, Rendering::Or, bound)
                .await?
                .map(|()| Self::new(sql, form, Rendering::Or, None)));
        }
        // A view may give other rows when read again; a base table's rows
        // are what they are on the statement's snapshot.
        let base_table = facts.is_some();
        let mut refused = None;
        if base_table {
            let bound = 2 * form.params_per_row;
            match Self::try_rendering(conn, &form, Rendering::Or, bound).await? {
                Ok(()) => return Ok(Ok(Self::new(sql, form, Rendering::Or, None))),
                Err(why) => refused = Some(why),
            }
        }
        let bound = form.params_per_row;
        match Self::try_rendering(conn, &form, Rendering::Union, bound).await? {
            Ok(()) => Ok(Ok(Self::new(sql, form, Rendering::Union, None))),
            Err(why) => Ok(Err(refused.unwrap_or(why))),
        }
    }

    /// Whether the server takes `rendering`'s two-caller statement with the
    /// parameters it should count (`bound` per caller).
    async fn try_rendering(
        conn: &mut Client,
        form: &KeyedShape,
        rendering: Rendering,
        bound: usize,
    ) -> Result<Result<(), NotCoalesced>, Error> {
        let two = rendering.render(form, 2);
        match conn.prep(&two).await {
            Ok(stmt) => {
                if usize::from(stmt.num_params()) != 2 * bound {
                    return Ok(Err(NotCoalesced::Declined(
                        "the server counts the coalesced form's parameters otherwise".into(),
                    )));
                }
                Ok(Ok(()))
            }
            Err(mysql_async::Error::Server(e)) => Ok(Err(NotCoalesced::Declined(format!(
                "the server refused the coalesced form: {e}"
            )))),
            Err(e) => {
                conn.note_error(&e);
                Err(unsent_error(e))
            }
        }
    }

    /// The shape of `form` (the text `sql`), written as `rendering`.
    fn new(
        sql: &str,
        form: Arc<KeyedShape>,
        rendering: Rendering,
        update: Option<Keys>,
    ) -> MyKeyed {
        let text_per_row = rendering
            .render(&form, 3)
            .len()
            .saturating_sub(rendering.render(&form, 2).len())
            .max(1);
        MyKeyed {
            params: form.params_per_row,
            text_per_row,
            rendering,
            form,
            sql: sql.into(),
            texts: Mutex::new(HashMap::new()),
            update,
            family: None,
        }
    }

    /// The text's number in its family (0 when it has none).
    pub(crate) fn member(&self) -> u16 {
        self.family.as_ref().map_or(0, |(_, m)| *m)
    }

    /// Its family's id.
    pub(crate) fn family_id(&self) -> Option<u64> {
        self.family.as_ref().map(|(f, _)| f.id)
    }

    /// The own text of `row`'s caller (in a family, perhaps another than
    /// this shape's).
    fn own_sql(&self, row: &MyRow) -> Result<Arc<str>, ChunkError<Outcome>> {
        match &self.family {
            Some((family, me)) if row.member != *me => family
                .member(row.member)
                .map(|m| Arc::clone(&m.sql))
                .ok_or_else(|| {
                    ChunkError::Statement(Error::internal("a row of a family's unknown text"))
                }),
            _ => Ok(self.sql.clone()),
        }
    }

    /// Times each caller's parameters are bound in the many-caller
    /// statement (at most: a bound on its bytes).
    pub(crate) fn copies(&self) -> usize {
        self.rendering.copies(&self.form)
    }

    /// Parameters each caller binds in the many-caller statement.
    pub(crate) fn bound(&self) -> usize {
        match &self.update {
            Some(keys) => keys.bound(),
            None => self.params * self.copies(),
        }
    }

    /// Writes: where rows must go in successive statements (see
    /// [`Keys::runs`]).
    ///
    /// Where rows of other texts of its family are among them, a row that
    /// does not fit a family statement goes alone (see
    /// [`MyFamily::fits`]).
    pub(crate) fn runs(&self, rows: &[MyRow]) -> Option<Vec<usize>> {
        let keys = self.update.as_ref()?;
        match &self.family {
            Some((family, me)) if rows.iter().any(|r| r.member != *me) => {
                keys.runs(rows, Some(&|row: &MyRow| family.fits(row)))
            }
            _ => keys.runs(rows, None),
        }
    }

    /// Whether a re-learned shape is this one.
    pub(crate) fn same(&self, other: &MyKeyed) -> bool {
        self.params == other.params
            && self.sql == other.sql
            && self.rendering == other.rendering
            && self.family_id() == other.family_id()
            && self.member() == other.member()
    }

    /// The statement text for `n` callers.
    fn text(&self, n: usize) -> Arc<str> {
        if n == 1 {
            return self.sql.clone();
        }
        let mut texts = lock(&self.texts);
        Arc::clone(
            texts
                .entry(n)
                .or_insert_with(|| self.rendering.render(&self.form, n).into()),
        )
    }

    /// Runs `rows`, each caller's parameters: one as its own statement,
    /// more as the many-caller statement.
    pub(crate) async fn execute(&self, conn: &mut Client, rows: &[MyRow]) -> ChunkResult<Outcome> {
        let n = rows.len();
        if let (Some(keys), true) = (&self.update, n > 1) {
            return self.update(conn, keys, rows).await;
        }
        let text = match rows {
            [row] => self.own_sql(row)?,
            _ => self.text(n),
        };
        let stmt = super::batch::prepared(conn, &text).await?;
        let bound = if n == 1 { 1 } else { self.copies() };
        Self::check_params(&stmt, n * self.params * bound)?;
        let mut params: Vec<Value> = Vec::with_capacity(n * self.params * bound);
        for _ in 0..bound {
            params.extend(rows.iter().flat_map(|r| r.values.iter().cloned()));
        }
        let params = if params.is_empty() {
            Params::Empty
        } else {
            Params::Positional(params)
        };
        let lone_write = n == 1 && self.form.kind != KeyedKind::Read;
        let ran = if lone_write {
            conn.exec_drop(&stmt, params).await.map(|()| Vec::new())
        } else {
            conn.exec::<Row, _, _>(&stmt, params).await
        };
        let returned = match ran {
            Ok(rows) => rows,
            Err(e) => {
                conn.note_error(&e);
                if super::errors::stale(&e) {
                    let _ = conn.close(stmt).await;
                }
                return Err(read_error(e));
            }
        };
        if lone_write {
            let out = Outcome::new(conn.affected_rows(), true, conn.last_insert_id(), None);
            return Ok(vec![out]);
        }
        if n == 1 {
            return Ok(vec![Outcome::read(returned)]);
        }
        if self.form.kind == KeyedKind::Delete {
            // The statement has run: a row it cannot give to a caller
            // leaves every caller's count unknown, not failed.
            let counts = deleted_by(&returned, n).map_err(|what| {
                ChunkError::Statement(Error::new(
                    Kind::OutcomeUnknown,
                    format!("{what}: the delete ran, each caller's count is unknown"),
                ))
            })?;
            return Ok(counts
                .into_iter()
                .map(|count| Outcome::new(count, true, None, None))
                .collect());
        }
        let per_caller = match self.rendering {
            Rendering::Union => by_number(returned, n),
            Rendering::Or => by_mask(returned, n),
            Rendering::Case => Err("an update's statement returned rows"),
        }
        .map_err(|what| ChunkError::Row(Error::internal(what)))?;
        Ok(per_caller.into_iter().map(Outcome::read).collect())
    }
}

impl MyKeyed {
    /// Fails unless the prepared `stmt` takes `expected` parameters.
    fn check_params(
        stmt: &mysql_async::Statement,
        expected: usize,
    ) -> Result<(), ChunkError<Outcome>> {
        if usize::from(stmt.num_params()) == expected {
            return Ok(());
        }
        Err(ChunkError::Statement(Error::new(
            Kind::Params,
            format!(
                "the coalesced statement takes {} parameters, not {expected}",
                stmt.num_params()
            ),
        )))
    }

    /// Many callers' updates (see [`super::update`]): the many-caller
    /// statement inside a transaction, committed when its total splits over
    /// the callers one way; otherwise rolled back, and each caller's own
    /// statement run on its own, in call order.
    async fn update(&self, conn: &mut Client, keys: &Keys, rows: &[MyRow]) -> ChunkResult<Outcome> {
        let n = rows.len();
        let (text, params) = match &self.family {
            Some((family, me)) if rows.iter().any(|r| r.member != *me) => {
                let highest = rows.iter().map(|r| r.member).max().unwrap_or(0);
                family
                    .statement(highest, rows, keys.cond())
                    .ok_or_else(|| {
                        ChunkError::Statement(Error::internal("a row of a family's unknown text"))
                    })?
            }
            _ => (self.text(n), keys.params(rows)),
        };
        let stmt = super::batch::prepared(conn, &text).await?;
        Self::check_params(&stmt, params.len())?;
        match conn.query_drop("START TRANSACTION").await {
            Ok(()) => {}
            // The server would not open a transaction: each on its own.
            Err(mysql_async::Error::Server(_)) if !conn.is_disconnected() => {
                return self.one_by_one(conn, rows).await;
            }
            Err(e) => {
                conn.note_error(&e);
                return Err(ChunkError::Statement(unsent_error(e)));
            }
        }
        if let Err(e) = conn.exec_drop(&stmt, Params::Positional(params)).await {
            conn.note_error(&e);
            if !matches!(e, mysql_async::Error::Server(_)) {
                return Err(ChunkError::Statement(Error::lost_before_commit(e)));
            }
            if let Err(end) = conn.query_drop(ROLLBACK).await {
                conn.note_error(&end);
                return Err(ChunkError::Statement(Error::lost_before_commit(end)));
            }
            if super::errors::stale(&e) {
                let _ = conn.close(stmt).await;
            }
            return Err(read_error(e));
        }
        let total = conn.affected_rows();
        let matched = super::update::matched(&conn.info());
        let counts = match super::update::split(total, matched, n) {
            Some(count) => Some(vec![count; n]),
            None => self.met(conn, keys, rows, matched, total).await?,
        };
        let Some(counts) = counts else {
            if let Err(e) = conn.query_drop(ROLLBACK).await {
                conn.note_error(&e);
                return Err(ChunkError::Statement(Error::lost_before_commit(e)));
            }
            return self.one_by_one(conn, rows).await;
        };
        if let Err(e) = conn.query_drop("COMMIT AND NO CHAIN NO RELEASE").await {
            conn.note_error(&e);
            return Err(read_error(e));
        }
        Ok(counts
            .into_iter()
            .map(|count| Outcome::new(count, true, None, None))
            .collect())
    }

    /// Inside a coalesced update's transaction, after the update met
    /// `matched` rows and counted `total`: which callers' conditions the
    /// rows meet (the mask read, see [`KeyedShape::render_or`]), and each
    /// caller's count from that where it is exact (see
    /// [`super::update::counts`]). `None` where it is not, or the read
    /// failed on the server. The rows the update met are locked by it, so
    /// they are the rows the read finds; a row inserted since is seen as
    /// one more row than the update met.
    async fn met(
        &self,
        conn: &mut Client,
        keys: &Keys,
        rows: &[MyRow],
        matched: Option<u64>,
        total: u64,
    ) -> Result<Option<Vec<u64>>, ChunkError<Outcome>> {
        let Some(matched) = matched else {
            return Ok(None);
        };
        let n = rows.len();
        let text = {
            let mut texts = lock(&self.texts);
            Arc::clone(
                texts
                    .entry(MASKS | n)
                    .or_insert_with(|| self.form.render_or(n).into()),
            )
        };
        let read = async {
            let stmt = conn.prep(&*text).await?;
            conn.exec::<Row, _, _>(&stmt, Params::Positional(keys.mask_params(rows)))
                .await
        };
        let returned = match read.await {
            Ok(returned) => returned,
            Err(mysql_async::Error::Server(_)) => return Ok(None),
            Err(e) => {
                conn.note_error(&e);
                return Err(ChunkError::Statement(Error::lost_before_commit(e)));
            }
        };
        let columns = n.div_ceil(MASK_BITS);
        let mut masks = Vec::with_capacity(returned.len());
        for row in &returned {
            let mut of_row = Vec::with_capacity(columns);
            for column in 0..columns {
                match row.as_ref(column).and_then(mask) {
                    Some(m) => of_row.push(m),
                    None => return Ok(None),
                }
            }
            masks.push(of_row);
        }
        Ok(super::update::counts(&masks, n, matched, total))
    }

    /// Each of `rows` as its caller's own statement, in order.
    async fn one_by_one(&self, conn: &mut Client, rows: &[MyRow]) -> ChunkResult<Outcome> {
        let mut outs = Vec::with_capacity(rows.len());
        for row in rows {
            let out = Box::pin(self.execute(conn, std::slice::from_ref(row))).await;
            outs.push(one_outcome(out));
        }
        Err(ChunkError::Each(outs))
    }
}

/// The bit that keys an update's mask read among [`MyKeyed`]'s texts (the
/// update's own are keyed by caller count alone).
const MASKS: usize = 1 << (usize::BITS - 1);

/// Ends a coalesced update's transaction without its changes, whatever
/// the session's `completion_type`.
const ROLLBACK: &str = "ROLLBACK AND NO CHAIN NO RELEASE";

/// The value of a number column the statement added.
fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::UInt(u) => Some(*u),
        _ => None,
    }
}

/// A mask column's value: bits 0 to [`MASK_BITS`] − 1 only, each a caller.
fn mask(value: &Value) -> Option<u64> {
    number(value).filter(|m| m >> MASK_BITS == 0)
}

/// `values` as a row of `columns` (the statement's own columns, without
/// the ones it added).
fn strip(mut values: Vec<Value>, added: usize, columns: &Arc<[mysql_async::Column]>) -> Row {
    values.drain(..added);
    mysql_common::row::new_row(values, Arc::clone(columns))
}

/// The rows of a `UNION ALL` read by their callers' numbers (1-based, the
/// first column).
fn by_number(returned: Vec<Row>, n: usize) -> Result<Vec<Vec<Row>>, &'static str> {
    let mut per_caller: Vec<Vec<Row>> = (0..n).map(|_| Vec::new()).collect();
    let mut columns: Option<Arc<[mysql_async::Column]>> = None;
    for row in returned {
        let columns = columns.get_or_insert_with(|| row.columns_ref()[1..].into());
        let values = row.unwrap();
        let caller = values
            .first()
            .and_then(number)
            .and_then(|o| usize::try_from(o).ok())
            .and_then(|o| o.checked_sub(1))
            .filter(|&c| c < n)
            .ok_or("a coalesced read returned a row of no caller")?;
        per_caller[caller].push(strip(values, 1, columns));
    }
    Ok(per_caller)
}

/// The rows of an `OR` read given to every caller of their masks (one
/// column per [`MASK_BITS`] callers, first).
fn by_mask(returned: Vec<Row>, n: usize) -> Result<Vec<Vec<Row>>, &'static str> {
    let masks = n.div_ceil(MASK_BITS);
    let mut per_caller: Vec<Vec<Row>> = (0..n).map(|_| Vec::new()).collect();
    let mut columns: Option<Arc<[mysql_async::Column]>> = None;
    for row in returned {
        let columns = columns.get_or_insert_with(|| row.columns_ref()[masks..].into());
        let values = row.unwrap();
        let mut callers = Vec::new();
        for (column, value) in values.iter().take(masks).enumerate() {
            let mut mask = mask(value).ok_or("a coalesced read returned a row without its mask")?;
            while mask != 0 {
                callers.push(column * MASK_BITS + mask.trailing_zeros() as usize);
                mask &= mask - 1;
            }
        }
        if callers.is_empty() || callers.iter().any(|&c| c >= n) {
            return Err("a coalesced read returned a row of no caller");
        }
        let row = strip(values, masks, columns);
        let last = callers.len() - 1;
        for &caller in &callers[..last] {
            per_caller[caller].push(row.clone());
        }
        per_caller[callers[last]].push(row);
    }
    Ok(per_caller)
}

/// The callers' counts of a coalesced delete from its returned masks: each
/// row deleted counts for the first caller (in the statement's order, which
/// is the order of the calls) whose condition it meets. Callers' own
/// deletes run in that order would have had these counts: the first
/// deletes the row, the later ones find it gone.
fn deleted_by(returned: &[Row], n: usize) -> Result<Vec<u64>, &'static str> {
    let masks = n.div_ceil(MASK_BITS);
    let mut counts = vec![0u64; n];
    for row in returned {
        let mut first = None;
        for column in 0..masks {
            let mask = row
                .as_ref(column)
                .and_then(mask)
                .ok_or("a coalesced delete returned a row without its mask")?;
            if mask != 0 {
                first = Some(column * MASK_BITS + mask.trailing_zeros() as usize);
                break;
            }
        }
        match first.filter(|&c| c < n) {
            Some(caller) => counts[caller] += 1,
            None => return Err("a coalesced delete returned a row of no caller"),
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mysql_async::consts::ColumnType;
    use mysql_async::{Column, Row, Value};

    use super::{by_mask, deleted_by};

    /// A returned row: `masks` mask columns, then one value column `v`.
    fn row(masks: &[u64], v: i64) -> Row {
        let mut columns: Vec<Column> = (0..masks.len())
            .map(|i| {
                Column::new(ColumnType::MYSQL_TYPE_LONGLONG)
                    .with_name(format!("batchpool mask {}", i + 1).as_bytes())
            })
            .collect();
        columns.push(Column::new(ColumnType::MYSQL_TYPE_LONGLONG).with_name(b"v"));
        let mut values: Vec<Value> = masks.iter().map(|m| Value::UInt(*m)).collect();
        values.push(Value::Int(v));
        mysql_common::row::new_row(values, Arc::from(columns))
    }

    fn values(rows: &[Row]) -> Vec<i64> {
        rows.iter().map(|r| r.get::<i64, _>(0).unwrap()).collect()
    }

    #[test]
    fn a_read_row_goes_to_every_caller_of_its_mask_without_the_masks() {
        // Three callers: a row of callers 0 and 2, a row of caller 1.
        let got = by_mask(vec![row(&[0b101], 10), row(&[0b010], 11)], 3).unwrap();
        assert_eq!(
            got.iter().map(|r| values(r)).collect::<Vec<_>>(),
            vec![vec![10], vec![11], vec![10]]
        );
        assert_eq!(got[0][0].columns_ref().len(), 1);
        assert_eq!(got[0][0].columns_ref()[0].name_str(), "v");
        // 70 callers: two mask columns; bit 0 of the second is caller 63.
        let got = by_mask(vec![row(&[1 << 62, 0b1], 12), row(&[0, 1 << 6], 13)], 70).unwrap();
        assert_eq!(values(&got[62]), vec![12]);
        assert_eq!(values(&got[63]), vec![12]);
        assert_eq!(values(&got[69]), vec![13]);
        assert_eq!(got.iter().map(Vec::len).sum::<usize>(), 3);
        // A row of no caller, or of a caller past the statement's.
        assert!(by_mask(vec![row(&[0], 1)], 3).is_err());
        assert!(by_mask(vec![row(&[0b1000], 1)], 3).is_err());
        // Bit 63 names no caller (each column numbers 63).
        assert!(by_mask(vec![row(&[1 << 63, 0], 1)], 70).is_err());
    }

    #[test]
    fn a_deleted_row_counts_for_its_first_caller_only() {
        let rows = [row(&[0b110], 1), row(&[0b100], 2), row(&[0b111], 3)];
        assert_eq!(deleted_by(&rows, 3).unwrap(), vec![1, 1, 1]);
        let rows = [row(&[0, 0b11], 1), row(&[1 << 5, 1], 2)];
        let counts = deleted_by(&rows, 65).unwrap();
        assert_eq!(
            (counts[5], counts[63], counts.iter().sum::<u64>()),
            (1, 1, 2)
        );
        assert!(deleted_by(&[row(&[0], 1)], 3).is_err());
        assert!(deleted_by(&[row(&[0b1000], 1)], 3).is_err());
        assert!(deleted_by(&[row(&[1 << 63, 0], 1)], 70).is_err());
    }
}
