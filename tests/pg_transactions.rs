//! `Pool::atomic` and `Pool::begin` against a real PostgreSQL: what reaches
//! the server is counted exactly, on the wire (a proxy counting round trips)
//! and on the server (`log_statement = all`, one database per test, the
//! database name prefixing every log line).

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use batchpool::postgres::Pool;
use common::proxy::Proxy;

const INS: &str = "INSERT INTO item (k, v) VALUES ($1, $2)";
const INS_BANG: &str = "INSERT INTO item (k, v) VALUES ($1, $2 || '!')";
const TOUCH: &str = "UPDATE item SET v = v || '+' WHERE k = $1";

/// This binary's own server, logging every statement as `db|LOG:  ...`.
fn server() -> &'static common::PgServer {
    static SERVER: OnceLock<common::PgServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        common::PgServer::start(&[("log_statement", "all"), ("log_line_prefix", "%d|%a|")])
    })
}

/// Everything one test needs: its own database, a proxy in front of the
/// server, a pool through the proxy, and a direct admin connection.
struct Env {
    db: String,
    proxy: Proxy,
    pool: Pool,
    admin: tokio_postgres::Client,
}

async fn connect(port: u16, db: &str) -> tokio_postgres::Client {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname(db)
        .application_name("admin");
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

async fn env(max_size: usize) -> Env {
    static N: AtomicUsize = AtomicUsize::new(0);
    let server = server();
    let db = format!(
        "tx_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let root = connect(server.port(), "postgres").await;
    root.batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let admin = connect(server.port(), &db).await;
    admin
        .batch_execute("CREATE TABLE item (k int PRIMARY KEY, v text NOT NULL)")
        .await
        .unwrap();
    let upstream: SocketAddr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = Proxy::start(upstream).await;
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(proxy.addr().port())
        .user("postgres")
        .dbname(&db)
        .application_name("pool");
    let pool = Pool::from_config(config)
        .max_size(max_size)
        .build()
        .unwrap();
    Env {
        db,
        proxy,
        pool,
        admin,
    }
}

impl Env {
    /// Statements the server logged for this test's pool (not the admin
    /// connection), in order: simple-protocol text, or the text of an
    /// executed prepared statement.
    fn logged(&self) -> Vec<String> {
        let log = std::fs::read_to_string(server().dir().join("postgres.log")).unwrap();
        let prefix = format!("{}|pool|", self.db);
        log.lines()
            .filter_map(|line| line.strip_prefix(&prefix))
            .filter_map(|line| {
                if let Some(sql) = line.strip_prefix("LOG:  statement: ") {
                    Some(sql.to_string())
                } else {
                    line.strip_prefix("LOG:  execute ")
                        .and_then(|rest| rest.split_once(": "))
                        .map(|(_, sql)| sql.to_string())
                }
            })
            .collect()
    }

    /// Runs `f` and returns its output, the round trips it cost, and the
    /// statements the server logged meanwhile.
    async fn count<T>(&self, f: impl std::future::Future<Output = T>) -> (T, u64, Vec<String>) {
        let logged = self.logged().len();
        let trips = self.proxy.round_trips();
        let out = f.await;
        let trips = self.proxy.round_trips() - trips;
        let mut log = self.logged();
        log.drain(..logged.min(log.len()));
        (out, trips, log)
    }

    async fn keys(&self) -> Vec<i32> {
        self.admin
            .query("SELECT k FROM item ORDER BY k", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// Sessions of this database sitting inside a transaction.
    async fn idle_in_transaction(&self) -> i64 {
        self.admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Waits until every pooled connection is back in the pool.
    async fn all_returned(&self) {
        for _ in 0..1000 {
            let s = self.pool.status();
            if s.available == s.size {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("connections not returned: {:?}", self.pool.status());
    }

    /// Every pooled connection starts a new transaction with its next
    /// statement (none is left inside one).
    async fn pooled_connections_clean(&self) {
        self.all_returned().await;
        let size = self.pool.status().size;
        let mut held = Vec::new();
        for _ in 0..size {
            held.push(self.pool.get().await.unwrap());
        }
        for conn in &held {
            // Simple protocol: the statement's own implicit transaction
            // starts with it, unless one was already open.
            let fresh = conn
                .simple_query("SELECT now() = statement_timestamp()")
                .await
                .unwrap()
                .into_iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                    _ => None,
                });
            assert_eq!(
                fresh.as_deref(),
                Some("t"),
                "a pooled connection was inside a transaction"
            );
        }
        drop(held);
        assert_eq!(self.idle_in_transaction().await, 0);
    }
}

#[tokio::test]
async fn single_statement_group_is_one_round_trip_without_begin() {
    let env = env(1).await;
    // Warm-up: connection opened, statement prepared.
    env.pool.atomic(&[(INS, &[&0i32, &"warm"])]).await.unwrap();

    let (out, trips, log) = env.count(env.pool.atomic(&[(INS, &[&1i32, &"a"])])).await;
    let out = out.unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].rows_affected(), 1);
    assert_eq!(trips, 1);
    assert_eq!(
        log,
        vec![INS.to_string()],
        "no BEGIN/COMMIT may reach the server"
    );
    assert_eq!(env.keys().await, vec![0, 1]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn group_of_three_is_one_round_trip_and_one_transaction() {
    let env = env(1).await;
    drop(env.pool.get().await.unwrap()); // connection opened

    // First use of the texts on this connection: one round trip prepares all
    // three, one runs the group.
    let pool = &env.pool;
    let group = |k: i32| async move {
        let v = format!("v{k}");
        pool.atomic(&[
            (INS, &[&k, &v]),
            (INS_BANG, &[&(k + 1), &v]),
            (TOUCH, &[&k]),
        ])
        .await
    };
    let (out, trips, log) = env.count(group(10)).await;
    let out = out.unwrap();
    assert_eq!(trips, 2, "prepare (once) + the group");
    assert_eq!(
        out.iter().map(|o| o.rows_affected()).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    assert_eq!(log, ["BEGIN", INS, INS_BANG, TOUCH, "COMMIT"]);

    // Prepared: one round trip.
    let (out, trips, log) = env.count(group(20)).await;
    out.unwrap();
    assert_eq!(trips, 1);
    assert_eq!(log, ["BEGIN", INS, INS_BANG, TOUCH, "COMMIT"]);

    // One transaction wrote all three rows' versions.
    let xmins = env
        .admin
        .query(
            "SELECT DISTINCT xmin::text FROM item WHERE k IN (20, 21)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(xmins.len(), 1);
    let v: String = env
        .admin
        .query_one("SELECT v FROM item WHERE k = 20", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, "v20+");
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn failing_statement_rolls_back_the_whole_group_and_names_it() {
    let env = env(1).await;
    env.pool
        .atomic(&[
            (INS, &[&1i32, &"one"]),
            (INS_BANG, &[&2i32, &"two"]),
            (TOUCH, &[&1i32]),
        ])
        .await
        .unwrap();

    // Statement 1 hits the primary key of row 1: nothing of the group stays.
    let (out, trips, log) = env
        .count(env.pool.atomic(&[
            (INS, &[&30i32, &"thirty"]),
            (INS_BANG, &[&1i32, &"dup"]),
            (TOUCH, &[&30i32]),
        ]))
        .await;
    let err = out.unwrap_err();
    assert_eq!(err.index(), Some(1), "{err}");
    assert_eq!(err.code(), Some("23505"), "{err}");
    assert!(err.error().is_db());
    assert_eq!(
        err.error().as_db_error().map(|e| e.constraint()),
        Some(Some("item_pkey"))
    );
    assert!(
        err.to_string()
            .starts_with("statement 1 of the atomic group failed")
    );
    assert_eq!(trips, 1);
    // The third statement is rejected (25P02) before it executes; COMMIT is
    // still sent and turns into ROLLBACK.
    assert_eq!(log, ["BEGIN", INS, INS_BANG, "COMMIT"]);
    assert_eq!(env.keys().await, vec![1, 2], "row 30 must not be committed");
    env.pooled_connections_clean().await;

    // The connection serves the next group normally.
    env.pool
        .atomic(&[(INS, &[&31i32, &"x"]), (TOUCH, &[&31i32])])
        .await
        .unwrap();
    assert_eq!(env.keys().await, vec![1, 2, 31]);
}

/// The premise of the detection above: tokio-postgres reports the `COMMIT`
/// of an aborted transaction (command tag `ROLLBACK`) as success.
#[tokio::test]
async fn tokio_postgres_reports_commit_of_aborted_transaction_as_ok() {
    let env = env(1).await;
    let client = connect(server().port(), &env.db).await;
    client
        .execute("INSERT INTO item (k, v) VALUES (1, 'a')", &[])
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute("INSERT INTO item (k, v) VALUES (2, 'b')", &[])
        .await
        .unwrap();
    let dup = client
        .execute("INSERT INTO item (k, v) VALUES (1, 'dup')", &[])
        .await
        .unwrap_err();
    assert_eq!(dup.code().map(|c| c.code()), Some("23505"));
    client.batch_execute("COMMIT").await.expect("COMMIT is Ok");
    assert_eq!(env.keys().await, vec![1], "yet nothing committed");
}

#[tokio::test]
async fn lazy_transaction_is_two_round_trips() {
    let env = env(1).await;
    env.pool.atomic(&[(INS, &[&0i32, &"warm"])]).await.unwrap();
    let status = env.pool.status();

    let mut tx = env.pool.begin();
    assert!(!tx.is_begun());
    assert_eq!(
        env.pool.status().available,
        status.available,
        "no connection taken yet"
    );
    let (out, first, log) = env.count(tx.execute(INS, &[&1i32, &"a"])).await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(first, 1, "BEGIN rides with the first statement");
    assert_eq!(log, ["BEGIN", INS]);
    assert!(tx.is_begun());
    assert_eq!(env.keys().await, vec![0], "not committed yet");

    let (out, second, log) = env.count(tx.commit()).await;
    out.unwrap();
    assert_eq!(first + second, 2);
    assert_eq!(log, ["COMMIT"]);
    assert_eq!(env.keys().await, vec![0, 1]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn empty_transactions_and_groups_send_nothing() {
    let env = env(2).await;
    env.pool.atomic(&[(INS, &[&0i32, &"warm"])]).await.unwrap();
    let status = env.pool.status();

    let (out, trips, log) = env.count(env.pool.begin().commit()).await;
    out.unwrap();
    assert_eq!((trips, log.len()), (0, 0));
    let (out, trips, log) = env.count(env.pool.begin().rollback()).await;
    out.unwrap();
    assert_eq!((trips, log.len()), (0, 0));
    let (_, trips, log) = env.count(async { drop(env.pool.begin()) }).await;
    assert_eq!((trips, log.len()), (0, 0));
    let (out, trips, log) = env.count(env.pool.atomic(&[])).await;
    assert!(out.unwrap().is_empty());
    assert_eq!((trips, log.len()), (0, 0));

    let after = env.pool.status();
    assert_eq!(
        (after.size, after.available),
        (status.size, status.available)
    );
}

#[tokio::test]
async fn execute_and_commit_alone_is_autocommit_and_last_rides_with_commit() {
    let env = env(1).await;
    env.pool
        .atomic(&[(INS, &[&0i32, &"warm"]), (TOUCH, &[&0i32])])
        .await
        .unwrap();

    let tx = env.pool.begin();
    let (out, trips, log) = env.count(tx.execute_and_commit(INS, &[&1i32, &"a"])).await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(trips, 1);
    assert_eq!(log, [INS], "no BEGIN, no COMMIT");

    let mut tx = env.pool.begin();
    let (out, trips, log) = env
        .count(async {
            tx.execute(INS, &[&2i32, &"b"]).await.unwrap();
            tx.execute_and_commit(TOUCH, &[&2i32]).await
        })
        .await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(trips, 2);
    assert_eq!(log, ["BEGIN", INS, TOUCH, "COMMIT"]);
    assert_eq!(env.keys().await, vec![0, 1, 2]);

    // The last statement failing: nothing of the transaction commits.
    let mut tx = env.pool.begin();
    tx.execute(INS, &[&3i32, &"c"]).await.unwrap();
    let err = tx
        .execute_and_commit(INS, &[&1i32, &"dup"])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("23505"));
    assert_eq!(env.keys().await, vec![0, 1, 2]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn failed_statement_makes_commit_fail_and_roll_back() {
    let env = env(1).await;
    env.pool.atomic(&[(INS, &[&1i32, &"one"])]).await.unwrap();

    let mut tx = env.pool.begin();
    tx.execute(INS, &[&2i32, &"two"]).await.unwrap();
    let dup = tx.execute(INS, &[&1i32, &"dup"]).await.unwrap_err();
    assert_eq!(dup.code(), Some("23505"));
    let aborted = tx.execute(INS, &[&3i32, &"three"]).await.unwrap_err();
    assert_eq!(aborted.code(), Some("25P02"));
    let (out, trips, log) = env.count(tx.commit()).await;
    let err = out.unwrap_err();
    assert_eq!(
        err.code(),
        Some("23505"),
        "commit reports the first failure"
    );
    assert_eq!(trips, 1);
    assert_eq!(log, ["ROLLBACK"]);
    assert_eq!(env.keys().await, vec![1]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn dropping_an_open_transaction_rolls_back_and_returns_a_clean_connection() {
    let env = env(1).await;
    env.pool.atomic(&[(INS, &[&0i32, &"warm"])]).await.unwrap();

    let mut tx = env.pool.begin();
    tx.execute(INS, &[&5i32, &"five"]).await.unwrap();
    let rows = tx
        .query("SELECT k FROM item ORDER BY k", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "the transaction sees its own row");
    assert_eq!(env.idle_in_transaction().await, 1);
    drop(tx);

    env.all_returned().await;
    assert_eq!(env.pool.status().size, 1, "the same connection came back");
    assert_eq!(env.keys().await, vec![0]);
    assert_eq!(env.logged().last().map(String::as_str), Some("ROLLBACK"));
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn cancelled_atomic_group_leaves_no_open_transaction() {
    let env = env(1).await;
    let group = |k: i32| {
        let pool = env.pool.clone();
        async move {
            pool.atomic(&[
                (INS, &[&k, &"x"]),
                (INS_BANG, &[&(k + 1), &"y"]),
                (TOUCH, &[&k]),
            ])
            .await
        }
    };
    group(0).await.unwrap(); // prepared

    env.proxy.hold_replies(true);
    let sent = env.proxy.client_bytes();
    {
        let fut = group(10);
        tokio::pin!(fut);
        let on_the_wire = async {
            while env.proxy.client_bytes() == sent {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::select! {
            r = &mut fut => panic!("group finished while replies were held: {r:?}"),
            _ = on_the_wire => {}
        }
        // The server runs the whole group meanwhile; only its replies wait.
        for _ in 0..500 {
            if env.keys().await.len() == 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // `fut` is dropped here, mid-flight.
    }
    assert_eq!(
        env.pool.status().available,
        0,
        "the guard holds the connection"
    );
    env.proxy.hold_replies(false);

    env.pooled_connections_clean().await;
    assert_eq!(env.pool.status().size, 1);
    // Written in one go, the group ran to its COMMIT: all of it committed.
    assert_eq!(env.keys().await, vec![0, 1, 10, 11]);
    let log = env.logged();
    let rollback = log
        .iter()
        .rposition(|s| s == "ROLLBACK")
        .expect("guard's ROLLBACK");
    assert_eq!(
        log[rollback - 1],
        "COMMIT",
        "ROLLBACK came after the group: {log:?}"
    );
}

#[tokio::test]
async fn cancelled_transaction_statement_then_drop_rolls_back() {
    let env = env(1).await;
    env.pool.atomic(&[(INS, &[&0i32, &"warm"])]).await.unwrap();

    let mut tx = env.pool.begin();
    env.proxy.hold_replies(true);
    let sent = env.proxy.client_bytes();
    {
        let fut = tx.execute(INS, &[&7i32, &"seven"]);
        tokio::pin!(fut);
        let on_the_wire = async {
            while env.proxy.client_bytes() == sent {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::select! {
            r = &mut fut => panic!("statement finished while replies were held: {r:?}"),
            _ = on_the_wire => {}
        }
        for _ in 0..500 {
            if env.idle_in_transaction().await == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(tx.is_begun());
    drop(tx);
    env.proxy.hold_replies(false);
    env.pooled_connections_clean().await;
    assert_eq!(env.keys().await, vec![0], "row 7 rolled back");
}

#[tokio::test]
async fn transaction_control_and_bad_parameters_are_refused_before_sending() {
    let env = env(1).await;
    env.pool.atomic(&[(INS, &[&0i32, &"warm"])]).await.unwrap();

    let (out, trips, _) = env
        .count(env.pool.atomic(&[(INS, &[&1i32, &"a"]), ("COMMIT", &[])]))
        .await;
    let err = out.unwrap_err();
    assert_eq!((err.index(), err.error().is_refused()), (Some(1), true));
    assert_eq!(trips, 0);

    let (out, trips, _) = env
        .count(env.pool.atomic(&[
            (INS, &[&1i32, &"a"]),
            (" /* a /* nested */ comment */ -- line\n  savepoint s", &[]),
        ]))
        .await;
    assert_eq!(out.unwrap_err().index(), Some(1));
    assert_eq!(trips, 0);

    // Wrong parameter count in statement 1: nothing sent (both prepared).
    let (out, trips, log) = env
        .count(env.pool.atomic(&[(INS, &[&1i32, &"a"]), (INS, &[&2i32])]))
        .await;
    let err = out.unwrap_err();
    assert_eq!(
        (err.index(), err.error().is_params()),
        (Some(1), true),
        "{err}"
    );
    assert_eq!((trips, log.len()), (0, 0));

    let mut tx = env.pool.begin();
    let err = tx.execute("ROLLBACK", &[]).await.unwrap_err();
    assert!(err.is_refused());
    let err = tx
        .execute("prepare transaction 'x'", &[])
        .await
        .unwrap_err();
    assert!(err.is_refused());
    assert!(!tx.is_begun());
    // Statements merely starting with such words are fine.
    tx.execute("SELECT 1 AS beginning", &[]).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(env.keys().await, vec![0]);
    env.pooled_connections_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_and_transactions_from_many_tasks() {
    let env = env(4).await;
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..200i32 {
        let pool = env.pool.clone();
        tasks.spawn(async move {
            let v = format!("v{k}");
            if k % 2 == 0 {
                pool.atomic(&[(INS, &[&k, &v]), (TOUCH, &[&k])])
                    .await
                    .map(|_| ())
                    .map_err(batchpool::Error::from)
            } else {
                let mut tx = pool.begin();
                tx.execute(INS, &[&k, &v]).await?;
                tx.execute_and_commit(TOUCH, &[&k]).await.map(|_| ())
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    assert_eq!(env.keys().await, (0..200).collect::<Vec<_>>());
    let touched: i64 = env
        .admin
        .query_one("SELECT count(*) FROM item WHERE v LIKE '%+'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(touched, 200);
    env.pooled_connections_clean().await;
}
