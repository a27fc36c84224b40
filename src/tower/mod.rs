//! [tower] integration (cargo feature `tower`, on by default): the pool as a
//! [`Service`](tower_service::Service), and a [`CoalesceLayer`] that puts
//! coalescing in front of any service that executes batches.
//!
//! * [`PoolService`] wraps a pool ([`postgres::Pool`](crate::postgres::Pool)
//!   or [`mysql::Pool`](crate::mysql::Pool)) as a `Service<`[`Statement`]`>`
//!   whose response is the caller's own `Outcome`.
//!   [`poll_ready`](tower_service::Service::poll_ready) is the backpressure
//!   signal: it reserves one slot of the pool's batch queue
//!   ([`BatchConfig::queue_capacity`](crate::BatchConfig::queue_capacity))
//!   and stays `Pending` while the queue is full; the next `call` hands that
//!   slot to the pool with its row, and the slot is given back if the
//!   service is dropped without a call. Stack tower middleware around it as
//!   usual: a timeout, a concurrency limit, retries (see
//!   [`Error::is_retryable`](crate::Error::is_retryable)), metrics — each
//!   applies to one row.
//! * [`CoalesceLayer`] / [`Coalesce`] coalesce [`Statement`]s per SQL text
//!   into [`Batch`]es for an inner `Service<Batch<V>>` that answers one
//!   result per row, so middleware placed *inside* the layer applies to each
//!   batch. [`BatchExecutor`] is such an inner service running batches on a
//!   pool.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::time::Duration;
//! use batchpool::postgres::Pool;
//! use batchpool::tower::{PoolService, Statement};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! let pool = Pool::builder("host=127.0.0.1 user=postgres dbname=app").build()?;
//! let mut svc = ServiceBuilder::new()
//!     .timeout(Duration::from_secs(5))
//!     .concurrency_limit(512)
//!     .service(PoolService::new(pool));
//! let stmt = Statement::new("INSERT INTO events (body) VALUES ($1) RETURNING id").bind("hi");
//! let outcome = svc.ready().await?.call(stmt).await?;
//! let id: i64 = outcome.returned().unwrap().get(0);
//! # let _ = id; Ok(()) }
//! ```
//!
//! [tower]: https://docs.rs/tower

/// `get_ref` / `get_mut` / `into_inner` of a service wrapping `$field: $ty`.
macro_rules! inner_accessors {
    ($field:ident: $ty:ident, $what:literal) => {
        #[doc = concat!("The ", $what, ".")]
        pub fn get_ref(&self) -> &$ty {
            &self.$field
        }

        #[doc = concat!("The ", $what, ", mutably.")]
        pub fn get_mut(&mut self) -> &mut $ty {
            &mut self.$field
        }

        #[doc = concat!("Takes back the ", $what, " (a queue slot this service reserved is given back).")]
        pub fn into_inner(self) -> $ty {
            self.$field
        }
    };
}

mod coalesce;
mod executor;
mod pool;
mod request;
mod reserve;
mod service;

use std::future::Future;
use std::pin::Pin;

pub use self::coalesce::{BatchService, Coalesce, CoalesceConfig, CoalesceLayer};
pub use self::executor::BatchExecutor;
pub use self::pool::ServicePool;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::request::PgValue;
pub use self::request::{Batch, IntoValue, Statement};
pub use self::service::PoolService;
use crate::error::Error;

/// Response futures of the tower services.
pub mod future {
    pub use super::coalesce::future::ResponseFuture;
    pub use super::executor::future::BatchFuture;
    pub use super::service::future::StatementFuture;
}

/// A boxed, type-erased error, as tower middleware uses
/// (`tower::BoxError`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed `Send` future, as [`ServicePool`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a batch returns: one result per row, in order, or an error for the
/// batch as a whole.
pub type BatchResult<O> = Result<Vec<Result<O, Error>>, Error>;

/// A response future polled again after it completed.
fn polled_after_completion() -> Error {
    Error::internal("response future polled after completion")
}
