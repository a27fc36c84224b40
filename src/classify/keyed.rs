//! Recognition of keyed reads, updates and deletes (PostgreSQL): one
//! statement on the rows whose key columns equal the caller's parameters,
//!
//! ```sql
//! SELECT <list> FROM t [alias] WHERE k = $1 [AND k2 = $2 ...]
//! UPDATE t [alias] SET c = <expression>, ... WHERE k = $1 [AND ...]
//! DELETE FROM t [alias] WHERE k = $1 [AND ...]
//! ```
//!
//! rewritten for many callers as one statement over `unnest` of one array
//! per parameter `WITH ORDINALITY`: the server evaluates the caller's own
//! conditions and expressions with each caller's values, and echoes the
//! ordinal of the caller each row belongs to (a read's rows come in
//! ordinal order, one per caller; a write returns the ordinal of every row
//! it changed). Nothing is compared in the client: keys match as the server
//! matches them (collations, `citext`, numeric scales, padding).
//!
//! The grammar is deliberately narrow: a select list of columns, `*`,
//! casts, literals and arithmetic (no calls, no subqueries: an expression
//! of a row that does not exist is evaluated for it in the rewrite); one
//! table; conditions that are a conjunction of `column = $n`; assignments
//! without subqueries or `DEFAULT`. No `ORDER BY`, `LIMIT`, `FOR UPDATE`,
//! `RETURNING`, `FROM`/`USING` lists, `WITH` or `ONLY`. Whether the table
//! lets the rewrite give each caller its own statement's outcome (a unique
//! key, no triggers, rules or row security...) is the backend's question.

use sqlparser::tokenizer::Token;

use super::Dialect;
use super::Piece;
use super::lex::Lexeme;
use super::parse::{is_kw, normalise, pg_param_number, usable_name};

/// What a keyed statement does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyedKind {
    /// `SELECT`.
    Read,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
}

impl KeyedKind {
    /// The kind's name in messages and configuration (`reads`...).
    pub(crate) fn plural(self) -> &'static str {
        match self {
            KeyedKind::Read => "reads",
            KeyedKind::Update => "updates",
            KeyedKind::Delete => "deletes",
        }
    }
}

/// One item of a read's select list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    /// `*` or `t.*`: every column of the table, in order.
    All,
    /// A bare column (`c`, `t.c`, `c AS x`), normalised.
    Column(String),
    /// Anything else (a cast, a literal, arithmetic).
    Other,
}

/// A keyed read, update or delete, able to render its many-caller form.
#[derive(Debug)]
pub(crate) struct KeyedShape {
    /// What it does.
    pub(crate) kind: KeyedKind,
    /// The table as written.
    pub(crate) table: String,
    /// The key columns (normalised) and the 0-based parameter each is
    /// compared with, in the order written.
    pub(crate) keys: Vec<(String, usize)>,
    /// Parameters one caller binds (the highest `$n`).
    pub(crate) params_per_row: usize,
    /// Functions the assignments call (normalised, schema dropped).
    pub(crate) calls: Vec<String>,
    /// A read's select list.
    pub(crate) items: Vec<Item>,
    /// An update's assigned columns (normalised).
    pub(crate) assigned: Vec<String>,
    /// An update's assigned expressions, one per column of `assigned`,
    /// split at placeholders.
    sets: Box<[Box<[Piece]>]>,
    /// An update's assigned columns as written.
    assigned_as_written: Box<[Box<str>]>,
    /// The table and its alias as written.
    table_ref: Box<str>,
    /// A read's select list (`*` qualified by the table's name) or an
    /// update's assignments, split at placeholders.
    list: Box<[Piece]>,
    /// The WHERE conditions, split at placeholders.
    cond: Box<[Piece]>,
}

/// The name of the rewrite's row source; texts that quote a name starting
/// with `batchpool ` are not coalesced, so it names nothing of the user's.
const KEYS: &str = "\"batchpool keys\"";

impl KeyedShape {
    /// The statement for many callers: `arrays` are the array parameters
    /// as written in the text, one per parameter of the caller's statement,
    /// in order (`$1::pg_catalog."int8"[]`).
    pub(crate) fn render(&self, arrays: &[String]) -> String {
        let mut columns = String::new();
        for k in 1..=self.params_per_row {
            columns.push_str(&format!("\"batchpool {k}\", "));
        }
        let source = format!(
            "unnest({}) WITH ORDINALITY AS {KEYS}({columns}\"batchpool ord\")",
            arrays.join(", ")
        );
        let list = pieces(&self.list);
        let cond = pieces(&self.cond);
        let table = &self.table_ref;
        match self.kind {
            KeyedKind::Read => format!(
                "SELECT {list} FROM {source} LEFT JOIN {table} ON {cond}\n\
                 ORDER BY {KEYS}.\"batchpool ord\""
            ),
            KeyedKind::Update => format!(
                "UPDATE {table} SET {list} FROM {source} WHERE {cond}\n\
                 RETURNING {KEYS}.\"batchpool ord\""
            ),
            KeyedKind::Delete => format!(
                "DELETE FROM {table} USING {source} WHERE {cond}\n\
                 RETURNING {KEYS}.\"batchpool ord\""
            ),
        }
    }
}

