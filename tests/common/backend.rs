//! One interface over both backends, so that a test body is written once and
//! runs against PostgreSQL and MariaDB (and PostgreSQL behind poolers).
//!
//! A shared test is a generic `async fn name<B: TestBackend>()`; the
//! [`both!`] macro turns a list of them into `pg::name` and `mysql::name`
//! tests, [`three!`] also into the pooler tests of [`bouncer!`],
//! [`pg_and_bouncer!`] into `pg::name` and those, [`pg_and_pgbouncer!`]
//! into `pg::name` and `pgbouncer::name` only. [`Pg`] and [`My`]
//! implement [`TestBackend`] with each backend's own pool
//! (`batchpool::postgres::Pool`, `batchpool::mysql::Pool`) and native
//! parameter API; the other PostgreSQL backends are [`Pg`] reaching the
//! server through a pooler: [`Bouncer`] through a PgBouncer in transaction
//! mode (its pools in unnamed statement mode, `statements=unnamed` in their
//! URLs), [`StatementBouncer`] through one in statement mode, [`PgpoolSr`]
//! and [`PgpoolRaw`] through pgpool-II in `streaming_replication` mode with
//! load balancing and in `raw` mode (these three with URLs that name no
//! parameter of batchpool's: the pool finds out what it goes through).
//! Shared SQL is written with `?` placeholders, which [`TestBackend::sql`]
//! numbers (`$1, $2, …`) for PostgreSQL. Each half is compiled only with
//! its cargo feature (`postgres`, `mysql`).

use std::future::Future;
use std::net::SocketAddr;

use batchpool::{BatchConfig, Error, PoolBuilder, Stats};

/// `BATCHPOOL_TEST_PATHS=plain`: every pool the harness builds sends
/// multi-row INSERTs only — no COPY, no MariaDB bulk command, no pipelined
/// statements — so the shared suites check the plain path alone (the
/// default, unset, uses the library's defaults: every path on).
pub fn plain_paths() -> bool {
    matches!(
        std::env::var("BATCHPOOL_TEST_PATHS")
            .as_deref()
            .map(str::trim),
        Ok("plain")
    )
}

/// A harness pool's batching: `config`, without pipelining under
/// [`plain_paths`].
pub fn paths_config(config: BatchConfig) -> BatchConfig {
    if plain_paths() {
        config.pipeline(false)
    } else {
        config
    }
}

/// A harness pool's builder: the bulk path off under [`plain_paths`].
pub trait Paths: Sized {
    /// This builder, with the bulk path off under [`plain_paths`].
    fn paths(self) -> Self;
}

#[cfg(feature = "postgres")]
impl Paths for PoolBuilder<batchpool::postgres::Postgres> {
    fn paths(self) -> Self {
        if plain_paths() {
            self.copy_threshold(None)
        } else {
            self
        }
    }
}

#[cfg(feature = "mysql")]
impl Paths for PoolBuilder<batchpool::mysql::MySql> {
    fn paths(self) -> Self {
        if plain_paths() {
            self.bulk_threshold(None)
        } else {
            self
        }
    }
}

/// A parameter value of a shared test, bound natively by each backend
/// (`i32`/`i64`/`f64`/`bool`/`String`, or a text NULL).
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Int(i32),
    BigInt(i64),
    Float(f64),
    Bool(bool),
    Text(String),
    /// SQL NULL (a text NULL for PostgreSQL).
    Null,
}

/// `impl From<type> for Val` for each `type => variant`.
macro_rules! val_from {
    ($($t:ty => $variant:ident),*) => {
        $(impl From<$t> for Val {
            fn from(v: $t) -> Val {
                Val::$variant(v)
            }
        })*
    };
}
val_from!(i32 => Int, i64 => BigInt, f64 => Float, bool => Bool, String => Text);

impl From<&str> for Val {
    fn from(v: &str) -> Val {
        Val::Text(v.to_string())
    }
}

impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Val {
        v.map_or(Val::Null, Into::into)
    }
}

/// `vals![a, b]`: a `Vec<Val>` of parameters.
macro_rules! vals {
    ($($v:expr),* $(,)?) => {
        ::std::vec::Vec::<$crate::common::backend::Val>::from([
            $($crate::common::backend::Val::from($v)),*
        ])
    };
}
pub(crate) use vals;

/// What the shared tests read from one caller's outcome (each backend's
/// `Outcome` type).
pub trait TestOutcome: std::fmt::Debug + Send + 'static {
    fn rows_affected(&self) -> u64;
    fn is_exact(&self) -> bool;
    /// The caller's own generated id where the backend reports one without
    /// `RETURNING` (MySQL's `last_insert_id`); always `None` for PostgreSQL.
    fn insert_id(&self) -> Option<u64>;
    /// Columns 0 (an integer id) and 1 (text) of the `RETURNING` row.
    fn returned_id_text(&self) -> Option<(i64, String)>;
}

/// Database errors the shared tests provoke on both backends.
#[derive(Clone, Copy, Debug)]
pub enum DbError {
    DuplicateKey,
    CheckViolation,
    SyntaxError,
    NoSuchTable,
}

/// Per [`DbError`], in order: PostgreSQL's SQLSTATE (its native code too),
/// MySQL's SQLSTATE and MySQL's error number.
const CODES: [(&str, &str, &str); 4] = [
    ("23505", "23000", "1062"),
    ("23514", "23000", "4025"),
    ("42601", "42000", "1064"),
    ("42P01", "42S02", "1146"),
];

