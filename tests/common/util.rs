//! Process, port, directory and URL helpers shared by the PostgreSQL and
//! MariaDB halves of the harness. Only std is used here.

use std::ffi::OsString;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Counter that makes temp dir and database names unique within a process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Longest unix socket path we allow (`sun_path` is 108 bytes on Linux,
/// minus room for PostgreSQL's `.s.PGSQL.NNNNN.lock` suffix).
const MAX_SOCKET_DIR_LEN: usize = 80;

/// True when this process runs as root (`id -u` prints 0). Computed once.
pub fn is_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .stderr(Stdio::null())
            .output()
            .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false)
    })
}

/// True when `BATCHPOOL_FAST_SERVER` is `1`/`true`/`yes`: throwaway servers
/// then trade durability for speed. Off by default so benches stay honest.
pub fn fast_mode() -> bool {
    matches!(
        std::env::var("BATCHPOOL_FAST_SERVER")
            .as_deref()
            .map(str::trim),
        Ok("1") | Ok("true") | Ok("yes")
    )
}

/// The value of an environment variable, or `None` when unset or blank.
pub fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A server connection, as [`Shared::fresh_db`] uses it.
pub trait DbAdmin {
    /// The query listing databases named like [`unique_db_name`]'s (`bp_…`).
    const TEST_DBS: &'static str;
    /// How the server quotes identifiers.
    const QUOTE: char;
    /// Appended to `DROP DATABASE` of a leftover database, to end sessions
    /// still on it (PostgreSQL's ` WITH (FORCE)`: an external PgBouncer
    /// keeps idle server connections to the databases of finished test
    /// processes, which would block the drop).
    const DROP_FORCE: &'static str = "";
    /// Runs `sql`, returning the first column of every row.
    fn names(&mut self, sql: &str) -> impl std::future::Future<Output = Vec<String>>;
    /// Runs a statement.
    fn run(&mut self, sql: &str) -> impl std::future::Future<Output = Result<(), String>>;
}

/// The shared server of a process (a throwaway one, started on first use,
/// never dropped: its watchdog removes it when the process exits), unless
/// the environment names one.
pub struct Shared<S> {
    server: OnceLock<S>,
    swept: std::sync::atomic::AtomicBool,
}

