//! TLS settings of PostgreSQL connections: libpq's `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey`, taken out of the connection string (tokio-postgres
//! parses only `sslmode=disable|prefer|require`), and what each mode
//! verifies.

use std::path::{Path, PathBuf};
use std::str::FromStr;

#[cfg(feature = "rustls")]
use super::verify::{Verify, client_config};
use crate::error::Error;

/// Whether and how a connection uses TLS: libpq's `sslmode`.
///
/// Set with the connection string (`sslmode=verify-full`) or
/// [`PoolBuilder::ssl_mode`](crate::PoolBuilder::ssl_mode). See
/// [TLS](super#tls).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, else plain; the certificate is not
    /// checked. The default (libpq's and tokio-postgres's).
    #[default]
    Prefer,
    /// TLS or no connection; the certificate is not checked, unless
    /// `sslrootcert` is given (then as [`VerifyCa`](SslMode::VerifyCa), as
    /// libpq does).
    Require,
    /// TLS with a certificate chain that ends at a trusted root
    /// (`sslrootcert`, else Mozilla's root set); any host name.
    VerifyCa,
    /// As [`VerifyCa`](SslMode::VerifyCa), and the certificate must name
    /// the host connected to (the connection string's `host`, also when
    /// `hostaddr` gives the address).
    VerifyFull,
}

impl SslMode {
    /// Every mode, weakest first. Not libpq's two modes weaker than
    /// `prefer`: batchpool never negotiates less than asked, so they are not
    /// offered.
    const ALL: [SslMode; 5] = [
        SslMode::Disable,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    /// The name used in connection strings (`verify-full`).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The mode tokio-postgres connects with: it negotiates, batchpool's
    /// certificate verifier checks.
    pub(crate) fn driver_mode(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self {
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }

    /// The mode of a tokio-postgres config.
    pub(crate) fn from_driver(mode: tokio_postgres::config::SslMode) -> SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match mode {
            Driver::Disable => SslMode::Disable,
            Driver::Require => SslMode::Require,
            _ => SslMode::Prefer,
        }
    }
}

crate::params::display_as_str!(SslMode);

impl FromStr for SslMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<SslMode, Error> {
        crate::params::parse_name("sslmode", s, &SslMode::ALL, SslMode::as_str, false)
    }
}

/// The TLS parameters of a PostgreSQL connection string, as libpq names
/// them: `sslmode`, `sslrootcert` (PEM file of the roots to trust),
/// `sslcert` and `sslkey` (PEM files of a client certificate and its key).
///
/// [`split_config`](TlsConfig::split_config) takes them out of a string so
/// that the rest can go to plain tokio-postgres, with the connector
/// [`rustls_connector`](TlsConfig::rustls_connector) builds: the pool's own
/// TLS for a migration tool or a listener on the same database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    pub(crate) mode: Option<SslMode>,
    pub(crate) root_cert: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

/// The parameters [`TlsConfig`] takes out of a connection string.
const KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

impl TlsConfig {
    /// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of a
    /// connection string (URL or `key=value` form) and returns the rest,
    /// which tokio-postgres parses, with the TLS settings. A mode the rest
    /// needs to negotiate TLS is put back as tokio-postgres names it
    /// (`verify-ca` and `verify-full` as `require`).
    ///
    /// ```
    /// use batchpool::postgres::{SslMode, TlsConfig};
    ///
    /// let (rest, tls) = TlsConfig::split_config(
    ///     "postgresql://app@db.example.com/app?sslmode=verify-full&sslrootcert=/etc/ca.pem",
    /// )?;
    /// assert_eq!(rest, "postgresql://app@db.example.com/app?sslmode=require");
    /// assert_eq!(tls.mode(), SslMode::VerifyFull);
    /// assert_eq!(tls.root_cert(), Some(std::path::Path::new("/etc/ca.pem")));
    /// # Ok::<(), batchpool::Error>(())
    /// ```
    pub fn split_config(config: &str) -> Result<(String, TlsConfig), Error> {
        let (rest, taken) = crate::params::take_tls(config, &KEYS)?;
        let tls = TlsConfig {
            mode: taken.mode,
            root_cert: taken.root_cert,
            cert: taken.cert,
            key: taken.key,
        };
        let rest = match tls.mode {
            Some(mode) => crate::params::append(&rest, "sslmode", mode.driver_mode_name()),
            None => rest,
        };
        Ok((rest, tls))
    }

    /// The mode (`prefer` when none was named).
    pub fn mode(&self) -> SslMode {
        self.mode.unwrap_or_default()
    }

    /// The `sslrootcert` file, if one was named.
    pub fn root_cert(&self) -> Option<&Path> {
        self.root_cert.as_deref()
    }