/// What a shared test needs from a backend. Shared SQL uses `?`
/// placeholders (see [`TestBackend::sql`]).
pub trait TestBackend: Send + Sync + 'static {
    type Pool: Clone + Send + Sync + 'static;
    type Outcome: TestOutcome;
    /// A direct connection (no pool, no proxy) for watching and steering
    /// the server from the side.
    type Admin: Send;
    /// batchpool's backend type (`batchpool::postgres::Postgres`,
    /// `batchpool::mysql::MySql`): `Self::Pool` is `batchpool::Pool<Self::Db>`.
    type Db: batchpool::Backend;

    /// PostgreSQL (`true`) or MySQL (`false`): the few texts and codes that
    /// differ are chosen from it, here in the trait ([`TestBackend::pick`]).
    const IS_PG: bool;

    /// The backend's name in messages.
    const NAME: &'static str = if Self::IS_PG { "PostgreSQL" } else { "MariaDB" };
    /// Column type of an auto-generated 64-bit key.
    const SERIAL: &'static str = if Self::IS_PG {
        "bigserial"
    } else {
        "BIGINT AUTO_INCREMENT"
    };
    /// Whether the pool reaches the server through a pooler that shares
    /// server sessions (PgBouncer in transaction or statement mode): a raw
    /// client from `Pool::get` may then only use unnamed statements
    /// (`query_typed`, `simple_query`).
    const BEHIND_POOLER: bool = false;
    /// Whether transaction blocks reach the server: not through PgBouncer in
    /// statement mode, where the pool refuses what needs one
    /// (`atomic` of several statements, `Transaction` statements).
    const TRANSACTIONS: bool = true;
    /// Whether the pool sends a transaction's messages one at a time, each
    /// answered before the next (MySQL; PostgreSQL through pgpool-II),
    /// rather than pipelined in one round trip.
    const IN_TURN: bool = !Self::IS_PG;
    /// Whether the pool reaches the server through pgpool-II (which it
    /// asks, after a transaction in which a statement failed, whether it
    /// knows the transaction ended: `SELECT 1`, and `ABORT` while it
    /// answers that with `25P02` itself).
    const PGPOOL: bool = false;
    /// Whether outcomes carry per-row generated ids without `RETURNING`
    /// ([`TestOutcome::insert_id`]): MySQL's `last_insert_id`.
    const INSERT_IDS: bool = !Self::IS_PG;
    /// `pg` for PostgreSQL, `my` for MySQL: for the few texts that differ.
    fn pick<T>(pg: T, my: T) -> T {
        if Self::IS_PG { pg } else { my }
    }

    /// `pipelined` where a transaction's messages go out in one round trip,
    /// `in_turn` where they go one at a time ([`TestBackend::IN_TURN`]).
    fn in_turn<T>(pipelined: T, in_turn: T) -> T {
        if Self::IN_TURN { in_turn } else { pipelined }
    }

    /// The codes of `error` as (`Error::code()`, [`TestBackend::native_code`]).
    fn codes(error: DbError) -> (&'static str, &'static str) {
        let (pg, sqlstate, number) = CODES[error as usize];
        Self::pick((pg, pg), (sqlstate, number))
    }

    /// `sql` with its `?` placeholders made native (`$1, $2, …` for
    /// PostgreSQL; unchanged for MySQL). `?` inside quotes is left alone.
    fn sql(sql: &str) -> String {
        if !Self::IS_PG {
            return sql.to_string();
        }
        let mut out = String::with_capacity(sql.len() + 8);
        let (mut n, mut quote) = (0, None);
        for c in sql.chars() {
            match (c, quote) {
                ('\'' | '"', None) => quote = Some(c),
                (q, Some(open)) if q == open => quote = None,
                ('?', None) => {
                    n += 1;
                    out.push_str(&format!("${n}"));
                    continue;
                }
                _ => {}
            }
            out.push(c);
        }
        out
    }

    /// The server's own code of a database error: PostgreSQL's SQLSTATE
    /// (from `as_db_error`), MySQL's error number (from `as_mysql_error`).
    fn native_code(e: &Error) -> Option<String>;

    /// Fails the test unless the server hands out consecutive
    /// auto-increment ids within a statement (MySQL's
    /// `innodb_autoinc_lock_mode` 0 or 1, the default), which per-row ids
    /// rely on. Nothing to check for PostgreSQL.
    fn require_consecutive_ids(pool: &Self::Pool) -> impl Future<Output = ()> + Send;

    /// The shared server of this test process (`pg_url` / `mysql_url`).
    fn url() -> String;

    /// The server's version string.
    fn version(url: &str) -> impl Future<Output = String> + Send;

    /// A fresh, empty database on the shared server: its URL.
    fn fresh_db() -> impl Future<Output = String> + Send;

    /// A pool on `url` with `max_size` connections and `config` batching.
    fn pool(url: &str, config: BatchConfig, max_size: usize) -> Self::Pool;

    /// A pool reaching the database of `url` through a TCP proxy listening
    /// on `proxy`.
    fn pool_via(url: &str, proxy: SocketAddr, config: BatchConfig, max_size: usize) -> Self::Pool;

    /// A pool on the database of `url` (through a TCP proxy listening on
    /// `proxy`, if given) with `max_size` connections and `config`
    /// batching, and whatever else `tune` sets on the builder (time limits:
    /// `|b| b.statement_timeout(..).wait_timeout(..)`).
    fn pool_with(
        url: &str,
        proxy: Option<SocketAddr>,
        config: BatchConfig,
        max_size: usize,
        tune: impl FnOnce(PoolBuilder<Self::Db>) -> PoolBuilder<Self::Db>,
    ) -> Self::Pool;

    /// The server address behind `url` (for a proxy in front of it).
    fn upstream(url: &str) -> SocketAddr;

    /// `pool.execute(sql, params)`.
    fn execute(
        pool: &Self::Pool,
        sql: &str,
        params: &[Val],
    ) -> impl Future<Output = Result<Self::Outcome, Error>> + Send;

    /// `pool.execute_many(sql, rows)`.
    #[allow(clippy::type_complexity)]
    fn execute_many(
        pool: &Self::Pool,
        sql: &str,
        rows: &[Vec<Val>],
    ) -> impl Future<Output = Result<Vec<Result<Self::Outcome, Error>>, Error>> + Send;

    /// `pool.query(sql, params)` with every column read as text (`None` for
    /// NULL); SQL that wants typed columns casts them.
    fn query_text(
        pool: &Self::Pool,
        sql: &str,
        params: &[Val],
    ) -> impl Future<Output = Result<Vec<Vec<Option<String>>>, Error>> + Send;

    /// `pool.query(sql, params)`, column 0 of every row as an `i32`
    /// (an `INT` column).
    fn query_i32(
        pool: &Self::Pool,
        sql: &str,
        params: &[Val],
    ) -> impl Future<Output = Result<Vec<i32>, Error>> + Send;

    /// `pool.query_one(sql, params)`, column 0 as an `i64` (a count).
    fn query_i64(
        pool: &Self::Pool,
        sql: &str,
        params: &[Val],
    ) -> impl Future<Output = Result<i64, Error>> + Send;

    fn stats(pool: &Self::Pool) -> Stats;
    /// `(status.size, status.available)`.
    fn size_available(pool: &Self::Pool) -> (usize, usize);
    /// `pool.get()`: a connection the caller holds until it drops it.
    fn hold(pool: &Self::Pool) -> impl Future<Output = Box<dyn Send>> + Send;
    fn close(pool: &Self::Pool) -> impl Future<Output = ()> + Send;
    /// `pool.close_timeout(limit)`.
    fn close_timeout(
        pool: &Self::Pool,
        limit: std::time::Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send;
    /// `pool.is_closed()`.
    fn is_closed(pool: &Self::Pool) -> bool;
    /// `pool.begin()`, then `execute(sql, params)` in the transaction, then
    /// `commit()`: the statement's outcome, or the first error.
    fn tx_execute_commit(
        pool: &Self::Pool,
        sql: &str,
        params: &[Val],
    ) -> impl Future<Output = Result<Self::Outcome, Error>> + Send;
    /// `pool.explain(sql)`.
    fn explain(
        pool: &Self::Pool,
        sql: &str,
    ) -> impl Future<Output = Result<batchpool::Explain, Error>> + Send;

    /// A direct connection to the database of `url`.
    fn admin(url: &str) -> impl Future<Output = Self::Admin> + Send;
    /// Runs `sql` (no parameters, any number of statements) on `admin`.
    fn admin_run(admin: &mut Self::Admin, sql: &str) -> impl Future<Output = ()> + Send {
        async move {
            if let Err((code, e)) = Self::admin_rows(admin, sql).await {
                panic!("{sql}: {code} {e}");
            }
        }
    }
    /// Runs a query on `admin` through the text protocol: every column as
    /// text (`None` for NULL), or the error's native code and message.
    #[allow(clippy::type_complexity)]
    fn admin_rows(
        admin: &mut Self::Admin,
        sql: &str,
    ) -> impl Future<Output = Result<Vec<Vec<Option<String>>>, (String, String)>> + Send;
    /// Connection ids (backend pids, thread ids) of other sessions whose
    /// statement starts with `prefix` and waits for a row lock.
    fn lock_waiters(admin: &mut Self::Admin, prefix: &str)
    -> impl Future<Output = Vec<u64>> + Send;
    /// Whether another session is running a statement starting with `prefix`.
    fn running(admin: &mut Self::Admin, prefix: &str) -> impl Future<Output = bool> + Send;
    /// Has the server end session `id` (pg_terminate_backend / KILL).
    fn kill_session(admin: &mut Self::Admin, id: u64) -> impl Future<Output = ()> + Send;
}

