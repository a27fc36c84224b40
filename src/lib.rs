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
//! Every caller gets the outcome its statement would have had run alone,
//! in autocommit — its own count, row, id or error — or an honest "not
//! known" ([`Error::is_outcome_unknown`], [`Outcome::is_exact`]); `Ok` only
//! after the statement holding its row committed; nothing retried
//! silently; every wait bounded by a setting; no session setting of yours
//! overridden; [`Pool::close`] returns once every accepted call has its
//! outcome. The [guide] says exactly what each of these means:
//!
//! * [What you get, exactly](guide#what-you-get-exactly): what is
//!   coalesced, when a statement is sent, COPY and the MariaDB bulk
//!   command, error isolation, time limits, cancellation, `close()`,
//!   errors, metrics and tracing.
//! * [Fewer round trips](guide#fewer-round-trips-atomic-and-lazy-transactions):
//!   `atomic` and lazy transactions.
//! * [Supported server versions](guide#supported-server-versions):
//!   PostgreSQL 12 and later, MariaDB 10.2.7 and later, PgBouncer in
//!   session, transaction or statement mode, pgpool-II; which ones the
//!   tests run against.
//! * [Behind a pooler](guide#behind-a-pooler-pgbouncer-and-friends),
//!   [beyond one server](guide#beyond-one-server) (Galera, failover) and
//!   [in production](guide#connecting-in-production): connection limits,
//!   session hygiene, hooks, configuration from the environment, TLS, Unix
//!   sockets.
//! * [Use it in your service](guide#use-it-in-your-service): axum,
//!   actix-web and tower, with an error-to-HTTP mapping.
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

// The reference guide: text only, written once in docs/GUIDE.md and
// included here, so that docs.rs shows it and `cargo test` compiles its
// examples (which use every default feature).
#[cfg(any(
    doc,
    all(
        feature = "postgres",
        feature = "mysql",
        feature = "tower",
        feature = "serde",
        feature = "rustls"
    )
))]
#[doc = include_str!("../docs/GUIDE.md")]
pub mod guide {}

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
