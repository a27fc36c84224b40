//! The statement mode: named prepared statements (cached per connection) or
//! unnamed ones only (safe behind a transaction-mode pooler), and the
//! connection-string parameter `statements=` that selects it.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Kind};

/// Which kind of prepared statement the pool sends (see
/// [Behind a pooler](super#behind-a-pooler)).
///
/// Set with [`PoolBuilder::statements`](crate::PoolBuilder::statements) or
/// the connection-string parameter `statements=auto|named|unnamed` (which
/// wins over the builder).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Statements {
    /// Named on a direct connection; unnamed when the connection turns out
    /// to reach PostgreSQL through a pooler (the session's backend process
    /// is not the one the connection's cancel key names, as with PgBouncer,
    /// Odyssey or pgcat). The default.
    #[default]
    Auto,
    /// Named prepared statements, each prepared once per connection and
    /// cached (fewest bytes and the least server parsing per statement).
    /// Needs the session to stay on one server connection: a direct
    /// connection, or a pooler in session mode, or PgBouncer ≥ 1.21 with
    /// `max_prepared_statements` set.
    Named,
    /// Unnamed statements only: every statement is parsed with its bind
    /// parameters in one message (tokio-postgres `query_typed`), with the
    /// parameter types the pool learned once per statement text. Works
    /// behind a pooler in transaction mode.
    Unnamed,
}

impl Statements {
    /// The name used in connection strings.
    pub fn as_str(self) -> &'static str {
        match self {
            Statements::Auto => "auto",
            Statements::Named => "named",
            Statements::Unnamed => "unnamed",
        }
    }
}

impl Statements {
    /// Takes the `statements=` parameter out of a connection string (URL or
    /// `key=value` form) and returns the rest, which tokio-postgres parses,
    /// with the mode it named: for handing the string a pool uses to plain
    /// tokio-postgres too (a migration tool, a listener).
    ///
    /// ```
    /// use batchpool::postgres::Statements;
    ///
    /// let (rest, mode) =
    ///     Statements::split_config("postgresql://app@pgbouncer:6432/app?statements=unnamed")?;
    /// assert_eq!(rest, "postgresql://app@pgbouncer:6432/app");
    /// assert_eq!(mode, Some(Statements::Unnamed));
    /// # Ok::<(), batchpool::Error>(())
    /// ```
    pub fn split_config(config: &str) -> Result<(String, Option<Statements>), Error> {
        split(config)
    }
}

impl fmt::Display for Statements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Statements {
    type Err = Error;

    fn from_str(s: &str) -> Result<Statements, Error> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Statements::Auto),
            "named" => Ok(Statements::Named),
            "unnamed" => Ok(Statements::Unnamed),
            other => Err(Error::new(
                Kind::Config,
                format!("invalid statements={other:?}: expected auto, named or unnamed"),
            )),
        }
    }
}

/// The connection-string parameter batchpool reads itself.
const KEY: &str = "statements";

/// Removes `statements=...` from a connection string (URL or key-value form)
/// and returns the rest, for tokio-postgres, with the mode it named.
pub(crate) fn split(config: &str) -> Result<(String, Option<Statements>), Error> {
    if config.starts_with("postgres://") || config.starts_with("postgresql://") {
        split_url(config)
    } else {
        split_key_value(config)
    }
}

fn split_url(url: &str) -> Result<(String, Option<Statements>), Error> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), None));
    };
    let mut mode = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((KEY, value)) => mode = Some(value.parse()?),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, mode))
}

/// `key=value` pairs separated by whitespace, values optionally in single
/// quotes with backslash escapes (libpq's format). Text that is not such a
/// pair is kept as it is, for tokio-postgres to report.
fn split_key_value(config: &str) -> Result<(String, Option<Statements>), Error> {
    let next = |pos: usize| config[pos..].chars().next();
    let skip_space = |mut pos: usize| {
        while let Some(c) = next(pos).filter(|c| c.is_whitespace()) {
            pos += c.len_utf8();
        }
        pos
    };
    let mut mode = None;
    let mut kept: Vec<&str> = Vec::new();
    let mut pos = skip_space(0);
    while pos < config.len() {
        let start = pos;
        while let Some(c) = next(pos).filter(|&c| c != '=' && !c.is_whitespace()) {
            pos += c.len_utf8();
        }
        let key = &config[start..pos];
        pos = skip_space(pos);
        let mut value = String::new();
        if next(pos) == Some('=') {
            pos = skip_space(pos + 1);
            let quoted = next(pos) == Some('\'');
            if quoted {
                pos += 1;
            }
            while let Some(c) = next(pos) {
                if !quoted && c.is_whitespace() {
                    break;
                }
                pos += c.len_utf8();
                match c {
                    '\\' => {
                        if let Some(e) = next(pos) {
                            value.push(e);
                            pos += e.len_utf8();
                        }
                    }
                    '\'' if quoted => break,
                    c => value.push(c),
                }
            }
        }
        if key == KEY {
            mode = Some(value.parse()?);
        } else {
            kept.push(&config[start..pos]);
        }
        pos = skip_space(pos);
    }
    Ok((kept.join(" "), mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameter_is_taken_out() {
        let (rest, mode) =
            split("postgresql://u@h:6432/db?sslmode=disable&statements=unnamed&x=1").unwrap();
        assert_eq!(rest, "postgresql://u@h:6432/db?sslmode=disable&x=1");
        assert_eq!(mode, Some(Statements::Unnamed));
        let (rest, mode) = split("postgres://u@h/db?statements=named").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(mode, Some(Statements::Named));
        let (rest, mode) = split("postgres://u@h/db").unwrap();
        assert_eq!((rest.as_str(), mode), ("postgres://u@h/db", None));
    }

    #[test]
    fn key_value_parameter_is_taken_out() {
        let (rest, mode) =
            split("host=h statements = 'Unnamed' password='a b\\'c' user=u").unwrap();
        assert_eq!(rest, "host=h password='a b\\'c' user=u");
        assert_eq!(mode, Some(Statements::Unnamed));
        let (rest, mode) = split("host=h user=u").unwrap();
        assert_eq!((rest.as_str(), mode), ("host=h user=u", None));
        // A value that merely contains the word is not the key.
        let (rest, mode) = split("application_name=statements host=h").unwrap();
        assert_eq!(
            (rest.as_str(), mode),
            ("application_name=statements host=h", None)
        );
    }

    #[test]
    fn rest_parses_as_tokio_postgres_config() {
        for s in [
            "host=h statements=auto password='a b\\'c' user=u",
            "postgresql://u:p@h:1/db?statements=auto&connect_timeout=3",
        ] {
            let (rest, mode) = split(s).unwrap();
            assert_eq!(mode, Some(Statements::Auto));
            rest.parse::<tokio_postgres::Config>().unwrap();
        }
    }

    #[test]
    fn unknown_mode_is_a_config_error() {
        let e = split("host=h statements=sometimes").unwrap_err();
        assert!(e.to_string().contains("auto, named or unnamed"), "{e}");
        assert!(split("postgres://h/db?statements=").is_err());
    }
}
