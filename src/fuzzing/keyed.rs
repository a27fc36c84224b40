//! An independent check of the many-caller rewrite of keyed reads, updates
//! and deletes (PostgreSQL; MariaDB's reads: [`check_keyed`]), by tokens
//! and by sqlparser's parser.
//!
//! The rewrite is built from slices of the caller's text that the
//! classifier located: the select list or the SET clause, the table and its
//! alias, and the WHERE conditions. This check knows nothing of those
//! slices: it tokenizes the text afresh with sqlparser's tokenizer (plain
//! whitespace dropped, comments kept), finds the parts by their keywords
//! (comments at their edges left out, as the rewrite leaves them out) and
//! requires
//!
//! - that the text is one statement of the form: nothing but comments
//!   after a `;`; no quoted name starting with `batchpool ` (written
//!   `"..."` or `U&"..."`); a table name with an optional alias; conditions
//!   that are `column = $n` or `$n = column` joined by AND, the columns being
//!   the shape's keys; a select list without calls, subqueries,
//!   placeholders, `DISTINCT` or `INTO`; an update's SET clause assigning the
//!   shape's columns, without subqueries or `DEFAULT`, its calls among the
//!   shape's; placeholders `$1..$P` each used, P the shape's parameters;
//! - that the rendered statement's tokens are the fixed rewrite around
//!   exactly those parts, each placeholder `$k` replaced by
//!   `"batchpool keys"."batchpool k"` and a lone `*` of a select list by
//!   `<table or alias>.*`, with the array parameters `$1..$P` once each and
//!   no other placeholder; and that the rewrite is not coalesced itself;
//! - when sqlparser's parser reads the text: one statement of the kind with
//!   no clause besides the select list or SET clause, the table and the
//!   WHERE clause, the same keys and assigned columns, and a rewrite it
//!   reads as one statement of the same kind. (Not when it reads a read
//!   without a FROM clause: it takes the keyword for a name after a select
//!   list the server would refuse, such as `SELECT a * FROM t`.)

use sqlparser::ast::{
    AssignmentTarget, BinaryOperator, Expr, FromTable, Ident, SetExpr, Statement, TableFactor,
    TableWithJoins, UpdateTableFromKind, Value,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::oracle::{is_comment, is_word, pg_number, placeholder_count, tokens};
use super::{Dialect, Keyed, classify, classify_keyed};

/// The rewrite's row source.
const KEYS: &str = "\"batchpool keys\"";

/// Words after which a `(` opens a subquery (unless it is a call's).
const SUBQUERY: &[&str] = &["SELECT", "VALUES", "TABLE", "WITH"];

/// Keywords a `(` may follow that is not a call's.
const NOT_CALLS: &[&str] = &[
    "AND", "OR", "NOT", "CASE", "WHEN", "THEN", "ELSE", "IS", "IN", "ANY", "SOME", "ALL", "ARRAY",
    "EXISTS", "BETWEEN", "LIKE", "ILIKE", "SIMILAR", "ESCAPE",
];

/// The array parameters the checks render with, one per parameter, written
/// as the PostgreSQL backend writes them: `$k::pg_catalog."int8"[]`.
pub fn array_parameters(params: usize) -> Vec<String> {
    (1..=params)
        .map(|k| format!("${k}::pg_catalog.\"int8\"[]"))
        .collect()
}

/// What every keyed text must be first: no INSERT shape too, one
/// statement that quotes no name of the rewrite's, its placeholders the
/// shape's parameters. The text's tokens, how many of them are the
/// statement's, and its parameters.
fn first_checks(
    dialect: Dialect,
    sql: &str,
    shape: &Keyed,
) -> Result<(Vec<Token>, usize, usize), String> {
    let context = |why: String| format!("{why}\n  shape: {}", shape.summary());
    if classify(dialect, sql).is_some() {
        return Err("both an INSERT shape and a keyed one".to_owned());
    }
    let all = tokens(dialect, sql)?;
    let len = one_statement(&all).map_err(context)?.len();
    // PostgreSQL's `"..."` and `U&"..."`; MySQL's `` `...` `` (its own
    // tokenizer: PostgreSQL's does not read `#` comments).
    let ours = match dialect {
        Dialect::Postgres => quoted_ours(sql)?,
        Dialect::MySql => all.iter().find_map(|t| match t {
            Token::Word(w)
                if w.quote_style == Some('`')
                    && w.value.to_ascii_lowercase().starts_with("batchpool") =>
            {
                Some(w.value.clone())
            }
            _ => None,
        }),
    };
    if let Some(name) = ours {
        return Err(context(format!("the text quotes the name {name:?}")));
    }
    let params = placeholder_count(dialect, &all[..len]).map_err(context)?;
    if params != shape.params_per_row() {
        return Err(context(format!(
            "the text has {params} parameters, the shape says {}",
            shape.params_per_row()
        )));
    }
    Ok((all, len, params))
}

/// MySQL's keyed read: a read, no INSERT shape too, one statement that
/// quotes no name of the rewrite's, its `?` the shape's parameters, and a
/// many-caller text of `n` branches holding `n` times as many `?`, `n`
/// numbered branch columns and `n - 1` `UNION ALL`s, every token of the
/// caller's text after its `SELECT` in each branch.
fn check_union(sql: &str, shape: &Keyed) -> Result<&'static str, String> {
    let dialect = Dialect::MySql;
    let context = |why: String| format!("{why}\n  shape: {}", shape.summary());
    let (all, len, params) = first_checks(dialect, sql, shape)?;
    if shape.kind() == "updates" {
        check_case(&all[..len], shape).map_err(context)?;
        return Ok("updates");
    }
    check_or(&all[..len], shape, params).map_err(context)?;
    if shape.kind() == "deletes" {
        return Ok("deletes");
    }
    for n in [1, 2, 3] {
        let text = shape.render_union(n);
        let rendered = tokens(dialect, &text)?;
        let count = |t: &Token| rendered.iter().filter(|r| *r == t).count();
        let placeholders = rendered
            .iter()
            .filter(|t| matches!(t, Token::Placeholder(_)))
            .count();
        if placeholders != n * params {
            return Err(context(format!(
                "{text:?} has {placeholders} placeholders, not {}",
                n * params
            )));
        }
        let ord = rendered
            .iter()
            .filter(|t| matches!(t, Token::Word(w) if w.value == "batchpool ord"))
            .count();
        let unions = rendered.iter().filter(|t| is_word(t, "UNION")).count();
        let own_unions = all.iter().filter(|t| is_word(t, "UNION")).count();
        if ord != n || unions != n - 1 + n * own_unions || count(&Token::SemiColon) != 0 {
            return Err(context(format!("{text:?} is not {n} numbered branches")));
        }
    }
    Ok("reads")
}

/// Callers numbered by one mask column of MySQL's `OR` statements.
const MASK_BITS: usize = 63;

/// The rendered tokens of one of MySQL's `OR` statements, read from the
/// front, each compared with what it must be.
struct Expect<'a> {
    rendered: Vec<&'a Token>,
    pos: usize,
}

/// Placeholders among `tokens`.
fn count_placeholders(tokens: &[Token]) -> usize {
    tokens
        .iter()
        .filter(|t| matches!(t, Token::Placeholder(_)))
        .count()
}

