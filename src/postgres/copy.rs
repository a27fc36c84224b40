//! The COPY path: a large enough group of rows of a plain shape goes out as
//! one binary `COPY table (columns) FROM STDIN`, built from the rows'
//! already-encoded parameters (their bytes are copied, never re-encoded).
//!
//! A shape qualifies only where n single-row INSERTs and one COPY of the same
//! rows are the same thing, which is learned from the catalog with the rest
//! of the shape (see [`eligible`]): every value of the tuple is a bare
//! parameter bound to a named column, no `ON CONFLICT`, no `RETURNING`, a
//! plain or partitioned table (no rules or INSERT triggers: those already
//! keep a shape from being coalesced), no row-level security (COPY FROM
//! refuses it), no foreign partitions, no `GENERATED ALWAYS` identity or
//! generated column written (COPY would write what INSERT refuses), and each
//! parameter of the column's own type.
//!
//! When COPY fails on a row, the server's error context names the row's
//! line: the engine runs that row on its own (as the single-row INSERT, so
//! its caller gets that statement's own error) and the other rows again
//! without it ([`ChunkError::RowAt`](crate::backend::batch::ChunkError::RowAt)).

use bytes::{BufMut, Bytes, BytesMut};
use tokio_postgres::types::{ToSql, Type};

use super::encode::PgRow;
use super::errors::unsent_error;
use super::manager::ClientWrapper;
use super::quote_ident;
use crate::classify::{Conflict, InsertShape};
use crate::error::Error;

/// Default [`PoolBuilder::copy_threshold`](super::PoolBuilder::copy_threshold).
pub(crate) const DEFAULT_THRESHOLD: usize = 64;

/// The binary COPY file header: signature, flags, header extension length.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// What COPY needs of a shape that qualifies.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PgCopy {
    /// `COPY table (columns) FROM STDIN (FORMAT binary)`.
    pub(crate) sql: String,
    /// The parameter bound to each column, in column order.
    params: Vec<usize>,
}

impl PgCopy {
    /// The COPY data of `rows`: the binary file format, each field the
    /// parameter's encoded bytes as they are.
    pub(crate) fn data(&self, rows: &[PgRow]) -> Bytes {
        let fields = self.params.len();
        let size = HEADER.len()
            + 2
            + rows
                .iter()
                .map(|r| 2 + 4 * fields + r.bytes())
                .sum::<usize>();
        let mut buf = BytesMut::with_capacity(size);
        buf.put_slice(HEADER);
        for row in rows {
            buf.put_i16(fields as i16);
            for &p in &self.params {
                match row.param(p) {
                    Some(bytes) => {
                        buf.put_i32(bytes.len() as i32);
                        buf.put_slice(bytes);
                    }
                    None => buf.put_i32(-1),
                }
            }
        }
        buf.put_i16(-1);
        buf.freeze()
    }
}

/// The row a failed COPY names in its error context (`COPY t, line 3...`),
/// as an index into the rows sent.
pub(crate) fn failed_row(e: &tokio_postgres::Error) -> Option<usize> {
    let context = e.as_db_error()?.where_()?;
    let at = context.find("COPY ")?;
    let rest = &context[at..];
    let line = rest.find(", line ")? + ", line ".len();
    let digits: String = rest[line..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse::<usize>().ok()?.checked_sub(1)
}

/// What the catalog says about the columns COPY would write, and whether any
/// table of the partition tree refuses or changes COPY. Parameters: the table
/// as written, its column names.
const FACTS: &str = "\
WITH rel AS (SELECT to_regclass($1) AS oid),
tree AS (
    SELECT oid AS relid FROM rel WHERE oid IS NOT NULL
    UNION SELECT t.relid FROM rel, pg_partition_tree(rel.oid) t WHERE rel.oid IS NOT NULL
)
SELECT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid IN (SELECT relid FROM tree)
        AND (c.relrowsecurity OR c.relkind NOT IN ('r', 'p'))),
    ARRAY(SELECT format('%s/%s/%s', a.atttypid::int8, a.attidentity, a.attgenerated)
        FROM unnest($2::text[]) WITH ORDINALITY k(name, ord)
        JOIN pg_attribute a ON a.attrelid = (SELECT oid FROM rel) AND a.attname = k.name
            AND NOT a.attisdropped
        ORDER BY k.ord)";

/// Whether `shape` (with the server's parameter `types`) may go out as
/// COPY, and how. Asked once per learned shape.
pub(crate) async fn eligible(
    conn: &ClientWrapper,
    shape: &InsertShape,
    types: &[Type],
) -> Result<Option<PgCopy>, Error> {
    let Some(params) = plain_params(shape) else {
        return Ok(None);
    };
    let Some(columns) = &shape.columns else {
        return Ok(None);
    };
    // An unnamed statement: asked once per shape, and safe behind a pooler.
    let args: [(&(dyn ToSql + Sync), Type); 2] =
        [(&shape.table, Type::TEXT), (columns, Type::TEXT_ARRAY)];
    let row = match conn.query_typed(FACTS, &args).await {
        Ok(rows) => rows.into_iter().next(),
        // A catalog that cannot be read (or a server that does not know a
        // column or function the query names): no COPY.
        Err(e) if e.as_db_error().is_some() => return Ok(None),
        Err(e) => return Err(unsent_error(e)),
    };
    let Some(row) = row else { return Ok(None) };
    let refused: bool = row.get(0);
    let facts: Vec<String> = row.get(1);
    if refused || facts.len() != columns.len() {
        return Ok(None);
    }
    for (fact, &p) in facts.iter().zip(&params) {
        let mut parts = fact.split('/');
        let typid: Option<u32> = parts.next().and_then(|t| t.parse().ok());
        let identity = parts.next().unwrap_or("?");
        let generated = parts.next().unwrap_or("?");
        if typid != types.get(p).map(Type::oid) || identity == "a" || !generated.is_empty() {
            return Ok(None);
        }
    }
    let list = columns
        .iter()
        .map(|c| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Some(PgCopy {
        sql: format!("COPY {} ({list}) FROM STDIN (FORMAT binary)", shape.table),
        params,
    }))
}

/// The parameter of each column when the shape is a plain INSERT of bare
/// parameters, each used once, into named columns.
pub(crate) fn plain_params(shape: &InsertShape) -> Option<Vec<usize>> {
    if shape.returning || !matches!(shape.conflict, Conflict::None) {
        return None;
    }
    let columns = shape.columns.as_ref()?;
    if columns.len() != shape.tuple_params.len() || columns.len() != shape.params_per_row {
        return None;
    }
    let params: Vec<usize> = shape
        .tuple_params
        .iter()
        .copied()
        .collect::<Option<Vec<usize>>>()?;
    let mut seen = vec![false; shape.params_per_row];
    for &p in &params {
        if std::mem::replace(seen.get_mut(p)?, true) {
            return None;
        }
    }
    Some(params)
}

#[cfg(feature = "bench")]
impl PgCopy {
    /// The COPY of a plain `shape` without asking the catalog (the `engine`
    /// bench: the table is taken to be a plain one, each parameter of its
    /// column's type).
    pub(crate) fn plain(shape: &InsertShape) -> Option<PgCopy> {
        let params = plain_params(shape)?;
        let list = shape
            .columns
            .as_ref()?
            .iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        Some(PgCopy {
            sql: format!("COPY {} ({list}) FROM STDIN (FORMAT binary)", shape.table),
            params,
        })
    }
}
