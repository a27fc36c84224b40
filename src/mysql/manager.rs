//! deadpool manager for mysql_async connections.
//!
//! batchpool does not use mysql_async's own pool: deadpool owns the
//! [`mysql_async::Conn`]s, so the coalescing engine and the escape hatch
//! ([`Pool::get`](super::Pool::get)) share one set of connections and one
//! size limit.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use mysql_async::consts::StatusFlags;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Row};

use super::tls::Connect;
use crate::backend::{CapRefused, Capped, ConnectionCap, Lifecycle, Wire, WireState};
use crate::pool::hooks::Hooks;

/// A connection idle for at least this long is pinged before it is handed
/// out again.
const IDLE_PING: Duration = Duration::from_secs(5);

/// Server settings read once per pool, from the first connection opened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerInfo {
    /// `@@max_allowed_packet`: the largest packet the server accepts.
    pub(crate) max_allowed_packet: usize,
    /// `@@innodb_autoinc_lock_mode`, `None` when the server has no InnoDB.
    pub(crate) autoinc_lock_mode: Option<i64>,
}

/// Creates and recycles connections for the pool.
pub struct Manager {
    /// What to connect to: one entry per host, in the order given (see
    /// [Several hosts](super#several-hosts-failover)). Each holds the
    /// options and, for `ssl-mode=PREFERRED`, the same without TLS for a
    /// server that offers none.
    targets: Vec<Connect>,
    /// The host the last connection opened on: the next one tries it
    /// first.
    preferred: AtomicUsize,
    /// Bound on each host's attempt when there are several
    /// ([`PoolBuilder::create_timeout`](crate::PoolBuilder::create_timeout)).
    attempt_timeout: Option<Duration>,
    pub(crate) server: Arc<OnceLock<ServerInfo>>,
    /// The statement time limit the user asked the pool to set
    /// ([`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout)):
    /// `max_statement_time` on each MariaDB session.
    statement_timeout: Option<Duration>,
    /// The builder's `post_create` / `pre_recycle` hooks.
    hooks: Hooks<Conn>,
    /// Open connections, and the server's connection limit when it is
    /// below the pool's size.
    cap: ConnectionCap,
    /// `max_lifetime`, `idle_timeout` and retired generations.
    lifecycle: Lifecycle,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hosts: Vec<Redacted<'_>> = self.targets.iter().map(|t| Redacted(&t.opts)).collect();
        f.debug_struct("Manager")
            .field("hosts", &hosts)
            .finish_non_exhaustive()
    }
}

/// Connection options without the password (mysql_async's `Debug` prints
/// it).
pub(crate) struct Redacted<'a>(pub(crate) &'a Opts);

impl std::fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = self.0;
        f.debug_struct("Opts")
            .field("user", &o.user())
            .field("host", &o.ip_or_hostname())
            .field("port", &o.tcp_port())
            .field("db_name", &o.db_name())
            .finish_non_exhaustive()
    }
}

impl Manager {
    pub(crate) fn new(
        targets: Vec<Connect>,
        attempt_timeout: Option<Duration>,
        statement_timeout: Option<Duration>,
        hooks: Hooks<Conn>,
        lifecycle: Lifecycle,
    ) -> Manager {
        assert!(!targets.is_empty(), "at least one host");
        Manager {
            targets,
            preferred: AtomicUsize::new(0),
            attempt_timeout,
            server: Arc::new(OnceLock::new()),
            statement_timeout,
            hooks,
            cap: ConnectionCap::default(),
            lifecycle,
        }
    }

    /// Opens a connection; under `ssl-mode=PREFERRED` one without TLS when
    /// the server offers none.
    async fn open(target: &Connect) -> Result<Conn, mysql_async::Error> {
        #[cfg(feature = "rustls")]
        if target.opts.ssl_opts().is_some() {
            super::tls::ensure_crypto_provider();
        }
        match Conn::new(target.opts.clone()).await {
            Err(mysql_async::Error::Driver(
                mysql_async::DriverError::NoClientSslFlagFromServer,
            )) if target.plain.is_some() => {
                let plain = target.plain.clone().unwrap_or_else(|| target.opts.clone());
                Conn::new(plain).await
            }
            other => other,
        }
    }

