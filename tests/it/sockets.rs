//! Unix-domain sockets against real servers: PostgreSQL `host=/dir` (the
//! directory of the server's socket, key-value and URL forms) and MariaDB
//! `socket=/path`. Rows are coalesced through the socket with per-row
//! outcomes, the session really is on the socket, the pooler check over a
//! socket still says "direct" (named statements), and a TLS mode is
//! ignored there, as libpq and the MySQL client do.
//!
//! The servers are the harness's TLS throwaways (always started here, with
//! known socket paths), so the TLS modes have a server that would honour
//! them over TCP.

use crate::common;

use crate::common::backend::wait_for;
use batchpool::Stats;

/// Callers queued behind a held connection, then flushed together.
const CALLERS: usize = 40;

/// Waits until `n` rows are queued, then releases `held`.
async fn release_when_queued<T>(stats: impl Fn() -> Stats, n: usize, held: T) {
    wait_for("the callers to queue", || stats().queued as usize == n).await;
    drop(held);
}

mod pg {
    use super::*;
    use batchpool::postgres::Pool;

    /// A fresh database on the TLS throwaway: (socket dir, port, db name).
    async fn socket_db() -> (String, u16, String) {
        let server = common::pg_tls_server();
        let db = common::pg_tls_fresh_db().await;
        let name = db.rsplit('/').next().unwrap().to_string();
        let dir = server.socket_dir().display().to_string();
        (dir, server.port(), name)
    }

    /// Coalesces `CALLERS` inserts through `pool` (one connection) and
    /// checks every caller got its own row.
    async fn coalesce_through(pool: &Pool) {
        pool.execute(
            "CREATE TABLE t (id bigserial PRIMARY KEY, name text NOT NULL UNIQUE)",
            &[],
        )
        .await
        .unwrap();
        pool.execute("INSERT INTO t (name) VALUES ($1) RETURNING id", &[&"warm"])
            .await
            .unwrap();
        let held = pool.get().await.unwrap();
        let callers: Vec<_> = (0..CALLERS)
            .map(|i| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let name = format!("n{i}");
                    let out = pool
                        .execute("INSERT INTO t (name) VALUES ($1) RETURNING id", &[&name])
                        .await
                        .unwrap();
                    (name, out.returned().unwrap().get::<_, i64>(0))
                })
            })
            .collect();
        release_when_queued(|| pool.stats(), CALLERS, held).await;
        for caller in callers {
            let (name, id) = caller.await.unwrap();
            let row = pool
                .query_one("SELECT name FROM t WHERE id = $1", &[&id])
                .await
                .unwrap();
            assert_eq!(row.get::<_, String>(0), name, "another caller's id");
        }
        let stats = pool.stats();
        assert!(stats.rows_per_batch() > 1.0, "not coalesced: {stats:?}");
    }

    /// The session's client address: NULL over a Unix socket.
    async fn on_socket(pool: &Pool) -> bool {
        let row = pool
            .query_one("SELECT inet_client_addr() IS NULL", &[])
            .await
            .unwrap();
        row.get(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn host_directory_coalesces_on_the_socket_and_is_direct() {
        let (dir, port, db) = socket_db().await;
        let pool = Pool::builder(&format!(
            "host='{dir}' port={port} user=postgres dbname={db}"
        ))
        .max_size(1)
        .build()
        .unwrap();
        coalesce_through(&pool).await;
        assert!(on_socket(&pool).await, "not on the Unix socket");
        // The pooler check over a socket: direct, so named statements.
        let client = pool.get().await.unwrap();
        let prepared: i64 = client
            .query_one("SELECT count(*) FROM pg_prepared_statements", &[])
            .await
            .unwrap()
            .get(0);
        assert!(
            prepared > 0,
            "a direct socket connection was taken for a pooler"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn url_form_and_tls_modes_on_a_socket() {
        let (dir, port, db) = socket_db().await;
        let encoded: String = dir.replace('/', "%2F");
        for url in [
            format!("postgresql://postgres@{encoded}:{port}/{db}"),
            // A TLS mode does not apply to a socket (as libpq).
            format!("postgresql://postgres@{encoded}:{port}/{db}?sslmode=require"),
            format!("host={dir} port={port} user=postgres dbname={db} sslmode=verify-full"),
        ] {
            let pool = Pool::builder(&url).max_size(1).build().unwrap();
            assert!(on_socket(&pool).await, "{url}");
            let ssl: bool = pool
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            assert!(!ssl, "{url}");
        }
    }
}

mod mysql {
    use super::*;
    use batchpool::mysql::Pool;

    /// How the server sees the client of this connection: `localhost` over the
    /// socket, `127.0.0.1:port` over TCP.
    async fn client_host(pool: &Pool) -> String {
        let row: Option<String> = pool
            .query_opt(
                "SELECT host FROM information_schema.processlist WHERE id = CONNECTION_ID()",
                (),
            )
            .await
            .unwrap()
            .map(mysql_async::from_row);
        row.unwrap_or_default()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn socket_parameter_coalesces_on_the_socket() {
        let server = common::mysql_tls_server();
        let db = common::mysql_tls_fresh_db().await;
        let name = db.rsplit('/').next().unwrap();
        let socket = server
            .socket_path()
            .display()
            .to_string()
            .replace('/', "%2F");
        for params in ["", "&ssl-mode=REQUIRED"] {
            let url = format!("mysql://root@localhost/{name}?socket={socket}{params}");
            let pool = Pool::builder(&url).max_size(1).build().unwrap();
            assert_eq!(
                client_host(&pool).await,
                "localhost",
                "not on the socket: {url}"
            );
            if !params.is_empty() {
                continue;
            }
            pool.execute(
                "CREATE TABLE t (id bigint AUTO_INCREMENT PRIMARY KEY, name varchar(20) NOT NULL \
                 UNIQUE) ENGINE=InnoDB",
                (),
            )
            .await
            .unwrap();
            pool.execute("INSERT INTO t (name) VALUES (?)", ("warm",))
                .await
                .unwrap();
            let held = pool.get().await.unwrap();
            let callers: Vec<_> = (0..CALLERS)
                .map(|i| {
                    let pool = pool.clone();
                    tokio::spawn(async move {
                        let name = format!("n{i}");
                        let out = pool
                            .execute("INSERT INTO t (name) VALUES (?)", (name.clone(),))
                            .await
                            .unwrap();
                        (name, out.last_insert_id().expect("a provable id"))
                    })
                })
                .collect();
            release_when_queued(|| pool.stats(), CALLERS, held).await;
            for caller in callers {
                let (name, id) = caller.await.unwrap();
                let got: Option<String> = pool
                    .query_opt("SELECT name FROM t WHERE id = ?", (id,))
                    .await
                    .unwrap()
                    .map(mysql_async::from_row);
                assert_eq!(got.as_deref(), Some(name.as_str()), "another caller's id");
            }
            let stats = pool.stats();
            assert!(stats.rows_per_batch() > 1.0, "not coalesced: {stats:?}");
            assert_eq!(client_host(&pool).await, "localhost");
        }
    }
}
