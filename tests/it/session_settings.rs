//! The user's and the server's session settings win over the pool's, on both
//! backends, against real servers: a statement time limit from the
//! connection string, the role or user, the database or the server is what
//! the pool's statements (`query`, `execute`) and `Pool::get` connections
//! run with; the pool sets one only when asked (and then not on `get`
//! connections); the pool's own deadline for an answer follows the limit
//! the session has; and the user's own session setup survives the reset of
//! a connection that comes back from `Pool::get`.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use batchpool::BatchConfig;
use mysql_async::prelude::Queryable;

// ---------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------

async fn pg_admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// `url` with one more query parameter.
fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// `url` connecting as `user` (no password: the test servers trust
/// loopback connections).
fn pg_as(url: &str, user: &str) -> String {
    let rest = url.split_once('@').expect("user@host in the URL").1;
    format!("postgresql://{user}@{rest}")
}

/// The database name at the end of a URL's path.
fn db_name(url: &str) -> String {
    let path = url.rsplit('/').next().unwrap();
    path.split('?').next().unwrap().to_string()
}

/// `statement_timeout` as the pool's statements and a `get()` connection
/// see it.
async fn pg_seen(pool: &batchpool::postgres::Pool) -> (String, String) {
    let by_query: String = pool
        .query_one("SHOW statement_timeout", &[])
        .await
        .unwrap()
        .get(0);
    let conn = pool.get().await.unwrap();
    let by_get: String = conn
        .query_one("SHOW statement_timeout", &[])
        .await
        .unwrap()
        .get(0);
    (by_query, by_get)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_connection_string_limit_is_the_sessions() {
    let url = with_param(
        &common::pg_fresh_db().await,
        "options=-c%20statement_timeout%3D1500",
    );
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(2)
        .build()
        .unwrap();
    assert_eq!(
        pg_seen(&pool).await,
        ("1500ms".to_string(), "1500ms".to_string())
    );
    // A `get()` user's change is undone when the connection comes back
    // (`RESET ALL` goes back to the connection string's value).
    {
        let conn = pool.get().await.unwrap();
        conn.batch_execute("SET statement_timeout = '9s'")
            .await
            .unwrap();
    }
    for _ in 0..4 {
        let shown: String = pool
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(shown, "1500ms");
    }
    // A pass-through statement over the session's own limit is cancelled
    // by the server: a definite error, not an unknown outcome.
    let e = pool.execute("SELECT pg_sleep(4)", &[]).await.unwrap_err();
    assert!(
        e.is_statement_timeout() && !e.is_outcome_unknown(),
        "execute: {e}"
    );
    let e = pool.query("SELECT pg_sleep(4)", &[]).await.unwrap_err();
    assert!(
        e.is_statement_timeout() && !e.is_outcome_unknown(),
        "query: {e}"
    );
    // And a coalesced INSERT that outlasts it (a slow trigger).
    let admin = pg_admin(&url).await;
    admin
        .batch_execute(
            "CREATE TABLE t (k int PRIMARY KEY); \
             CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN IF NEW.k < 0 THEN PERFORM pg_sleep(4); END IF; RETURN NEW; END $$; \
             CREATE TRIGGER slow BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION slow()",
        )
        .await
        .unwrap();
    let e = pool
        .execute("INSERT INTO t (k) VALUES ($1)", &[&-1i32])
        .await
        .unwrap_err();
    assert!(
        e.is_statement_timeout() && !e.is_outcome_unknown(),
        "insert: {e}"
    );
    pool.execute("INSERT INTO t (k) VALUES ($1)", &[&1i32])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_role_and_database_limits_are_the_sessions() {
    let url = common::pg_fresh_db().await;
    let db = db_name(&url);
    let admin = pg_admin(&url).await;
    // Roles are per cluster: one named after this test's database.
    let role = format!("r_{db}");
    admin
        .batch_execute(&format!(
            "CREATE ROLE \"{role}\" LOGIN SUPERUSER; \
             ALTER ROLE \"{role}\" SET statement_timeout = '2500ms'; \
             ALTER DATABASE \"{db}\" SET statement_timeout = '3s'"
        ))
        .await
        .unwrap();
    // The database's default for the test server's user.
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(2)
        .build()
        .unwrap();
    assert_eq!(pg_seen(&pool).await, ("3s".to_string(), "3s".to_string()));
    // The role's own, which wins over the database's.
    let as_role = pg_as(&url, &role);
    let pool = batchpool::postgres::Pool::builder(&as_role)
        .max_size(2)
        .build()
        .unwrap();
    assert_eq!(
        pg_seen(&pool).await,
        ("2500ms".to_string(), "2500ms".to_string())
    );
    drop(pool);
    let _ = admin
        .batch_execute(&format!("DROP ROLE IF EXISTS \"{role}\""))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_server_default_limit_and_none() {
    // A server of its own: its default is set in its configuration.
    let server = common::PgServer::start(&[("statement_timeout", "7s")]);
    let pool = batchpool::postgres::Pool::builder(&server.url())
        .max_size(2)
        .build()
        .unwrap();
    assert_eq!(pg_seen(&pool).await, ("7s".to_string(), "7s".to_string()));
    // No limit anywhere: none from the pool either.
    let pool = batchpool::postgres::Pool::builder(&common::pg_fresh_db().await)
        .max_size(2)
        .build()
        .unwrap();
    let (by_query, by_get) = pg_seen(&pool).await;
    assert_eq!((by_query.as_str(), by_get.as_str()), ("0", "0"));
}

/// The builder's explicit limit holds for the pool's statements (the
/// server cancels them), and a `get()` connection runs with the session's
/// own limit instead: a statement on it outlives the pool's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_explicit_limit_holds_for_pooled_statements_not_get() {
    let url = with_param(
        &common::pg_fresh_db().await,
        "options=-c%20statement_timeout%3D60000",
    );
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(1)
        .statement_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let shown: String = pool
        .query_one("SHOW statement_timeout", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shown, "500ms");
    let e = pool.query("SELECT pg_sleep(3)", &[]).await.unwrap_err();
    assert!(
        e.is_statement_timeout() && !e.is_outcome_unknown(),
        "query: {e}"
    );
    {
        let conn = pool.get().await.unwrap();
        let shown: String = conn
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            shown, "1min",
            "the session's own limit on a get() connection"
        );
        // Four times the pool's limit (plus its grace period): not cut.
        conn.batch_execute("SELECT pg_sleep(2)").await.unwrap();
    }
    // Back in the pool (the only connection): the pool's limit again.
    for _ in 0..3 {
        let shown: String = pool
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(shown, "500ms");
    }
}

/// A `post_create` hook's limit is the session's: it holds for the pool's
/// statements and after a `get()` user changed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_hook_limit_survives_reset() {
    let url = common::pg_fresh_db().await;
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(1)
        .post_create(|client| {
            Box::pin(async move {
                client.batch_execute("SET statement_timeout = '4s'").await?;
                Ok(())
            })
        })
        .build()
        .unwrap();
    assert_eq!(pg_seen(&pool).await, ("4s".to_string(), "4s".to_string()));
    {
        let conn = pool.get().await.unwrap();
        conn.batch_execute("SET statement_timeout = '9s'")
            .await
            .unwrap();
    }
    for _ in 0..3 {
        let shown: String = pool
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(shown, "4s");
    }
}