    /// Opens and sets up a connection to one host: a session ready for the
    /// pool's statements, on a server ready for writes.
    async fn connect(&self, target: &Connect) -> Result<ConnWrapper, mysql_async::Error> {
        // Before connecting: a `retire_all` meanwhile retires it too.
        let stamp = self.lifecycle.stamp();
        let conn = Self::open(target).await?;
        let mut wrapper = ConnWrapper {
            conn: Some(conn),
            session: Session {
                auto_increment_increment: None,
                strict: false,
                statement_limit: None,
                readiness: Readiness::Ready,
                galera: false,
            },
            broken: false,
            read_only_seen: false,
            lent: false,
            own_limit: None,
            pool_set: false,
            explicit_limit: self.statement_timeout,
            server: Arc::clone(&self.server),
            wire: WireState::new(stamp),
        };
        self.settle(&mut wrapper).await?;
        Ok(wrapper)
    }

    /// Opens a connection on the first host that takes it, starting from
    /// the one the last connection opened on and going round the list
    /// once; each attempt is bounded by `create_timeout` when there are
    /// several hosts. A host is passed over when it cannot be reached, its
    /// session cannot be set up, it is `read_only`, or (a Galera node) it
    /// is not ready for writes; a Galera node not synced is used only when
    /// no host is. The error, when none takes it, names every host's.
    async fn connect_any(&self) -> Result<ConnWrapper, mysql_async::Error> {
        let n = self.targets.len();
        if n == 1 {
            return self.connect(&self.targets[0]).await;
        }
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut failures: Vec<(usize, mysql_async::Error)> = Vec::with_capacity(n);
        // The first connection to a node that takes writes but is not
        // synced, in case no host is.
        let mut fallback: Option<ConnWrapper> = None;
        for k in 0..n {
            let i = (first + k) % n;
            let attempt = self.connect(&self.targets[i]);
            let result = match self.attempt_timeout {
                Some(limit) => match tokio::time::timeout(limit, attempt).await {
                    Ok(result) => result,
                    Err(_) => Err(mysql_async::Error::Other(Box::new(HostError::HostTimeout(
                        limit,
                    )))),
                },
                None => attempt.await,
            };
            match result {
                Ok(wrapper) if wrapper.session.readiness == Readiness::Ready => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(wrapper);
                }
                Ok(wrapper) if wrapper.session.readiness == Readiness::ReadOnly => {
                    failures.push((i, mysql_async::Error::Other(Box::new(HostError::ReadOnly))));
                }
                Ok(wrapper) => {
                    if fallback.is_none() {
                        fallback = Some(wrapper);
                    }
                }
                Err(e) => failures.push((i, e)),
            }
        }
        if let Some(wrapper) = fallback {
            return Ok(wrapper);
        }
        if failures.iter().all(|(_, e)| Self::is_limit(e)) {
            // Every host is at its connection limit: the pool's cap
            // learns from that as from one server.
            return Err(failures.pop().map(|(_, e)| e).expect("n > 1 attempts"));
        }
        let text = failures
            .iter()
            .map(|(i, e)| {
                let o = &self.targets[*i].opts;
                format!("{}:{}: {e}", o.ip_or_hostname(), o.tcp_port())
            })
            .collect::<Vec<_>>()
            .join("; ");
        Err(mysql_async::Error::Other(Box::new(HostError::NoHost(text))))
    }

    /// The `post_create` hooks, after [`setup`](Self::setup) and before
    /// the session's settings are read (a hook may change them).
    async fn post_create(&self, conn: &mut Conn) -> Result<(), mysql_async::Error> {
        self.hooks
            .post_create(conn)
            .await
            .map_err(|e| mysql_async::Error::Other(Box::new(e)))
    }

    /// Session settings the user asked the pool for: the server-side
    /// statement time limit (MariaDB's `max_statement_time`; MySQL has no
    /// equivalent for writes, and refuses the variable: then only the
    /// pool's own deadline applies). Returns whether it was set, and the
    /// session's own limit before it (which `Pool::get` gives back).
    async fn setup(&self, conn: &mut Conn) -> Result<(bool, Option<Duration>), mysql_async::Error> {
        let Some(limit) = self.statement_timeout else {
            return Ok((false, None));
        };
        let own: Option<f64> = match conn
            .query_first("SELECT @@SESSION.max_statement_time")
            .await
        {
            Ok(own) => own,
            // 1193 unknown system variable: not MariaDB.
            Err(mysql_async::Error::Server(e)) if e.code == 1193 => return Ok((false, None)),
            Err(e) => return Err(e),
        };
        conn.query_drop(set_limit(Some(limit))).await?;
        Ok((true, own.and_then(seconds)))
    }

    /// Puts a session back as a new connection's after `COM_RESET_CONNECTION`
    /// (which mysql_async follows with the options' `setup` statements):
    /// the options' `after_connect` callback and `init` statements run
    /// again (and `setup` after them, in the order a new connection runs
    /// them), then the pool's own setup and `post_create` hooks, and the
    /// session's settings are read again.
    async fn reset(&self, wrapper: &mut ConnWrapper) -> RecycleResult<mysql_async::Error> {
        match wrapper.reset().await {
            Ok(true) => {}
            Ok(false) => {
                return Err(RecycleError::message(
                    "server cannot reset a connection returned from Pool::get",
                ));
            }
            Err(e) => return Err(RecycleError::Backend(e)),
        }
        let opts = wrapper.opts().clone();
        if !opts.init().is_empty() || opts.after_connect().is_some() {
            if let Some(callback) = opts.after_connect() {
                callback(wrapper).await?;
            }
            // mysql_async runs each list from its last statement to its
            // first: the same here.
            for sql in opts.init().iter().rev().chain(opts.setup().iter().rev()) {
                wrapper.query_drop(sql).await?;
            }
        }
        self.settle(wrapper).await?;
        Ok(())
    }

    /// The pool's setup and the `post_create` hooks of a new (or reset)
    /// session, then its settings.
    async fn settle(&self, wrapper: &mut ConnWrapper) -> Result<(), mysql_async::Error> {
        let (pool_set, own) = self.setup(wrapper).await?;
        self.post_create(wrapper).await?;
        wrapper.session = read_settings(wrapper, &self.server).await?;
        if let Readiness::NotReady(why) = &wrapper.session.readiness {
            return Err(mysql_async::Error::Other(Box::new(HostError::NotReady(
                why.clone(),
            ))));
        }
        wrapper.settle_limit(pool_set, own, self.statement_timeout);
        Ok(())
    }
}

