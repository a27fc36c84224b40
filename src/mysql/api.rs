//! The methods of [`Pool`] and [`Transaction`] that take mysql_async's
//! parameters: each hands them to the generic pool.

use mysql_async::{Opts, Params, Row, SslOpts};

use super::tls::SslMode;
use super::{Outcome, Pool, PoolBuilder, PooledConn, Transaction};
use crate::error::{AtomicError, Error};
use crate::pool::HookFuture;

impl Pool {
    /// Starts building a pool from mysql_async options.
    pub fn from_opts(opts: impl Into<Opts>) -> PoolBuilder {
        crate::pool::PoolBuilder::new(Ok(super::driver::MyConfig {
            opts: opts.into(),
            tls: Default::default(),
            hosts: Vec::new(),
        }))
    }

    /// Runs one statement and returns this caller's own outcome.
    ///
    /// A single-row INSERT (see the [module docs](super)) waits in the queue
    /// of its SQL text and is sent with other callers' rows as one multi-row
    /// INSERT; the future resolves once that statement has committed, with
    /// this row's own count, id and `RETURNING` row, or this row's own
    /// error. A keyed update or delete (`UPDATE t SET ... WHERE id = ?`,
    /// `DELETE FROM t WHERE id = ?`) is coalesced likewise, with this
    /// caller's own count (see the
    /// [guide](crate::guide#keyed-reads-updates-and-deletes)). Other
    /// statements run as they are (with no parameters, over the text
    /// protocol, so any statement works); transaction control
    /// (`BEGIN`, `SET autocommit`...) is refused ([`Error::is_refused`]).
    ///
    /// The parameter count is checked here, before the row is queued.
    /// Dropping the future before its row was taken by a flush means the row
    /// is never sent; after that, the row is written anyway.
    pub async fn execute(&self, sql: &str, params: impl Into<Params>) -> Result<Outcome, Error> {
        self.execute_args(sql, params.into(), None).await
    }

    /// Runs one statement once per parameter row, like JDBC
    /// `addBatch`/`executeBatch`, and returns each row's own outcome in
    /// order.
    ///
    /// Batchable rows run in order on one connection, in as few multi-row
    /// statements as the limits allow; other statements run one after the
    /// other on one connection. A row with bad parameters fails alone. The
    /// outer error is for the statement as a whole (it cannot be prepared,
    /// the pool is closed).
    pub async fn execute_many<P: Into<Params>>(
        &self,
        sql: &str,
        rows: impl IntoIterator<Item = P>,
    ) -> Result<Vec<Result<Outcome, Error>>, Error> {
        let rows = rows.into_iter().map(Into::into).collect();
        self.execute_many_args(sql, rows).await
    }

    /// Runs a query and returns the rows of its first result set.
    ///
    /// A keyed read (`SELECT ... FROM t WHERE id = ?`) is coalesced with
    /// other callers' reads of the same text, and this caller gets its own
    /// rows (see the [guide](crate::guide#keyed-reads-updates-and-deletes));
    /// every other statement runs on its own.
    pub async fn query(&self, sql: &str, params: impl Into<Params>) -> Result<Vec<Row>, Error> {
        self.query_args(sql, params.into()).await
    }

    /// Runs a query expected to return exactly one row
    /// ([`Error::is_row_count`] otherwise).
    pub async fn query_one(&self, sql: &str, params: impl Into<Params>) -> Result<Row, Error> {
        self.query_one_args(sql, params.into()).await
    }

    /// Runs a query returning zero or one row.
    pub async fn query_opt(
        &self,
        sql: &str,
        params: impl Into<Params>,
    ) -> Result<Option<Row>, Error> {
        self.query_opt_args(sql, params.into()).await
    }