/// The pool's own deadline for an answer is the session's limit plus its
/// grace period: with the server's replies held back (a stalled network),
/// a statement fails with an unknown outcome about 1 s after the
/// connection string's 1 s limit, not after a pool default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_pool_deadline_follows_the_sessions_limit() {
    let url = common::pg_fresh_db().await;
    let proxy = common::proxy::Proxy::start(common::backend::pg_upstream(&url)).await;
    let via = with_param(
        &common::backend::pg_via_url(&url, proxy.addr()),
        "options=-c%20statement_timeout%3D1000",
    );
    let pool = batchpool::postgres::Pool::builder(&via)
        .max_size(1)
        .build()
        .unwrap();
    pool.query("SELECT 1", &[]).await.unwrap();
    proxy.hold_replies(true);
    let start = Instant::now();
    let e = pool.query("SELECT 1", &[]).await.unwrap_err();
    let took = start.elapsed();
    assert!(e.is_outcome_unknown() && e.is_timeout(), "{e}");
    // 1 s limit + 1 s grace; the upper bound is wide for a loaded machine
    // and still far below any fixed pool default.
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "{took:?}"
    );
    proxy.hold_replies(false);
}

// ---------------------------------------------------------------------------
// MariaDB
// ---------------------------------------------------------------------------

