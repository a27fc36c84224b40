//! An independent check of the n-row renderer, by tokens.
//!
//! The renderer builds the n-row statement from byte slices of the original
//! text that the classifier located. This check knows nothing of those
//! slices or of the INSERT grammar: it tokenizes the original text and each
//! rendered text afresh with sqlparser's tokenizer for the dialect (plain
//! whitespace dropped, comments kept) and requires that the rendered tokens
//! are the original ones with one parenthesised group, right after a
//! `VALUES` keyword (MySQL: or `VALUE`) and holding every placeholder,
//! repeated n times separated by commas — PostgreSQL `$k` renumbered to
//! `$(k + i*P)` in copy i (P the highest `$k` of the text), MySQL `?` kept —
//! and everything after the group unchanged.

use sqlparser::dialect::{MySqlDialect, PostgreSqlDialect};
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

use super::{Dialect, classify};

/// The column list the checks append as an extra RETURNING (as the
/// PostgreSQL backend does with a conflict key): quoted names.
pub const EXTRA_RETURNING: &str = "\"k\", \"Id\"";

/// Checks the renderer on `sql`: `Ok(false)` when the text is not batchable,
/// `Ok(true)` when it is and every check held, else what failed.
///
/// For a batchable text: its placeholders are the ones the renderer can
/// renumber (PostgreSQL: `$1..$P` all used, P = the shape's parameters per
/// row; MySQL: only `?`, as many as the shape counts); the 1-row render
/// tokenizes exactly like the original statement (up to its `;`) and
/// classifies again to the same shape; for every n ≥ 2 in `sizes` the
/// n-row render tokenizes as described in the module docs and is itself not
/// batchable (it holds several rows); and for every n in `sizes` the render
/// with an extra RETURNING list is the plain render followed by
/// `RETURNING <list>` — or the plain render when the text has a RETURNING of
/// its own (then its tokens after the tuple hold a `RETURNING` word).
pub fn check_render(dialect: Dialect, sql: &str, sizes: &[usize]) -> Result<bool, String> {
    let Some(shape) = classify(dialect, sql) else {
        return Ok(false);
    };
    let original = statement_tokens(dialect, sql)?;
    let params = placeholder_count(dialect, &original)?;
    if params != shape.params_per_row() {
        return Err(format!(
            "the text has {params} parameters per row, the shape says {}",
            shape.params_per_row()
        ));
    }

    let one = shape.render(1, None);
    let one_tokens = tokens(dialect, &one)?;
    if one_tokens != original {
        return Err(format!(
            "the 1-row render {one:?} tokenizes differently from the statement:\n  \
             statement {original:?}\n  rendered  {one_tokens:?}"
        ));
    }
    match classify(dialect, &one) {
        Some(again) if again.summary() == shape.summary() => {}
        Some(again) => {
            return Err(format!(
                "the 1-row render {one:?} classifies differently:\n  {}\n  {}",
                shape.summary(),
                again.summary()
            ));
        }
        None => return Err(format!("the 1-row render {one:?} is not batchable")),
    }

    for &rows in sizes {
        let rows = rows.max(1);
        let text = shape.render(rows, None);
        let rendered = tokens(dialect, &text)?;
        if rows >= 2 {
            repeated_tuple(dialect, &original, &rendered, rows, params)
                .map_err(|why| format!("{rows} rows: {text:?}: {why}"))?;
            if classify(dialect, &text).is_some() {
                return Err(format!("the {rows}-row render {text:?} is batchable"));
            }
        }

        let with_extra = shape.render(rows, Some(EXTRA_RETURNING));
        let mut want = rendered;
        if shape.returning() {
            if !has_returning_word(&original) {
                return Err("RETURNING found where the text has none".to_owned());
            }
        } else {
            want.extend(tokens(dialect, &format!(" RETURNING {EXTRA_RETURNING}"))?);
        }
        if tokens(dialect, &with_extra)? != want {
            return Err(format!(
                "{rows} rows with an extra RETURNING: {with_extra:?} is not the plain \
                 render {text:?} followed by RETURNING {EXTRA_RETURNING}"
            ));
        }
    }
    Ok(true)
}

