//! TLS settings of MySQL / MariaDB connections: MySQL's `ssl-mode`,
//! `ssl-ca`, `ssl-cert` and `ssl-key` URL parameters (mysql_async's URL
//! parser knows only its own `require_ssl`, `verify_ca`, `verify_identity`
//! and `built_in_roots`, which keep working), turned into mysql_async's
//! [`SslOpts`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use mysql_async::{Opts, OptsBuilder, SslOpts};

use crate::error::{Error, Kind};

/// Whether and how a connection uses TLS: MySQL's `ssl-mode`.
///
/// Set with the URL (`?ssl-mode=VERIFY_IDENTITY`, any case) or
/// [`PoolBuilder::ssl_mode`](crate::PoolBuilder::ssl_mode). See
/// [TLS](super#tls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SslMode {
    /// No TLS (mysql_async's default, when the URL asks for none).
    Disabled,
    /// TLS if the server offers it, else plain; the certificate is not
    /// checked.
    Preferred,
    /// TLS or no connection; the certificate is not checked.
    Required,
    /// TLS with a certificate chain that ends at a trusted root (`ssl-ca`,
    /// else Mozilla's root set). The host name is not meant to be checked,
    /// but mysql_async 0.37.1 checks it anyway (its rustls verifier misses
    /// the name error of current rustls versions): until that is fixed this
    /// acts as [`VerifyIdentity`](SslMode::VerifyIdentity).
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host connected to.
    VerifyIdentity,
}

impl SslMode {
    /// Every mode, weakest first.
    const ALL: [SslMode; 5] = [
        SslMode::Disabled,
        SslMode::Preferred,
        SslMode::Required,
        SslMode::VerifyCa,
        SslMode::VerifyIdentity,
    ];

    /// The name used in URLs (`VERIFY_IDENTITY`).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disabled => "DISABLED",
            SslMode::Preferred => "PREFERRED",
            SslMode::Required => "REQUIRED",
            SslMode::VerifyCa => "VERIFY_CA",
            SslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }
}

crate::params::display_as_str!(SslMode);

impl FromStr for SslMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<SslMode, Error> {
        crate::params::parse_name("ssl-mode", s, &SslMode::ALL, SslMode::as_str, true)
    }
}

/// TLS settings from the URL or the builder.
#[derive(Clone, Default)]
pub(crate) struct TlsConfig {
    pub(crate) mode: Option<SslMode>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    #[cfg_attr(
        not(feature = "rustls"),
        allow(dead_code, reason = "the client key is used with the rustls feature")
    )]
    key: Option<PathBuf>,
    /// The URL named `prefer_socket` (mysql_async's switch to the server's
    /// Unix socket after a TCP connection to it): left as it says.
    prefer_socket_named: bool,
    /// [`PoolBuilder::ssl_opts`](crate::PoolBuilder::ssl_opts).
    pub(crate) custom: Option<SslOpts>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not `SslOpts`'s own Debug: it prints a client key held in memory.
        f.debug_struct("TlsConfig")
            .field("mode", &self.mode)
            .field("ca", &self.ca)
            .field("custom", &self.custom.is_some())
            .finish_non_exhaustive()
    }
}

/// The URL parameters [`split`] takes out.
const KEYS: [&str; 4] = ["ssl-mode", "ssl-ca", "ssl-cert", "ssl-key"];

/// Takes batchpool's TLS parameters out of a MySQL URL and returns the rest
/// (for mysql_async) with the settings.
pub(crate) fn split(url: &str) -> Result<(String, TlsConfig), Error> {
    let (rest, taken) = crate::params::take_tls(url, &KEYS)?;
    let (_, named) = crate::params::take(&rest, &["prefer_socket"]);
    let tls = TlsConfig {
        mode: taken.mode,
        ca: taken.root_cert,
        cert: taken.cert,
        key: taken.key,
        prefer_socket_named: !named.is_empty(),
        custom: None,
    };
    Ok((rest, tls))
}

/// What the manager connects with: the options, and for `PREFERRED` the
/// same without TLS, for a server that offers none.
#[derive(Clone)]
pub(crate) struct Connect {
    pub(crate) opts: Opts,
    pub(crate) plain: Option<Opts>,
}

impl TlsConfig {
    fn has_files(&self) -> bool {
        self.ca.is_some() || self.cert.is_some()
    }

    /// `self`'s files applied to `ssl`: the CA replaces the built-in roots.
    fn with_files(&self, mut ssl: SslOpts) -> SslOpts {
        if let Some(ca) = &self.ca {
            ssl = ssl
                .with_root_certs(vec![ca.clone().into()])
                .with_disable_built_in_roots(true);
        }
        #[cfg(feature = "rustls")]
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            ssl = ssl.with_client_identity(Some(mysql_async::ClientIdentity::new(
                cert.clone().into(),
                key.clone().into(),
            )));
        }
        ssl
    }
}

/// The TLS options a mode sets (certificates are the files' or the
/// built-in roots).
fn for_mode(mode: SslMode) -> Option<SslOpts> {
    let ssl = SslOpts::default();
    match mode {
        SslMode::Disabled => None,
        SslMode::Preferred | SslMode::Required => Some(
            ssl.with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
        ),
        SslMode::VerifyCa => Some(ssl.with_danger_skip_domain_validation(true)),
        SslMode::VerifyIdentity => Some(ssl),
    }
}