impl<S> Shared<S> {
    pub const fn new() -> Shared<S> {
        Shared {
            server: OnceLock::new(),
            swept: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The URL in `url_var`, else that of the throwaway server.
    pub fn url(
        &self,
        url_var: &str,
        start: impl FnOnce() -> S,
        url: impl Fn(&S) -> String,
    ) -> String {
        env_nonempty(url_var).unwrap_or_else(|| url(self.server.get_or_init(start)))
    }

    /// Creates a new, uniquely named database through `admin` on the
    /// server of `base` and returns a connection string for it. On an
    /// external server (`url_var` set), the first call in a process first
    /// drops the databases of processes that no longer exist, unless
    /// `BATCHPOOL_KEEP_DBS=1`.
    pub async fn fresh_db<A: DbAdmin>(&self, url_var: &str, base: &str, admin: &mut A) -> String {
        let q = A::QUOTE;
        if env_nonempty(url_var).is_some()
            && env_nonempty("BATCHPOOL_KEEP_DBS").is_none()
            && !self.swept.swap(true, Ordering::SeqCst)
        {
            for name in admin.names(A::TEST_DBS).await {
                if is_stale_db_name(&name) {
                    let _ = admin
                        .run(&format!(
                            "DROP DATABASE IF EXISTS {q}{name}{q}{}",
                            A::DROP_FORCE
                        ))
                        .await;
                }
            }
        }
        let name = unique_db_name();
        if let Err(e) = admin.run(&format!("CREATE DATABASE {q}{name}{q}")).await {
            panic!("CREATE DATABASE {name} on {} failed: {e}", redact(base));
        }
        with_database(base, &name)
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago, taken from outside
/// the kernel's range for outgoing connections
/// (`/proc/sys/net/ipv4/ip_local_port_range`): a port from that range can
/// be taken by any of the suite's thousands of client connections between
/// this call and the server's bind, which a server whose ports are fixed
/// before it starts (a Galera node's group and state-transfer ports, a
/// node restarted on its old ports) cannot retry. Ports are handed out in
/// turn from a per-process starting point, each checked by binding it;
/// callers of a server that picks its own port still retry on a collision.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (lo, hi) = ports_outside_ephemeral();
    let span = u32::from(hi - lo) + 1;
    let start = (std::process::id().wrapping_mul(7_919) ^ (now_nanos() as u32)) % span;
    let _ = NEXT.compare_exchange(0, start + 1, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::SeqCst) % span;
        let port = lo + n as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot bind a free port on 127.0.0.1: {e}"))
}

/// The larger run of ports below or above the kernel's range for outgoing
/// connections, leaving out the privileged ports and those of the usual
/// local servers (below 10000).
fn ports_outside_ephemeral() -> (u16, u16) {
    let (eph_lo, eph_hi) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32_768, 60_999));
    let below = (10_000u16, eph_lo.saturating_sub(1));
    let above = (eph_hi.saturating_add(1), u16::MAX);
    let len = |(a, b): (u16, u16)| if b >= a { u32::from(b - a) + 1 } else { 0 };
    if len(below) >= len(above) && len(below) >= 1_000 {
        below
    } else if len(above) >= 1_000 {
        above
    } else {
        (10_000, u16::MAX)
    }
}

/// Nanoseconds since the Unix epoch (for unique names).
pub fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A database name that is unique on the server: `bp_<pid>_<counter>_<nanos>`.
pub fn unique_db_name() -> String {
    format!(
        "bp_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        now_nanos()
    )
}

/// True for a name made by [`unique_db_name`] in a process that no longer
/// exists on this machine (so the database is a leftover that may be dropped).
pub fn is_stale_db_name(name: &str) -> bool {
    let mut parts = name.split('_');
    if parts.next() != Some("bp") {
        return false;
    }
    let rest: Vec<&str> = parts.collect();
    if rest.len() != 3
        || !rest
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    match rest[0].parse::<u32>() {
        Ok(pid) => pid != std::process::id() && !pid_alive(pid),
        Err(_) => false,
    }
}

/// Whether a process id is alive on this machine. Without `/proc` we cannot
/// tell, and answer `true` so nothing is ever dropped by mistake.
pub fn pid_alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Creates a fresh, empty directory for a throwaway server under
/// `std::env::temp_dir()` (or `/tmp` when that path would make the unix
/// socket path too long). When running as root it is chowned to `owner`
/// (the system user the server runs as) and checked to be usable by it.
pub fn new_server_dir(kind: &str, owner: &str) -> PathBuf {
    let mut base = std::env::temp_dir();
    if base.as_os_str().len() > MAX_SOCKET_DIR_LEN - 40 {
        base = PathBuf::from("/tmp");
    }
    let dir = loop {
        let candidate = base.join(format!(
            "bp-{kind}-{}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            now_nanos() % 1_000_000_000
        ));
        match std::fs::create_dir(&candidate) {
            Ok(()) => break candidate,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!(
                "cannot create server directory {}: {e}",
                candidate.display()
            ),
        }
    };
    if is_root() {
        let st = Command::new("chown").arg(owner).arg(&dir).status();
        if !matches!(st, Ok(s) if s.success()) {
            let _ = std::fs::remove_dir_all(&dir);
            panic!(
                "`chown {owner} {}` failed: does the system user `{owner}` exist?",
                dir.display()
            );
        }
        let ok = as_user(
            owner,
            Path::new("test"),
            &["-w".into(), dir.clone().into_os_string()],
        )
        .current_dir("/")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
        if !ok {
            let _ = std::fs::remove_dir_all(&dir);
            panic!(
                "the `{owner}` user cannot write {} (is a parent directory private?): \
                 point TMPDIR at a directory every user can traverse, e.g. TMPDIR=/tmp",
                dir.display()
            );
        }
    }
    dir
}

/// Creates directory `path` and, when running as root, chowns it to `owner`.
pub fn create_owned_dir(path: &Path, owner: &str) {
    std::fs::create_dir_all(path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    if is_root() {
        let _ = Command::new("chown").arg(owner).arg(path).status();
    }
}

/// Runs a setup command (`initdb`, `mariadb-install-db`) in `dir` to its
/// end; panics with the tail of its output if it fails.
pub fn run_setup(what: &str, command: &mut Command, dir: &Path) {
    let out = command
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            tail_str(&String::from_utf8_lossy(&out.stdout), 20),
            tail_str(&String::from_utf8_lossy(&out.stderr), 20)
        );
    }
}