fn my_opts(url: &str) -> mysql_async::OptsBuilder {
    mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(url).unwrap())
}

/// `@@max_statement_time` as the pool's statements and a `get()`
/// connection see it.
async fn my_seen(pool: &batchpool::mysql::Pool) -> (f64, f64) {
    let rows = pool.query("SELECT @@max_statement_time", ()).await.unwrap();
    let by_query: f64 = rows[0].get(0).unwrap();
    let mut conn = pool.get().await.unwrap();
    let by_get: Option<f64> = conn
        .query_first("SELECT @@max_statement_time")
        .await
        .unwrap();
    (by_query, by_get.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_init_limit_is_the_sessions() {
    let url = common::mysql_fresh_db().await;
    let opts = my_opts(&url).init(vec!["SET SESSION max_statement_time = 1.5"]);
    let pool = batchpool::mysql::Pool::from_opts(opts)
        .max_size(2)
        .build()
        .unwrap();
    assert_eq!(my_seen(&pool).await, (1.5, 1.5));
    // Still so after the connection lent by `get()` came back.
    assert_eq!(my_seen(&pool).await, (1.5, 1.5));
    let e = pool.query("SELECT SLEEP(4)", ()).await;
    // MariaDB ends SLEEP at the limit with error 1969.
    let e = e.unwrap_err();
    assert!(
        e.is_statement_timeout() && !e.is_outcome_unknown(),
        "query: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_user_and_server_limits_are_the_sessions() {
    let url = common::mysql_fresh_db().await;
    let db = url.rsplit('/').next().unwrap().to_string();
    let user = format!("u_{db}");
    let mut admin = mysql_async::Conn::new(my_opts(&url)).await.unwrap();
    admin
        .query_drop(format!(
            "CREATE USER '{user}'@'%' WITH MAX_STATEMENT_TIME 2.5; \
             GRANT ALL ON `{db}`.* TO '{user}'@'%'"
        ))
        .await
        .unwrap();
    let as_user = my_opts(&url).user(Some(user.clone())).pass(None::<String>);
    let pool = batchpool::mysql::Pool::from_opts(as_user)
        .max_size(2)
        .build()
        .unwrap();
    assert_eq!(my_seen(&pool).await, (2.5, 2.5));
    drop(pool);
    let _ = admin
        .query_drop(format!("DROP USER IF EXISTS '{user}'@'%'"))
        .await;
    // A server of its own, with its default in its configuration.
    let server = common::MysqlServer::start(&["--max-statement-time=7"]);
    let pool = batchpool::mysql::Pool::builder(&server.url())
        .max_size(2)
        .build()
        .unwrap();
    assert_eq!(my_seen(&pool).await, (7.0, 7.0));
}

/// The builder's explicit limit holds for the pool's statements, and a
/// `get()` connection runs with the session's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_explicit_limit_holds_for_pooled_statements_not_get() {
    let url = common::mysql_fresh_db().await;
    let opts = my_opts(&url).init(vec!["SET SESSION max_statement_time = 60"]);
    let pool = batchpool::mysql::Pool::from_opts(opts)
        .max_size(1)
        .statement_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let rows = pool.query("SELECT @@max_statement_time", ()).await.unwrap();
    assert_eq!(rows[0].get::<f64, _>(0), Some(0.5));
    let e = pool.query("SELECT SLEEP(3)", ()).await.unwrap_err();
    assert!(
        e.is_statement_timeout() && !e.is_outcome_unknown(),
        "query: {e}"
    );
    {
        let mut conn = pool.get().await.unwrap();
        let own: Option<f64> = conn
            .query_first("SELECT @@max_statement_time")
            .await
            .unwrap();
        assert_eq!(own, Some(60.0), "the session's own limit on get()");
        // Four times the pool's limit (plus its grace period): not cut
        // (SLEEP returns 1 when interrupted).
        let slept: Option<i64> = conn.query_first("SELECT SLEEP(2)").await.unwrap();
        assert_eq!(slept, Some(0));
    }
    for _ in 0..3 {
        let rows = pool.query("SELECT @@max_statement_time", ()).await.unwrap();
        assert_eq!(rows[0].get::<f64, _>(0), Some(0.5));
    }
}

/// An `init` statement's time zone holds on every connection of the pool
/// after each was lent by `get()` and came back (reset with
/// `COM_RESET_CONNECTION`), for the pool's statements and coalesced rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_init_time_zone_survives_get() {
    let url = common::mysql_fresh_db().await;
    let opts = my_opts(&url).init(vec!["SET SESSION time_zone = '+05:00'"]);
    let pool = batchpool::mysql::Pool::from_opts(opts)
        .max_size(2)
        .batching(BatchConfig::default())
        .build()
        .unwrap();
    pool.execute("CREATE TABLE t (k INT PRIMARY KEY, at TIMESTAMP NULL)", ())
        .await
        .unwrap();
    // Both connections lent at once, changed by their user, returned.
    {
        let mut a = pool.get().await.unwrap();
        let mut b = pool.get().await.unwrap();
        for c in [&mut a, &mut b] {
            let tz: Option<String> = c.query_first("SELECT @@time_zone").await.unwrap();
            assert_eq!(tz.as_deref(), Some("+05:00"), "on a get() connection");
            c.query_drop("SET SESSION time_zone = '-03:00'")
                .await
                .unwrap();
        }
    }
    // Every connection, through the pool's statements.
    let mut seen = HashSet::new();
    for round in 0..20 {
        let queries = (0..4).map(|_| pool.query("SELECT CONNECTION_ID(), @@time_zone", ()));
        for rows in futures_util::future::join_all(queries).await {
            let rows = rows.unwrap();
            let id: u64 = rows[0].get(0).unwrap();
            let tz: String = rows[0].get(1).unwrap();
            assert_eq!(tz, "+05:00", "round {round}, connection {id}");
            seen.insert(id);
        }
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.len(), 2, "both connections checked");
    // Coalesced rows read a TIMESTAMP's text in the session's zone.
    let rows = (0..10).map(|k| {
        pool.execute(
            "INSERT INTO t (k, at) VALUES (?, ?)",
            (k, "2020-01-01 00:00:00"),
        )
    });
    for r in futures_util::future::join_all(rows).await {
        r.unwrap();
    }
    let rows = pool
        .query("SELECT DISTINCT UNIX_TIMESTAMP(at) FROM t", ())
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    // 2020-01-01 00:00 at +05:00.
    assert_eq!(rows[0].get::<i64, _>(0), Some(1_577_836_800 - 5 * 3600));
}

/// A limit the user sets through the pool's own statements is the one the
/// pool's deadline follows from then on: with the connection string's 1 s
/// (a pool deadline of 2 s), a 2.5 s statement after `SET statement_timeout
/// = '5s'` (pool of one connection), or after `SET LOCAL` in a
/// transaction, is not cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_limit_set_through_the_pool_is_followed() {
    let url = with_param(
        &common::pg_fresh_db().await,
        "options=-c%20statement_timeout%3D1000",
    );
    let pool = batchpool::postgres::Pool::builder(&url)
        .max_size(1)
        .build()
        .unwrap();
    let mut tx = pool.begin();
    tx.execute("SET LOCAL statement_timeout = '5s'", &[])
        .await
        .unwrap();
    tx.query("SELECT pg_sleep(2.5)", &[]).await.unwrap();
    tx.commit().await.unwrap();
    // The transaction's setting ended with it.
    let e = pool.query("SELECT pg_sleep(2.5)", &[]).await.unwrap_err();
    assert!(
        e.is_statement_timeout() && !e.is_outcome_unknown(),
        "after the transaction: {e}"
    );
    pool.execute("SET statement_timeout = '5s'", &[])
        .await
        .unwrap();
    pool.query("SELECT pg_sleep(2.5)", &[]).await.unwrap();
}