impl<'a> Expect<'a> {
    /// The rendered tokens `all`, comments aside, read from the front.
    fn of(all: &'a [Token]) -> Expect<'a> {
        Expect {
            rendered: all.iter().filter(|t| !is_comment(t)).collect(),
            pos: 0,
        }
    }
}

impl Expect<'_> {
    /// Whether every token was read and the rendering held `want` of its
    /// `found` placeholders.
    fn end(&self, found: usize, want: usize) -> Result<(), String> {
        if found != want {
            Err(format!("{found} placeholders, not {want}"))
        } else if self.pos != self.rendered.len() {
            Err("tokens after the end".to_owned())
        } else {
            Ok(())
        }
    }

    /// Whether the next token is `want` (consumed either way).
    fn next(&mut self, want: &Token) -> bool {
        let ok = self.rendered.get(self.pos).is_some_and(|t| *t == want);
        self.pos += 1;
        ok
    }

    /// Whether the next tokens are `want`.
    fn all<'t>(&mut self, want: impl IntoIterator<Item = &'t Token>) -> bool {
        let mut ok = true;
        for t in want {
            ok &= self.next(t);
        }
        ok
    }

    /// The mask columns for `n` callers: one per [`MASK_BITS`] callers of
    /// `IF((<cond>), 2^i, 0)` joined by `|`, each named `batchpool mask k`,
    /// joined by `,`.
    fn masks(&mut self, cond: &[&Token], n: usize) -> Result<(), String> {
        let word = |w: &str| Token::make_word(w, None);
        let number = |v: u64| Token::Number(v.to_string(), false);
        for (column, from) in (0..n).step_by(MASK_BITS).enumerate() {
            if column > 0 && !self.next(&Token::Comma) {
                return Err(format!("no `,` before mask column {}", column + 1));
            }
            for caller in from..n.min(from + MASK_BITS) {
                let ok = (caller == from || self.next(&Token::Pipe))
                    & self.all(&[word("IF"), Token::LParen, Token::LParen])
                    & self.all(cond.iter().copied())
                    & self.all(&[
                        Token::RParen,
                        Token::Comma,
                        number(1 << (caller - from)),
                        Token::Comma,
                        number(0),
                        Token::RParen,
                    ]);
                if !ok {
                    return Err(format!("caller {caller}'s mask term"));
                }
            }
            let name = Token::make_word(&format!("batchpool mask {}", column + 1), Some('`'));
            if !self.all(&[word("AS"), name]) {
                return Err(format!("mask column {}'s name", column + 1));
            }
        }
        Ok(())
    }

    /// `WHERE (<cond>) OR (<cond>) ...`, once per caller.
    fn any(&mut self, cond: &[&Token], n: usize) -> Result<(), String> {
        if !self.next(&Token::make_word("WHERE", None)) {
            return Err("no WHERE after the table".to_owned());
        }
        for caller in 0..n {
            let ok = (caller == 0 || self.next(&Token::make_word("OR", None)))
                & self.next(&Token::LParen)
                & self.all(cond.iter().copied())
                & self.next(&Token::RParen);
            if !ok {
                return Err(format!("caller {caller}'s condition"));
            }
        }
        Ok(())
    }

    /// The caller's tokens `own` (a lone `*` of a select list as
    /// `<name>.*`, its `FROM` in any case).
    fn own(&mut self, own: &[&Token]) -> Result<(), String> {
        // The name that qualifies the table's columns: its alias, else the
        // table as written (`s.t`).
        let table = own
            .iter()
            .rposition(|t| is_word(t, "FROM"))
            .map_or(&own[..0], |at| &own[at + 1..]);
        let reference = match table {
            [.., before, last @ Token::Word(_)] if !matches!(before, Token::Period) => {
                std::slice::from_ref(last)
            }
            _ => table,
        };
        for (i, t) in own.iter().enumerate() {
            let star = matches!(t, Token::Mul)
                && (i == 0 || matches!(own[i - 1], Token::Comma))
                && own
                    .get(i + 1)
                    .is_some_and(|t| matches!(t, Token::Comma) || is_word(t, "FROM"));
            let after = self.pos + reference.len();
            let qualified = !reference.is_empty()
                && self
                    .rendered
                    .get(self.pos..after)
                    .is_some_and(|r| r == reference)
                && matches!(self.rendered.get(after), Some(Token::Period))
                && matches!(self.rendered.get(after + 1), Some(Token::Mul));
            // The rewrite writes the `FROM` before the table itself.
            let from = is_word(t, "FROM")
                && self
                    .rendered
                    .get(self.pos)
                    .is_some_and(|r| is_word(r, "FROM"));
            if star && qualified {
                self.pos = after + 2;
            } else if from {
                self.pos += 1;
            } else if !self.next(t) {
                return Err(format!("the caller's `{t}`"));
            }
        }
        Ok(())
    }
}

/// MySQL's keyed read on a base table and keyed delete, for `n` of 2, 3,
/// 64 and 127 callers (one, two and three mask columns), comments aside:
///
/// - a read: `SELECT`, the masks (see [`Expect::masks`]), `,`, the
///   caller's tokens from its select list to its `WHERE` (a lone `*` of the
///   list as `<name>.*`), then `WHERE (<conditions>) OR ...` once per
///   caller;
/// - a delete: `DELETE FROM`, the caller's tokens from its table to its
///   `WHERE`, `WHERE (<conditions>) OR ...`, `RETURNING` and the masks;
///
/// the conditions being every token after the caller's `WHERE`, and `2 ×
/// n` times the caller's placeholders. `statement` is the caller's text's
/// tokens up to its `;`.
fn check_or(statement: &[Token], shape: &Keyed, params: usize) -> Result<(), String> {
    let own: Vec<&Token> = statement.iter().filter(|t| !is_comment(t)).collect();
    let at = own
        .iter()
        .position(|t| is_word(t, "WHERE"))
        .ok_or("a statement without WHERE")?;
    let read = match shape.kind() {
        "reads" => true,
        "deletes" => false,
        other => return Err(format!("keyed {other} for MySQL")),
    };
    let first = if read { "SELECT" } else { "DELETE" };
    if !own.first().is_some_and(|t| is_word(t, first)) {
        return Err(format!("{} that does not start with {first}", shape.kind()));
    }
    let cond = &own[at + 1..];
    for n in [2, 3, 64, 127] {
        let text = shape.render_or(n);
        let all = tokens(Dialect::MySql, &text)?;
        let placeholders = count_placeholders(&all);
        let mut expect = Expect::of(&all);
        let checked = if read {
            (expect.next(&Token::make_word("SELECT", None)))
                .then_some(())
                .ok_or_else(|| "no SELECT first".to_owned())
                .and_then(|()| expect.masks(cond, n))
                .and_then(|()| {
                    expect
                        .next(&Token::Comma)
                        .then_some(())
                        .ok_or_else(|| "no `,` after the masks".to_owned())
                })
                .and_then(|()| expect.own(&own[1..at]))
                .and_then(|()| expect.any(cond, n))
        } else {
            (expect.all(&[
                Token::make_word("DELETE", None),
                Token::make_word("FROM", None),
            ]))
            .then_some(())
            .ok_or_else(|| "no DELETE FROM first".to_owned())
            .and_then(|()| expect.own(&own[2..at]))
            .and_then(|()| expect.any(cond, n))
            .and_then(|()| {
                expect
                    .next(&Token::make_word("RETURNING", None))
                    .then_some(())
                    .ok_or_else(|| "no RETURNING after the conditions".to_owned())
            })
            .and_then(|()| expect.masks(cond, n))
        };
        let checked = checked.and_then(|()| expect.end(placeholders, 2 * n * params));
        checked.map_err(|why| format!("{text:?} for {n} callers: {why}"))?;
    }
    Ok(())
}

