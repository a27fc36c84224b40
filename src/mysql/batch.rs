//! The MySQL/MariaDB backend of the engine: checks and sizes rows in the
//! caller's task, runs multi-row INSERTs as prepared statements on pooled
//! mysql_async connections, and maps the statement's result back to each
//! row.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Value};

use super::errors::{chunk_error, sent_error, stale, unsent_error};
use super::keyed::MyKeyed;
use super::manager::Session;
use super::own::OwnFailures;
use super::row::MyRow;
use super::table::{stored_functions, table_facts};
use super::{Client, Manager, MySql, Outcome};
use crate::backend::batch::{Backend, ChunkError, ChunkResult, one_outcome};
use crate::classify::{Conflict, Dialect, Form, InsertShape, Verb};
use crate::error::{Error, Kind};
use crate::explain::NotCoalesced;
use crate::sync::lock;

/// Statement text and packet headers a coalesced statement may need beyond
/// its rows' share, at most; shapes whose own text is longer are not
/// coalesced.
const MAX_RESERVE: usize = 8 << 10;

/// Used before any connection has told the real `@@max_allowed_packet`
/// (never in practice: a shape is prepared on a connection first).
const FALLBACK_PACKET: usize = 1 << 20;

/// Default [`PoolBuilder::bulk_threshold`](super::PoolBuilder::bulk_threshold).
pub(crate) const DEFAULT_BULK_THRESHOLD: usize = 2;

static NEXT_SHAPE_ID: AtomicU64 = AtomicU64::new(1);

/// A batchable statement shape, prepared once.
pub(crate) struct MyInsert {
    id: u64,
    shape: Arc<InsertShape>,
    /// Placeholders in one row, as the server counted them.
    pub(crate) params: usize,
    /// Statement-text bytes each row adds (its tuple and `, `).
    text_per_row: usize,
    /// Per-row ids are provably consecutive (see `Outcome::last_insert_id`).
    consecutive_ids: bool,
    /// Per-row ids may be read back from a `RETURNING` of the table's
    /// auto-increment column appended to the multi-row text, on a Galera
    /// node or wherever the session's increment is not known (see
    /// [`MyInsert::ids`]).
    returned_ids: Option<ReturnedIds>,
    /// The server refused a statement for its appended `RETURNING` (the
    /// column renamed, the SELECT privilege on it revoked) and ran it
    /// without: no more `RETURNING` for this shape (see
    /// [`MySql::statement`]).
    returning_refused: AtomicBool,
    /// The shape may go out as a bulk command (see [`MySql::bulk`]).
    bulk: bool,
    /// Rendered multi-row texts by row count, with and without the
    /// appended `RETURNING` (bounded by the engine's allowed statement
    /// sizes, about 20 per shape and kind).
    texts: Mutex<HashMap<(usize, bool), Arc<str>>>,
    /// The unique indexes whose violations are proven a row's own (see
    /// [`OwnFailures`]).
    own: OwnFailures,
}

/// How a shape's rows get their ids back from an appended `RETURNING`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReturnedIds {
    /// The `RETURNING` list: the auto-increment column, quoted.
    list: Box<str>,
    /// The parameter a row binds to the auto-increment column, when the
    /// tuple holds a bare `?` there: a nonzero integer bound there is the
    /// value the server must return for that row, which checks that rows
    /// and returned values are matched by position.
    bound_at: Option<usize>,
}

/// Where the per-row ids of one statement come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ids {
    /// No id is given.
    Withheld,
    /// One row: the statement is the caller's own, and the id the server
    /// reported is its id.
    Own,
    /// Consecutive from the statement's first id, this increment apart.
    Stepped(u64),
    /// Each row's auto-increment value, from the appended `RETURNING`, in
    /// VALUES order.
    Returned,
}

impl MyInsert {
    fn text(&self, rows: usize, returning: bool) -> Arc<str> {
        lock(&self.texts)
            .entry((rows, returning))
            .or_insert_with(|| {
                let list = self.returned_ids.as_ref().map(|r| &*r.list);
                self.shape.render(rows, list.filter(|_| returning)).into()
            })
            .clone()
    }

    /// Where the ids of a statement of `rows` rows on a session with
    /// `session`'s settings come from. Computed where they are provably
    /// consecutive and the session's increment is known. Otherwise read
    /// back from an appended `RETURNING` of the auto-increment column,
    /// where the shape allows it, on a session whose increment is not
    /// known (a Galera node that sets it from the cluster's membership
    /// before each command) and on any Galera node: its rows never go out
    /// as a bulk command, so the `RETURNING` costs them no faster path, as
    /// it would a statement naming the column on a single server.
    fn ids(&self, session: &Session, rows: usize) -> Ids {
        let increment = session.auto_increment_increment;
        match increment {
            Some(step) if self.consecutive_ids => return Ids::Stepped(step),
            None if self.consecutive_ids && rows == 1 => return Ids::Own,
            _ => {}
        }
        if self.returned_ids.is_some()
            && !self.returning_refused.load(Ordering::Relaxed)
            && (session.galera || increment.is_none())
        {
            return if rows == 1 { Ids::Own } else { Ids::Returned };
        }
        Ids::Withheld
    }
}

/// Whether a session's ids are read back from an appended `RETURNING`
/// where a shape allows it (see [`MyInsert::ids`]): only then is the
/// server asked whether it takes one for a shape.
fn reads_returned_ids(session: &Session) -> bool {
    session.galera || session.auto_increment_increment.is_none()
}