/// The row source's column that numbers each caller's text in a family's
/// statement (see [`KeyedShape::render_family`]).
const MEMBER: &str = "\"batchpool member\"";

/// A normalised column name as a quoted identifier.
fn quoted(column: &str) -> String {
    format!("\"{}\"", column.replace('"', "\"\""))
}

impl KeyedShape {
    /// What the texts of a family of keyed updates share (PostgreSQL):
    /// the table as written, the conditions, the parameters one caller
    /// binds. Texts of one family differ only in their SET clause (YCSB's
    /// `UPDATE usertable SET fieldN = $1 WHERE ycsb_key = $2`). `None`
    /// for reads and deletes.
    pub(crate) fn family_key(&self) -> Option<String> {
        (self.kind == KeyedKind::Update).then(|| {
            let cond = pieces_with(&self.cond, &mut |k, out| out.push_str(&format!("${k}")));
            format!("{}\0{cond}\0{}", self.table_ref.trim(), self.params_per_row)
        })
    }

    /// The row source of a family's statement: `unnest` of the callers'
    /// parameter `arrays` and of `tag`, the number of each caller's text.
    fn family_source(&self, arrays: &[String], tag: &str) -> String {
        let mut columns = String::new();
        for k in 1..=self.params_per_row {
            columns.push_str(&format!("\"batchpool {k}\", "));
        }
        format!(
            "unnest({}, {tag}) WITH ORDINALITY AS {KEYS}({columns}{MEMBER}, \"batchpool ord\")",
            arrays.join(", ")
        )
    }

    /// Updates of many callers of the texts `members` (one family, see
    /// [`family_key`](KeyedShape::family_key)) as one statement: every
    /// column some text assigns is assigned `CASE <the caller's text>
    /// WHEN j THEN (<text j's expression>) ... ELSE <the column> END`, so
    /// each row gets exactly its own caller's assignments and keeps its
    /// other columns. `arrays` as for [`render`](KeyedShape::render),
    /// `tag` the array of text numbers (0-based, in `members`' order). The
    /// caller checks that each expression has its column's type (then the
    /// `CASE` converts nothing), see
    /// [`render_family_types`](KeyedShape::render_family_types).
    pub(crate) fn render_family(members: &[&KeyedShape], arrays: &[String], tag: &str) -> String {
        let Some(first) = members.first() else {
            return String::new();
        };
        let mut columns: Vec<&str> = Vec::new();
        for member in members {
            for column in &member.assigned {
                if !columns.contains(&column.as_str()) {
                    columns.push(column);
                }
            }
        }
        let sets: Vec<String> = columns
            .iter()
            .map(|column| {
                let name = quoted(column);
                let mut case = format!("{name} = CASE {KEYS}.{MEMBER}");
                for (j, member) in members.iter().enumerate() {
                    if let Some(at) = member.assigned.iter().position(|a| a == column) {
                        let set = member.sets.get(at).map_or_else(String::new, |p| pieces(p));
                        case.push_str(&format!(" WHEN {j} THEN ({set})"));
                    }
                }
                case.push_str(&format!(" ELSE {name} END"));
                case
            })
            .collect();
        format!(
            "UPDATE {} SET {} FROM {} WHERE {}\nRETURNING {KEYS}.\"batchpool ord\"",
            first.table_ref,
            sets.join(", "),
            first.family_source(arrays, tag),
            pieces(&first.cond)
        )
    }

    /// One row of the type oids (`int8`) of each text's assigned
    /// expressions, each followed by its column's, for a family's
    /// statement of `members` (`arrays` and `tag` as there, written as
    /// typed NULLs): the family's statement converts nothing where every
    /// pair is equal.
    pub(crate) fn render_family_types(
        members: &[&KeyedShape],
        arrays: &[String],
        tag: &str,
    ) -> String {
        let Some(first) = members.first() else {
            return String::new();
        };
        let mut list = Vec::new();
        for member in members {
            for (column, set) in member.assigned.iter().zip(member.sets.iter()) {
                list.push(format!(
                    "pg_catalog.pg_typeof(({}))::pg_catalog.oid::pg_catalog.int8",
                    pieces(set)
                ));
                list.push(format!(
                    "pg_catalog.pg_typeof({})::pg_catalog.oid::pg_catalog.int8",
                    quoted(column)
                ));
            }
        }
        format!(
            "SELECT {} FROM (SELECT) AS \"batchpool one\" LEFT JOIN ({} CROSS JOIN {}) ON false",
            list.join(", "),
            first.table_ref,
            first.family_source(arrays, tag)
        )
    }
}