/// MySQL's keyed update, for `n` of 2, 3 and 64 callers, comments aside:
/// `UPDATE`, the caller's tokens from its table to its `SET`, `SET`, then
/// for each of the caller's assignments `<column> = <expression>` (split at
/// the commas outside brackets) `<column> = CASE`, `n` times `WHEN
/// (<conditions>) THEN (<expression>)`, and `END`, joined by `,`; then
/// `WHERE (<conditions>) OR ...` once per caller; the conditions being
/// every token after the caller's `WHERE`, and `n` times the caller's
/// placeholders of each `WHEN ... THEN ...` and of its conditions. The
/// rewrite is not coalesced itself. The mask read that follows an update
/// whose total does not split is `SELECT`, the masks (see
/// [`Expect::masks`]), `FROM`, the caller's table, and the conditions
/// joined by `OR`, with `2 × n` times the conditions' placeholders. A
/// family statement of two copies of the text, where the renderer gives
/// one (declining is always safe), must be of assignments that are each
/// one placeholder: per column `<column> = CASE`, `n` times `WHEN ? AND
/// (<conditions>) THEN (?)`, `ELSE <column> END`, then the conditions
/// joined by `OR`. `statement` is the caller's text's tokens up to its
/// `;`.
fn check_case(statement: &[Token], shape: &Keyed) -> Result<(), String> {
    let own: Vec<&Token> = statement.iter().filter(|t| !is_comment(t)).collect();
    if !own.first().is_some_and(|t| is_word(t, "UPDATE")) {
        return Err("an update that does not start with UPDATE".to_owned());
    }
    let set = own
        .iter()
        .position(|t| is_word(t, "SET"))
        .ok_or("an update without SET")?;
    let at = own
        .iter()
        .position(|t| is_word(t, "WHERE"))
        .ok_or("a statement without WHERE")?;
    if at < set {
        return Err("WHERE before SET".to_owned());
    }
    let cond = &own[at + 1..];
    // The assignments, split at commas outside brackets.
    let mut assignments: Vec<(&Token, &[&Token])> = Vec::new();
    let mut depth = 0usize;
    let mut start = set + 1;
    for pos in set + 1..=at {
        let end = pos == at;
        match own[pos] {
            Token::LParen | Token::LBracket => depth += 1,
            Token::RParen | Token::RBracket => depth = depth.saturating_sub(1),
            _ => {}
        }
        if end || (depth == 0 && matches!(own[pos], Token::Comma)) {
            let part = &own[start..pos];
            match part {
                [column, Token::Eq, expr @ ..] if !expr.is_empty() => {
                    assignments.push((column, expr));
                }
                _ => return Err(format!("an assignment `{}`", show_refs(part))),
            }
            start = pos + 1;
        }
    }
    if assignments.len() != shape.assigned().len() {
        return Err(format!(
            "{} assignments, the shape says {}",
            assignments.len(),
            shape.assigned().len()
        ));
    }
    let holders = |part: &[&Token]| {
        part.iter()
            .filter(|t| matches!(t, Token::Placeholder(_)))
            .count()
    };
    let word = |w: &str| Token::make_word(w, None);
    for n in [2, 3, 64] {
        let text = shape.render_case(n);
        let all = tokens(Dialect::MySql, &text)?;
        let placeholders = count_placeholders(&all);
        let mut expect = Expect::of(&all);
        let mut checked = Ok(());
        if !(expect.next(&word("UPDATE")) && expect.all(own[1..set].iter().copied())) {
            checked = Err("not UPDATE and the caller's table first".to_owned());
        }
        if checked.is_ok() && !expect.next(&word("SET")) {
            checked = Err("no SET after the table".to_owned());
        }
        let mut want = n * holders(cond);
        for (j, (column, expr)) in assignments.iter().enumerate() {
            if checked.is_err() {
                break;
            }
            let head = (j == 0 || expect.next(&Token::Comma))
                && expect.all([*column, &Token::Eq, &word("CASE")]);
            if !head {
                checked = Err(format!("assignment {j}'s `<column> = CASE`"));
                break;
            }
            for caller in 0..n {
                let ok = expect.all(&[word("WHEN"), Token::LParen])
                    & expect.all(cond.iter().copied())
                    & expect.all(&[Token::RParen, word("THEN"), Token::LParen])
                    & expect.all(expr.iter().copied())
                    & expect.next(&Token::RParen);
                if !ok {
                    checked = Err(format!("assignment {j}, caller {caller}'s branch"));
                    break;
                }
            }
            if checked.is_ok() && !expect.next(&word("END")) {
                checked = Err(format!("assignment {j}'s END"));
            }
            want += n * (holders(cond) + holders(expr));
        }
        let checked = checked
            .and_then(|()| expect.any(cond, n))
            .and_then(|()| expect.end(placeholders, want))
            .and_then(|()| {
                if classify_keyed(Dialect::MySql, &text).is_some()
                    || classify(Dialect::MySql, &text).is_some()
                {
                    Err("the rewrite is coalesced itself".to_owned())
                } else {
                    Ok(())
                }
            });
        checked.map_err(|why| format!("{text:?} for {n} callers: {why}"))?;

        // A family of two copies of the text, when every assignment is one
        // placeholder: per column `<column> = CASE`, `n` times `WHEN ? AND
        // (<conditions>) THEN (?)`, `ELSE <column> END`.
        let bare = assignments
            .iter()
            .all(|(_, expr)| matches!(expr, [Token::Placeholder(_)]));
        // Declining is always safe (the text then has no family); a family
        // statement must be of bare placeholders.
        let text = shape.render_family_case(2, n);
        if !text.is_empty() && !bare {
            return Err(format!("{text:?}: a family statement of expressions"));
        }
        if !text.is_empty() {
            let all = tokens(Dialect::MySql, &text)?;
            let placeholders = count_placeholders(&all);
            let mut expect = Expect::of(&all);
            let q = Token::Placeholder("?".into());
            let mut checked = if expect.next(&word("UPDATE"))
                && expect.all(own[1..set].iter().copied())
                && expect.next(&word("SET"))
            {
                Ok(())
            } else {
                Err("not UPDATE, the caller's table and SET first".to_owned())
            };
            for (j, (column, _)) in assignments.iter().enumerate() {
                if checked.is_err() {
                    break;
                }
                let mut ok = (j == 0 || expect.next(&Token::Comma))
                    && expect.all([*column, &Token::Eq, &word("CASE")]);
                for _ in 0..n {
                    ok = ok
                        && expect.all([&word("WHEN"), &q, &word("AND"), &Token::LParen])
                        && expect.all(cond.iter().copied())
                        && expect.all(&[Token::RParen, word("THEN"), Token::LParen, q.clone()])
                        && expect.next(&Token::RParen);
                }
                ok = ok
                    && expect.next(&word("ELSE"))
                    && expect.next(column)
                    && expect.next(&word("END"));
                if !ok {
                    checked = Err(format!("the family statement's assignment {j}"));
                }
            }
            let want = n * (assignments.len() * (holders(cond) + 2) + holders(cond));
            let checked = checked
                .and_then(|()| expect.any(cond, n))
                .and_then(|()| expect.end(placeholders, want));
            checked.map_err(|why| format!("{text:?} for {n} callers: {why}"))?;
        }

        // The mask read: `SELECT <masks> FROM <table> WHERE (<conditions>)
        // OR ...`.
        let text = shape.render_or(n);
        let all = tokens(Dialect::MySql, &text)?;
        let placeholders = count_placeholders(&all);
        let mut expect = Expect::of(&all);
        let checked = (expect.next(&word("SELECT")))
            .then_some(())
            .ok_or_else(|| "no SELECT first".to_owned())
            .and_then(|()| expect.masks(cond, n))
            .and_then(|()| {
                (expect.next(&word("FROM")) && expect.all(own[1..set].iter().copied()))
                    .then_some(())
                    .ok_or_else(|| "not FROM and the caller's table".to_owned())
            })
            .and_then(|()| expect.any(cond, n))
            .and_then(|()| expect.end(placeholders, 2 * n * holders(cond)));
        checked.map_err(|why| format!("{text:?} for {n} callers: {why}"))?;
    }
    Ok(())
}

