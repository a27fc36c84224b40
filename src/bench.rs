//! Hooks for the `engine` benchmark (cargo feature `bench`): the per-row work
//! of each write path, in the caller's task and in the flusher's, measured
//! without a server. Not a stable API: only the crate's own benches use it.
//!
//! | path | caller's task | flusher's task |
//! |---|---|---|
//! | PostgreSQL rewrite | [`pg_encode`] | [`PgRows::bind_list`] (then the driver's Bind message, which the bench builds with postgres-protocol) |
//! | PostgreSQL COPY | [`pg_encode`] | [`PgCopyPlan::data`] (`PgCopy::data`) |
//! | MariaDB rewrite | [`mysql_encode`] (`mysql/batch.rs` `encode`) | [`MyRows::params`] (then the driver's COM_STMT_EXECUTE, built by the bench with mysql_common) |
//! | MariaDB bulk | [`mysql_encode`] (the same) | [`MyRows::bulk_fits`] (kinds and size checked), [`MyRows::bulk_params`] (then the driver's COM_STMT_BULK_EXECUTE, built by the bench with mysql_common) |

#[cfg(feature = "postgres")]
use tokio_postgres::types::{ToSql, Type};

#[cfg(feature = "postgres")]
use crate::postgres::Params;

/// Encodes `rows` as callers do for a statement whose parameters have
/// `types`, and builds the bind list as a flush does; returns the number of
/// bound values.
#[cfg(feature = "postgres")]
pub fn pg_encode_and_bind(types: &[Type], rows: &[&Params<'_>]) -> usize {
    let rows = pg_encode(types, rows);
    let bind = rows.bind_list();
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

/// A backend's encoded rows (opaque): the type, its `Debug` (the row
/// count) and its `len` / `is_empty`.
macro_rules! encoded_rows {
    ($(#[$doc:meta])* $name:ident($row:ty), $feature:literal) => {
        $(#[$doc])*
        #[cfg(feature = $feature)]
        pub struct $name(Vec<$row>);

        #[cfg(feature = $feature)]
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({} rows)", stringify!($name), self.0.len())
            }
        }

        #[cfg(feature = $feature)]
        impl $name {
            /// Number of rows.
            pub fn len(&self) -> usize {
                self.0.len()
            }

            /// Whether there are none.
            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }
        }
    };
}

encoded_rows!(
    /// PostgreSQL rows encoded as their callers encode them (opaque).
    PgRows(crate::postgres::PgRow),
    "postgres"
);

/// The caller's task, both PostgreSQL paths: encodes each of `rows` for a
/// statement whose parameters have `types` (`postgres/encode.rs` `encode`,
/// once per row, as each caller does). Rows that do not encode are left
/// out.
#[cfg(feature = "postgres")]
pub fn pg_encode(types: &[Type], rows: &[&Params<'_>]) -> PgRows {
    use crate::postgres::{PgArgs, encode};
    PgRows(
        rows.iter()
            .filter_map(|p| encode(types, PgArgs::Refs(p)).ok())
            .collect(),
    )
}

#[cfg(feature = "postgres")]
impl PgRows {
    /// The flusher's task, rewrite path: the bind list of the rows' n-row
    /// statement, built as `postgres/batch.rs` `write_named` builds it (every
    /// row's encoded values in order, no copy of their bytes).
    pub fn bind_list(&self) -> PgBindList<'_> {
        let per_row = self.0.first().map_or(0, |r| r.raw().len());
        let mut values = Vec::with_capacity(self.0.len() * per_row);
        for row in &self.0 {
            values.extend(row.raw());
        }
        PgBindList(values)
    }
}

/// The bind list of one n-row statement: what the flusher hands to
/// tokio-postgres.
#[cfg(feature = "postgres")]
pub struct PgBindList<'a>(Vec<crate::postgres::Raw<'a>>);

#[cfg(feature = "postgres")]
impl std::fmt::Debug for PgBindList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgBindList({} values)", self.0.len())
    }
}

#[cfg(feature = "postgres")]
impl PgBindList<'_> {
    /// Number of bound values.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it binds nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values as the driver takes them (each writes its encoded bytes).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &(dyn ToSql + Sync)> + '_ {
        self.0.iter().map(|v| v as &(dyn ToSql + Sync))
    }
}

/// What the COPY path of a plain shape writes (opaque).
#[cfg(feature = "postgres")]
#[derive(Debug)]
pub struct PgCopyPlan(crate::postgres::PgCopy);

/// The COPY plan of `sql` as the pool makes it for a plain table (the
/// catalog facts are taken as a plain table's, where the pool would read
/// them); `None` when the shape is not plain (RETURNING, ON CONFLICT,
/// expressions, no column list).
#[cfg(feature = "postgres")]
pub fn pg_copy(sql: &str) -> Option<PgCopyPlan> {
    use crate::classify::{Dialect, classify};
    let classified = classify(Dialect::Postgres, sql);
    crate::postgres::PgCopy::plain(classified.shape()?).map(PgCopyPlan)
}