/// The tokens of `text` for `dialect`, spaces, tabs and newlines dropped
/// (comments kept: the renderer copies them).
pub(super) fn tokens(dialect: Dialect, text: &str) -> Result<Vec<Token>, String> {
    let all = match dialect {
        Dialect::Postgres => Tokenizer::new(&PostgreSqlDialect {}, text)
            .with_unescape(false)
            .tokenize(),
        Dialect::MySql => Tokenizer::new(&MySqlDialect {}, text)
            .with_unescape(false)
            .tokenize(),
    }
    .map_err(|e| format!("{text:?} does not tokenize: {e}"))?;
    Ok(all
        .into_iter()
        .filter(|t| {
            !matches!(
                t,
                Token::Whitespace(Whitespace::Space | Whitespace::Tab | Whitespace::Newline)
            )
        })
        .collect())
}

/// The tokens of the statement: up to its first `;` (the renderer drops the
/// terminator and whatever follows it), PostgreSQL placeholders written
/// canonically: the server reads `$02` as parameter 2 (its scanner takes the
/// number's value), and the renderer writes it `$2`.
fn statement_tokens(dialect: Dialect, sql: &str) -> Result<Vec<Token>, String> {
    let mut all = tokens(dialect, sql)?;
    if let Some(semi) = all.iter().position(|t| matches!(t, Token::SemiColon)) {
        all.truncate(semi);
    }
    if dialect == Dialect::Postgres {
        for token in &mut all {
            if let Token::Placeholder(p) = token
                && let Some(k) = pg_number(p)
            {
                *p = format!("${k}");
            }
        }
    }
    Ok(all)
}

/// Whether `token` is a comment.
pub(super) fn is_comment(token: &Token) -> bool {
    matches!(token, Token::Whitespace(_))
}

/// The parameter number of a PostgreSQL placeholder `$k` (k in 1..=65535).
pub(super) fn pg_number(text: &str) -> Option<usize> {
    let digits = text.strip_prefix('$')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| (1..=65_535).contains(n))
}

/// Parameters one row takes, from the placeholders of the statement:
/// PostgreSQL `$1..$P` each used (P returned), MySQL `?` only (their count).
pub(super) fn placeholder_count(dialect: Dialect, statement: &[Token]) -> Result<usize, String> {
    let found: Vec<&str> = statement
        .iter()
        .filter_map(|t| match t {
            Token::Placeholder(p) => Some(p.as_str()),
            _ => None,
        })
        .collect();
    match dialect {
        Dialect::Postgres => {
            let mut numbers = Vec::with_capacity(found.len());
            for p in &found {
                numbers.push(pg_number(p).ok_or_else(|| {
                    format!("a batchable text has the placeholder {p:?}, which is not $1..$65535")
                })?);
            }
            numbers.sort_unstable();
            numbers.dedup();
            let max = numbers.last().copied().unwrap_or(0);
            if numbers.len() != max {
                return Err(format!(
                    "a batchable text uses placeholders {numbers:?}, not every one of $1..${max}"
                ));
            }
            Ok(max)
        }
        Dialect::MySql => match found.iter().find(|p| **p != "?") {
            Some(p) => Err(format!("a batchable text has the placeholder {p:?}")),
            None => Ok(found.len()),
        },
    }
}

/// Whether `statement` holds an unquoted `RETURNING` word.
fn has_returning_word(statement: &[Token]) -> bool {
    statement.iter().any(|t| {
        matches!(t, Token::Word(w) if w.quote_style.is_none()
            && w.value.eq_ignore_ascii_case("RETURNING"))
    })
}

