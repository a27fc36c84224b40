//! Hooks for the `engine` benchmark (cargo feature `bench`): the per-row work
//! of a coalesced batch, measured without a server. Not a stable API: only
//! the crate's own benches use it.

#[cfg(feature = "postgres")]
use tokio_postgres::types::Type;

#[cfg(feature = "postgres")]
use crate::postgres::Params;

/// Encodes `rows` as callers do for a statement whose parameters have
/// `types`, and builds the bind list as a flush does; returns the number of
/// bound values.
#[cfg(feature = "postgres")]
pub fn pg_encode_and_bind(types: &[Type], rows: &[&Params<'_>]) -> usize {
    use crate::postgres::{PgArgs, encode};
    let encoded: Vec<_> = rows
        .iter()
        .filter_map(|p| encode(types, PgArgs::Refs(p)).ok())
        .collect();
    let mut bind = Vec::with_capacity(encoded.len() * types.len());
    for row in &encoded {
        bind.extend(row.raw());
    }
    std::hint::black_box(&bind);
    bind.len()
}

/// Classifies `sql` for PostgreSQL (uncached) and renders its multi-row
/// statement for `rows` rows; `None` when it is not batchable.
#[cfg(feature = "postgres")]
pub fn pg_render(sql: &str, rows: usize) -> Option<String> {
    use crate::classify::{Dialect, classify};
    classify(Dialect::Postgres, sql)
        .shape()
        .map(|shape| shape.render(rows, None))
}
