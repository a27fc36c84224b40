//! An async connection pool for PostgreSQL ([`tokio-postgres`]) and
//! MySQL/MariaDB ([`mysql_async`]), built on [`deadpool`], that makes writes
//! cheap: single-row `INSERT ... VALUES (...)` statements from many concurrent
//! tasks are coalesced into one multi-row INSERT, every value bound as a
//! parameter, and each caller still gets **its own** outcome — its row count,
//! its `RETURNING` row, its own error.
//!
//! # Example
//!
//! ```no_run
//! use batchpool::BatchConfig;
//! use batchpool::postgres::Pool;
//!
//! # async fn demo() -> Result<(), batchpool::Error> {
//! let pool = Pool::builder("host=127.0.0.1 user=postgres dbname=app")
//!     .max_size(8)
//!     .batching(BatchConfig::default()) // natural batching, up to 1000 rows
//!     .build()?;
//!
//! // From any number of tasks at once; each awaits its own row.
//! let out = pool
//!     .execute("INSERT INTO users (name, email) VALUES ($1, $2)", &[&"ann", &"ann@example.com"])
//!     .await?;
//! assert_eq!(out.rows_affected(), 1);
//!
//! let out = pool
//!     .execute("INSERT INTO users (name) VALUES ($1) RETURNING id", &[&"bob"])
//!     .await?;
//! let id: i64 = out.returned().unwrap().get(0); // this caller's own row
//!
//! // Not batchable: runs as it is.
//! pool.execute("UPDATE users SET n = n + 1 WHERE id = $1", &[&id]).await?;
//! let rows = pool.query("SELECT name FROM users WHERE id = $1", &[&id]).await?;
//! # let _ = rows;
//! println!("{:?}", pool.stats()); // batches, rows per batch, flush reasons, queue wait
//! pool.close().await; // flushes everything queued, then closes
//! # Ok(()) }
//! ```
//!
//! # How it works: classify → queue → flush → fan out
//!
//! 1. **Classify.** Each distinct SQL text is tokenized once (bounded cache).
//!    Only a single-row `INSERT ... VALUES (...)`, optionally with
//!    `ON CONFLICT` / `RETURNING`, is batchable; everything else passes
//!    through unchanged, except transaction control, which `execute` refuses
//!    ([`Error::is_refused`]). [`Pool::explain`] says why a text is not
//!    coalesced.
//! 2. **Queue.** The caller's parameters are type-checked and encoded in its
//!    own task, then the row joins the queue of its SQL text. The queue is
//!    bounded ([`BatchConfig::queue_capacity`]): when full, callers wait or
//!    get an overloaded error ([`QueueFull`]).
//! 3. **Flush.** By default as soon as a connection is free (no added latency
//!    at low load); while all are busy, rows accumulate. A flush is one
//!    autocommit multi-row statement of a bounded set of sizes (so prepared
//!    statements are reused), limited by rows, bind parameters and bytes.
//! 4. **Fan out.** Each row's count, `RETURNING` row or error goes back to its
//!    own caller. If the statement fails with a row-specific database error,
//!    nothing of it committed, and its rows are re-run in smaller groups so
//!    only the offending callers get the error.
//!
//! # One pool, two backends
//!
//! [`Pool`]`<B>`, [`PoolBuilder`], [`Transaction`] and [`Outcome`] are written
//! once, generic over the sealed [`Backend`] trait;
//! [`postgres::Pool`] (`Pool<`[`postgres::Postgres`]`>`)
//! and [`mysql::Pool`] (`Pool<`[`mysql::MySql`]`>`) add
//! the methods that take each driver's own parameters. Cargo features
//! `postgres` and `mysql` (both on by default) choose the backends; `tower`
//! adds the [`tower`] services; `rustls` (on by default) gives both
//! backends TLS (PostgreSQL `sslmode=verify-full`, MySQL
//! `ssl-mode=VERIFY_IDENTITY`, see [`postgres`](crate::postgres#tls) and
//! [`mysql`](crate::mysql#tls)); `serde` adds [`PoolConfig`]; `metrics`
//! (off by default) exports the pool's counters, gauges and histograms
//! through the `metrics` facade, for Prometheus and other exporters: the
//! `batchpool::metrics` module lists their names and labels.
//!
//! # Guarantees
//!
//! * **Durability:** a caller's future is `Ok` only after the statement
//!   holding its row committed.
//! * **No silent retry:** if the connection dies after a statement was sent
//!   and before its reply, its callers get an error for which
//!   [`Error::is_outcome_unknown`] is true.
//! * **Cancellation:** a future dropped before a flush took its row means the
//!   row is never sent; dropped after, the statement is finished anyway (the
//!   outcome is discarded). Either way no queue slot or connection leaks,
//!   and no connection goes back to the pool with a statement unanswered.
//! * **Bounded waits:** `wait_timeout` bounds a call's wait for its text to
//!   be learned, a queue slot and a connection end to end (a row not sent by
//!   then fails with a timeout and is never sent). A statement is bounded by its session's
//!   own time limit (PostgreSQL `statement_timeout`, MariaDB
//!   `max_statement_time`: from the connection string, the role or user,
//!   the database or the server, read from the server when a connection
//!   opens and after every reset), or by the builder's `statement_timeout`
//!   if you set one: on the server and, 1 s later, in the pool (then the
//!   outcome is unknown and the connection is closed). A session without a
//!   limit has none from the pool either; a peer that vanished is then
//!   noticed by TCP keepalive and the TCP user timeout.
//! * **Your settings win:** the pool never overrides a session setting you
//!   or the server made. It sets one only when you ask it to
//!   (`statement_timeout`), and your session setup (connection string,
//!   MariaDB `init` statements and `after_connect`, `post_create` hooks)
//!   holds again after every reset the pool does.
//! * **Close:** [`Pool::close`] returns only after every call accepted
//!   before it has its outcome and no statement of the pool is on the wire.
//! * **Ordering:** rows of different callers have no order between them.
//!
//! [`tokio-postgres`]: https://docs.rs/tokio-postgres
//! [`mysql_async`]: https://docs.rs/mysql_async
//! [`deadpool`]: https://docs.rs/deadpool
#![forbid(unsafe_code)]
// docs.rs: each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(
        dead_code,
        unused_imports,
        unused_macros,
        reason = "without a backend feature the pool has nothing to drive"
    )
)]

mod backend;
mod classify;
mod config;
mod engine;
mod error;
mod explain;
mod outcome;
mod params;
mod pool;
#[cfg(feature = "serde")]
mod pool_config;
mod stats;
mod sync;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;

#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

// Entry points for the crate's benchmarks, not an API.
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod bench;
// The classifier's fuzzing hooks: also built for the crate's own tests,
// which run the fuzz targets' render check on the committed seeds.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

// The README's examples, compiled by `cargo test` so they cannot rot.
#[cfg(all(doctest, feature = "postgres", feature = "mysql"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use crate::backend::Backend;
pub use crate::config::{BatchConfig, QueueFull};
pub use crate::error::{AtomicError, Error};
pub use crate::explain::{Explain, NotCoalesced};
pub use crate::outcome::Outcome;
pub use crate::pool::{HookError, HookFuture, Pool, PoolBuilder, Status, Transaction};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use crate::pool_config::{PoolConfig, QueueFullSetting};
pub use crate::stats::Stats;
