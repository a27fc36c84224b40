//! The MySQL / MariaDB [`Driver`]: statements that run on their own, one
//! command at a time (mysql_async does not pipeline; see the round-trip
//! table in the [module docs](super)).

use std::fmt;

use mysql_async::consts::StatusFlags;
use mysql_async::prelude::{Protocol, Queryable};
use mysql_async::{Opts, OptsBuilder, Params, QueryResult, Row, Statement};

use super::errors::{sent_error, unsent_error};
use super::manager::{Manager, Redacted};
use super::tls::{self, TlsConfig};
use super::{Client, MyOptions, MySql};
use crate::backend::{Driver, End, Group, GroupReplies, Ran, Stmt};
use crate::config::PoolSettings;
use crate::error::{Error, Kind};

/// A statement ready to run: parameterless ones go over the text protocol
/// (so any statement works, prepared or not).
#[derive(Debug)]
pub(crate) enum Prepared {
    /// Sent as text.
    Text,
    /// A prepared statement (cached per connection by mysql_async).
    Stmt(Statement),
}

/// Whether the server's last reply on `conn` says a transaction is open.
fn in_transaction(conn: &Client) -> bool {
    conn.last_ok_packet().is_none_or(|ok| {
        ok.status_flags()
            .contains(StatusFlags::SERVER_STATUS_IN_TRANS)
    })
}

/// Runs one statement on `conn` and reads its first result set.
async fn run(
    conn: &mut Client,
    sql: &str,
    prepared: &Prepared,
    params: Params,
    all_rows: bool,
) -> Result<Ran<Row>, Error> {
    if conn.is_disconnected() {
        return Err(Error::closed_before_send());
    }
    let result = match prepared {
        Prepared::Text => match conn.query_iter(sql).await {
            Ok(result) => read(result, all_rows).await,
            Err(e) => Err(e),
        },
        Prepared::Stmt(stmt) => match conn.exec_iter(stmt, params).await {
            Ok(result) => read(result, all_rows).await,
            Err(e) => Err(e),
        },
    };
    result.map_err(|e| {
        conn.note_error(&e);
        sent_error(e)
    })
}

/// Reads the first result set of a statement (every row, or only the first)
/// and its OK packet.
async fn read<P: Protocol>(
    mut result: QueryResult<'_, 'static, P>,
    all_rows: bool,
) -> Result<Ran<Row>, mysql_async::Error> {
    let mut rows: Vec<Row> = result.collect().await?;
    let affected = match result.affected_rows() {
        // A query through `execute` counts the rows it returned.
        0 if !rows.is_empty() => rows.len() as u64,
        n => n,
    };
    if !all_rows {
        rows.truncate(1);
    }
    let last_insert_id = result.last_insert_id();
    result.drop_result().await?;
    Ok(Ran {
        affected,
        last_insert_id,
        rows,
    })
}

/// Sends a parameterless command (`START TRANSACTION`, `COMMIT`...).
async fn command(conn: &mut Client, sql: &str) -> Result<(), Error> {
    conn.query_drop(sql).await.map_err(|e| {
        conn.note_error(&e);
        sent_error(e)
    })
}

impl Driver for MySql {
    type Manager = Manager;
    type Config = MyConfig;
    type Options = MyOptions;
    type QueryRow = Row;
    type Args<'a> = Params;
    type Prepared = Prepared;
    type Bound = Params;

    const NAME: &'static str = "MySQL";
    const LABEL: &'static str = "mysql";
    const SERVER_ABORTS_FAILED_TRANSACTION: bool = false;
    const RESUMES_AFTER_CUT: bool = false;

    fn parse_config(config: &str) -> Result<MyConfig, Error> {
        let (rest, tls) = tls::split(config)?;
        let (rest, hosts) = super::hosts::split_hosts(&rest)?;
        let opts = Opts::from_url(&rest)
            .map_err(|e| Error::with_source(Kind::Config, "invalid MySQL URL", e))?;
        Ok(MyConfig { opts, tls, hosts })
    }

    fn set_password(config: MyConfig, password: &str) -> MyConfig {
        MyConfig {
            opts: OptsBuilder::from_opts(config.opts)
                .pass(Some(password))
                .into(),
            tls: config.tls,
            hosts: config.hosts,
        }
    }

    fn add_on_connect(options: &mut MyOptions, sql: String) {
        options.add_on_connect(sql);
    }