/// `count(*)` of `table`.
pub async fn count<B: TestBackend>(pool: &B::Pool, table: &str) -> i64 {
    B::query_i64(pool, &format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("count")
}

/// Waits until the pool's queues are empty and no flush runs (it always
/// gets there: every queued row is flushed or cancelled).
pub async fn settle<B: TestBackend>(pool: &B::Pool) {
    wait_for("the pool to settle", || {
        let s = B::stats(pool);
        s.queued == 0 && s.in_flight == 0
    })
    .await;
}

/// A task sampling `stat` of the pool's stats `samples` times, `every`
/// apart: the largest value it saw.
pub fn max_stat<B: TestBackend>(
    pool: &B::Pool,
    samples: usize,
    every: std::time::Duration,
    stat: fn(&Stats) -> u64,
) -> tokio::task::JoinHandle<u64> {
    let pool = pool.clone();
    tokio::spawn(async move {
        let mut max = 0;
        for _ in 0..samples {
            max = max.max(stat(&B::stats(&pool)));
            tokio::time::sleep(every).await;
        }
        max
    })
}

/// Every connection is back in the pool: none leaked. (A flush hands its
/// rows their outcomes a moment before it returns its connection, so this
/// waits for that first.)
pub async fn all_returned<B: TestBackend>(pool: &B::Pool) {
    wait_for("every connection back in the pool", || {
        let (size, available) = B::size_available(pool);
        size == available
    })
    .await;
    let (size, available) = B::size_available(pool);
    assert_eq!(size, available, "pool size, available connections");
}

/// Polls `condition` every 10 ms until it holds; see [`Patience`].
pub async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let patience = Patience::new(what);
    while !condition() {
        patience.wait().await;
    }
}

/// The pause of a polling loop, only for conditions that are certain to
/// become true: `loop { if done { break } patience.wait().await }`. After
/// 120 s it fails the test (a bug, not a slow machine) instead of hanging.
pub struct Patience<'a> {
    what: &'a str,
    start: std::time::Instant,
}

