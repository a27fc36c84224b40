//! PostgreSQL half of the harness: the shared server ([`pg_url`]), fresh
//! databases ([`pg_fresh_db`]) and owned throwaway clusters ([`PgServer`]).
//!
//! Throwaway clusters start from the programs of [`pg_bin_dir`]: the
//! directory `PG_BIN_DIR` names when set (another PostgreSQL release than
//! the installed one; `.ci/postgres` fetches such builds and prints the
//! directory), else `initdb` on PATH, else the newest
//! `/usr/lib/postgresql/*/bin`. `PG_BIN_DIR` lacking `initdb`, `pg_ctl` or
//! `postgres` fails the test that starts a server, naming what is missing.

use super::certs::{TestCerts, write_certs};
use super::util;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// What to tell a user whose machine lacks the server binaries.
const MISSING: &str = "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or under \
    /usr/lib/postgresql/*/bin: install the Debian package `postgresql` \
    (apt-get install postgresql), set PG_BIN_DIR to a directory holding them, \
    or set PG_URL to a running server";

/// The environment variable naming the directory of the PostgreSQL programs
/// (`initdb`, `pg_ctl`, `postgres`, and `pg_basebackup` for a standby) that
/// throwaway clusters are started from, instead of PATH and
/// `/usr/lib/postgresql/*/bin`: another release than the installed one, such
/// as a build `.ci/postgres` fetches.
pub const BIN_DIR_VAR: &str = "PG_BIN_DIR";

/// The programs a throwaway cluster is started with.
const SERVER_PROGRAMS: [&str; 3] = ["initdb", "pg_ctl", "postgres"];

/// The shared throwaway cluster of this process, or `PG_URL`'s server.
static SHARED: util::Shared<PgServer> = util::Shared::new();

/// The shared TLS cluster of this process (see [`pg_tls_server`]).
static SHARED_TLS: std::sync::OnceLock<PgServer> = std::sync::OnceLock::new();

/// PostgreSQL server for this process: the `PG_URL` environment variable if
/// set (any libpq URL or `key=value` string tokio-postgres accepts), else a
/// throwaway cluster started once per process (even when many tests ask at
/// once) and removed when the process exits. The throwaway URL looks like
/// `postgresql://postgres@127.0.0.1:PORT/postgres`.
///
/// Blocks while the cluster starts (about 1.5 s): call it before awaiting.
pub fn pg_url() -> String {
    SHARED.url("PG_URL", || PgServer::start(&[]), PgServer::url)
}

/// A throwaway cluster with TLS on (`ssl=on`, a certificate for 127.0.0.1
/// and localhost signed by a throwaway CA: [`PgServer::certs`]), started
/// once per process on first use, for the TLS tests. Plain connections are
/// accepted too. Always a throwaway: `PG_URL` does not apply.
pub fn pg_tls_server() -> &'static PgServer {
    SHARED_TLS.get_or_init(|| PgServer::start_tls(&[]))
}

/// A new, uniquely named database on [`pg_tls_server`]: its URL (no TLS
/// parameters).
pub async fn pg_tls_fresh_db() -> String {
    let base = pg_tls_server().url();
    let name = util::unique_db_name();
    let admin = connect(&base).await;
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name} failed: {e}"));
    util::with_database(&base, &name)
}

/// Creates a new, uniquely named database (`bp_<pid>_<counter>_<nanos>`) on
/// the [`pg_url`] server and returns a connection string for it, so a test
/// never depends on state left by another.
///
/// On an external server (`PG_URL`), the first call in a process also drops
/// `bp_<pid>_…` databases whose process no longer exists on this machine
/// (leftovers of earlier runs), unless `BATCHPOOL_KEEP_DBS=1`.
pub async fn pg_fresh_db() -> String {
    let base = pg_url();
    SHARED
        .fresh_db("PG_URL", &base, &mut connect(&base).await)
        .await
}

impl util::DbAdmin for tokio_postgres::Client {
    const TEST_DBS: &'static str = "SELECT datname FROM pg_database WHERE datname LIKE 'bp\\_%'";
    const QUOTE: char = '"';
    /// PostgreSQL 13 or later; on older servers the drop fails at once
    /// (a syntax error) and the leftover stays.
    const DROP_FORCE: &'static str = " WITH (FORCE)";

    async fn names(&mut self, sql: &str) -> Vec<String> {
        let rows = self.query(sql, &[]).await.unwrap_or_default();
        rows.iter().map(|r| r.get(0)).collect()
    }

