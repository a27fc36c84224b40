//! Unnamed mode's text for many rows of a plain shape: one array parameter
//! per column,
//!
//! ```sql
//! INSERT INTO t (a, b) SELECT * FROM unnest($1::pg_catalog."int8"[], $2::pg_catalog."text"[])
//! ```
//!
//! the same text whatever the row count, so the server parses and plans a
//! short text of a few parameters instead of an n-row `VALUES` list (an
//! unnamed statement is parsed and planned again on every run).
//!
//! A shape qualifies only where the n-row `VALUES` statement and this one
//! are the same thing: every value of the tuple is a bare parameter, each
//! used once, bound to a named column (no `DEFAULT` in the tuple: every row
//! gives every column); no `ON CONFLICT` and no `RETURNING` (the order of
//! rows an `INSERT ... SELECT` returns is not promised); and every parameter
//! of a built-in scalar type, which is its column's own type (a bare
//! parameter of an INSERT takes its column's type): no arrays (`unnest`
//! would flatten them), domains, enums, composite or extension types. The
//! values keep the bytes the caller's row was encoded to; the column then
//! takes each one by the same assignment (type modifier, constraints) as
//! the `VALUES` statement. `unnest` yields the rows in array order, and the
//! INSERT reads them in that order, so rows (defaults drawn from sequences,
//! row triggers) go in the callers' order. A single row always runs as the
//! caller's own statement text.

use bytes::{BufMut, Bytes, BytesMut};
use tokio_postgres::types::{Kind, Type};

use super::copy::plain_params;
use super::encode::PgRow;
use super::unnamed::Described;
use crate::classify::InsertShape;

/// A shape's unnest text, with what its parameters are made of.
#[derive(Debug)]
pub(crate) struct PgUnnest {
    /// The statement text.
    pub(crate) sql: Box<str>,
    /// The single-row statement's parameter for each column, in order.
    params: Vec<usize>,
    /// Each array parameter's type and its element type.
    types: Vec<(Type, Type)>,
}

/// The unnest text of `shape`, whose parameters have `types`, and the
/// parameter of each column; `None` when the shape does not qualify.
pub(crate) fn text(shape: &InsertShape, types: &[Type]) -> Option<(String, Vec<usize>)> {
    let params = plain_params(shape)?;
    let (head, tail) = shape.around_values()?;
    let mut sql = String::with_capacity(head.len() + tail.len() + 40 * params.len());
    sql.push_str(head);
    // The head is kept as written (it may end with a line comment).
    if !head.ends_with(char::is_whitespace) {
        sql.push(' ');
    }
    sql.push_str("SELECT * FROM unnest(");
    for (i, &p) in params.iter().enumerate() {
        let ty = types.get(p)?;
        if Type::from_oid(ty.oid()).is_none() || !matches!(ty.kind(), Kind::Simple) {
            return None;
        }
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "${}::pg_catalog.\"{}\"[]",
            i + 1,
            ty.name().replace('"', "\"\"")
        ));
    }
    sql.push(')');
    sql.push_str(tail);
    Some((sql, params))
}

impl PgUnnest {
    /// The shape's unnest text `sql` (from [`text`]) as the server
    /// `described` it: each parameter an array of the single-row
    /// statement's parameter type (`types`), else `None`.
    pub(crate) fn new(
        sql: String,
        params: Vec<usize>,
        described: &Described,
        types: &[Type],
    ) -> Option<PgUnnest> {
        if described.params.len() != params.len() || !described.custom.is_empty() {
            return None;
        }
        let mut pairs = Vec::with_capacity(params.len());
        for (array, &p) in described.params.iter().zip(&params) {
            let element = types.get(p)?;
            match array.kind() {
                Kind::Array(e) if e.oid() == element.oid() => {
                    pairs.push((array.clone(), element.clone()));
                }
                _ => return None,
            }
        }
        Some(PgUnnest {
            sql: sql.into(),
            params,
            types: pairs,
        })
    }