impl<'a> Patience<'a> {
    pub fn new(what: &'a str) -> Patience<'a> {
        Patience {
            what,
            start: std::time::Instant::now(),
        }
    }

    pub async fn wait(&self) {
        assert!(
            self.start.elapsed() < std::time::Duration::from_secs(120),
            "gave up waiting for {}",
            self.what
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Runs generic test bodies as `pg::name` and `mysql::name` tests, each
/// compiled with its backend's feature. The tests come in groups: the
/// `#[tokio::test]` arguments of an `async fn name<B>()`, or `test` for a
/// plain `fn name<B>()`, then `=>` and the names:
///
/// ```ignore
/// both! {
///     (flavor = "multi_thread", worker_threads = 2) => [
///         close_flushes_queued_rows,
///         full_queue_fails_fast,
///     ],
///     test => [rewritten_statement_inserts_n_rows],
/// }
/// ```
macro_rules! both {
    ($($group:tt => [$($name:ident),* $(,)?]),* $(,)?) => {
        #[cfg(feature = "postgres")]
        mod pg {
            $($crate::common::backend::tests_for!(Pg, $group, $($name)*);)*
        }
        #[cfg(feature = "mysql")]
        mod mysql {
            $($crate::common::backend::tests_for!(My, $group, $($name)*);)*
        }
    };
}
pub(crate) use both;

/// [`both!`], and the same tests once more behind each pooler (see
/// [`bouncer!`]).
macro_rules! three {
    ($($group:tt => [$($name:ident),* $(,)?]),* $(,)?) => {
        $crate::common::backend::both! { $($group => [$($name),*]),* }
        $crate::common::backend::bouncer! { $($group => [$($name),*]),* }
    };
}
pub(crate) use three;

/// Runs generic test bodies behind each pooler, in the syntax of
/// [`both!`]: PgBouncer in transaction mode as `pgbouncer::name`
/// ([`Bouncer`]: batchpool in unnamed statement mode), PgBouncer in
/// statement mode as `pgbouncer_statement::name` ([`StatementBouncer`]),
/// pgpool-II as `pgpool::name` ([`PgpoolSr`]: streaming replication, load
/// balancing) and `pgpool_raw::name` ([`PgpoolRaw`]). A body that needs a
/// transaction block asserts, where [`TestBackend::TRANSACTIONS`] is false,
/// the pool's refusal instead. A suite whose tests all hold behind a
/// pooler uses [`three!`]; one with exceptions pairs [`both!`] (or
/// [`pg_and_bouncer!`]) with a `bouncer!` listing the others, and says why
/// each one left out cannot hold behind a pooler.
macro_rules! bouncer {
    ($($group:tt => [$($name:ident),* $(,)?]),* $(,)?) => {
        #[cfg(feature = "postgres")]
        mod pgbouncer {
            $($crate::common::backend::tests_for!(Bouncer, $group, $($name)*);)*
        }
        #[cfg(feature = "postgres")]
        mod pgbouncer_statement {
            $($crate::common::backend::tests_for!(StatementBouncer, $group, $($name)*);)*
        }
        #[cfg(feature = "postgres")]
        mod pgpool {
            $($crate::common::backend::tests_for!(PgpoolSr, $group, $($name)*);)*
        }
        #[cfg(feature = "postgres")]
        mod pgpool_raw {
            $($crate::common::backend::tests_for!(PgpoolRaw, $group, $($name)*);)*
        }
    };
}
pub(crate) use bouncer;

/// For the PostgreSQL-only suites: generic bodies (`B` a [`PgVia`]) run as
/// `pg::name` ([`Pg`]) and `pgbouncer::name` ([`Bouncer`]), in the syntax
/// of [`both!`].
macro_rules! pg_and_bouncer {
    ($($group:tt => [$($name:ident),* $(,)?]),* $(,)?) => {
        #[cfg(feature = "postgres")]
        mod pg {
            $($crate::common::backend::tests_for!(Pg, $group, $($name)*);)*
        }
        $crate::common::backend::bouncer! { $($group => [$($name),*]),* }
    };
}
pub(crate) use pg_and_bouncer;

/// [`pg_and_bouncer!`] with one pooler only, PgBouncer in transaction mode
/// (`pg::name` and `pgbouncer::name`): for suites about what sits on top of
/// the pool (tower services, HTTP handlers), which the other poolers' runs
/// of the pool's own suites already cover underneath.
macro_rules! pg_and_pgbouncer {
    ($($group:tt => [$($name:ident),* $(,)?]),* $(,)?) => {
        #[cfg(feature = "postgres")]
        mod pg {
            $($crate::common::backend::tests_for!(Pg, $group, $($name)*);)*
        }
        #[cfg(feature = "postgres")]
        mod pgbouncer {
            $($crate::common::backend::tests_for!(Bouncer, $group, $($name)*);)*
        }
    };
}
pub(crate) use pg_and_pgbouncer;

/// One group of [`both!`] for one backend.
macro_rules! tests_for {
    ($backend:ident, test, $($name:ident)*) => {$(
        #[test]
        fn $name() {
            super::$name::<$crate::common::backend::$backend>()
        }
    )*};
    ($backend:ident, $args:tt, $($name:ident)*) => {$(
        #[tokio::test $args]
        async fn $name() {
            super::$name::<$crate::common::backend::$backend>().await
        }
    )*};
}
pub(crate) use tests_for;

/// What reads the same for both backends (same method names, different
/// types): `impl TestOutcome for Outcome` (with the module's `insert_id` and
/// `returned_id_text`), and, inside each `impl TestBackend`, the pool's
/// plain methods.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! same_outcome_api {
    () => {
        impl TestOutcome for Outcome {
            fn rows_affected(&self) -> u64 {
                Outcome::rows_affected(self)
            }
            fn is_exact(&self) -> bool {
                Outcome::is_exact(self)
            }
            fn insert_id(&self) -> Option<u64> {
                insert_id(self)
            }
            fn returned_id_text(&self) -> Option<(i64, String)> {
                returned_id_text(self)
            }
        }
    };
}

/// See [`same_outcome_api`]; the arguments are `IS_PG`, the `Admin` type
/// and batchpool's backend type; the module has its `native_code`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! same_pool_api {
    ($is_pg:expr, $admin:ty, $db:ty) => {
        type Pool = Pool;
        type Db = $db;
        type Outcome = Outcome;
        type Admin = $admin;
        const IS_PG: bool = $is_pg;

        fn native_code(e: &Error) -> Option<String> {
            native_code(e)
        }

        fn pool(url: &str, config: BatchConfig, max_size: usize) -> Pool {
            Pool::builder(url)
                .max_size(max_size)
                .batching(paths_config(config))
                .paths()
                .build()
                .expect("build pool")
        }

        fn stats(pool: &Pool) -> Stats {
            pool.stats()
        }

        fn size_available(pool: &Pool) -> (usize, usize) {
            let s = pool.status();
            (s.size, s.available)
        }

        async fn hold(pool: &Pool) -> Box<dyn Send> {
            Box::new(pool.get().await.expect("a pooled connection"))
        }

        async fn close(pool: &Pool) {
            pool.close().await
        }

        async fn close_timeout(pool: &Pool, limit: std::time::Duration) -> Result<(), Error> {
            pool.close_timeout(limit).await
        }

        fn is_closed(pool: &Pool) -> bool {
            pool.is_closed()
        }

        async fn explain(pool: &Pool, sql: &str) -> Result<batchpool::Explain, Error> {
            pool.explain(sql).await
        }
    };
}

#[cfg(feature = "postgres")]
pub use pg::{
    Bouncer, Pg, PgVia, PgpoolRaw, PgpoolSr, Route, StatementBouncer, pg_params, pg_upstream,
    pg_via_url,
};

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use batchpool::postgres::{Outcome, Pool};
    use tokio_postgres::types::ToSql;

    /// PostgreSQL through `batchpool::postgres::Pool`, reaching the server
    /// the way `R` says: [`Pg`] directly, [`Bouncer`] through PgBouncer.
    pub struct PgVia<R>(std::marker::PhantomData<R>);

    /// PostgreSQL, connected directly (`pg::name` tests).
    pub type Pg = PgVia<Direct>;

    /// PostgreSQL through a PgBouncer in transaction mode, with batchpool in
    /// unnamed statement mode (`pgbouncer::name` tests): the same pool type
    /// and helpers as [`Pg`]; its databases come from
    /// [`crate::common::bouncer_fresh_db`], its side connections ([`TestBackend::admin`],
    /// [`TestBackend::version`]) go to the server directly.
    pub type Bouncer = PgVia<Pooler>;

    /// PostgreSQL through a PgBouncer in statement mode
    /// (`pgbouncer_statement::name` tests), its URLs without batchpool's
    /// parameters; side connections as [`Bouncer`]'s.
    pub type StatementBouncer = PgVia<StatementPooler>;

    /// PostgreSQL through pgpool-II in `streaming_replication` mode with
    /// load balancing (`pgpool::name` tests), its URLs without batchpool's
    /// parameters; side connections as [`Bouncer`]'s.
    pub type PgpoolSr = PgVia<ViaPgpool>;

    /// PostgreSQL through pgpool-II in `raw` mode (`pgpool_raw::name`
    /// tests), as [`PgpoolSr`].
    pub type PgpoolRaw = PgVia<ViaPgpoolRaw>;

    /// How a [`PgVia`] backend reaches the server.
    pub trait Route: Send + Sync + 'static {
        /// Through a pooler that shares server sessions (PgBouncer).
        const POOLER: bool;
        /// Transaction blocks reach the server (see
        /// [`TestBackend::TRANSACTIONS`]).
        const TRANSACTIONS: bool = true;
        /// Through pgpool-II (see [`TestBackend::PGPOOL`]).
        const PGPOOL: bool = false;
        /// The backend's name in messages.
        const NAME: &'static str;
        /// batchpool's parameters in the route's URLs (`statements=unnamed`
        /// behind the transaction-mode PgBouncer), for the transaction
        /// tests' own URLs.
        const PARAMS: &'static str = "";
        /// See [`TestBackend::url`].
        fn url() -> String;
        /// See [`TestBackend::fresh_db`].
        fn fresh_db() -> impl Future<Output = String> + Send;
        /// The database of `url` (one of this route's) on the server itself.
        fn direct(url: &str) -> String;
        /// A pool builder for the database of `url`, through a TCP proxy
        /// listening on `proxy` if given.
        fn builder(url: &str, proxy: Option<SocketAddr>) -> batchpool::postgres::PoolBuilder;
        /// For the transaction tests: the address of this route's pooler in
        /// front of their own server `server` (`None`: the server itself).
        fn in_front_of(server: &crate::common::PgServer) -> Option<SocketAddr>;
    }

