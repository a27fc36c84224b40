//! The PostgreSQL statement mode of the benches (`--statements`), shared by
//! `ycsb_load` (through [`super`]) and `insert_storm` (`#[path]`):
//!
//! * [`split`] takes batchpool's own connection-string parameter
//!   `statements=` out of a `--pg-url`, which plain tokio-postgres /
//!   deadpool-postgres (the peers) would refuse as unknown;
//! * [`effective`] reconciles `--statements` with that parameter;
//! * [`tls`] takes libpq's TLS parameters out of it and builds the rustls
//!   connector the peers use (batchpool's own, `TlsConfig`), so
//!   `--pg-url '...?sslmode=require'` runs every mode over TLS;
//! * [`behind_pooler`] is batchpool's own test for `auto`, so the peers
//!   send what batchpool's pool sends ([`peers_unnamed`]): unnamed
//!   statements (`execute_typed`, `query_typed`) behind a transaction-mode
//!   pooler such as PgBouncer, named cached ones on a direct connection.
#![allow(dead_code)] // each bench uses a different part

use batchpool::postgres::Statements;
use tokio_postgres::{Client, SimpleQueryMessage};

/// `--statements` on the command line: `auto`, `named` or `unnamed`.
pub fn parse(s: &str) -> Result<Statements, String> {
    s.parse::<Statements>().map_err(|e| e.to_string())
}

/// Removes `statements=...` from a connection string (batchpool's own
/// parser) and returns the rest, which tokio-postgres parses, with the mode
/// it named.
pub fn split(config: &str) -> Result<(String, Option<Statements>), String> {
    Statements::split_config(config).map_err(|e| e.to_string())
}

/// Takes `sslmode`, `sslrootcert`, `sslcert`, `sslkey` out of a connection
/// string: the rest (tokio-postgres parses it; `verify-*` became `require`),
/// the settings, and the rustls connector batchpool would use for them.
pub fn tls(
    config: &str,
) -> Result<
    (
        String,
        batchpool::postgres::TlsConfig,
        tokio_postgres_rustls::MakeRustlsConnect,
    ),
    String,
> {
    let (rest, tls) =
        batchpool::postgres::TlsConfig::split_config(config).map_err(|e| e.to_string())?;
    let connector = tls.rustls_connector().map_err(|e| e.to_string())?;
    Ok((rest, tls, connector))
}

/// The mode of a run: `--statements` if given, else the connection
/// string's `statements=`, else `auto`. Both given and different is an
/// error (batchpool would let the connection string win, silently).
pub fn effective(
    flag: Option<Statements>,
    in_url: Option<Statements>,
) -> Result<Statements, String> {
    match (flag, in_url) {
        (Some(f), Some(u)) if f != u => Err(format!(
            "--statements {f} contradicts statements={u} in --pg-url: give one"
        )),
        (f, u) => Ok(f.or(u).unwrap_or_default()),
    }
}

/// Whether the peers (plain tokio-postgres / deadpool-postgres) send
/// unnamed statements in `mode`: as batchpool decides (`auto`: unnamed
/// behind a pooler).
pub fn peers_unnamed(mode: Statements, pooler: bool) -> bool {
    match mode {
        Statements::Named => false,
        Statements::Unnamed => true,
        _ => pooler,
    }
}

/// What a run sends, for reports: `named`, `unnamed`, or `auto → …`, and
/// whether a pooler was detected.
pub fn describe(mode: Statements, pooler: bool) -> String {
    let sent = if peers_unnamed(mode, pooler) {
        "unnamed"
    } else {
        "named"
    };
    let path = if pooler {
        "pooler detected"
    } else {
        "direct connection"
    };
    if mode == Statements::Auto {
        format!("auto → {sent} ({path})")
    } else {
        format!("{sent} ({path})")
    }
}

/// batchpool's own `auto` test (`batchpool::postgres::behind_pooler`):
/// `client` reaches PostgreSQL through a pooler when the backend process
/// serving its session is not the one its cancel key names.
pub async fn behind_pooler(client: &Client) -> Result<bool, tokio_postgres::Error> {
    batchpool::postgres::behind_pooler(client).await
}

/// The first column of the first row of `sql`, as text (simple protocol:
/// no prepared statement, safe behind a transaction-mode pooler).
pub async fn simple_first(client: &Client, sql: &str) -> Result<String, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap_or_default())
}

/// Checks [`split`] and [`effective`] (the benches' no-argument self-check
/// mode runs this; `cargo test --benches`).
pub fn self_check() {
    let cases = [
        (
            "postgresql://u@h:6432/db?sslmode=disable&statements=unnamed&connect_timeout=3",
            "postgresql://u@h:6432/db?sslmode=disable&connect_timeout=3",
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
        (
            "application_name=statements host=h",
            "application_name=statements host=h",
            None,
        ),
    ];
    for (given, rest, mode) in cases {
        let got = split(given).unwrap_or_else(|e| panic!("split({given:?}): {e}"));
        assert_eq!(got, (rest.to_string(), mode), "split({given:?})");
        rest.parse::<tokio_postgres::Config>()
            .unwrap_or_else(|e| panic!("{rest:?} does not parse: {e}"));
    }
    assert!(split("host=h statements=sometimes").is_err());
    assert!(split("postgres://h/db?statements=").is_err());
    let (u, n) = (Some(Statements::Unnamed), Some(Statements::Named));
    assert_eq!(effective(None, None), Ok(Statements::Auto));
    assert_eq!(effective(u, None), Ok(Statements::Unnamed));
    assert_eq!(effective(None, n), Ok(Statements::Named));
    assert_eq!(effective(u, u), Ok(Statements::Unnamed));
    assert!(effective(u, n).is_err());
    assert!(peers_unnamed(Statements::Auto, true) && !peers_unnamed(Statements::Auto, false));
    assert_eq!(
        describe(Statements::Auto, true),
        "auto → unnamed (pooler detected)"
    );
}