/// Whether `token` is the unquoted word `word` (ASCII case-insensitive).
pub(super) fn is_word(token: &Token, word: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// Where the VALUES tuple of `statement` starts: the first `(` outside
/// brackets right after the `VALUES` keyword (MySQL: or `VALUE`), comments
/// aside, after the table name. The verb (`INSERT`, MySQL `REPLACE`, then
/// `IGNORE` and `INTO` when there) and the table name (a word, or words
/// joined by `.`) are skipped first: on MySQL `value` and `values` may name
/// a table.
fn tuple_start(dialect: Dialect, statement: &[Token]) -> Option<usize> {
    let significant: Vec<(usize, &Token)> = statement
        .iter()
        .enumerate()
        .filter(|(_, t)| !is_comment(t))
        .collect();
    let mut k = 1;
    for word in ["IGNORE", "INTO"] {
        if significant.get(k).is_some_and(|&(_, t)| is_word(t, word)) {
            k += 1;
        }
    }
    k += 1;
    while significant
        .get(k)
        .is_some_and(|&(_, t)| matches!(t, Token::Period))
    {
        k += 2;
    }
    // `k` is now the first token after the table name.
    let mut depth = 0usize;
    for (j, &(i, token)) in significant.iter().enumerate().skip(k) {
        match token {
            Token::LParen | Token::LBracket | Token::LBrace => {
                let keyword = j > k
                    && significant.get(j - 1).is_some_and(|&(_, previous)| {
                        is_word(previous, "VALUES")
                            || (dialect == Dialect::MySql && is_word(previous, "VALUE"))
                    });
                if depth == 0 && matches!(token, Token::LParen) && keyword {
                    return Some(i);
                }
                depth += 1;
            }
            Token::RParen | Token::RBracket | Token::RBrace => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The length of the parenthesised group starting at `statement[start]`
/// (up to its matching `)`).
fn group_len(statement: &[Token], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in statement.get(start..)?.iter().enumerate() {
        match token {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Copy `copy` (0-based) of the tuple `group`: PostgreSQL placeholders
/// shifted by `copy * params`.
fn renumbered(dialect: Dialect, group: &[Token], copy: usize, params: usize) -> Vec<Token> {
    group
        .iter()
        .map(|t| match (dialect, t) {
            (Dialect::Postgres, Token::Placeholder(p)) => match pg_number(p) {
                Some(k) => Token::Placeholder(format!("${}", k + copy * params)),
                None => t.clone(),
            },
            _ => t.clone(),
        })
        .collect()
}

/// Whether `rendered` is `statement` with its VALUES tuple, which must hold
/// every placeholder, repeated `rows` times (see the module docs).
fn repeated_tuple(
    dialect: Dialect,
    statement: &[Token],
    rendered: &[Token],
    rows: usize,
    params: usize,
) -> Result<(), String> {
    let start = tuple_start(dialect, statement).ok_or("no VALUES tuple in the statement")?;
    let len = group_len(statement, start).ok_or("the VALUES tuple does not close")?;
    let end = start + len;
    if let Some(outside) = statement
        .iter()
        .enumerate()
        .find(|&(i, t)| matches!(t, Token::Placeholder(_)) && (i < start || i >= end))
    {
        return Err(format!(
            "the placeholder {:?} is outside the VALUES tuple",
            outside.1
        ));
    }
    let group = &statement[start..end];
    let mut want = statement[..start].to_vec();
    for copy in 0..rows {
        if copy > 0 {
            want.push(Token::Comma);
        }
        want.extend(renumbered(dialect, group, copy, params));
    }
    want.extend_from_slice(&statement[end..]);
    if want == rendered {
        return Ok(());
    }
    let first = want
        .iter()
        .zip(rendered)
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(rendered.len()));
    Err(format!(
        "the tokens are not the statement's with its VALUES tuple repeated: \
         from token {first} on, expected {:?}, rendered {:?}",
        &want[first..],
        &rendered[first..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `repeated_tuple` on texts (the statement, a would-be n-row render).
    fn repeated(dialect: Dialect, statement: &str, rendered: &str, rows: usize) -> bool {
        let statement = tokens(dialect, statement).expect("statement tokenizes");
        let rendered = tokens(dialect, rendered).expect("render tokenizes");
        let params = placeholder_count(dialect, &statement).expect("placeholders");
        repeated_tuple(dialect, &statement, &rendered, rows, params).is_ok()
    }

    /// The token check accepts the right n-row text and rejects wrong ones.
    #[test]
    fn repeated_tuple_accepts_only_the_right_rendering() {
        let pg = Dialect::Postgres;
        let sql = "INSERT INTO t (a, b) VALUES ($1, lower($2)) RETURNING a /* c */";
        assert!(repeated(
            pg,
            sql,
            "INSERT INTO t (a, b) VALUES ($1, lower($2)), ($3, lower($4)) RETURNING a /* c */",
            2
        ));
        for wrong in [
            // Not renumbered.
            "INSERT INTO t (a, b) VALUES ($1, lower($2)), ($1, lower($2)) RETURNING a /* c */",
            // Renumbered in the wrong order.
            "INSERT INTO t (a, b) VALUES ($1, lower($3)), ($2, lower($4)) RETURNING a /* c */",
            // A suffix changed, a comment lost.
            "INSERT INTO t (a, b) VALUES ($1, lower($2)), ($3, lower($4)) RETURNING b /* c */",
            "INSERT INTO t (a, b) VALUES ($1, lower($2)), ($3, lower($4)) RETURNING a",
            // The column list repeated instead of the tuple.
            "INSERT INTO t (a, b), (a, b) VALUES ($1, lower($2)) RETURNING a /* c */",
            // Three rows where two were asked for.
            "INSERT INTO t (a, b) VALUES ($1, lower($2)), ($3, lower($4)), ($5, lower($6)) RETURNING a /* c */",
        ] {
            assert!(!repeated(pg, sql, wrong, 2), "{wrong}");
        }

        let my = Dialect::MySql;
        let sql = "INSERT INTO value (a) VALUE (?)";
        assert!(repeated(my, sql, "INSERT INTO value (a) VALUE (?), (?)", 2));
        assert!(!repeated(
            my,
            sql,
            "INSERT INTO value (a) VALUE (?), (?, ?)",
            2
        ));
        // A table named like a keyword (the server would refuse it).
        assert!(repeated(
            my,
            "INSERT INTO INTO VALUES (?)",
            "INSERT INTO INTO VALUES (?), (?)",
            2
        ));
        // `value` names the table: its column list is not the tuple.
        let sql = "INSERT INTO db.value (a) VALUE (1) ON DUPLICATE KEY UPDATE a = VALUES(a)";
        assert!(repeated(
            my,
            sql,
            "INSERT INTO db.value (a) VALUE (1), (1) ON DUPLICATE KEY UPDATE a = VALUES(a)",
            2
        ));
        assert!(!repeated(
            my,
            sql,
            "INSERT INTO db.value (a), (a) VALUE (1) ON DUPLICATE KEY UPDATE a = VALUES(a)",
            2
        ));
    }

    /// Placeholders the renderer cannot renumber are reported.
    #[test]
    fn placeholder_count_rejects_what_cannot_be_renumbered() {
        let count = |dialect, sql| placeholder_count(dialect, &tokens(dialect, sql).unwrap());
        assert_eq!(count(Dialect::Postgres, "VALUES ($2, $1, $2)"), Ok(2));
        assert!(count(Dialect::Postgres, "VALUES ($1, $3)").is_err());
        assert!(count(Dialect::Postgres, "VALUES ($0)").is_err());
        assert!(count(Dialect::Postgres, "VALUES ($1abc)").is_err());
        assert_eq!(count(Dialect::MySql, "VALUES (?, '?', ?)"), Ok(2));
        assert!(count(Dialect::MySql, "VALUES (?1)").is_err());
    }
}
