//! MariaDB half of the harness: the shared server ([`mysql_url`]), fresh
//! databases ([`mysql_fresh_db`]) and owned throwaway servers ([`MysqlServer`]).

use super::certs::{TestCerts, write_certs};
use super::util;
use mysql_async::prelude::Queryable;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to tell a user whose machine lacks the server binaries.
const MISSING: &str = "MariaDB server binaries (mariadb-install-db, mariadbd) not found on PATH \
    or in /usr/sbin, /usr/bin: install the Debian package `mariadb-server` \
    (apt-get install mariadb-server) or set MYSQL_URL to a running server";

/// How long a throwaway server may take to accept `SELECT 1`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The shared throwaway server of this process, or `MYSQL_URL`'s server.
static SHARED: util::Shared<MysqlServer> = util::Shared::new();

/// The shared TLS server of this process (see [`mysql_tls_server`]).
static SHARED_TLS: std::sync::OnceLock<MysqlServer> = std::sync::OnceLock::new();

/// A throwaway MariaDB with TLS on (`ssl_cert` / `ssl_key` / `ssl_ca`, a
/// certificate for 127.0.0.1 and localhost signed by a throwaway CA:
/// [`MysqlServer::certs`]), started once per process on first use, for the
/// TLS tests. Plain connections are accepted too. Always a throwaway:
/// `MYSQL_URL` does not apply.
pub fn mysql_tls_server() -> &'static MysqlServer {
    SHARED_TLS.get_or_init(|| MysqlServer::start_tls(&[]))
}

/// A new, uniquely named database on [`mysql_tls_server`]: its URL (no
/// TLS parameters).
pub async fn mysql_tls_fresh_db() -> String {
    let base = mysql_tls_server().url();
    let name = util::unique_db_name();
    let mut admin = connect(&base).await;
    admin
        .query_drop(format!("CREATE DATABASE `{name}`"))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name} failed: {e}"));
    let _ = admin.disconnect().await;
    util::with_database(&base, &name)
}

/// MariaDB/MySQL server for this process: the `MYSQL_URL` environment
/// variable if set (`mysql://root@127.0.0.1:3306/test` style), else a
/// throwaway `mariadbd` started once per process (even when many tests ask at
/// once) and removed when the process exits. The throwaway URL looks like
/// `mysql://root@127.0.0.1:PORT/test` (root, empty password).
///
/// Blocks while the server starts (about 2 s): call it before awaiting.
pub fn mysql_url() -> String {
    SHARED.url("MYSQL_URL", || MysqlServer::start(&[]), MysqlServer::url)
}

/// Creates a new, uniquely named database (`bp_<pid>_<counter>_<nanos>`) on
/// the [`mysql_url`] server and returns a URL for it, so a test never depends
/// on state left by another.
///
/// On an external server (`MYSQL_URL`), the first call in a process also
/// drops `bp_<pid>_…` databases whose process no longer exists on this
/// machine (leftovers of earlier runs), unless `BATCHPOOL_KEEP_DBS=1`.
pub async fn mysql_fresh_db() -> String {
    let base = mysql_url();
    let mut conn = connect(&base).await;
    let url = SHARED.fresh_db("MYSQL_URL", &base, &mut conn).await;
    let _ = conn.disconnect().await;
    url
}

impl util::DbAdmin for mysql_async::Conn {
    const TEST_DBS: &'static str = "SHOW DATABASES LIKE 'bp\\_%'";
    const QUOTE: char = '`';

    async fn names(&mut self, sql: &str) -> Vec<String> {
        self.query(sql).await.unwrap_or_default()
    }

    async fn run(&mut self, sql: &str) -> Result<(), String> {
        self.query_drop(sql).await.map_err(|e| e.to_string())
    }
}

