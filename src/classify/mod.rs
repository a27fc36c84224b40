//! Classification of SQL texts into batchable single-row INSERTs and keyed
//! reads, updates and deletes ([`keyed`]).
//!
//! [`classify`] decides once per SQL text whether it is exactly one
//! single-row `INSERT ... VALUES (...)` statement whose rows can be coalesced
//! into one multi-row INSERT; if so it returns an [`InsertShape`] that renders
//! the multi-row statement for any number of rows, every value still bound as
//! a parameter. Everything that is not recognised is
//! [`Classified::Other`]: classification never fails and never panics.
//!
//! The SQL text is tokenised with sqlparser's tokenizer (no regular
//! expressions) and the rendered statement is built from slices of the
//! original text, so comments, whitespace, string literals and casts are
//! reproduced byte for byte; only PostgreSQL `$n` placeholders inside the
//! VALUES tuple are renumbered.
//!
//! Results are memoised per exact SQL text by the engine's route cache.

// The API is fixed for the whole crate, but which parts a build uses depends
// on the enabled backend features (e.g. `Verb` / `DuplicateKeyUpdate` only
// matter to MySQL).
#![allow(
    dead_code,
    reason = "crate-wide API; usage depends on enabled backend features"
)]

mod keyed;
mod kind;
mod lex;
mod parse;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_keyed;

use std::sync::Arc;

#[cfg_attr(
    not(feature = "mysql"),
    allow(unused_imports, reason = "only MySQL reads the callers' masks")
)]
pub(crate) use self::keyed::MASK_BITS;
#[cfg_attr(
    not(feature = "postgres"),
    allow(unused_imports, reason = "only PostgreSQL reads the select list")
)]
pub(crate) use self::keyed::{Item, KeyedKind, KeyedShape};
pub(crate) use self::kind::{StatementKind, statement_kind};
use crate::explain::NotCoalesced;

/// SQL dialect of the server a statement is sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dialect {
    /// PostgreSQL: `$n` placeholders, `"quoted"` identifiers, dollar quoting.
    Postgres,
    /// MySQL / MariaDB: `?` placeholders, `` `quoted` `` identifiers.
    MySql,
}

/// Outcome of classifying one SQL text. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) enum Classified {
    /// A statement that can be coalesced with others of the same text.
    Batchable(Form),
    /// Anything else: executed as it is (transaction control is refused by
    /// the pool), with the reason.
    Other(NotCoalesced),
}

impl Classified {
    /// The INSERT shape of a batchable INSERT, `None` otherwise.
    pub(crate) fn shape(&self) -> Option<&Arc<InsertShape>> {
        match self {
            Classified::Batchable(Form::Insert(shape)) => Some(shape),
            _ => None,
        }
    }
}

/// A batchable statement: a single-row INSERT, or a keyed read, update or
/// delete. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) enum Form {
    /// A single-row `INSERT ... VALUES (...)`.
    Insert(Arc<InsertShape>),
    /// A keyed read, update or delete.
    Keyed(Arc<KeyedShape>),
}

impl Form {
    /// Whether this is a single-row INSERT.
    pub(crate) fn is_insert(&self) -> bool {
        matches!(self, Form::Insert(_))
    }

    /// The table as written.
    pub(crate) fn table(&self) -> &str {
        match self {
            Form::Insert(s) => &s.table,
            Form::Keyed(s) => &s.table,
        }
    }

    /// The functions the statement calls where a backend checks them.
    pub(crate) fn calls(&self) -> &[String] {
        match self {
            Form::Insert(s) => &s.calls,
            Form::Keyed(s) => &s.calls,
        }
    }

    /// Bind parameters of one caller's statement.
    pub(crate) fn params_per_row(&self) -> usize {
        match self {
            Form::Insert(s) => s.params_per_row,
            Form::Keyed(s) => s.params_per_row,
        }
    }

    /// The keyed statement's kind; `None` for an INSERT.
    pub(crate) fn keyed(&self) -> Option<KeyedKind> {
        match self {
            Form::Insert(_) => None,
            Form::Keyed(s) => Some(s.kind),
        }
    }
}

