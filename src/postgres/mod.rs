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

mod api;
mod batch;
mod driver;
mod encode;
mod errors;
mod manager;
mod pipeline;
mod statements;
mod table;
mod unnamed;

#[cfg(any(feature = "tower", feature = "bench"))]
pub(crate) use self::encode::PgArgs;
pub use self::encode::PgValue;
#[cfg(feature = "bench")]
pub(crate) use self::encode::encode;
pub use self::manager::{ClientWrapper, Manager};
pub use self::statements::Statements;

/// The PostgreSQL backend: a [`Pool`] is a `batchpool::Pool<Postgres>`.
///
/// Holds the pool's connections; built by [`PoolBuilder::build`].
pub struct Postgres {
    pool: deadpool::managed::Pool<Manager>,
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

/// A pooled connection, from [`Pool::get`]: derefs to
/// [`tokio_postgres::Client`] and goes back to the pool when dropped.
pub type Client = deadpool::managed::Object<Manager>;

/// Connection pool status (sizes), from deadpool.
pub type Status = deadpool::Status;

/// One statement's parameters, as tokio-postgres takes them.
pub type Params<'a> = [&'a (dyn tokio_postgres::types::ToSql + Sync)];

pub use crate::error::AtomicError;