impl KeyedShape {
    /// A read for `n` callers as one statement of the caller's statement
    /// `n` times (MySQL), each numbered by a first column:
    /// `SELECT 1 AS `batchpool ord`, <list> FROM t WHERE ... UNION ALL
    /// SELECT 2, ...`, every placeholder a `?` of its own. The rows are
    /// told apart by that number, whatever order they come in (no sort).
    pub(crate) fn render_union(&self, n: usize) -> String {
        let list = pieces_with(&self.list, &mut |_, out| out.push('?'));
        let cond = pieces_with(&self.cond, &mut |_, out| out.push('?'));
        let table = &self.table_ref;
        let mut out = String::with_capacity(n * (list.len() + cond.len() + table.len() + 48));
        for i in 1..=n.max(1) {
            if i > 1 {
                out.push_str(" UNION ALL ");
            }
            out.push_str(&format!(
                "SELECT {i} AS `batchpool ord`, {list} FROM {table} WHERE {cond}\n"
            ));
        }
        out
    }
}

/// Callers one mask column of [`KeyedShape::render_or`] numbers (bits 0
/// to 62 of a signed 64-bit integer).
pub(crate) const MASK_BITS: usize = 63;

impl KeyedShape {
    /// A read or delete for `n` callers on a base table (MySQL) as one
    /// statement whose WHERE clause is the callers' conditions joined by
    /// `OR`, each row carrying which callers' conditions it meets:
    /// `SELECT IF((c1), 1, 0) | IF((c2), 2, 0) ... AS `batchpool mask 1`,
    /// <list> FROM t WHERE (c1) OR (c2) ...`, or `DELETE FROM t WHERE (c1)
    /// OR (c2) ... RETURNING <the masks>`, one mask column per
    /// [`MASK_BITS`] callers. Each condition is the caller's own, evaluated
    /// by the server on the row, so a row belongs to every caller whose
    /// statement would have read or deleted it. A read's placeholders are
    /// every caller's parameters for the masks, then every caller's again
    /// for the WHERE clause; a delete's the other way round. For an update,
    /// the masks alone: which callers' conditions each row meets.
    pub(crate) fn render_or(&self, n: usize) -> String {
        let n = n.max(1);
        let list = pieces_with(&self.list, &mut |_, out| out.push('?'));
        let cond = pieces_with(&self.cond, &mut |_, out| out.push('?'));
        let table = &self.table_ref;
        let mut masks = String::with_capacity(n * (cond.len() + 24));
        for (column, from) in (0..n).step_by(MASK_BITS).enumerate() {
            if column > 0 {
                masks.push_str(", ");
            }
            for caller in from..n.min(from + MASK_BITS) {
                if caller > from {
                    masks.push_str(" | ");
                }
                let bit = 1u64 << (caller - from);
                masks.push_str(&format!("IF(({cond}), {bit}, 0)"));
            }
            masks.push_str(&format!(" AS `batchpool mask {}`", column + 1));
        }
        let any = any_of(&cond, n);
        match self.kind {
            KeyedKind::Delete => format!("DELETE FROM {table} WHERE {any} RETURNING {masks}"),
            KeyedKind::Read => format!("SELECT {masks}, {list} FROM {table} WHERE {any}"),
            // Which callers' conditions the table's rows meet (see
            // `render_case`).
            KeyedKind::Update => format!("SELECT {masks} FROM {table} WHERE {any}"),
        }
    }
}

impl KeyedShape {
    /// A keyed update for `n` callers on a base table (MySQL) as one
    /// statement: each assigned column is set to `CASE WHEN (c1) THEN (e1)
    /// WHEN (c2) THEN (e2) ... END`, where `ci` is caller `i`'s condition
    /// and `ei` its expression for that column, and the WHERE clause is
    /// the callers' conditions joined by `OR`:
    /// `UPDATE t SET v = CASE WHEN (id = ?) THEN (?) ... END WHERE (id = ?)
    /// OR ...`. Each row gets the expressions of the first caller whose
    /// condition it meets, evaluated by the server on that row with that
    /// caller's values. A row the WHERE clause takes meets some `ci` (the
    /// conditions read key columns only, which no assignment changes), so
    /// no `ELSE` is needed, and the `CASE`'s type is its branches' alone.
    /// The placeholders are bound in the order
    /// [`case_params`](KeyedShape::case_params) gives.
    pub(crate) fn render_case(&self, n: usize) -> String {
        let n = n.max(1);
        let cond = pieces_with(&self.cond, &mut |_, out| out.push('?'));
        let mut out = format!("UPDATE {} SET ", self.table_ref);
        for (j, (column, set)) in self
            .assigned_as_written
            .iter()
            .zip(self.sets.iter())
            .enumerate()
        {
            if j > 0 {
                out.push_str(", ");
            }
            let set = pieces_with(set, &mut |_, out| out.push('?'));
            out.push_str(&format!("{column} = CASE"));
            for _ in 0..n {
                out.push_str(&format!(" WHEN ({cond}) THEN ({set})"));
            }
            out.push_str(" END");
        }
        out.push_str(" WHERE ");
        out.push_str(&any_of(&cond, n));
        out
    }

