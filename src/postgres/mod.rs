//! PostgreSQL: the coalescing pool on deadpool + tokio-postgres.
//!
//! [`Pool`] is [`crate::Pool`]`<`[`Postgres`]`>`; parameters are
//! tokio-postgres' own (`&[&(dyn ToSql + Sync)]`), rows are
//! [`tokio_postgres::Row`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), batchpool::Error> {
//! use batchpool::BatchConfig;
//! use batchpool::postgres::Pool;
//!
//! let pool = Pool::builder("host=127.0.0.1 user=postgres dbname=app")
//!     .max_size(8)
//!     .batching(BatchConfig::default())
//!     .build()?;
//! let out = pool
//!     .execute("INSERT INTO users (name) VALUES ($1) RETURNING id", &[&"ann"])
//!     .await?;
//! let id: i64 = out.returned().unwrap().get(0);
//! # let _ = id; Ok(()) }
//! ```
//!
//! # Types: the driver, re-exported
//!
//! tokio-postgres is re-exported as [`batchpool::postgres::tokio_postgres`](tokio_postgres),
//! so `Row`, `ToSql`, `FromSql` and `types::Type` can be named without a
//! dependency of your own, always at the version batchpool uses.
//!
//! Which Rust types a column maps to is decided by tokio-postgres's cargo
//! features (`with-uuid-1` for `uuid::Uuid`, `with-chrono-0_4` for chrono's
//! dates and times, `with-serde_json-1` for `serde_json::Value` as `json`
//! / `jsonb`, `with-time-0_3` for the time crate). Turn them on through
//! batchpool's features of the same names, which turn on the driver's:
//!
//! ```toml
//! [dependencies]
//! batchpool = { version = "0.1", features = ["with-uuid-1", "with-chrono-0_4", "with-serde_json-1"] }
//! uuid = "1"
//! ```
//!
//! (Adding `tokio-postgres = { version = "0.7", features = ["with-uuid-1"] }`
//! to your own `Cargo.toml` works too: cargo builds one tokio-postgres with
//! the features every dependent asks for, as long as the versions are
//! compatible.) The type crates themselves (`uuid`, `chrono`, `serde_json`)
//! are yours to add, at the major version the feature names.
//!
//! # Round trips
//!
//! tokio-postgres writes a request into the connection's queue the first
//! time its future is polled, and the connection task writes everything
//! queued in one go. batchpool polls `BEGIN`, the statements and `COMMIT`
//! together, in order, in one poll, so they leave in one write and the server
//! answers them after one round trip. With every statement already prepared
//! on the connection (the first use of a text on a connection adds one round
//! trip to prepare it; all new texts of one call are prepared together):
//!
//! | call | round trips | sent |
//! |---|---|---|
//! | `atomic([s])` | 1 | `s` in autocommit |
//! | `atomic([s1..sn])`, n ≥ 2 | 1 | `BEGIN`, each `si`, `COMMIT` |
//! | `begin()` + `commit()`/`rollback()` or drop | 0 | nothing; no connection taken |
//! | `execute(s)` + `commit()` | 2 | `BEGIN`+`s`, `COMMIT` |
//! | `execute(s1)` + `execute_and_commit(s2)` | 2 | `BEGIN`+`s1`, `s2`+`COMMIT` |
//! | `execute_and_commit(s)` alone | 1 | `s` in autocommit |
//!
//! Every extended-protocol statement carries its own `Sync`, so when
//! statement *k* of a group fails the server keeps reading: the later
//! statements fail with `25P02`, and the pipelined `COMMIT` answers with the
//! command tag `ROLLBACK`, which tokio-postgres reports as success. The
//! outcome is therefore read from the statements' own results.
//!
//! `execute_many` of a statement that is not coalesced pipelines its rows
//! on one connection (each its own autocommit statement).