/// The id a single-row INSERT reports for a row whose auto-increment
/// column holds `stored` (as `INSERT ... RETURNING` sends it): the stored
/// value, whether generated or given (a negative one as the server's
/// unsigned 64-bit field carries it); `None` for 0 (mysql_async's reading
/// of a statement that set no id) and for a value of another type (a
/// `DOUBLE` auto-increment column), which is withheld.
fn stored_id(stored: &Value) -> Option<u64> {
    let id = match stored {
        Value::Int(i) => *i as u64,
        Value::UInt(u) => *u,
        Value::Bytes(b) => {
            let text = std::str::from_utf8(b).ok()?;
            text.parse::<u64>()
                .ok()
                .or_else(|| text.parse::<i64>().ok().map(|i| i as u64))?
        }
        _ => return None,
    };
    (id != 0).then_some(id)
}

/// The integer `v` binds, when it is bound as a number; `None` for
/// anything else (text, NULL).
fn bound_integer(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) => Some(i128::from(*u)),
        _ => None,
    }
}

/// The integer the server returned, as [`bound_integer`] reads it.
fn returned_integer(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) => Some(i128::from(*u)),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// `text` prepared (from the connection's cache) on a connection still
/// open: nothing was sent if this fails.
pub(super) async fn prepared(
    conn: &mut Client,
    text: &str,
) -> Result<mysql_async::Statement, ChunkError<Outcome>> {
    let stmt = match conn.prep(text).await {
        Ok(stmt) => stmt,
        Err(e) => {
            conn.note_error(&e);
            return Err(ChunkError::Statement(unsent_error(e)));
        }
    };
    if conn.is_disconnected() {
        return Err(ChunkError::Statement(Error::closed_before_send()));
    }
    Ok(stmt)
}

/// Turns one caller's parameters into a row of `shape`, checking the
/// count. Runs in the caller's task.
pub(crate) fn encode(shape: &MyShape, params: Params) -> Result<MyRow, Error> {
    let (per_row, text_per_row, copies, member) = match shape {
        MyShape::Insert(s) => (s.params, s.text_per_row, 1, 0),
        MyShape::Keyed(k) => (k.params, k.text_per_row, k.copies(), k.member()),
    };
    let values = match params {
        Params::Empty => Vec::new(),
        Params::Positional(values) => values,
        Params::Named(_) => {
            return Err(Error::params(
                "named parameters given, but this statement uses `?` placeholders",
            ));
        }
    };
    if values.len() != per_row {
        return Err(Error::params(format!(
            "statement takes {} parameter{}, {} given",
            per_row,
            if per_row == 1 { "" } else { "s" },
            values.len()
        )));
    }
    let data: usize = values
        .iter()
        .map(|v| usize::try_from(v.bin_len()).unwrap_or(usize::MAX))
        .fold(0usize, usize::saturating_add);
    let bytes = data
        .saturating_add(2 * values.len() + values.len().div_ceil(8))
        .saturating_mul(copies)
        .saturating_add(text_per_row);
    Ok(MyRow {
        values,
        bytes,
        member,
    })
}

/// What learning a shape found out about its ids.
struct Learned {
    /// See [`MyInsert::consecutive_ids`].
    consecutive_ids: bool,
    /// See [`MyInsert::returned_ids`].
    returned_ids: Option<ReturnedIds>,
}

impl MySql {
    /// Asks the server whether `sql` may be coalesced, and how its rows'
    /// ids can be known; the reason when it runs on its own.
    async fn learn(
        &self,
        conn: &mut Client,
        sql: &str,
        shape: &InsertShape,
        upsert: bool,
    ) -> Result<Result<Learned, NotCoalesced>, Error> {
        let declined = |why: String| Ok(Err(NotCoalesced::Declined(why)));
        let stmt = match conn.prep(sql).await {
            Ok(stmt) => stmt,
            Err(e) => {
                conn.note_error(&e);
                return Err(unsent_error(e));
            }
        };
        if usize::from(stmt.num_params()) != shape.params_per_row {
            // The server counts the placeholders differently from the
            // classifier (named `:params`): do not rewrite it.
            return declined(format!(
                "the server counts {} parameters where the text shows {}",
                stmt.num_params(),
                shape.params_per_row
            ));
        }
        // Only transactional tables: a failed multi-row statement must leave
        // nothing behind, so its rows can be re-run to isolate the bad one.
        let Some(facts) = table_facts(conn, &shape.table).await? else {
            return declined(format!(
                "table {} is not one base table found in information_schema \
                 (temporary table, view, no access?)",
                shape.table
            ));
        };
        if !facts.transactional {
            return declined(format!(
                "table {} uses the non-transactional {} engine: a failed multi-row \
                 statement could leave some of its rows behind",
                shape.table, facts.engine
            ));
        }
        if facts.triggers > 0 {
            return declined(format!(
                "table {} has triggers: what they do outside the transaction (a \
                 non-transactional table) would be repeated when the rows of a failed \
                 multi-row statement are re-run, and they may change rows",
                shape.table
            ));
        }
        let functions = stored_functions(conn, &shape.calls).await?;
        if !functions.is_empty() {
            return declined(format!(
                "the VALUES tuple calls stored functions ({}), which a re-run after a failed \
                 multi-row statement could repeat",
                functions.join(", ")
            ));
        }
        if !conn.session.strict {
            return declined(
                "the session's sql_mode is not strict: a multi-row INSERT would store '' or 0 \
                 for a NULL that a single-row INSERT rejects"
                    .into(),
            );
        }
        // A coalesced statement is a "simple insert" (its VALUES list says
        // how many rows it inserts): InnoDB reserves that many values for it
        // at once, under the table's auto-increment lock (lock mode 0) or
        // mutex (modes 1 and 2), each the session's increment after the
        // last. Only statements whose row count is not known in advance
        // (INSERT ... SELECT, LOAD DATA) take their values in pieces that
        // other statements' can interleave with in mode 2.
        let lock_mode = self.server.get().and_then(|s| s.autoinc_lock_mode);
        let consecutive_ids = !upsert
            && facts.engine.eq_ignore_ascii_case("InnoDB")
            && matches!(lock_mode, Some(0..=2))
            && facts.triggers == 0
            && match (&facts.auto_increment, &shape.columns) {
                (Some(auto), Some(columns)) => {
                    let auto = auto.to_lowercase();
                    !columns.iter().any(|c| c.to_lowercase() == auto)
                }
                _ => false,
            };
        let returned_ids = match &facts.auto_increment {
            Some(auto) if !upsert && reads_returned_ids(&conn.session) => {
                self.returning_ids(conn, shape, auto).await?
            }
            _ => None,
        };
        Ok(Ok(Learned {
            consecutive_ids,
            returned_ids,
        }))
    }

