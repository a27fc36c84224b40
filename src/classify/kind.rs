//! What kind of statement a SQL text is, as far as pooled connections care:
//! transaction control (which must never run on an arbitrary pooled
//! connection), a statement the server commits implicitly around (MySQL DDL,
//! which would break an open transaction), or anything else.
//!
//! The text is read with the same sqlparser tokenizer as the INSERT
//! recogniser, so comments, strings and quoted names are skipped exactly as
//! there. A text of several statements (`SELECT 1; COMMIT`, which MySQL's
//! text protocol runs) is judged by its most dangerous statement. MariaDB
//! executable comments (`/*M! ... */`, which the tokenizer keeps as comments)
//! are read as the SQL they hold.

use sqlparser::tokenizer::{Token, Whitespace};

use super::Dialect;
use super::lex::tokens;

/// The kind of one SQL text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatementKind {
    /// Begins, ends or nests a transaction, or switches autocommit
    /// (`BEGIN`, `COMMIT`, `SAVEPOINT`, `SET autocommit`, `LOCK TABLES`...):
    /// the keyword found.
    TransactionControl(&'static str),
    /// The server commits any open transaction before running it (MySQL DDL,
    /// account and admin statements): the keyword found.
    ImplicitCommit(&'static str),
    /// Anything else; `insert` when it starts with `INSERT` / `REPLACE`.
    Other {
        /// Starts with `INSERT` (or MySQL `REPLACE`).
        insert: bool,
    },
}

/// Leading keywords that are transaction control on PostgreSQL. `START` and
/// `PREPARE` only count when followed by `TRANSACTION`.
const PG_CONTROL: &[&str] = &[
    "BEGIN",
    "START",
    "COMMIT",
    "END",
    "ROLLBACK",
    "ABORT",
    "SAVEPOINT",
    "RELEASE",
    "PREPARE",
];

/// Leading keywords that are transaction control on MySQL / MariaDB.
const MY_CONTROL: &[&str] = &[
    "BEGIN",
    "START",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT",
    "RELEASE",
    "XA",
    "LOCK",
    "UNLOCK",
];

/// Leading keywords of statements MySQL / MariaDB commit implicitly around
/// (MySQL reference manual, "Statements That Cause an Implicit Commit").
/// `CREATE` / `DROP TEMPORARY TABLE` do not.
const MY_IMPLICIT_COMMIT: &[&str] = &[
    "ALTER",
    "CREATE",
    "DROP",
    "RENAME",
    "TRUNCATE",
    "GRANT",
    "REVOKE",
    "ANALYZE",
    "OPTIMIZE",
    "REPAIR",
    "CHECK",
    "CACHE",
    "LOAD",
    "FLUSH",
    "RESET",
    "INSTALL",
    "UNINSTALL",
    "CHANGE",
    "STOP",
];

/// Classifies `sql` (never fails: an unreadable text is `Other`, and the
/// server then rejects it or the pool's recycle check catches the state).
pub(crate) fn statement_kind(dialect: Dialect, sql: &str) -> StatementKind {
    let Some(tokens) = tokens(dialect, sql) else {
        return StatementKind::Other { insert: false };
    };
    let words = words(dialect, tokens);
    let mut kind = StatementKind::Other { insert: false };
    for (i, statement) in words.split(|w| w.is_none()).enumerate() {
        let statement: Vec<&str> = statement.iter().flatten().map(String::as_str).collect();
        let this = statement_words(dialect, &statement);
        kind = match (kind, this) {
            (StatementKind::TransactionControl(_), _) => kind,
            (_, StatementKind::TransactionControl(_)) => this,
            (StatementKind::ImplicitCommit(_), _) => kind,
            (_, StatementKind::ImplicitCommit(_)) => this,
            // Only the first statement decides whether the text is an INSERT.
            (_, StatementKind::Other { insert }) if i == 0 => StatementKind::Other { insert },
            _ => kind,
        };
    }
    kind
}

/// The words of a token stream, `None` at each `;`; the bodies of MariaDB
/// `/*M! ... */` comments are read as SQL.
fn words(dialect: Dialect, stream: Vec<Token>) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for token in stream {
        match token {
            Token::Word(w) => out.push(Some(if w.quote_style.is_some() {
                // A quoted name is never a keyword.
                String::from("\"")
            } else {
                w.value
            })),
            Token::SemiColon => out.push(None),
            Token::Whitespace(Whitespace::MultiLineComment(body)) if dialect == Dialect::MySql => {
                let inner = body
                    .strip_prefix("M!")
                    .or_else(|| body.strip_prefix('!'))
                    .map(|b| b.trim_start_matches(|c: char| c.is_ascii_digit()));
                if let Some(inner) = inner.and_then(|b| tokens(dialect, b)) {
                    out.extend(words(dialect, inner));
                }
            }
            Token::Whitespace(_) => {}
            // Operators, numbers, strings: a non-keyword position.
            _ => out.push(Some(String::new())),
        }
    }
    out
}