    /// The 0-based parameter an update's assignment `j` is, when it is a
    /// bare placeholder (`SET c = ?`, with nothing around it but spaces,
    /// tabs and line breaks: no comment, no character the server may read
    /// otherwise).
    pub(crate) fn bare_param(&self, j: usize) -> Option<usize> {
        let blank = |t: &str| t.chars().all(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
        match &**self.sets.get(j)? {
            [Piece::Text(a), Piece::Param(k), Piece::Text(b)] if blank(a) && blank(b) => {
                k.checked_sub(1)
            }
            _ => None,
        }
    }

    /// The columns a family of MySQL updates assigns (`members`, each of
    /// bare placeholders, see [`bare_param`](KeyedShape::bare_param)), in
    /// the order they first appear: each as the first member assigning it
    /// writes it, with each member's 0-based parameter for it (`None`: the
    /// member does not assign it). `None` when an assignment is not a bare
    /// placeholder.
    pub(crate) fn family_columns<'a>(members: &[&'a KeyedShape]) -> Option<Vec<FamilyColumn<'a>>> {
        let mut columns: Vec<(&'a str, &'a str, Vec<Option<usize>>)> = Vec::new();
        for (m, member) in members.iter().enumerate() {
            for (j, (name, written)) in member
                .assigned
                .iter()
                .zip(member.assigned_as_written.iter())
                .enumerate()
            {
                let param = member.bare_param(j)?;
                let at = match columns.iter().position(|c| c.0 == name.as_str()) {
                    Some(at) => at,
                    None => {
                        columns.push((name, written, vec![None; members.len()]));
                        columns.len() - 1
                    }
                };
                columns[at].2[m] = Some(param);
            }
        }
        Some(columns.into_iter().map(|(_, w, p)| (w, p)).collect())
    }

    /// Updates of `n` callers of the MySQL texts `members` (one family:
    /// the same table, conditions and parameter count, every assignment a
    /// bare placeholder) as one statement: each column some member assigns
    /// is set to `CASE WHEN ? AND (c1) THEN (?) WHEN ? AND (c2) THEN (?)
    /// ... ELSE <the column> END`, where for caller `i` the first `?` is 1
    /// when its text assigns the column (then the second is its value) and
    /// 0 when not (its row keeps the column), and the WHERE clause is the
    /// callers' conditions joined by `OR`. A caller's flag of 0 ends its
    /// branch before its condition is compared. Empty when an assignment is
    /// not a bare placeholder.
    pub(crate) fn render_family_case(members: &[&KeyedShape], n: usize) -> String {
        let (Some(first), Some(columns)) = (members.first(), Self::family_columns(members)) else {
            return String::new();
        };
        let n = n.max(1);
        let cond = pieces_with(&first.cond, &mut |_, out| out.push('?'));
        let mut out = format!("UPDATE {} SET ", first.table_ref);
        for (j, (column, _)) in columns.iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("{column} = CASE"));
            for _ in 0..n {
                out.push_str(&format!(" WHEN ? AND ({cond}) THEN (?)"));
            }
            out.push_str(&format!(" ELSE {column} END"));
        }
        out.push_str(" WHERE ");
        out.push_str(&any_of(&cond, n));
        out
    }

    /// The 0-based parameters of one caller's statement in the order
    /// [`render_case`](KeyedShape::render_case) binds them: for each
    /// assigned column, the condition's and then the expression's (one
    /// list per column, each bound for every caller in turn), then the
    /// condition's for the WHERE clause.
    pub(crate) fn case_params(&self) -> (Vec<Vec<usize>>, Vec<usize>) {
        let params = |pieces: &[Piece]| -> Vec<usize> {
            pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::Param(k) => k.checked_sub(1),
                    Piece::Text(_) => None,
                })
                .collect()
        };
        let cond = params(&self.cond);
        let columns = self
            .sets
            .iter()
            .map(|set| cond.iter().copied().chain(params(set)).collect())
            .collect();
        (columns, cond)
    }
}

/// A column of a MySQL family of updates (see
/// [`KeyedShape::family_columns`]): as written, and each member's
/// parameter for it.
pub(crate) type FamilyColumn<'a> = (&'a str, Vec<Option<usize>>);

/// `n` callers' condition `cond` joined by `OR`: `(cond) OR (cond) ...`.
fn any_of(cond: &str, n: usize) -> String {
    let mut any = String::with_capacity(n * (cond.len() + 6));
    for caller in 0..n {
        if caller > 0 {
            any.push_str(" OR ");
        }
        any.push_str(&format!("({cond})"));
    }
    any
}

/// The text of `pieces`, each placeholder written by `param`.
fn pieces_with(pieces: &[Piece], param: &mut dyn FnMut(usize, &mut String)) -> String {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Param(k) => param(*k, &mut out),
        }
    }
    out
}