    /// Whether the rows of `shape`, a plain INSERT into a table whose
    /// auto-increment column is `auto`, can get their ids from a
    /// `RETURNING` of that column appended to the multi-row statement: the
    /// id a single-row INSERT reports is the value it stored in that
    /// column, generated or given (0 when it stored 0), and MariaDB (10.5
    /// and later) returns the rows of a multi-row `INSERT ... RETURNING` in
    /// VALUES order. Not for a statement with a `RETURNING` of its own
    /// (whose single-row statement reports no id), nor for one that may
    /// give the column a value and calls `LAST_INSERT_ID(expr)` (a row that
    /// generates no id reports the `expr` of that call instead of its
    /// value). The server is asked by preparing the text with the
    /// `RETURNING`: a server that refuses it (MySQL, MariaDB before 10.5)
    /// gives no ids this way.
    async fn returning_ids(
        &self,
        conn: &mut Client,
        shape: &InsertShape,
        auto: &str,
    ) -> Result<Option<ReturnedIds>, Error> {
        // The tuple's position of the column, when the statement names its
        // columns; without a list the tuple holds every column, in the
        // table's order, which is not read here.
        let lower = auto.to_lowercase();
        let named_at = shape
            .columns
            .as_ref()
            .map(|columns| columns.iter().position(|c| c.to_lowercase() == lower));
        let may_give = named_at.is_none_or(|at| at.is_some());
        let sets_id = shape
            .calls
            .iter()
            .any(|f| f.eq_ignore_ascii_case("last_insert_id"));
        if shape.returning || (may_give && sets_id) {
            return Ok(None);
        }
        let list = format!("`{}`", auto.replace('`', "``"));
        // The two-row text: the one a statement of two rows uses, so the
        // connection's statement cache keeps it.
        if let Err(e) = conn.prep(shape.render(2, Some(&list))).await {
            conn.note_error(&e);
            return match e {
                // The session ended: ask again on another connection.
                _ if conn.broken => Err(unsent_error(e)),
                mysql_async::Error::Server(_) => Ok(None),
                e => Err(unsent_error(e)),
            };
        }
        let bound_at = named_at
            .flatten()
            .and_then(|at| shape.tuple_params.get(at).copied().flatten());
        Ok(Some(ReturnedIds {
            list: list.into(),
            bound_at,
        }))
    }

    fn packet(&self) -> usize {
        self.server
            .get()
            .map_or(FALLBACK_PACKET, |s| s.max_allowed_packet)
    }

    /// Bytes of a packet kept for the statement's fixed text and headers.
    fn reserve(&self) -> usize {
        (self.packet() / 4).min(MAX_RESERVE)
    }

    /// Most bytes one row may take: the server's packet limit less the
    /// reserve.
    pub(crate) fn row_limit(&self) -> (usize, usize) {
        let packet = self.packet();
        (packet.saturating_sub(self.reserve()), packet)
    }

    /// Splits the statement's total affected rows over its `n` rows: the
    /// per-row count when only one split is possible.
    fn split_count(&self, shape: &InsertShape, n: u64, total: u64) -> Option<u64> {
        match (shape.verb, &shape.conflict) {
            (Verb::Insert, Conflict::None) => (total == n).then_some(1),
            (Verb::InsertIgnore, Conflict::None) => match total {
                0 => Some(0),
                t if t == n => Some(1),
                _ => None,
            },
            (Verb::Replace, _) => (total == n).then_some(1),
            (_, Conflict::DuplicateKeyUpdate) => match total {
                0 if !self.found_rows => Some(0),
                t if t == n && self.found_rows => Some(1),
                t if t == n.saturating_mul(2) => Some(2),
                _ => None,
            },
            _ => None,
        }
    }

    fn outputs(
        &self,
        shape: &MyInsert,
        rows: &[MyRow],
        written: Written,
        ids: Ids,
    ) -> Vec<Outcome> {
        let n = rows.len();
        // With RETURNING the server reports no affected rows (ROW_COUNT() is
        // -1): a plain INSERT returned one row per row it wrote.
        let plain = shape.shape.verb == Verb::Insert && shape.shape.conflict == Conflict::None;
        let count = if shape.shape.returning || ids == Ids::Returned {
            (plain && written.returned.len() == n).then_some(1)
        } else {
            self.split_count(&shape.shape, n as u64, written.affected)
        };
        let exact = count.is_some();
        let first = written.last_insert_id.filter(|&first| first > 0);
        let mut own_ids: Vec<Option<u64>> = match ids {
            _ if !exact => Vec::new(),
            Ids::Withheld => Vec::new(),
            // One row: the id the server reported is its own, whatever the
            // session's increment.
            Ids::Own if n == 1 => vec![first],
            Ids::Own => Vec::new(),
            Ids::Stepped(step) => (0..n as u64)
                .map(|i| first.and_then(|f| step.checked_mul(i).and_then(|d| f.checked_add(d))))
                .collect(),
            Ids::Returned => match &shape.returned_ids {
                // One value per returned row: the auto-increment column.
                Some(how) if written.returned.iter().all(|r| r.len() == 1) => {
                    let stored: Vec<Option<&Value>> =
                        written.returned.iter().map(|r| r.as_ref(0)).collect();
                    ids_from_returned(how, rows, &stored)
                }
                _ => Vec::new(),
            },
        };
        own_ids.resize(n, None);
        // RETURNING rows come in VALUES order, one per written row: a
        // caller's own only when every row wrote one, and only the
        // caller's own RETURNING (never the one the pool appended).
        let mut returned = if exact && shape.shape.returning && written.returned.len() == n {
            written.returned.into_iter().map(Some).collect()
        } else {
            Vec::new()
        };
        returned.resize_with(n, || None);
        returned
            .into_iter()
            .zip(own_ids)
            .map(|(row, id)| Outcome::new(count.unwrap_or(1), exact, id, row))
            .collect()
    }
}