//! # Behind a pooler
//!
//! A pooler in transaction mode (PgBouncer `pool_mode = transaction`, and
//! most managed poolers) gives each transaction, and each statement outside
//! one, whichever server connection is free. A named prepared statement is
//! kept by the server connection it was prepared on, so after the next
//! statement it may be gone (`26000`), or, worse, another client's statement
//! of the same name may be there: tokio-postgres names statements `s0`,
//! `s1`, ... from a counter of the process, so two processes behind one
//! pooler use the same names for different statements.
//!
//! [`Statements`] chooses what the pool sends:
//!
//! * [`Statements::Auto`] (default): named statements on a direct
//!   connection; unnamed ones when a connection turns out to reach
//!   PostgreSQL through a pooler (its cancel key does not name the backend
//!   process serving it).
//! * [`Statements::Unnamed`]: every statement (coalesced batches, `execute`,
//!   `execute_many`, queries, `atomic`, [`Transaction`]) is one unnamed
//!   Parse/Bind/Execute with the parameter types the pool learned once per
//!   statement text (by preparing the text inside a transaction and closing
//!   it before the transaction ends). Safe behind any pooler. The
//!   multi-row statements of a plain INSERT of built-in scalar types are
//!   one text for any row count (`INSERT ... SELECT * FROM unnest($1::type[],
//!   ...)`, one array per column), and its large ones go out as COPY,
//!   prepared and closed inside the transaction that runs it.
//! * [`Statements::Named`]: always named. Right for a direct connection, a
//!   pooler in session mode, or PgBouncer 1.21 or later with
//!   `max_prepared_statements` set (it then tracks named statements itself).
//!
//! Set it with [`PoolBuilder::statements`] or in the connection string:
//! `postgresql://app@pgbouncer:6432/app?statements=unnamed`,
//! `host=pgbouncer port=6432 statements=unnamed` (the string wins).
//!
//! Behind a transaction-mode pooler, [`Pool::atomic`] and [`Transaction`]
//! keep their guarantees: a group or transaction is one server
//! transaction, so the pooler keeps it on one server connection from `BEGIN`
//! to `COMMIT`. Session state does not carry over between transactions, so
//! the pool never sets `statement_timeout` on such connections (set it on
//! the role or database: `ALTER ROLE app SET statement_timeout = '30s'`);
//! the limit the pool reads from the server, or
//! [`PoolBuilder::statement_timeout`] if you set a tighter one, is its own
//! deadline for an answer. Connections from [`Pool::get`] are the
//! driver's own: use `query_typed` / `execute_typed` on them.
//!
//! What sits between is [`Pooler`]: found out on the pool's first
//! connection, or said with `pooler=` in the connection string
//! (`postgresql://app@pgbouncer:6432/app?pooler=statement`) or
//! [`PoolBuilder::pooler`]. Behind a pooler that refuses transaction
//! blocks (PgBouncer `pool_mode = statement`) types are learned without a
//! transaction, COPY is left out, and what needs a transaction block
//! (`atomic` of several statements, [`Transaction`] statements other than
//! `execute_and_commit` alone) is refused before anything is sent. Through
//! pgpool-II COPY is left out (tokio-postgres's COPY stalls there) and a
//! transaction's messages go out one at a time. Every new connection checks
//! that a statement sent on its own commits, and commits once for it where
//! something between began a transaction ahead of it (pgpool-II in raw
//! mode). The guide's "Behind a pooler" says why each.

//! # Your own connection: transactions, savepoints, migrations
//!
//! [`Pool::get`] lends one of the pool's connections as a [`Client`], which
//! derefs, also mutably, to [`tokio_postgres::Client`]: `transaction()`,
//! `build_transaction()` (isolation level, read-only, deferrable),
//! savepoints (`transaction()` or `savepoint(name)` on a transaction), COPY,
//! and tools that take `&mut tokio_postgres::Client` (schema migrations)
//! work as on a plain tokio-postgres connection:
//!
//! ```no_run
//! # async fn demo(pool: batchpool::postgres::Pool) -> Result<(), Box<dyn std::error::Error>> {
//! async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
//!     let mut tx = client.transaction().await?;
//!     tx.batch_execute("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY)").await?;
//!     let savepoint = tx.savepoint("optional").await?;
//!     if savepoint.batch_execute("CREATE EXTENSION pg_trgm").await.is_err() {
//!         savepoint.rollback().await?;
//!     } else {
//!         savepoint.commit().await?;
//!     }
//!     tx.commit().await
//! }
//!
//! let mut client = pool.get().await?;
//! migrate(&mut client).await?;
//! # Ok(()) }
//! ```
//!
//! No coalesced row runs on a lent connection until it is back and reset
//! (see [`Pool::get`]): a transaction left open on it (a forgotten
//! `tokio_postgres::Transaction`, a bare `BEGIN`) is rolled back first, and
//! a connection that does not answer the reset is closed.