/// The text of `pieces`, each placeholder `$k` replaced by the row
/// source's column for parameter `k`.
fn pieces(pieces: &[Piece]) -> String {
    pieces_with(pieces, &mut |k, out| {
        out.push_str(&format!("{KEYS}.\"batchpool {k}\""));
    })
}

/// Words that end a name position (a table or its alias).
const NOT_NAMES: &[&str] = &[
    "WHERE",
    "SET",
    "ONLY",
    "LATERAL",
    "JOIN",
    "USING",
    "FROM",
    "AS",
    "ON",
    "ORDER",
    "GROUP",
    "LIMIT",
    "OFFSET",
    "FOR",
    "RETURNING",
    "WINDOW",
    "HAVING",
    "UNION",
    "NATURAL",
    "CROSS",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "TABLESAMPLE",
    "SELECT",
    "VALUES",
    "WITH",
    "FETCH",
];

/// Words a select list or an assignment may not hold: they start a
/// subquery, a clause, or a form the rewrite does not keep.
const NOT_IN_EXPRESSIONS: &[&str] = &[
    "SELECT",
    "TABLE",
    "VALUES",
    "LATERAL",
    "DISTINCT",
    "ALL",
    "FROM",
    "WHERE",
    "DEFAULT",
    "RETURNING",
    "INTO",
    "EXISTS",
    "ORDER",
    "LIMIT",
    "FOR",
    "UNION",
    "INTERSECT",
    "EXCEPT",
    "GROUP",
    "HAVING",
    "WINDOW",
    "OVER",
    "WITH",
    "ROW",
    "ARRAY",
    "OFFSET",
    "FETCH",
];

/// A MySQL update's words that the rewrite does not keep: `UPDATE
/// LOW_PRIORITY` / `UPDATE IGNORE` (errors become warnings, rows are
/// skipped), user and system variables (`@v`, `@@sql_mode`) and `:=`,
/// which read or write the session.
fn mysql_update_modifiers(lexemes: &[Lexeme], sig: &[usize]) -> Result<(), Option<&'static str>> {
    let second = sig.get(1).and_then(|&i| lexemes.get(i)).map(|l| &l.token);
    if second.is_some_and(|t| is_kw(t, "LOW_PRIORITY") || is_kw(t, "IGNORE")) {
        return Err(Some("UPDATE LOW_PRIORITY or UPDATE IGNORE"));
    }
    let session = lexemes.iter().any(|l| match &l.token {
        Token::Word(w) => w.quote_style.is_none() && w.value.starts_with('@'),
        Token::AtSign | Token::Assignment => true,
        _ => false,
    });
    if session {
        return Err(Some("a user or system variable, or `:=`"));
    }
    Ok(())
}

/// Recognises a keyed statement in already-lexed `sql` (on MySQL reads
/// and deletes).
/// `Err(None)`: not a SELECT, UPDATE or DELETE at all; `Err(Some(what))`:
/// one whose form the rewrite does not cover.
pub(super) fn recognise(
    dialect: Dialect,
    sql: &str,
    lexemes: &[Lexeme],
) -> Result<KeyedShape, Option<&'static str>> {
    let mut sig: Vec<usize> = lexemes
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_trivia())
        .map(|(i, _)| i)
        .collect();
    let first = sig.first().and_then(|&i| lexemes.get(i)).map(|l| &l.token);
    let kind = match first {
        Some(t) if is_kw(t, "SELECT") => KeyedKind::Read,
        Some(t) if is_kw(t, "UPDATE") => KeyedKind::Update,
        Some(t) if is_kw(t, "DELETE") => KeyedKind::Delete,
        _ => return Err(None),
    };
    if dialect == Dialect::MySql && kind == KeyedKind::Update {
        mysql_update_modifiers(lexemes, &sig)?;
    }
    // One statement: a `;` may only end it.
    if let Some(semi) = lexemes
        .iter()
        .position(|l| matches!(l.token, Token::SemiColon))
    {
        if sig.last() != Some(&semi) {
            return Err(Some("several statements in one text"));
        }
        sig.pop();
    }
    // Also `U&"batchpool\0020..."`, whose escapes the tokenizer keeps.
    let quoted_ours = lexemes.iter().any(|l| {
        matches!(&l.token, Token::Word(w) if w.quote_style.is_some()
            && w.value.to_ascii_lowercase().starts_with("batchpool"))
    });
    if quoted_ours {
        return Err(Some("a quoted name starting with \"batchpool\""));
    }
    let p = Cursor {
        dialect,
        sql,
        lexemes,
        sig: &sig,
    };
    p.statement(kind).map_err(Some)
}

/// The significant tokens of one statement.
struct Cursor<'a> {
    dialect: Dialect,
    sql: &'a str,
    lexemes: &'a [Lexeme],
    /// Indexes into `lexemes` of the significant tokens.
    sig: &'a [usize],
}