/// The verb of a batchable statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verb {
    /// `INSERT`.
    Insert,
    /// MySQL `INSERT IGNORE`.
    InsertIgnore,
    /// MySQL `REPLACE`.
    Replace,
}

/// Conflict handling clause of a batchable statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// No conflict clause.
    None,
    /// PostgreSQL `ON CONFLICT [target] DO NOTHING`; `target` = Some(columns)
    /// when the target is a plain parenthesised column list `(a, b)` (no
    /// expressions, no WHERE, not ON CONSTRAINT), else None.
    DoNothing {
        /// Conflict target columns (normalised like [`InsertShape::columns`]).
        target: Option<Vec<String>>,
    },
    /// PostgreSQL `ON CONFLICT ... DO UPDATE SET ...`; `has_where` when the
    /// DO UPDATE has a WHERE clause. `target` as for `DoNothing`.
    DoUpdate {
        /// Conflict target columns (normalised like [`InsertShape::columns`]).
        target: Option<Vec<String>>,
        /// Whether the DO UPDATE part has a WHERE clause.
        has_where: bool,
    },
    /// MySQL `ON DUPLICATE KEY UPDATE ...`.
    DuplicateKeyUpdate,
}

/// One piece of the VALUES tuple text used for rendering.
#[derive(Debug)]
enum Piece {
    /// Verbatim source text.
    Text(Box<str>),
    /// A PostgreSQL placeholder `$k` (1-based `k` of the original statement),
    /// renumbered per row.
    Param(usize),
}

/// The recognised structure of a batchable single-row INSERT, able to render
/// the equivalent multi-row statement.
#[derive(Debug)]
pub(crate) struct InsertShape {
    /// Dialect the statement was classified for.
    pub(crate) dialect: Dialect,
    /// Statement verb.
    pub(crate) verb: Verb,
    /// Table name as written (may be schema-qualified / quoted), for diagnostics.
    pub(crate) table: String,
    /// Column list, normalised: unquoted idents lowercased (PostgreSQL) /
    /// lowercased (MySQL, case-insensitive); quoted idents kept as written
    /// without quotes. None when omitted.
    pub(crate) columns: Option<Vec<String>>,
    /// Number of bind parameters one row takes (PostgreSQL: highest $n used;
    /// MySQL: number of `?`).
    pub(crate) params_per_row: usize,
    /// For each position of the VALUES tuple: Some(k) when that expression is
    /// exactly one bare placeholder with 0-based parameter index k (no cast,
    /// no function), else None.
    pub(crate) tuple_params: Vec<Option<usize>>,
    /// Conflict handling clause.
    pub(crate) conflict: Conflict,
    /// Whether the statement has a RETURNING clause.
    pub(crate) returning: bool,
    /// Names of the functions the statement calls from its VALUES tuple on
    /// (the tuple, `ON CONFLICT` / `ON DUPLICATE KEY UPDATE` and `RETURNING`:
    /// a word followed by `(`, normalised like [`InsertShape::columns`],
    /// schema dropped), so a backend can check what a re-run of the rows
    /// would repeat.
    pub(crate) calls: Vec<String>,
    /// Source text up to (not including) the `(` of the VALUES tuple.
    head: Box<str>,
    /// The tuple text from `(` to `)` inclusive, split at placeholders.
    pieces: Box<[Piece]>,
    /// Source text after the tuple up to the end of the statement (no `;`).
    tail: Box<str>,
}

impl InsertShape {
    /// The text around the VALUES tuple, for writing the statement with a
    /// query in its place: the head without its final `VALUES` keyword
    /// (`INSERT INTO t (a, b) `), and the tail. `None` when the head does
    /// not end with the keyword itself (a comment between it and the tuple).
    pub(crate) fn around_values(&self) -> Option<(&str, &str)> {
        let head = self.head.trim_end();
        let cut = head.len().checked_sub("VALUES".len())?;
        let keyword = head.get(cut..)?;
        let before = head.get(..cut)?;
        let word = |c: char| c.is_alphanumeric() || c == '_' || c == '$' || c == '"';
        (keyword.eq_ignore_ascii_case("VALUES") && !before.ends_with(word))
            .then_some((before, &*self.tail))
    }

