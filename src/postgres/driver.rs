//! The PostgreSQL [`Driver`]: statements that run on their own, and groups
//! pipelined in one round trip (see the module docs of
//! [`postgres`](super)).

use std::fmt;

use futures_util::TryStreamExt;
use tokio_postgres::Row;

use super::connect::{Connector, WithTls};
use super::encode::{PgArgs, PgRow, encode};
use super::errors::sent_error;
use super::manager::{Between, ClientWrapper, Manager, Prepared};
use super::pipeline::{Step, in_order};
use super::pooler::{self, FarEnd, Pooler};
use super::statements::{self, Statements};
use super::tls::{SslMode, TlsConfig};
use super::{Client, Postgres};
use crate::backend::{Driver, End, Group, GroupReplies, Ran, Stmt};
use crate::config::PoolSettings;
use crate::error::{Error, Kind};
use crate::pool::hooks::Hooks;

/// Runs one prepared statement with an encoded row on `conn`: every
/// returned row, or only the first and the count.
async fn run_statement(
    conn: &ClientWrapper,
    sql: &str,
    prepared: &Prepared,
    row: &PgRow,
    all_rows: bool,
) -> Result<Ran<Row>, Error> {
    if conn.is_closed() {
        return Err(Error::closed_before_send());
    }
    let stream = match prepared {
        Prepared::Named(stmt) if stmt.columns().is_empty() => {
            let affected = conn
                .execute_raw(stmt, row.raw())
                .await
                .map_err(|e| conn.sent_error(e))?;
            return Ok(Ran {
                affected,
                last_insert_id: None,
                rows: Vec::new(),
            });
        }
        Prepared::Named(stmt) => conn.query_raw(stmt, row.raw()).await,
        Prepared::Unnamed(described) => {
            conn.ensure_types(described).await?;
            let typed = row.raw().zip(described.params.iter().cloned());
            conn.query_typed_raw(sql, typed).await
        }
    };
    let stream = stream.map_err(|e| conn.sent_error(e))?;
    futures_util::pin_mut!(stream);
    let mut rows = Vec::new();
    let mut count = 0u64;
    while let Some(r) = stream.try_next().await.map_err(|e| conn.sent_error(e))? {
        count += 1;
        if all_rows || rows.is_empty() {
            rows.push(r);
        }
    }
    Ok(Ran {
        affected: stream.rows_affected().unwrap_or(count),
        last_insert_id: None,
        rows,
    })
}

/// A group through pgpool-II ([`ClientWrapper::in_turn`]): `BEGIN`, the
/// statements up to the first that fails, then `COMMIT`, or `ROLLBACK`
/// after a failure, each answered before the next goes out.
async fn run_group_in_turn(
    client: &ClientWrapper,
    group: Group<'_, Postgres>,
) -> GroupReplies<Row> {
    let mut replies = GroupReplies {
        begin: None,
        statements: Vec::with_capacity(group.statements.len()),
        end: None,
    };
    if group.begin {
        let begin = client.batch_execute("BEGIN").await.map_err(sent_error);
        let failed = begin.is_err();
        replies.begin = Some(begin);
        if failed {
            return replies;
        }
    }
    let mut failed = None;
    for stmt in group.statements {
        let reply =
            run_statement(client, stmt.sql, stmt.prepared, &stmt.bound, stmt.all_rows).await;
        if let Err(e) = &reply {
            if e.as_db_error().is_some_and(|db| client.stale(db)) {
                client.forget(stmt.sql);
            }
            failed = Some(e.clone());
        }
        replies.statements.push(reply);
        if failed.is_some() {
            break;
        }
    }
    if !group.commit {
        return replies;
    }
    let end = match failed {
        // The session is gone, and the transaction with it.
        Some(e) if !e.is_db() || client.is_closed() => return replies,
        Some(_) => End::Rollback,
        None => End::Commit,
    };
    let reply = client.batch_execute(end.sql()).await.map_err(sent_error);
    let over = ended(&reply);
    if over {
        client.resync().await;
    }
    replies.end = Some((reply, over));
    replies
}

/// `BEGIN` / `COMMIT` / `ROLLBACK` as a pipeline step.
fn control<'a>(conn: &'a ClientWrapper, sql: &'static str) -> Step<'a, Result<Ran<Row>, Error>> {
    Box::pin(async move {
        conn.batch_execute(sql).await.map_err(sent_error)?;
        Ok(Ran {
            affected: 0,
            last_insert_id: None,
            rows: Vec::new(),
        })
    })
}

/// Whether a transaction is over after `COMMIT` / `ROLLBACK` answered
/// `reply`: a server error ends the transaction block too.
fn ended(reply: &Result<(), Error>) -> bool {
    reply.as_ref().err().is_none_or(Error::is_db)
}