    /// Straight to the server: [`Pg`].
    pub struct Direct;

    impl Route for Direct {
        const POOLER: bool = false;
        const NAME: &'static str = "PostgreSQL";

        fn url() -> String {
            crate::common::pg_url()
        }

        async fn fresh_db() -> String {
            crate::common::pg_fresh_db().await
        }

        fn direct(url: &str) -> String {
            url.to_string()
        }

        fn builder(url: &str, proxy: Option<SocketAddr>) -> batchpool::postgres::PoolBuilder {
            match proxy {
                Some(proxy) => Pool::from_config(pg_via(url, proxy)),
                None => Pool::builder(url),
            }
        }

        fn in_front_of(_: &crate::common::PgServer) -> Option<SocketAddr> {
            None
        }
    }

    /// A pool from a URL string (batchpool's parameters and all), as a user
    /// would build one, through `proxy` if given.
    fn url_builder(url: &str, proxy: Option<SocketAddr>) -> batchpool::postgres::PoolBuilder {
        match proxy {
            Some(proxy) => Pool::builder(&pg_via_url(url, proxy)),
            None => Pool::builder(url),
        }
    }

    /// One throwaway pooler per server, started on first use (the
    /// transaction tests' server has poolers of its own).
    fn front<P: Send + Sync + 'static>(
        cell: &'static std::sync::OnceLock<P>,
        start: impl FnOnce() -> P,
        addr: impl Fn(&P) -> SocketAddr,
    ) -> SocketAddr {
        addr(cell.get_or_init(start))
    }

    /// Through the harness's PgBouncer, in unnamed statement mode: [`Bouncer`].
    pub struct Pooler;

    impl Route for Pooler {
        const POOLER: bool = true;
        const NAME: &'static str = "PostgreSQL via PgBouncer";
        const PARAMS: &'static str = "statements=unnamed";

        fn url() -> String {
            crate::common::bouncer_url_for(&crate::common::pg_url())
        }

        async fn fresh_db() -> String {
            crate::common::bouncer_fresh_db().await
        }

        fn direct(url: &str) -> String {
            crate::common::direct_url_for(url)
        }

        fn builder(url: &str, proxy: Option<SocketAddr>) -> batchpool::postgres::PoolBuilder {
            url_builder(url, proxy)
        }

        fn in_front_of(server: &crate::common::PgServer) -> Option<SocketAddr> {
            static FRONT: std::sync::OnceLock<crate::common::PgBouncer> =
                std::sync::OnceLock::new();
            Some(front(
                &FRONT,
                || crate::common::PgBouncer::start(&server.url()),
                crate::common::PgBouncer::addr,
            ))
        }
    }

    /// Through the harness's PgBouncer in statement mode: [`StatementBouncer`].
    pub struct StatementPooler;

    impl Route for StatementPooler {
        const POOLER: bool = true;
        const TRANSACTIONS: bool = false;
        const NAME: &'static str = "PostgreSQL via PgBouncer in statement mode";

        fn url() -> String {
            crate::common::bouncer_statement_url_for(&crate::common::pg_url())
        }

        async fn fresh_db() -> String {
            crate::common::bouncer_statement_fresh_db().await
        }

        fn direct(url: &str) -> String {
            crate::common::direct_url_for(url)
        }

        fn builder(url: &str, proxy: Option<SocketAddr>) -> batchpool::postgres::PoolBuilder {
            url_builder(url, proxy)
        }

        fn in_front_of(server: &crate::common::PgServer) -> Option<SocketAddr> {
            static FRONT: std::sync::OnceLock<crate::common::PgBouncer> =
                std::sync::OnceLock::new();
            Some(front(
                &FRONT,
                || {
                    crate::common::PgBouncer::start_in(
                        &server.url(),
                        crate::common::PoolMode::Statement,
                    )
                },
                crate::common::PgBouncer::addr,
            ))
        }
    }

    /// Through the harness's pgpool-II in streaming replication mode:
    /// [`PgpoolSr`].
    pub struct ViaPgpool;

    impl Route for ViaPgpool {
        const POOLER: bool = false;
        const PGPOOL: bool = true;
        const NAME: &'static str = "PostgreSQL via pgpool-II";

        fn url() -> String {
            crate::common::pgpool_url_for(
                &crate::common::pg_url(),
                crate::common::PgpoolMode::StreamingReplication,
            )
        }

        async fn fresh_db() -> String {
            crate::common::pgpool_fresh_db(crate::common::PgpoolMode::StreamingReplication).await
        }

        fn direct(url: &str) -> String {
            crate::common::direct_url_for(url)
        }

        fn builder(url: &str, proxy: Option<SocketAddr>) -> batchpool::postgres::PoolBuilder {
            url_builder(url, proxy)
        }

        fn in_front_of(server: &crate::common::PgServer) -> Option<SocketAddr> {
            static FRONT: std::sync::OnceLock<crate::common::Pgpool> = std::sync::OnceLock::new();
            Some(front(
                &FRONT,
                || {
                    crate::common::Pgpool::start(
                        &server.url(),
                        crate::common::PgpoolMode::StreamingReplication,
                    )
                },
                crate::common::Pgpool::addr,
            ))
        }
    }

    /// Through the harness's pgpool-II in raw mode: [`PgpoolRaw`].
    pub struct ViaPgpoolRaw;

    impl Route for ViaPgpoolRaw {
        const POOLER: bool = false;
        const PGPOOL: bool = true;
        const NAME: &'static str = "PostgreSQL via pgpool-II in raw mode";

        fn url() -> String {
            crate::common::pgpool_url_for(&crate::common::pg_url(), crate::common::PgpoolMode::Raw)
        }

        async fn fresh_db() -> String {
            crate::common::pgpool_fresh_db(crate::common::PgpoolMode::Raw).await
        }

        fn direct(url: &str) -> String {
            crate::common::direct_url_for(url)
        }

        fn builder(url: &str, proxy: Option<SocketAddr>) -> batchpool::postgres::PoolBuilder {
            url_builder(url, proxy)
        }

        fn in_front_of(server: &crate::common::PgServer) -> Option<SocketAddr> {
            static FRONT: std::sync::OnceLock<crate::common::Pgpool> = std::sync::OnceLock::new();
            Some(front(
                &FRONT,
                || crate::common::Pgpool::start(&server.url(), crate::common::PgpoolMode::Raw),
                crate::common::Pgpool::addr,
            ))
        }
    }

    static NULL_TEXT: Option<String> = None;

    /// `params` as tokio-postgres parameters.
    pub fn pg_params(params: &[Val]) -> Vec<&(dyn ToSql + Sync)> {
        params
            .iter()
            .map(|v| -> &(dyn ToSql + Sync) {
                match v {
                    Val::Int(i) => i,
                    Val::BigInt(i) => i,
                    Val::Float(f) => f,
                    Val::Bool(b) => b,
                    Val::Text(s) => s,
                    Val::Null => &NULL_TEXT,
                }
            })
            .collect()
    }

    /// `url` without batchpool's `statements=` parameter, parsed by
    /// tokio-postgres (which does not know it).
    fn parse(url: &str) -> tokio_postgres::Config {
        crate::common::strip_param(url, "statements")
            .0
            .parse()
            .expect("test url")
    }

    /// The server address behind a PostgreSQL URL (`localhost` as 127.0.0.1).
    pub fn pg_upstream(url: &str) -> SocketAddr {
        let parsed = parse(url);
        let port = parsed.get_ports().first().copied().unwrap_or(5432);
        let host = match parsed.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) if h != "localhost" => h.clone(),
            _ => "127.0.0.1".to_string(),
        };
        format!("{host}:{port}").parse().expect("upstream address")
    }

    /// A config reaching the database of `url` through `proxy` (without
    /// `url`'s statement mode: see [`pg_via_url`]).
    pub fn pg_via(url: &str, proxy: SocketAddr) -> tokio_postgres::Config {
        let parsed = parse(url);
        let mut config = tokio_postgres::Config::new();
        config.host(proxy.ip().to_string()).port(proxy.port());
        if let Some(user) = parsed.get_user() {
            config.user(user);
        }
        if let Some(db) = parsed.get_dbname() {
            config.dbname(db);
        }
        config
    }

    /// A URL reaching the database of `url` through `proxy`, with `url`'s
    /// user, password and statement mode (`statements=`).
    pub fn pg_via_url(url: &str, proxy: SocketAddr) -> String {
        let parsed = parse(url);
        let mode = crate::common::strip_param(url, "statements").1;
        let user = parsed.get_user().unwrap_or("postgres");
        let password = match parsed.get_password() {
            Some(p) => format!(":{}", percent_encode(p)),
            None => String::new(),
        };
        let db = parsed.get_dbname().unwrap_or("postgres");
        let via = format!(
            "postgresql://{}{password}@{proxy}/{}",
            percent_encode(user.as_bytes()),
            percent_encode(db.as_bytes())
        );
        crate::common::with_statements(&via, mode.as_deref())
    }

    /// Every byte but `[A-Za-z0-9_.-]` as `%XX`.
    fn percent_encode(bytes: &[u8]) -> String {
        bytes
            .iter()
            .map(|&b| {
                if b.is_ascii_alphanumeric() || b"_.-".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    }

    fn insert_id(_: &Outcome) -> Option<u64> {
        None
    }

    fn returned_id_text(out: &Outcome) -> Option<(i64, String)> {
        out.returned().map(|r| (r.get(0), r.get(1)))
    }

    same_outcome_api!();

    fn native_code(e: &Error) -> Option<String> {
        e.as_db_error().map(|db| db.code().code().to_string())
    }

    impl<R: Route> TestBackend for PgVia<R> {
        same_pool_api!(true, tokio_postgres::Client, batchpool::postgres::Postgres);

        const NAME: &'static str = R::NAME;
        const BEHIND_POOLER: bool = R::POOLER;
        const TRANSACTIONS: bool = R::TRANSACTIONS;
        const IN_TURN: bool = R::PGPOOL;
        const PGPOOL: bool = R::PGPOOL;

        fn url() -> String {
            R::url()
        }

        async fn version(url: &str) -> String {
            crate::common::pg_version(&R::direct(url)).await
        }

        async fn fresh_db() -> String {
            R::fresh_db().await
        }

        async fn require_consecutive_ids(_: &Pool) {}

        fn pool_via(url: &str, proxy: SocketAddr, config: BatchConfig, max_size: usize) -> Pool {
            R::builder(url, Some(proxy))
                .max_size(max_size)
                .batching(paths_config(config))
                .paths()
                .build()
                .expect("build pool")
        }

        fn pool_with(
            url: &str,
            proxy: Option<SocketAddr>,
            config: BatchConfig,
            max_size: usize,
            tune: impl FnOnce(PoolBuilder<Self::Db>) -> PoolBuilder<Self::Db>,
        ) -> Pool {
            tune(
                R::builder(url, proxy)
                    .max_size(max_size)
                    .batching(paths_config(config))
                    .paths(),
            )
            .build()
            .expect("build pool")
        }

        fn upstream(url: &str) -> SocketAddr {
            pg_upstream(url)
        }

        async fn tx_execute_commit(
            pool: &Pool,
            sql: &str,
            params: &[Val],
        ) -> Result<Outcome, Error> {
            let mut tx = pool.begin();
            let out = tx.execute(sql, &pg_params(params)).await?;
            tx.commit().await?;
            Ok(out)
        }

        async fn execute(pool: &Pool, sql: &str, params: &[Val]) -> Result<Outcome, Error> {
            pool.execute(sql, &pg_params(params)).await
        }

        async fn execute_many(
            pool: &Pool,
            sql: &str,
            rows: &[Vec<Val>],
        ) -> Result<Vec<Result<Outcome, Error>>, Error> {
            let rows: Vec<Vec<&(dyn ToSql + Sync)>> = rows.iter().map(|r| pg_params(r)).collect();
            pool.execute_many(sql, &rows).await
        }

        async fn query_text(
            pool: &Pool,
            sql: &str,
            params: &[Val],
        ) -> Result<Vec<Vec<Option<String>>>, Error> {
            let rows = pool.query(sql, &pg_params(params)).await?;
            Ok(rows
                .iter()
                .map(|r| (0..r.len()).map(|i| r.get(i)).collect())
                .collect())
        }

        async fn query_i32(pool: &Pool, sql: &str, params: &[Val]) -> Result<Vec<i32>, Error> {
            let rows = pool.query(sql, &pg_params(params)).await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        }

        async fn query_i64(pool: &Pool, sql: &str, params: &[Val]) -> Result<i64, Error> {
            Ok(pool.query_one(sql, &pg_params(params)).await?.get(0))
        }

        /// Straight to the server, also for [`Bouncer`].
        async fn admin(url: &str) -> tokio_postgres::Client {
            let url = R::direct(url);
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("admin connection");
            tokio::spawn(async move {
                let _ = conn.await;
            });
            client
        }

        async fn admin_rows(
            admin: &mut tokio_postgres::Client,
            sql: &str,
        ) -> Result<Vec<Vec<Option<String>>>, (String, String)> {
            let messages = admin.simple_query(sql).await.map_err(|e| {
                let code = e.code().map(|c| c.code().to_string());
                (code.unwrap_or_default(), e.to_string())
            })?;
            Ok(messages
                .iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                    }
                    _ => None,
                })
                .collect())
        }

        async fn lock_waiters(admin: &mut tokio_postgres::Client, prefix: &str) -> Vec<u64> {
            admin
                .query(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                     AND starts_with(query, $1) AND datname = current_database() \
                     AND pid <> pg_backend_pid()",
                    &[&prefix],
                )
                .await
                .expect("pg_stat_activity")
                .iter()
                .map(|r| r.get::<_, i32>(0) as u64)
                .collect()
        }

        async fn running(admin: &mut tokio_postgres::Client, prefix: &str) -> bool {
            let n: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
                     AND starts_with(query, $1) AND datname = current_database() \
                     AND pid <> pg_backend_pid()",
                    &[&prefix],
                )
                .await
                .expect("pg_stat_activity")
                .get(0);
            n > 0
        }

        async fn kill_session(admin: &mut tokio_postgres::Client, id: u64) {
            let pid = id as i32;
            admin
                .query("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .expect("pg_terminate_backend");
        }
    }
}