    /// The statement for `rows` (>= 1; 0 is treated as 1) rows: head, then
    /// `rows` copies of the tuple separated by ", " — PostgreSQL placeholders
    /// renumbered so row i (0-based) uses $(i*P + k) for the original $k
    /// (P = params_per_row); MySQL `?` simply repeated — then the tail. A
    /// trailing `;` of the original (and anything after it) is dropped. When
    /// `extra_returning` is Some(list) and the statement has no RETURNING,
    /// " RETURNING " + list is appended at the very end.
    pub(crate) fn render(&self, rows: usize, extra_returning: Option<&str>) -> String {
        let rows = rows.max(1);
        let tuple_len: usize = self
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.len(),
                Piece::Param(_) => 7,
            })
            .sum();
        let extra = extra_returning.map_or(0, |r| r.len() + 11);
        let mut out = String::with_capacity(
            self.head.len() + rows.saturating_mul(tuple_len + 2) + self.tail.len() + extra,
        );
        out.push_str(&self.head);
        for row in 0..rows {
            if row > 0 {
                out.push_str(", ");
            }
            let base = row.saturating_mul(self.params_per_row);
            for piece in self.pieces.iter() {
                match piece {
                    Piece::Text(text) => out.push_str(text),
                    Piece::Param(k) => {
                        out.push('$');
                        push_decimal(&mut out, base.saturating_add(*k));
                    }
                }
            }
        }
        out.push_str(&self.tail);
        if let Some(list) = extra_returning
            && !self.returning
        {
            out.push_str(" RETURNING ");
            out.push_str(list);
        }
        out
    }
}

/// Append the decimal representation of `n` (faster than `write!` in the
/// render loop, which formats one number per placeholder).
fn push_decimal(out: &mut String, mut n: usize) {
    // usize::MAX has at most 20 decimal digits.
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        start -= 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written, so this never falls back.
    let text = digits
        .get(start..)
        .and_then(|d| std::str::from_utf8(d).ok())
        .unwrap_or_default();
    out.push_str(text);
}

/// Classify without caching: the one place that says what a SQL text is.
pub(crate) fn classify(dialect: Dialect, sql: &str) -> Classified {
    let insert = match statement_kind(dialect, sql) {
        StatementKind::TransactionControl(k) => {
            return Classified::Other(NotCoalesced::TransactionControl(k));
        }
        StatementKind::ImplicitCommit(_) => {
            return Classified::Other(NotCoalesced::NotAnInsert);
        }
        StatementKind::Other { insert } => insert,
    };
    let Some(lexemes) = lex::lex(dialect, sql) else {
        return Classified::Other(if insert {
            NotCoalesced::Unreadable
        } else {
            NotCoalesced::NotAnInsert
        });
    };
    if !insert {
        return match keyed::recognise(dialect, sql, &lexemes) {
            Err(None) => Classified::Other(NotCoalesced::NotAnInsert),
            Err(Some(what)) => Classified::Other(NotCoalesced::KeyedForm(what)),
            Ok(_) if !lex::lexically_safe(dialect, sql, &lexemes) => {
                Classified::Other(NotCoalesced::KeyedForm(
                    "a comment or operator the servers and the tokenizer may read differently",
                ))
            }
            Ok(shape) => Classified::Batchable(Form::Keyed(Arc::new(shape))),
        };
    }
    if !lex::lexically_safe(dialect, sql, &lexemes) {
        return Classified::Other(NotCoalesced::InsertForm(
            "a comment or operator the servers and the tokenizer may read differently",
        ));
    }
    match parse::recognise(dialect, sql, &lexemes) {
        Ok(shape) => Classified::Batchable(Form::Insert(Arc::new(shape))),
        Err(what) => Classified::Other(NotCoalesced::InsertForm(what)),
    }
}
