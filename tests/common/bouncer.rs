//! PgBouncer half of the harness: a throwaway PgBouncer in
//! `pool_mode = transaction` in front of a PostgreSQL server, shared by the
//! tests of a process ([`bouncer_url`], [`bouncer_url_for`],
//! [`bouncer_fresh_db`]) or owned ([`PgBouncer`]), and one in `pool_mode =
//! statement` ([`bouncer_statement_url`], [`bouncer_statement_url_for`],
//! [`bouncer_statement_fresh_db`]).
//!
//! `PGBOUNCER_URL` set (non-empty): that PgBouncer is used as is; it must
//! run in transaction mode in front of the `PG_URL` server (or whatever
//! server [`super::pg_url`] gives), with a wildcard database (`* = ...`) so
//! that the tests' fresh databases are reachable through it, e.g.
//! `PGBOUNCER_URL=postgresql://postgres@127.0.0.1:6432/postgres`;
//! `PGBOUNCER_STATEMENT_URL` likewise for one in statement mode.
//!
//! Otherwise a throwaway PgBouncer is started once per process and mode, in
//! a temp dir (config, auth file, pid file, log), listening on 127.0.0.1
//! and a free port only (no unix socket), as the system user `postgres`
//! when root:
//!
//! - `pool_mode = transaction`, `server_reset_query` empty: a client gets a
//!   server connection for one transaction only; between transactions its
//!   next statement may run on any server connection of the pool;
//! - or `pool_mode = statement`: a server connection for one statement
//!   only, and a client that opens a transaction block is disconnected
//!   ("transaction blocks not allowed in statement pooling mode"); its
//!   idle server connections close after 10 s (`server_idle_timeout`), so
//!   the pools of finished tests' databases do not pile up on the server;
//! - `default_pool_size = 4` server connections per database and user (see
//!   [`POOL_SIZE`]), far fewer than the client connections the tests open:
//!   server connections really are shared between client connections, and
//!   between processes using the same database;
//! - `[databases] * = host=... port=...`: every database of the server;
//! - `auth_type = trust`, the server's user (and its password, if its URL
//!   has one, which PgBouncer then uses to log in to the server) in the auth
//!   file; that user may also use the admin console (database `pgbouncer`,
//!   `SHOW POOLS`, simple protocol only).
//!
//! The binary is `pgbouncer` on PATH, else `/usr/sbin/pgbouncer` (Debian
//! package `pgbouncer`). Missing, it is a test failure that says what to
//! install. A detached watchdog stops the bouncer and removes its dir once
//! the test process is gone.

use super::util;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// What to tell a user whose machine lacks PgBouncer.
const MISSING: &str = "PgBouncer binary (`pgbouncer` on PATH or /usr/sbin/pgbouncer) not found: \
    install pgbouncer (apt-get install pgbouncer), or set PGBOUNCER_URL to a running PgBouncer \
    in transaction mode in front of the PG_URL server";

/// Server connections PgBouncer opens per database and user: fewer than the
/// client connections of most tests, so that clients share them.
pub const POOL_SIZE: usize = 4;

/// The shared throwaway PgBouncers of this process (in front of
/// `pg_url()`), in transaction and in statement mode.
static SHARED: util::Shared<PgBouncer> = util::Shared::new();
static SHARED_STATEMENT: util::Shared<PgBouncer> = util::Shared::new();

/// PgBouncer's `pool_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// `transaction`.
    Transaction,
    /// `statement`.
    Statement,
}

/// PgBouncer for this process: `PGBOUNCER_URL` if set, else a throwaway
/// PgBouncer in transaction mode in front of [`super::pg_url`]'s server,
/// started once per process. The URL names the server's user and database
/// `postgres`, without a statement mode:
/// `postgresql://postgres@127.0.0.1:PORT/postgres`.
///
/// Blocks while the bouncer (and, the first time, the server) starts: call
/// it before awaiting.
pub fn bouncer_url() -> String {
    SHARED.url(
        "PGBOUNCER_URL",
        || PgBouncer::start(&super::pg_url()),
        PgBouncer::url,
    )
}