/// Each row's id from the appended `RETURNING` of its auto-increment
/// column: the `i`-th returned row is the `i`-th row of VALUES. Every id is
/// withheld if the rows do not bear that out: not one returned row per
/// row, or a row that bound a nonzero integer to the column (which a
/// strict session stores as it is, or refuses) returned another value.
fn ids_from_returned(
    how: &ReturnedIds,
    rows: &[MyRow],
    stored: &[Option<&Value>],
) -> Vec<Option<u64>> {
    if stored.len() != rows.len() {
        return Vec::new();
    }
    if let Some(at) = how.bound_at {
        let agrees = rows.iter().zip(stored).all(|(row, stored)| {
            match row.values.get(at).and_then(bound_integer) {
                Some(bound) if bound != 0 => stored.and_then(returned_integer) == Some(bound),
                _ => true,
            }
        });
        if !agrees {
            return Vec::new();
        }
    }
    stored.iter().map(|v| v.and_then(stored_id)).collect()
}

/// What one multi-row statement reported.
struct Written {
    affected: u64,
    last_insert_id: Option<u64>,
    returned: Vec<Row>,
}

/// The INSERT side of the backend (see `Backend`'s methods of the same
/// names).
impl MySql {
    fn same_insert(old: &MyInsert, new: &MyInsert) -> bool {
        old.params == new.params
            && old.consecutive_ids == new.consecutive_ids
            && old.returned_ids == new.returned_ids
            // Learned anew: its RETURNING is asked about again.
            && !old.returning_refused.load(Ordering::Relaxed)
            && old.bulk == new.bulk
    }

    fn any_insert(&self, shape: &MyInsert, rows: usize) -> bool {
        shape.bulk && self.bulk_threshold.is_some_and(|min| rows >= min)
    }

    fn bulk_insert(&self, shape: &MyInsert, rows: &[MyRow]) -> bool {
        shape.bulk
            && self.bulk_threshold.is_some_and(|min| rows.len() >= min)
            && bulk_fits(shape, rows, self.bulk_packet())
    }

    async fn prepare_insert(
        &self,
        conn: &mut Client,
        sql: &str,
        shape: Arc<InsertShape>,
    ) -> Result<Result<MyInsert, NotCoalesced>, Error> {
        let upsert = shape.verb != Verb::Insert || shape.conflict != Conflict::None;
        if upsert && !self.coalesce_upserts {
            return Ok(Err(NotCoalesced::Declined(
                "INSERT IGNORE / REPLACE / ON DUPLICATE KEY UPDATE are not coalesced \
                 (PoolBuilder::coalesce_upserts)"
                    .into(),
            )));
        }
        let one = shape.render(1, None).len();
        let text_per_row = shape.render(2, None).len().saturating_sub(one);
        let Learned {
            consecutive_ids,
            returned_ids,
        } = match self.learn(conn, sql, &shape, upsert).await? {
            Ok(learned) => learned,
            Err(reason) => return Ok(Err(reason)),
        };
        let appended = returned_ids
            .as_ref()
            .map_or(0, |r| " RETURNING ".len() + r.list.len());
        let fixed = one
            .saturating_sub(text_per_row.saturating_sub(2))
            .saturating_add(appended);
        if fixed.saturating_add(64) > self.reserve() {
            return Ok(Err(NotCoalesced::Declined(format!(
                "the statement text ({fixed} bytes) leaves no room for rows in the \
                 server's max_allowed_packet"
            ))));
        }
        let bulk = self.bulk_threshold.is_some()
            && !consecutive_ids
            && shape.verb == Verb::Insert
            && shape.conflict == Conflict::None
            && !shape.returning
            && shape.params_per_row > 0
            && shape.tuple_params.iter().all(Option::is_some)
            && self.bulk_server(conn).await?;
        Ok(Ok(MyInsert {
            id: NEXT_SHAPE_ID.fetch_add(1, Ordering::Relaxed),
            params: shape.params_per_row,
            shape,
            text_per_row,
            consecutive_ids,
            returned_ids,
            returning_refused: AtomicBool::new(false),
            bulk,
            texts: Mutex::new(HashMap::new()),
            own: OwnFailures::default(),
        }))
    }

    async fn execute_insert(
        &self,
        conn: &mut Client,
        shape: &MyInsert,
        rows: &[MyRow],
    ) -> ChunkResult<Outcome> {
        if rows.len() == 1 || conn.session.strict {
            if self.bulk_insert(shape, rows) {
                return self.bulk(conn, shape, rows).await;
            }
            return self.statement(conn, shape, rows).await;
        }
        // This session would let a multi-row INSERT store what single-row
        // ones reject (see `Session::strict`): one statement each.
        let mut outs = Vec::with_capacity(rows.len());
        for row in rows {
            let out = self.statement(conn, shape, std::slice::from_ref(row)).await;
            outs.push(one_outcome(out));
        }
        Err(ChunkError::Each(outs))
    }
}

impl MySql {
    /// The prepared statement of `rows` rows of `shape` (from the
    /// connection's cache), on a connection still open: nothing was sent
    /// if this fails.
    async fn ready(
        conn: &mut Client,
        shape: &MyInsert,
        rows: usize,
    ) -> Result<mysql_async::Statement, ChunkError<Outcome>> {
        prepared(conn, &shape.text(rows, false)).await
    }