impl<'a> Cursor<'a> {
    fn token(&self, pos: usize) -> Option<&'a Token> {
        self.sig
            .get(pos)
            .and_then(|&i| self.lexemes.get(i))
            .map(|l| &l.token)
    }

    /// The 1-based number of the placeholder at `pos`: PostgreSQL's `$n`,
    /// MySQL's `?` by its place among the statement's placeholders.
    fn param(&self, pos: usize) -> Option<usize> {
        match (self.dialect, self.token(pos)?) {
            (Dialect::Postgres, Token::Placeholder(p)) => pg_param_number(p),
            (Dialect::MySql, Token::Placeholder(p)) if p == "?" => Some(
                1 + (0..pos)
                    .filter(|&q| matches!(self.token(q), Some(Token::Placeholder(_))))
                    .count(),
            ),
            _ => None,
        }
    }

    fn is(&self, pos: usize, kw: &str) -> bool {
        self.token(pos).is_some_and(|t| is_kw(t, kw))
    }

    /// The first position at or after `from` at bracket depth 0 holding
    /// the keyword `kw`.
    fn find_kw(&self, from: usize, kw: &str) -> Option<usize> {
        let mut depth = 0usize;
        for pos in from..self.sig.len() {
            match self.token(pos)? {
                Token::LParen | Token::LBracket => depth += 1,
                Token::RParen | Token::RBracket => depth = depth.checked_sub(1)?,
                t if depth == 0 && is_kw(t, kw) => return Some(pos),
                _ => {}
            }
        }
        None
    }

    /// The source text of significant positions `from..to` (trivia between
    /// them kept).
    fn text(&self, from: usize, to: usize) -> Option<&'a str> {
        let start = self.lexemes.get(*self.sig.get(from)?)?.start;
        let end = self.lexemes.get(*self.sig.get(to.checked_sub(1)?)?)?.end;
        self.sql.get(start..end)
    }

    /// The text of positions `from..to` split at its placeholders (each
    /// `$n` checked); `replace` gives the text put in place of a token
    /// instead (`*` of a select list).
    fn pieces(
        &self,
        from: usize,
        to: usize,
        replace: &dyn Fn(usize) -> Option<String>,
    ) -> Option<Vec<Piece>> {
        let mut out = Vec::new();
        let mut cursor = self.lexemes.get(*self.sig.get(from)?)?.start;
        for pos in from..to {
            let lexeme = self.lexemes.get(*self.sig.get(pos)?)?;
            let put = match &lexeme.token {
                Token::Placeholder(_) => Some(Piece::Param(self.param(pos)?)),
                _ => replace(pos).map(|text| Piece::Text(text.into())),
            };
            if let Some(put) = put {
                out.push(Piece::Text(self.sql.get(cursor..lexeme.start)?.into()));
                out.push(put);
                cursor = lexeme.end;
            }
        }
        let end = self.lexemes.get(*self.sig.get(to.checked_sub(1)?)?)?.end;
        out.push(Piece::Text(self.sql.get(cursor..end)?.into()));
        Some(out)
    }

    /// A table name and optional alias at `from..to`: the table as
    /// written and the name that qualifies its columns.
    fn table(&self, from: usize, to: usize) -> Option<(String, String)> {
        let name = |pos: usize| match self.token(pos)? {
            Token::Word(w)
                if usable_name(w)
                    && (w.quote_style.is_some()
                        || !NOT_NAMES.iter().any(|k| w.value.eq_ignore_ascii_case(k))) =>
            {
                Some(())
            }
            _ => None,
        };
        let mut pos = from;
        name(pos)?;
        pos += 1;
        while matches!(self.token(pos), Some(Token::Period)) && pos < to {
            name(pos + 1)?;
            pos += 2;
        }
        let table = self.text(from, pos)?.to_owned();
        if pos == to {
            return Some((table.clone(), table));
        }
        if self.is(pos, "AS") {
            pos += 1;
        }
        name(pos)?;
        (pos + 1 == to).then(|| Some((table, self.text(pos, pos + 1)?.to_owned())))?
    }

    /// `col = $n [AND col = $n ...]` at `from..to`: the key columns and
    /// their 0-based parameters.
    fn conditions(&self, from: usize, to: usize) -> Option<Vec<(String, usize)>> {
        let mut keys: Vec<(String, usize)> = Vec::new();
        let mut pos = from;
        loop {
            let (column, param, next) = self.condition(pos)?;
            if keys.iter().any(|(c, _)| *c == column) {
                return None;
            }
            keys.push((column, param));
            pos = next;
            if pos == to {
                return Some(keys);
            }
            if !self.is(pos, "AND") {
                return None;
            }
            pos += 1;
        }
    }

    /// One `col = $n` or `$n = col` from `pos`: the column, the 0-based
    /// parameter, and the position after it.
    fn condition(&self, pos: usize) -> Option<(String, usize, usize)> {
        if let Some(Token::Placeholder(_)) = self.token(pos) {
            let n = self.param(pos)?;
            if !matches!(self.token(pos + 1), Some(Token::Eq)) {
                return None;
            }
            let (column, next) = self.column(pos + 2)?;
            return Some((column, n - 1, next));
        }
        let (column, next) = self.column(pos)?;
        if !matches!(self.token(next), Some(Token::Eq)) {
            return None;
        }
        match self.token(next + 1)? {
            Token::Placeholder(_) => Some((column, self.param(next + 1)? - 1, next + 2)),
            _ => None,
        }
    }

    /// A column reference `c` or `q.c` from `pos`: the column (normalised)
    /// and the position after it.
    fn column(&self, pos: usize) -> Option<(String, usize)> {
        let word = |pos: usize| match self.token(pos)? {
            Token::Word(w) if usable_name(w) => Some(w),
            _ => None,
        };
        let mut last = word(pos)?;
        let mut next = pos + 1;
        while matches!(self.token(next), Some(Token::Period)) {
            last = word(next + 1)?;
            next += 2;
        }
        Some((normalise(self.dialect, last), next))
    }

    /// The statement of `kind`.
    fn statement(&self, kind: KeyedKind) -> Result<KeyedShape, &'static str> {
        let end = self.sig.len();
        let (table_from, list_range, table_to) = match kind {
            KeyedKind::Read => {
                let from = self.find_kw(1, "FROM").ok_or("no FROM clause")?;
                (from + 1, Some((1, from)), None)
            }
            KeyedKind::Update => {
                let set = self.find_kw(1, "SET").ok_or("no SET clause")?;
                (1, None, Some(set))
            }
            KeyedKind::Delete => {
                if !self.is(1, "FROM") {
                    return Err("DELETE without FROM");
                }
                (2, None, None)
            }
        };
        let where_at = self
            .find_kw(table_from, "WHERE")
            .ok_or("no WHERE clause (a keyed statement names its key)")?;
        if where_at + 1 >= end {
            return Err("an empty WHERE clause");
        }
        let set_range = table_to.map(|set| (set + 1, where_at));
        let table_end = table_to.unwrap_or(where_at);
        let (table, reference) = self.table(table_from, table_end).ok_or(
            "the table (one table, optionally with an alias; no ONLY, joins or USING lists)",
        )?;
        let keys = self.conditions(where_at + 1, end).ok_or(
            "the WHERE clause (only `column = $n` conditions joined by AND, each column \
             once; no ORDER BY, LIMIT, FOR UPDATE or RETURNING after it)",
        )?;

        let mut items = Vec::new();
        let mut assigned = Vec::new();
        let mut assigned_as_written = Vec::new();
        let mut sets = Vec::new();
        let mut calls = Vec::new();
        let list = match (list_range, set_range) {
            (Some((from, to)), _) => {
                items = self
                    .items(from, to, &reference)
                    .ok_or("the select list (columns, `*`, casts, literals and arithmetic only)")?;
                let star = |pos: usize| {
                    let whole = matches!(self.token(pos), Some(Token::Mul))
                        && (pos == from || matches!(self.token(pos - 1), Some(Token::Comma)))
                        && (pos + 1 == to || matches!(self.token(pos + 1), Some(Token::Comma)));
                    whole.then(|| format!("{reference}.*"))
                };
                self.pieces(from, to, &star).ok_or(INTERNAL)?
            }
            (None, Some((from, to))) => {
                let assignments = self.assignments(from, to).ok_or(
                    "the SET clause (`column = expression` without subqueries or DEFAULT)",
                )?;
                for (column, (start, end)) in assignments {
                    assigned.push(column);
                    assigned_as_written.push(
                        self.text(start.checked_sub(2).ok_or(INTERNAL)?, start - 1)
                            .ok_or(INTERNAL)?
                            .into(),
                    );
                    sets.push(
                        self.pieces(start, end, &|_| None)
                            .ok_or(INTERNAL)?
                            .into_boxed_slice(),
                    );
                }
                calls = self.calls(from, to);
                self.pieces(from, to, &|_| None).ok_or(INTERNAL)?
            }
            (None, None) => Vec::new(),
        };
        let cond = self.pieces(where_at + 1, end, &|_| None).ok_or(INTERNAL)?;

        // Parameters: $1..$P each used, none outside the list and the
        // conditions (the only places rendered).
        let mut used = Vec::new();
        for (pos, &i) in self.sig.iter().enumerate() {
            if let Some(Token::Placeholder(_)) = self.lexemes.get(i).map(|l| &l.token) {
                let in_list = list_range
                    .or(set_range)
                    .is_some_and(|(from, to)| (from..to).contains(&pos));
                if kind == KeyedKind::Read && in_list {
                    return Err("a placeholder in the select list");
                }
                if !in_list && pos <= where_at {
                    return Err("a placeholder outside the SET and WHERE clauses");
                }
                used.push(self.param(pos).ok_or("a placeholder")?);
            }
        }
        let params_per_row = used.iter().copied().max().unwrap_or(0);
        if (1..=params_per_row).any(|n| !used.contains(&n)) {
            return Err("a parameter number that is never used");
        }
        Ok(KeyedShape {
            kind,
            table,
            keys,
            params_per_row,
            calls,
            items,
            assigned,
            sets: sets.into_boxed_slice(),
            assigned_as_written: assigned_as_written.into_boxed_slice(),
            table_ref: self
                .text(table_from, table_end)
                .ok_or(INTERNAL)?
                .to_owned()
                .into(),
            list: list.into_boxed_slice(),
            cond: cond.into_boxed_slice(),
        })
    }

    /// A read's select list at `from..to`.
    fn items(&self, from: usize, to: usize, reference: &str) -> Option<Vec<Item>> {
        let mut items = Vec::new();
        let mut start = from;
        for pos in from..=to {
            if pos < to && !matches!(self.token(pos)?, Token::Comma) {
                continue;
            }
            if pos == start {
                return None;
            }
            items.push(self.item(start, pos, reference)?);
            start = pos + 1;
        }
        Some(items)
    }

    /// One select-list item at `from..to`.
    fn item(&self, from: usize, to: usize, reference: &str) -> Option<Item> {
        for pos in from..to {
            let allowed = match self.token(pos)? {
                Token::Word(w) => {
                    w.quote_style.is_some()
                        || !NOT_IN_EXPRESSIONS
                            .iter()
                            .any(|k| w.value.eq_ignore_ascii_case(k))
                }
                Token::Period
                | Token::Mul
                | Token::DoubleColon
                | Token::LBracket
                | Token::RBracket
                | Token::Number(..)
                | Token::SingleQuotedString(_)
                | Token::Plus
                | Token::Minus
                | Token::Div
                | Token::Mod
                | Token::StringConcat => true,
                _ => false,
            };
            if !allowed {
                return None;
            }
        }
        let len = to - from;
        if len == 1 && matches!(self.token(from), Some(Token::Mul)) {
            return Some(Item::All);
        }
        let qualifier_is_table = |pos: usize| {
            self.text(pos, pos + 1)
                .is_some_and(|q| q == reference || reference.ends_with(&format!(".{q}")))
        };
        if len == 3
            && matches!(self.token(from + 1), Some(Token::Period))
            && matches!(self.token(from + 2), Some(Token::Mul))
        {
            return Some(if qualifier_is_table(from) {
                Item::All
            } else {
                Item::Other
            });
        }
        let Some((column, next)) = self.column(from) else {
            return Some(Item::Other);
        };
        let qualified = next > from + 1;
        if qualified && (next != from + 3 || !qualifier_is_table(from)) {
            return Some(Item::Other);
        }
        let aliased = match to - next {
            0 => true,
            1 => matches!(self.token(next), Some(Token::Word(_))),
            2 => self.is(next, "AS") && matches!(self.token(next + 1), Some(Token::Word(_))),
            _ => false,
        };
        Some(if aliased {
            Item::Column(column)
        } else {
            Item::Other
        })
    }

    /// An update's `col = expr, ...` at `from..to`: the assigned columns,
    /// each with the positions of its expression.
    fn assignments(&self, from: usize, to: usize) -> Option<Vec<(String, (usize, usize))>> {
        let mut assigned: Vec<(String, (usize, usize))> = Vec::new();
        let mut pos = from;
        while pos < to {
            let column = match self.token(pos)? {
                Token::Word(w) if usable_name(w) => normalise(self.dialect, w),
                _ => return None,
            };
            if !matches!(self.token(pos + 1)?, Token::Eq)
                || assigned.iter().any(|(c, _)| *c == column)
            {
                return None;
            }
            pos += 2;
            let start = pos;
            let mut depth = 0usize;
            while pos < to {
                match self.token(pos)? {
                    Token::LParen | Token::LBracket => depth += 1,
                    Token::RParen | Token::RBracket => depth = depth.checked_sub(1)?,
                    Token::Comma if depth == 0 => break,
                    Token::Word(w)
                        if w.quote_style.is_none()
                            && NOT_IN_EXPRESSIONS
                                .iter()
                                .any(|k| w.value.eq_ignore_ascii_case(k)) =>
                    {
                        return None;
                    }
                    Token::SemiColon => return None,
                    _ => {}
                }
                pos += 1;
            }
            if pos == start || depth != 0 {
                return None;
            }
            assigned.push((column, (start, pos)));
            if pos < to {
                pos += 1;
                if pos == to {
                    return None;
                }
            }
        }
        (!assigned.is_empty()).then_some(assigned)
    }

    /// Names of the functions called at `from..to` (a word followed by
    /// `(`, not a type modifier after `::`), normalised, each once.
    fn calls(&self, from: usize, to: usize) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for pos in from..to.saturating_sub(1) {
            if let (Some(Token::Word(w)), Some(Token::LParen)) =
                (self.token(pos), self.token(pos + 1))
            {
                let cast = pos > 0 && matches!(self.token(pos - 1), Some(Token::DoubleColon));
                let name = normalise(self.dialect, w);
                if !cast && !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }
}

/// A slice that cannot fail did: the text is not coalesced.
const INTERNAL: &str = "text offsets the tokenizer reported inconsistently";