#[cfg(feature = "mysql")]
pub use my::{My, my_params, my_tcp_opts};

#[cfg(feature = "mysql")]
mod my {
    use super::*;
    use batchpool::mysql::{Outcome, Pool};
    use mysql_async::prelude::Queryable;
    use mysql_async::{Opts, OptsBuilder, Params, Value};

    /// MariaDB / MySQL through `batchpool::mysql::Pool`.
    pub struct My;

    /// `params` as mysql_async parameters (`Params::Empty` for none).
    pub fn my_params(params: &[Val]) -> Params {
        if params.is_empty() {
            return Params::Empty;
        }
        Params::Positional(
            params
                .iter()
                .map(|v| match v {
                    Val::Int(i) => Value::from(*i),
                    Val::BigInt(i) => Value::from(*i),
                    Val::Float(f) => Value::from(*f),
                    Val::Bool(b) => Value::from(*b),
                    Val::Text(s) => Value::from(s.as_str()),
                    Val::Null => Value::NULL,
                })
                .collect(),
        )
    }

    /// TCP only (mysql_async would otherwise move to the server's unix socket).
    pub fn my_tcp_opts(url: &str) -> OptsBuilder {
        OptsBuilder::from_opts(Opts::from_url(url).expect("test url")).prefer_socket(false)
    }