/// Why the manager gave no connection.
#[derive(Debug)]
enum HostError {
    /// A Galera node that is not ready for writes (see
    /// [Several hosts](super#several-hosts-failover)): its connection is
    /// not used.
    NotReady(String),
    /// A server with `read_only` ON, in a list of several hosts.
    ReadOnly,
    /// One host's attempt took longer than `create_timeout`.
    HostTimeout(Duration),
    /// No host of the list gave a connection: each one's error.
    NoHost(String),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::NotReady(why) => {
                write!(f, "the Galera node is not ready for writes ({why})")
            }
            HostError::ReadOnly => f.write_str(
                "the server is read-only (read_only = ON): a replica, or a primary fenced",
            ),
            HostError::HostTimeout(limit) => {
                write!(f, "no connection within {} ms", limit.as_millis())
            }
            HostError::NoHost(errors) => {
                write!(f, "no host gave a connection ready for writes: {errors}")
            }
        }
    }
}

impl std::error::Error for HostError {}

/// `SET SESSION max_statement_time` to `limit` (`None`: no limit).
fn set_limit(limit: Option<Duration>) -> String {
    format!(
        "SET SESSION max_statement_time = {:.3}",
        limit.map_or(0.0, |l| l.as_secs_f64().max(0.001))
    )
}

/// A `max_statement_time` value: seconds, `0` for no limit.
fn seconds(s: f64) -> Option<Duration> {
    (s.is_finite() && s > 0.0).then(|| Duration::from_secs_f64(s))
}

/// A Galera node's readiness for writes, as `name=value` pairs separated by
/// spaces (see [`wsrep_readiness`]), from the status table, which a node
/// that is not ready still answers.
const WSREP_STATUS: &str = "SELECT GROUP_CONCAT(LOWER(VARIABLE_NAME), '=', VARIABLE_VALUE \
     ORDER BY VARIABLE_NAME SEPARATOR ' ') FROM information_schema.GLOBAL_STATUS \
     WHERE VARIABLE_NAME IN ('WSREP_READY', 'WSREP_LOCAL_STATE', 'WSREP_CLUSTER_STATUS')";