/// `tokens` as text, for messages.
fn show_refs(tokens: &[&Token]) -> String {
    tokens
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a keyed statement does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `SELECT`.
    Read,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
}

/// Checks the keyed rewrite of `sql`: `Ok(None)` when the text is not a
/// keyed statement for `dialect`, its kind (`reads`, `updates`, `deletes`)
/// when it is and every check of the module docs held, else what failed.
/// For MySQL a keyed shape must be a read whose many-caller text is the
/// caller's statement once per caller (`check_union`) and whose text
/// for a base table is the callers' conditions joined by `OR` (`check_or`).
pub fn check_keyed(dialect: Dialect, sql: &str) -> Result<Option<&'static str>, String> {
    let Some(shape) = classify_keyed(dialect, sql) else {
        return Ok(None);
    };
    if dialect == Dialect::MySql {
        return check_union(sql, &shape).map(Some);
    }
    let kind = match shape.kind() {
        "reads" => Kind::Read,
        "updates" => Kind::Update,
        "deletes" => Kind::Delete,
        other => return Err(format!("an unknown kind {other:?}")),
    };
    let context = |why: String| format!("{why}\n  shape: {}", shape.summary());
    let (all, len, params) = first_checks(dialect, sql, &shape)?;
    let statement = &all[..len];
    let form = Form::of(statement, kind).map_err(context)?;
    form.check(&shape).map_err(context)?;

    let arrays = array_parameters(params);
    let text = shape.render(&arrays);
    let rendered = tokens(dialect, &text)?;
    let want = form.rewrite(&arrays)?;
    if rendered != want {
        let first = want
            .iter()
            .zip(&rendered)
            .position(|(a, b)| a != b)
            .unwrap_or(want.len().min(rendered.len()));
        return Err(context(format!(
            "the rewrite {text:?} is not the fixed rewrite around the text's parts: from token \
             {first} on, expected `{}`, rendered `{}`",
            show(&want[first..]),
            show(&rendered[first..])
        )));
    }
    let mut found: Vec<usize> = Vec::new();
    for token in &rendered {
        if let Token::Placeholder(p) = token {
            found.push(
                pg_number(p)
                    .ok_or_else(|| format!("the rewrite {text:?} has the placeholder {p}"))?,
            );
        }
    }
    found.sort_unstable();
    if found != (1..=params).collect::<Vec<_>>() {
        return Err(context(format!(
            "the rewrite {text:?} has the placeholders {found:?}, not $1..${params} once each"
        )));
    }
    if classify_keyed(dialect, &text).is_some() || classify(dialect, &text).is_some() {
        return Err(format!("the rewrite {text:?} is coalesced itself"));
    }
    parsed(sql, &text, kind, &shape).map_err(context)?;
    if kind == Kind::Update {
        check_family(&text, &shape, &arrays).map_err(context)?;
    }
    Ok(Some(shape.kind()))
}

/// The tokens of the statement: up to its `;`, after which only comments
/// may follow.
fn one_statement(all: &[Token]) -> Result<&[Token], String> {
    let Some(semi) = all.iter().position(|t| matches!(t, Token::SemiColon)) else {
        return Ok(all);
    };
    match all[semi + 1..].iter().find(|t| !is_comment(t)) {
        Some(t) => Err(format!("`{t}` after the statement's `;`")),
        None => Ok(&all[..semi]),
    }
}

