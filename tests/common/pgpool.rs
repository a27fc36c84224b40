//! pgpool-II half of the harness: a throwaway pgpool-II in front of a
//! PostgreSQL server, shared by the tests of a process ([`pgpool_url`],
//! [`pgpool_url_for`], [`pgpool_fresh_db`]) or owned ([`Pgpool`]), in one
//! of two clustering modes ([`PgpoolMode`]):
//!
//! - `streaming_replication` with `load_balance_mode = on`, its usual
//!   deployment: one backend (the server, found to be the primary), which is
//!   enough to show what pgpool-II does to the protocol;
//! - `raw`: the backend as it is, no replication logic.
//!
//! `PGPOOL_URL` / `PGPOOL_RAW_URL` set (non-empty): that pgpool-II is used
//! as is, in front of the `PG_URL` server (or whatever server
//! [`super::pg_url`] gives), e.g.
//! `PGPOOL_URL=postgresql://postgres@127.0.0.1:9999/postgres`.
//!
//! Otherwise a throwaway pgpool-II is started once per process and mode, in
//! a temp dir (config, pid file, status file, its unix sockets and log),
//! listening on 127.0.0.1 and a free port, as the system user `postgres`
//! when root. Whatever needs a standby or passwords is off: the replication
//! delay check (`sr_check_period = 0`; its user only finds the primary at
//! start), health checks, failover, the pool_hba file, the watchdog and the
//! query cache; clients are trusted as the server trusts them
//! (`allow_clear_text_frontend_auth` for a server that asks for a password).
//! `num_init_children` (see [`CHILDREN`]) bounds the client connections it
//! serves at once; each child keeps one server connection (`max_pool = 1`).
//!
//! The binary is `pgpool` on PATH, else `/usr/sbin/pgpool` (Debian package
//! `pgpool2`). Missing, it is a test failure that says what to install. A
//! detached watchdog stops pgpool-II and removes its dir once the test
//! process is gone.

use super::util;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// What to tell a user whose machine lacks pgpool-II.
const MISSING: &str = "pgpool-II binary (`pgpool` on PATH or /usr/sbin/pgpool) not found: \
    install pgpool2 (apt-get install pgpool2), or set PGPOOL_URL / PGPOOL_RAW_URL to a running \
    pgpool-II in front of the PG_URL server";

/// Client connections one throwaway pgpool-II serves at once (its child
/// processes); each holds at most one server connection, so two of them
/// stay well within the throwaway server's `max_connections`.
pub const CHILDREN: usize = 64;

/// pgpool-II's clustering mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgpoolMode {
    /// `streaming_replication`, with load balancing on.
    StreamingReplication,
    /// `raw`.
    Raw,
}

impl PgpoolMode {
    /// `backend_clustering_mode`'s value.
    fn setting(self) -> &'static str {
        match self {
            PgpoolMode::StreamingReplication => "streaming_replication",
            PgpoolMode::Raw => "raw",
        }
    }

    /// The variable that names an external pgpool-II of this mode.
    fn env_var(self) -> &'static str {
        match self {
            PgpoolMode::StreamingReplication => "PGPOOL_URL",
            PgpoolMode::Raw => "PGPOOL_RAW_URL",
        }
    }
}

/// The shared throwaway pgpool-IIs of this process (in front of `pg_url()`).
static SHARED_SR: util::Shared<Pgpool> = util::Shared::new();
static SHARED_RAW: util::Shared<Pgpool> = util::Shared::new();

/// pgpool-II in `mode` for this process: its environment variable if set,
/// else a throwaway one in front of [`super::pg_url`]'s server, started
/// once per process. The URL names the server's user and database
/// `postgres`: `postgresql://postgres@127.0.0.1:PORT/postgres`.
///
/// Blocks while pgpool-II (and, the first time, the server) starts: call it
/// before awaiting.
pub fn pgpool_url(mode: PgpoolMode) -> String {
    let shared = match mode {
        PgpoolMode::StreamingReplication => &SHARED_SR,
        PgpoolMode::Raw => &SHARED_RAW,
    };
    shared.url(
        mode.env_var(),
        || Pgpool::start(&super::pg_url(), mode),
        Pgpool::url,
    )
}