    /// Runs `statements` as one all-or-nothing group and returns each
    /// statement's outcome, in order.
    ///
    /// * One statement is sent alone in autocommit: no `START TRANSACTION`,
    ///   no `COMMIT` reach the server. One round trip.
    /// * Several run as `START TRANSACTION`, the statements one by one, and
    ///   `COMMIT`: n + 2 round trips. If statement *k* fails, the rest is not
    ///   sent, `ROLLBACK` follows, and the error says which
    ///   ([`AtomicError::index`]) and why; nothing of the group committed.
    /// * No statements: nothing is sent and no connection is taken.
    ///
    /// Parameterized statements are prepared (and cached per connection)
    /// before the transaction starts, so a bad text or parameter count fails
    /// before anything runs. Transaction control is refused, and in groups of
    /// two or more so are statements MySQL commits implicitly (DDL,
    /// `LOCK TABLES`...).
    ///
    /// Cancellation: the connection never goes back to the pool inside a
    /// transaction (see [`crate::Transaction`]); a group cancelled before its
    /// `COMMIT` was sent is rolled back.
    ///
    /// ```no_run
    /// # async fn demo(pool: batchpool::mysql::Pool) -> Result<(), batchpool::Error> {
    /// let outcomes = pool
    ///     .atomic([
    ///         ("UPDATE account SET balance = balance - ? WHERE id = ?", (50, 1).into()),
    ///         ("UPDATE account SET balance = balance + ? WHERE id = ?", (50, 2).into()),
    ///     ])
    ///     .await?;
    /// assert_eq!(outcomes.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn atomic<'a, I>(&self, statements: I) -> Result<Vec<Outcome>, AtomicError>
    where
        I: IntoIterator<Item = (&'a str, Params)>,
    {
        self.atomic_args(statements.into_iter().collect()).await
    }

    /// A pooled connection, for anything batchpool does not wrap
    /// (transactions, `LOAD DATA`, session settings). It is never used for
    /// coalesced rows while you hold it, and is reset
    /// (`COM_RESET_CONNECTION`) when it comes back.
    pub async fn get(&self) -> Result<PooledConn, Error> {
        self.lend().await
    }
}

impl PoolBuilder {
    /// Hosts to open connections on, in order, replacing the URL's (or
    /// the options') host: `"host"`, `"host:port"`, `"[v6]:port"` (port
    /// 3306 when none is given). Everything else (user, password,
    /// database, TLS, parameters) is the URL's, for every host. The URL
    /// form `mysql://app@a:3306,b:3306,c/app` sets the same list.
    ///
    /// A new connection tries the host the last one opened on, then the
    /// others in list order (going round once), each attempt bounded by
    /// [`create_timeout`](crate::PoolBuilder::create_timeout); a host is
    /// passed over when it is down, when its session cannot be set up, or
    /// when it is a Galera node not ready for writes (a node that is not
    /// synced is used only when no host is). See
    /// [Several hosts](super#several-hosts-failover) for what happens to
    /// statements on a node that dies. A malformed entry makes
    /// [`build`](crate::PoolBuilder::build) fail with an error for which
    /// [`Error::is_config`] is true.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), batchpool::Error> {
    /// use batchpool::mysql::Pool;
    ///
    /// let pool = Pool::builder("mysql://app@db1:3306/app")
    ///     .hosts(["db1:3306", "db2:3306", "db3:3306"])
    ///     .build()?;
    /// # let _ = pool; Ok(()) }
    /// ```
    pub fn hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let parsed = hosts
            .into_iter()
            .map(|h| super::hosts::parse_host(h.as_ref()))
            .collect::<Result<Vec<_>, Error>>()
            .and_then(|list| {
                if list.is_empty() {
                    Err(Error::new(
                        crate::error::Kind::Config,
                        "hosts: the list is empty",
                    ))
                } else {
                    Ok(list)
                }
            });
        self.options.hosts = Some(parsed);
        self
    }

    /// Whether `INSERT IGNORE`, `REPLACE` and `ON DUPLICATE KEY UPDATE` are
    /// coalesced (default `false`: they run one by one and report MySQL's
    /// exact counts and ids). With `true` (an opt-in to inexact outcomes)
    /// their per-row counts are exact only in the cases listed in the
    /// [module docs](super#per-row-outcomes), `Outcome::is_exact()` says
    /// which, and their per-row `last_insert_id` is `None`.
    pub fn coalesce_upserts(mut self, on: bool) -> Self {
        self.options.coalesce_upserts = on;
        self
    }

    /// Fewest rows for which a coalesced flush or an
    /// [`execute_many`](Pool::execute_many) statement of a plain INSERT goes
    /// out as one MariaDB bulk command (`COM_STMT_BULK_EXECUTE`: the
    /// one-row statement prepared once, the rows' values sent as an array)
    /// instead of a multi-row INSERT (default `Some(2)`; `None` turns the
    /// bulk path off; values below 2 count as 2).
    ///
    /// Only where the outcomes stay exactly the multi-row INSERT's: a plain
    /// `INSERT` (not IGNORE, REPLACE, ON DUPLICATE KEY UPDATE or RETURNING)
    /// whose every value is a bare `?`, whose per-row ids are not computed
    /// (see [Per-row outcomes](super#per-row-outcomes)), in a strict
    /// session, on a server that runs the command (MariaDB 10.2.7 and
    /// later: asked once per pool; MySQL never; never a Galera node, which
    /// can acknowledge a bulk command whose rows certification threw away,
    /// see [Galera](super#galera)), when every row binds the
    /// same kind of value to each placeholder (the command sends one type
    /// per column) and the rows fit one packet. Everything else goes out as
    /// the multi-row INSERT. A bulk command is one statement: it fails as a
    /// whole, and its rows are then re-run apart as the INSERT's would be.
    pub fn bulk_threshold(mut self, min_rows: Option<usize>) -> Self {
        self.options.bulk_threshold = Some(min_rows);
        self
    }