    /// The error of `rows` run as `stmt`, which the server refused or did
    /// not answer. A duplicate key proven the named row's own (see
    /// [`OwnFailures`]) is that row's failure ([`ChunkError::RowFailed`]).
    async fn failed(
        conn: &mut Client,
        stmt: mysql_async::Statement,
        shape: &MyInsert,
        rows: &[MyRow],
        e: mysql_async::Error,
    ) -> ChunkError<Outcome> {
        conn.note_error(&e);
        if stale(&e) {
            // Nothing ran: prepare afresh next time.
            let _ = conn.close(stmt).await;
        }
        let server = match &e {
            mysql_async::Error::Server(se) => Some((se.code, se.message.clone())),
            _ => None,
        };
        let values: Vec<&[Value]> = rows.iter().map(|r| r.values.as_slice()).collect();
        match chunk_error(e, &shape.shape, &values) {
            ChunkError::RowAt(at, err) => match server {
                Some((code, message))
                    if !conn.broken
                        && shape
                            .own
                            .proven(conn, &shape.shape, (code, &message), rows, at)
                            .await =>
                {
                    ChunkError::RowFailed(at, err)
                }
                _ => ChunkError::RowAt(at, err),
            },
            other => other,
        }
    }

    /// Runs `rows` as one multi-row statement.
    ///
    /// A statement carrying the pool's own `RETURNING` that the server
    /// refuses for it (1054: the column was renamed; 1142, 1143: the
    /// session may no longer read it), when preparing it or before running
    /// anything, runs again at once without it, its rows without ids: the
    /// caller's own statement has no `RETURNING` and would not be refused
    /// so. The shape then appends none any more, unless the statement
    /// without it is refused alike (the INSERT itself is).
    async fn statement(
        &self,
        conn: &mut Client,
        shape: &MyInsert,
        rows: &[MyRow],
    ) -> ChunkResult<Outcome> {
        let ids = shape.ids(&conn.session, rows.len());
        let refusal = match self.attempt(conn, shape, rows, ids).await {
            Ok(outs) => return Ok(outs),
            Err(refusal) => refusal,
        };
        if ids == Ids::Returned && refusal.may_be_the_returning(conn) {
            shape.returning_refused.store(true, Ordering::Relaxed);
            if let Refusal::Run(stmt, _) = refusal {
                let _ = conn.close(stmt).await;
            }
            let ids = shape.ids(&conn.session, rows.len());
            return match self.attempt(conn, shape, rows, ids).await {
                Ok(outs) => Ok(outs),
                Err(again) => {
                    if again.may_be_the_returning(conn) {
                        shape.returning_refused.store(false, Ordering::Relaxed);
                    }
                    Err(Self::settle(conn, shape, rows, again).await)
                }
            };
        }
        Err(Self::settle(conn, shape, rows, refusal).await)
    }

    /// Sends `rows` as one multi-row statement whose ids come from `ids`:
    /// their outcomes, or why there are none.
    async fn attempt(
        &self,
        conn: &mut Client,
        shape: &MyInsert,
        rows: &[MyRow],
        ids: Ids,
    ) -> Result<Vec<Outcome>, Refusal> {
        let n = rows.len();
        let appended = ids == Ids::Returned;
        let stmt = match conn.prep(&*shape.text(n, appended)).await {
            Ok(stmt) => stmt,
            Err(e) => return Err(Refusal::Prepare(e)),
        };
        if conn.is_disconnected() {
            return Err(Refusal::Chunk(ChunkError::Statement(
                Error::closed_before_send(),
            )));
        }
        if usize::from(stmt.num_params()) != n * shape.params {
            return Err(Refusal::Chunk(ChunkError::Statement(Error::new(
                Kind::Params,
                format!(
                    "the {n}-row statement of shape {} takes {} parameters, not {}",
                    shape.id,
                    stmt.num_params(),
                    n * shape.params
                ),
            ))));
        }
        let params = rewrite_params(rows, shape.params);
        let returning = shape.shape.returning || appended;
        let run = async {
            let mut result = conn.exec_iter(&stmt, Params::Positional(params)).await?;
            let returned: Vec<Row> = if returning {
                result.collect().await?
            } else {
                Vec::new()
            };
            let written = Written {
                affected: result.affected_rows(),
                last_insert_id: result.last_insert_id(),
                returned,
            };
            result.drop_result().await?;
            Ok::<_, mysql_async::Error>(written)
        };
        match run.await {
            Ok(written) => Ok(self.outputs(shape, rows, written, ids)),
            Err(e) => Err(Refusal::Run(stmt, e)),
        }
    }

    /// The error the engine gets for `rows` after `refusal`.
    async fn settle(
        conn: &mut Client,
        shape: &MyInsert,
        rows: &[MyRow],
        refusal: Refusal,
    ) -> ChunkError<Outcome> {
        match refusal {
            Refusal::Chunk(e) => e,
            // Nothing was sent.
            Refusal::Prepare(e) => {
                conn.note_error(&e);
                ChunkError::Statement(unsent_error(e))
            }
            Refusal::Run(stmt, e) => Self::failed(conn, stmt, shape, rows, e).await,
        }
    }
}

/// Why an attempt at a multi-row statement gave no outcomes.
enum Refusal {
    /// The error as the engine takes it.
    Chunk(ChunkError<Outcome>),
    /// The server refused to prepare the text: nothing was sent.
    Prepare(mysql_async::Error),
    /// The statement met this error when it ran.
    Run(mysql_async::Statement, mysql_async::Error),
}

impl Refusal {
    /// Whether the server refused the statement in a way its `RETURNING`
    /// alone may cause (see [`refuses_returning`]), on a session that
    /// goes on.
    fn may_be_the_returning(&self, conn: &mut Client) -> bool {
        let e = match self {
            Refusal::Prepare(e) | Refusal::Run(_, e) => e,
            Refusal::Chunk(_) => return false,
        };
        conn.note_error(e);
        !conn.broken && refuses_returning(e)
    }
}

