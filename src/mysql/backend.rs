//! The MySQL/MariaDB backend of the engine: checks and sizes rows in the
//! caller's task, runs multi-row INSERTs as prepared statements on pooled
//! mysql_async connections, and maps the statement's result back to each
//! row.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use mysql_async::prelude::Queryable;
use mysql_async::{DriverError, Params, Row, Value};
use tokio::sync::OnceCell;

use super::Outcome;
use super::manager::{Manager, ServerInfo};
use crate::classify::{Conflict, Dialect, InsertShape, Verb};
use crate::engine::{Backend, ChunkError, ChunkResult};
use crate::error::{Error, Kind};

pub(crate) type Conn = deadpool::managed::Object<Manager>;

/// Most placeholders in one MySQL prepared statement (the protocol's 16-bit
/// parameter count).
pub(crate) const MAX_PARAMS: usize = 65535;

/// Statement text and packet headers a coalesced statement may need beyond
/// its rows' share, at most; shapes whose own text is longer are not
/// coalesced.
const MAX_RESERVE: usize = 8 << 10;

/// Used before any connection has told the real `@@max_allowed_packet`
/// (never in practice: a shape is prepared on a connection first).
const FALLBACK_PACKET: usize = 1 << 20;

static NEXT_SHAPE_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct MyBackend {
    pub(crate) pool: deadpool::managed::Pool<Manager>,
    pub(crate) server: Arc<OnceLock<ServerInfo>>,
    /// Coalesce INSERT IGNORE / REPLACE / ON DUPLICATE KEY UPDATE.
    pub(crate) coalesce_upserts: bool,
    /// Connections use CLIENT_FOUND_ROWS (ODKU counts unchanged rows as 1).
    pub(crate) found_rows: bool,
    /// Statement texts being learned (see `prepare_shape`).
    pub(crate) learning: Mutex<HashMap<Box<str>, Learning>>,
}

/// The answer, shared by the callers of one new statement text: `Some(ids
/// are consecutive)` when it may be coalesced.
pub(crate) type Learning = Arc<OnceCell<Option<bool>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A batchable statement shape, prepared once.
pub(crate) struct MyShape {
    id: u64,
    shape: Arc<InsertShape>,
    /// Placeholders in one row, as the server counted them.
    pub(crate) params: usize,
    /// Statement-text bytes each row adds (its tuple and `, `).
    text_per_row: usize,
    /// Per-row ids are provably consecutive (see `Outcome::last_insert_id`).
    consecutive_ids: bool,
    /// Rendered multi-row texts by row count (bounded by the engine's
    /// allowed statement sizes, about 20 per shape).
    texts: Mutex<HashMap<usize, Arc<str>>>,
}

impl MyShape {
    fn text(&self, rows: usize) -> Arc<str> {
        lock(&self.texts)
            .entry(rows)
            .or_insert_with(|| self.shape.render(rows, None).into())
            .clone()
    }
}

/// One caller's parameters, checked against its statement.
pub(crate) struct MyRow {
    values: Vec<Value>,
    /// What this row adds to the statement's packets: its values as the
    /// binary protocol encodes them, their type bytes and NULL bit, and its
    /// share of the statement text.
    pub(crate) bytes: usize,
}

/// Turns one caller's parameters into a row of `shape`, checking the
/// count. Runs in the caller's task.
pub(crate) fn encode(shape: &MyShape, params: Params) -> Result<MyRow, Error> {
    let values = match params {
        Params::Empty => Vec::new(),
        Params::Positional(values) => values,
        Params::Named(_) => {
            return Err(Error::params(
                "named parameters given, but this statement uses `?` placeholders",
            ));
        }
    };
    if values.len() != shape.params {
        return Err(Error::params(format!(
            "statement takes {} parameter{}, {} given",
            shape.params,
            if shape.params == 1 { "" } else { "s" },
            values.len()
        )));
    }
    let data: usize = values
        .iter()
        .map(|v| usize::try_from(v.bin_len()).unwrap_or(usize::MAX))
        .fold(0usize, usize::saturating_add);
    let bytes = data
        .saturating_add(2 * values.len() + values.len().div_ceil(8))
        .saturating_add(shape.text_per_row);
    Ok(MyRow { values, bytes })
}

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
    match e {
        mysql_async::Error::Server(_) => Error::with_source(Kind::Db, "database error", e),
        e if params_error(&e) => Error::with_source(Kind::Params, "bad parameters", e),
        e => Error::with_source(
            Kind::OutcomeUnknown,
            "connection lost while the statement was in flight; it may or may not have committed",
            e,
        ),
    }
}