    /// The array parameters for `rows`, each with its type: one
    /// one-dimensional array per column, in the binary array format, whose
    /// elements are the rows' encoded values as they are.
    pub(crate) fn arrays(&self, rows: &[PgRow]) -> Vec<(Bytes, Type)> {
        self.params
            .iter()
            .zip(&self.types)
            .map(|(&p, (array, element))| {
                let values = || rows.iter().map(|r| r.param(p));
                (binary_array(element.oid(), values), array.clone())
            })
            .collect()
    }
}

/// A one-dimensional array of the element type `element` in the binary
/// array format, its elements the encoded `values` as they are (`None`
/// for NULL). `values` is walked twice (sizes, then bytes).
pub(crate) fn binary_array<'a, I>(element: u32, values: impl Fn() -> I) -> Bytes
where
    I: Iterator<Item = Option<&'a [u8]>>,
{
    let (mut size, mut count, mut has_null) = (0usize, 0usize, false);
    for value in values() {
        size += 4 + value.map_or(0, <[u8]>::len);
        count += 1;
        has_null |= value.is_none();
    }
    let mut buf = BytesMut::with_capacity(20 + size);
    buf.put_i32(1); // dimensions
    buf.put_i32(i32::from(has_null));
    buf.put_u32(element);
    buf.put_i32(count as i32);
    buf.put_i32(1); // lower bound
    for value in values() {
        match value {
            Some(bytes) => {
                buf.put_i32(bytes.len() as i32);
                buf.put_slice(bytes);
            }
            None => buf.put_i32(-1),
        }
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::text;
    use crate::classify::{Classified, Dialect, classify};
    use tokio_postgres::types::Type;

    /// The unnest text of `sql`; `None` also when `sql` is not coalesced
    /// at all.
    fn unnest_of(sql: &str, types: &[Type]) -> Option<String> {
        match classify(Dialect::Postgres, sql) {
            Classified::Batchable(crate::classify::Form::Insert(shape)) => {
                text(&shape, types).map(|(sql, _)| sql)
            }
            _ => None,
        }
    }

    #[test]
    fn plain_shapes_get_one_array_per_column_in_column_order() {
        assert_eq!(
            unnest_of(
                "INSERT INTO t (a, b) VALUES ($2, $1)",
                &[Type::TEXT, Type::INT8]
            )
            .as_deref(),
            Some(
                "INSERT INTO t (a, b) SELECT * FROM unnest($1::pg_catalog.\"int8\"[], \
                 $2::pg_catalog.\"text\"[])"
            )
        );
        assert_eq!(
            unnest_of("INSERT INTO t (a) -- one row\nVALUES ($1)", &[Type::INT4]).as_deref(),
            Some("INSERT INTO t (a) -- one row\nSELECT * FROM unnest($1::pg_catalog.\"int4\"[])")
        );
        assert_eq!(
            unnest_of("insert into \"S\".t (\"C\") values($1)", &[Type::BPCHAR]).as_deref(),
            Some("insert into \"S\".t (\"C\") SELECT * FROM unnest($1::pg_catalog.\"bpchar\"[])")
        );
    }

    #[test]
    fn other_shapes_and_types_keep_values() {
        let int = [Type::INT4, Type::INT4];
        for sql in [
            "INSERT INTO t VALUES ($1, $2)",
            "INSERT INTO t (a, b) VALUES ($1, $2) RETURNING id",
            "INSERT INTO t (a, b) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            "INSERT INTO t (a, b) VALUES ($1, $1 + $2)",
            "INSERT INTO t (a, b, c) VALUES ($1, $2, DEFAULT)",
            "INSERT INTO t (a, b) VALUES /* rows */ ($1, $2)",
        ] {
            assert_eq!(unnest_of(sql, &int), None, "{sql}");
        }
        for ty in [Type::INT4_ARRAY, Type::INT2_VECTOR] {
            assert_eq!(
                unnest_of(
                    "INSERT INTO t (a, b) VALUES ($1, $2)",
                    &[Type::INT4, ty.clone()]
                ),
                None,
                "{ty}"
            );
        }
    }
}