/// Whether the server refused a statement in a way its `RETURNING` alone
/// may cause, before running anything: an unknown column (1054), or no
/// privilege to read the table or the column (1142, 1143).
fn refuses_returning(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(se) if matches!(se.code, 1054 | 1142 | 1143))
}

/// The parameters of `rows`' multi-row statement: every row's values, in
/// order (cloned: a failed statement's rows are run again).
pub(crate) fn rewrite_params(rows: &[MyRow], per_row: usize) -> Vec<Value> {
    let mut params = Vec::with_capacity(rows.len() * per_row);
    for row in rows {
        params.extend(row.values.iter().cloned());
    }
    params
}

/// The parameter sets of `rows`' bulk command, one per row (cloned, as
/// [`rewrite_params`]).
pub(crate) fn bulk_params(rows: &[MyRow]) -> impl ExactSizeIterator<Item = Params> + Send + '_ {
    rows.iter().map(|r| Params::Positional(r.values.clone()))
}

/// The binary protocol's kind of a value: a bulk command sends one type per
/// placeholder, so every non-NULL value bound to it must be of one kind.
fn kind(v: &Value) -> u8 {
    match v {
        Value::NULL => 0,
        Value::Bytes(_) => 1,
        Value::Int(_) => 2,
        Value::UInt(_) => 3,
        Value::Float(_) => 4,
        Value::Double(_) => 5,
        Value::Date(..) => 6,
        Value::Time(..) => 7,
    }
}

/// Whether `rows` of `shape` can share one bulk command: every placeholder
/// gets values of one kind (or NULL), and the command fits one packet of
/// `packet` bytes, so mysql_async sends it as one command (it splits larger
/// ones).
pub(crate) fn bulk_fits(shape: &MyInsert, rows: &[MyRow], packet: usize) -> bool {
    let mut narrow = [0u8; 64];
    let mut wide = Vec::new();
    let kinds: &mut [u8] = if shape.params <= narrow.len() {
        &mut narrow[..shape.params]
    } else {
        wide.resize(shape.params, 0u8);
        &mut wide
    };
    // Command byte, statement id, flags, and a type per placeholder.
    let mut bytes = 7 + 2 * shape.params;
    for row in rows {
        for (k, v) in kinds.iter_mut().zip(&row.values) {
            let vk = kind(v);
            if vk != 0 {
                if *k == 0 {
                    *k = vk;
                } else if *k != vk {
                    return false;
                }
            }
            // An indicator byte, then the value.
            bytes = bytes.saturating_add(1 + usize::try_from(v.bin_len()).unwrap_or(usize::MAX));
        }
    }
    bytes <= packet.saturating_sub(4)
}

impl MySql {
    /// The packet limit mysql_async splits bulk commands by: the URL's
    /// `max_allowed_packet` when it is set, else the server's.
    fn bulk_packet(&self) -> usize {
        self.driver_packet
            .map_or(self.packet(), |p| p.min(self.packet()))
    }

    /// Whether the server runs MariaDB's `COM_STMT_BULK_EXECUTE`, asked
    /// once per pool. mysql_async's `exec_batch` sends the bulk command
    /// only when the server offers it, and otherwise runs the rows one
    /// statement each (rows before a failing one would commit): so the
    /// answer must come from the server, not from a version string. The
    /// probe is a bulk `DO ?` of two rows, which a server that runs bulk
    /// commands refuses before running anything (1295: `DO` cannot be
    /// bulk-executed), and which any other server runs as two harmless
    /// `DO`s. A server (or a proxy) that refuses the probe some other way
    /// gets the multi-row INSERT; only a lost connection fails the learning
    /// (and the next learning asks again).
    ///
    /// A Galera node never gets bulk commands, whatever it runs: see
    /// [`galera_node`].
    async fn bulk_server(&self, conn: &mut Client) -> Result<bool, Error> {
        self.bulk_server
            .get_or_try_init(|| async {
                if galera_node(conn).await? {
                    return Ok(false);
                }
                let stmt = match conn.prep("DO ?").await {
                    Ok(stmt) => stmt,
                    Err(mysql_async::Error::Server(_)) => return Ok(false),
                    Err(e) => {
                        conn.note_error(&e);
                        return Err(unsent_error(e));
                    }
                };
                let probe = conn.exec_batch(&stmt, [(1u8,), (2u8,)]).await;
                let _ = conn.close(stmt).await;
                match probe {
                    Ok(()) => Ok(false),
                    Err(e) => {
                        conn.note_error(&e);
                        match e {
                            // The session ended (killed, shutdown): ask
                            // again on another connection.
                            _ if conn.broken => Err(sent_error(e)),
                            mysql_async::Error::Server(se) => Ok(se.code == 1295),
                            e => Err(sent_error(e)),
                        }
                    }
                }
            })
            .await
            .copied()
    }

    /// Runs `rows` as one bulk command: the one-row INSERT, prepared once,
    /// executed for every row's values. MariaDB runs it as one statement:
    /// all of it commits, or nothing (the engine then re-runs the rows
    /// apart, as for a multi-row INSERT).
    async fn bulk(
        &self,
        conn: &mut Client,
        shape: &MyInsert,
        rows: &[MyRow],
    ) -> ChunkResult<Outcome> {
        let stmt = Self::ready(conn, shape, 1).await?;
        if usize::from(stmt.num_params()) != shape.params {
            // Not what the shape was learned as: the multi-row INSERT
            // (which checks its own statement).
            return self.statement(conn, shape, rows).await;
        }
        match conn.exec_batch(&stmt, bulk_params(rows)).await {
            Ok(()) => {
                // One OK for the command: its rows in all.
                let n = rows.len();
                let exact = conn.affected_rows() == n as u64;
                Ok((0..n).map(|_| Outcome::new(1, exact, None, None)).collect())
            }
            Err(e) => Err(Self::failed(conn, stmt, shape, rows, e).await),
        }
    }
}

