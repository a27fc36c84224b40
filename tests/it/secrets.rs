//! No password in what batchpool shows: `Debug` of builders and pools, the
//! `Display` / `Debug` of errors (a bad connection string, a refused or
//! failed connection, a wrong password against the real servers, TLS
//! pools working and refused), and
//! batchpool's tracing output while all of that happens.

use crate::common;

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
    let _guard = crate::capture::set_default(subscriber);

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

    // TLS: verifying pools whose URL carries a password (the TLS
    // throwaway trusts loopback, so it is not checked), one working and one
    // refused (a wrong CA); MariaDB over TLS with a wrong password.
    let tls = common::pg_tls_server();
    let certs = tls.certs().unwrap();
    let db = common::pg_tls_fresh_db().await;
    let with_password = db.replacen("://postgres@", &format!("://postgres:{SECRET}@"), 1);
    assert_ne!(
        with_password, db,
        "the TLS test URL has the form postgresql://postgres@..."
    );
    for (root, works) in [(&certs.ca, true), (&certs.other_ca, false)] {
        let url = format!(
            "{with_password}?sslmode=verify-full&sslrootcert={}",
            root.display()
        );
        let builder = batchpool::postgres::Pool::builder(&url)
            .create_timeout(Duration::from_secs(5))
            .wait_timeout(Duration::from_secs(5));
        shown_text.push(format!("{builder:?}"));
        let pool = builder.build().unwrap();
        match pool.query("SELECT 1", &[]).await {
            Ok(_) => assert!(works, "a wrong CA was accepted"),
            Err(e) => {
                assert!(!works, "{e}");
                shown(&mut shown_text, "pg TLS refused", &e);
            }
        }
        shown_text.push(format!("{pool:?}"));
    }
    let my_tls = common::mysql_tls_fresh_db().await;
    let wrong = my_tls.replacen("://root@", &format!("://root:{SECRET}@"), 1);
    assert_ne!(
        wrong, my_tls,
        "the MariaDB TLS URL has the form mysql://root@..."
    );
    let builder = batchpool::mysql::Pool::builder(&format!("{wrong}?ssl-mode=REQUIRED"));
    shown_text.push(format!("{builder:?}"));
    let pool = builder.build().unwrap();
    let e = pool.query("SELECT 1", ()).await.unwrap_err();
    shown(&mut shown_text, "mysql TLS wrong password", &e);
    shown_text.push(format!("{pool:?}"));

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