/// The kind of one statement from its words.
fn statement_words(dialect: Dialect, words: &[&str]) -> StatementKind {
    let Some(first) = words.first().map(|w| w.to_ascii_uppercase()) else {
        return StatementKind::Other { insert: false };
    };
    let second = words.get(1).map(|w| w.to_ascii_uppercase());
    let second = second.as_deref();
    let (control, implicit) = match dialect {
        Dialect::Postgres => (PG_CONTROL, &[][..]),
        Dialect::MySql => (MY_CONTROL, MY_IMPLICIT_COMMIT),
    };
    if let Some(&keyword) = control.iter().find(|k| **k == first) {
        let control = match keyword {
            "START" | "PREPARE" => second == Some("TRANSACTION"),
            // MariaDB's compound statement `BEGIN NOT ATOMIC ... END`.
            "BEGIN" if dialect == Dialect::MySql => second != Some("NOT"),
            _ => true,
        };
        if control {
            return StatementKind::TransactionControl(keyword);
        }
    }
    if dialect == Dialect::MySql
        && first == "SET"
        && words.iter().any(|w| {
            let w = w.to_ascii_lowercase();
            w.trim_start_matches('@') == "autocommit"
        })
    {
        return StatementKind::TransactionControl("SET autocommit");
    }
    if let Some(&keyword) = implicit.iter().find(|k| **k == first) {
        let temporary = second == Some("TEMPORARY") && matches!(keyword, "CREATE" | "DROP");
        // `LOAD DATA` commits only on NDB; `LOAD INDEX INTO CACHE` always.
        let load_data = keyword == "LOAD" && second != Some("INDEX");
        if !temporary && !load_data {
            return StatementKind::ImplicitCommit(keyword);
        }
    }
    let insert = first == "INSERT" || (dialect == Dialect::MySql && first == "REPLACE");
    StatementKind::Other { insert }
}

#[cfg(test)]
mod tests {
    use super::StatementKind::{ImplicitCommit, Other, TransactionControl};
    use super::*;

    #[test]
    fn postgres_kinds() {
        for (sql, kind) in [
            ("BEGIN", TransactionControl("BEGIN")),
            (
                "  /* a /* nested */ */ -- c\n begin work",
                TransactionControl("BEGIN"),
            ),
            ("START TRANSACTION READ ONLY", TransactionControl("START")),
            ("end", TransactionControl("END")),
            ("ABORT", TransactionControl("ABORT")),
            ("PREPARE TRANSACTION 'x'", TransactionControl("PREPARE")),
            ("PREPARE q AS SELECT 1", Other { insert: false }),
            ("SAVEPOINT s", TransactionControl("SAVEPOINT")),
            ("CREATE TABLE t (a int)", Other { insert: false }),
            ("SELECT 'BEGIN'", Other { insert: false }),
            ("\"begin\"", Other { insert: false }),
            ("INSERT INTO t VALUES ($1)", Other { insert: true }),
            ("SELECT 1; COMMIT", TransactionControl("COMMIT")),
            ("", Other { insert: false }),
        ] {
            assert_eq!(statement_kind(Dialect::Postgres, sql), kind, "{sql}");
        }
    }

    #[test]
    fn mysql_kinds() {
        for (sql, kind) in [
            ("# hi\nBEGIN", TransactionControl("BEGIN")),
            ("BEGIN NOT ATOMIC SELECT 1; END", Other { insert: false }),
            ("start transaction", TransactionControl("START")),
            ("START SLAVE", Other { insert: false }),
            ("set autocommit = 0", TransactionControl("SET autocommit")),
            (
                "SET @@session.autocommit=0",
                TransactionControl("SET autocommit"),
            ),
            (
                "/*!40101 SET autocommit=0 */",
                TransactionControl("SET autocommit"),
            ),
            ("/*M!100100 BEGIN */", TransactionControl("BEGIN")),
            ("SET NAMES utf8mb4", Other { insert: false }),
            ("LOCK TABLES t WRITE", TransactionControl("LOCK")),
            ("XA START 'x'", TransactionControl("XA")),
            ("CREATE TABLE t (a int)", ImplicitCommit("CREATE")),
            ("create temporary table t (a int)", Other { insert: false }),
            ("TRUNCATE t", ImplicitCommit("TRUNCATE")),
            (
                "LOAD DATA LOCAL INFILE 'x' INTO TABLE t",
                Other { insert: false },
            ),
            ("SELECT 1; DROP TABLE t", ImplicitCommit("DROP")),
            ("REPLACE INTO t VALUES (?)", Other { insert: true }),
            ("SELECT 'COMMIT'", Other { insert: false }),
        ] {
            assert_eq!(statement_kind(Dialect::MySql, sql), kind, "{sql}");
        }
    }
}
