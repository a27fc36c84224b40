//! Recognition of batchable single-row INSERT statements over a token stream.
//!
//! The parser works on the significant (non-whitespace, non-comment) tokens
//! and only ever slices the original text by token byte ranges, so comments
//! and whitespace between tokens are preserved verbatim in the rendered
//! statement.
//!
//! MySQL/MariaDB forms deliberately left as `PassThrough` (they are still
//! executed, just not coalesced): `LOW_PRIORITY` / `DELAYED` /
//! `HIGH_PRIORITY` modifiers, `PARTITION (...)`, `INSERT ... SET`,
//! `INSERT ... SELECT` / `TABLE`, `VALUES ROW(...)`, the row alias
//! `VALUES (...) AS new [(...)]`, qualified column names in the column list
//! and executable comments (`/*! */`, `/*M! */`).

use sqlparser::tokenizer::{Token, Word};

use super::lex::Lexeme;
use super::{Conflict, Dialect, InsertShape, Piece, Verb};

/// Highest PostgreSQL parameter number accepted (the wire protocol carries
/// the parameter count as a 16-bit integer).
const MAX_PG_PARAM: usize = 65_535;

/// Unquoted words that cannot be a table name, alias or column name in the
/// positions where the parser accepts a name.
const RESERVED_NAMES: &[&str] = &[
    "VALUES",
    "SELECT",
    "DEFAULT",
    "SET",
    "ON",
    "RETURNING",
    "AS",
];

/// Recognise a batchable statement in already-lexed `sql`; the error says
/// which part of the text the rewrite does not cover.
pub(super) fn recognise(
    dialect: Dialect,
    sql: &str,
    lexemes: &[Lexeme],
) -> Result<InsertShape, &'static str> {
    let mut sig: Vec<usize> = lexemes
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_trivia())
        .map(|(i, _)| i)
        .collect();

    // Exactly one statement: an optional `;` may only be followed by trivia.
    let mut stmt_end = sql.len();
    let semi = lexemes
        .iter()
        .position(|l| matches!(l.token, Token::SemiColon));
    if let Some(semi) = semi {
        if sig.last() != Some(&semi) {
            return Err("several statements in one text");
        }
        stmt_end = lexemes.get(semi).ok_or(INTERNAL)?.start;
        sig.pop();
    }

    let mut p = Parser {
        lexemes,
        sig,
        pos: 0,
    };
    let verb = p
        .verb(dialect)
        .ok_or("a modifier or form after INSERT that is not coalesced")?;

    let (table_start, table_end) = p.object_name().ok_or("the table name")?;
    if dialect == Dialect::Postgres && p.eat_kw("AS") {
        p.name_word().ok_or("the table alias")?;
    }
    let columns = if p.peek_is(|t| matches!(t, Token::LParen)) {
        Some(
            p.column_list(dialect)
                .ok_or("the column list (plain names only)")?,
        )
    } else {
        None
    };
    let values_ok = p.eat_kw("VALUES") || (dialect == Dialect::MySql && p.eat_kw("VALUE"));
    if !values_ok {
        return Err("no VALUES tuple (INSERT ... SELECT / SET / DEFAULT VALUES ...)");
    }
    let tuple = p
        .tuple(dialect, sql)
        .ok_or("the VALUES tuple (unbalanced, empty element or bad placeholder)")?;
    if let Some(cols) = &columns
        && cols.len() != tuple.params.len()
    {
        return Err("the VALUES tuple does not match the column list");
    }

    // A second tuple, a row alias or anything else unexpected is rejected by
    // the clause parsers below leaving tokens unconsumed.
    let conflict = match (dialect, verb) {
        (Dialect::Postgres, _) => p.pg_on_conflict(dialect),
        (Dialect::MySql, Verb::Insert | Verb::InsertIgnore) => p.on_duplicate_key(),
        (Dialect::MySql, Verb::Replace) => Some(Conflict::None),
    }
    .ok_or("the conflict clause")?;
    let returning = p.returning().ok_or("the RETURNING clause")?;
    if !p.at_end() {
        return Err("more than one row, or a clause after the VALUES tuple that is not coalesced");
    }

    // Placeholders are only allowed inside the tuple.
    let outside = lexemes.iter().enumerate().any(|(i, l)| {
        matches!(l.token, Token::Placeholder(_)) && (i < tuple.open_index || i > tuple.close_index)
    });
    if outside {
        return Err("a placeholder outside the VALUES tuple");
    }

    // Tail: from the closing `)` of the tuple to the end of the last
    // non-whitespace token of the statement (comments included). A trailing
    // line comment gets a newline so that nothing appended later is swallowed.
    let last_content = lexemes[..]
        .iter()
        .take_while(|l| l.start < stmt_end)
        .filter(|l| {
            !matches!(
                l.token,
                Token::Whitespace(
                    sqlparser::tokenizer::Whitespace::Space
                        | sqlparser::tokenizer::Whitespace::Tab
                        | sqlparser::tokenizer::Whitespace::Newline
                )
            )
        })
        .last()
        .ok_or(INTERNAL)?;
    let tail_end = last_content.end.max(tuple.close_end);
    let mut tail = sql
        .get(tuple.close_end..tail_end)
        .ok_or(INTERNAL)?
        .to_owned();
    if let Token::Whitespace(sqlparser::tokenizer::Whitespace::SingleLineComment { .. }) =
        last_content.token
        && last_content.end > tuple.close_end
    {
        tail.push('\n');
    }

    Ok(InsertShape {
        dialect,
        verb,
        table: sql.get(table_start..table_end).ok_or(INTERNAL)?.to_owned(),
        columns,
        params_per_row: tuple.params_per_row,
        tuple_params: tuple.params,
        conflict,
        returning,
        calls: p.calls(dialect, tuple.open_index, lexemes.len().saturating_sub(1)),
        head: sql.get(..tuple.open_start).ok_or(INTERNAL)?.into(),
        pieces: tuple.pieces.into_boxed_slice(),
        tail: tail.into_boxed_str(),
    })
}