/// The database of `db_url`, a connection string of the [`super::pg_url`]
/// server, reached through [`bouncer_url`]'s PgBouncer as [`bouncer_url`]'s
/// user (for the throwaway bouncer, the server's user: the same), with
/// `statements=unnamed`:
/// `postgresql://postgres@127.0.0.1:PORT/bp_…?statements=unnamed`.
pub fn bouncer_url_for(db_url: &str) -> String {
    let db = parse(db_url).get_dbname().unwrap_or("postgres").to_string();
    let through = util::with_database(&bouncer_url(), &db);
    with_statements(&through, Some("unnamed"))
}

/// A fresh, uniquely named database (see [`super::pg_fresh_db`]) reached
/// through the PgBouncer, in unnamed statement mode ([`bouncer_url_for`]).
pub async fn bouncer_fresh_db() -> String {
    bouncer_url(); // starts the bouncer (and the server) before awaiting
    bouncer_url_for(&super::pg_fresh_db().await)
}

/// [`bouncer_url`]'s admin console (database `pgbouncer`: `SHOW ...`
/// commands, simple protocol only).
pub fn bouncer_admin_url() -> String {
    util::with_database(&bouncer_url(), "pgbouncer")
}

/// PgBouncer in statement mode for this process: `PGBOUNCER_STATEMENT_URL`
/// if set, else a throwaway one in front of [`super::pg_url`]'s server,
/// started once per process (see [`bouncer_url`]).
pub fn bouncer_statement_url() -> String {
    SHARED_STATEMENT.url(
        "PGBOUNCER_STATEMENT_URL",
        || PgBouncer::start_in(&super::pg_url(), PoolMode::Statement),
        PgBouncer::url,
    )
}

/// The database of `db_url` reached through [`bouncer_statement_url`]'s
/// PgBouncer, with no parameter of batchpool's: that the pooler refuses
/// transaction blocks, the pool finds out.
pub fn bouncer_statement_url_for(db_url: &str) -> String {
    let db = parse(db_url).get_dbname().unwrap_or("postgres").to_string();
    util::with_database(&bouncer_statement_url(), &db)
}

/// [`bouncer_statement_url`]'s admin console.
pub fn bouncer_statement_admin_url() -> String {
    util::with_database(&bouncer_statement_url(), "pgbouncer")
}

/// A fresh, uniquely named database reached through the PgBouncer in
/// statement mode ([`bouncer_statement_url_for`]).
pub async fn bouncer_statement_fresh_db() -> String {
    bouncer_statement_url(); // starts the bouncer (and the server) before awaiting
    bouncer_statement_url_for(&super::pg_fresh_db().await)
}

/// The same database as `url` (a PgBouncer URL of [`bouncer_url_for`])
/// reached directly on [`super::pg_url`]'s server: for watching the server
/// from the side.
pub fn direct_url_for(url: &str) -> String {
    let db = parse(url).get_dbname().unwrap_or("postgres").to_string();
    util::with_database(&super::pg_url(), &db)
}

/// `url` with its batchpool statement mode (`statements=...`) set to `mode`,
/// or removed (`None`: the default, `auto`). URLs get a query parameter,
/// `key=value` strings a pair.
pub fn with_statements(url: &str, mode: Option<&str>) -> String {
    let (mut out, _) = strip_param(url, "statements");
    if let Some(mode) = mode {
        if out.contains("://") {
            out.push(if out.contains('?') { '&' } else { '?' });
        } else {
            out.push(' ');
        }
        out.push_str("statements=");
        out.push_str(mode);
    }
    out
}

