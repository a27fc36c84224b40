//! What the transaction tests (`Pool::atomic`, `Pool::begin`) need on top of
//! [`TestBackend`]: the transaction API of each pool, and an [`Env`] that
//! counts exactly what reaches the server, on the wire (a proxy counting
//! round trips) and on the server (PostgreSQL's `log_statement = all`,
//! MariaDB's general query log), one database per test on a server of the
//! transaction tests' own.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use batchpool::{AtomicError, Error};

use super::backend::{TestBackend, Val};
use super::proxy::Proxy;

/// One entry of what the server logged, as the tests expect it.
#[derive(Clone, Copy, Debug)]
pub enum Sent<'a> {
    Begin,
    Statement(&'a str),
    Commit,
    Rollback,
}

/// A statement group for [`TxBackend::atomic`].
pub type Group<'a> = [(&'a str, Vec<Val>)];

/// The transaction API of a backend's pool, and its server's view of it.
pub trait TxBackend: TestBackend + Sized {
    type Tx: Send;

    /// `INSERT INTO item (k, v) VALUES (k, v)`.
    const INS: &'static str = if Self::IS_PG {
        "INSERT INTO item (k, v) VALUES ($1, $2)"
    } else {
        "INSERT INTO item (k, v) VALUES (?, ?)"
    };
    /// Like [`TxBackend::INS`], appending `!` to `v`.
    const INS_BANG: &'static str = if Self::IS_PG {
        "INSERT INTO item (k, v) VALUES ($1, $2 || '!')"
    } else {
        "INSERT INTO item (k, v) VALUES (?, CONCAT(?, '!'))"
    };
    /// Appends `+` to the `v` of row `k`.
    const TOUCH: &'static str = if Self::IS_PG {
        "UPDATE item SET v = v || '+' WHERE k = $1"
    } else {
        "UPDATE item SET v = CONCAT(v, '+') WHERE k = ?"
    };

    /// A fresh database with table `item (k, v)` on the transaction tests' server,
    /// and a pool of `max_size` connections to it through a proxy.
    fn env(max_size: usize) -> impl Future<Output = Env<Self>> + Send;

    /// What the server logged for the pool's connections to `db`, in order,
    /// in the form of [`TxBackend::sent`].
    fn logged(db: &str) -> Vec<String>;

    /// How the server's log shows `entry` (PostgreSQL: the statement text;
    /// MySQL: the command and the statement's first word, `Execute INSERT`).
    fn sent(entry: Sent<'_>) -> String;

    /// Keys in `item`, in order (read by the admin connection).
    fn keys(admin: &mut Self::Admin, db: &str) -> impl Future<Output = Vec<i32>> + Send;

    /// Sessions on `db` inside a transaction (PostgreSQL: idle in one;
    /// MariaDB: with an active InnoDB transaction).
    fn open_transactions(admin: &mut Self::Admin, db: &str) -> impl Future<Output = i64> + Send;

    /// A pooled connection (`Pool::get`).
    type Conn: Send;
    fn get(pool: &Self::Pool) -> impl Future<Output = Self::Conn> + Send;
    /// Whether the connection is inside a transaction.
    fn in_transaction(conn: &mut Self::Conn) -> impl Future<Output = bool> + Send;

    /// The name of the constraint a database error names, where the
    /// backend's error says it (PostgreSQL).
    fn constraint(e: &Error) -> Option<String>;

    fn atomic(
        pool: &Self::Pool,
        group: &Group<'_>,
    ) -> impl Future<Output = Result<Vec<Self::Outcome>, AtomicError>> + Send;
    fn begin(pool: &Self::Pool) -> Self::Tx;
    fn is_begun(tx: &Self::Tx) -> bool;
    fn tx_execute(
        tx: &mut Self::Tx,
        sql: &str,
        params: &[Val],
    ) -> impl Future<Output = Result<Self::Outcome, Error>> + Send;
    /// Runs a query in the transaction: how many rows it returned.
    fn tx_query(tx: &mut Self::Tx, sql: &str) -> impl Future<Output = Result<usize, Error>> + Send;
    fn tx_execute_and_commit(
        tx: Self::Tx,
        sql: &str,
        params: &[Val],
    ) -> impl Future<Output = Result<Self::Outcome, Error>> + Send;
    fn tx_commit(tx: Self::Tx) -> impl Future<Output = Result<(), Error>> + Send;
    fn tx_rollback(tx: Self::Tx) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Everything one transaction test needs: its own database, a proxy in
/// front of the server, a pool through the proxy, and a direct admin
/// connection.
pub struct Env<B: TxBackend> {
    pub db: String,
    pub proxy: Proxy,
    pub pool: B::Pool,
    admin: tokio::sync::Mutex<B::Admin>,
}

impl<B: TxBackend> Env<B> {
    /// The name of a new test database.
    pub fn new_db_name() -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        format!(
            "tx_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    pub async fn assemble(
        db: String,
        upstream: SocketAddr,
        admin: B::Admin,
        pool: impl FnOnce(SocketAddr) -> B::Pool,
    ) -> Env<B> {
        let proxy = Proxy::start(upstream).await;
        let pool = pool(proxy.addr());
        Env {
            db,
            proxy,
            pool,
            admin: tokio::sync::Mutex::new(admin),
        }
    }

    /// Through a pooler that refuses transaction blocks (see
    /// [`TestBackend::TRANSACTIONS`]): `call`, which needs one (an atomic
    /// group of several statements, a statement of a transaction), fails
    /// with an error that says why, and nothing of it reaches the server.
    pub async fn refused<T: std::fmt::Debug, E: Into<Error>>(
        &self,
        call: impl Future<Output = Result<T, E>>,
    ) {
        let (out, trips, log) = self.count(call).await;
        let e: Error = out.map_err(Into::into).unwrap_err();
        assert!(e.is_refused(), "{e}");
        assert!(
            e.to_string().contains("refuses transaction blocks"),
            "the error says why: {e}"
        );
        assert_eq!((trips, log.len()), (0, 0), "nothing sent: {log:?}");
    }

    /// Statements the server logged for this test's pool, in order.
    pub fn logged(&self) -> Vec<String> {
        B::logged(&self.db)
    }

    /// `entries` as [`Env::logged`] shows them.
    pub fn expect(&self, entries: &[Sent<'_>]) -> Vec<String> {
        entries.iter().map(|e| B::sent(*e)).collect()
    }

    /// Runs `f` and returns its output, the round trips it cost, and the
    /// statements the server logged meanwhile. (Both servers write a
    /// statement to their log before they answer it.)
    pub async fn count<T>(&self, f: impl Future<Output = T>) -> (T, u64, Vec<String>) {
        let logged = self.logged().len();
        let trips = self.proxy.round_trips();
        let out = f.await;
        let trips = self.proxy.round_trips() - trips;
        let mut log = self.logged();
        log.drain(..logged.min(log.len()));
        (out, trips, log)
    }

    /// The round trips and log of [`Env::count`] for a call that ended a
    /// transaction in which a statement failed, without what the pool
    /// asks pgpool-II afterwards (see [`TestBackend::PGPOOL`]): a `SELECT 1`,
    /// which reaches the server once pgpool-II lets it, after an `ABORT`
    /// for each time pgpool-II answered it with `25P02` itself (those
    /// answers never reach the server's log); each is one round trip.
    /// Unchanged for other backends.
    pub fn resynced(&self, trips: u64, mut log: Vec<String>) -> (u64, Vec<String>) {
        if !B::PGPOOL {
            return (trips, log);
        }
        assert_eq!(
            log.pop().as_deref(),
            Some("SELECT 1"),
            "the pool asks pgpool-II after a failed transaction"
        );
        let mut asked = 1;
        while log.last().map(String::as_str) == Some("ABORT") {
            log.pop();
            asked += 2;
        }
        (trips - asked, log)
    }

    pub async fn keys(&self) -> Vec<i32> {
        B::keys(&mut *self.admin.lock().await, &self.db).await
    }

    pub async fn open_transactions(&self) -> i64 {
        B::open_transactions(&mut *self.admin.lock().await, &self.db).await
    }

    /// Waits until no session of this database is inside a transaction
    /// (the server notices a cut connection, a guard's `ROLLBACK` arrives).
    pub async fn no_open_transactions(&self) {
        let patience = super::backend::Patience::new("no open transaction");
        while self.open_transactions().await != 0 {
            patience.wait().await;
        }
    }

    /// Waits until every pooled connection is back in the pool.
    pub async fn all_returned(&self) {
        super::backend::all_returned::<B>(&self.pool).await
    }

    /// No pooled connection is inside a transaction, and none is open on
    /// the server for this database.
    pub async fn pooled_connections_clean(&self) {
        self.all_returned().await;
        let (size, _) = B::size_available(&self.pool);
        let mut held = Vec::new();
        for _ in 0..size {
            held.push(B::get(&self.pool).await);
        }
        for conn in &mut held {
            let in_tx = B::in_transaction(conn).await;
            assert!(!in_tx, "a pooled connection was inside a transaction");
        }
        drop(held);
        assert_eq!(self.open_transactions().await, 0);
    }

    /// A transaction that has inserted row `k`.
    pub async fn begin_with(&self, k: i32, v: &str) -> B::Tx {
        let mut tx = B::begin(&self.pool);
        let row = [k.into(), v.into()];
        B::tx_execute(&mut tx, B::INS, &row).await.unwrap();
        tx
    }

    /// Group `[(INS, k, v)]`, the warm-up most tests start with.
    pub async fn insert(&self, k: i32, v: &str) {
        B::atomic(&self.pool, &[(B::INS, vec![k.into(), v.into()])])
            .await
            .unwrap();
    }
}

/// The group `[INS (k, v), INS_BANG (k + 1, w), TOUCH k]`.
pub fn three<B: TxBackend>(k: i32, v: &str, w: &str) -> Vec<(&'static str, Vec<Val>)> {
    vec![
        (B::INS, vec![k.into(), v.into()]),
        (B::INS_BANG, vec![(k + 1).into(), w.into()]),
        (B::TOUCH, vec![k.into()]),
    ]
}

/// Holds the proxy's replies, polls `fut` until the client has sent
/// something through the proxy, and returns with `fut` still pending (the
/// statement is on the wire, its reply held). The caller releases the
/// replies.
pub async fn hold_until_sent<F>(proxy: &Proxy, fut: F)
where
    F: Future,
    F::Output: std::fmt::Debug,
{
    proxy.hold_replies(true);
    let sent = proxy.client_bytes();
    let on_the_wire = async {
        let patience = super::backend::Patience::new("the statement on the wire");
        while proxy.client_bytes() == sent {
            patience.wait().await;
        }
    };
    tokio::select! {
        r = fut => panic!("finished while replies were held: {r:?}"),
        _ = on_the_wire => {}
    }
}

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use crate::common::PgServer;
    use crate::common::backend::{PgVia, Route};
    use batchpool::postgres::{Outcome, Pool, Transaction};
    use std::sync::OnceLock;
    use tokio_postgres::types::ToSql;

    /// The transaction tests' own server, logging every statement as `db|app|LOG: ...`.
    pub fn server() -> &'static PgServer {
        static SERVER: OnceLock<PgServer> = OnceLock::new();
        SERVER.get_or_init(|| {
            PgServer::start(&[("log_statement", "all"), ("log_line_prefix", "%d|%a|")])
        })
    }

    /// A direct connection to `db` on the transaction tests' server.
    pub async fn connect(db: &str) -> tokio_postgres::Client {
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(server().port())
            .user("postgres")
            .dbname(db)
            .application_name("admin");
        let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }

    fn refs(params: &[Val]) -> Vec<&(dyn ToSql + Sync)> {
        crate::common::backend::pg_params(params)
    }

    /// Behind a pooler ([`Route::in_front_of`]) the pool's connections reach
    /// the server through the proxy, then the route's pooler in front of
    /// [`server`]; the admin connection and the log are the server's own
    /// either way.
    impl<R: Route> TxBackend for PgVia<R> {
        type Tx = Transaction;
        type Conn = batchpool::postgres::Client;

        async fn env(max_size: usize) -> Env<Self> {
            let db = Env::<Self>::new_db_name();
            let root = connect("postgres").await;
            root.batch_execute(&format!("CREATE DATABASE {db}"))
                .await
                .unwrap();
            let admin = connect(&db).await;
            admin
                .batch_execute("CREATE TABLE item (k int PRIMARY KEY, v text NOT NULL)")
                .await
                .unwrap();
            let name = db.clone();
            if let Some(upstream) = R::in_front_of(server()) {
                return Env::assemble(db, upstream, admin, move |proxy| {
                    let mut url =
                        format!("postgresql://postgres@{proxy}/{name}?application_name=pool");
                    if !R::PARAMS.is_empty() {
                        url.push('&');
                        url.push_str(R::PARAMS);
                    }
                    Pool::builder(&url).max_size(max_size).build().unwrap()
                })
                .await;
            }
            let upstream = format!("127.0.0.1:{}", server().port()).parse().unwrap();
            Env::assemble(db, upstream, admin, move |proxy| {
                let mut config = tokio_postgres::Config::new();
                config
                    .host("127.0.0.1")
                    .port(proxy.port())
                    .user("postgres")
                    .dbname(&name)
                    .application_name("pool");
                Pool::from_config(config)
                    .max_size(max_size)
                    .build()
                    .unwrap()
            })
            .await
        }

        /// Simple-protocol text, or the text of an executed prepared
        /// statement (behind PgBouncer, an unnamed one: a named one fails
        /// the test).
        fn logged(db: &str) -> Vec<String> {
            let log = std::fs::read_to_string(server().dir().join("postgres.log")).unwrap();
            let prefix = format!("{db}|pool|");
            log.lines()
                .filter_map(|line| line.strip_prefix(&prefix))
                .filter_map(|line| {
                    if let Some(sql) = line.strip_prefix("LOG:  statement: ") {
                        Some(sql.to_string())
                    } else {
                        let (name, sql) = line
                            .strip_prefix("LOG:  execute ")
                            .and_then(|rest| rest.split_once(": "))?;
                        // Behind a transaction-mode pooler only unnamed
                        // statements may run (see `Statements::Unnamed`).
                        assert!(
                            !R::POOLER || name == "<unnamed>",
                            "named statement {name} executed behind PgBouncer: {sql}"
                        );
                        Some(sql.to_string())
                    }
                })
                .collect()
        }

        fn sent(entry: Sent<'_>) -> String {
            match entry {
                Sent::Begin => "BEGIN",
                Sent::Statement(sql) => sql,
                Sent::Commit => "COMMIT",
                Sent::Rollback => "ROLLBACK",
            }
            .to_string()
        }

        async fn keys(admin: &mut tokio_postgres::Client, _db: &str) -> Vec<i32> {
            admin
                .query("SELECT k FROM item ORDER BY k", &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect()
        }

        async fn open_transactions(admin: &mut tokio_postgres::Client, _db: &str) -> i64 {
            admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
                    &[],
                )
                .await
                .unwrap()
                .get(0)
        }

        async fn get(pool: &Pool) -> Self::Conn {
            pool.get().await.unwrap()
        }

        async fn in_transaction(conn: &mut Self::Conn) -> bool {
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
            fresh.as_deref() != Some("t")
        }

        fn constraint(e: &Error) -> Option<String> {
            e.as_db_error()?.constraint().map(str::to_string)
        }

        async fn atomic(pool: &Pool, group: &Group<'_>) -> Result<Vec<Outcome>, AtomicError> {
            let params: Vec<Vec<&(dyn ToSql + Sync)>> =
                group.iter().map(|(_, p)| refs(p)).collect();
            let statements: Vec<(&str, &[&(dyn ToSql + Sync)])> = group
                .iter()
                .zip(&params)
                .map(|((sql, _), p)| (*sql, &p[..]))
                .collect();
            pool.atomic(&statements).await
        }

        fn begin(pool: &Pool) -> Transaction {
            pool.begin()
        }

        fn is_begun(tx: &Transaction) -> bool {
            tx.is_begun()
        }

        async fn tx_execute(
            tx: &mut Transaction,
            sql: &str,
            params: &[Val],
        ) -> Result<Outcome, Error> {
            tx.execute(sql, &refs(params)).await
        }

        async fn tx_query(tx: &mut Transaction, sql: &str) -> Result<usize, Error> {
            tx.query(sql, &[]).await.map(|rows| rows.len())
        }

        async fn tx_execute_and_commit(
            tx: Transaction,
            sql: &str,
            params: &[Val],
        ) -> Result<Outcome, Error> {
            tx.execute_and_commit(sql, &refs(params)).await
        }

        async fn tx_commit(tx: Transaction) -> Result<(), Error> {
            tx.commit().await
        }

        async fn tx_rollback(tx: Transaction) -> Result<(), Error> {
            tx.rollback().await
        }
    }
}

