//! `Pool::atomic` and `Pool::begin` against a real MariaDB: what reaches the
//! server is counted exactly, on the wire (a proxy counting round trips) and
//! on the server (the general query log, one database per test).

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use batchpool::mysql::Pool;
use common::proxy::Proxy;
use mysql_async::prelude::Queryable;
use mysql_async::{OptsBuilder, Params};

const INS: &str = "INSERT INTO item (k, v) VALUES (?, ?)";
const INS_BANG: &str = "INSERT INTO item (k, v) VALUES (?, CONCAT(?, '!'))";
const TOUCH: &str = "UPDATE item SET v = CONCAT(v, '+') WHERE k = ?";

/// This binary's own server, with the general query log on.
fn server() -> &'static common::MysqlServer {
    static SERVER: OnceLock<common::MysqlServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        common::MysqlServer::start(&["--general-log=1", "--general-log-file=general.log"])
    })
}

fn opts(port: u16, db: Option<&str>) -> OptsBuilder {
    OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some("root"))
        .db_name(db)
        .prefer_socket(false)
}

struct Env {
    db: String,
    proxy: Proxy,
    pool: Pool,
    /// Connected without a default database, so its statements are not
    /// counted as the pool's.
    admin: mysql_async::Conn,
}

async fn env(max_size: usize) -> Env {
    static N: AtomicUsize = AtomicUsize::new(0);
    let server = server();
    let db = format!(
        "tx_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = mysql_async::Conn::new(opts(server.port(), None))
        .await
        .unwrap();
    admin
        .query_drop(format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    admin
        .query_drop(format!(
            "CREATE TABLE {db}.item (k INT PRIMARY KEY, v VARCHAR(100) NOT NULL) ENGINE=InnoDB"
        ))
        .await
        .unwrap();
    let upstream: SocketAddr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = Proxy::start(upstream).await;
    let pool = Pool::from_opts(opts(proxy.addr().port(), Some(&db)))
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
    /// `Command argument` entries the server logged for this test's pool,
    /// in order (`Query START TRANSACTION`, `Execute INSERT ...`).
    fn logged(&self) -> Vec<String> {
        let path = server().dir().join("data").join("general.log");
        let log = std::fs::read_to_string(path).unwrap();
        let mut mine: HashMap<String, bool> = HashMap::new();
        let mut out = Vec::new();
        for line in log.lines() {
            // `[YYMMDD HH:MM:SS]\t\t   ID Command\tArgument`: find the
            // `ID Command` field; the argument follows it.
            let fields: Vec<&str> = line.split('\t').collect();
            let Some(at) = fields.iter().position(|f| {
                let f = f.trim();
                f.split_once(' ').is_some_and(|(id, cmd)| {
                    !id.is_empty()
                        && id.bytes().all(|b| b.is_ascii_digit())
                        && !cmd.trim().is_empty()
                        && cmd
                            .trim()
                            .chars()
                            .all(|c| c.is_ascii_alphabetic() || c == ' ')
                })
            }) else {
                continue;
            };
            let Some((id, command)) = fields[at].trim().split_once(' ') else {
                continue;
            };
            let (id, command) = (id, command.trim());
            let arg = fields[at + 1..].join("\t");
            let arg = arg.as_str();
            if command == "Connect" {
                let on_db = arg
                    .split(" on ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    == Some(self.db.as_str());
                mine.insert(id.to_string(), on_db);
            } else if mine.get(id).copied().unwrap_or(false) {
                out.push(format!("{command} {arg}"));
            }
        }
        out
    }

    async fn count<T>(&self, f: impl std::future::Future<Output = T>) -> (T, u64, Vec<String>) {
        let logged = self.logged().len();
        let trips = self.proxy.round_trips();
        let out = f.await;
        let trips = self.proxy.round_trips() - trips;
        // The general log is written as commands arrive; give it a moment.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut log = self.logged();
        log.drain(..logged.min(log.len()));
        (out, trips, log)
    }

    async fn keys(&mut self) -> Vec<i32> {
        self.admin
            .query(format!("SELECT k FROM {}.item ORDER BY k", self.db))
            .await
            .unwrap()
    }

    /// InnoDB transactions open in sessions using this test's database.
    async fn open_transactions(&mut self) -> i64 {
        // information_schema.innodb_trx is a cache refreshed at most every
        // 100 ms: wait it out so the answer is current.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let n: Option<i64> = self
            .admin
            .query_first(format!(
                "SELECT COUNT(*) FROM information_schema.innodb_trx t \
                 JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id \
                 WHERE p.db = '{}'",
                self.db
            ))
            .await
            .unwrap();
        n.unwrap_or(-1)
    }

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

    /// No pooled connection is inside a transaction, and none is open on
    /// the server for this database.
    async fn pooled_connections_clean(&mut self) {
        self.all_returned().await;
        let size = self.pool.status().size;
        let mut held = Vec::new();
        for _ in 0..size {
            held.push(self.pool.get().await.unwrap());
        }
        for conn in &mut held {
            let in_tx: Option<i64> = conn.query_first("SELECT @@in_transaction").await.unwrap();
            assert_eq!(
                in_tx,
                Some(0),
                "a pooled connection was inside a transaction"
            );
        }
        drop(held);
        assert_eq!(self.open_transactions().await, 0);
    }
}

fn p(params: impl Into<Params>) -> Params {
    params.into()
}

fn verbs(log: &[String]) -> Vec<String> {
    // `Execute INSERT INTO ...` -> `Execute INSERT`; `Query COMMIT` stays.
    log.iter()
        .map(|l| {
            let mut words = l.split_whitespace();
            let command = words.next().unwrap_or("");
            let first = words.next().unwrap_or("");
            if first == "START" {
                format!("{command} START TRANSACTION")
            } else {
                format!("{command} {first}")
            }
        })
        .collect()
}

#[tokio::test]
async fn single_statement_group_is_one_round_trip_without_transaction() {
    let mut env = env(1).await;
    env.pool.atomic([(INS, p((0, "warm")))]).await.unwrap();

    let (out, trips, log) = env.count(env.pool.atomic([(INS, p((1, "a")))])).await;
    let out = out.unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].rows_affected(), 1);
    assert_eq!(trips, 1);
    assert_eq!(verbs(&log), ["Execute INSERT"], "{log:?}");
    assert_eq!(env.keys().await, vec![0, 1]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn group_of_three_is_n_plus_two_round_trips_and_one_transaction() {
    let mut env = env(1).await;
    let group = |k: i32| {
        let pool = env.pool.clone();
        async move {
            pool.atomic([
                (INS, p((k, "v"))),
                (INS_BANG, p((k + 1, "w"))),
                (TOUCH, p((k,))),
            ])
            .await
        }
    };
    group(0).await.unwrap(); // prepared

    let (out, trips, log) = env.count(group(10)).await;
    let out = out.unwrap();
    assert_eq!(
        out.iter().map(|o| o.rows_affected()).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    assert_eq!(trips, 5, "START TRANSACTION + 3 statements + COMMIT");
    assert_eq!(
        verbs(&log),
        [
            "Query START TRANSACTION",
            "Execute INSERT",
            "Execute INSERT",
            "Execute UPDATE",
            "Query COMMIT"
        ]
    );
    assert_eq!(env.keys().await, vec![0, 1, 10, 11]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn failing_statement_rolls_back_the_whole_group_and_names_it() {
    let mut env = env(1).await;
    env.pool
        .atomic([
            (INS, p((1, "one"))),
            (INS_BANG, p((2, "two"))),
            (TOUCH, p((1,))),
        ])
        .await
        .unwrap();

    let (out, trips, log) = env
        .count(env.pool.atomic([
            (INS, p((30, "thirty"))),
            (INS_BANG, p((1, "dup"))),
            (TOUCH, p((30,))),
        ]))
        .await;
    let err = out.unwrap_err();
    assert_eq!(err.index(), Some(1), "{err}");
    assert_eq!(err.code(), Some("23000"), "{err}");
    assert_eq!(err.error().as_mysql_error().map(|e| e.code), Some(1062));
    assert_eq!(trips, 4, "START, statement 0, statement 1, ROLLBACK");
    assert_eq!(
        verbs(&log),
        [
            "Query START TRANSACTION",
            "Execute INSERT",
            "Execute INSERT",
            "Query ROLLBACK"
        ]
    );
    assert_eq!(env.keys().await, vec![1, 2], "row 30 must not be committed");
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn lazy_transaction_is_three_round_trips() {
    let mut env = env(1).await;
    env.pool.atomic([(INS, p((0, "warm")))]).await.unwrap();
    let status = env.pool.status();

    let mut tx = env.pool.begin();
    assert_eq!(env.pool.status().available, status.available);
    let (out, first, log) = env.count(tx.execute(INS, (1, "a"))).await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(first, 2, "START TRANSACTION, then the statement");
    assert_eq!(verbs(&log), ["Query START TRANSACTION", "Execute INSERT"]);
    assert_eq!(env.keys().await, vec![0], "not committed yet");
    let (out, second, log) = env.count(tx.commit()).await;
    out.unwrap();
    assert_eq!(first + second, 3);
    assert_eq!(verbs(&log), ["Query COMMIT"]);
    assert_eq!(env.keys().await, vec![0, 1]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn empty_transactions_and_groups_send_nothing() {
    let env = env(2).await;
    env.pool.atomic([(INS, p((0, "warm")))]).await.unwrap();
    let status = env.pool.status();

    let (out, trips, log) = env.count(env.pool.begin().commit()).await;
    out.unwrap();
    assert_eq!((trips, log.len()), (0, 0));
    let (out, trips, log) = env.count(env.pool.begin().rollback()).await;
    out.unwrap();
    assert_eq!((trips, log.len()), (0, 0));
    let (_, trips, log) = env.count(async { drop(env.pool.begin()) }).await;
    assert_eq!((trips, log.len()), (0, 0));
    let (out, trips, log) = env.count(env.pool.atomic([])).await;
    assert!(out.unwrap().is_empty());
    assert_eq!((trips, log.len()), (0, 0));
    let after = env.pool.status();
    assert_eq!(
        (after.size, after.available),
        (status.size, status.available)
    );
}

#[tokio::test]
async fn execute_and_commit_alone_is_autocommit() {
    let mut env = env(1).await;
    env.pool
        .atomic([(INS, p((0, "warm"))), (TOUCH, p((0,)))])
        .await
        .unwrap();

    let tx = env.pool.begin();
    let (out, trips, log) = env.count(tx.execute_and_commit(INS, (1, "a"))).await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(trips, 1);
    assert_eq!(
        verbs(&log),
        ["Execute INSERT"],
        "no START TRANSACTION, no COMMIT"
    );

    let mut tx = env.pool.begin();
    let (out, trips, log) = env
        .count(async {
            tx.execute(INS, (2, "b")).await.unwrap();
            tx.execute_and_commit(TOUCH, (2,)).await
        })
        .await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(trips, 4);
    assert_eq!(
        verbs(&log),
        [
            "Query START TRANSACTION",
            "Execute INSERT",
            "Execute UPDATE",
            "Query COMMIT"
        ]
    );

    let mut tx = env.pool.begin();
    tx.execute(INS, (3, "c")).await.unwrap();
    let err = tx.execute_and_commit(INS, (1, "dup")).await.unwrap_err();
    assert_eq!(err.as_mysql_error().map(|e| e.code), Some(1062));
    assert_eq!(env.keys().await, vec![0, 1, 2]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn failed_statement_ends_the_transaction() {
    let mut env = env(1).await;
    env.pool.atomic([(INS, p((1, "one")))]).await.unwrap();

    let mut tx = env.pool.begin();
    tx.execute(INS, (2, "two")).await.unwrap();
    let dup = tx.execute(INS, (1, "dup")).await.unwrap_err();
    assert_eq!(dup.as_mysql_error().map(|e| e.code), Some(1062));
    // Refused without being sent: the transaction is over.
    let (out, trips, _) = env.count(tx.execute(INS, (3, "three"))).await;
    assert_eq!(
        out.unwrap_err().as_mysql_error().map(|e| e.code),
        Some(1062)
    );
    assert_eq!(trips, 0);
    let (out, trips, log) = env.count(tx.commit()).await;
    assert_eq!(
        out.unwrap_err().as_mysql_error().map(|e| e.code),
        Some(1062)
    );
    assert_eq!(trips, 1);
    assert_eq!(verbs(&log), ["Query ROLLBACK"]);
    assert_eq!(env.keys().await, vec![1]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn dropping_an_open_transaction_rolls_back_and_returns_a_clean_connection() {
    let mut env = env(1).await;
    env.pool.atomic([(INS, p((0, "warm")))]).await.unwrap();

    let mut tx = env.pool.begin();
    tx.execute(INS, (5, "five")).await.unwrap();
    let rows = tx.query("SELECT k FROM item", ()).await.unwrap();
    assert_eq!(rows.len(), 2, "the transaction sees its own row");
    assert_eq!(env.open_transactions().await, 1);
    drop(tx);

    env.all_returned().await;
    assert_eq!(env.pool.status().size, 1, "the same connection came back");
    assert_eq!(env.keys().await, vec![0]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        env.logged().last().map(String::as_str),
        Some("Query ROLLBACK")
    );
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn cancelled_atomic_group_commits_nothing_and_leaves_no_open_transaction() {
    let mut env = env(1).await;
    const NAP: &str = "DO SLEEP(1)";
    env.pool
        .atomic([(INS, p((0, "warm"))), (NAP, Params::Empty)])
        .await
        .unwrap();

    // Cancelled while the server sleeps in statement 1, after statement 0
    // ran inside the transaction.
    let fut = env.pool.atomic([(INS, p((10, "x"))), (NAP, Params::Empty)]);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), fut)
            .await
            .is_err()
    );

    // Wait for the server to notice and roll back.
    for _ in 0..500 {
        if env.open_transactions().await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(env.open_transactions().await, 0);
    assert_eq!(env.keys().await, vec![0], "nothing of the cancelled group");
    env.pooled_connections_clean().await;
    // The pool serves again.
    env.pool.atomic([(INS, p((11, "y")))]).await.unwrap();
    assert_eq!(env.keys().await, vec![0, 11]);
}

#[tokio::test]
async fn cancelled_transaction_statement_then_drop_rolls_back() {
    let mut env = env(1).await;
    env.pool.atomic([(INS, p((0, "warm")))]).await.unwrap();

    let mut tx = env.pool.begin();
    tx.execute(INS, (7, "seven")).await.unwrap();
    env.proxy.hold_replies(true);
    let sent = env.proxy.client_bytes();
    {
        let fut = tx.execute(TOUCH, (7,));
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
    }
    drop(tx);
    env.proxy.hold_replies(false);
    for _ in 0..500 {
        if env.open_transactions().await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.pooled_connections_clean().await;
    assert_eq!(env.keys().await, vec![0], "row 7 rolled back");
}

#[tokio::test]
async fn transaction_control_ddl_and_bad_parameters_are_refused_before_sending() {
    let mut env = env(1).await;
    env.pool.atomic([(INS, p((0, "warm")))]).await.unwrap();

    let (out, trips, _) = env
        .count(
            env.pool
                .atomic([(INS, p((1, "a"))), ("COMMIT", Params::Empty)]),
        )
        .await;
    let err = out.unwrap_err();
    assert_eq!((err.index(), err.error().is_refused()), (Some(1), true));
    assert_eq!(trips, 0);

    // DDL commits implicitly: refused in a group, fine alone.
    let (out, trips, _) = env
        .count(env.pool.atomic([
            (INS, p((1, "a"))),
            ("/* x */ CREATE TABLE other (x INT)", Params::Empty),
        ]))
        .await;
    assert_eq!(out.unwrap_err().index(), Some(1));
    assert_eq!(trips, 0);
    env.pool
        .atomic([("CREATE TABLE other (x INT)", Params::Empty)])
        .await
        .unwrap();

    // Wrong parameter count in statement 1: nothing runs.
    let (out, trips, log) = env
        .count(env.pool.atomic([(INS, p((1, "a"))), (INS, p((2,)))]))
        .await;
    let err = out.unwrap_err();
    assert_eq!(
        (err.index(), err.error().is_params()),
        (Some(1), true),
        "{err}"
    );
    assert_eq!((trips, log.len()), (0, 0));

    let mut tx = env.pool.begin();
    assert!(tx.execute("ROLLBACK", ()).await.unwrap_err().is_refused());
    assert!(
        tx.execute("lock tables item write", ())
            .await
            .unwrap_err()
            .is_refused()
    );
    assert!(
        tx.execute("ALTER TABLE item ADD COLUMN z INT", ())
            .await
            .unwrap_err()
            .is_refused()
    );
    assert!(!tx.is_begun());
    tx.execute("SELECT 1 AS beginning", ()).await.unwrap();
    tx.execute("CREATE TEMPORARY TABLE scratch (x INT)", ())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(env.keys().await, vec![0]);
    env.pooled_connections_clean().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_and_transactions_from_many_tasks() {
    let mut env = env(4).await;
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..200i32 {
        let pool = env.pool.clone();
        tasks.spawn(async move {
            let v = format!("v{k}");
            if k % 2 == 0 {
                pool.atomic([(INS, p((k, v))), (TOUCH, p((k,)))])
                    .await
                    .map(|_| ())
                    .map_err(batchpool::Error::from)
            } else {
                let mut tx = pool.begin();
                tx.execute(INS, (k, v)).await?;
                tx.execute_and_commit(TOUCH, (k,)).await.map(|_| ())
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    assert_eq!(env.keys().await, (0..200).collect::<Vec<_>>());
    let touched: Option<i64> = env
        .admin
        .query_first(format!(
            "SELECT COUNT(*) FROM {}.item WHERE v LIKE '%+'",
            env.db
        ))
        .await
        .unwrap();
    assert_eq!(touched, Some(200));
    env.pooled_connections_clean().await;
}