    #[cfg(feature = "serde")]
    fn apply_config(
        mut b: super::PoolBuilder,
        config: &crate::PoolConfig,
    ) -> Result<super::PoolBuilder, Error> {
        if config.copy_threshold.is_some() || config.statements.is_some() || config.pooler.is_some()
        {
            return Err(Error::new(
                Kind::Config,
                "copy_threshold, statements and pooler are PostgreSQL settings",
            ));
        }
        if config.ssl_root_cert.is_some() {
            return Err(Error::new(
                Kind::Config,
                "ssl_root_cert is a PostgreSQL setting: give MySQL's in the URL (ssl-ca=...)",
            ));
        }
        if let Some(min_rows) = config.bulk_threshold {
            b = b.bulk_threshold(min_rows);
        }
        if let Some(on) = config.coalesce_upserts {
            b = b.coalesce_upserts(on);
        }
        if let Some(mode) = &config.ssl_mode {
            b = b.ssl_mode(mode.parse()?);
        }
        Ok(b)
    }

    fn fmt_config(config: &MyConfig, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // mysql_async's own `Debug` prints the password.
        fmt::Debug::fmt(&Redacted(&config.opts), f)?;
        if config.hosts.len() > 1 {
            write!(f, " hosts={:?}", config.hosts)?;
        }
        if let Some(mode) = config.tls.mode {
            write!(f, " ssl-mode={mode}")?;
        }
        Ok(())
    }

    fn open(
        config: MyConfig,
        settings: &PoolSettings,
        mut options: MyOptions,
    ) -> Result<MySql, Error> {
        let opts = config.opts;
        // The builder's list replaces the URL's.
        let hosts = match options.hosts.take() {
            Some(hosts) => hosts?,
            None => config.hosts,
        };
        if !hosts.is_empty() && opts.socket().is_some() {
            return Err(Error::new(
                Kind::Config,
                "a host list cannot be combined with socket= (a Unix socket is one server)",
            ));
        }
        if settings.statement_cache == 0 {
            // mysql_async never closes statements it does not cache.
            return Err(Error::new(
                Kind::Config,
                "statement_cache must be at least 1 (batchpool prepares every statement)",
            ));
        }
        let found_rows = opts.client_found_rows();
        let driver_packet = opts.max_allowed_packet();
        // The URL's `tcp_keepalive` wins over the builder's.
        let keepalive = opts.tcp_keepalive().or(settings.tcp_keepalive);
        let opts: Opts = OptsBuilder::from_opts(opts)
            .stmt_cache_size(settings.statement_cache)
            .tcp_keepalive(keepalive)
            .into();
        let targets = if hosts.is_empty() {
            vec![tls::connect_opts(opts, config.tls, &options.tls)?]
        } else {
            hosts
                .iter()
                .map(|(host, port)| {
                    let opts = OptsBuilder::from_opts(opts.clone())
                        .ip_or_hostname(host.clone())
                        .tcp_port(*port);
                    tls::connect_opts(opts.into(), config.tls.clone(), &options.tls)
                })
                .collect::<Result<Vec<_>, Error>>()?
        };
        // Each host gets `create_timeout`; deadpool's bound on opening one
        // connection covers them all.
        let mut pool_settings = settings.clone();
        if let Some(each) = settings.create_timeout {
            pool_settings.create_timeout =
                Some(each.saturating_mul(u32::try_from(targets.len()).unwrap_or(u32::MAX)));
        }
        let manager = Manager::new(
            targets,
            settings.create_timeout,
            settings.statement_timeout,
            options.hooks,
            settings.lifecycle(),
        );
        let server = manager.server.clone();
        Ok(MySql {
            pool: pool_settings.build_pool(manager)?,
            server,
            coalesce_upserts: options.coalesce_upserts,
            found_rows,
            bulk_threshold: options
                .bulk_threshold
                .unwrap_or(Some(super::batch::DEFAULT_BULK_THRESHOLD))
                .map(|min| min.max(2)),
            bulk_server: tokio::sync::OnceCell::new(),
            driver_packet,
            families: super::family::MyFamilies::default(),
        })
    }

    fn encode_row(
        &self,
        shape: &super::batch::MyShape,
        args: Params,
    ) -> Result<(super::MyRow, usize), Error> {
        let row = super::batch::encode(shape, args)?;
        self.check_packet(row.bytes)?;
        let bytes = row.bytes;
        Ok((row, bytes))
    }

    fn has_params(args: &Params) -> bool {
        !matches!(args, Params::Empty)
    }

