//! The methods of [`Pool`] and [`Transaction`] that take tokio-postgres'
//! parameters: each hands them to the generic pool.

use tokio_postgres::Row;

use super::connect::{Connector, WithTls};
use super::driver::PgConfig;
use super::encode::PgArgs;
use super::pooler::Pooler;
use super::statements::Statements;
use super::tls::{SslMode, TlsConfig};
use super::{Client, Listener, Outcome, Params, Pool, PoolBuilder, Transaction};
use crate::error::{AtomicError, Error, Kind};
use crate::pool::HookFuture;

impl Pool {
    /// Starts building a pool from a parsed tokio-postgres config.
    pub fn from_config(config: tokio_postgres::Config) -> PoolBuilder {
        crate::pool::PoolBuilder::new(Ok(PgConfig {
            pg: config,
            statements: None,
            pooler: None,
            tls: TlsConfig::default(),
        }))
    }

    /// Runs one statement and returns this caller's own outcome.
    ///
    /// A single-row `INSERT ... VALUES (...)` (optionally `ON CONFLICT`,
    /// `RETURNING`) waits in the queue of its SQL text and is sent with other
    /// callers' rows as one multi-row INSERT; the future resolves once that
    /// statement has committed, with this row's own count and `RETURNING`
    /// row, or this row's own error. A keyed read, update or delete
    /// (`... WHERE id = $1`) is coalesced the same way, with this caller's
    /// own count (see the [guide](crate::guide#keyed-reads-updates-and-deletes)).
    /// Other statements run as they are; transaction control (`BEGIN`,
    /// `COMMIT`...) is refused ([`Error::is_refused`]).
    ///
    /// Parameter count and types are checked here, before the row is queued.
    /// Dropping the future before its row was taken by a flush means the row
    /// is never sent; after that, the row is written anyway.
    pub async fn execute(&self, sql: &str, params: &Params<'_>) -> Result<Outcome, Error> {
        self.execute_args(sql, PgArgs::Refs(params), None).await
    }