/// As above on MariaDB: `SET SESSION max_statement_time`, and a
/// statement's own `SET STATEMENT max_statement_time = ... FOR`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_limit_set_through_the_pool_is_followed() {
    let url = common::mysql_fresh_db().await;
    let opts = my_opts(&url).init(vec!["SET SESSION max_statement_time = 1"]);
    let pool = batchpool::mysql::Pool::from_opts(opts)
        .max_size(1)
        .build()
        .unwrap();
    let rows = pool
        .query(
            "SET STATEMENT max_statement_time = 5 FOR SELECT SLEEP(2.5)",
            (),
        )
        .await
        .unwrap();
    assert_eq!(rows[0].get::<i64, _>(0), Some(0), "not interrupted");
    let e = pool.query("SELECT SLEEP(2.5)", ()).await.unwrap_err();
    assert!(
        e.is_statement_timeout() && !e.is_outcome_unknown(),
        "the session's own 1 s: {e}"
    );
    pool.execute("SET SESSION max_statement_time = 5", ())
        .await
        .unwrap();
    let rows = pool.query("SELECT SLEEP(2.5)", ()).await.unwrap();
    assert_eq!(rows[0].get::<i64, _>(0), Some(0), "not interrupted");
}

/// A network path whose route can be lost: a listening socket in a network
/// namespace of its own, reached over a veth pair, that forwards each
/// connection to `upstream`. [`cut`](LossyLink::cut) adds a blackhole route
/// to it: from then on every packet sent to it is discarded, nothing is
/// acknowledged and nothing is closed, as when a network loses its route
/// (no ICMP). Needs root (`CAP_NET_ADMIN`, `CAP_SYS_ADMIN`), as CI has;
/// everything is removed when dropped.
struct LossyLink {
    ns: String,
    host_if: String,
    far: std::net::SocketAddr,
}

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("running ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {} (root with CAP_NET_ADMIN needed)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl LossyLink {
    async fn start(upstream: std::net::SocketAddr) -> LossyLink {
        let id = std::process::id();
        let (ns, host_if, far_if) = (format!("bp{id}"), format!("bp{id}a"), format!("bp{id}b"));
        // A /30 of its own per process.
        let net = format!("10.231.{}.{}", (id >> 6) % 250, (id % 64) * 4);
        let near = format!("{}.{}", &net[..net.rfind('.').unwrap()], (id % 64) * 4 + 1);
        let far_ip = format!("{}.{}", &net[..net.rfind('.').unwrap()], (id % 64) * 4 + 2);
        let mut link = LossyLink {
            ns: ns.clone(),
            host_if: host_if.clone(),
            far: format!("{far_ip}:0").parse().unwrap(),
        };
        // Leftovers of a killed earlier process with this id, if any.
        link.remove();
        ip(&["netns", "add", &ns]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &far_if,
        ]);
        ip(&["link", "set", &far_if, "netns", &ns]);
        ip(&["addr", "add", &format!("{near}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "netns",
            "exec",
            &ns,
            "ip",
            "addr",
            "add",
            &format!("{far_ip}/30"),
            "dev",
            &far_if,
        ]);
        ip(&["netns", "exec", &ns, "ip", "link", "set", &far_if, "up"]);
        // The listening socket is made in the namespace (by a thread that
        // joins it) and stays there; the forwarding runs here.
        let ns_file = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
        let bind_to = link.far;
        let listener = std::thread::spawn(move || {
            use std::os::fd::AsFd;
            rustix::thread::move_into_link_name_space(
                ns_file.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("joining the network namespace");
            std::net::TcpListener::bind(bind_to).unwrap()
        })
        .join()
        .unwrap();
        link.far = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        link
    }

    /// Removes the route, the link and the namespace (best effort).
    fn remove(&self) {
        let run = |args: &[&str]| {
            let _ = std::process::Command::new("ip").args(args).output();
        };
        run(&[
            "route",
            "del",
            "blackhole",
            &format!("{}/32", self.far.ip()),
        ]);
        run(&["link", "del", &self.host_if]);
        run(&["netns", "del", &self.ns]);
    }

    /// Loses the route to the far end.
    fn cut(&self) {
        ip(&[
            "route",
            "add",
            "blackhole",
            &format!("{}/32", self.far.ip()),
        ]);
    }
}

impl Drop for LossyLink {
    fn drop(&mut self) {
        self.remove();
    }
}

/// With no statement limit anywhere (none on the server, none asked), the
/// pool sets no deadline of its own, and a connection whose packets are
/// lost still ends in bounded time: TCP keepalive notices the silence of a
/// running statement, and `TCP_USER_TIMEOUT` ends a connection whose sent
/// data (or keepalive probe) stays unacknowledged. Both calls fail with an
/// unknown outcome within about keepalive + user timeout (1 s + 3 s here);
/// the bound asserted is wide for a loaded machine, and far below the
/// ~15 minutes of retransmissions the OS would take without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_no_limit_lost_packets_end_by_tcp_timeouts() {
    let url = common::pg_fresh_db().await;
    let link = LossyLink::start(common::backend::pg_upstream(&url)).await;
    let via = common::backend::pg_via_url(&url, link.far);
    let pool = batchpool::postgres::Pool::builder(&via)
        .max_size(2)
        .tcp_keepalive(Duration::from_secs(1))
        .tcp_user_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let shown: String = pool
        .query_one("SHOW statement_timeout", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shown, "0", "no limit on the server");
    // Both connections open before the packets are lost.
    let (a, b) = tokio::join!(
        pool.query("SELECT pg_sleep(0.2)", &[]),
        pool.query("SELECT pg_sleep(0.2)", &[])
    );
    a.unwrap();
    b.unwrap();

    // A statement the server runs for 10 minutes, then the network goes:
    // the idle connection's keepalive probes go unanswered.
    let running = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let out = pool.query("SELECT pg_sleep(600)", &[]).await;
            (out, start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    link.cut();
    // A statement sent into the loss (prepared on both connections
    // already: only its run is sent): its bytes are never acknowledged.
    let start = Instant::now();
    let sent = pool.query("SELECT pg_sleep(0.2)", &[]).await;
    let sent_took = start.elapsed();
    let (running, running_took) = running.await.unwrap();

    let e = sent.unwrap_err();
    assert!(e.is_outcome_unknown(), "sent into the loss: {e}");
    assert!(sent_took < Duration::from_secs(30), "{sent_took:?}");
    let e = running.unwrap_err();
    assert!(e.is_outcome_unknown(), "running statement: {e}");
    assert!(running_took < Duration::from_secs(30), "{running_took:?}");
    drop(link);
}