impl Driver for Postgres {
    type Manager = Manager;
    type Config = PgConfig;
    type Options = PgOptions;
    type QueryRow = Row;
    type Args<'a> = PgArgs<'a>;
    type Prepared = Prepared;
    type Bound = PgRow;

    const NAME: &'static str = "PostgreSQL";
    const LABEL: &'static str = "postgres";
    const SERVER_ABORTS_FAILED_TRANSACTION: bool = true;
    const RESUMES_AFTER_CUT: bool = true;

    fn parse_config(config: &str) -> Result<PgConfig, Error> {
        let (config, statements) = statements::split(config)?;
        let (config, pooler) = pooler::split(&config)?;
        let (config, tls) = TlsConfig::split_config(&config)?;
        let pg = config
            .parse()
            .map_err(|e| Error::with_source(Kind::Config, "invalid connection string", e))?;
        Ok(PgConfig {
            pg,
            statements,
            pooler,
            tls,
        })
    }

    fn set_password(mut config: PgConfig, password: &str) -> PgConfig {
        config.pg.password(password);
        config
    }

    fn add_on_connect(options: &mut PgOptions, sql: String) {
        let sql: std::sync::Arc<str> = sql.into();
        options.hooks.add_post_create(move |client| {
            let sql = std::sync::Arc::clone(&sql);
            Box::pin(async move {
                client.batch_execute(&sql).await?;
                Ok(())
            })
        });
    }

    #[cfg(feature = "serde")]
    fn apply_config(
        mut b: super::PoolBuilder,
        config: &crate::PoolConfig,
    ) -> Result<super::PoolBuilder, Error> {
        if config.bulk_threshold.is_some() || config.coalesce_upserts.is_some() {
            return Err(Error::new(
                Kind::Config,
                "bulk_threshold and coalesce_upserts are MySQL settings",
            ));
        }
        if let Some(min_rows) = config.copy_threshold {
            b = b.copy_threshold(min_rows);
        }
        if let Some(mode) = &config.statements {
            b = b.statements(mode.parse()?);
        }
        if let Some(pooler) = &config.pooler {
            b = b.pooler(pooler.parse()?);
        }
        if let Some(mode) = &config.ssl_mode {
            b = b.ssl_mode(mode.parse()?);
        }
        if let Some(path) = &config.ssl_root_cert {
            b = b.ssl_root_cert(path.clone());
        }
        Ok(b)
    }

    fn fmt_config(config: &PgConfig, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // tokio-postgres prints the password as `_`.
        fmt::Debug::fmt(&config.pg, f)?;
        if let Some(mode) = config.statements {
            write!(f, " statements={mode}")?;
        }
        if let Some(pooler) = config.pooler {
            write!(f, " pooler={pooler}")?;
        }
        if let Some(mode) = config.tls.mode {
            write!(f, " sslmode={mode}")?;
        }
        Ok(())
    }

    fn open(
        config: PgConfig,
        settings: &PoolSettings,
        options: PgOptions,
    ) -> Result<Postgres, Error> {
        // The connection string's choice wins over the builder's.
        let mode = config.statements.or(options.statements).unwrap_or_default();
        let given = config.pooler.or(options.pooler).unwrap_or_default();
        let copy_threshold = options
            .copy_threshold
            .unwrap_or(Some(super::copy::DEFAULT_THRESHOLD))
            .map(|min| min.max(2));
        let far = std::sync::Arc::new(FarEnd::new(given));
        let (pg, connector) = with_tls(config.pg, config.tls, &options)?;
        let manager = Manager::new(
            with_tcp_settings(pg, settings),
            connector,
            settings.statement_cache,
            settings.statement_timeout,
            Between {
                mode,
                far: std::sync::Arc::clone(&far),
            },
            options.hooks,
            settings.lifecycle(),
        );
        Ok(Postgres {
            catalog_warned: std::sync::atomic::AtomicBool::new(false),
            families: super::family::Families::default(),
            pool: settings.build_pool(manager)?,
            copy_threshold,
            far,
        })
    }

    fn encode_row(
        &self,
        shape: &super::batch::PgShape,
        args: PgArgs<'_>,
    ) -> Result<(PgRow, usize), Error> {
        let mut row = encode(shape.types(), args)?;
        if let super::batch::PgShape::Keyed(k) = shape {
            row.set_member(k.member());
        }
        let bytes = row.bytes();
        Ok((row, bytes))
    }

    fn has_params(args: &PgArgs<'_>) -> bool {
        args.len() > 0
    }