/// A slice that cannot fail did: the text is passed through.
const INTERNAL: &str = "text offsets the tokenizer reported inconsistently";

/// The parsed VALUES tuple.
struct Tuple {
    /// Index into the lexeme list of the opening `(`.
    open_index: usize,
    /// Index into the lexeme list of the closing `)`.
    close_index: usize,
    /// Byte offset of the opening `(`.
    open_start: usize,
    /// Byte offset just after the closing `)`.
    close_end: usize,
    /// Parameters per row.
    params_per_row: usize,
    /// Per element: the 0-based parameter index when the element is one bare
    /// placeholder.
    params: Vec<Option<usize>>,
    /// Render pieces of the tuple text.
    pieces: Vec<Piece>,
}

/// Cursor over the significant tokens of one statement.
struct Parser<'a> {
    /// All tokens, trivia included.
    lexemes: &'a [Lexeme],
    /// Indices into `lexemes` of the significant tokens of the statement.
    sig: Vec<usize>,
    /// Position in `sig` of the next token.
    pos: usize,
}

/// Whether `token` is the unquoted keyword `kw` (ASCII case-insensitive).
pub(super) fn is_kw(token: &Token, kw: &str) -> bool {
    matches!(token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw))
}

/// Whether `word` may serve as a name (table, alias, column).
pub(super) fn usable_name(word: &Word) -> bool {
    word.quote_style.is_some()
        || !RESERVED_NAMES
            .iter()
            .any(|r| word.value.eq_ignore_ascii_case(r))
}

/// Normalise an identifier: PostgreSQL folds unquoted names to lower case
/// (ASCII only, as the server does for UTF-8 databases) and keeps quoted
/// names verbatim; MySQL column names are case-insensitive, so every name is
/// lower-cased. Doubled quote characters inside quoted names are undoubled.
pub(super) fn normalise(dialect: Dialect, word: &Word) -> String {
    let raw = match word.quote_style {
        Some(q) => {
            let doubled: String = [q, q].iter().collect();
            word.value.replace(&doubled, &q.to_string())
        }
        None => word.value.clone(),
    };
    match (dialect, word.quote_style) {
        (Dialect::Postgres, Some(_)) => raw,
        (Dialect::Postgres, None) => raw.to_ascii_lowercase(),
        (Dialect::MySql, _) => raw.to_lowercase(),
    }
}