    async fn run(&mut self, sql: &str) -> Result<(), String> {
        let mut attempt = 0;
        loop {
            match self.batch_execute(sql).await {
                Ok(()) => return Ok(()),
                // 55006 object_in_use: someone is connected to template1; retry.
                Err(e) if attempt < 20 && e.code().is_some_and(|c| c.code() == "55006") => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// The server's version string (`SELECT version()`), for bench reports.
pub async fn pg_version(url: &str) -> String {
    let client = connect(url).await;
    let row = client
        .query_one("SELECT version()", &[])
        .await
        .unwrap_or_else(|e| panic!("SELECT version() on {} failed: {e}", util::redact(url)));
    row.get(0)
}

/// Connects without TLS and drives the connection on a spawned task.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to PostgreSQL at {}: {e}", util::redact(url)));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A throwaway PostgreSQL cluster owned by the caller, started with extra
/// `-c name=value` settings; stopped and removed on Drop, and by a watchdog
/// process if this process exits without dropping it (panic, `exit`).
///
/// It listens on 127.0.0.1 only, on a free port, with its unix socket in its
/// own temp dir; `trust` auth for user `postgres`; `max_connections=300`.
/// Durable settings unless `BATCHPOOL_FAST_SERVER=1` (then `fsync=off`,
/// `synchronous_commit=off`).
pub struct PgServer {
    /// Temp dir holding `data/`, the socket and `postgres.log`.
    dir: PathBuf,
    /// Directory holding `pg_ctl`.
    bin: PathBuf,
    /// TCP port on 127.0.0.1.
    port: u16,
    /// The process that cleans up if this process dies first.
    watchdog: Option<Child>,
    /// TLS: the certificates it presents.
    certs: Option<TestCerts>,
}

impl PgServer {
    /// [`start`](PgServer::start) with TLS on: `ssl=on` with a fresh
    /// certificate for 127.0.0.1 and localhost, signed by a fresh CA
    /// ([`certs`](PgServer::certs)). Plain connections are still accepted.
    pub fn start_tls(settings: &[(&str, &str)]) -> PgServer {
        PgServer::start_with(settings, true)
    }

    /// The certificates of a server started with TLS.
    pub fn certs(&self) -> Option<&TestCerts> {
        self.certs.as_ref()
    }

    /// The directory of its Unix-domain socket (`host=` for a socket
    /// connection): the cluster's temp dir.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// Starts a new cluster with `settings` passed as `-c name=value` (they
    /// override the harness defaults). Blocks until it accepts connections;
    /// panics with the log tail if it cannot start, or with install advice if
    /// the server binaries are missing.
    pub fn start(settings: &[(&str, &str)]) -> PgServer {
        PgServer::start_with(settings, false)
    }

    fn start_with(settings: &[(&str, &str)], tls: bool) -> PgServer {
        let bin = pg_bin_dir();
        let dir = util::new_server_dir("pg", "postgres");
        let data = dir.join("data");
        let watchdog = util::spawn_watchdog(&dir, &data.join("postmaster.pid"), "QUIT");
        // From here on, a panic drops `server`, which stops and removes it.
        let mut server = PgServer {
            dir,
            bin,
            port: 0,
            watchdog,
            certs: None,
        };
        if tls {
            server.certs = Some(write_certs(&server.dir, "postgres"));
        }

        let initdb: Vec<OsString> = vec![
            "-D".into(),
            data.clone().into(),
            "-U".into(),
            "postgres".into(),
            "--auth=trust".into(),
            "--no-sync".into(),
            "--encoding=UTF8".into(),
            "--locale=C".into(),
        ];
        let mut initdb = util::as_user("postgres", &server.bin.join("initdb"), &initdb);
        util::run_setup("initdb", &mut initdb, &server.dir);

        server.launch(settings, None);
        server
    }

    /// Starts the cluster in its data dir with `settings` (see
    /// [`start`](PgServer::start)) on `port`, or on a free port (retried
    /// when another process takes it first).
    fn launch(&mut self, settings: &[(&str, &str)], port: Option<u16>) {
        let log = self.dir.join("postgres.log");
        for attempt in 1..=5 {
            self.port = port.unwrap_or_else(util::free_port);
            let mut opts = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300",
                self.port,
                util::shell_quote(&self.dir.to_string_lossy())
            );
            if util::fast_mode() {
                opts.push_str(" -c fsync=off -c synchronous_commit=off");
            }
            if let Some(certs) = &self.certs {
                for (name, path) in [("ssl_cert_file", &certs.cert), ("ssl_key_file", &certs.key)] {
                    opts.push_str(" -c ");
                    opts.push_str(&util::shell_quote(&format!("{name}={}", path.display())));
                }
                opts.push_str(" -c ssl=on");
            }
            for (name, value) in settings {
                opts.push_str(" -c ");
                opts.push_str(&util::shell_quote(&format!("{name}={value}")));
            }
            let log_file = log.to_string_lossy();
            let out = self
                .pg_ctl(&["-l", &log_file, "-o", &opts, "-w", "-t", "60", "start"])
                .current_dir(&self.dir)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run pg_ctl: {e}"));
            if out.status.success() {
                return;
            }
            let log_tail = util::tail(&log, 30);
            let port_taken = log_tail.contains("Address already in use")
                || log_tail.contains("could not create any TCP/IP sockets");
            if !(port_taken && port.is_none() && attempt < 5) {
                panic!(
                    "PostgreSQL failed to start (pg_ctl {}): {}\n--- {} (tail) ---\n{log_tail}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim(),
                    log.display()
                );
            }
        }
        unreachable!()
    }

    /// A streaming standby of `primary`: a base backup of it
    /// (`pg_basebackup -R -X stream`, which writes `primary_conninfo` and
    /// `standby.signal`) started with `settings` (see
    /// [`start`](PgServer::start)) on `port`, or on a free port. Its own
    /// temp dir and watchdog; stopped and removed on Drop. `auto_conf`
    /// lines are appended to its `postgresql.auto.conf` before it starts:
    /// unlike `-c` settings, `ALTER SYSTEM` can change them later (as an HA
    /// manager does on the standby it promotes). Blocks until it accepts
    /// connections (in recovery).
    pub fn standby_of(
        primary: &PgServer,
        settings: &[(&str, &str)],
        auto_conf: &[(&str, &str)],
        port: Option<u16>,
    ) -> PgServer {
        let dir = util::new_server_dir("pg", "postgres");
        let data = dir.join("data");
        let watchdog = util::spawn_watchdog(&dir, &data.join("postmaster.pid"), "QUIT");
        let mut server = PgServer {
            dir,
            bin: primary.bin.clone(),
            port: 0,
            watchdog,
            certs: None,
        };
        let port_arg = primary.port.to_string();
        let backup: Vec<OsString> = vec![
            "-D".into(),
            data.clone().into(),
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port_arg.into(),
            "-U".into(),
            "postgres".into(),
            "-R".into(),
            "-X".into(),
            "stream".into(),
            "--checkpoint=fast".into(),
            "--no-sync".into(),
        ];
        let mut backup = util::as_user("postgres", &primary.tool("pg_basebackup"), &backup);
        util::run_setup("pg_basebackup", &mut backup, &server.dir);
        if !auto_conf.is_empty() {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("postgresql.auto.conf"))
                .unwrap_or_else(|e| panic!("cannot open postgresql.auto.conf: {e}"));
            for (name, value) in auto_conf {
                writeln!(f, "{name} = '{}'", value.replace('\'', "''"))
                    .unwrap_or_else(|e| panic!("cannot write postgresql.auto.conf: {e}"));
            }
        }
        server.launch(settings, port);
        server
    }

    /// A primary whose commits wait for its synchronous streaming standby
    /// (`synchronous_standby_names='*'`, `synchronous_commit=on`), and that
    /// standby ([`standby_of`](PgServer::standby_of)): `(primary,
    /// standby)`. Blocks until both accept connections; the standby may
    /// still be connecting (`pg_stat_replication` on the primary shows
    /// when it streams), and until it does, commits on the primary wait.
    pub fn start_sync_pair() -> (PgServer, PgServer) {
        let primary = PgServer::start(&[
            ("synchronous_standby_names", "*"),
            ("synchronous_commit", "on"),
        ]);
        let standby = PgServer::standby_of(&primary, &[], &[], None);
        (primary, standby)
    }

    /// `pg_ctl stop -m immediate`: every backend ends at once, without a
    /// checkpoint (as a crash would). The data dir stays until Drop.
    pub fn stop_immediate(&self) {
        let out = self
            .pg_ctl(&["-m", "immediate", "-w", "-t", "30", "stop"])
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run pg_ctl: {e}"));
        assert!(
            out.status.success(),
            "pg_ctl stop -m immediate failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }

    /// `pg_ctl promote -w`: the standby leaves recovery; returns once it
    /// accepts writes.
    pub fn promote(&self) {
        let out = self
            .pg_ctl(&["-w", "-t", "60", "promote"])
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run pg_ctl: {e}"));
        assert!(
            out.status.success(),
            "pg_ctl promote failed: {}\n--- log (tail) ---\n{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            util::tail(&self.dir.join("postgres.log"), 20)
        );
    }

    /// A client program of the server's version: next to `pg_ctl`, else
    /// next to what `initdb` links to (PATH may hold links to some of a
    /// version's programs only), else on PATH. With `PG_BIN_DIR` set, only
    /// in that directory: a program of another release may not work with
    /// the server.
    fn tool(&self, name: &str) -> PathBuf {
        let here = self.bin.join(name);
        if util::is_executable(&here) {
            return here;
        }
        if util::env_nonempty(BIN_DIR_VAR).is_some() {
            panic!(
                "{BIN_DIR_VAR}={} has no {name}: point {BIN_DIR_VAR} at a directory \
                 holding every PostgreSQL program this test runs, or unset it",
                self.bin.display()
            );
        }
        std::fs::canonicalize(self.bin.join("initdb"))
            .ok()
            .and_then(|real| Some(real.parent()?.join(name)))
            .filter(|p| util::is_executable(p))
            .or_else(|| util::find_on_path_or(name, &[]))
            .unwrap_or_else(|| panic!("{name} not found next to {}: {MISSING}", self.bin.display()))
    }

    /// `pg_ctl -D <data dir> args…`, as the `postgres` user when root.
    fn pg_ctl(&self, args: &[&str]) -> std::process::Command {
        let mut all: Vec<OsString> = vec!["-D".into(), self.dir.join("data").into()];
        all.extend(args.iter().map(OsString::from));
        util::as_user("postgres", &self.bin.join("pg_ctl"), &all)
    }

    /// Connection URL: `postgresql://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// TCP port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Temp dir of this cluster (data dir, socket, log); gone after Drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PgServer {
    /// `pg_ctl stop -m immediate` (SIGQUIT to the postmaster if that fails),
    /// then removes the temp dir and retires the watchdog.
    fn drop(&mut self) {
        let pid_file = self.dir.join("data").join("postmaster.pid");
        if pid_file.exists() {
            let stopped = self
                .pg_ctl(&["-m", "immediate", "-w", "-t", "30", "stop"])
                .current_dir("/")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !stopped {
                let pid = std::fs::read_to_string(&pid_file)
                    .ok()
                    .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u32>().ok()));
                if let Some(pid) = pid {
                    util::send_signal(pid, "QUIT");
                    util::wait_pid_gone(pid, 10);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        util::stop_watchdog(&mut self.watchdog);
    }
}

/// The directory of the PostgreSQL programs throwaway clusters start from:
/// `PG_BIN_DIR` when set, else the one holding `initdb` and `pg_ctl` on PATH,
/// else the highest version under `/usr/lib/postgresql/*/bin`. Panics saying
/// what is missing when `PG_BIN_DIR` lacks a server program, or what to
/// install when there is none at all.
pub fn pg_bin_dir() -> PathBuf {
    let Some(dir) = util::env_nonempty(BIN_DIR_VAR) else {
        return find_bin_dir().unwrap_or_else(|| panic!("{MISSING}"));
    };
    let dir = PathBuf::from(dir);
    let missing: Vec<&str> = SERVER_PROGRAMS
        .into_iter()
        .filter(|name| !util::is_executable(&dir.join(name)))
        .collect();
    if !missing.is_empty() {
        panic!(
            "{BIN_DIR_VAR}={} lacks {} (no such executable file there): point \
             {BIN_DIR_VAR} at the bin directory of a PostgreSQL build (`bash .ci/postgres 18` \
             fetches one and prints it), or unset it to use the installed PostgreSQL",
            dir.display(),
            missing.join(", ")
        );
    }
    dir
}

/// Directory holding `initdb` and `pg_ctl`: from PATH, else the highest
/// version under `/usr/lib/postgresql/*/bin`.
fn find_bin_dir() -> Option<PathBuf> {
    if let (Some(initdb), Some(_)) = (
        util::find_on_path_or("initdb", &[]),
        util::find_on_path_or("pg_ctl", &[]),
    ) {
        let dir = initdb.parent()?.to_path_buf();
        if util::is_executable(&dir.join("pg_ctl")) {
            return Some(dir);
        }
    }
    let mut best: Option<(Vec<u32>, PathBuf)> = None;
    for entry in std::fs::read_dir("/usr/lib/postgresql").ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(version) = name
            .split('.')
            .map(str::parse::<u32>)
            .collect::<Result<Vec<u32>, _>>()
        else {
            continue;
        };
        let bin = entry.path().join("bin");
        if util::is_executable(&bin.join("initdb"))
            && util::is_executable(&bin.join("pg_ctl"))
            && best.as_ref().is_none_or(|(v, _)| version > *v)
        {
            best = Some((version, bin));
        }
    }
    best.map(|(_, bin)| bin)
}