    async fn prepare<'a>(
        conn: &'a mut Client,
        texts: &'a [(&'a str, bool)],
        _in_transaction: bool,
    ) -> Vec<Result<Prepared, Error>> {
        conn.note_texts(texts.iter().map(|(sql, _)| *sql));
        let mut out = Vec::with_capacity(texts.len());
        for (sql, has_params) in texts {
            if !has_params {
                out.push(Ok(Prepared::Text));
                continue;
            }
            out.push(match conn.prep(*sql).await {
                Ok(stmt) => Ok(Prepared::Stmt(stmt)),
                Err(e) => {
                    conn.note_error(&e);
                    Err(unsent_error(e))
                }
            });
        }
        out
    }

    fn bind(prepared: &Prepared, args: Params) -> Result<Params, Error> {
        let takes = match prepared {
            Prepared::Text => 0,
            Prepared::Stmt(stmt) => usize::from(stmt.num_params()),
        };
        let given = match &args {
            Params::Empty => 0,
            Params::Positional(values) => values.len(),
            // mysql_async maps names to the statement's own.
            Params::Named(_) => return Ok(args),
        };
        if given != takes {
            // mysql_async would close the connection over this.
            return Err(Error::params(format!(
                "statement takes {takes} parameter{}, {given} given",
                if takes == 1 { "" } else { "s" },
            )));
        }
        Ok(args)
    }

    async fn run<'a>(conn: &'a mut Client, stmt: Stmt<'a, MySql>) -> Result<Ran<Row>, Error> {
        run(conn, stmt.sql, stmt.prepared, stmt.bound, stmt.all_rows).await
    }

    async fn run_group<'a>(conn: &'a mut Client, group: Group<'a, MySql>) -> GroupReplies<Row> {
        let mut replies = GroupReplies {
            begin: None,
            statements: Vec::with_capacity(group.statements.len()),
            end: None,
        };
        if group.begin {
            let begin = command(conn, "START TRANSACTION").await;
            let failed = begin.is_err();
            replies.begin = Some(begin);
            if failed {
                return replies;
            }
        }
        let mut failed = None;
        for stmt in group.statements {
            let reply = run(conn, stmt.sql, stmt.prepared, stmt.bound, stmt.all_rows).await;
            if let Err(e) = &reply {
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
        replies.end = match failed {
            // The session is gone: nothing can end the transaction, the
            // server rolled it back.
            Some(e) if e.is_outcome_unknown() || conn.is_disconnected() => None,
            // MySQL keeps the transaction open after a failed statement (or
            // rolled it back already, after a deadlock): end it.
            Some(_) => Some(Self::end(conn, End::Rollback).await),
            None => Some(Self::end(conn, End::Commit).await),
        };
        replies
    }

    async fn end(conn: &mut Client, end: End) -> (Result<(), Error>, bool) {
        let reply = command(conn, end.sql()).await;
        if end == End::Commit && reply.as_ref().is_err_and(Error::is_db) {
            // A refused COMMIT leaves the transaction open: roll it back.
            let rollback = command(conn, End::Rollback.sql()).await;
            return (reply, rollback.is_ok() && !in_transaction(conn));
        }
        let over = reply.is_ok() && !in_transaction(conn);
        (reply, over)
    }

    fn is_broken(conn: &Client) -> bool {
        conn.is_disconnected() || conn.broken
    }

    async fn refresh_limit(conn: &mut Client) -> Result<(), Error> {
        conn.refresh_limit()
            .await
            .map_err(super::errors::sent_error)
    }

    async fn lend(conn: &mut Client) -> Result<(), Error> {
        conn.lend().await.map_err(super::errors::sent_error)
    }
}

/// A parsed MySQL URL: mysql_async's options and batchpool's TLS
/// parameters.
pub(crate) struct MyConfig {
    pub(crate) opts: Opts,
    pub(crate) tls: TlsConfig,
    /// The URL's host list (empty: the one host of `opts`).
    pub(crate) hosts: Vec<super::hosts::Host>,
}

impl MySql {
    /// A row too big for any statement fails with a message naming the
    /// server's limit.
    fn check_packet(&self, bytes: usize) -> Result<(), Error> {
        let (limit, packet) = self.row_limit();
        if bytes > limit {
            return Err(Error::too_large(format!(
                "row of {bytes} bytes does not fit the server's max_allowed_packet of {packet} \
                 bytes ({} kept for the statement text and headers)",
                packet - limit
            )));
        }
        Ok(())
    }
}