/// `url` without parameter `key` (URL query parameter or `key=value` pair),
/// and the value it had.
pub fn strip_param(url: &str, key: &str) -> (String, Option<String>) {
    let prefix = format!("{key}=");
    let mut value = None;
    if url.contains("://") {
        let Some((base, query)) = url.split_once('?') else {
            return (url.to_string(), None);
        };
        let kept: Vec<&str> = query
            .split('&')
            .filter(|kv| match kv.strip_prefix(&prefix) {
                Some(v) => {
                    value = Some(v.to_string());
                    false
                }
                None => !kv.is_empty(),
            })
            .collect();
        let out = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return (out, value);
    }
    let kept: Vec<&str> = url
        .split_whitespace()
        .filter(|kv| match kv.strip_prefix(&prefix) {
            Some(v) => {
                value = Some(v.to_string());
                false
            }
            None => true,
        })
        .collect();
    (kept.join(" "), value)
}

/// `url` parsed by tokio-postgres (which knows no `statements=`).
fn parse(url: &str) -> tokio_postgres::Config {
    strip_param(url, "statements")
        .0
        .parse()
        .unwrap_or_else(|e| panic!("bad PostgreSQL URL {}: {e}", util::redact(url)))
}

/// The server's host and port in a parsed URL (`localhost` and unix
/// sockets as 127.0.0.1).
fn tcp_address(config: &tokio_postgres::Config) -> (String, u16) {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) if h != "localhost" => h.clone(),
        _ => "127.0.0.1".to_string(),
    };
    (host, port)
}

/// A throwaway PgBouncer (transaction or statement mode) owned by the
/// caller, in front of one PostgreSQL server; stopped and removed on Drop,
/// and by a watchdog process if this process exits without dropping it.
pub struct PgBouncer {
    /// Temp dir holding `pgbouncer.ini`, `users.txt`, the pid file and log.
    dir: PathBuf,
    /// TCP port on 127.0.0.1.
    port: u16,
    /// The server's user, named in [`PgBouncer::url`].
    user: String,
    /// The process we started (`pgbouncer`, or `runuser` around it).
    child: Option<Child>,
    /// The process that cleans up if this process dies first.
    watchdog: Option<Child>,
}

impl PgBouncer {
    /// Starts a PgBouncer in transaction mode in front of the server of
    /// `server_url` (any of its databases; its user and password). Blocks
    /// until it accepts connections; panics with its log tail if it cannot
    /// start, or with install advice if the binary is missing.
    pub fn start(server_url: &str) -> PgBouncer {
        PgBouncer::start_in(server_url, PoolMode::Transaction)
    }