    fn text(v: Value) -> Option<String> {
        match v {
            Value::NULL => None,
            Value::Bytes(b) => Some(String::from_utf8(b).expect("utf-8 column")),
            other => Some(other.as_sql(true).trim_matches('\'').to_string()),
        }
    }

    fn insert_id(out: &Outcome) -> Option<u64> {
        out.last_insert_id()
    }

    fn returned_id_text(out: &Outcome) -> Option<(i64, String)> {
        out.returned()
            .map(|r| (r.get(0).expect("id"), r.get(1).expect("text")))
    }

    same_outcome_api!();

    fn native_code(e: &Error) -> Option<String> {
        e.as_mysql_error().map(|m| m.code.to_string())
    }

    impl TestBackend for My {
        same_pool_api!(false, mysql_async::Conn, batchpool::mysql::MySql);

        fn url() -> String {
            crate::common::mysql_url()
        }

        async fn version(url: &str) -> String {
            crate::common::mysql_version(url).await
        }

        async fn fresh_db() -> String {
            crate::common::mysql_fresh_db().await
        }

        /// Per-row ids are claimed in every `innodb_autoinc_lock_mode` (0, 1
        /// and the interleaved 2 that Galera requires): a coalesced INSERT is
        /// a "simple insert", whose values InnoDB reserves at once, and on a
        /// Galera node they are read back from the statement. Tests that
        /// check them say so when pointed at a server without InnoDB's
        /// auto-increment.
        async fn require_consecutive_ids(pool: &Pool) {
            let mode: i64 = pool
                .query_one("SELECT @@innodb_autoinc_lock_mode", ())
                .await
                .unwrap()
                .get(0)
                .unwrap();
            assert!(
                (0..=2).contains(&mode),
                "this test needs InnoDB's innodb_autoinc_lock_mode 0, 1 or 2, the server has {mode}"
            );
        }