//! # LISTEN / NOTIFY
//!
//! tokio-postgres delivers a notification only to whoever polls the
//! connection for it, which the pool's connections are not. A [`Listener`]
//! ([`Pool::listen`]) is a connection of its own, opened as the pool's
//! are (TLS, TCP keepalive, `post_create` hooks), that does: it is a
//! `Stream` of [`tokio_postgres::Notification`]s (channel, payload, the
//! sender's process id), with [`Listener::listen`], [`Listener::unlisten`]
//! and [`Listener::unlisten_all`]. It does not reconnect: a lost connection
//! ends the stream with an error (notifications sent meanwhile would be
//! missed, so the application decides how to catch up). It needs a session
//! of its own on the server, so not through a pooler in transaction mode.
//!
//! ```no_run
//! # async fn demo(pool: batchpool::postgres::Pool) -> Result<(), batchpool::Error> {
//! use futures_util::StreamExt;
//!
//! let mut listener = pool.listen(&["orders"]).await?;
//! while let Some(notification) = listener.next().await {
//!     let notification = notification?; // the connection was lost
//!     println!("order {}", notification.payload());
//! }
//! # Ok(()) }
//! ```
//!
//! # Session settings
//!
//! The pool's statements run with the session's own settings: those of the
//! connection string (`options=-c statement_timeout=5000`), the role
//! (`ALTER ROLE app SET ...`), the database and the server, then your
//! `post_create` hooks. The pool sets nothing over them unless you ask
//! ([`PoolBuilder::statement_timeout`], and then not on [`Pool::get`]
//! connections). A connection back from [`Pool::get`] is reset with `RESET
//! ALL` (back to those same defaults, not the server's), the hooks run
//! again, and the session's `statement_timeout`, which bounds the pool's
//! wait for each answer (plus 1 s), is read again in the same round trip.
//!
//! # TLS
//!
//! With the `rustls` feature (on by default) connections use TLS as libpq's
//! `sslmode` says, in the connection string (`sslmode=verify-full`) or
//! [`PoolBuilder::ssl_mode`]:
//!
//! | [`SslMode`] | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | if the server offers it | not checked |
//! | `require` | always, or no connection | not checked; with `sslrootcert`, as `verify-ca` (libpq) |
//! | `verify-ca` | always | chain to a trusted root |
//! | `verify-full` | always | chain, and names the host (`host=`, also with `hostaddr=`) |
//!
//! Trusted roots: the PEM file `sslrootcert=` ([`PoolBuilder::ssl_root_cert`]),
//! else Mozilla's root set (webpki-roots). `sslcert=` / `sslkey=` give a
//! client certificate. The handshake is rustls with the ring provider (TLS
//! 1.2 and 1.3; the pool does not need a process-wide provider), and SCRAM
//! channel binding works over it (tokio-postgres-rustls). A refused
//! handshake is an error for which [`Error::is_connect`](crate::Error::is_connect)
//! is true and whose text says why (`invalid peer certificate: UnknownIssuer`,
//! `certificate not valid for name "db"`, `server does not support TLS`).
//! Over a Unix-domain socket (`host=/var/run/postgresql`) TLS is not used,
//! whatever the mode, as libpq does.
//!
//! Your own connector (any `MakeTlsConnect<Socket>`) goes to
//! [`PoolBuilder::tls_connector`]; the mode still decides whether TLS is
//! negotiated. [`TlsConfig`] gives plain tokio-postgres the same connector
//! and the rest of the string. Without the `rustls` feature `prefer`
//! connects in the clear and the other TLS modes need a connector.

mod api;
mod batch;
mod connect;
mod copy;
mod driver;
mod encode;
mod errors;
mod family;
mod keyed;
mod listen;
mod manager;
mod own;
mod pipeline;
mod pooler;
mod statements;
mod table;
mod tls;
mod unnamed;
mod unnest;
#[cfg(feature = "rustls")]
mod verify;

#[cfg(feature = "bench")]
pub(crate) use self::copy::PgCopy;
#[cfg(any(feature = "tower", feature = "bench"))]
pub(crate) use self::encode::PgArgs;
pub use self::encode::PgValue;
#[cfg(feature = "bench")]
pub(crate) use self::encode::{PgRow, Raw, encode};
pub use self::listen::Listener;
pub use self::manager::{ClientWrapper, Manager};
pub use self::pooler::{Pooler, behind_pooler, ensure_autocommit, find_pooler};
pub use self::statements::Statements;
pub use self::tls::{SslMode, TlsConfig};
/// The driver crate, at the version batchpool uses (see
/// [Types](self#types-the-driver-re-exported)).
pub use tokio_postgres;

/// The PostgreSQL backend: a [`Pool`] is a `batchpool::Pool<Postgres>`.
///
/// Holds the pool's connections; built by [`PoolBuilder::build`].
pub struct Postgres {
    pool: deadpool::managed::Pool<Manager>,
    /// Fewest rows a plain shape's statement sends as COPY (`None`: never).
    copy_threshold: Option<usize>,
    /// What is between the pool and PostgreSQL (shared with the manager).
    far: std::sync::Arc<pooler::FarEnd>,
    /// Whether the warning that the catalog cannot be read was logged (once
    /// per pool: every text learned after it meets the same catalog).
    catalog_warned: std::sync::atomic::AtomicBool,
    /// Families of keyed update texts run together.
    families: family::Families,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl crate::backend::Backend for Postgres {}

/// A coalescing PostgreSQL connection pool (see [`crate::Pool`]).
pub type Pool = crate::pool::Pool<Postgres>;

/// Builds a [`Pool`].
pub type PoolBuilder = crate::pool::PoolBuilder<Postgres>;

/// A PostgreSQL transaction with a lazy `BEGIN` (see [`crate::Transaction`]).
pub type Transaction = crate::pool::Transaction<Postgres>;

/// What one caller's statement did (see [`crate::Outcome`]).
pub type Outcome = crate::outcome::Outcome<tokio_postgres::Row>;

/// A pooled connection, from [`Pool::get`]: derefs (also mutably) to
/// [`tokio_postgres::Client`], so `&mut client` goes wherever a
/// `&mut tokio_postgres::Client` is taken, and goes back to the pool when
/// dropped.
pub type Client = deadpool::managed::Object<Manager>;

/// Connection pool status (sizes), from deadpool.
pub type Status = deadpool::Status;

/// One statement's parameters, as tokio-postgres takes them.
pub type Params<'a> = [&'a (dyn tokio_postgres::types::ToSql + Sync)];

pub use crate::error::AtomicError;

/// `name` as a quoted SQL identifier: in double quotes, each double quote
/// in it doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