/// The database of `db_url`, a connection string of the [`super::pg_url`]
/// server, reached through [`pgpool_url`]'s pgpool-II, with no parameter of
/// batchpool's: what pgpool-II is, the pool finds out.
pub fn pgpool_url_for(db_url: &str, mode: PgpoolMode) -> String {
    let db = db_name(db_url);
    util::with_database(&pgpool_url(mode), &db)
}

/// A fresh, uniquely named database (see [`super::pg_fresh_db`]) reached
/// through pgpool-II in `mode` ([`pgpool_url_for`]).
pub async fn pgpool_fresh_db(mode: PgpoolMode) -> String {
    pgpool_url(mode); // starts pgpool-II (and the server) before awaiting
    pgpool_url_for(&super::pg_fresh_db().await, mode)
}

/// The database named by a PostgreSQL connection string.
fn db_name(url: &str) -> String {
    super::strip_param(url, "statements")
        .0
        .parse::<tokio_postgres::Config>()
        .ok()
        .and_then(|c| c.get_dbname().map(str::to_string))
        .unwrap_or_else(|| "postgres".to_string())
}

/// A throwaway pgpool-II owned by the caller, in front of one PostgreSQL
/// server; stopped and removed on Drop, and by a watchdog process if this
/// process exits without dropping it.
pub struct Pgpool {
    /// Temp dir holding `pgpool.conf`, `pcp.conf`, `pool_hba.conf`, the pid
    /// and status files, the unix sockets and the log.
    dir: PathBuf,
    /// TCP port on 127.0.0.1.
    port: u16,
    /// The server's user, named in [`Pgpool::url`].
    user: String,
    /// The process we started (`pgpool`, or `runuser` around it).
    child: Option<Child>,
    /// The process that cleans up if this process dies first.
    watchdog: Option<Child>,
}