/// What batchpool must know about one session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// `@@auto_increment_increment`, when it stays what it was read as
    /// (`None` on a Galera node that sets it from the cluster's
    /// membership: `wsrep_auto_increment_control` ON).
    pub(crate) auto_increment_increment: Option<u64>,
    /// `@@SESSION.sql_mode` is strict (`STRICT_TRANS_TABLES` or
    /// `STRICT_ALL_TABLES`): only then does a multi-row INSERT reject what
    /// the single-row ones would (a non-strict multi-row INSERT stores `''`
    /// or `0` for a NULL bound to a NOT NULL column, where a single-row one
    /// fails with 1048).
    pub(crate) strict: bool,
    /// `@@SESSION.max_statement_time` (MariaDB; `None`: no limit, or a
    /// server without it).
    pub(crate) statement_limit: Option<Duration>,
    /// Whether the server takes writes (a Galera node may not).
    pub(crate) readiness: Readiness,
    /// A Galera node (`wsrep_on`): its readiness is read again when the
    /// connection comes out of the pool after lying idle (as `read_only`
    /// is, in a list of several hosts).
    pub(crate) galera: bool,
}

/// Whether a server is ready for writes, read with the session's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Not a Galera node, or one that is synced with its cluster's primary
    /// component.
    Ready,
    /// A Galera node that takes writes (`wsrep_ready` ON, in the primary
    /// component) but is not synced (a donor, or desynced for a backup):
    /// used only when no host of the list is [`Ready`](Readiness::Ready).
    NotSynced(String),
    /// A server with `read_only` ON (a replica, a fenced primary): never
    /// used from a list of several hosts; a single host is used as it is.
    ReadOnly,
    /// A Galera node that refuses writes (`wsrep_ready` OFF, outside the
    /// primary component), or whose state cannot be read: never used. Its
    /// status, for the error.
    NotReady(String),
}

