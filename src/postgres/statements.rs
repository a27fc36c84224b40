//! The statement mode: named prepared statements (cached per connection) or
//! unnamed ones only (safe behind a transaction-mode pooler), and the
//! connection-string parameter `statements=` that selects it.

use std::str::FromStr;

use crate::error::Error;

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
    /// to reach PostgreSQL through a pooler that shares server sessions
    /// (the session's backend process is not the one the connection's
    /// cancel key names, as with PgBouncer, Odyssey or pgcat; or
    /// [`Pooler`](super::Pooler) says `transaction` or `statement`).
    /// Through pgpool-II, which keeps sessions apart, named. The default.
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

crate::params::display_as_str!(Statements);

impl FromStr for Statements {
    type Err = Error;

    fn from_str(s: &str) -> Result<Statements, Error> {
        let all = [Statements::Auto, Statements::Named, Statements::Unnamed];
        let s = s.to_ascii_lowercase();
        crate::params::parse_name("statements", &s, &all, Statements::as_str, false)
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
    fn parameter_is_taken_out() {
        // (connection string, what is left of it, the mode it named)
        let cases = [
            (
                "postgresql://u@h:6432/db?sslmode=disable&statements=unnamed&x=1",
                "postgresql://u@h:6432/db?sslmode=disable&x=1",
                Some(Statements::Unnamed),
            ),
            (
                "postgres://u@h/db?statements=named",
                "postgres://u@h/db",
                Some(Statements::Named),
            ),
            ("postgres://u@h/db", "postgres://u@h/db", None),
            (
                "host=h statements = 'Unnamed' password='a b\\'c' user=u",
                "host=h password='a b\\'c' user=u",
                Some(Statements::Unnamed),
            ),
            ("host=h user=u", "host=h user=u", None),
            // A value that merely contains the word is not the key.
            (
                "application_name=statements host=h",
                "application_name=statements host=h",
                None,
            ),
        ];
        for (config, rest, mode) in cases {
            assert_eq!(split(config).unwrap(), (rest.to_owned(), mode), "{config}");
        }
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