    async fn prepare<'a>(
        conn: &'a mut Client,
        texts: &'a [(&'a str, bool)],
        in_transaction: bool,
    ) -> Vec<Result<Prepared, Error>> {
        let sql: Vec<&str> = texts.iter().map(|(sql, _)| *sql).collect();
        conn.note_texts(&sql);
        conn.prepare_for(&sql, in_transaction).await
    }

    fn bind(prepared: &Prepared, args: PgArgs<'_>) -> Result<PgRow, Error> {
        encode(prepared.params(), args)
    }

    async fn run<'a>(conn: &'a mut Client, stmt: Stmt<'a, Postgres>) -> Result<Ran<Row>, Error> {
        let client: &ClientWrapper = conn;
        match run_statement(client, stmt.sql, stmt.prepared, &stmt.bound, stmt.all_rows).await {
            // The table changed under the cached statement (or the learned
            // types) and nothing ran: prepare it afresh and run it once
            // more, if its parameters still have the types the row was
            // encoded for.
            Err(e) if e.as_db_error().is_some_and(|db| client.stale(db)) => {
                client.forget(stmt.sql);
                let fresh = client
                    .prepare_for(&[stmt.sql], false)
                    .await
                    .pop()
                    .unwrap_or_else(|| Err(Error::internal("a text was not prepared")))?;
                if fresh.params() != stmt.prepared.params() {
                    return Err(e);
                }
                run_statement(client, stmt.sql, &fresh, &stmt.bound, stmt.all_rows).await
            }
            other => other,
        }
    }

    async fn run_many<'a>(
        conn: &'a mut Client,
        sql: &'a str,
        prepared: &'a Prepared,
        rows: Vec<Result<PgRow, Error>>,
    ) -> Vec<Result<Ran<Row>, Error>> {
        let client: &ClientWrapper = conn;
        // Pipelined: each is its own autocommit statement, sent without
        // waiting for the previous reply.
        let runs = rows
            .into_iter()
            .map(|row| async move { run_statement(client, sql, prepared, &row?, false).await });
        futures_util::future::join_all(runs).await
    }

    async fn run_group<'a>(conn: &'a mut Client, group: Group<'a, Postgres>) -> GroupReplies<Row> {
        let client: &ClientWrapper = conn;
        if client.in_turn() {
            return run_group_in_turn(client, group).await;
        }
        let n = group.statements.len();
        let texts: Vec<&str> = group.statements.iter().map(|s| s.sql).collect();
        let mut steps = Vec::with_capacity(n + 2);
        if group.begin {
            steps.push(control(client, "BEGIN"));
        }
        for stmt in group.statements {
            steps.push(Box::pin(async move {
                run_statement(client, stmt.sql, stmt.prepared, &stmt.bound, stmt.all_rows).await
            }));
        }
        if group.commit {
            steps.push(control(client, "COMMIT"));
        }
        let mut replies = in_order(steps).await.into_iter();
        let begin = group.begin.then(|| {
            replies
                .next()
                .map_or_else(|| Err(missing()), |r| r.map(drop))
        });
        let statements: Vec<Result<Ran<Row>, Error>> = replies.by_ref().take(n).collect();
        // A statement the table changed under failed the group (its
        // transaction is aborted): the next use of its text prepares afresh.
        for (sql, reply) in texts.iter().zip(&statements) {
            if reply
                .as_ref()
                .err()
                .and_then(Error::as_db_error)
                .is_some_and(|db| client.stale(db))
            {
                client.forget(sql);
            }
        }
        let end = group.commit.then(|| {
            let reply = replies
                .next()
                .map_or_else(|| Err(missing()), |r| r.map(drop));
            let over = ended(&reply);
            (reply, over)
        });
        if end.as_ref().is_some_and(|(_, over)| *over) {
            client.resync().await;
        }
        GroupReplies {
            begin,
            statements,
            end,
        }
    }

    async fn end(conn: &mut Client, end: End) -> (Result<(), Error>, bool) {
        let reply = conn.batch_execute(end.sql()).await.map_err(sent_error);
        let over = ended(&reply);
        if over {
            conn.resync().await;
        }
        (reply, over)
    }

    fn is_broken(conn: &Client) -> bool {
        conn.is_broken()
    }

    fn transaction_refusal(&self, what: &str) -> Option<Error> {
        self.far.refusal(what)
    }

    async fn refresh_limit(conn: &mut Client) -> Result<(), Error> {
        conn.refresh_limit(None).await.map_err(sent_error)
    }

    async fn lend(conn: &mut Client) -> Result<(), Error> {
        conn.lend().await
    }
}

/// A parsed connection string: tokio-postgres's settings, the statement
/// mode, what is between the pool and the server, and the TLS settings it
/// named.
pub(crate) struct PgConfig {
    pub(crate) pg: tokio_postgres::Config,
    pub(crate) statements: Option<Statements>,
    pub(crate) pooler: Option<Pooler>,
    pub(crate) tls: TlsConfig,
}