/// The server's version string (`SELECT VERSION()`), for bench reports.
pub async fn mysql_version(url: &str) -> String {
    let mut conn = connect(url).await;
    let v: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .unwrap_or_else(|e| panic!("SELECT VERSION() on {} failed: {e}", util::redact(url)));
    let _ = conn.disconnect().await;
    v.unwrap_or_default()
}

/// Runs one statement on a connection of its own (a `SET GLOBAL`, a
/// `CREATE USER`), panicking with the statement and the error on failure.
pub async fn mysql_exec(url: &str, sql: &str) {
    let mut conn = connect(url).await;
    conn.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = conn.disconnect().await;
}

/// Opens one connection, panicking with a readable message on failure.
async fn connect(url: &str) -> mysql_async::Conn {
    let opts = mysql_async::Opts::from_url(url)
        .unwrap_or_else(|e| panic!("bad MySQL URL {}: {e}", util::redact(url)));
    mysql_async::Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to MySQL at {}: {e}", util::redact(url)))
}

/// A throwaway MariaDB server owned by the caller, started with extra
/// `mariadbd` arguments (e.g. `&["--max-allowed-packet=65536"]`); stopped and
/// removed on Drop, and by a watchdog process if this process exits without
/// dropping it (panic, `exit`).
///
/// It listens on 127.0.0.1 only, on a free port, with its unix socket in its
/// own temp dir; user `root` with an empty password; database `test`;
/// `max_connections=300`, `local_infile=1`, utf8mb4 (as Debian configures
/// its server). Durable settings unless `BATCHPOOL_FAST_SERVER=1` (then
/// `innodb_flush_log_at_trx_commit=2`, no doublewrite, no binlog).
pub struct MysqlServer {
    /// Temp dir holding `data/`, the socket, pid file and `mariadbd.log`.
    dir: PathBuf,
    /// TCP port on 127.0.0.1.
    port: u16,
    /// The running `mariadbd`.
    child: Option<Child>,
    /// The process that cleans up if this process dies first.
    watchdog: Option<Child>,
    /// TLS: the certificates it presents.
    certs: Option<TestCerts>,
    /// How it was started (binary, arguments), for [`restart`](MysqlServer::restart).
    command: Option<(PathBuf, Vec<OsString>)>,
}

impl MysqlServer {
    /// [`start`](MysqlServer::start) with TLS on: `--ssl-cert`, `--ssl-key`
    /// and `--ssl-ca` of a fresh certificate for 127.0.0.1 and localhost,
    /// signed by a fresh CA ([`certs`](MysqlServer::certs)). Plain
    /// connections are still accepted.
    pub fn start_tls(extra_args: &[&str]) -> MysqlServer {
        MysqlServer::start_with(extra_args, true)
    }

    /// The certificates of a server started with TLS.
    pub fn certs(&self) -> Option<&TestCerts> {
        self.certs.as_ref()
    }