/// Reads the settings batchpool depends on: the pool-wide ones the first
/// time, and those of the connection's session.
pub(crate) async fn read_settings(
    conn: &mut Conn,
    server: &OnceLock<ServerInfo>,
) -> Result<Session, mysql_async::Error> {
    // Without what a server lacks, in turn: MySQL has no
    // `max_statement_time`, a server without InnoDB no lock mode.
    let mut row: Option<Row> = None;
    // The wsrep variables exist on MariaDB built with Galera support
    // (whether or not it is a cluster node); a server without them is no
    // Galera node.
    //
    // A Galera node's readiness for writes comes in the same round trip:
    // `wsrep_ready`, `wsrep_local_state` and `wsrep_cluster_status`, from
    // the status table (readable on a node that is not ready).
    let first = format!(
        "SELECT @@max_allowed_packet, @@auto_increment_increment, \
         @@innodb_autoinc_lock_mode, @@SESSION.sql_mode, @@SESSION.max_statement_time, \
         @@GLOBAL.wsrep_on OR @@SESSION.wsrep_on, @@GLOBAL.wsrep_auto_increment_control, \
         ({WSREP_STATUS}), @@GLOBAL.read_only"
    );
    for sql in [
        first.as_str(),
        "SELECT @@max_allowed_packet, @@auto_increment_increment, \
         @@innodb_autoinc_lock_mode, @@SESSION.sql_mode, @@SESSION.max_statement_time, 0, 0, \
         NULL, @@GLOBAL.read_only",
        "SELECT @@max_allowed_packet, @@auto_increment_increment, \
         @@innodb_autoinc_lock_mode, @@SESSION.sql_mode, NULL, 0, 0, NULL, @@GLOBAL.read_only",
        "SELECT @@max_allowed_packet, @@auto_increment_increment, NULL, \
         @@SESSION.sql_mode, NULL, 0, 0, NULL, @@GLOBAL.read_only",
    ] {
        match conn.query_first(sql).await {
            Ok(found) => {
                row = found;
                break;
            }
            // A node that refuses even this (1047: not ready) is no server
            // to fall back on a smaller query for.
            Err(mysql_async::Error::Server(e)) if e.code == 1047 => {
                return Err(mysql_async::Error::Server(e));
            }
            Err(mysql_async::Error::Server(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    let get_u64 = |i: usize| -> Option<u64> {
        row.as_ref()
            .and_then(|r| r.get_opt::<Option<u64>, _>(i))
            .and_then(Result::ok)
            .flatten()
    };
    let packet = get_u64(0);
    // A Galera node with `wsrep_auto_increment_control` ON sets every
    // session's increment and offset from the cluster's membership before
    // each command it runs: a node joining or leaving changes the stride of
    // an open session between two statements, and a statement's reply does
    // not say which stride it used. The session's increment is then not
    // known, and no per-row id is computed from it (ids are read back from
    // a `RETURNING` instead, where the server has one).
    let cluster_stride =
        get_u64(5).is_some_and(|on| on != 0) && get_u64(6).is_some_and(|on| on != 0);
    let increment = get_u64(1).filter(|_| !cluster_stride);
    let sql_mode = row
        .as_ref()
        .and_then(|r| r.get_opt::<Option<String>, _>(3))
        .and_then(Result::ok)
        .flatten()
        .unwrap_or_default()
        .to_ascii_uppercase();
    let strict = sql_mode
        .split(',')
        .any(|m| m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES");
    let lock_mode = row
        .as_ref()
        .and_then(|r| r.get_opt::<Option<i64>, _>(2))
        .and_then(Result::ok)
        .flatten();
    server.get_or_init(|| ServerInfo {
        // The documented default of MariaDB and of MySQL 5.7 when the
        // variable cannot be read.
        max_allowed_packet: packet
            .and_then(|p| usize::try_from(p).ok())
            .unwrap_or(4 << 20),
        autoinc_lock_mode: lock_mode,
    });
    let statement_limit = row
        .as_ref()
        .and_then(|r| r.get_opt::<Option<f64>, _>(4))
        .and_then(Result::ok)
        .flatten()
        .and_then(seconds);
    let galera = get_u64(5).is_some_and(|on| on != 0);
    let readiness = if galera {
        let status = row
            .as_ref()
            .and_then(|r| r.get_opt::<Option<String>, _>(7))
            .and_then(Result::ok)
            .flatten()
            .unwrap_or_default();
        wsrep_readiness(&status)
    } else {
        Readiness::Ready
    };
    // `read_only` (MySQL's `super_read_only` sets it too): a replica, or a
    // primary fenced during a switchover. Writes fail there for users
    // without the privilege to bypass it, and would be the wrong server's
    // for those with it.
    let readiness = match readiness {
        Readiness::NotReady(why) => Readiness::NotReady(why),
        _ if get_u64(8).is_some_and(|on| on != 0) => Readiness::ReadOnly,
        other => other,
    };
    Ok(Session {
        auto_increment_increment: increment,
        strict,
        statement_limit,
        readiness,
        galera,
    })
}

/// How ready for writes a Galera node whose status reads `status` is
/// (`name=value` pairs separated by spaces, names in lower case): ready
/// when `wsrep_ready` is ON, `wsrep_cluster_status` Primary and
/// `wsrep_local_state` 4 (Synced). A missing variable counts as not ready.
fn wsrep_readiness(status: &str) -> Readiness {
    let get = |name: &str| {
        status.split(' ').find_map(|pair| {
            let (n, v) = pair.split_once('=')?;
            (n == name).then_some(v)
        })
    };
    let ready = get("wsrep_ready").is_some_and(|v| v.eq_ignore_ascii_case("ON"));
    let primary = get("wsrep_cluster_status").is_some_and(|v| v.eq_ignore_ascii_case("Primary"));
    let synced = get("wsrep_local_state") == Some("4");
    match (ready && primary, synced) {
        (true, true) => Readiness::Ready,
        (true, false) => Readiness::NotSynced(status.to_owned()),
        (false, _) if status.is_empty() => {
            Readiness::NotReady("its wsrep status cannot be read".to_owned())
        }
        (false, _) => Readiness::NotReady(status.to_owned()),
    }
}

impl Capped for Manager {
    fn cap(&self) -> &ConnectionCap {
        &self.cap
    }

    fn is_limit(e: &mysql_async::Error) -> bool {
        match e {
            // ER_CON_COUNT_ERROR (max_connections), ER_TOO_MANY_USER_CONNECTIONS
            // (max_user_connections), ER_USER_LIMIT_REACHED (a user's
            // MAX_USER_CONNECTIONS).
            mysql_async::Error::Server(se) => matches!(se.code, 1040 | 1203 | 1226),
            mysql_async::Error::Other(other) => other.downcast_ref::<CapRefused>().is_some(),
            _ => false,
        }
    }

    fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }
}

impl managed::Manager for Manager {
    type Type = ConnWrapper;
    type Error = mysql_async::Error;

    async fn create(&self) -> Result<ConnWrapper, mysql_async::Error> {
        if !self.cap.admit() {
            return Err(mysql_async::Error::Other(Box::new(CapRefused)));
        }
        // Boxed: these state machines are part of every checkout's future
        // (every pending caller's) otherwise.
        let wrapper = Box::pin(async {
            match self.connect_any().await {
                Ok(wrapper) => Ok(wrapper),
                Err(e) => {
                    if Self::is_limit(&e) {
                        self.cap.refused();
                    }
                    Err(e)
                }
            }
        })
        .await?;
        self.cap.opened();
        Ok(wrapper)
    }

    fn detach(&self, _: &mut ConnWrapper) {
        self.cap.closed();
    }

    async fn recycle(
        &self,
        wrapper: &mut ConnWrapper,
        metrics: &Metrics,
    ) -> RecycleResult<mysql_async::Error> {
        // Only ever a connection in the pool: one in use is retired when it
        // comes back and is next taken (or swept).
        if let Some(why) = wrapper.wire.unusable(&self.lifecycle, metrics) {
            return Err(RecycleError::message(why));
        }
        if !wrapper.lent && wrapper.wire.limit_stale {
            wrapper.wire.busy = true;
            Box::pin(wrapper.refresh_limit())
                .await
                .map_err(RecycleError::Backend)?;
            wrapper.wire.busy = false;
        }
        if !wrapper.lent
            && metrics.last_used() < IDLE_PING
            && wrapper.last_ok_packet().is_some()
            && !self.hooks.has_pre_recycle()
            && !wrapper.broken
            && !wrapper.read_only_seen
            && !wrapper.is_disconnected()
        {
            // Used a moment ago and nothing to run: only its last status.
            return autocommit_outside_transaction(wrapper);
        }
        // The check talks to the server: if it does not finish within
        // `recycle_timeout`, deadpool drops the connection still marked,
        // and it is closed at once.
        wrapper.wire.busy = true;
        let checked = Box::pin(self.check(wrapper, metrics)).await;
        wrapper.wire.busy = false;
        checked
    }
}

impl Manager {
    /// `recycle`: whether a connection may be handed out again.
    async fn check(
        &self,
        wrapper: &mut ConnWrapper,
        metrics: &Metrics,
    ) -> RecycleResult<mysql_async::Error> {
        if wrapper.broken || wrapper.is_disconnected() {
            return Err(RecycleError::message("connection lost"));
        }
        if wrapper.lent {
            // Back from `Pool::get`: the user may have changed session
            // state (variables, autocommit, temporary tables, an open
            // transaction). COM_RESET_CONNECTION puts it back as new.
            self.reset(wrapper).await?;
            wrapper.lent = false;
        } else if metrics.last_used() >= IDLE_PING || wrapper.last_ok_packet().is_none() {
            let several = self.targets.len() > 1;
            if wrapper.session.galera || several {
                // The server may have changed while the connection lay
                // idle: in place of the ping, what makes it unfit for
                // writes. A Galera node that left the primary component
                // (or was desynced); in a list of several hosts, a server
                // turned read-only (a demoted primary), where a user
                // allowed to bypass `read_only` would go on writing. Such
                // a connection goes, and a new one opens on a host that
                // takes writes. A connection in use learns it from its
                // next statement's 1047 or 1290 instead.
                let status = if wrapper.session.galera {
                    WSREP_STATUS
                } else {
                    "SELECT NULL"
                };
                let row: Option<(Option<u64>, Option<String>)> = wrapper
                    .query_first(format!("SELECT @@GLOBAL.read_only, ({status})"))
                    .await
                    .map_err(RecycleError::Backend)?;
                let (read_only, status) = row.unwrap_or_default();
                if wrapper.session.galera {
                    if let Readiness::NotReady(why) = wsrep_readiness(&status.unwrap_or_default()) {
                        return Err(RecycleError::message(format!(
                            "the Galera node is not ready for writes ({why})"
                        )));
                    }
                }
                if several && read_only.is_some_and(|on| on != 0) {
                    return Err(RecycleError::message(
                        "the server is read-only (read_only = ON)",
                    ));
                }
            } else {
                wrapper.ping().await.map_err(RecycleError::Backend)?;
            }
        }
        if std::mem::take(&mut wrapper.read_only_seen) {
            let read_only: Option<u64> = wrapper
                .query_first("SELECT @@GLOBAL.read_only")
                .await
                .map_err(RecycleError::Backend)?;
            if read_only.is_some_and(|on| on != 0) {
                // A replica (an old primary demoted, a host of the list
                // that was switched away from), or a server fenced with
                // `read_only`: every write here would fail. A new
                // connection opens on a host that takes writes, when the
                // list has one.
                return Err(RecycleError::message(
                    "the server is read-only (read_only = ON)",
                ));
            }
        }
        self.hooks
            .pre_recycle(wrapper)
            .await
            .map_err(|e| RecycleError::Backend(mysql_async::Error::Other(Box::new(e))))?;
        autocommit_outside_transaction(wrapper)
    }
}

/// Rows written on a connection must commit on their own: its last status
/// must say autocommit, outside a transaction.
fn autocommit_outside_transaction(conn: &Conn) -> RecycleResult<mysql_async::Error> {
    let flags = conn.last_ok_packet().map(|ok| ok.status_flags());
    match flags {
        Some(f)
            if f.contains(StatusFlags::SERVER_STATUS_AUTOCOMMIT)
                && !f.contains(StatusFlags::SERVER_STATUS_IN_TRANS) =>
        {
            Ok(())
        }
        _ => Err(RecycleError::message(
            "connection is inside a transaction or has autocommit off",
        )),
    }
}

/// A pooled connection: derefs to [`mysql_async::Conn`] (use it with
/// [`Queryable`]), plus what batchpool
/// knows about it.
///
/// A connection taken with [`Pool::get`](super::Pool::get) is reset with
/// `COM_RESET_CONNECTION` when it comes back, so session changes made
/// through it (variables, `autocommit`, an open transaction, temporary
/// tables, prepared statements) never reach rows coalesced later.
pub struct ConnWrapper {
    /// `None` only while being dropped.
    conn: Option<Conn>,
    /// This session's settings, read when it opened (and after a reset).
    pub(crate) session: Session,
    /// The server ended this session (killed, shutting down, packet too
    /// large); the pool throws it away.
    pub(crate) broken: bool,
    /// A statement was refused as a write on a read-only server (1290,
    /// 1836): before its next use the server's `read_only` is read, and
    /// the connection goes when it is ON.
    read_only_seen: bool,
    /// Handed out by `Pool::get`: reset before reuse.
    pub(crate) lent: bool,
    /// The session's own `max_statement_time`, before the pool set the
    /// user's [`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout)
    /// (`None`: no limit).
    own_limit: Option<Duration>,
    /// The pool's `SET max_statement_time` is in force on the session.
    pool_set: bool,
    /// [`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout).
    explicit_limit: Option<Duration>,
    /// The pool's server settings (read again with the session's).
    server: Arc<OnceLock<ServerInfo>>,
    /// Busy, statement limit and lifecycle stamp (see [`Wire`]).
    wire: WireState,
}

impl Wire for ConnWrapper {
    fn wire(&self) -> &WireState {
        &self.wire
    }

    fn wire_mut(&mut self) -> &mut WireState {
        &mut self.wire
    }
}

/// How long a connection closed with a request unanswered may take to say
/// goodbye before its socket is simply dropped.
const QUIT_LIMIT: Duration = Duration::from_millis(500);

impl Drop for ConnWrapper {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if !self.wire.busy {
            // mysql_async reads what is pending, then quits, in a task.
            return;
        }
        // An answer may never come: mysql_async's own drop would wait for
        // it. Quit without reading it, and drop the socket if even that
        // stalls (the server rolls back whatever was open).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(QUIT_LIMIT, conn.disconnect()).await;
            });
        }
    }
}

