//! A MySQL / MariaDB host list with a read-only server in it: a replica
//! (`read_only` ON) is never used from a list of several hosts, and the
//! connections of a server that turns read-only under them (a primary
//! demoted or fenced) are closed once a write was refused there, so that
//! writes move to the host that takes them.
//!
//! Each test starts a server of its own (it sets the global `read_only`)
//! and uses the shared one as the host that takes writes.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use batchpool::mysql::{Pool, PoolBuilder};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

const POOL_SIZE: usize = 4;

async fn connect(url: &str) -> Conn {
    Conn::from_url(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// `(user@host:port part, database)` of a `mysql://user@host:port/db` URL.
fn split(url: &str) -> (&str, &str) {
    url.rsplit_once('/').expect("database in the URL")
}

fn host_of(url: &str) -> &str {
    split(url).0.rsplit_once('@').expect("user in the URL").1
}

/// The same database on `server`: `mysql://root@127.0.0.1:P/<db of url>`.
fn same_db_on(server: &common::MysqlServer, url: &str) -> String {
    format!("mysql://root@127.0.0.1:{}/{}", server.port(), split(url).1)
}

async fn keys(url: &str) -> BTreeSet<i64> {
    let mut conn = connect(url).await;
    let keys: Vec<i64> = conn.query("SELECT k FROM t").await.expect("read keys");
    let _ = conn.disconnect().await;
    keys.into_iter().collect()
}

fn builder(url: &str) -> PoolBuilder {
    Pool::builder(url)
        .max_size(POOL_SIZE)
        .create_timeout(Duration::from_secs(5))
}

/// The client port of the server a pool's connection is on.
async fn pool_port(pool: &Pool) -> u16 {
    let row = pool.query_one("SELECT @@port", ()).await.expect("@@port");
    row.get::<u16, _>(0).expect("port")
}

/// Creates the database of `shared` (already made there) on `own`, and
/// table `t` in both.
async fn same_table_on_both(shared: &str, own: &str) {
    let db = split(shared).1;
    let own_root = own.replace(&format!("/{db}"), "/test");
    common::mysql_exec(&own_root, &format!("CREATE DATABASE `{db}`")).await;
    for url in [shared, own] {
        common::mysql_exec(url, "CREATE TABLE t (k BIGINT PRIMARY KEY) ENGINE=InnoDB").await;
    }
}

/// A server of the test's own (`own`, whose global `read_only` the test
/// sets) and the shared one, each with the same fresh database holding
/// table `t`.
struct Pair {
    server: common::MysqlServer,
    shared: String,
    own: String,
}

impl Pair {
    async fn start() -> Pair {
        let server = common::MysqlServer::start(&[]);
        let shared = common::mysql_fresh_db().await;
        let own = same_db_on(&server, &shared);
        same_table_on_both(&shared, &own).await;
        Pair {
            server,
            shared,
            own,
        }
    }

    fn db(&self) -> &str {
        split(&self.shared).1
    }

    /// `mysql://<user>@own,shared/<db>`: the own server first.
    fn list(&self, user: &str) -> String {
        format!(
            "mysql://{user}@127.0.0.1:{},{}/{}",
            self.server.port(),
            host_of(&self.shared),
            self.db()
        )
    }
}

/// Inserts `keys` into `t` through `pool`, one concurrent caller each:
/// every one must be told Ok(1).
async fn write_all(pool: &Pool, keys: std::ops::Range<i64>) {
    let tasks: Vec<_> = keys
        .map(|k| {
            let pool = pool.clone();
            tokio::spawn(
                async move { (k, pool.execute("INSERT INTO t (k) VALUES (?)", (k,)).await) },
            )
        })
        .collect();
    for task in tasks {
        let (k, r) = task.await.expect("caller");
        assert_eq!(
            r.unwrap_or_else(|e| panic!("key {k}: {e}")).rows_affected(),
            1
        );
    }
}

/// A replica listed first is passed over for a host that takes writes, by
/// root too (whom `read_only` lets write); a list with no such host gives no
/// connection, and names the replica's state; the replica alone, as a
/// single host, is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_host_is_passed_over() {
    let pair = Pair::start().await;
    let (server, shared, own, db) = (&pair.server, &pair.shared, &pair.own, pair.db());
    common::mysql_exec(own, "SET GLOBAL read_only = ON").await;

    let pool = builder(&pair.list("root")).build().expect("build pool");
    let rows = 200i64;
    write_all(&pool, 0..rows).await;
    let port = pool_port(&pool).await;
    pool.close().await;
    assert_ne!(port, server.port(), "the pool's server is the writable one");
    assert_eq!(
        keys(shared).await.len() as i64,
        rows,
        "every row on the writable host"
    );
    assert!(keys(own).await.is_empty(), "no row on the read-only host");

    // Nothing else answers: no connection, and the error says why.
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let list = format!(
        "mysql://root@127.0.0.1:{dead},127.0.0.1:{}/{db}",
        server.port()
    );
    let pool = builder(&list).build().expect("build pool");
    let e = pool
        .execute("INSERT INTO t (k) VALUES (?)", (rows,))
        .await
        .expect_err("no host takes writes");
    let text = format!("{e} {:?}", std::error::Error::source(&e));
    assert!(e.is_connect(), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port())) && text.contains("read-only"),
        "{text}"
    );
    pool.close().await;
    assert!(keys(own).await.is_empty(), "no row on the read-only host");

    // The replica as the only host: used, for reads.
    let pool = builder(own).build().expect("build pool");
    assert_eq!(pool_port(&pool).await, server.port());
    pool.close().await;
}