    /// How connections use TLS (default: as the URL says; without TLS
    /// parameters, none, as mysql_async). An `ssl-mode=` parameter in the
    /// URL wins over this. See [TLS](super#tls).
    pub fn ssl_mode(mut self, mode: SslMode) -> Self {
        self.options.tls.mode = Some(mode);
        self
    }

    /// TLS with your own mysql_async [`SslOpts`] (root certificates,
    /// client identity, verification switches, the TLS server name with
    /// `with_danger_tls_hostname_override`), used whenever TLS is on: always,
    /// unless the mode ([`ssl_mode`](PoolBuilder::ssl_mode) or the URL's
    /// `ssl-mode`) is `DISABLED`, or `PREFERRED` and the server offers no
    /// TLS. What the certificate must pass is then these options' business.
    /// The URL's `ssl-ca` / `ssl-cert` / `ssl-key` cannot be combined with
    /// it.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), batchpool::Error> {
    /// use mysql_async::SslOpts;
    ///
    /// let ssl = SslOpts::default()
    ///     .with_root_certs(vec![std::path::PathBuf::from("/etc/mysql/ca.pem").into()])
    ///     .with_disable_built_in_roots(true);
    /// let pool = batchpool::mysql::Pool::builder("mysql://app@db.example.com/app")
    ///     .ssl_opts(ssl)
    ///     .build()?;
    /// # let _ = pool; Ok(()) }
    /// ```
    pub fn ssl_opts(mut self, ssl: SslOpts) -> Self {
        self.options.tls.custom = Some(ssl);
        self
    }

    /// Runs `hook` on every new connection before the pool uses it, and
    /// again after the pool resets a session (`COM_RESET_CONNECTION`, for a
    /// connection back from [`Pool::get`]): set session variables
    /// (`time_zone`, `sql_mode`, `group_concat_max_len`...) every connection
    /// should have. The pool reads the session's `auto_increment_increment`
    /// and `sql_mode` after the hooks, so ids and strictness stay exact.
    /// Hooks run in the order they were added. If one fails, the connection
    /// is closed and the caller that needed it gets an error (its message
    /// names the hook) for which [`Error::is_connect`] is true.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), batchpool::Error> {
    /// use mysql_async::prelude::Queryable;
    ///
    /// let pool = batchpool::mysql::Pool::builder("mysql://app@127.0.0.1/app")
    ///     .post_create(|conn| {
    ///         Box::pin(async move {
    ///             conn.query_drop("SET time_zone = '+00:00'").await?;
    ///             Ok(())
    ///         })
    ///     })
    ///     .build()?;
    /// # let _ = pool; Ok(()) }
    /// ```
    pub fn post_create<F>(mut self, hook: F) -> Self
    where
        F: for<'a> Fn(&'a mut mysql_async::Conn) -> HookFuture<'a> + Send + Sync + 'static,
    {
        self.options.hooks.add_post_create(hook);
        self
    }

    /// Runs `hook` each time an idle connection is about to be used again
    /// (after the pool's own checks and session reset). An error drops the
    /// connection quietly and another one is taken (or opened), as
    /// deadpool's `pre_recycle` does.
    pub fn pre_recycle<F>(mut self, hook: F) -> Self
    where
        F: for<'a> Fn(&'a mut mysql_async::Conn) -> HookFuture<'a> + Send + Sync + 'static,
    {
        self.options.hooks.add_pre_recycle(hook);
        self
    }
}

impl Transaction {
    /// Runs a statement in the transaction and returns its outcome. Never
    /// coalesced. Parameters as for [`Pool::execute`].
    pub async fn execute(
        &mut self,
        sql: &str,
        params: impl Into<Params>,
    ) -> Result<Outcome, Error> {
        self.execute_args(sql, params.into()).await
    }

    /// Runs a query in the transaction and returns the rows of its first
    /// result set.
    pub async fn query(&mut self, sql: &str, params: impl Into<Params>) -> Result<Vec<Row>, Error> {
        self.query_args(sql, params.into()).await
    }

    /// Runs a query expected to return exactly one row.
    pub async fn query_one(&mut self, sql: &str, params: impl Into<Params>) -> Result<Row, Error> {
        self.query_one_args(sql, params.into()).await
    }

    /// Runs a query returning zero or one row.
    pub async fn query_opt(
        &mut self,
        sql: &str,
        params: impl Into<Params>,
    ) -> Result<Option<Row>, Error> {
        self.query_opt_args(sql, params.into()).await
    }

    /// Runs a last statement and commits. As the transaction's only
    /// statement it is sent alone in autocommit (one round trip, no
    /// `START TRANSACTION`, no `COMMIT`); otherwise it is followed by
    /// `COMMIT` (two round trips), and if it fails nothing commits.
    pub async fn execute_and_commit(
        self,
        sql: &str,
        params: impl Into<Params>,
    ) -> Result<Outcome, Error> {
        self.execute_and_commit_args(sql, params.into()).await
    }
}
