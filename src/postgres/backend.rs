//! The PostgreSQL backend of the engine: encodes rows in the caller's task,
//! builds and runs multi-row INSERTs on pooled tokio-postgres connections,
//! and maps the statement's result back to each row.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use futures_util::TryStreamExt;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Row, Statement};

use super::Outcome;
use super::manager::Manager;
use crate::classify::{Conflict, Dialect, InsertShape};
use crate::engine::{Backend, ChunkError, ChunkResult};
use crate::error::{Error, Kind};

pub(crate) type Conn = deadpool::managed::Object<Manager>;

/// Most bind parameters in one PostgreSQL statement (the protocol's Int16 count).
pub(crate) const MAX_PARAMS: usize = 65535;

static NEXT_SHAPE_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) struct PgBackend {
    pub(crate) pool: deadpool::managed::Pool<Manager>,
}

/// A batchable statement shape, prepared once.
pub(crate) struct PgShape {
    id: u64,
    shape: Arc<InsertShape>,
    /// Parameter types of the one-row statement, as the server inferred them.
    pub(crate) types: Vec<Type>,
    /// ON CONFLICT with a row filter: RETURNING these quoted target columns
    /// and match them against these parameter indexes to learn which rows
    /// were written.
    key_match: Option<(String, Vec<usize>)>,
}

/// One caller's parameters, encoded in the binary format of their types.
pub(crate) struct PgRow {
    buf: Bytes,
    /// Byte range of each parameter in `buf`; `None` for NULL.
    spans: Vec<Option<(u32, u32)>>,
}

impl PgRow {
    pub(crate) fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// The encoded parameters, ready to bind.
    pub(crate) fn raw(&self) -> impl ExactSizeIterator<Item = Raw<'_>> + '_ {
        self.spans
            .iter()
            .map(move |s| Raw(s.map(|(a, b)| &self.buf[a as usize..b as usize])))
    }
}

thread_local! {
    /// Encoded size of the last row this thread encoded.
    static ROW_SIZE_HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(64) };
}

/// Encodes `params` for a statement whose parameters have `types`, checking
/// the count and each value's type. Runs in the caller's task.
pub(crate) fn encode(types: &[Type], params: &[&(dyn ToSql + Sync)]) -> Result<PgRow, Error> {
    if params.len() != types.len() {
        return Err(Error::params(format!(
            "statement takes {} parameter{}, {} given",
            types.len(),
            if types.len() == 1 { "" } else { "s" },
            params.len()
        )));
    }
    if types.len() > MAX_PARAMS {
        return Err(Error::too_large(format!(
            "{} bind parameters exceed PostgreSQL's limit of {MAX_PARAMS}",
            types.len()
        )));
    }
    // Size the buffer like this thread's previous row: one allocation per row
    // in steady state instead of a chain of regrowths.
    let mut buf = BytesMut::with_capacity(ROW_SIZE_HINT.get());
    let mut spans = Vec::with_capacity(params.len());
    for (i, (param, ty)) in params.iter().zip(types).enumerate() {
        let start = buf.len();
        match param.to_sql_checked(ty, &mut buf) {
            Ok(IsNull::No) => {
                let end = buf.len();
                let (a, b) = (u32::try_from(start), u32::try_from(end));
                match (a, b) {
                    (Ok(a), Ok(b)) => spans.push(Some((a, b))),
                    _ => return Err(Error::too_large("a row's parameters exceed 4 GiB")),
                }
            }
            Ok(IsNull::Yes) => {
                buf.truncate(start);
                spans.push(None);
            }
            Err(e) => {
                return Err(Error::with_source(
                    Kind::Params,
                    format!("parameter ${} cannot be sent as {ty}", i + 1),
                    e,
                ));
            }
        }
    }
    ROW_SIZE_HINT.set(buf.len().clamp(64, 64 << 10));
    Ok(PgRow {
        buf: buf.freeze(),
        spans,
    })
}

/// An already-encoded parameter value; accepts any type because it was
/// type-checked when encoded.
#[derive(Debug)]
pub(crate) struct Raw<'a>(Option<&'a [u8]>);

impl ToSql for Raw<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Some(bytes) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }
    fn accepts(_: &Type) -> bool {
        true
    }
    to_sql_checked!();
}

/// A returned column's raw bytes, of any type.
struct RawValue<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for RawValue<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(Some(raw)))
    }
    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(None))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Maps a tokio-postgres error from running a statement that was sent.
pub(crate) fn sent_error(e: tokio_postgres::Error) -> Error {
    if e.as_db_error().is_some() {
        Error::with_source(Kind::Db, "database error", e)
    } else {
        Error::with_source(
            Kind::OutcomeUnknown,
            "connection lost while the statement was in flight; it may or may not have committed",
            e,
        )
    }
}

/// Maps a tokio-postgres error from a step that cannot have written anything
/// (prepare, or a connection already closed before sending).
pub(crate) fn unsent_error(e: tokio_postgres::Error) -> Error {
    if e.as_db_error().is_some() {
        Error::with_source(Kind::Db, "database error", e)
    } else {
        Error::with_source(
            Kind::ConnectionClosed,
            "connection lost before the statement was sent",
            e,
        )
    }
}