        fn pool_via(url: &str, proxy: SocketAddr, config: BatchConfig, max_size: usize) -> Pool {
            let via = my_tcp_opts(url)
                .ip_or_hostname(proxy.ip().to_string())
                .tcp_port(proxy.port());
            Pool::from_opts(via)
                .max_size(max_size)
                .batching(paths_config(config))
                .paths()
                .build()
                .expect("build pool")
        }

        fn pool_with(
            url: &str,
            proxy: Option<SocketAddr>,
            config: BatchConfig,
            max_size: usize,
            tune: impl FnOnce(PoolBuilder<Self::Db>) -> PoolBuilder<Self::Db>,
        ) -> Pool {
            let builder = match proxy {
                Some(proxy) => Pool::from_opts(
                    my_tcp_opts(url)
                        .ip_or_hostname(proxy.ip().to_string())
                        .tcp_port(proxy.port()),
                ),
                None => Pool::builder(url),
            };
            tune(
                builder
                    .max_size(max_size)
                    .batching(paths_config(config))
                    .paths(),
            )
            .build()
            .expect("build pool")
        }

        async fn tx_execute_commit(pool: &Pool, sql: &str, p: &[Val]) -> Result<Outcome, Error> {
            let mut tx = pool.begin();
            let out = tx.execute(sql, my_params(p)).await?;
            tx.commit().await?;
            Ok(out)
        }

        fn upstream(url: &str) -> SocketAddr {
            let opts = Opts::from_url(url).expect("test url");
            let host = match opts.ip_or_hostname() {
                "localhost" => "127.0.0.1".to_string(),
                h => h.to_string(),
            };
            format!("{host}:{}", opts.tcp_port())
                .parse()
                .expect("upstream address")
        }

        async fn execute(pool: &Pool, sql: &str, p: &[Val]) -> Result<Outcome, Error> {
            pool.execute(sql, my_params(p)).await
        }

        async fn execute_many(
            pool: &Pool,
            sql: &str,
            rows: &[Vec<Val>],
        ) -> Result<Vec<Result<Outcome, Error>>, Error> {
            pool.execute_many(sql, rows.iter().map(|r| my_params(r)))
                .await
        }

        async fn query_text(
            pool: &Pool,
            sql: &str,
            p: &[Val],
        ) -> Result<Vec<Vec<Option<String>>>, Error> {
            let rows = pool.query(sql, my_params(p)).await?;
            Ok(rows
                .into_iter()
                .map(|r| r.unwrap().into_iter().map(text).collect())
                .collect())
        }

        async fn query_i32(pool: &Pool, sql: &str, p: &[Val]) -> Result<Vec<i32>, Error> {
            let rows = pool.query(sql, my_params(p)).await?;
            Ok(rows.iter().map(|r| r.get(0).expect("an INT")).collect())
        }

        async fn query_i64(pool: &Pool, sql: &str, p: &[Val]) -> Result<i64, Error> {
            Ok(pool
                .query_one(sql, my_params(p))
                .await?
                .get(0)
                .expect("an integer"))
        }

        async fn admin(url: &str) -> mysql_async::Conn {
            mysql_async::Conn::new(my_tcp_opts(url))
                .await
                .expect("admin connection")
        }

        async fn admin_rows(
            admin: &mut mysql_async::Conn,
            sql: &str,
        ) -> Result<Vec<Vec<Option<String>>>, (String, String)> {
            match admin.query::<mysql_async::Row, _>(sql).await {
                Ok(rows) => Ok(rows
                    .into_iter()
                    .map(|r| r.unwrap().into_iter().map(text).collect())
                    .collect()),
                Err(mysql_async::Error::Server(e)) => Err((e.code.to_string(), e.message)),
                Err(e) => Err((String::new(), e.to_string())),
            }
        }

        async fn lock_waiters(admin: &mut mysql_async::Conn, prefix: &str) -> Vec<u64> {
            // Not information_schema.INNODB_TRX: that is a cache refreshed
            // only after 100 ms without readers, so a poller never sees it
            // change. The monitor output is always current.
            let status: Option<(String, String, String)> = admin
                .query_first("SHOW ENGINE INNODB STATUS")
                .await
                .expect("SHOW ENGINE INNODB STATUS");
            let (_, _, status) = status.expect("InnoDB monitor output");
            let db: Option<String> = admin.query_first("SELECT DATABASE()").await.expect("db");
            let in_db = format!(" of table `{}`.", db.expect("a database"));
            status
                .split("---TRANSACTION ")
                .filter(|t| {
                    t.contains("\nLOCK WAIT ")
                        && t.contains(&in_db)
                        && t.lines().any(|l| l.starts_with(prefix))
                })
                .filter_map(|t| {
                    let after = t.split(" thread id ").nth(1)?;
                    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse().ok()
                })
                .collect()
        }

        async fn running(admin: &mut mysql_async::Conn, prefix: &str) -> bool {
            let n: Option<i64> = admin
                .exec_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                     WHERE LEFT(INFO, CHAR_LENGTH(?)) = ? AND DB = DATABASE() \
                     AND ID <> CONNECTION_ID()",
                    (prefix, prefix),
                )
                .await
                .expect("PROCESSLIST");
            n.unwrap_or(0) > 0
        }

        async fn kill_session(admin: &mut mysql_async::Conn, id: u64) {
            match admin.query_drop(format!("KILL {id}")).await {
                // 1094 unknown thread id: the session ended between the
                // PROCESSLIST read and the KILL (as pg_terminate_backend of
                // a gone backend returns false).
                Err(mysql_async::Error::Server(e)) if e.code == 1094 => {}
                other => other.expect("KILL"),
            }
        }
    }
}