impl std::fmt::Debug for ConnWrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnWrapper")
            .field("id", &self.id())
            .field("disconnected", &self.is_disconnected())
            .finish_non_exhaustive()
    }
}

impl Deref for ConnWrapper {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn
            .as_ref()
            .expect("connection present until dropped")
    }
}

impl DerefMut for ConnWrapper {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn
            .as_mut()
            .expect("connection present until dropped")
    }
}

impl ConnWrapper {
    /// Settles which statement time limit the pool enforces once the
    /// session is set up: the one read from the server (the pool's own
    /// `SET` when it is still in force, else the session's: an `init`
    /// statement's, the user's or the server's). Where the server has no
    /// such limit (MySQL) the pool enforces the user's `explicit` one
    /// itself.
    fn settle_limit(&mut self, pool_set: bool, own: Option<Duration>, explicit: Option<Duration>) {
        self.wire.limit_stale = false;
        let read = self.session.statement_limit;
        // `max_statement_time` keeps microseconds; the pool sets whole ms.
        let same = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => a.abs_diff(b) < Duration::from_millis(1),
            (a, b) => a == b,
        };
        self.pool_set = pool_set && same(read, explicit);
        self.own_limit = if self.pool_set { own } else { read };
        self.wire.limit = match (read, explicit.filter(|_| !pool_set)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Notes statements of the user's about to run here: one that names
    /// `max_statement_time` (`SET`, `SET STATEMENT ... FOR`) may change the
    /// session's limit, which is then read again.
    pub(crate) fn note_texts<'a>(&mut self, mut texts: impl Iterator<Item = &'a str>) {
        const NAME: &[u8] = b"max_statement_time";
        if texts.any(|sql| {
            sql.as_bytes()
                .windows(NAME.len())
                .any(|w| w.eq_ignore_ascii_case(NAME))
        }) {
            self.wire.limit_stale = true;
        }
    }