impl Pgpool {
    /// Starts pgpool-II in `mode` in front of the server of `server_url`
    /// (any of its databases; its user and password). Blocks until it
    /// accepts connections; panics with its log tail if it cannot start, or
    /// with install advice if the binary is missing.
    pub fn start(server_url: &str, mode: PgpoolMode) -> Pgpool {
        let bin = util::find_on_path_or("pgpool", &["/usr/sbin", "/usr/bin", "/sbin"])
            .unwrap_or_else(|| panic!("{MISSING}"));
        let server: tokio_postgres::Config = super::strip_param(server_url, "statements")
            .0
            .parse()
            .unwrap_or_else(|e| panic!("bad PostgreSQL URL {}: {e}", util::redact(server_url)));
        let port = server.get_ports().first().copied().unwrap_or(5432);
        let host = match server.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) if h != "localhost" => h.clone(),
            _ => "127.0.0.1".to_string(),
        };
        let user = server.get_user().unwrap_or("postgres").to_string();
        let password = server
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();

        let dir = util::new_server_dir("pgpool", "postgres");
        let pid_file = dir.join("pgpool.pid");
        // SIGINT: pgpool-II's fast shutdown (its children go too).
        let watchdog = util::spawn_watchdog(&dir, &pid_file, "INT");
        // From here on, a panic drops `pgpool`, which stops and removes it.
        eprintln!("PGPOOL DIR {}", dir.display());
        let mut pgpool = Pgpool {
            dir,
            port: 0,
            user: user.clone(),
            child: None,
            watchdog,
        };
        write(&pgpool.dir.join("pcp.conf"), "");
        write(
            &pgpool.dir.join("pool_hba.conf"),
            "host all all 127.0.0.1/32 trust\n",
        );
        util::create_owned_dir(&pgpool.dir.join("oiddir"), "postgres");

        let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
        let log = pgpool.dir.join("pgpool.log");
        let config = pgpool.dir.join("pgpool.conf");
        let dir_setting = quote(&pgpool.dir.to_string_lossy());
        for attempt in 1..=5 {
            pgpool.port = util::free_port();
            write(
                &config,
                &format!(
                    "backend_clustering_mode = '{mode}'\n\
                     listen_addresses = '127.0.0.1'\n\
                     port = {listen}\n\
                     socket_dir = {dir}\n\
                     pcp_listen_addresses = ''\n\
                     pcp_port = {pcp}\n\
                     pcp_socket_dir = {dir}\n\
                     wd_ipc_socket_dir = {dir}\n\
                     pid_file_name = {pid}\n\
                     logdir = {dir}\n\
                     memqcache_oiddir = {oiddir}\n\
                     backend_hostname0 = {host}\n\
                     backend_port0 = {port}\n\
                     backend_weight0 = 1\n\
                     backend_flag0 = 'DISALLOW_TO_FAILOVER'\n\
                     enable_pool_hba = off\n\
                     pool_passwd = ''\n\
                     allow_clear_text_frontend_auth = on\n\
                     num_init_children = {CHILDREN}\n\
                     max_pool = 1\n\
                     child_life_time = 0\n\
                     load_balance_mode = on\n\
                     sr_check_period = 0\n\
                     sr_check_user = {user}\n\
                     sr_check_password = {password}\n\
                     health_check_period = 0\n\
                     health_check_user = {user}\n\
                     failover_on_backend_error = off\n\
                     use_watchdog = off\n\
                     memory_cache_enabled = off\n\
                     log_destination = 'stderr'\n\
                     log_min_messages = warning\n\
                     log_connections = off\n\
                     log_statement = on\n\
                     log_per_node_statement = on\n",
                    mode = mode.setting(),
                    listen = pgpool.port,
                    pcp = util::free_port(),
                    dir = dir_setting,
                    pid = quote(&pid_file.to_string_lossy()),
                    oiddir = quote(&pgpool.dir.join("oiddir").to_string_lossy()),
                    host = quote(&host),
                    user = quote(&user),
                    password = quote(&password),
                ),
            );
            let _ = std::fs::remove_file(&log);
            let stderr = std::fs::File::create(&log)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
            // -n: stay in the foreground (this process is its parent);
            // -D: forget the node status of an earlier run.
            let args: Vec<OsString> = vec![
                "-n".into(),
                "-D".into(),
                "-f".into(),
                config.clone().into(),
                "-F".into(),
                pgpool.dir.join("pcp.conf").into(),
                "-a".into(),
                pgpool.dir.join("pool_hba.conf").into(),
            ];
            let mut command = util::as_user("postgres", &bin, &args);
            {
                use std::os::unix::process::CommandExt;
                // Its own process group: a Ctrl-C aimed at the test leaves
                // it to the watchdog, like the servers.
                command.process_group(0);
            }
            let child = command
                .current_dir(&pgpool.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
            pgpool.child = Some(child);
            match pgpool.wait_up(&log) {
                Ok(()) => return pgpool,
                Err(why) => {
                    let log_tail = util::tail(&log, 30);
                    pgpool.stop();
                    let port_taken = log_tail.contains("Address already in use");
                    if !(port_taken && attempt < 5) {
                        panic!(
                            "pgpool-II failed to start ({why}); config {}:\n{}\n\
                             --- {} (tail) ---\n{log_tail}",
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

    /// Waits until pgpool-II says it started (after it found the primary)
    /// and accepts a TCP connection, or fails when it exits first or takes
    /// longer than 60 s.
    fn wait_up(&mut self, log: &Path) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let started = std::fs::read_to_string(log)
                .map(|l| l.contains("successfully started"))
                .unwrap_or(false);
            if started && std::net::TcpStream::connect(self.addr()).is_ok() {
                return Ok(());
            }
            let child = self.child.as_mut().expect("a started pgpool-II");
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("exited with {status}"));
            }
            if Instant::now() > deadline {
                return Err("not up after 60 s".to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the process (SIGINT: fast shutdown) and reaps it.
    fn stop(&mut self) {
        let pid = std::fs::read_to_string(self.dir.join("pgpool.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u32>().ok()));
        if let Some(pid) = pid {
            util::send_signal(pid, "INT");
            util::wait_pid_gone(pid, 10);
        }
        if let Some(mut child) = self.child.take() {
            if !matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// Connection URL: `postgresql://USER@127.0.0.1:PORT/postgres`.
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

impl Drop for Pgpool {
    /// Stops pgpool-II, removes its temp dir and retires the watchdog.
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        util::stop_watchdog(&mut self.watchdog);
    }
}

/// Writes a file pgpool-II (the `postgres` user, when root) can read.
fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