/// The options to connect with: the URL's TLS settings, else the
/// builder's, else what mysql_async's own parameters (`require_ssl`) or
/// options set. A custom [`SslOpts`] (builder) is used whenever TLS is on.
pub(crate) fn connect_opts(
    opts: Opts,
    from_url: TlsConfig,
    builder: &TlsConfig,
) -> Result<Connect, Error> {
    let mode = from_url.mode.or(builder.mode);
    let files = if from_url.has_files() {
        &from_url
    } else {
        builder
    };
    let ssl = if let Some(custom) = &builder.custom {
        if files.has_files() {
            return Err(Error::new(
                Kind::Config,
                "ssl-ca / ssl-cert / ssl-key cannot be combined with custom SslOpts: put them \
                 in the SslOpts",
            ));
        }
        Some(custom.clone())
    } else if let Some(mode) = mode {
        for_mode(mode).map(|ssl| files.with_files(ssl))
    } else if let Some(own) = opts.ssl_opts() {
        Some(files.with_files(own.clone()))
    } else if files.has_files() {
        return Err(Error::new(
            Kind::Config,
            "ssl-ca / ssl-cert / ssl-key need TLS: add ssl-mode=VERIFY_IDENTITY (or another \
             mode)",
        ));
    } else {
        None
    };
    let ssl = ssl.filter(|_| mode != Some(SslMode::Disabled));
    #[cfg(not(feature = "rustls"))]
    if ssl.is_some() {
        return Err(Error::new(
            Kind::Config,
            "TLS needs batchpool's `rustls` feature (mysql_async's rustls support)",
        ));
    }
    // As the MySQL client: a Unix socket is not encrypted (it is a secure
    // transport of its own).
    let ssl = ssl.filter(|_| opts.socket().is_none());
    let tls_on = ssl.is_some();
    let plain = (tls_on && mode == Some(SslMode::Preferred))
        .then(|| Opts::from(OptsBuilder::from_opts(opts.clone()).ssl_opts(None::<SslOpts>)));
    let mut builder = OptsBuilder::from_opts(opts).ssl_opts(ssl);
    if tls_on && !from_url.prefer_socket_named {
        // After each TCP connection mysql_async reads `@@socket` and tries a
        // second connection over that Unix socket, to use instead: wasted
        // under TLS (the socket is not encrypted), and TLS was asked for.
        builder = builder.prefer_socket(false);
    }
    Ok(Connect {
        opts: builder.into(),
        plain,
    })
}

/// mysql_async builds its rustls configuration with the process's default
/// crypto provider: when none is installed and more than one is compiled
/// in (an application with aws-lc-rs besides batchpool's ring), rustls
/// cannot choose and panics. Installs ring then, once.
#[cfg(feature = "rustls")]
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(all(test, feature = "rustls"))]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_taken_out_and_modes_parsed() {
        let (rest, tls) = split(
            "mysql://u@h:3306/db?ssl-mode=verify_identity&stmt_cache_size=9&ssl-ca=%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "mysql://u@h:3306/db?stmt_cache_size=9");
        assert_eq!(tls.mode, Some(SslMode::VerifyIdentity));
        assert_eq!(tls.ca, Some(PathBuf::from("/ca.pem")));
        Opts::from_url(&rest).unwrap();
        let e = split("mysql://h/db?ssl-mode=sometimes").unwrap_err();
        assert!(
            e.is_config() && e.to_string().contains("VERIFY_IDENTITY"),
            "{e}"
        );
    }

    fn connect(url: &str) -> Result<Connect, Error> {
        let (rest, tls) = split(url)?;
        connect_opts(Opts::from_url(&rest).unwrap(), tls, &TlsConfig::default())
    }

    #[test]
    fn what_each_mode_asks_of_mysql_async() {
        let c = connect("mysql://h/db").unwrap();
        assert!(c.opts.ssl_opts().is_none() && c.plain.is_none());
        let c = connect("mysql://h/db?ssl-mode=PREFERRED").unwrap();
        let ssl = c.opts.ssl_opts().unwrap();
        assert!(ssl.accept_invalid_certs() && ssl.skip_domain_validation());
        assert!(c.plain.unwrap().ssl_opts().is_none());
        assert!(!c.opts.prefer_socket());
        let c = connect("mysql://h/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem").unwrap();
        let ssl = c.opts.ssl_opts().unwrap();
        assert!(!ssl.accept_invalid_certs() && !ssl.skip_domain_validation());
        assert!(ssl.disable_built_in_roots() && ssl.root_certs().len() == 1);
        assert!(c.plain.is_none());
        // mysql_async's own parameter, with batchpool's CA file.
        let c = connect("mysql://h/db?require_ssl=true&ssl-ca=/ca.pem").unwrap();
        assert!(c.opts.ssl_opts().unwrap().disable_built_in_roots());
        let c = connect("mysql://h/db?require_ssl=true&ssl-mode=DISABLED").unwrap();
        assert!(c.opts.ssl_opts().is_none());
        // A socket is not encrypted.
        let c = connect("mysql://h/db?ssl-mode=REQUIRED&socket=%2Ftmp%2Fs.sock").unwrap();
        assert!(c.opts.ssl_opts().is_none());
        let e = connect("mysql://h/db?ssl-ca=/ca.pem").err().unwrap();
        assert!(e.is_config(), "{e}");
    }
}