    /// Each setting of `self`, else `fallback`'s (the connection string's
    /// settings win over the builder's).
    pub(crate) fn or(self, fallback: &TlsConfig) -> TlsConfig {
        let (cert, key) = if self.cert.is_some() {
            (self.cert, self.key)
        } else {
            (fallback.cert.clone(), fallback.key.clone())
        };
        TlsConfig {
            mode: self.mode.or(fallback.mode),
            root_cert: self.root_cert.or_else(|| fallback.root_cert.clone()),
            cert,
            key,
        }
    }

    /// Whether anything beyond the mode was set: files a custom connector
    /// cannot be given.
    pub(crate) fn has_files(&self) -> bool {
        self.root_cert.is_some() || self.cert.is_some()
    }

    /// What the server's certificate must pass in this mode.
    #[cfg(feature = "rustls")]
    pub(crate) fn verify(&self) -> Verify {
        match self.mode() {
            SslMode::Disable | SslMode::Prefer => Verify::Nothing,
            SslMode::Require if self.root_cert.is_none() => Verify::Nothing,
            SslMode::Require | SslMode::VerifyCa => Verify::Chain,
            SslMode::VerifyFull => Verify::Full,
        }
    }

    /// The rustls connector for these settings, for plain tokio-postgres
    /// (`tokio_postgres::connect(&rest, connector)`), as the pool uses it:
    /// ring as the crypto provider, the roots of `sslrootcert` (else
    /// Mozilla's, from webpki-roots) for the verifying modes, and the client
    /// certificate, if given. Reads the files now; a missing or unreadable
    /// one is an error for which [`Error::is_config`] is true.
    #[cfg(feature = "rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
    pub fn rustls_connector(&self) -> Result<tokio_postgres_rustls::MakeRustlsConnect, Error> {
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(
            client_config(
                self.verify(),
                self.root_cert.as_deref(),
                self.cert.as_deref(),
                self.key.as_deref(),
            )?,
        ))
    }
}

impl SslMode {
    /// The name of [`driver_mode`](SslMode::driver_mode) in a connection
    /// string.
    fn driver_mode_name(self) -> &'static str {
        use tokio_postgres::config::SslMode as Driver;
        match self.driver_mode() {
            Driver::Disable => "disable",
            Driver::Require => "require",
            _ => "prefer",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_modes_become_require_for_tokio_postgres() {
        for (given, mode) in [
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
            ("require", SslMode::Require),
        ] {
            let (rest, tls) =
                TlsConfig::split_config(&format!("host=h sslmode={given} user=u")).unwrap();
            assert_eq!(rest, "host=h user=u sslmode=require");
            assert_eq!(tls.mode(), mode);
            let pg: tokio_postgres::Config = rest.parse().unwrap();
            assert_eq!(pg.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        }
        let (rest, tls) = TlsConfig::split_config("postgres://h/db?x=1").unwrap();
        assert_eq!(
            (rest.as_str(), tls.mode()),
            ("postgres://h/db?x=1", SslMode::Prefer)
        );
        let (rest, _) = TlsConfig::split_config("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(rest, "postgres://h/db?sslmode=disable");
    }

    #[test]
    #[cfg(feature = "rustls")]
    fn what_each_mode_verifies() {
        let with = |mode, root: bool| TlsConfig {
            mode: Some(mode),
            root_cert: root.then(|| PathBuf::from("/ca.pem")),
            ..TlsConfig::default()
        };
        assert_eq!(with(SslMode::Prefer, true).verify(), Verify::Nothing);
        assert_eq!(with(SslMode::Require, false).verify(), Verify::Nothing);
        // libpq: require with a root certificate verifies the chain.
        assert_eq!(with(SslMode::Require, true).verify(), Verify::Chain);
        assert_eq!(with(SslMode::VerifyCa, false).verify(), Verify::Chain);
        assert_eq!(with(SslMode::VerifyFull, false).verify(), Verify::Full);
    }

    #[test]
    fn bad_settings_are_config_errors() {
        let e = TlsConfig::split_config("host=h sslmode=allow").unwrap_err();
        assert!(
            e.is_config() && e.to_string().contains("verify-full"),
            "{e}"
        );
        let e = TlsConfig::split_config("host=h sslcert=/c.pem").unwrap_err();
        assert!(e.is_config() && e.to_string().contains("sslkey"), "{e}");
    }

    #[test]
    fn the_string_wins_over_the_builder() {
        let (_, from_string) =
            TlsConfig::split_config("host=h sslmode=verify-ca sslrootcert=/a.pem").unwrap();
        let builder = TlsConfig {
            mode: Some(SslMode::Disable),
            root_cert: Some("/b.pem".into()),
            ..TlsConfig::default()
        };
        let merged = from_string.or(&builder);
        assert_eq!(merged.mode(), SslMode::VerifyCa);
        assert_eq!(merged.root_cert(), Some(Path::new("/a.pem")));
        let merged = TlsConfig::default().or(&builder);
        assert_eq!(merged.mode(), SslMode::Disable);
    }
}