    /// Its Unix-domain socket (`socket=` for a socket connection).
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join("mysql.sock")
    }

    /// Starts a new server with `extra_args` appended to the `mariadbd`
    /// command line (so they override the harness defaults). Blocks until a
    /// TCP connection as root runs `SELECT 1`; panics with the log tail if it
    /// cannot start within 60 s, or with install advice if binaries are missing.
    pub fn start(extra_args: &[&str]) -> MysqlServer {
        MysqlServer::start_with(extra_args, false)
    }

    fn start_with(extra_args: &[&str], tls: bool) -> MysqlServer {
        let sbin = [
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/usr/local/sbin",
            "/usr/local/bin",
        ];
        let (Some(install_db), Some(mariadbd)) = (
            util::find_on_path_or("mariadb-install-db", &sbin),
            util::find_on_path_or("mariadbd", &sbin),
        ) else {
            panic!("{MISSING}");
        };
        let dir = util::new_server_dir("my", "mysql");
        let data = dir.join("data");
        let pid_file = dir.join("server.pid");
        let watchdog = util::spawn_watchdog(&dir, &pid_file, "KILL");
        // From here on, a panic drops `server`, which stops and removes it.
        let mut server = MysqlServer {
            dir,
            port: 0,
            child: None,
            watchdog,
            certs: None,
            command: None,
        };
        if tls {
            server.certs = Some(write_certs(&server.dir, "mysql"));
        }
        let root = util::is_root();

        // A private tmpdir: concurrent servers sharing /tmp clash on
        // temporary-table files during bootstrap.
        let tmp = server.dir.join("tmp");
        util::create_owned_dir(&tmp, "mysql");

        let mut install = Command::new(&install_db);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .env("TMPDIR", &tmp)
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            // Grants by IP, and no slow hostname lookup during bootstrap.
            .arg("--skip-name-resolve");
        if root {
            install.arg("--user=mysql");
        }
        util::run_setup("mariadb-install-db", &mut install, &server.dir);

        let log = server.dir.join("mariadbd.log");
        for attempt in 1..=5 {
            server.port = util::free_port();
            let mut args: Vec<OsString> = vec![
                "--no-defaults".into(),
                format!("--datadir={}", data.display()).into(),
                format!("--port={}", server.port).into(),
                "--bind-address=127.0.0.1".into(),
                format!("--socket={}", server.dir.join("mysql.sock").display()).into(),
                format!("--pid-file={}", server.dir.join("mariadbd.pid").display()).into(),
                format!("--log-error={}", log.display()).into(),
                format!("--tmpdir={}", tmp.display()).into(),
                "--skip-name-resolve".into(),
                "--max-connections=300".into(),
                "--local-infile=1".into(),
                "--character-set-server=utf8mb4".into(),
                "--collation-server=utf8mb4_general_ci".into(),
            ];
            if root {
                args.push("--user=mysql".into());
            }
            if util::fast_mode() {
                for a in [
                    "--innodb-flush-log-at-trx-commit=2",
                    "--innodb-doublewrite=0",
                    "--skip-log-bin",
                ] {
                    args.push(a.into());
                }
            }
            if let Some(certs) = &server.certs {
                args.push(format!("--ssl-cert={}", certs.cert.display()).into());
                args.push(format!("--ssl-key={}", certs.key.display()).into());
                args.push(format!("--ssl-ca={}", certs.ca.display()).into());
            }
            args.extend(extra_args.iter().map(OsString::from));
            let _ = std::fs::remove_file(&log);
            let out_file = server.dir.join("mariadbd.out");
            let child = spawn_detached(&mariadbd, &args, &server.dir, &tmp, &out_file)
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", mariadbd.display()));
            let _ = std::fs::write(&pid_file, format!("{}\n", child.id()));
            server.child = Some(child);

            match server.wait_ready() {
                Ok(()) => {
                    server.command = Some((mariadbd, args));
                    return server;
                }
                Err(why) => {
                    server.kill();
                    let log_tail =
                        format!("{}\n{}", util::tail(&out_file, 10), util::tail(&log, 30));
                    let port_taken = log_tail.contains("Address already in use")
                        || log_tail.contains("Bind on TCP/IP port");
                    if !(port_taken && attempt < 5) {
                        panic!(
                            "MariaDB failed to start ({why}); args {args:?}\n--- {} (tail) ---\n{log_tail}",
                            log.display()
                        );
                    }
                }
            }
        }
        unreachable!()
    }

    /// Connection URL: `mysql://root@127.0.0.1:PORT/test`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// TCP port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Temp dir of this server (data dir, socket, log); gone after Drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Polls until root can run `SELECT 1` over TCP (then creates database
    /// `test`), the process exits, or the timeout passes. Runs its own
    /// runtime on a scoped thread, so it works inside any tokio runtime.
    fn wait_ready(&mut self) -> Result<(), String> {
        let port = self.port;
        let child = self.child.as_mut().expect("mariadbd spawned");
        std::thread::scope(|s| {
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot build a tokio runtime: {e}"))?;
                let url = format!("mysql://root@127.0.0.1:{port}");
                let deadline = Instant::now() + START_TIMEOUT;
                loop {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!("mariadbd exited with {status}"));
                    }
                    let attempt = rt.block_on(async {
                        let fut = async {
                            let opts =
                                mysql_async::Opts::from_url(&url).map_err(|e| e.to_string())?;
                            let mut conn = mysql_async::Conn::new(opts)
                                .await
                                .map_err(|e| e.to_string())?;
                            let one: Option<i64> = conn
                                .query_first("SELECT 1")
                                .await
                                .map_err(|e| e.to_string())?;
                            if one != Some(1) {
                                return Err(format!("SELECT 1 returned {one:?}"));
                            }
                            conn.query_drop("CREATE DATABASE IF NOT EXISTS test")
                                .await
                                .map_err(|e| e.to_string())?;
                            let _ = conn.disconnect().await;
                            Ok::<(), String>(())
                        };
                        tokio::time::timeout(Duration::from_secs(5), fut)
                            .await
                            .unwrap_or_else(|_| Err("connect timed out".into()))
                    });
                    let last_err = match attempt {
                        Ok(()) => return Ok(()),
                        Err(e) => e,
                    };
                    if Instant::now() > deadline {
                        return Err(format!("not ready after {START_TIMEOUT:?}: {last_err}"));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .join()
            .unwrap_or_else(|_| Err("readiness thread panicked".into()))
        })
    }

    /// Kills `mariadbd` with SIGKILL (as a crash: no shutdown, the data
    /// dir stays as it was) and reaps it; [`restart`](MysqlServer::restart)
    /// starts it again.
    pub fn sigkill(&mut self) {
        self.kill();
    }

    /// Whether `mariadbd` is running (not killed by
    /// [`sigkill`](MysqlServer::sigkill), nor exited on its own).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Starts `mariadbd` again on the same data dir and port, with the
    /// arguments it was first started with except those in `drop_args`
    /// (e.g. `--wsrep-new-cluster`), after [`sigkill`](MysqlServer::sigkill).
    /// Blocks until it accepts `SELECT 1` (up to 60 s); panics with the
    /// log tail if it does not.
    pub fn restart(&mut self, drop_args: &[&str]) {
        assert!(self.child.is_none(), "restart a server that is not running");
        let (mariadbd, args) = self.command.clone().expect("a server that started once");
        let args: Vec<OsString> = args
            .into_iter()
            .filter(|a| !drop_args.iter().any(|d| a == d))
            .collect();
        let tmp = self.dir.join("tmp");
        let out_file = self.dir.join("mariadbd.out");
        let child = spawn_detached(&mariadbd, &args, &self.dir, &tmp, &out_file)
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", mariadbd.display()));
        let _ = std::fs::write(self.dir.join("server.pid"), format!("{}\n", child.id()));
        self.child = Some(child);
        if let Err(why) = self.wait_ready() {
            let log = self.dir.join("mariadbd.log");
            panic!(
                "MariaDB did not restart ({why})\n{}\n{}",
                util::tail(&out_file, 10),
                util::tail(&log, 40)
            );
        }
    }

    /// Kills `mariadbd` (SIGKILL: the data is thrown away) and reaps it.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for MysqlServer {
    /// Kills `mariadbd`, removes the temp dir and retires the watchdog.
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        util::stop_watchdog(&mut self.watchdog);
    }
}

/// Spawns a server process with stdout/stderr to `out` and no pipes of ours
/// (so nothing waits on it for EOF), in its own process group (so a Ctrl-C
/// aimed at the tests does not reach it; the watchdog stops it instead).
fn spawn_detached(
    program: &Path,
    args: &[OsString],
    cwd: &Path,
    tmp: &Path,
    out: &Path,
) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::File::create(out)?;
    Command::new(program)
        .args(args)
        .current_dir(cwd)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()
}