/// Quotes a string for `sh` (single quotes; embedded ones escaped).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A command that runs `program args` as the system user `user` when this
/// process is root (`runuser -u user --`, falling back to `su user -s /bin/sh -c`),
/// or directly otherwise.
pub fn as_user(user: &str, program: &Path, args: &[OsString]) -> Command {
    if !is_root() {
        let mut c = Command::new(program);
        c.args(args);
        return c;
    }
    if let Some(runuser) = find_on_path_or("runuser", &["/usr/sbin", "/sbin", "/usr/bin", "/bin"]) {
        let mut c = Command::new(runuser);
        c.arg("-u").arg(user).arg("--").arg(program).args(args);
        return c;
    }
    let mut line = format!("exec {}", shell_quote(&program.to_string_lossy()));
    for a in args {
        line.push(' ');
        line.push_str(&shell_quote(&a.to_string_lossy()));
    }
    let mut c = Command::new("su");
    c.arg(user).arg("-s").arg("/bin/sh").arg("-c").arg(line);
    c
}

/// Finds an executable named `name` on `PATH`, else in one of `extra_dirs`.
pub fn find_on_path_or(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(extra_dirs.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// Whether `p` is a regular file with an execute bit.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The last `n` lines of a (log) file, or a note that it could not be read.
pub fn tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => tail_str(&String::from_utf8_lossy(&bytes), n),
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// The last `n` lines of a string.
pub fn tail_str(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Spawns a detached `sh` watchdog: while process `watched_pid` lives and
/// `dir` exists it sleeps (polling every 0.5 s); once the watched process is
/// gone it sends `signal` to the pid written on the first line of `pid_file`
/// (if any), waits up to ~10 s for that process to go, then `rm -rf dir`.
/// If `dir` disappears first (the owner cleaned up), it just exits.
/// It runs in its own process group so a Ctrl-C aimed at the test does not
/// kill it, and holds no pipe of ours so nobody waits on it for EOF.
pub fn spawn_watchdog(dir: &Path, pid_file: &Path, signal: &str) -> Option<Child> {
    use std::os::unix::process::CommandExt;
    let d = shell_quote(&dir.to_string_lossy());
    let f = shell_quote(&pid_file.to_string_lossy());
    // `alive` treats a zombie (dead, not yet reaped by init) as gone.
    let script = format!(
        "alive() {{ kill -0 \"$1\" 2>/dev/null && ! grep -q ') Z ' /proc/\"$1\"/stat 2>/dev/null; }}\n\
         while alive {me} && [ -d {d} ]; do sleep 0.5; done\n\
         [ -d {d} ] || exit 0\n\
         p=$(head -n 1 {f} 2>/dev/null | tr -dc 0-9)\n\
         if [ -n \"$p\" ]; then\n\
           kill -{signal} \"$p\" 2>/dev/null\n\
           i=0; while alive \"$p\" && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n\
         fi\n\
         rm -rf {d}\n",
        me = std::process::id(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()
}

/// Stops a watchdog that is no longer needed and reaps it.
pub fn stop_watchdog(w: &mut Option<Child>) {
    if let Some(mut c) = w.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Sends `signal` (e.g. "QUIT", "KILL") to `pid` with the `kill` command.
pub fn send_signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Waits (up to `secs` seconds) until `pid` no longer exists.
pub fn wait_pid_gone(pid: u32, secs: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while pid_alive(pid) && !is_zombie(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Whether `pid` is a zombie (exited, not yet reaped): it holds no files.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Replaces the database of a connection string: the path of a URL
/// (`scheme://authority/db?query`, any `dbname=` query parameter removed),
/// or, for a libpq `key=value` string, appends `dbname=db` (the last one wins).
pub fn with_database(conn: &str, db: &str) -> String {
    let Some(scheme_end) = conn.find("://") else {
        return format!("{} dbname={db}", conn.trim_end());
    };
    let (base, query) = match conn.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (conn, None),
    };
    let after = &base[scheme_end + 3..];
    let authority = after.split('/').next().unwrap_or("");
    let mut out = format!("{}{}/{db}", &base[..scheme_end + 3], authority);
    if let Some(q) = query {
        let kept: Vec<&str> = q
            .split('&')
            .filter(|kv| !kv.is_empty() && !kv.starts_with("dbname="))
            .collect();
        if !kept.is_empty() {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
    }
    out
}

/// A connection string with any password replaced by `***`, for messages.
pub fn redact(conn: &str) -> String {
    if let Some(scheme_end) = conn.find("://") {
        let after = &conn[scheme_end + 3..];
        let auth_end = after.find(['/', '?']).unwrap_or(after.len());
        if let Some(at) = after[..auth_end].rfind('@') {
            if let Some(colon) = after[..at].find(':') {
                return format!(
                    "{}{}:***{}",
                    &conn[..scheme_end + 3],
                    &after[..colon],
                    &after[at..]
                );
            }
        }
        return conn.to_string();
    }
    conn.split_whitespace()
        .map(|kv| {
            if kv.starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