    /// Runs one statement once per parameter row, like JDBC
    /// `addBatch`/`executeBatch`, and returns each row's own outcome in order.
    ///
    /// Batchable rows run in order on one connection, in as few multi-row
    /// statements as the limits allow; other statements are pipelined on one
    /// connection. A row with bad parameters fails alone. The outer error is
    /// for the statement as a whole (it cannot be prepared, the pool is
    /// closed).
    pub async fn execute_many<'p, I, P>(
        &self,
        sql: &str,
        rows: I,
    ) -> Result<Vec<Result<Outcome, Error>>, Error>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Params<'p>>,
    {
        let rows: Vec<P> = rows.into_iter().collect();
        let args = rows.iter().map(|p| PgArgs::Refs(p.as_ref())).collect();
        self.execute_many_args(sql, args).await
    }

    /// Runs a query and returns all its rows.
    ///
    /// A keyed read, update or delete (`SELECT ... FROM t WHERE id = $1`)
    /// is coalesced with other callers' statements of the same text, and
    /// this caller gets its own rows (see the
    /// [guide](crate::guide#keyed-reads-updates-and-deletes));
    /// every other statement, an INSERT's included, runs on its own.
    pub async fn query(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, Error> {
        self.query_args(sql, PgArgs::Refs(params)).await
    }

    /// Runs a query expected to return exactly one row
    /// ([`Error::is_row_count`] otherwise).
    pub async fn query_one(&self, sql: &str, params: &Params<'_>) -> Result<Row, Error> {
        self.query_one_args(sql, PgArgs::Refs(params)).await
    }

    /// Runs a query returning zero or one row.
    pub async fn query_opt(&self, sql: &str, params: &Params<'_>) -> Result<Option<Row>, Error> {
        self.query_opt_args(sql, PgArgs::Refs(params)).await
    }

    /// Runs `statements` as one all-or-nothing group and returns each
    /// statement's outcome, in order.
    ///
    /// * One statement is sent alone in autocommit: no `BEGIN`, no `COMMIT`
    ///   reach the server. One round trip.
    /// * Several are written as `BEGIN`, the statements and `COMMIT` in one
    ///   flush (pipelined): one round trip. If statement *k* fails, nothing of
    ///   the group committed; the error says which ([`AtomicError::index`])
    ///   and why ([`AtomicError::error`], with its SQLSTATE).
    /// * No statements: nothing is sent and no connection is taken.
    ///
    /// The statements run as they are on one pooled connection, never
    /// coalesced with other callers' rows. Transaction control statements are
    /// refused. Parameters are checked before anything is sent.
    ///
    /// Cancellation: dropping the future before the group was written sends
    /// nothing; once written, the server runs the whole group to its
    /// `COMMIT`, and the connection goes back to the pool only after a
    /// `ROLLBACK` sent after it was answered (so never inside a transaction).
    ///
    /// ```no_run
    /// # async fn demo(pool: batchpool::postgres::Pool) -> Result<(), batchpool::Error> {
    /// let (from, to, amount) = (1i64, 2i64, 50i64);
    /// let outcomes = pool
    ///     .atomic(&[
    ///         ("UPDATE account SET balance = balance - $2 WHERE id = $1", &[&from, &amount]),
    ///         ("UPDATE account SET balance = balance + $2 WHERE id = $1", &[&to, &amount]),
    ///         ("INSERT INTO transfer (src, dst, amount) VALUES ($1, $2, $3)", &[&from, &to, &amount]),
    ///     ])
    ///     .await?;
    /// assert_eq!(outcomes.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn atomic(
        &self,
        statements: &[(&str, &Params<'_>)],
    ) -> Result<Vec<Outcome>, AtomicError> {
        let statements = statements
            .iter()
            .map(|(sql, params)| (*sql, PgArgs::Refs(params)))
            .collect();
        self.atomic_args(statements).await
    }

    /// A pooled connection, for anything batchpool does not wrap: it derefs
    /// (also mutably) to [`tokio_postgres::Client`], so `transaction()`,
    /// `build_transaction()`, savepoints (`transaction()` or `savepoint()`
    /// on a transaction), COPY, and any function that takes
    /// `&mut tokio_postgres::Client` (a migration tool) work on it. It is
    /// never used for coalesced rows while you hold it. To receive
    /// notifications use [`listen`](Pool::listen): the pool's connections
    /// do not deliver them. When it comes back its session is reset before the pool
    /// uses it again (within `recycle_timeout`; a connection that does not
    /// answer is closed): an open transaction is rolled back, and settings
    /// (`search_path`, role, ...), cursors, `LISTEN`s, advisory locks,
    /// temporary tables and sequence state are reset, as `DISCARD ALL` does
    /// except that prepared statements are kept. Behind a pooler (see
    /// [Behind a pooler](super#behind-a-pooler)) only the transaction is
    /// rolled back: the session belongs to the pooler.
    pub async fn get(&self) -> Result<Client, Error> {
        self.lend().await
    }

    /// A [`Listener`] on a connection of its own, listening to `channels`
    /// (none: call [`Listener::listen`] later): a stream of the
    /// notifications sent to them (`NOTIFY`, `pg_notify`). The connection
    /// is opened within `create_timeout`, as the pool's are, and `LISTEN`
    /// is answered within the statement deadline; a hook or `LISTEN` that
    /// fails fails the call.
    ///
    /// ```no_run
    /// # async fn demo(pool: batchpool::postgres::Pool) -> Result<(), batchpool::Error> {
    /// use futures_util::StreamExt;
    ///
    /// let mut listener = pool.listen(&["orders", "refunds"]).await?;
    /// pool.execute("SELECT pg_notify('orders', $1)", &[&"42"]).await?;
    /// let notification = listener.next().await.expect("a listener's stream ends with an error")?;
    /// assert_eq!((notification.channel(), notification.payload()), ("orders", "42"));
    /// # Ok(()) }
    /// ```
    pub async fn listen(&self, channels: &[&str]) -> Result<Listener, Error> {
        let engine = self.engine();
        let _work = engine.enter()?;
        let connections = crate::backend::batch::Backend::connections(&engine.backend);
        let open = connections.manager().open_listener();
        let (client, received, io, limit) = match connections.timeouts().create {
            None => open.await,
            Some(limit) => tokio::time::timeout(limit, open).await.map_err(|_| {
                Error::new(
                    Kind::Timeout,
                    "the listener's connection was not opened within create_timeout",
                )
            })?,
        }
        .map_err(|e| {
            Error::with_source(Kind::Connect, "could not open the listener's connection", e)
        })?;
        Listener::new(client, received, io, limit, channels).await
    }
}

impl PoolBuilder {
    /// Which prepared statements the pool sends (default
    /// [`Statements::Auto`]: named on a direct connection, unnamed behind a
    /// pooler). A `statements=` parameter in the connection string wins
    /// over this. See [Behind a pooler](super#behind-a-pooler).
    pub fn statements(mut self, mode: Statements) -> Self {
        self.options.statements = Some(mode);
        self
    }

    /// What sits between the pool and PostgreSQL (default
    /// [`Pooler::Auto`]: found out on the first connection). A `pooler=`
    /// parameter in the connection string wins over this. Say it to skip
    /// the questions `auto` asks, or where they cannot tell. See [Behind a
    /// pooler](super#behind-a-pooler).
    pub fn pooler(mut self, pooler: Pooler) -> Self {
        self.options.pooler = Some(pooler);
        self
    }

    /// Fewest rows for which a coalesced flush or an
    /// [`execute_many`](Pool::execute_many) statement of a plain INSERT goes
    /// out as one binary `COPY ... FROM STDIN` instead of a multi-row INSERT
    /// (default `Some(64)`; `None` turns COPY off; values below 2 count as
    /// 2).
    ///
    /// Only statements whose every value is a bare parameter bound to a
    /// named column, without `ON CONFLICT` or `RETURNING`, into a table
    /// where COPY and INSERT do the same (no row-level security, no foreign
    /// partitions, no `GENERATED ALWAYS` identity or generated column
    /// written). With unnamed statements (behind a pooler) each COPY is
    /// prepared after its `BEGIN` and closed before its `COMMIT`, one round
    /// trip more than with named statements. Never through pgpool-II or a
    /// pooler that refuses transaction blocks (see [`Pooler`]). Outcomes are
    /// the same as the INSERT's: a count of 1 per row, and a failing row's
    /// own single-row INSERT error (the rows before it, it, and the rows
    /// after it are re-run apart).
    pub fn copy_threshold(mut self, min_rows: Option<usize>) -> Self {
        self.options.copy_threshold = Some(min_rows);
        self
    }

    /// How connections use TLS (default [`SslMode::Prefer`], as libpq and
    /// tokio-postgres). An `sslmode=` parameter in the connection string
    /// wins over this; this wins over the mode of a `tokio_postgres::Config`
    /// given to [`Pool::from_config`]. See [TLS](super#tls).
    pub fn ssl_mode(mut self, mode: SslMode) -> Self {
        self.options.tls.mode = Some(mode);
        self
    }

    /// A PEM file of the root certificates to trust, for
    /// [`SslMode::VerifyCa`] / [`SslMode::VerifyFull`] (and `Require`,
    /// which then verifies the chain, as libpq does); without it Mozilla's
    /// roots are trusted. An `sslrootcert=` parameter in the connection
    /// string wins over this. Read when the pool is built: a missing file
    /// fails [`build`](crate::PoolBuilder::build).
    pub fn ssl_root_cert(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.options.tls.root_cert = Some(path.into());
        self
    }

    /// Connects with your own tokio-postgres TLS connector instead of
    /// batchpool's (any `MakeTlsConnect<Socket>`: tokio-postgres-rustls
    /// with your `rustls::ClientConfig`, postgres-native-tls,
    /// postgres-openssl). The mode still decides whether TLS is negotiated
    /// (`disable`: never; `prefer`: if the server offers it; `require` and
    /// the `verify-*` modes: or no connection), and what the certificate
    /// must pass is the connector's business. `sslrootcert`, `sslcert` and
    /// `sslkey` cannot be combined with it (load them into the connector).
    ///
    /// ```no_run
    /// # fn demo(config: rustls::ClientConfig) -> Result<(), batchpool::Error> {
    /// let tls = tokio_postgres_rustls::MakeRustlsConnect::new(config);
    /// let pool = batchpool::postgres::Pool::builder("host=db.example.com user=app sslmode=require")
    ///     .tls_connector(tls)
    ///     .build()?;
    /// # let _ = pool; Ok(()) }
    /// ```
    pub fn tls_connector<T>(mut self, tls: T) -> Self
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>
            + Clone
            + Send
            + Sync
            + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
    {
        self.options.connector = Some(Connector::new(WithTls(tls), true));
        self
    }

    /// Runs `hook` on every new connection before the pool uses it, and
    /// again after the pool resets a session (a connection back from
    /// [`Pool::get`]): set `application_name`, `search_path`, the time zone
    /// or any other session state every connection should have. Hooks run
    /// in the order they were added. If one fails, the connection is
    /// closed and the caller that needed it gets an error (its message
    /// names the hook) for which [`Error::is_connect`] is true.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), batchpool::Error> {
    /// let pool = batchpool::postgres::Pool::builder("host=127.0.0.1 user=postgres")
    ///     .post_create(|client| {
    ///         Box::pin(async move {
    ///             client
    ///                 .batch_execute("SET application_name = 'orders'; SET search_path = app")
    ///                 .await?;
    ///             Ok(())
    ///         })
    ///     })
    ///     .build()?;
    /// # let _ = pool; Ok(()) }
    /// ```
    ///
    /// Behind a pooler (PgBouncer) a session setting stays on whichever
    /// server connection ran it: set such things in the pooler or on the
    /// role (`ALTER ROLE ... SET`) instead.
    pub fn post_create<F>(mut self, hook: F) -> Self
    where
        F: for<'a> Fn(&'a mut tokio_postgres::Client) -> HookFuture<'a> + Send + Sync + 'static,
    {
        self.options.hooks.add_post_create(hook);
        self
    }

    /// Runs `hook` each time an idle connection is about to be used again
    /// (after the pool's own checks and session reset). An error drops the
    /// connection quietly and another one is taken (or opened), as
    /// deadpool's `pre_recycle` does: use it to retire connections by your
    /// own rule.
    pub fn pre_recycle<F>(mut self, hook: F) -> Self
    where
        F: for<'a> Fn(&'a mut tokio_postgres::Client) -> HookFuture<'a> + Send + Sync + 'static,
    {
        self.options.hooks.add_pre_recycle(hook);
        self
    }
}