    /// Reads the session's settings again if a statement may have changed
    /// its limit (see [`note_texts`](Self::note_texts)).
    pub(crate) async fn refresh_limit(&mut self) -> Result<(), mysql_async::Error> {
        if !self.wire.limit_stale {
            return Ok(());
        }
        let server = Arc::clone(&self.server);
        self.session = read_settings(self, &server).await?;
        let (pool_set, own, explicit) = (self.pool_set, self.own_limit, self.explicit_limit);
        self.settle_limit(pool_set, own, explicit);
        Ok(())
    }

    /// Hands the connection to the user (`Pool::get`): it is reset when it
    /// comes back. A session on which the pool set the user's
    /// [`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout)
    /// for its own statements gets its own limit back first, so a long
    /// migration on it is not cut by the pool's setting.
    pub(crate) async fn lend(&mut self) -> Result<(), mysql_async::Error> {
        self.lent = true;
        if !self.pool_set {
            return Ok(());
        }
        let own = self.own_limit;
        self.query_drop(set_limit(own)).await?;
        self.pool_set = false;
        self.wire.limit = own;
        Ok(())
    }

    /// Records a failure seen on this connection: a server error that
    /// ends the session makes the pool discard it.
    pub(crate) fn note_error(&mut self, e: &mysql_async::Error) {
        if let mysql_async::Error::Server(se) = e {
            self.note_code(se.code);
        }
    }

