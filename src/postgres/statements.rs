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
    /// tokio-postgres too (a migration tool, a listener). libpq's TLS
    /// parameters stay in the rest: [`TlsConfig::split_config`](super::TlsConfig::split_config)
    /// takes them out (tokio-postgres refuses `sslmode=verify-full` and
    /// `sslrootcert`).
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

/// The connection-string parameter that names the mode.
const KEY: &str = "statements";

/// Removes `statements=...` from a connection string (URL or key-value form)
/// and returns the rest, for tokio-postgres, with the mode it named.
pub(crate) fn split(config: &str) -> Result<(String, Option<Statements>), Error> {
    let (rest, taken) = crate::params::take(config, &[KEY]);
    let mut mode = None;
    for (_, value) in taken {
        mode = Some(value.parse()?);
    }
    Ok((rest, mode))
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