/// A pool's connections are on a server that turns read-only (as a
/// demoted primary does): each write refused there fails its own callers
/// with the server's error, definite; the connection that saw it is closed,
/// and new ones open on the other host of the list. At most one refusal per
/// pooled connection, then every write lands on the other host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_on_a_server_turned_read_only_move_to_a_writable_host() {
    let pair = Pair::start().await;
    let (server, shared, own, db) = (&pair.server, &pair.shared, &pair.own, pair.db());

    // A user without the privilege to bypass `read_only` (root has it), on
    // both servers.
    let user = format!("bp_writer_{}", std::process::id());
    for url in [shared, own] {
        common::mysql_exec(url, &format!("DROP USER IF EXISTS '{user}'@'%'")).await;
        common::mysql_exec(url, &format!("CREATE USER '{user}'@'%'")).await;
        common::mysql_exec(url, &format!("GRANT ALL ON `{db}`.* TO '{user}'@'%'")).await;
    }
    let pool = builder(&pair.list(&user)).build().expect("build pool");
    let sql = "INSERT INTO t (k) VALUES (?)";

    // Every connection of the pool open on the first host.
    let before = 100i64;
    write_all(&pool, 0..before).await;
    assert_eq!(pool_port(&pool).await, server.port());
    let opened = pool.status().size;

    common::mysql_exec(own, "SET GLOBAL read_only = ON").await;

    let mut ok = BTreeSet::new();
    let mut refused = Vec::new();
    let mut last_refused = None;
    for k in before..before + 100 {
        match pool.execute(sql, (k,)).await {
            Ok(o) => {
                assert_eq!(o.rows_affected(), 1);
                ok.insert(k);
            }
            Err(e) => {
                let text = e.to_string();
                assert!(
                    e.is_db() && !e.is_outcome_unknown() && text.contains("read-only"),
                    "key {k}: {e}"
                );
                refused.push(k);
                last_refused = Some(k);
            }
        }
    }
    let port = pool_port(&pool).await;
    pool.close().await;
    for url in [shared, own] {
        common::mysql_exec(url, &format!("DROP USER '{user}'@'%'")).await;
    }

    assert!(
        refused.len() <= opened,
        "at most one refusal per connection open on the read-only server \
         ({opened}); refused keys {refused:?}"
    );
    assert!(
        !refused.is_empty(),
        "the server refused writes (the test tested what it meant to)"
    );
    let last = last_refused.expect("a refusal");
    assert!(
        (last + 1..before + 100).all(|k| ok.contains(&k)),
        "every write after the last refusal succeeded"
    );
    assert_ne!(port, server.port(), "the pool moved to the writable host");
    let on_own = keys(own).await;
    let on_shared = keys(shared).await;
    assert_eq!(on_own, (0..before).collect::<BTreeSet<_>>(), "rows before");
    assert_eq!(on_shared, ok, "every Ok row after, and no refused one");
}

/// Root, whom `read_only` lets write, has the pool's connections on a
/// server that then turns read-only (a primary demoted while the pool was
/// quiet): a connection that lay idle is checked before its next use and
/// goes, so no write lands on the demoted server; every one goes to the
/// other host of the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_on_a_server_turned_read_only_are_not_used_by_root() {
    let pair = Pair::start().await;
    let (server, shared, own) = (&pair.server, &pair.shared, &pair.own);
    let pool = builder(&pair.list("root")).build().expect("build pool");
    write_all(&pool, 0..100).await;
    assert_eq!(pool_port(&pool).await, server.port());
    let opened = pool.status().size;

    common::mysql_exec(own, "SET GLOBAL read_only = ON").await;
    // Idle past the pool's ping interval (5 s).
    tokio::time::sleep(Duration::from_secs(6)).await;
    write_all(&pool, 100..300).await;
    let port = pool_port(&pool).await;
    pool.close().await;

    assert_ne!(port, server.port(), "the pool moved to the writable host");
    assert_eq!(
        keys(own).await,
        (0..100).collect::<BTreeSet<_>>(),
        "no write on the demoted server after it turned read-only ({opened} connections were idle there)"
    );
    assert_eq!(keys(shared).await, (100..300).collect::<BTreeSet<_>>());
}