/// PostgreSQL-only builder options.
#[derive(Debug, Default)]
pub(crate) struct PgOptions {
    pub(crate) statements: Option<Statements>,
    /// [`PoolBuilder::pooler`](super::PoolBuilder::pooler).
    pub(crate) pooler: Option<Pooler>,
    /// [`PoolBuilder::copy_threshold`](super::PoolBuilder::copy_threshold);
    /// `None`: the default.
    pub(crate) copy_threshold: Option<Option<usize>>,
    /// [`PoolBuilder::post_create`](super::PoolBuilder::post_create) and
    /// [`pre_recycle`](super::PoolBuilder::pre_recycle).
    pub(crate) hooks: Hooks<tokio_postgres::Client>,
    /// [`PoolBuilder::ssl_mode`](super::PoolBuilder::ssl_mode) and
    /// [`ssl_root_cert`](super::PoolBuilder::ssl_root_cert).
    pub(crate) tls: TlsConfig,
    /// [`PoolBuilder::tls_connector`](super::PoolBuilder::tls_connector).
    pub(crate) connector: Option<Connector>,
}

fn missing() -> Error {
    Error::new(Kind::OutcomeUnknown, "a pipelined statement gave no reply")
}

/// The TLS mode tokio-postgres negotiates and the connector it gets: the
/// connection string's TLS settings, else the builder's, else the
/// tokio-postgres config's own mode.
fn with_tls(
    mut pg: tokio_postgres::Config,
    from_string: TlsConfig,
    options: &PgOptions,
) -> Result<(tokio_postgres::Config, Connector), Error> {
    let mut tls = from_string.or(&options.tls);
    let mode = *tls
        .mode
        .get_or_insert_with(|| SslMode::from_driver(pg.get_ssl_mode()));
    pg.ssl_mode(mode.driver_mode());
    // As libpq: TLS is not used over Unix-domain sockets (the server
    // refuses it there), whatever the mode.
    let unix_only = pg.get_hostaddrs().is_empty()
        && !pg.get_hosts().is_empty()
        && pg
            .get_hosts()
            .iter()
            .all(|h| !matches!(h, tokio_postgres::config::Host::Tcp(_)));
    if unix_only {
        pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
    if let Some(custom) = &options.connector {
        if tls.has_files() {
            return Err(Error::new(
                Kind::Config,
                "sslrootcert / sslcert / sslkey cannot be given to a custom TLS connector: \
                 load them into the connector",
            ));
        }
        return Ok((pg, custom.clone()));
    }
    if unix_only || mode == SslMode::Disable {
        return Ok((pg, Connector::new(WithTls(tokio_postgres::NoTls), false)));
    }
    built_in(pg, &tls, mode)
}

/// batchpool's own connector (feature `rustls`).
#[cfg(feature = "rustls")]
fn built_in(
    pg: tokio_postgres::Config,
    tls: &TlsConfig,
    _mode: SslMode,
) -> Result<(tokio_postgres::Config, Connector), Error> {
    let connector = Connector::new(WithTls(tls.rustls_connector()?), false);
    Ok((pg, connector))
}

/// Without the `rustls` feature: `prefer` connects in the clear (as
/// tokio-postgres with `NoTls` does); a mode that needs TLS is an error.
#[cfg(not(feature = "rustls"))]
fn built_in(
    pg: tokio_postgres::Config,
    tls: &TlsConfig,
    mode: SslMode,
) -> Result<(tokio_postgres::Config, Connector), Error> {
    if mode == SslMode::Prefer && !tls.has_files() {
        return Ok((pg, Connector::new(WithTls(tokio_postgres::NoTls), false)));
    }
    Err(Error::new(
        Kind::Config,
        format!(
            "sslmode={mode} needs TLS support: enable batchpool's `rustls` feature or pass a \
             connector to PoolBuilder::tls_connector"
        ),
    ))
}

/// Applies the builder's TCP keepalive and `TCP_USER_TIMEOUT` where the
/// connection string left tokio-postgres's defaults (keepalive on after 2
/// hours idle, no user timeout).
fn with_tcp_settings(
    mut config: tokio_postgres::Config,
    settings: &PoolSettings,
) -> tokio_postgres::Config {
    const DRIVER_KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(2 * 60 * 60);
    if config.get_keepalives() && config.get_keepalives_idle() == DRIVER_KEEPALIVE_IDLE {
        match settings.tcp_keepalive {
            Some(idle) => {
                config.keepalives_idle(idle);
                // Probes every idle/3, so a dead peer is noticed within
                // about twice the idle time.
                config.keepalives_interval((idle / 3).max(std::time::Duration::from_secs(1)));
                config.keepalives_retries(3);
            }
            None => {
                config.keepalives(false);
            }
        }
    }
    if config.get_tcp_user_timeout().is_none() {
        if let Some(t) = settings.tcp_user_timeout {
            config.tcp_user_timeout(t);
        }
    }
    config
}