impl Transaction {
    /// Runs a statement in the transaction and returns its outcome (its row
    /// count and first `RETURNING` row). Never coalesced.
    pub async fn execute(&mut self, sql: &str, params: &Params<'_>) -> Result<Outcome, Error> {
        self.execute_args(sql, PgArgs::Refs(params)).await
    }

    /// Runs a query in the transaction and returns all its rows.
    pub async fn query(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, Error> {
        self.query_args(sql, PgArgs::Refs(params)).await
    }

    /// Runs a query expected to return exactly one row.
    pub async fn query_one(&mut self, sql: &str, params: &Params<'_>) -> Result<Row, Error> {
        self.query_one_args(sql, PgArgs::Refs(params)).await
    }

    /// Runs a query returning zero or one row.
    pub async fn query_opt(
        &mut self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Option<Row>, Error> {
        self.query_opt_args(sql, PgArgs::Refs(params)).await
    }

    /// Runs a last statement and commits, in one round trip.
    ///
    /// If it is the transaction's only statement it is sent alone, in
    /// autocommit: no `BEGIN`, no `COMMIT`. Otherwise the statement and
    /// `COMMIT` are written together; if the statement fails, nothing
    /// commits and its error is returned.
    pub async fn execute_and_commit(
        self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Outcome, Error> {
        self.execute_and_commit_args(sql, PgArgs::Refs(params))
            .await
    }
}