    /// As [`note_error`](Self::note_error), from the server error code.
    pub(crate) fn note_code(&mut self, code: u16) {
        // 1053 shutdown, 1152-1161 network errors and packet limits, 1927
        // connection killed, 1047 a Galera node not ready for writes
        // (WSREP has not yet prepared node for application use), 1180 an
        // error during COMMIT (such a node, mid-commit): new connections go
        // to a node that is.
        if matches!(code, 1047 | 1053 | 1152..=1161 | 1180 | 1927) {
            self.broken = true;
        }
        // ER_OPTION_PREVENTS_STATEMENT (`--read-only`, among other
        // options), ER_READ_ONLY_MODE: nothing ran; the session may be on
        // a server that became a replica or was fenced.
        if matches!(code, 1290 | 1836) {
            self.read_only_seen = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Readiness, wsrep_readiness};

    #[test]
    fn a_galera_node_ready_for_writes() {
        let ready = "wsrep_cluster_status=Primary wsrep_local_state=4 wsrep_ready=ON";
        assert_eq!(wsrep_readiness(ready), Readiness::Ready);
        // A donor, a desynced node: they take writes, as a last resort.
        for not_synced in [
            "wsrep_cluster_status=Primary wsrep_local_state=2 wsrep_ready=ON",
            "wsrep_cluster_status=Primary wsrep_local_state=1 wsrep_ready=ON",
        ] {
            assert_eq!(
                wsrep_readiness(not_synced),
                Readiness::NotSynced(not_synced.into())
            );
        }
        for not in [
            "wsrep_cluster_status=non-Primary wsrep_local_state=4 wsrep_ready=OFF",
            "wsrep_cluster_status=non-Primary wsrep_local_state=4 wsrep_ready=ON",
            "wsrep_cluster_status=Disconnected wsrep_local_state=0 wsrep_ready=OFF",
            "wsrep_cluster_status=Primary wsrep_local_state=4",
        ] {
            assert_eq!(wsrep_readiness(not), Readiness::NotReady(not.into()));
        }
        assert_eq!(
            wsrep_readiness(""),
            Readiness::NotReady("its wsrep status cannot be read".into())
        );
    }
}
