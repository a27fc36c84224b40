//! Hooks for the fuzz targets in `fuzz/` (cargo feature `fuzzing`): every
//! path a SQL text takes through the pool that needs no server — the
//! statement-kind reader, the classifier, the `explain` text and the n-row
//! renderer — plus an independent check of what the renderer produced
//! ([`check_render`]), which the classifier's own tests run on their
//! fixtures and on the inputs the fuzzers found.
//!
//! Not a stable API: only `fuzz/` and the crate's own tests use it.

mod oracle;

use std::sync::Arc;

pub use self::oracle::{EXTRA_RETURNING, check_render};
use crate::classify::{self, Classified, InsertShape};
use crate::explain::Explain;

/// The SQL dialect a text is classified for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL (`$n` placeholders).
    Postgres,
    /// MySQL / MariaDB (`?` placeholders).
    MySql,
}

impl Dialect {
    /// Both dialects.
    pub const ALL: [Dialect; 2] = [Dialect::Postgres, Dialect::MySql];

    fn inner(self) -> classify::Dialect {
        match self {
            Dialect::Postgres => classify::Dialect::Postgres,
            Dialect::MySql => classify::Dialect::MySql,
        }
    }
}

/// A text the classifier found batchable.
#[derive(Clone, Debug)]
pub struct Shape(Arc<InsertShape>);

impl Shape {
    /// The statement for `rows` rows, as the backends render it
    /// (`extra_returning` as the PostgreSQL backend appends its conflict key).
    pub fn render(&self, rows: usize, extra_returning: Option<&str>) -> String {
        self.0.render(rows, extra_returning)
    }

    /// Bind parameters one row takes.
    pub fn params_per_row(&self) -> usize {
        self.0.params_per_row
    }

    /// Whether the statement has a RETURNING clause of its own.
    pub fn returning(&self) -> bool {
        self.0.returning
    }

    /// Everything the classifier read from the text except how it renders
    /// (verb, table, columns, parameters, conflict clause, RETURNING, calls),
    /// for comparing two classifications.
    pub fn summary(&self) -> String {
        let s = &self.0;
        format!(
            "{:?} {:?} table={:?} columns={:?} params={} tuple={:?} conflict={:?} returning={} calls={:?}",
            s.dialect,
            s.verb,
            s.table,
            s.columns,
            s.params_per_row,
            s.tuple_params,
            s.conflict,
            s.returning,
            s.calls
        )
    }
}

/// Classifies `sql` as the pool does (uncached): its shape when batchable.
pub fn classify(dialect: Dialect, sql: &str) -> Option<Shape> {
    classify::classify(dialect.inner(), sql)
        .shape()
        .map(|shape| Shape(Arc::clone(shape)))
}

/// What `Pool::explain` says about `sql` before the backend looks at the
/// table (the classifier's verdict and reason, as text).
pub fn explain(dialect: Dialect, sql: &str) -> String {
    let explain = match classify::classify(dialect.inner(), sql) {
        Classified::Batchable(_) => Explain::coalesced(),
        Classified::Other(reason) => Explain::not(reason),
    };
    format!("{explain} ({:?})", explain.reason())
}

/// Runs `sql` through every text-only path of the pool: the statement-kind
/// reader, the classifier and its `explain` text, and for a batchable text
/// the renderer at a few sizes, with and without an appended RETURNING.
/// Returns whether the text is batchable. Must never panic.
pub fn exercise(dialect: Dialect, sql: &str) -> bool {
    let kind = classify::statement_kind(dialect.inner(), sql);
    std::hint::black_box(format!("{kind:?}"));
    std::hint::black_box(explain(dialect, sql));
    let Some(shape) = classify(dialect, sql) else {
        return false;
    };
    std::hint::black_box(shape.summary());
    for rows in [0, 1, 2, 3] {
        std::hint::black_box(shape.render(rows, None));
        std::hint::black_box(shape.render(rows, Some(EXTRA_RETURNING)));
    }
    true
}

#[cfg(test)]
mod tests;