/// Maps a mysql_async error from a step that cannot have written anything
/// (prepare, or a connection already closed before sending).
pub(crate) fn unsent_error(e: mysql_async::Error) -> Error {
    match e {
        mysql_async::Error::Server(_) => Error::with_source(Kind::Db, "database error", e),
        e if params_error(&e) => Error::with_source(Kind::Params, "bad parameters", e),
        e => Error::with_source(
            Kind::ConnectionClosed,
            "connection lost before the statement was sent",
            e,
        ),
    }
}

pub(crate) fn closed_before_send() -> Error {
    Error::new(
        Kind::ConnectionClosed,
        "connection closed before the statement was sent",
    )
}

/// Server errors that can depend on one row's values: the engine re-runs
/// smaller groups to find the row. Nothing of the failed statement
/// committed (coalescing is limited to transactional tables).
fn row_specific(e: &mysql_async::ServerError) -> bool {
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

fn chunk_error(e: mysql_async::Error) -> ChunkError {
    let row = matches!(&e, mysql_async::Error::Server(se) if row_specific(se));
    let err = sent_error(e);
    if row {
        ChunkError::Row(err)
    } else {
        ChunkError::Statement(err)
    }
}

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

/// What the server says about the target table.
struct TableFacts {
    engine: String,
    transactional: bool,
    auto_increment: Option<String>,
    insert_triggers: u64,
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
       WHERE g.EVENT_OBJECT_SCHEMA = ? AND g.EVENT_OBJECT_TABLE = ? \
       AND g.EVENT_MANIPULATION = 'INSERT')";

/// Looks the table up in information_schema. `Ok(None)` when it is not
/// found exactly once (temporary table, view, ambiguous name, no access).
async fn table_facts(conn: &mut Conn, table: &str) -> Result<Option<TableFacts>, Error> {
    let Some((schema, name)) = split_table(table) else {
        return Ok(None);
    };
    let run = async {
        let schema = match schema {
            Some(schema) => Some(schema),
            None => conn
                .query_first::<Option<String>, _>("SELECT DATABASE()")
                .await?
                .flatten(),
        };
        let Some(schema) = schema else {
            return Ok(None);
        };
        let params = (
            schema.clone(),
            name.clone(),
            schema.clone(),
            name.clone(),
            schema,
            name,
        );
        conn.exec_first::<Row, _, _>(TABLE_FACTS, params).await
    };
    let row = match run.await {
        Ok(Some(row)) => row,
        Ok(None) => return Ok(None),
        // No access, or several tables matched a case-insensitive name.
        Err(mysql_async::Error::Server(_)) => return Ok(None),
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
        insert_triggers: row
            .get_opt::<Option<u64>, _>(2)
            .and_then(Result::ok)
            .flatten()
            .unwrap_or(u64::MAX),
    }))
}

impl MyBackend {
    /// Asks the server whether `sql` may be coalesced: `Some(consecutive
    /// ids)` when it may, `None` when it runs on its own.
    async fn learn(
        &self,
        sql: &str,
        shape: &InsertShape,
        upsert: bool,
    ) -> Result<Option<bool>, Error> {
        let mut conn = self.get().await?;
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
            return Ok(None);
        }
        // Only transactional tables: a failed multi-row statement must leave
        // nothing behind, so its rows can be re-run to isolate the bad one.
        let Some(facts) = table_facts(&mut conn, &shape.table).await? else {
            return Ok(None);
        };
        if !facts.transactional {
            return Ok(None);
        }
        let lock_mode = self.server.get().and_then(|s| s.autoinc_lock_mode);
        let consecutive_ids = !upsert
            && facts.engine.eq_ignore_ascii_case("InnoDB")
            && matches!(lock_mode, Some(0 | 1))
            && facts.insert_triggers == 0
            && match (&facts.auto_increment, &shape.columns) {
                (Some(auto), Some(columns)) => {
                    let auto = auto.to_lowercase();
                    !columns.iter().any(|c| c.to_lowercase() == auto)
                }
                _ => false,
            };
        Ok(Some(consecutive_ids))
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
        shape: &MyShape,
        n: usize,
        written: Written,
        increment: Option<u64>,
    ) -> Vec<Outcome> {
        let count = self.split_count(&shape.shape, n as u64, written.affected);
        let exact = count.is_some();
        let ids = match (
            exact && shape.consecutive_ids,
            written.last_insert_id,
            increment,
        ) {
            (true, Some(first), Some(step)) if first > 0 => Some((first, step)),
            _ => None,
        };
        // RETURNING rows come in VALUES order, one per written row.
        let mut returned = if written.returned.len() == n {
            written.returned.into_iter().map(Some).collect()
        } else {
            Vec::new()
        };
        returned.resize_with(n, || None);
        returned
            .into_iter()
            .enumerate()
            .map(|(i, row)| {
                let id = ids.and_then(|(first, step)| {
                    step.checked_mul(i as u64)
                        .and_then(|d| first.checked_add(d))
                });
                Outcome::new(count.unwrap_or(1), exact, id, row)
            })
            .collect()
    }
}

