//! Hooks for the fuzz targets in `fuzz/` (cargo feature `fuzzing`): every
//! path a SQL text takes through the pool that needs no server — the
//! statement-kind reader, the classifier, the `explain` text, the n-row
//! renderer and the many-caller rewrite of keyed reads, updates and
//! deletes — plus independent checks of what the renderers produced
//! ([`check_render`], [`check_keyed`]), which the classifier's own tests run
//! on their fixtures and on the inputs the fuzzers found.
//!
//! Not a stable API: only `fuzz/` and the crate's own tests use it.

mod keyed;
mod oracle;

use std::sync::Arc;

pub use self::keyed::{array_parameters, check_keyed};
pub use self::oracle::{EXTRA_RETURNING, check_render};
use crate::classify::{self, Classified, Form, InsertShape, KeyedShape};
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

/// A text the classifier found to be a keyed read, update or delete.
#[derive(Clone, Debug)]
pub struct Keyed(Arc<KeyedShape>);

impl Keyed {
    /// The statement for many callers, as the PostgreSQL backend renders it
    /// (`arrays`: one array parameter per parameter of the caller's text,
    /// as written in the rewrite, e.g. `$1::pg_catalog."int8"[]`).
    pub fn render(&self, arrays: &[String]) -> String {
        self.0.render(arrays)
    }

    /// The statement of a family of `texts` update texts, here each this
    /// one (see the PostgreSQL backend's families), `tag` the array of the
    /// callers' text numbers.
    pub fn render_family(&self, texts: usize, arrays: &[String], tag: &str) -> String {
        let members: Vec<&KeyedShape> = (0..texts).map(|_| &*self.0).collect();
        KeyedShape::render_family(&members, arrays, tag)
    }

    /// A MySQL read for `n` callers (the callers' statements joined by
    /// `UNION ALL`).
    pub fn render_union(&self, n: usize) -> String {
        self.0.render_union(n)
    }

    /// A MySQL read on a base table for `n` callers (the callers'
    /// conditions joined by `OR`, each row with the mask of its callers).
    pub fn render_or(&self, n: usize) -> String {
        self.0.render_or(n)
    }

    /// A MySQL update on a base table for `n` callers (each assigned
    /// column a `CASE` of the callers' conditions, the WHERE clause the
    /// conditions joined by `OR`).
    pub fn render_case(&self, n: usize) -> String {
        self.0.render_case(n)
    }

    /// A MySQL family statement of `texts` update texts, here each this
    /// one, for `n` callers (empty unless every assignment is a bare
    /// placeholder).
    pub fn render_family_case(&self, texts: usize, n: usize) -> String {
        let members: Vec<&KeyedShape> = (0..texts).map(|_| &*self.0).collect();
        KeyedShape::render_family_case(&members, n)
    }

    /// What the statement does: `reads`, `updates` or `deletes`.
    pub fn kind(&self) -> &'static str {
        self.0.kind.plural()
    }

    /// Bind parameters one caller's statement takes (the highest `$n`).
    pub fn params_per_row(&self) -> usize {
        self.0.params_per_row
    }

    /// The key columns (normalised) and the 0-based parameter each is
    /// compared with, in the order written.
    pub fn keys(&self) -> &[(String, usize)] {
        &self.0.keys
    }

    /// An update's assigned columns (normalised), in the order written.
    pub fn assigned(&self) -> &[String] {
        &self.0.assigned
    }

    /// The functions an update's assignments call (normalised, schema
    /// dropped).
    pub fn calls(&self) -> &[String] {
        &self.0.calls
    }

    /// Everything the classifier read from the text except how it renders,
    /// for messages.
    pub fn summary(&self) -> String {
        let s = &self.0;
        format!(
            "{:?} table={:?} keys={:?} params={} items={:?} assigned={:?} calls={:?}",
            s.kind, s.table, s.keys, s.params_per_row, s.items, s.assigned, s.calls
        )
    }
}

/// Classifies `sql` as the pool does (uncached): its keyed form when it is
/// a keyed read, update or delete.
pub fn classify_keyed(dialect: Dialect, sql: &str) -> Option<Keyed> {
    match classify::classify(dialect.inner(), sql) {
        Classified::Batchable(Form::Keyed(shape)) => Some(Keyed(shape)),
        _ => None,
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
/// reader, the classifier and its `explain` text, for a keyed text its
/// many-caller rewrite, and for a batchable INSERT the renderer at a few
/// sizes, with and without an appended RETURNING. Returns whether the text
/// is a batchable INSERT. Must never panic.
pub fn exercise(dialect: Dialect, sql: &str) -> bool {
    let kind = classify::statement_kind(dialect.inner(), sql);
    std::hint::black_box(format!("{kind:?}"));
    std::hint::black_box(explain(dialect, sql));
    if let Some(keyed) = classify_keyed(dialect, sql) {
        std::hint::black_box(keyed.summary());
        std::hint::black_box(keyed.render(&array_parameters(keyed.params_per_row())));
        return false;
    }
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
