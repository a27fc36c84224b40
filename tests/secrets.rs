//! No password in what batchpool shows: `Debug` of builders and pools, the
//! `Display` / `Debug` of errors (a bad connection string, a refused or
//! failed connection, a wrong password against the real servers), and
//! batchpool's tracing output while all of that happens.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use batchpool::Error;

const SECRET: &str = "hunter2-Very-Secret";

/// Everything tracing writes, at every level, into one buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn shown(what: &mut Vec<String>, label: &str, e: &Error) {
    what.push(format!("{label}: {e} / {e:?}"));
}

/// A free loopback port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// One thread: the capturing subscriber is this thread's default, and the
// pool's tasks (flushers, connection tasks) run on it too.
#[tokio::test(flavor = "current_thread")]
async fn passwords_are_never_shown() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut shown_text: Vec<String> = Vec::new();
    let port = closed_port();

    // PostgreSQL: URL and key-value forms, builder and pool Debug, a bad
    // string, a refused connection, and the real server with a password.
    for config in [
        format!("postgresql://app:{SECRET}@127.0.0.1:{port}/db?statements=unnamed"),
        format!("host=127.0.0.1 port={port} user=app password='{SECRET}' dbname=db"),
    ] {
        let builder = batchpool::postgres::Pool::builder(&config)
            .create_timeout(Duration::from_secs(5))
            .wait_timeout(Duration::from_secs(5));
        shown_text.push(format!("{builder:?}"));
        let pool = builder.build().unwrap();
        shown_text.push(format!("{pool:?}"));
        let e = pool
            .execute("INSERT INTO t (v) VALUES ($1)", &[&1i32])
            .await
            .unwrap_err();
        shown(&mut shown_text, "pg refused", &e);
    }
    for bad in [
        format!("postgresql://app:{SECRET}@127.0.0.1:{port}/db?bogus=1"),
        format!("host=h password='{SECRET}' statements=sometimes"),
        format!("host=h password='{SECRET}' port=notaport"),
    ] {
        let e = batchpool::postgres::Pool::builder(&bad)
            .build()
            .unwrap_err();
        shown(&mut shown_text, "pg bad string", &e);
    }
    let pg = common::pg_url();
    let parsed: tokio_postgres::Config = pg.parse().unwrap();
    let mut config = parsed.clone();
    config.user("nobody_here").password(SECRET);
    let pool = batchpool::postgres::Pool::from_config(config)
        .build()
        .unwrap();
    shown_text.push(format!("{pool:?}"));
    let e = pool.query("SELECT 1", &[]).await.unwrap_err();
    shown(&mut shown_text, "pg unknown role", &e);

    // A working pool whose config carries a password (the throwaway server
    // trusts loopback, so it is not checked): coalesced rows, which trace
    // their flushes.
    let mut config: tokio_postgres::Config = common::pg_fresh_db().await.parse().unwrap();
    config.password(SECRET);
    let pool = batchpool::postgres::Pool::from_config(config)
        .build()
        .unwrap();
    pool.execute("CREATE TABLE s (v int)", &[]).await.unwrap();
    let inserts = (0..20i32).map(|v| {
        let pool = pool.clone();
        async move {
            pool.execute("INSERT INTO s (v) VALUES ($1)", &[&v])
                .await
                .map(drop)
        }
    });
    for r in futures_util::future::join_all(inserts).await {
        r.unwrap();
    }
    shown_text.push(format!("{pool:?} {:?}", pool.stats()));
    pool.close().await;

    // MariaDB: the same, and a wrong password on the real server.
    let builder =
        batchpool::mysql::Pool::builder(&format!("mysql://app:{SECRET}@127.0.0.1:{port}/db"))
            .create_timeout(Duration::from_secs(5))
            .wait_timeout(Duration::from_secs(5));
    shown_text.push(format!("{builder:?}"));
    let pool = builder.build().unwrap();
    shown_text.push(format!("{pool:?}"));
    let e = pool
        .execute("INSERT INTO t (v) VALUES (?)", (1,))
        .await
        .unwrap_err();
    shown(&mut shown_text, "mysql refused", &e);
    for bad in [
        format!("mysql://app:{SECRET}@127.0.0.1:{port}/db?bogus=1"),
        format!("mysql://app:{SECRET}@127.0.0.1:notaport/db"),
        format!("mysqlx://app:{SECRET}@127.0.0.1/db"),
    ] {
        if let Err(e) = batchpool::mysql::Pool::builder(&bad).build() {
            shown(&mut shown_text, "mysql bad string", &e);
        }
    }
    let my = common::mysql_url();
    let wrong = my.replacen("://root@", &format!("://root:{SECRET}@"), 1);
    assert_ne!(
        wrong, my,
        "the MariaDB test URL has the form mysql://root@..."
    );
    let pool = batchpool::mysql::Pool::builder(&wrong).build().unwrap();
    shown_text.push(format!("{pool:?}"));
    let e = pool.query("SELECT 1", ()).await.unwrap_err();
    shown(&mut shown_text, "mysql wrong password", &e);

    drop(_guard);
    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    for text in &shown_text {
        assert!(!text.contains(SECRET), "password shown: {text}");
    }
    assert!(
        !logs.contains(SECRET),
        "password in tracing output:\n{logs}"
    );
    // The checks looked at real text: the flushes were traced, and every
    // error said something.
    assert!(logs.contains("flushed"), "no flush traced:\n{logs}");
    assert!(shown_text.iter().filter(|t| t.contains(": ")).count() >= 8);
}