/// What one multi-row statement reported.
struct Written {
    affected: u64,
    last_insert_id: Option<u64>,
    returned: Vec<Row>,
}

impl Backend for MyBackend {
    type Conn = Conn;
    type Row = MyRow;
    type Output = Outcome;
    type Shape = MyShape;

    const DIALECT: Dialect = Dialect::MySql;

    fn max_params(&self) -> usize {
        MAX_PARAMS
    }

    fn max_statement_bytes(&self) -> usize {
        self.row_limit().0
    }

    fn params_per_row(shape: &MyShape) -> usize {
        shape.params
    }

    fn label(shape: &MyShape) -> &str {
        &shape.shape.table
    }

    async fn prepare_shape(
        &self,
        sql: &str,
        shape: Arc<InsertShape>,
    ) -> Result<Option<MyShape>, Error> {
        let upsert = shape.verb != Verb::Insert || shape.conflict != Conflict::None;
        if upsert && !self.coalesce_upserts {
            return Ok(None);
        }
        let one = shape.render(1, None).len();
        let text_per_row = shape.render(2, None).len().saturating_sub(one);
        let fixed = one.saturating_sub(text_per_row.saturating_sub(2));
        // Callers of a new text arrive together: one of them asks the
        // server, the others wait for its answer.
        let cell = {
            let mut learning = lock(&self.learning);
            learning.entry(sql.into()).or_default().clone()
        };
        let learned = cell
            .get_or_try_init(|| self.learn(sql, &shape, upsert))
            .await
            .cloned();
        {
            // The engine caches the route from here on.
            let mut learning = lock(&self.learning);
            if learning.get(sql).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                learning.remove(sql);
            }
        }
        let Some(consecutive_ids) = learned? else {
            return Ok(None);
        };
        if fixed.saturating_add(64) > self.reserve() {
            return Ok(None);
        }
        Ok(Some(MyShape {
            id: NEXT_SHAPE_ID.fetch_add(1, Ordering::Relaxed),
            params: shape.params_per_row,
            shape,
            text_per_row,
            consecutive_ids,
            texts: Mutex::new(HashMap::new()),
        }))
    }

    async fn get(&self) -> Result<Conn, Error> {
        Ok(self.pool.get().await?)
    }

    async fn try_get(&self) -> Option<Conn> {
        let mut timeouts = self.pool.timeouts();
        timeouts.wait = Some(std::time::Duration::ZERO);
        self.pool.timeout_get(&timeouts).await.ok()
    }

    async fn execute<'a>(
        &'a self,
        conn: &'a mut Conn,
        shape: &'a MyShape,
        rows: &'a [MyRow],
    ) -> ChunkResult<Outcome> {
        let n = rows.len();
        let sql = shape.text(n);
        let stmt = match conn.prep(&*sql).await {
            Ok(stmt) => stmt,
            Err(e) => {
                conn.note_error(&e);
                return Err(ChunkError::Statement(unsent_error(e)));
            }
        };
        if conn.is_disconnected() {
            return Err(ChunkError::Statement(closed_before_send()));
        }
        if usize::from(stmt.num_params()) != n * shape.params {
            return Err(ChunkError::Statement(Error::new(
                Kind::Params,
                format!(
                    "the {n}-row statement of shape {} takes {} parameters, not {}",
                    shape.id,
                    stmt.num_params(),
                    n * shape.params
                ),
            )));
        }
        let mut params = Vec::with_capacity(n * shape.params);
        for row in rows {
            params.extend(row.values.iter().cloned());
        }
        let increment = conn.auto_increment_increment;
        let returning = shape.shape.returning;
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
            Ok(written) => Ok(self.outputs(shape, n, written, increment)),
            Err(e) => {
                conn.note_error(&e);
                Err(chunk_error(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split_table;

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
