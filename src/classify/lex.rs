//! Tokenisation of SQL text with exact byte offsets into the original text.
//!
//! sqlparser's tokenizer reports line/column locations (columns counted in
//! `char`s, lines split on `\n` only). [`lex`] converts them to byte offsets by
//! walking the text once, and insists that the tokens tile the text exactly:
//! every token starts where the previous one ended and the last one ends at the
//! end of the text. Anything else (for example MySQL `/*! ... */` hints, which
//! the tokenizer re-tokenises with synthetic locations) makes [`lex`] give up,
//! which the classifier turns into `PassThrough`.
//!
//! [`lexically_safe`] then rejects the few constructs on which sqlparser's
//! tokenizer and the real server lexers are known to disagree about where
//! comments, strings and placeholders begin and end.

use sqlparser::dialect::{MySqlDialect, PostgreSqlDialect};
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer, Whitespace};

use super::Dialect;

/// One token together with its byte range `start..end` in the original text.
#[derive(Debug)]
pub(super) struct Lexeme {
    /// The token as produced by sqlparser (with `unescape = false`).
    pub(super) token: Token,
    /// Byte offset of the first byte of the token.
    pub(super) start: usize,
    /// Byte offset one past the last byte of the token.
    pub(super) end: usize,
}

impl Lexeme {
    /// Whether this token is whitespace or a comment.
    pub(super) fn is_trivia(&self) -> bool {
        matches!(self.token, Token::Whitespace(_))
    }
}

/// Tokenise `sql` for `dialect`, returning tokens with byte ranges.
///
/// Returns `None` when the tokenizer reports an error (unterminated string,
/// comment, quoted identifier, ...), when it panics (defence in depth: the
/// classifier must never panic), or when the token locations do not tile the
/// text exactly.
pub(super) fn lex(dialect: Dialect, sql: &str) -> Option<Vec<Lexeme>> {
    let tokens = std::panic::catch_unwind(|| tokenize(dialect, sql)).ok()??;
    locate(sql, tokens)
}

/// The tokens of `sql` without their locations (for reading keywords, where
/// exact byte ranges do not matter). `None` when the tokenizer fails.
pub(super) fn tokens(dialect: Dialect, sql: &str) -> Option<Vec<Token>> {
    let tokens = std::panic::catch_unwind(|| tokenize(dialect, sql)).ok()??;
    Some(tokens.into_iter().map(|t| t.token).collect())
}

/// Run sqlparser's tokenizer without unescaping, so that tokens keep their
/// source spelling.
fn tokenize(dialect: Dialect, sql: &str) -> Option<Vec<TokenWithSpan>> {
    let result = match dialect {
        Dialect::Postgres => Tokenizer::new(&PostgreSqlDialect {}, sql)
            .with_unescape(false)
            .tokenize_with_location(),
        Dialect::MySql => Tokenizer::new(&MySqlDialect {}, sql)
            .with_unescape(false)
            .tokenize_with_location(),
    };
    result.ok()
}

/// A cursor walking the text while tracking the tokenizer's notion of
/// line/column (1-based; `\n` starts a new line, every other `char` advances
/// the column by one).
struct Walker<'a> {
    /// Remaining characters with their byte offsets.
    chars: std::str::CharIndices<'a>,
    /// Current line.
    line: u64,
    /// Current column.
    column: u64,
    /// Current byte offset.
    byte: usize,
}

impl Walker<'_> {
    /// Whether the cursor is exactly at `loc`.
    fn at(&self, loc: Location) -> bool {
        self.line == loc.line && self.column == loc.column
    }

    /// Advance to `loc`, returning the byte offset reached, or `None` if the
    /// text ends first or `loc` is skipped over.
    fn advance_to(&mut self, loc: Location) -> Option<usize> {
        while !self.at(loc) {
            if self.line > loc.line || (self.line == loc.line && self.column > loc.column) {
                return None;
            }
            let (offset, ch) = self.chars.next()?;
            if ch == '\n' {
                self.line += 1;
                self.column = 1;
            } else {
                self.column += 1;
            }
            self.byte = offset + ch.len_utf8();
        }
        Some(self.byte)
    }
}

/// Convert token locations to byte ranges, checking exact tiling.
fn locate(sql: &str, tokens: Vec<TokenWithSpan>) -> Option<Vec<Lexeme>> {
    let mut walker = Walker {
        chars: sql.char_indices(),
        line: 1,
        column: 1,
        byte: 0,
    };
    let mut out = Vec::with_capacity(tokens.len());
    for TokenWithSpan { token, span } in tokens {
        if !walker.at(span.start) {
            return None;
        }
        let start = walker.byte;
        let end = walker.advance_to(span.end)?;
        out.push(Lexeme { token, start, end });
    }
    if walker.byte != sql.len() {
        return None;
    }
    Some(out)
}

/// Reject token streams in which sqlparser's tokenizer may disagree with the
/// server's lexer about comment, string or placeholder boundaries.
///
/// Both dialects: plain whitespace tokens must be ASCII whitespace (the servers
/// treat e.g. U+00A0 as an identifier character or an error, sqlparser as a
/// space).
///
/// PostgreSQL: a multi-character operator containing `--` or `/*` (the server
/// ends the operator there and starts a comment; sqlparser keeps going), and a
/// dollar-quote tag starting with a digit (`$1$...$1$` is a parameter for the
/// server, a string for sqlparser).
///
/// MySQL/MariaDB: a `--` comment not followed by ASCII whitespace or a control
/// character, two adjacent `-` tokens (`--` at the end of the text or before a
/// control character is a comment for the server), and MariaDB executable
/// comments `/*M! ... */` (sqlparser treats them as plain comments).
pub(super) fn lexically_safe(dialect: Dialect, sql: &str, lexemes: &[Lexeme]) -> bool {
    let postgres = dialect == Dialect::Postgres;
    let mysql = dialect == Dialect::MySql;
    let mut previous_minus_end: Option<usize> = None;
    for lexeme in lexemes {
        let text = sql.get(lexeme.start..lexeme.end).unwrap_or_default();
        let unsafe_token = match &lexeme.token {
            Token::Whitespace(Whitespace::Space | Whitespace::Tab | Whitespace::Newline) => !text
                .chars()
                .all(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')),
            Token::CustomBinaryOperator(op) if postgres => op.contains("--") || op.contains("/*"),
            Token::DollarQuotedString(dq) if postgres => dq
                .tag
                .as_deref()
                .and_then(|tag| tag.chars().next())
                .is_some_and(|c| c.is_ascii_digit()),
            Token::Whitespace(Whitespace::SingleLineComment { prefix, .. })
                if mysql && prefix == "--" =>
            {
                let after = sql.get(lexeme.start + 2..).and_then(|s| s.chars().next());
                !after.is_some_and(|c| c.is_ascii_whitespace() || c.is_ascii_control())
            }
            Token::Whitespace(Whitespace::MultiLineComment(body)) if mysql => {
                body.starts_with("M!") || body.starts_with('!')
            }
            Token::Minus if mysql => previous_minus_end == Some(lexeme.start),
            _ => false,
        };
        if unsafe_token {
            return false;
        }
        previous_minus_end = matches!(lexeme.token, Token::Minus).then_some(lexeme.end);
    }
    true
}