/// SQLSTATE classes whose errors can depend on one row's values.
fn row_specific(code: &str) -> bool {
    // 21 cardinality (ON CONFLICT DO UPDATE hitting a row twice), 22 data
    // exception, 23 integrity constraint, 27 triggered data change, 40
    // rollback (deadlock/serialization: nothing committed, retry smaller),
    // 44 WITH CHECK OPTION, P0 PL/pgSQL RAISE from a trigger.
    matches!(
        code.get(..2),
        Some("21" | "22" | "23" | "27" | "40" | "44" | "P0")
    )
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl PgBackend {
    fn key_match(shape: &InsertShape) -> Result<Option<(String, Vec<usize>)>, ()> {
        let target = match &shape.conflict {
            Conflict::None | Conflict::DuplicateKeyUpdate => return Ok(None),
            // Every row is inserted or updated: one row affected each.
            Conflict::DoUpdate {
                has_where: false, ..
            } => return Ok(None),
            Conflict::DoNothing { target } | Conflict::DoUpdate { target, .. } => target,
        };
        // Rows may be skipped: which ones is learned by returning the
        // conflict key, which needs a plain column target bound to bare
        // parameters, and no RETURNING of the caller's own.
        let (Some(target), Some(columns), false) = (target, &shape.columns, shape.returning) else {
            return Err(());
        };
        let mut params = Vec::with_capacity(target.len());
        for col in target {
            let pos = columns.iter().position(|c| c == col).ok_or(())?;
            let param = shape.tuple_params.get(pos).copied().flatten().ok_or(())?;
            params.push(param);
        }
        let list = target
            .iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Some((list, params)))
    }

    fn outputs(shape: &PgShape, rows: &[PgRow], result: Written) -> Vec<Outcome> {
        let n = rows.len();
        match result {
            Written::Count(count) => {
                // Without triggers that skip rows, a plain or DO UPDATE
                // insert writes every row once.
                let exact = count == n as u64;
                (0..n).map(|_| Outcome::new(1, exact, None)).collect()
            }
            Written::Rows(returned) if shape.key_match.is_none() => {
                let exact = returned.len() == n;
                if exact {
                    returned
                        .into_iter()
                        .map(|r| Outcome::new(1, true, Some(r)))
                        .collect()
                } else {
                    (0..n).map(|_| Outcome::new(1, false, None)).collect()
                }
            }
            Written::Rows(returned) => {
                let params = shape
                    .key_match
                    .as_ref()
                    .map(|(_, p)| p.as_slice())
                    .unwrap_or_default();
                // Returned keys are a subsequence of the rows, in VALUES
                // order: walk both.
                let mut next = 0;
                rows.iter()
                    .map(|row| {
                        let written = returned.get(next).is_some_and(|r| {
                            params.iter().enumerate().all(|(col, &p)| {
                                let mine = row
                                    .spans
                                    .get(p)
                                    .copied()
                                    .flatten()
                                    .map(|(a, b)| &row.buf[a as usize..b as usize]);
                                r.try_get::<_, RawValue<'_>>(col).ok().map(|v| v.0) == Some(mine)
                            })
                        });
                        if written {
                            next += 1;
                        }
                        Outcome::new(u64::from(written), true, None)
                    })
                    .collect()
            }
        }
    }
}

enum Written {
    Count(u64),
    Rows(Vec<Row>),
}

impl Backend for PgBackend {
    type Conn = Conn;
    type Row = PgRow;
    type Output = Outcome;
    type Shape = PgShape;

    const DIALECT: Dialect = Dialect::Postgres;

    fn max_params(&self) -> usize {
        MAX_PARAMS
    }

    fn max_statement_bytes(&self) -> usize {
        // The protocol's message length is an Int32.
        (i32::MAX as usize) - 4096
    }

    fn params_per_row(shape: &PgShape) -> usize {
        shape.types.len()
    }

    fn label(shape: &PgShape) -> &str {
        &shape.shape.table
    }

    async fn prepare_shape(
        &self,
        sql: &str,
        shape: Arc<InsertShape>,
    ) -> Result<Option<PgShape>, Error> {
        let Ok(key_match) = Self::key_match(&shape) else {
            return Ok(None);
        };
        let conn = self.get().await?;
        let stmt = conn.prepare_cached(sql).await.map_err(unsent_error)?;
        if stmt.params().len() != shape.params_per_row {
            // The server sees the parameters differently from the classifier:
            // do not rewrite what we do not understand.
            return Ok(None);
        }
        Ok(Some(PgShape {
            id: NEXT_SHAPE_ID.fetch_add(1, Ordering::Relaxed),
            types: stmt.params().to_vec(),
            shape,
            key_match,
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
        shape: &'a PgShape,
        rows: &'a [PgRow],
    ) -> ChunkResult<Outcome> {
        let n = rows.len();
        let extra = shape.key_match.as_ref().map(|(list, _)| list.as_str());
        let stmt: Statement = conn
            .prepare_batch(shape.id, n, || shape.shape.render(n, extra), &shape.types)
            .await
            .map_err(|e| ChunkError::Statement(unsent_error(e)))?;
        if conn.is_closed() {
            return Err(ChunkError::Statement(Error::new(
                Kind::ConnectionClosed,
                "connection closed before the statement was sent",
            )));
        }
        let mut params = Vec::with_capacity(rows.len() * shape.types.len());
        for row in rows {
            params.extend(row.raw());
        }
        let written = if stmt.columns().is_empty() {
            conn.execute_raw(&stmt, params).await.map(Written::Count)
        } else {
            match conn.query_raw(&stmt, params).await {
                Ok(stream) => stream.try_collect::<Vec<Row>>().await.map(Written::Rows),
                Err(e) => Err(e),
            }
        };
        match written {
            Ok(w) => Ok(Self::outputs(shape, rows, w)),
            Err(e) => {
                let row = e
                    .as_db_error()
                    .is_some_and(|db| row_specific(db.code().code()));
                let err = sent_error(e);
                Err(if row {
                    ChunkError::Row(err)
                } else {
                    ChunkError::Statement(err)
                })
            }
        }
    }
}