#[cfg(feature = "postgres")]
pub use pg::connect as pg_connect;

#[cfg(feature = "mysql")]
mod my {
    use super::*;
    use crate::common::MysqlServer;
    use crate::common::backend::My;
    use batchpool::mysql::{Outcome, Pool, Transaction};
    use mysql_async::prelude::Queryable;
    use mysql_async::{OptsBuilder, Params};
    use std::collections::HashMap;
    use std::sync::OnceLock;

    /// The transaction tests' own server, with the general query log on.
    pub fn server() -> &'static MysqlServer {
        static SERVER: OnceLock<MysqlServer> = OnceLock::new();
        SERVER.get_or_init(|| {
            MysqlServer::start(&["--general-log=1", "--general-log-file=general.log"])
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

    fn params(params: &[Val]) -> Params {
        crate::common::backend::my_params(params)
    }

    /// The `ID Command` field of a general-log line and what follows it:
    /// `[YYMMDD HH:MM:SS]\t\t   ID Command\tArgument`.
    fn entry(line: &str) -> Option<(&str, &str, String)> {
        let fields: Vec<&str> = line.split('\t').collect();
        let at = fields.iter().position(|f| {
            f.trim().split_once(' ').is_some_and(|(id, cmd)| {
                !id.is_empty()
                    && id.bytes().all(|b| b.is_ascii_digit())
                    && !cmd.trim().is_empty()
                    && cmd
                        .trim()
                        .chars()
                        .all(|c| c.is_ascii_alphabetic() || c == ' ')
            })
        })?;
        let (id, command) = fields[at].trim().split_once(' ')?;
        Some((id, command.trim(), fields[at + 1..].join("\t")))
    }

    impl TxBackend for My {
        type Tx = Transaction;
        type Conn = batchpool::mysql::PooledConn;

        async fn env(max_size: usize) -> Env<My> {
            let db = Env::<My>::new_db_name();
            let port = server().port();
            // Connected without a default database, so its statements are
            // not counted as the pool's.
            let mut admin = mysql_async::Conn::new(opts(port, None)).await.unwrap();
            admin
                .query_drop(format!("CREATE DATABASE {db}"))
                .await
                .unwrap();
            admin
                .query_drop(format!(
                    "CREATE TABLE {db}.item (k INT PRIMARY KEY, v VARCHAR(100) NOT NULL) \
                     ENGINE=InnoDB"
                ))
                .await
                .unwrap();
            let upstream = format!("127.0.0.1:{port}").parse().unwrap();
            let name = db.clone();
            Env::assemble(db, upstream, admin, move |proxy| {
                Pool::from_opts(opts(proxy.port(), Some(&name)))
                    .max_size(max_size)
                    .build()
                    .unwrap()
            })
            .await
        }

        /// `Command first-word` of what the pool's connections to `db` sent:
        /// `Query START TRANSACTION`, `Execute INSERT`, `Query COMMIT`.
        fn logged(db: &str) -> Vec<String> {
            let path = server().dir().join("data").join("general.log");
            let log = std::fs::read_to_string(path).unwrap();
            let mut mine: HashMap<String, bool> = HashMap::new();
            let mut out = Vec::new();
            for (id, command, arg) in log.lines().filter_map(entry) {
                if command == "Connect" {
                    let on_db = arg
                        .split(" on ")
                        .nth(1)
                        .and_then(|r| r.split_whitespace().next())
                        == Some(db);
                    mine.insert(id.to_string(), on_db);
                } else if mine.get(id).copied().unwrap_or(false) {
                    let mut words = arg.split_whitespace();
                    let first = match words.next().unwrap_or("") {
                        "START" => "START TRANSACTION",
                        first => first,
                    };
                    out.push(format!("{command} {first}"));
                }
            }
            out
        }

        fn sent(entry: Sent<'_>) -> String {
            match entry {
                Sent::Begin => "Query START TRANSACTION".to_string(),
                Sent::Statement(sql) => {
                    format!("Execute {}", sql.split_whitespace().next().unwrap_or(""))
                }
                Sent::Commit => "Query COMMIT".to_string(),
                Sent::Rollback => "Query ROLLBACK".to_string(),
            }
        }

        async fn keys(admin: &mut mysql_async::Conn, db: &str) -> Vec<i32> {
            admin
                .query(format!("SELECT k FROM {db}.item ORDER BY k"))
                .await
                .unwrap()
        }

        async fn open_transactions(admin: &mut mysql_async::Conn, db: &str) -> i64 {
            // Not information_schema.innodb_trx: that is a cache refreshed
            // only after 100 ms without readers. The monitor output is
            // always current; it names sessions by thread id.
            let sessions: Vec<u64> = admin
                .exec(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?",
                    (db,),
                )
                .await
                .unwrap();
            let status: Option<(String, String, String)> = admin
                .query_first("SHOW ENGINE INNODB STATUS")
                .await
                .unwrap();
            let (_, _, status) = status.expect("InnoDB monitor output");
            status
                .split("---TRANSACTION ")
                .filter(|t| t.lines().next().is_some_and(|l| l.contains(", ACTIVE ")))
                .filter_map(|t| {
                    let after = t.split(" thread id ").nth(1)?;
                    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse::<u64>().ok()
                })
                .filter(|id| sessions.contains(id))
                .count() as i64
        }

        async fn get(pool: &Pool) -> Self::Conn {
            pool.get().await.unwrap()
        }

        async fn in_transaction(conn: &mut Self::Conn) -> bool {
            let in_tx: Option<i64> = conn.query_first("SELECT @@in_transaction").await.unwrap();
            in_tx != Some(0)
        }

        fn constraint(_: &Error) -> Option<String> {
            None
        }

        async fn atomic(pool: &Pool, group: &Group<'_>) -> Result<Vec<Outcome>, AtomicError> {
            pool.atomic(group.iter().map(|(sql, p)| (*sql, params(p))))
                .await
        }

        fn begin(pool: &Pool) -> Transaction {
            pool.begin()
        }

        fn is_begun(tx: &Transaction) -> bool {
            tx.is_begun()
        }

        async fn tx_execute(tx: &mut Transaction, sql: &str, p: &[Val]) -> Result<Outcome, Error> {
            tx.execute(sql, params(p)).await
        }

        async fn tx_query(tx: &mut Transaction, sql: &str) -> Result<usize, Error> {
            tx.query(sql, ()).await.map(|rows| rows.len())
        }

        async fn tx_execute_and_commit(
            tx: Transaction,
            sql: &str,
            p: &[Val],
        ) -> Result<Outcome, Error> {
            tx.execute_and_commit(sql, params(p)).await
        }

        async fn tx_commit(tx: Transaction) -> Result<(), Error> {
            tx.commit().await
        }

        async fn tx_rollback(tx: Transaction) -> Result<(), Error> {
            tx.rollback().await
        }
    }
}
