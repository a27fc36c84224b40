//! Tests of the test-server harness itself (tests/common), against real
//! servers: the shared ones (throwaway, or PG_URL / MYSQL_URL when set) and
//! owned throwaway ones.

use crate::common::backend::{DbError, TestBackend, both};
use crate::common::*;
#[cfg(feature = "mysql")]
use mysql_async::prelude::Queryable;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

#[cfg(feature = "postgres")]
async fn pg(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

#[cfg(feature = "mysql")]
async fn my(url: &str) -> mysql_async::Conn {
    mysql_async::Conn::new(mysql_async::Opts::from_url(url).unwrap())
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

#[cfg(feature = "postgres")]
async fn pg_show(c: &tokio_postgres::Client, name: &str) -> String {
    c.query_one(&format!("SHOW {name}"), &[])
        .await
        .unwrap()
        .get(0)
}

fn port_refuses(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_err()
}

/// Command lines of live (non-zombie) processes that mention `needle`, read
/// from /proc (no `ps` needed): the server processes of a temp dir, and, with
/// `watchdogs`, its `sh -c` watchdog too.
fn processes_mentioning(needle: &str, watchdogs: bool) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(path.join("stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if !zombie && cmdline.contains(needle) && (watchdogs || !cmdline.starts_with("sh -c")) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// The server's process is visible, and dropping `server` stops it, frees
/// its port and removes its dir.
fn removed_on_drop<S>(kind: &str, server: S, dir: &Path, port: u16) {
    let procs = processes_mentioning(&dir.to_string_lossy(), false);
    assert!(
        !procs.is_empty(),
        "the server process must be visible before drop"
    );
    let t = Instant::now();
    drop(server);
    eprintln!("{kind} drop took {:?}", t.elapsed());
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
    assert!(
        port_refuses(port),
        "port {port} still accepts connections after drop"
    );
    let procs = processes_mentioning(&dir.to_string_lossy(), true);
    assert!(procs.is_empty(), "still running after drop: {procs:?}");
}

both! {
    (flavor = "current_thread") => [
        shared_server_answers_select_1,
        fresh_dbs_are_distinct_and_isolated,
        fresh_dbs_many_concurrently,
    ],
}

/// The rows of `sql` on `admin`, as text.
async fn rows<B: TestBackend>(admin: &mut B::Admin, sql: &str) -> Vec<Vec<Option<String>>> {
    B::admin_rows(admin, sql)
        .await
        .unwrap_or_else(|(code, e)| panic!("{sql}: {code} {e}"))
}

/// The name of the database `url` connects to.
async fn current_database<B: TestBackend>(url: &str) -> String {
    let sql = B::pick("SELECT current_database()", "SELECT DATABASE()");
    let rows = rows::<B>(&mut B::admin(url).await, sql).await;
    rows[0][0].clone().expect("a database")
}

async fn shared_server_answers_select_1<B: TestBackend>() {
    let url = B::url();
    assert_eq!(url, B::url(), "the URL is stable within a process");
    let one = rows::<B>(&mut B::admin(&url).await, "SELECT 1").await;
    assert_eq!(one, [[Some("1".to_string())]]);
    let v = B::version(&url).await;
    let looks_right = B::pick(
        v.starts_with("PostgreSQL "),
        v.contains("MariaDB") || v.chars().next().is_some_and(|c| c.is_ascii_digit()),
    );
    assert!(looks_right, "{v}");
    eprintln!("{} url={url} version={v}", B::NAME);
}

async fn fresh_dbs_are_distinct_and_isolated<B: TestBackend>() {
    let a = B::fresh_db().await;
    let b = B::fresh_db().await;
    assert_ne!(a, b);
    let (da, db) = (
        current_database::<B>(&a).await,
        current_database::<B>(&b).await,
    );
    assert_ne!(da, db);
    assert!(da.starts_with("bp_") && db.starts_with("bp_"), "{da} {db}");
    let (mut ca, mut cb) = (B::admin(&a).await, B::admin(&b).await);
    B::admin_run(&mut ca, "CREATE TABLE t (x INT); INSERT INTO t VALUES (1)").await;
    let n = rows::<B>(&mut ca, "SELECT count(*) FROM t").await;
    assert_eq!(n, [[Some("1".to_string())]]);
    let absent = B::pick(
        "SELECT to_regclass('public.t') IS NULL",
        "SELECT COUNT(*) = 0 FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = 't'",
    );
    let yes = B::pick("t", "1").to_string();
    assert_eq!(
        rows::<B>(&mut cb, absent).await,
        [[Some(yes)]],
        "table t from {da} must not exist in {db}"
    );
    let (code, e) = B::admin_rows(&mut cb, "SELECT * FROM t").await.unwrap_err();
    assert_eq!(code, B::codes(DbError::NoSuchTable).1, "{e}");
}

async fn fresh_dbs_many_concurrently<B: TestBackend>() {
    let created: Vec<_> = (0..8).map(|_| tokio::spawn(B::fresh_db())).collect();
    let mut names = Vec::new();
    for url in created {
        names.push(current_database::<B>(&url.await.unwrap()).await);
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 8);
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn pg_server_applies_settings_and_is_removed_on_drop() {
    let t = Instant::now();
    let server = PgServer::start(&[
        ("max_connections", "42"),
        ("application_name", "bp harness 'quoted'"),
    ]);
    eprintln!("PgServer::start took {:?}", t.elapsed());
    let (dir, port) = (server.dir().to_path_buf(), server.port());
    assert!(server.url().starts_with("postgresql://postgres@127.0.0.1:"));
    assert!(
        dir.starts_with(std::env::temp_dir()) || dir.starts_with("/tmp"),
        "{}",
        dir.display()
    );
    {
        let c = pg(&server.url()).await;
        assert_eq!(pg_show(&c, "max_connections").await, "42");
        assert_eq!(pg_show(&c, "application_name").await, "bp harness 'quoted'");
        assert_eq!(pg_show(&c, "listen_addresses").await, "127.0.0.1");
        assert_eq!(
            pg_show(&c, "unix_socket_directories").await,
            dir.to_string_lossy()
        );
        let durable = if fast_server() { "off" } else { "on" };
        assert_eq!(pg_show(&c, "fsync").await, durable);
        assert_eq!(pg_show(&c, "synchronous_commit").await, durable);
        assert_eq!(pg_show(&c, "server_encoding").await, "UTF8");
        // The unix socket lives in the temp dir, not in /var/run/postgresql.
        assert!(dir.join(format!(".s.PGSQL.{port}")).exists());
        let v = pg_version(&server.url()).await;
        assert!(v.starts_with("PostgreSQL "), "{v}");
        // The server runs the programs of the harness's bin directory
        // (`PG_BIN_DIR` when set): its version is theirs.
        let bin = pg_bin_dir();
        let out = std::process::Command::new(bin.join("postgres"))
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{}/postgres --version: {e}", bin.display()));
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        // `postgres (PostgreSQL) 12.22`, Debian's with ` (Debian 15.14-…)` after it.
        let release = printed.split_whitespace().nth(2).unwrap_or_default();
        let running = pg_show(&c, "server_version").await;
        assert!(
            !release.is_empty() && running.split_whitespace().next() == Some(release),
            "server_version {running:?}, but {}/postgres --version printed {printed:?}",
            bin.display()
        );
    }
    removed_on_drop("PgServer", server, &dir, port);
}

/// Marks the child process of [`pg_bin_dir_lacking_programs_fails_naming_them`].
#[cfg(feature = "postgres")]
const BIN_DIR_CHILD_ENV: &str = "BP_HARNESS_BIN_DIR_CHILD";

/// `PG_BIN_DIR` naming a directory without the server programs fails a test
/// that starts a server, naming what is missing: no skip, and no falling
/// back to the installed PostgreSQL. The test runs itself in a child process
/// with `PG_BIN_DIR` set to a directory holding only `pg_ctl`.
#[cfg(feature = "postgres")]
#[test]
fn pg_bin_dir_lacking_programs_fails_naming_them() {
    if std::env::var_os(BIN_DIR_CHILD_ENV).is_some() {
        let server = PgServer::start(&[]);
        println!("started a server from {}", server.dir().display());
        return;
    }
    let bin = tempfile::tempdir().unwrap();
    let pg_ctl = bin.path().join("pg_ctl");
    std::fs::write(&pg_ctl, "#!/bin/sh\nexit 1\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pg_ctl, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "harness::pg_bin_dir_lacking_programs_fails_naming_them",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BIN_DIR_CHILD_ENV, "1")
        .env(PG_BIN_DIR_VAR, bin.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "the child passed:\n{said}");
    let expected = format!(
        "{PG_BIN_DIR_VAR}={} lacks initdb, postgres",
        bin.path().display()
    );
    assert!(said.contains(&expected), "no {expected:?} in:\n{said}");
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_server_applies_args_and_is_removed_on_drop() {
    let t = Instant::now();
    let server = MysqlServer::start(&["--max-allowed-packet=65536", "--max-connections=77"]);
    eprintln!("MysqlServer::start took {:?}", t.elapsed());
    let (dir, port) = (server.dir().to_path_buf(), server.port());
    assert!(server.url().starts_with("mysql://root@127.0.0.1:"));
    {
        let mut c = my(&server.url()).await;
        let packet: Option<u64> = c.query_first("SELECT @@max_allowed_packet").await.unwrap();
        assert_eq!(packet, Some(65536));
        let maxc: Option<u64> = c.query_first("SELECT @@max_connections").await.unwrap();
        assert_eq!(maxc, Some(77), "extra args override the harness defaults");
        let bind: Option<String> = c.query_first("SELECT @@bind_address").await.unwrap();
        assert_eq!(bind.as_deref(), Some("127.0.0.1"));
        let sock: Option<String> = c.query_first("SELECT @@socket").await.unwrap();
        assert_eq!(
            sock.map(std::path::PathBuf::from),
            Some(dir.join("mysql.sock"))
        );
        let flush: Option<u64> = c
            .query_first("SELECT @@innodb_flush_log_at_trx_commit")
            .await
            .unwrap();
        assert_eq!(flush, Some(if fast_server() { 2 } else { 1 }));
        let charset: Option<String> = c
            .query_first("SELECT @@character_set_server")
            .await
            .unwrap();
        assert_eq!(charset.as_deref(), Some("utf8mb4"));
        let infile: Option<u64> = c.query_first("SELECT @@local_infile").await.unwrap();
        assert_eq!(infile, Some(1));
        c.disconnect().await.unwrap();
        assert!(mysql_version(&server.url()).await.contains("MariaDB"));
    }
    // The shared server's defaults are not affected by the owned one.
    if std::env::var_os("MYSQL_URL").is_none() {
        let mut c = my(&mysql_url()).await;
        let maxc: Option<u64> = c.query_first("SELECT @@max_connections").await.unwrap();
        assert_eq!(maxc, Some(300));
        c.disconnect().await.unwrap();
    }
    removed_on_drop("MysqlServer", server, &dir, port);
}

#[cfg(all(feature = "postgres", feature = "mysql"))]
const CHILD_ENV: &str = "BP_HARNESS_WATCHDOG_CHILD";
#[cfg(all(feature = "postgres", feature = "mysql"))]
const CHILD_TAG: &str = "BP_CHILD_SERVER";

/// Runs this very test in a child process that starts servers and then calls
/// `std::process::exit` (no Drop runs); the watchdogs must then stop the
/// servers and delete their dirs.
#[cfg(all(feature = "postgres", feature = "mysql"))]
#[test]
fn watchdog_cleans_up_after_process_exit() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // Child role: owned servers that are never dropped, and the shared ones.
        let p = PgServer::start(&[]);
        let m = MysqlServer::start(&[]);
        for (port, dir) in [(p.port(), p.dir()), (m.port(), m.dir())] {
            assert!(dir.exists() && !port_refuses(port));
            assert!(!processes_mentioning(&dir.to_string_lossy(), false).is_empty());
            println!("{CHILD_TAG} {port} {}", dir.display());
        }
        std::process::exit(0);
    }
    let me = std::env::current_exe().unwrap();
    let out = std::process::Command::new(me)
        .args([
            "--exact",
            "harness::watchdog_cleans_up_after_process_exit",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env_remove("PG_URL")
        .env_remove("MYSQL_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let servers: Vec<(u16, std::path::PathBuf)> = stdout
        .lines()
        .filter_map(|l| l.split_once(CHILD_TAG).map(|(_, rest)| rest))
        .map(|l| {
            let (port, dir) = l.trim().split_once(' ').unwrap();
            (port.parse().unwrap(), std::path::PathBuf::from(dir))
        })
        .collect();
    assert_eq!(servers.len(), 2, "child output:\n{stdout}");
    let t = Instant::now();
    loop {
        let left: Vec<String> = servers
            .iter()
            .filter(|(port, dir)| {
                dir.exists()
                    || !port_refuses(*port)
                    || !processes_mentioning(&dir.to_string_lossy(), true).is_empty()
            })
            .map(|(port, dir)| format!("{port} {}", dir.display()))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "not cleaned up 30 s after exit: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "watchdogs cleaned up {} servers {:?} after the child exited",
        servers.len(),
        t.elapsed()
    );
}