    /// [`PgBouncer::start`] in pool mode `mode`.
    pub fn start_in(server_url: &str, mode: PoolMode) -> PgBouncer {
        let (pool_mode, idle) = match mode {
            PoolMode::Transaction => ("transaction", ""),
            PoolMode::Statement => ("statement", "server_idle_timeout = 10\n"),
        };
        let bin = util::find_on_path_or("pgbouncer", &["/usr/sbin", "/usr/bin", "/sbin"])
            .unwrap_or_else(|| panic!("{MISSING}"));
        let server = parse(server_url);
        let (host, port) = tcp_address(&server);
        let user = server.get_user().unwrap_or("postgres").to_string();
        let password = server
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();

        let dir = util::new_server_dir("pgbouncer", "postgres");
        let pid_file = dir.join("pgbouncer.pid");
        let watchdog = util::spawn_watchdog(&dir, &pid_file, "TERM");
        // From here on, a panic drops `bouncer`, which stops and removes it.
        let mut bouncer = PgBouncer {
            dir,
            port: 0,
            user: user.clone(),
            child: None,
            watchdog,
        };

        let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let mut users = format!("{} {}\n", quote(&user), quote(&password));
        if user != "postgres" {
            users.push_str("\"postgres\" \"\"\n");
        }
        let users_file = bouncer.dir.join("users.txt");
        write(&users_file, &users);

        let log = bouncer.dir.join("pgbouncer.log");
        let stderr_file = bouncer.dir.join("stderr.log");
        let config = bouncer.dir.join("pgbouncer.ini");
        for attempt in 1..=5 {
            bouncer.port = util::free_port();
            write(
                &config,
                &format!(
                    "[databases]\n\
                     * = host={host} port={port}\n\
                     \n\
                     [pgbouncer]\n\
                     listen_addr = 127.0.0.1\n\
                     listen_port = {listen}\n\
                     unix_socket_dir =\n\
                     auth_type = trust\n\
                     auth_file = {users}\n\
                     admin_users = {user}\n\
                     pool_mode = {pool_mode}\n\
                     {idle}\
                     server_reset_query =\n\
                     max_client_conn = 1000\n\
                     default_pool_size = {POOL_SIZE}\n\
                     min_pool_size = 0\n\
                     reserve_pool_size = 0\n\
                     max_db_connections = 0\n\
                     ignore_startup_parameters = extra_float_digits,options\n\
                     logfile = {log}\n\
                     pidfile = {pid}\n\
                     log_connections = 0\n\
                     log_disconnections = 0\n\
                     log_pooler_errors = 1\n",
                    listen = bouncer.port,
                    users = users_file.display(),
                    log = log.display(),
                    pid = pid_file.display(),
                ),
            );
            let _ = std::fs::remove_file(&log);
            let stderr = std::fs::File::create(&stderr_file)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", stderr_file.display()));
            let args: Vec<OsString> = vec![config.clone().into()];
            let mut command = util::as_user("postgres", &bin, &args);
            {
                use std::os::unix::process::CommandExt;
                // Its own process group: a Ctrl-C aimed at the test leaves
                // it to the watchdog, like the servers.
                command.process_group(0);
            }
            let child = command
                .current_dir(&bouncer.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
            bouncer.child = Some(child);
            match bouncer.wait_up(&log, &pid_file) {
                Ok(()) => return bouncer,
                Err(why) => {
                    let log_tail = util::tail(&log, 30);
                    let stderr_tail = util::tail(&stderr_file, 10);
                    bouncer.stop();
                    let port_taken = log_tail.contains("Address already in use")
                        || stderr_tail.contains("Address already in use");
                    if !(port_taken && attempt < 5) {
                        panic!(
                            "PgBouncer failed to start ({why}); config {}:\n{}\n\
                             --- {} (tail) ---\n{log_tail}\n--- stderr ---\n{stderr_tail}",
                            config.display(),
                            std::fs::read_to_string(&config).unwrap_or_default(),
                            log.display()
                        );
                    }
                }
            }
        }
        unreachable!()
    }

    /// Waits until the bouncer says it is up (it logs `process up` after it
    /// listens and wrote its pid file), or fails when it exits first or
    /// takes longer than 60 s.
    fn wait_up(&mut self, log: &Path, pid_file: &Path) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = std::fs::read_to_string(log)
                .map(|l| l.contains("process up"))
                .unwrap_or(false);
            if up && pid_file.exists() {
                return Ok(());
            }
            let child = self.child.as_mut().expect("a started bouncer");
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("exited with {status}"));
            }
            if Instant::now() > deadline {
                return Err("not up after 60 s".to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the process (SIGTERM: immediate shutdown) and reaps it.
    fn stop(&mut self) {
        let pid = std::fs::read_to_string(self.dir.join("pgbouncer.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u32>().ok()));
        if let Some(pid) = pid {
            util::send_signal(pid, "TERM");
            util::wait_pid_gone(pid, 10);
        }
        if let Some(mut child) = self.child.take() {
            if !matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// Connection URL: `postgresql://USER@127.0.0.1:PORT/postgres` (no
    /// statement mode; see [`with_statements`]).
    pub fn url(&self) -> String {
        format!(
            "postgresql://{}@127.0.0.1:{}/postgres",
            self.user, self.port
        )
    }

    /// Its address, for a proxy in front of it.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for PgBouncer {
    /// Stops the bouncer, removes its temp dir and retires the watchdog.
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        util::stop_watchdog(&mut self.watchdog);
    }
}

/// Writes a file the bouncer (the `postgres` user, when root) can read.
fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