impl<'a> Parser<'a> {
    /// The lexeme at significant position `pos`, if any.
    fn lexeme_at(&self, pos: usize) -> Option<&'a Lexeme> {
        self.sig.get(pos).and_then(|&i| self.lexemes.get(i))
    }

    /// The next significant token without consuming it.
    fn peek(&self) -> Option<&'a Token> {
        self.lexeme_at(self.pos).map(|l| &l.token)
    }

    /// Whether the next token satisfies `pred`.
    fn peek_is(&self, pred: impl Fn(&Token) -> bool) -> bool {
        self.peek().is_some_and(pred)
    }

    /// Consume and return the next significant lexeme.
    fn bump(&mut self) -> Option<&'a Lexeme> {
        let lexeme = self.lexeme_at(self.pos)?;
        self.pos += 1;
        Some(lexeme)
    }

    /// Consume the next token if it is the unquoted keyword `kw`.
    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.peek_is(|t| is_kw(t, kw)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consume the keyword `kw` or fail.
    fn expect_kw(&mut self, kw: &str) -> Option<()> {
        self.eat_kw(kw).then_some(())
    }

    /// Whether every significant token of the statement has been consumed.
    fn at_end(&self) -> bool {
        self.pos >= self.sig.len()
    }

    /// Parse the statement verb (and the optional `INTO`).
    fn verb(&mut self, dialect: Dialect) -> Option<Verb> {
        match dialect {
            Dialect::Postgres => {
                self.expect_kw("INSERT")?;
                self.expect_kw("INTO")?;
                Some(Verb::Insert)
            }
            Dialect::MySql => {
                let verb = if self.eat_kw("INSERT") {
                    if self.eat_kw("IGNORE") {
                        Verb::InsertIgnore
                    } else {
                        Verb::Insert
                    }
                } else if self.eat_kw("REPLACE") {
                    Verb::Replace
                } else {
                    return None;
                };
                // `INTO` is optional in MySQL. Modifiers such as LOW_PRIORITY
                // are not recognised: they are parsed as the table name and
                // the statement is then rejected because the next token is
                // neither `(` nor VALUES.
                self.eat_kw("INTO");
                Some(verb)
            }
        }
    }

    /// Consume a single name word.
    fn name_word(&mut self) -> Option<&'a Word> {
        match &self.bump()?.token {
            Token::Word(w) if usable_name(w) => Some(w),
            _ => None,
        }
    }

    /// Parse a possibly qualified object name, returning its byte range.
    fn object_name(&mut self) -> Option<(usize, usize)> {
        let start = self.lexeme_at(self.pos)?.start;
        self.name_word()?;
        let mut end = self.lexeme_at(self.pos.checked_sub(1)?)?.end;
        while self.peek_is(|t| matches!(t, Token::Period)) {
            self.pos += 1;
            self.name_word()?;
            end = self.lexeme_at(self.pos - 1)?.end;
        }
        Some((start, end))
    }

    /// Parse `( name, ... )` of plain identifiers; the opening `(` is next.
    /// An empty list `()` is accepted for MySQL only.
    fn column_list(&mut self, dialect: Dialect) -> Option<Vec<String>> {
        if !matches!(self.bump()?.token, Token::LParen) {
            return None;
        }
        let mut names = Vec::new();
        if self.peek_is(|t| matches!(t, Token::RParen)) {
            self.pos += 1;
            return (dialect == Dialect::MySql).then_some(names);
        }
        loop {
            names.push(normalise(dialect, self.name_word()?));
            match self.bump()?.token {
                Token::Comma => {}
                Token::RParen => return Some(names),
                _ => return None,
            }
        }
    }

    /// Parse the VALUES tuple; the opening `(` is next.
    fn tuple(&mut self, dialect: Dialect, sql: &str) -> Option<Tuple> {
        let open_pos = self.pos;
        let open = self.bump()?;
        if !matches!(open.token, Token::LParen) {
            return None;
        }
        let open_index = *self.sig.get(open_pos)?;

        let mut stack: Vec<char> = vec![')'];
        let mut elements: Vec<Vec<usize>> = Vec::new();
        let mut current: Vec<usize> = Vec::new();
        let mut placeholders: Vec<(usize, usize)> = Vec::new(); // (lexeme index, 1-based number)
        let mut mysql_count = 0usize;
        let mut numbers_by_element: Vec<Option<usize>> = Vec::new();
        let close_index;
        loop {
            let index = *self.sig.get(self.pos)?;
            let lexeme = self.bump()?;
            match &lexeme.token {
                Token::LParen => stack.push(')'),
                Token::LBracket => stack.push(']'),
                Token::LBrace => stack.push('}'),
                Token::RParen | Token::RBracket | Token::RBrace => {
                    let want = match lexeme.token {
                        Token::RParen => ')',
                        Token::RBracket => ']',
                        _ => '}',
                    };
                    if stack.pop()? != want {
                        return None;
                    }
                    if stack.is_empty() {
                        close_index = index;
                        break;
                    }
                }
                Token::Comma if stack.len() == 1 => {
                    if current.is_empty() {
                        return None;
                    }
                    elements.push(std::mem::take(&mut current));
                    continue;
                }
                Token::Placeholder(text) => {
                    let number = match dialect {
                        Dialect::Postgres => pg_param_number(text)?,
                        Dialect::MySql => {
                            if text != "?" {
                                return None;
                            }
                            mysql_count += 1;
                            mysql_count
                        }
                    };
                    placeholders.push((index, number));
                }
                _ => {}
            }
            current.push(index);
        }
        if current.is_empty() {
            // `()` is only meaningful for MySQL; `( ..., )` is never valid.
            if !elements.is_empty() || dialect == Dialect::Postgres {
                return None;
            }
        } else {
            elements.push(current);
        }

        for element in &elements {
            let bare = match element.as_slice() {
                [only] => placeholders
                    .iter()
                    .find(|(i, _)| i == only)
                    .map(|&(_, n)| n - 1),
                _ => None,
            };
            numbers_by_element.push(bare);
        }

        let params_per_row = match dialect {
            Dialect::Postgres => {
                let max = placeholders.iter().map(|&(_, n)| n).max().unwrap_or(0);
                let mut seen = vec![false; max];
                for &(_, n) in &placeholders {
                    if let Some(slot) = seen.get_mut(n - 1) {
                        *slot = true;
                    }
                }
                if !seen.iter().all(|&s| s) {
                    return None;
                }
                max
            }
            Dialect::MySql => mysql_count,
        };

        let close = self.lexemes.get(close_index)?;
        let mut pieces = Vec::new();
        let mut cursor = open.start;
        if dialect == Dialect::Postgres {
            for &(index, number) in &placeholders {
                let ph = self.lexemes.get(index)?;
                pieces.push(Piece::Text(sql.get(cursor..ph.start)?.into()));
                pieces.push(Piece::Param(number));
                cursor = ph.end;
            }
        }
        pieces.push(Piece::Text(sql.get(cursor..close.end)?.into()));

        Some(Tuple {
            open_index,
            close_index,
            open_start: open.start,
            close_end: close.end,
            params_per_row,
            params: numbers_by_element,
            pieces,
        })
    }

    /// Parse an optional PostgreSQL `ON CONFLICT` clause.
    fn pg_on_conflict(&mut self, dialect: Dialect) -> Option<Conflict> {
        if !self.eat_kw("ON") {
            return Some(Conflict::None);
        }
        self.expect_kw("CONFLICT")?;
        let mut target = None;
        if self.peek_is(|t| matches!(t, Token::LParen)) {
            let start = self.pos;
            self.skip_group()?;
            target = self.plain_target(dialect, start + 1, self.pos - 1);
            if self.eat_kw("WHERE") {
                target = None;
                // Index predicate: everything up to `DO` at depth 0.
                self.skip_until_depth0(|t| is_kw(t, "DO"))?;
            }
        } else if self.eat_kw("ON") {
            self.expect_kw("CONSTRAINT")?;
            self.name_word()?;
        }
        self.expect_kw("DO")?;
        if self.eat_kw("NOTHING") {
            return Some(Conflict::DoNothing { target });
        }
        self.expect_kw("UPDATE")?;
        self.expect_kw("SET")?;
        if self.at_end() {
            return None;
        }
        let mut has_where = false;
        self.clause_body(|p| {
            has_where |= p.is_clause_kw("WHERE");
            p.is_clause_kw("RETURNING")
        })?;
        Some(Conflict::DoUpdate { target, has_where })
    }

    /// Parse an optional MySQL `ON DUPLICATE KEY UPDATE` clause; its body runs
    /// up to a RETURNING clause or the end of the statement.
    fn on_duplicate_key(&mut self) -> Option<Conflict> {
        if !self.eat_kw("ON") {
            return Some(Conflict::None);
        }
        self.expect_kw("DUPLICATE")?;
        self.expect_kw("KEY")?;
        self.expect_kw("UPDATE")?;
        if self.at_end() {
            return None;
        }
        self.clause_body(|p| p.is_clause_kw("RETURNING"))?;
        Some(Conflict::DuplicateKeyUpdate)
    }

    /// Parse an optional trailing `RETURNING ...` clause (which must be the
    /// last clause), returning whether it was present.
    fn returning(&mut self) -> Option<bool> {
        if !self.eat_kw("RETURNING") {
            return Some(false);
        }
        if self.at_end() {
            return None;
        }
        self.clause_body(|_| false)?;
        Some(true)
    }

    /// Names of the functions called between lexemes `from` and `to` (a
    /// word followed by `(`), normalised, each once.
    fn calls(&self, dialect: Dialect, from: usize, to: usize) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let significant: Vec<&Lexeme> = self
            .lexemes
            .get(from..=to)
            .unwrap_or_default()
            .iter()
            .filter(|l| !l.is_trivia())
            .collect();
        for pair in significant.windows(2) {
            if let (Token::Word(w), Token::LParen) = (&pair[0].token, &pair[1].token) {
                let name = normalise(dialect, w);
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }

    /// Advances over the body of a clause: up to the end of the statement,
    /// or up to a token at bracket depth 0 for which `stop` holds (not
    /// consumed); `None` when the brackets do not balance.
    fn clause_body(&mut self, mut stop: impl FnMut(&Self) -> bool) -> Option<()> {
        let mut depth = 0usize;
        while let Some(token) = self.peek() {
            match token {
                Token::LParen | Token::LBracket | Token::LBrace => depth += 1,
                Token::RParen | Token::RBracket | Token::RBrace => depth = depth.checked_sub(1)?,
                _ if depth == 0 && stop(self) => break,
                _ => {}
            }
            self.pos += 1;
        }
        (depth == 0).then_some(())
    }

    /// Whether the next token is the keyword `kw` used as a clause keyword
    /// inside an assignment list: not a qualified name part (`x.kw`, `kw.x`),
    /// not an assignment target (`, kw =` / `UPDATE kw =` / `SET kw =`), not
    /// an assigned value (`= kw`) and not the last token of the statement.
    fn is_clause_kw(&self, kw: &str) -> bool {
        if !self.peek_is(|t| is_kw(t, kw)) {
            return false;
        }
        let prev = self
            .pos
            .checked_sub(1)
            .and_then(|p| self.lexeme_at(p))
            .map(|l| &l.token);
        let next = self.lexeme_at(self.pos + 1).map(|l| &l.token);
        let prev_is_operand_position = matches!(
            prev,
            Some(Token::Period | Token::Comma | Token::Eq | Token::LParen)
        ) || prev
            .is_some_and(|t| is_kw(t, "UPDATE") || is_kw(t, "SET"));
        let next_is_not_clause_body = matches!(next, None | Some(Token::Eq | Token::Period));
        !prev_is_operand_position && !next_is_not_clause_body
    }

    /// Skip a balanced bracketed group; the opening bracket is next.
    fn skip_group(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.bump()?.token {
                Token::LParen | Token::LBracket | Token::LBrace => depth += 1,
                Token::RParen | Token::RBracket | Token::RBrace => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return Some(());
                    }
                }
                _ if depth == 0 => return None,
                _ => {}
            }
        }
    }

    /// Advance until the next token satisfies `stop` at bracket depth 0
    /// (without consuming it). Fails at the end of the statement.
    fn skip_until_depth0(&mut self, stop: impl Fn(&Token) -> bool) -> Option<()> {
        let mut depth = 0usize;
        loop {
            let token = self.peek()?;
            match token {
                Token::LParen | Token::LBracket | Token::LBrace => depth += 1,
                Token::RParen | Token::RBracket | Token::RBrace => depth = depth.checked_sub(1)?,
                t if depth == 0 && stop(t) => return Some(()),
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// If the significant tokens in positions `from..to` form a plain list of
    /// identifiers `a, b, ...`, return them normalised.
    fn plain_target(&self, dialect: Dialect, from: usize, to: usize) -> Option<Vec<String>> {
        let mut names = Vec::new();
        let mut expect_name = true;
        for pos in from..to {
            let token = &self.lexeme_at(pos)?.token;
            match (expect_name, token) {
                (true, Token::Word(w)) if usable_name(w) => names.push(normalise(dialect, w)),
                (false, Token::Comma) => {}
                _ => return None,
            }
            expect_name = !expect_name;
        }
        (!names.is_empty() && !expect_name).then_some(names)
    }
}

/// Parse a PostgreSQL placeholder `$n` (n in 1..=65535, ASCII digits only).
pub(super) fn pg_param_number(text: &str) -> Option<usize> {
    let digits = text.strip_prefix('$')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: usize = digits.parse().ok()?;
    (1..=MAX_PG_PARAM).contains(&n).then_some(n)
}