/// Tokens as text, one space between them.
fn show<'a>(tokens: impl IntoIterator<Item = &'a Token>) -> String {
    tokens
        .into_iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first quoted name of `sql` that starts with `batchpool `, written
/// `"..."` or `U&"..."` (escapes decoded).
fn quoted_ours(sql: &str) -> Result<Option<String>, String> {
    let all = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .with_unescape(false)
        .tokenize()
        .map_err(|e| format!("{sql:?} does not tokenize: {e}"))?;
    for (i, token) in all.iter().enumerate() {
        let Token::Word(w) = token else { continue };
        if w.quote_style != Some('"') {
            continue;
        }
        let mut name = w.value.replace("\"\"", "\"");
        let unicode = i >= 2
            && matches!(all[i - 1], Token::Ampersand)
            && matches!(&all[i - 2], Token::Word(u) if u.quote_style.is_none()
                && u.value.eq_ignore_ascii_case("U"));
        if unicode {
            let escape = uescape(&all[i + 1..]).unwrap_or('\\');
            name = unicode_escapes(&name, escape);
        }
        if name.to_ascii_lowercase().starts_with("batchpool ") {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

/// The escape character of a `UESCAPE 'c'` clause at the start of `rest`
/// (whitespace and comments skipped).
fn uescape(rest: &[Token]) -> Option<char> {
    let mut significant = rest.iter().filter(|t| !is_comment(t));
    if !is_word(significant.next()?, "UESCAPE") {
        return None;
    }
    match significant.next()? {
        Token::SingleQuotedString(s) => s.chars().next(),
        _ => None,
    }
}

/// A `U&"..."` body decoded: `<e>XXXX`, `<e>+XXXXXX` and `<e><e>`.
fn unicode_escapes(body: &str, escape: char) -> String {
    let chars: Vec<char> = body.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c != escape {
            out.push(c);
            i += 1;
            continue;
        }
        if chars.get(i + 1) == Some(&escape) {
            out.push(escape);
            i += 2;
            continue;
        }
        let (start, len) = if chars.get(i + 1) == Some(&'+') {
            (i + 2, 6)
        } else {
            (i + 1, 4)
        };
        let hex: String = chars.iter().skip(start).take(len).collect();
        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
            Some(decoded) if hex.len() == len => {
                out.push(decoded);
                i = start + len;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The positions of `tokens` that are not comments.
fn significant(tokens: &[Token]) -> Vec<usize> {
    (0..tokens.len())
        .filter(|&i| !is_comment(&tokens[i]))
        .collect()
}

/// `tokens` without comments at either end.
fn trim(tokens: &[Token]) -> &[Token] {
    let sig = significant(tokens);
    match (sig.first(), sig.last()) {
        (Some(&a), Some(&b)) => &tokens[a..=b],
        _ => &[],
    }
}

/// The first position at or after `from` outside brackets holding the
/// unquoted word `word`.
fn find_word(tokens: &[Token], from: usize, word: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(from) {
        match token {
            Token::LParen | Token::LBracket => depth += 1,
            Token::RParen | Token::RBracket => depth = depth.saturating_sub(1),
            t if depth == 0 && is_word(t, word) => return Some(i),
            _ => {}
        }
    }
    None
}

/// `tokens` split at commas outside brackets, each part trimmed.
fn split_commas(tokens: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::LParen | Token::LBracket => depth += 1,
            Token::RParen | Token::RBracket => depth = depth.saturating_sub(1),
            Token::Comma if depth == 0 => {
                parts.push(trim(&tokens[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(trim(&tokens[start..]));
    parts
}

/// A name as the server folds it: unquoted ASCII lower-cased, quoted kept
/// (doubled quotes undoubled).
fn fold(token: &Token) -> Option<String> {
    match token {
        Token::Word(w) if w.quote_style == Some('"') => Some(w.value.replace("\"\"", "\"")),
        Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_lowercase()),
        _ => None,
    }
}

/// A name `a.b.c` (comments dropped): its parts folded, or `None` when the
/// tokens are something else.
fn dotted(tokens: &[&Token]) -> Option<Vec<String>> {
    if tokens.len() % 2 == 0 {
        return None;
    }
    let mut parts = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if i % 2 == 1 {
            if !matches!(token, Token::Period) {
                return None;
            }
        } else {
            parts.push(fold(token)?);
        }
    }
    Some(parts)
}

/// The parts of a keyed statement, as slices of its tokens.
struct Form<'t> {
    /// What it does.
    kind: Kind,
    /// A read's select list or an update's SET clause.
    list: &'t [Token],
    /// The table and its alias.
    table: &'t [Token],
    /// The WHERE conditions.
    cond: &'t [Token],
}

impl<'t> Form<'t> {
    /// Finds the parts of `statement` by their keywords.
    fn of(statement: &'t [Token], kind: Kind) -> Result<Form<'t>, String> {
        let sig = significant(statement);
        let first = *sig.first().ok_or("an empty text")?;
        let verb = match kind {
            Kind::Read => "SELECT",
            Kind::Update => "UPDATE",
            Kind::Delete => "DELETE",
        };
        if !is_word(&statement[first], verb) {
            return Err(format!(
                "a keyed {kind:?} starting with `{}`",
                statement[first]
            ));
        }
        let missing = |what: &str| format!("a keyed {kind:?} without {what}");
        let (list, table, where_at) = match kind {
            Kind::Read => {
                let from = find_word(statement, first + 1, "FROM").ok_or(missing("FROM"))?;
                let at = find_word(statement, from + 1, "WHERE").ok_or(missing("WHERE"))?;
                (&statement[first + 1..from], &statement[from + 1..at], at)
            }
            Kind::Update => {
                let set = find_word(statement, first + 1, "SET").ok_or(missing("SET"))?;
                let at = find_word(statement, set + 1, "WHERE").ok_or(missing("WHERE"))?;
                (&statement[set + 1..at], &statement[first + 1..set], at)
            }
            Kind::Delete => {
                let from = *sig.get(1).ok_or(missing("FROM"))?;
                if !is_word(&statement[from], "FROM") {
                    return Err(missing("FROM"));
                }
                let at = find_word(statement, from + 1, "WHERE").ok_or(missing("WHERE"))?;
                (&[][..], &statement[from + 1..at], at)
            }
        };
        Ok(Form {
            kind,
            list: trim(list),
            table: trim(table),
            cond: trim(&statement[where_at + 1..]),
        })
    }

    /// The table name (folded parts) and the position in `self.table` of
    /// its alias, if any.
    fn table_name(&self) -> Result<(Vec<String>, Option<usize>), String> {
        let sig = significant(self.table);
        let token = |k: usize| sig.get(k).map(|&i| &self.table[i]);
        if token(0).is_some_and(|t| is_word(t, "ONLY")) {
            return Err("ONLY before the table".to_owned());
        }
        let mut end = 1;
        while matches!(token(end), Some(Token::Period)) {
            end += 2;
        }
        let name: Vec<&Token> = sig.iter().take(end).map(|&i| &self.table[i]).collect();
        let parts = dotted(&name).ok_or_else(|| format!("the table `{}`", show(self.table)))?;
        let alias = match sig.len() - end.min(sig.len()) {
            0 => None,
            1 => Some(sig[end]),
            2 if token(end).is_some_and(|t| is_word(t, "AS")) => Some(sig[end + 1]),
            _ => return Err(format!("the table and alias `{}`", show(self.table))),
        };
        if let Some(a) = alias
            && fold(&self.table[a]).is_none()
        {
            return Err(format!("the alias `{}`", self.table[a]));
        }
        Ok((parts, alias))
    }

    /// The conditions: each key column (folded) and its 0-based parameter.
    fn keys(&self) -> Result<Vec<(String, usize)>, String> {
        let sig: Vec<&Token> = significant(self.cond)
            .into_iter()
            .map(|i| &self.cond[i])
            .collect();
        let mut keys = Vec::new();
        for part in sig.split(|t| is_word(t, "AND")) {
            let (column, param) = match part {
                [Token::Placeholder(p), Token::Eq, column @ ..]
                | [column @ .., Token::Eq, Token::Placeholder(p)] => (column, p),
                _ => {
                    return Err(format!(
                        "the condition `{}` is not `column = $n`",
                        show(part.iter().copied())
                    ));
                }
            };
            let name = dotted(column).ok_or_else(|| {
                format!(
                    "the condition `{}`: not a column",
                    show(part.iter().copied())
                )
            })?;
            let n = pg_number(param).ok_or_else(|| format!("the placeholder {param}"))?;
            // The server reads `a.b.c` as schema, table and column (a field
            // of a composite column needs brackets), so the last part is the
            // column; a qualifier other than the table's makes the server
            // refuse the text.
            let column = name.last().cloned().unwrap_or_default();
            keys.push((column, n - 1));
        }
        Ok(keys)
    }

    /// The checks on the parts against what the classifier read.
    fn check(&self, shape: &Keyed) -> Result<(), String> {
        let keys = self.keys()?;
        if keys != shape.keys() {
            return Err(format!(
                "the conditions compare {keys:?}, the shape's keys are {:?}",
                shape.keys()
            ));
        }
        match self.kind {
            Kind::Read => self.check_select_list(),
            Kind::Update => self.check_set(shape),
            Kind::Delete => Ok(()),
        }
    }

    /// A read's select list: no calls or subqueries (no brackets), no
    /// placeholders, no `DISTINCT` / `ALL` / `INTO`.
    fn check_select_list(&self) -> Result<(), String> {
        for token in self.list {
            let bad = match token {
                Token::LParen | Token::Placeholder(_) => true,
                t => ["DISTINCT", "ALL", "INTO"].iter().any(|w| is_word(t, w)),
            };
            if bad {
                return Err(format!("the select list holds `{token}`"));
            }
        }
        Ok(())
    }

    /// An update's SET clause: `column = expression, ...` assigning the
    /// shape's columns, without subqueries or `DEFAULT`, its calls among
    /// the shape's.
    fn check_set(&self, shape: &Keyed) -> Result<(), String> {
        let mut assigned = Vec::new();
        for part in split_commas(self.list) {
            let sig: Vec<&Token> = significant(part).into_iter().map(|i| &part[i]).collect();
            match sig.as_slice() {
                [column, Token::Eq, _, ..] => assigned
                    .push(fold(column).ok_or_else(|| format!("the assignment `{}`", show(part)))?),
                _ => return Err(format!("the assignment `{}`", show(part))),
            }
            for (k, token) in sig.iter().enumerate() {
                if is_word(token, "DEFAULT") {
                    return Err(format!("the assignment `{}` holds DEFAULT", show(part)));
                }
                let next = sig.get(k + 1).copied();
                let call = k > 0
                    && matches!(sig[k - 1], Token::Word(_))
                    && !NOT_CALLS.iter().any(|w| is_word(sig[k - 1], w));
                if matches!(token, Token::LParen)
                    && !call
                    && next.is_some_and(|n| SUBQUERY.iter().any(|w| is_word(n, w)))
                {
                    return Err(format!("the assignment `{}` holds a subquery", show(part)));
                }
            }
            for (k, token) in sig.iter().enumerate() {
                let next = sig.get(k + 1).copied();
                let cast = k > 0 && matches!(sig[k - 1], Token::DoubleColon);
                if matches!(next, Some(Token::LParen))
                    && !cast
                    && let Some(name) = fold(token)
                    && !shape.calls().contains(&name)
                {
                    return Err(format!(
                        "the assignment `{}` calls {name:?}, the shape's calls are {:?}",
                        show(part),
                        shape.calls()
                    ));
                }
            }
        }
        if assigned != shape.assigned() {
            return Err(format!(
                "the SET clause assigns {assigned:?}, the shape says {:?}",
                shape.assigned()
            ));
        }
        Ok(())
    }

    /// `part` with each placeholder `$k` replaced by the row source's
    /// column; with `stars`, a lone `*` item by `<reference>.*`.
    fn replaced(&self, part: &[Token], stars: Option<&[Token]>) -> Result<Vec<Token>, String> {
        let sig = significant(part);
        let mut out = Vec::new();
        for (i, token) in part.iter().enumerate() {
            if let Token::Placeholder(p) = token {
                let k = pg_number(p).ok_or_else(|| format!("the placeholder {p}"))?;
                out.extend(tokens(
                    Dialect::Postgres,
                    &format!("{KEYS}.\"batchpool {k}\""),
                )?);
                continue;
            }
            if let Some(reference) = stars
                && matches!(token, Token::Mul)
            {
                let at = sig.iter().position(|&s| s == i);
                let before = at.and_then(|a| a.checked_sub(1)).map(|a| &part[sig[a]]);
                let after = at.and_then(|a| sig.get(a + 1)).map(|&a| &part[a]);
                let lone = matches!(before, None | Some(Token::Comma))
                    && matches!(after, None | Some(Token::Comma));
                if lone {
                    out.extend_from_slice(reference);
                    out.push(Token::Period);
                    out.push(Token::Mul);
                    continue;
                }
            }
            out.push(token.clone());
        }
        Ok(out)
    }

    /// The tokens the rewrite must have, with `arrays` as its parameters.
    fn rewrite(&self, arrays: &[String]) -> Result<Vec<Token>, String> {
        let pg = |text: &str| tokens(Dialect::Postgres, text);
        let mut columns = String::new();
        for k in 1..=arrays.len() {
            columns.push_str(&format!("\"batchpool {k}\", "));
        }
        let source = pg(&format!(
            "unnest({}) WITH ORDINALITY AS {KEYS}({columns}\"batchpool ord\")",
            arrays.join(", ")
        ))?;
        let ordinal = pg(&format!("{KEYS}.\"batchpool ord\""))?;
        let cond = self.replaced(self.cond, None)?;
        let mut out = Vec::new();
        match self.kind {
            Kind::Read => {
                let (_, alias) = self.table_name()?;
                let reference = match alias {
                    Some(a) => &self.table[a..=a],
                    None => {
                        let sig = significant(self.table);
                        let mut end = 1;
                        while sig
                            .get(end)
                            .is_some_and(|&i| matches!(self.table[i], Token::Period))
                        {
                            end += 2;
                        }
                        &self.table[..=sig[end - 1]]
                    }
                };
                out.extend(pg("SELECT")?);
                out.extend(self.replaced(self.list, Some(reference))?);
                out.extend(pg("FROM")?);
                out.extend(source);
                out.extend(pg("LEFT JOIN")?);
                out.extend_from_slice(self.table);
                out.extend(pg("ON")?);
                out.extend(cond);
                out.extend(pg("ORDER BY")?);
            }
            Kind::Update => {
                out.extend(pg("UPDATE")?);
                out.extend_from_slice(self.table);
                out.extend(pg("SET")?);
                out.extend(self.replaced(self.list, None)?);
                out.extend(pg("FROM")?);
                out.extend(source);
                out.extend(pg("WHERE")?);
                out.extend(cond);
                out.extend(pg("RETURNING")?);
            }
            Kind::Delete => {
                out.extend(pg("DELETE FROM")?);
                out.extend_from_slice(self.table);
                out.extend(pg("USING")?);
                out.extend(source);
                out.extend(pg("WHERE")?);
                out.extend(cond);
                out.extend(pg("RETURNING")?);
            }
        }
        out.extend(ordinal);
        Ok(out)
    }
}

/// A name as the server folds it (sqlparser's identifier).
fn fold_ident(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

/// The `column = $n` conditions of a conjunction, as (column, 0-based
/// parameter); `None` when it is anything else.
fn conjunction(expr: &Expr, out: &mut Vec<(String, usize)>) -> Option<()> {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conjunction(left, out)?;
            conjunction(right, out)
        }
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => {
            let column = |e: &Expr| match e {
                Expr::Identifier(i) => Some(fold_ident(i)),
                Expr::CompoundIdentifier(parts) => parts.last().map(fold_ident),
                _ => None,
            };
            let param = |e: &Expr| match e {
                Expr::Value(v) => match &v.value {
                    Value::Placeholder(p) => pg_number(p),
                    _ => None,
                },
                _ => None,
            };
            let (c, n) = match (column(left), param(right)) {
                (Some(c), Some(n)) => (c, n),
                _ => (column(right)?, param(left)?),
            };
            out.push((c, n - 1));
            Some(())
        }
        _ => None,
    }
}

/// One plain table, no joins.
fn plain_table(table: &TableWithJoins) -> bool {
    table.joins.is_empty() && matches!(table.relation, TableFactor::Table { args: None, .. })
}

/// `items` written as sqlparser writes a list.
fn list<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The checks by sqlparser's parser (see the module docs); nothing when it
/// does not read `sql`.
fn parsed(sql: &str, rewrite: &str, kind: Kind, shape: &Keyed) -> Result<(), String> {
    let Ok(statements) = Parser::parse_sql(&PostgreSqlDialect {}, sql) else {
        return Ok(());
    };
    let [statement] = statements.as_slice() else {
        return Err(format!("sqlparser reads {} statements", statements.len()));
    };
    let other = || format!("sqlparser reads another form: {statement}");
    let (selection, bare) = match (kind, statement) {
        (Kind::Read, Statement::Query(q)) => {
            let SetExpr::Select(s) = q.body.as_ref() else {
                return Err(other());
            };
            if s.from.is_empty() {
                // sqlparser took the FROM keyword for a name (`SELECT a *
                // FROM t`, a select list item the classifier does not
                // parse); for the server it is a reserved word, so the
                // server refuses the text.
                return Ok(());
            }
            let ([from], Some(selection)) = (s.from.as_slice(), &s.selection) else {
                return Err(other());
            };
            if !plain_table(from) {
                return Err(other());
            }
            let bare = format!(
                "SELECT {} FROM {from} WHERE {selection}",
                list(&s.projection)
            );
            (selection, bare)
        }
        (Kind::Update, Statement::Update(u)) => {
            let Some(selection) = &u.selection else {
                return Err(other());
            };
            if !plain_table(&u.table) {
                return Err(other());
            }
            let mut assigned = Vec::new();
            for a in &u.assignments {
                match &a.target {
                    AssignmentTarget::ColumnName(name) if name.0.len() == 1 => {
                        let ident = name.0[0].as_ident().ok_or_else(other)?;
                        assigned.push(fold_ident(ident));
                    }
                    _ => return Err(other()),
                }
            }
            if assigned != shape.assigned() {
                return Err(format!(
                    "sqlparser reads the assigned columns {assigned:?}, the shape says {:?}",
                    shape.assigned()
                ));
            }
            let bare = format!(
                "UPDATE {} SET {} WHERE {selection}",
                u.table,
                list(&u.assignments)
            );
            (selection, bare)
        }
        (Kind::Delete, Statement::Delete(d)) => {
            let (FromTable::WithFromKeyword(tables), Some(selection)) = (&d.from, &d.selection)
            else {
                return Err(other());
            };
            let [table] = tables.as_slice() else {
                return Err(other());
            };
            if !d.tables.is_empty() || !plain_table(table) {
                return Err(other());
            }
            (selection, format!("DELETE FROM {table} WHERE {selection}"))
        }
        _ => return Err(other()),
    };
    if statement.to_string() != bare {
        return Err(format!(
            "sqlparser reads clauses besides the keyed form: {statement}"
        ));
    }
    let mut keys = Vec::new();
    if conjunction(selection, &mut keys).is_none() || keys != shape.keys() {
        return Err(format!(
            "sqlparser reads the conditions {selection}, the shape's keys are {:?}",
            shape.keys()
        ));
    }
    let again = Parser::parse_sql(&PostgreSqlDialect {}, rewrite)
        .map_err(|e| format!("sqlparser reads the text but not its rewrite {rewrite:?}: {e}"))?;
    let same = matches!(
        (kind, again.as_slice()),
        (Kind::Read, [Statement::Query(_)])
            | (Kind::Update, [Statement::Update(_)])
            | (Kind::Delete, [Statement::Delete(_)])
    );
    if !same {
        return Err(format!(
            "sqlparser reads the rewrite {rewrite:?} as {} other statements",
            again.len()
        ));
    }
    Ok(())
}

/// The statement of a family of update texts (see the PostgreSQL
/// backend's families), checked against the text's own rewrite `plain` by
/// sqlparser's parser (nothing when it does not read `plain`): for three
/// texts (here each the text itself) one UPDATE of the same table and
/// WHERE clause, its row source one more array, each assignment `CASE
/// "batchpool keys"."batchpool member" WHEN 0 THEN (<the rewrite's
/// expression>) WHEN 1 ... WHEN 2 ... ELSE <the column> END`, in order.
fn check_family(plain: &str, shape: &Keyed, arrays: &[String]) -> Result<(), String> {
    let Ok(ours) = Parser::parse_sql(&PostgreSqlDialect {}, plain) else {
        return Ok(());
    };
    let tag = format!("${}::pg_catalog.int4[]", arrays.len() + 1);
    let text = shape.render_family(3, arrays, &tag);
    let family = Parser::parse_sql(&PostgreSqlDialect {}, &text)
        .map_err(|e| format!("sqlparser reads the rewrite but not the family's {text:?}: {e}"))?;
    let ([Statement::Update(ours)], [Statement::Update(family)]) =
        (ours.as_slice(), family.as_slice())
    else {
        return Err(format!("sqlparser does not read {text:?} as one UPDATE"));
    };
    let show = |e: &Option<Expr>| e.as_ref().map(ToString::to_string);
    if ours.table.to_string() != family.table.to_string()
        || show(&ours.selection) != show(&family.selection)
        || ours.assignments.len() != family.assignments.len()
    {
        return Err(format!(
            "the family's statement {text:?} is not the rewrite {plain:?} with other assignments"
        ));
    }
    let from = |f: &Option<UpdateTableFromKind>| match f {
        Some(UpdateTableFromKind::AfterSet(tables)) => Some(
            tables
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        _ => None,
    };
    let expected_from = from(&ours.from)
        .map(|f| f.replace(&arrays.join(", "), &format!("{}, {tag}", arrays.join(", "))))
        .map(|f| {
            f.replace(
                "\"batchpool ord\")",
                "\"batchpool member\", \"batchpool ord\")",
            )
        });
    if expected_from.is_none() || expected_from != from(&family.from) {
        return Err(format!(
            "the family's row source in {text:?} is not the rewrite's with the text numbers"
        ));
    }
    for (column, (own, theirs)) in shape
        .assigned()
        .iter()
        .zip(ours.assignments.iter().zip(&family.assignments))
    {
        let value = &own.value;
        // As sqlparser shows the parsed column (an embedded `"` as it is).
        let name = Ident::with_quote('"', column.as_str()).to_string();
        let want = format!(
            "CASE {KEYS}.\"batchpool member\" WHEN 0 THEN ({value}) WHEN 1 THEN ({value}) \
             WHEN 2 THEN ({value}) ELSE {name} END"
        );
        let target = match &theirs.target {
            AssignmentTarget::ColumnName(n) if n.0.len() == 1 => n.0[0].as_ident().map(fold_ident),
            _ => None,
        };
        if target.as_ref() != Some(column) || theirs.value.to_string() != want {
            return Err(format!(
                "the family's assignment `{theirs}` is not `{name} = {want}`"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keyed texts the check accepts, and the classifier's tests' forms.
    #[test]
    fn the_check_holds_on_keyed_forms() -> Result<(), String> {
        for sql in [
            "SELECT * FROM kv WHERE id = $1",
            "select k.v AS value, \"Id\", n::text, 'x', * FROM s.t AS k where $2 = \"Id\" and k.b = $1;",
            "SELECT t.*, 1 + a FROM s.t WHERE s.t.id = $1 AND t.b = $2 -- c\n",
            "UPDATE counters SET hits = hits + $1, note = $3 WHERE id = $2",
            "UPDATE t SET v = lower(v) || $1::text WHERE a = $2 AND b = $3",
            "UPDATE t x SET v = /* c */ $1 WHERE x.id = $2;  /* after */",
            "update \"t\" set \"\\\"\"x\" = $1, t = $2 where t = $3;",
            "DELETE FROM sessions WHERE token = $1 -- gone\n",
            "DELETE FROM \"S\".\"T\" AS d WHERE d.\"K\" = $1",
        ] {
            assert!(check_keyed(Dialect::Postgres, sql)?.is_some(), "{sql}");
            assert_eq!(check_keyed(Dialect::MySql, sql), Ok(None), "{sql}");
        }
        for sql in [
            "SELECT * FROM t WHERE id = $1 ORDER BY id",
            "INSERT INTO t (a) VALUES ($1)",
            "SELECT 1",
            "UPDATE t SET v = $1 WHERE id = $2 RETURNING v",
        ] {
            assert_eq!(check_keyed(Dialect::Postgres, sql), Ok(None), "{sql}");
        }
        Ok(())
    }

    /// MySQL's reads, both many-caller texts, and its deletes: comments inside the
    /// conditions, a lone `*` and a qualified one, an alias, a schema, a
    /// literal and arithmetic in the list, composite keys.
    #[test]
    fn the_check_holds_on_mysql_reads() -> Result<(), String> {
        for sql in [
            "SELECT * FROM kv WHERE id = ?",
            "select k.v AS value, `Id`, 'x', *, n + 1 FROM s.t AS k where ? = `Id` and k.b = ?;",
            "SELECT t.*, 1 + a FROM s.t WHERE s.t.id = /* c */ ? AND t.b = ? -- c\n",
            " select * from t as t where t = ?;",
            " # \"aaaa\nSelect * from t as t where t = ?;",
            " select * from\nid.\t  batchpool where t = ?;",
            "SELECT a, * FROM s.t k WHERE id = ?",
        ] {
            assert_eq!(check_keyed(Dialect::MySql, sql)?, Some("reads"), "{sql}");
        }
        for sql in [
            "DELETE FROM kv WHERE id = ?",
            "delete /* c */ from `s`.`T` where ? = `Id` and b = /* c */ ?;",
        ] {
            assert_eq!(check_keyed(Dialect::MySql, sql)?, Some("deletes"), "{sql}");
        }
        for sql in [
            "UPDATE t SET v = ? WHERE id = ?",
            "update /* c */ `s`.`T` AS u SET v = u.v + ?, `w` = (? * 2) where ? = `Id` and b = ?;",
            "UPDATE t SET a = b = ?, c = 'x,y' WHERE k = ?",
            " Update id set t =\u{a0}? where t = ?;",
            "UPDATE t SET v = /* c */ ? WHERE id = ?",
        ] {
            assert_eq!(check_keyed(Dialect::MySql, sql)?, Some("updates"), "{sql}");
        }
        Ok(())
    }

    /// The form checks reject what is not the keyed form.
    #[test]
    fn the_form_checks_reject_other_forms() {
        let statement = |sql| tokens(Dialect::Postgres, sql).unwrap();
        let keys = |sql| Form::of(&statement(sql), Kind::Read).unwrap().keys();
        assert_eq!(
            keys("SELECT * FROM t WHERE t.id = $1"),
            Ok(vec![("id".into(), 0)])
        );
        // Schema, table and column, for the server.
        assert_eq!(
            keys("SELECT * FROM t WHERE s.t.id = $1"),
            Ok(vec![("id".into(), 0)])
        );
        assert!(keys("SELECT * FROM t WHERE id = $1 OR b = $2").is_err());
        assert!(keys("SELECT * FROM t WHERE id = $1 + 1").is_err());
        assert!(keys("SELECT * FROM t WHERE (id = $1)").is_err());
        let list = |sql| {
            Form::of(&statement(sql), Kind::Read)
                .unwrap()
                .check_select_list()
        };
        assert!(list("SELECT a FROM t WHERE id = $1").is_ok());
        assert!(list("SELECT count(a) FROM t WHERE id = $1").is_err());
        assert!(list("SELECT DISTINCT a FROM t WHERE id = $1").is_err());
        assert!(list("SELECT a INTO b FROM t WHERE id = $1").is_err());
        let set = |sql: &str| {
            let statement = tokens(Dialect::Postgres, sql).unwrap();
            let shape = classify_keyed(Dialect::Postgres, "UPDATE t SET v = 1 WHERE id = $1");
            Form::of(&statement, Kind::Update)
                .unwrap()
                .check_set(&shape.unwrap())
        };
        assert!(set("UPDATE t SET v = 1 WHERE id = $1").is_ok());
        // A call's bracket: the server refuses `f(SELECT 1)`.
        assert!(
            set("UPDATE t SET v = f(VALUES (1)) WHERE id = $1")
                .is_err_and(|e| !e.contains("subquery"))
        );
        for subquery in [
            "(SELECT 1)",
            "(TABLE u)",
            "(VALUES (1))",
            "1 + (WITH x AS (SELECT 1) TABLE x)",
            "coalesce((TABLE u), 0)",
            "1 IN (TABLE u)",
            "1 = ANY(VALUES (1))",
        ] {
            let sql = format!("UPDATE t SET v = {subquery} WHERE id = $1");
            assert!(set(&sql).unwrap_err().contains("subquery"), "{sql}");
        }
        assert_eq!(
            quoted_ours("UPDATE t SET v = U&\"batchpool\\0020keys\".x WHERE id = $1"),
            Ok(Some("batchpool keys".into()))
        );
        assert_eq!(
            quoted_ours("SELECT U&\"batchpool!0020ord\" UESCAPE '!' FROM t WHERE id = $1"),
            Ok(Some("batchpool ord".into()))
        );
        assert_eq!(quoted_ours("SELECT \"batchpool\" FROM t"), Ok(None));
        assert!(one_statement(&statement("SELECT 1; -- x")).is_ok());
        assert!(one_statement(&statement("SELECT 1; SELECT 2")).is_err());
    }

    /// The expected rewrite is the documented one, and a render of another
    /// text, or of the same text with other parts, does not pass for it.
    #[test]
    fn the_expected_rewrite_is_the_documented_one() {
        let pg = |sql: &str| tokens(Dialect::Postgres, sql).unwrap();
        let sql = "UPDATE counters SET hits = hits + $1, note = $3 WHERE id = $2";
        let statement = pg(sql);
        let form = Form::of(&statement, Kind::Update).unwrap();
        let arrays = array_parameters(3);
        assert_eq!(
            form.rewrite(&arrays).unwrap(),
            pg(
                "UPDATE counters SET hits = hits + \"batchpool keys\".\"batchpool 1\", note = \
                \"batchpool keys\".\"batchpool 3\" FROM unnest($1::pg_catalog.\"int8\"[], \
                $2::pg_catalog.\"int8\"[], $3::pg_catalog.\"int8\"[]) WITH ORDINALITY AS \
                \"batchpool keys\"(\"batchpool 1\", \"batchpool 2\", \"batchpool 3\", \
                \"batchpool ord\") WHERE id = \"batchpool keys\".\"batchpool 2\"\n\
                RETURNING \"batchpool keys\".\"batchpool ord\""
            )
        );
        let other = classify_keyed(
            Dialect::Postgres,
            "UPDATE counters SET hits = hits + $1, note = $3 WHERE id = $2 AND k = $2",
        )
        .unwrap();
        assert_ne!(pg(&other.render(&arrays)), form.rewrite(&arrays).unwrap());

        let statement = pg("SELECT *, a FROM s.t /* c */ WHERE id = $1");
        let form = Form::of(&statement, Kind::Read).unwrap();
        assert_eq!(
            form.rewrite(&array_parameters(1)).unwrap(),
            pg(
                "SELECT s.t.*, a FROM unnest($1::pg_catalog.\"int8\"[]) WITH ORDINALITY AS \
                \"batchpool keys\"(\"batchpool 1\", \"batchpool ord\") LEFT JOIN s.t ON \
                id = \"batchpool keys\".\"batchpool 1\" ORDER BY \"batchpool keys\".\"batchpool ord\""
            )
        );
    }

    /// sqlparser's reading catches a clause the keyed form does not have
    /// and keys other than the shape's.
    #[test]
    fn the_parser_check_catches_other_clauses_and_keys() {
        let shape = classify_keyed(Dialect::Postgres, "SELECT * FROM t WHERE id = $1").unwrap();
        let rewrite = shape.render(&array_parameters(1));
        let ok = |sql| parsed(sql, &rewrite, Kind::Read, &shape);
        assert_eq!(ok("SELECT * FROM t WHERE id = $1"), Ok(()));
        for other in [
            "SELECT * FROM t WHERE id = $1 ORDER BY id",
            "SELECT * FROM t WHERE id = $1 LIMIT 1",
            "SELECT * FROM t WHERE id = $1 FOR UPDATE",
            "SELECT DISTINCT * FROM t WHERE id = $1",
            "SELECT * FROM t, u WHERE id = $1",
            "SELECT * FROM t WHERE id = $1 OR id = $1",
            "SELECT * FROM t WHERE k = $1",
            "SELECT * FROM t WHERE id = $1; SELECT 1",
            "DELETE FROM t WHERE id = $1",
        ] {
            assert!(ok(other).is_err(), "{other}");
        }
    }
}