/// Whether the server is a Galera cluster node (`@@wsrep_on` ON, globally
/// or in this session): its writes commit only once the cluster certifies
/// them. MariaDB answers a bulk command (`COM_STMT_BULK_EXECUTE`) on such a
/// node with an OK for every row even when certification threw its write
/// set away and none of its rows exists on any node, so the pool cannot
/// vouch for an acknowledgement it got that way. A multi-row INSERT that
/// loses certification fails as a whole (1213 after the server's own
/// autocommit retries, or the error its retry met), like any failed
/// statement. A server without the variable (MySQL, a MariaDB built without
/// wsrep) is no Galera node; only a lost connection fails the question.
async fn galera_node(conn: &mut Client) -> Result<bool, Error> {
    let on: Result<Option<(Option<String>, Option<String>)>, _> = conn
        .query_first("SELECT @@GLOBAL.wsrep_on, @@SESSION.wsrep_on")
        .await;
    match on {
        Ok(row) => Ok(row.is_some_and(|(global, session)| {
            [global, session]
                .iter()
                .flatten()
                .any(|v| v == "1" || v.eq_ignore_ascii_case("ON"))
        })),
        Err(mysql_async::Error::Server(_)) => Ok(false),
        Err(e) => {
            conn.note_error(&e);
            Err(unsent_error(e))
        }
    }
}

#[cfg(feature = "bench")]
impl MyInsert {
    /// The shape as [`MySql::prepare_shape`] makes it, without asking a
    /// server (the `engine` bench; no consecutive ids).
    pub(crate) fn unlearned(shape: Arc<InsertShape>) -> MyInsert {
        let one = shape.render(1, None).len();
        MyInsert {
            id: 0,
            params: shape.params_per_row,
            text_per_row: shape.render(2, None).len().saturating_sub(one),
            shape,
            consecutive_ids: false,
            returned_ids: None,
            returning_refused: AtomicBool::new(false),
            bulk: true,
            texts: Mutex::new(HashMap::new()),
            own: OwnFailures::default(),
        }
    }
}

/// A batchable statement shape, prepared once.
pub(crate) enum MyShape {
    /// A single-row INSERT.
    Insert(MyInsert),
    /// A keyed read or delete.
    Keyed(MyKeyed),
}

#[cfg(feature = "bench")]
impl MyShape {
    /// An INSERT shape as [`MySql::prepare_shape`] makes it, without
    /// asking a server (the `engine` bench).
    pub(crate) fn unlearned(shape: Arc<InsertShape>) -> MyShape {
        MyShape::Insert(MyInsert::unlearned(shape))
    }

    /// Placeholders in one row.
    pub(crate) fn params(&self) -> usize {
        match self {
            MyShape::Insert(s) => s.params,
            MyShape::Keyed(k) => k.params,
        }
    }

    /// The INSERT shape, if it is one.
    pub(crate) fn insert(&self) -> Option<&MyInsert> {
        match self {
            MyShape::Insert(s) => Some(s),
            MyShape::Keyed(_) => None,
        }
    }
}

impl Backend for MySql {
    const DIALECT: Dialect = Dialect::MySql;

    type Connections = deadpool::managed::Pool<Manager>;
    type Row = MyRow;
    type Output = Outcome;
    type Shape = MyShape;

    fn family(shape: &MyShape) -> Option<u64> {
        match shape {
            MyShape::Keyed(k) => k.family_id(),
            MyShape::Insert(_) => None,
        }
    }

    fn same_shape(old: &MyShape, new: &MyShape) -> bool {
        match (old, new) {
            (MyShape::Insert(a), MyShape::Insert(b)) => Self::same_insert(a, b),
            (MyShape::Keyed(a), MyShape::Keyed(b)) => a.same(b),
            _ => false,
        }
    }

    fn any_size(&self, shape: &MyShape, rows: usize) -> bool {
        matches!(shape, MyShape::Insert(s) if self.any_insert(s, rows))
    }

    fn runs(&self, shape: &MyShape, rows: &[MyRow]) -> Option<Vec<usize>> {
        match shape {
            MyShape::Keyed(k) => k.runs(rows),
            MyShape::Insert(_) => None,
        }
    }

    fn uses_bulk(&self, shape: &MyShape, rows: &[MyRow]) -> bool {
        matches!(shape, MyShape::Insert(s) if self.bulk_insert(s, rows))
    }

    fn max_statement_bytes(&self) -> usize {
        self.row_limit().0
    }

    fn bound_params(shape: &MyShape) -> Option<usize> {
        match shape {
            MyShape::Keyed(k) => Some(k.bound()),
            MyShape::Insert(_) => None,
        }
    }

    fn connections(&self) -> &deadpool::managed::Pool<Manager> {
        &self.pool
    }

    async fn fingerprint(&self, conn: &mut Client, form: &Form) -> Result<Option<String>, Error> {
        let table = super::table::fingerprint(conn, form.table(), !form.calls().is_empty()).await?;
        // What the learn step reads of the session and the server besides
        // the table: the session's strictness (asked on each connection)
        // and the auto-increment lock mode.
        let lock_mode = self.server.get().and_then(|s| s.autoinc_lock_mode);
        Ok(table.map(|t| format!("{t}|{}|{lock_mode:?}", conn.session.strict)))
    }

    async fn prepare_shape(
        &self,
        conn: &mut Client,
        sql: &str,
        form: Form,
    ) -> Result<Result<MyShape, NotCoalesced>, Error> {
        Ok(match form {
            Form::Insert(shape) => self
                .prepare_insert(conn, sql, shape)
                .await?
                .map(MyShape::Insert),
            Form::Keyed(shape) => MyKeyed::learn(conn, sql, shape, &self.families)
                .await?
                .map(MyShape::Keyed),
        })
    }