#[cfg(feature = "postgres")]
impl PgCopyPlan {
    /// The flusher's task, COPY path: the binary COPY data of `rows`
    /// (`postgres/copy.rs` `PgCopy::data`). tokio-postgres sends a buffer
    /// this large as it is, without copying it again.
    pub fn data(&self, rows: &PgRows) -> bytes::Bytes {
        self.0.data(&rows.0)
    }
}

/// A MariaDB statement shape as the pool learns it (opaque).
#[cfg(feature = "mysql")]
pub struct MyShapePlan(crate::mysql::MyShape);

#[cfg(feature = "mysql")]
impl std::fmt::Debug for MyShapePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MyShapePlan({} parameters per row)", self.0.params())
    }
}

/// The shape of `sql` for MariaDB, as the pool prepares it once learned
/// from the server; `None` when it is not batchable.
#[cfg(feature = "mysql")]
pub fn mysql_shape(sql: &str) -> Option<MyShapePlan> {
    use crate::classify::{Dialect, classify};
    let classified = classify(Dialect::MySql, sql);
    let shape = std::sync::Arc::clone(classified.shape()?);
    Some(MyShapePlan(crate::mysql::MyShape::unlearned(shape)))
}

encoded_rows!(
    /// MariaDB rows as their callers checked them (opaque).
    MyRows(crate::mysql::MyRow),
    "mysql"
);

/// The caller's task, MariaDB rewrite path: turns each of `rows` into a
/// row of `shape` (`mysql/batch.rs` `encode`, once per row, as each caller
/// does). Rows that do not fit are left out.
#[cfg(feature = "mysql")]
pub fn mysql_encode(shape: &MyShapePlan, rows: Vec<mysql_async::Params>) -> MyRows {
    MyRows(
        rows.into_iter()
            .filter_map(|p| crate::mysql::encode(&shape.0, p).ok())
            .collect(),
    )
}

#[cfg(feature = "mysql")]
impl MyRows {
    /// The flusher's task, MariaDB rewrite path: the parameters of the
    /// rows' multi-row statement, collected as `mysql/batch.rs` `statement`
    /// collects them (every row's values cloned, in order).
    pub fn params(&self) -> Vec<mysql_async::Value> {
        let per_row = self.0.first().map_or(0, |r| r.values().len());
        crate::mysql::rewrite_params(&self.0, per_row)
    }

    /// The flusher's task, MariaDB bulk path: whether the rows may share one
    /// bulk command under a packet limit of `packet` bytes (every value's
    /// kind compared, the command's size added up), as the engine checks
    /// before each bulk statement.
    pub fn bulk_fits(&self, shape: &MyShapePlan, packet: usize) -> bool {
        shape
            .0
            .insert()
            .is_some_and(|s| crate::mysql::bulk_fits(s, &self.0, packet))
    }

    /// The flusher's task, MariaDB bulk path: the parameter sets of the
    /// rows' bulk command, collected as `mysql/batch.rs` `bulk` collects
    /// them (one `Params` per row, values cloned).
    pub fn bulk_params(&self) -> Vec<mysql_async::Params> {
        crate::mysql::bulk_params(&self.0).collect()
    }
}

/// The pool's own counting (`Stats`, and with the `metrics` feature the
/// metrics of whichever recorder is installed when this is made) of rows
/// that queue, then leave in one flush.
pub struct FlushCounting(crate::stats::Counters);

impl std::fmt::Debug for FlushCounting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlushCounting")
    }
}

impl Default for FlushCounting {
    fn default() -> Self {
        FlushCounting(crate::stats::Counters::new("bench", "postgres"))
    }
}

impl FlushCounting {
    /// Counts what a pool counts for `rows` rows that queue one by one, each
    /// waiting `waited`, then go in one flush of statements of at most
    /// `per_statement` rows, all succeeding.
    pub fn flush(&self, rows: usize, per_statement: usize, waited: std::time::Duration) {
        use crate::stats::FlushReason;
        let c = &self.0;
        for _ in 0..rows {
            c.queued_delta(1, 0);
        }
        c.queued_delta(0, rows);
        for _ in 0..rows {
            c.waited(waited);
        }
        c.flushed(FlushReason::Natural, rows);
        c.in_flight_delta(true);
        {
            let _sending = c.sending(rows);
            let mut left = rows;
            while left > 0 {
                let n = left.min(per_statement.max(1));
                let started = c.round_trip();
                c.statement(n);
                c.answered(started);
                left -= n;
            }
        }
        c.in_flight_delta(false);
        c.failed(0);
    }

    /// The rows counted so far (`Stats::rows`).
    pub fn rows(&self) -> u64 {
        self.0.snapshot().rows
    }
}