    async fn execute<'a>(
        &'a self,
        conn: &'a mut Client,
        shape: &'a MyShape,
        rows: &'a [MyRow],
    ) -> ChunkResult<Outcome> {
        match shape {
            MyShape::Insert(s) => self.execute_insert(conn, s, rows).await,
            MyShape::Keyed(k) => k.execute(conn, rows).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    use mysql_async::Value;

    use super::{Ids, MyInsert, MyRow, ReturnedIds, ids_from_returned, stored_id};
    use crate::classify::{Dialect, classify};
    use crate::mysql::manager::{Readiness, Session};

    fn shape(sql: &str, consecutive_ids: bool, returned: bool) -> MyInsert {
        let shape = classify(Dialect::MySql, sql)
            .shape()
            .expect("batchable")
            .clone();
        MyInsert {
            id: 0,
            params: shape.params_per_row,
            text_per_row: 0,
            shape,
            consecutive_ids,
            returned_ids: returned.then(|| ReturnedIds {
                list: "`id`".into(),
                bound_at: None,
            }),
            returning_refused: AtomicBool::new(false),
            bulk: false,
            texts: Mutex::new(HashMap::new()),
            own: super::OwnFailures::default(),
        }
    }

    fn session(increment: Option<u64>, galera: bool) -> Session {
        Session {
            auto_increment_increment: increment,
            strict: true,
            statement_limit: None,
            readiness: Readiness::Ready,
            galera,
        }
    }

    #[test]
    fn ids_come_from_the_stride_where_it_is_known_else_from_returning() {
        let sql = "INSERT INTO t (v) VALUES (?)";
        let both = shape(sql, true, true);
        // One server, or a Galera node whose sessions keep their increment.
        assert_eq!(both.ids(&session(Some(3), false), 5), Ids::Stepped(3));
        assert_eq!(both.ids(&session(Some(3), true), 5), Ids::Stepped(3));
        // A Galera node that sets the increment before each command.
        assert_eq!(both.ids(&session(None, true), 5), Ids::Returned);
        assert_eq!(both.ids(&session(None, true), 1), Ids::Own);
        // No RETURNING on this server: a lone row's id is still its own.
        let stepped = shape(sql, true, false);
        assert_eq!(stepped.ids(&session(None, true), 5), Ids::Withheld);
        assert_eq!(stepped.ids(&session(None, true), 1), Ids::Own);
        // The auto-increment column named: read back on a Galera node
        // only (a single server keeps the bulk command for it).
        let named = shape("INSERT INTO t (id, v) VALUES (?, ?)", false, true);
        assert_eq!(named.ids(&session(Some(1), false), 5), Ids::Withheld);
        assert_eq!(named.ids(&session(Some(2), true), 5), Ids::Returned);
        assert_eq!(named.ids(&session(None, true), 5), Ids::Returned);
        assert_eq!(named.ids(&session(None, true), 1), Ids::Own);
        let neither = shape(sql, false, false);
        assert_eq!(neither.ids(&session(None, true), 5), Ids::Withheld);
        assert_eq!(neither.ids(&session(Some(1), false), 1), Ids::Withheld);
    }

    #[test]
    fn the_appended_returning_is_on_its_own_texts() {
        let s = shape("INSERT INTO t (v) VALUES (?);", true, true);
        assert_eq!(&*s.text(2, false), "INSERT INTO t (v) VALUES (?), (?)");
        assert_eq!(
            &*s.text(2, true),
            "INSERT INTO t (v) VALUES (?), (?) RETURNING `id`"
        );
        assert_eq!(&*s.text(2, false), "INSERT INTO t (v) VALUES (?), (?)");
    }

    #[test]
    fn a_stored_value_is_the_id_a_single_row_insert_reports() {
        assert_eq!(stored_id(&Value::Int(7)), Some(7));
        assert_eq!(stored_id(&Value::UInt(u64::MAX)), Some(u64::MAX));
        // What the server's OK packet carries for an explicit -5.
        assert_eq!(stored_id(&Value::Int(-5)), Some(18_446_744_073_709_551_611));
        assert_eq!(stored_id(&Value::Bytes(b"12".to_vec())), Some(12));
        // 0 stored (NO_AUTO_VALUE_ON_ZERO): the driver reads no id.
        assert_eq!(stored_id(&Value::Int(0)), None);
        assert_eq!(stored_id(&Value::NULL), None);
        assert_eq!(stored_id(&Value::Double(2.5)), None);
    }

    fn row(values: Vec<Value>) -> MyRow {
        MyRow::of(values)
    }

    #[test]
    fn returned_ids_are_withheld_unless_the_rows_bear_out_their_order() {
        let how = ReturnedIds {
            list: "`id`".into(),
            bound_at: Some(0),
        };
        let rows = vec![
            row(vec![Value::NULL, Value::Int(1)]),
            row(vec![Value::Int(40), Value::Int(2)]),
            row(vec![Value::Int(0), Value::Int(3)]),
            row(vec![Value::Bytes(b"7".to_vec()), Value::Int(4)]),
        ];
        let stored = [Value::Int(9), Value::Int(40), Value::Int(10), Value::Int(7)];
        let refs: Vec<Option<&Value>> = stored.iter().map(Some).collect();
        assert_eq!(
            ids_from_returned(&how, &rows, &refs),
            vec![Some(9), Some(40), Some(10), Some(7)]
        );
        // Two rows swapped: the explicit 40 came back elsewhere.
        let swapped: Vec<Option<&Value>> = [&stored[1], &stored[0], &stored[2], &stored[3]]
            .into_iter()
            .map(Some)
            .collect();
        assert!(ids_from_returned(&how, &rows, &swapped).is_empty());
        // Not one returned row per row.
        assert!(ids_from_returned(&how, &rows, &refs[..3]).is_empty());
        // Without a bound column, only the count is checked.
        let unbound = ReturnedIds {
            list: "`id`".into(),
            bound_at: None,
        };
        assert_eq!(ids_from_returned(&unbound, &rows, &swapped).len(), 4);
    }
}
