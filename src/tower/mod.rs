//! [tower] integration (cargo feature `tower`, on by default): the pool as a
//! [`Service`](tower_service::Service), and a [`CoalesceLayer`] that puts
//! coalescing in front of any service that executes batches.
//!
//! * [`PoolService`] wraps a pool ([`postgres::Pool`](crate::postgres::Pool))
//!   as a `Service<`[`Statement`]`>` whose response is the caller's own
//!   `Outcome`. [`poll_ready`](tower_service::Service::poll_ready) is the
//!   backpressure signal: it reserves one slot of the pool's batch queue
//!   ([`BatchConfig::queue_capacity`](crate::BatchConfig::queue_capacity)) and stays `Pending` while the queue is
//!   full; the slot is given back if the service is dropped without a call.
//!   Stack tower middleware around it as usual: a timeout, a concurrency
//!   limit, retries (see [`Error::is_retryable`](crate::Error::is_retryable)),
//!   metrics — each applies to one row.
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

mod coalesce;
pub mod future;
mod service;
mod slot;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use self::coalesce::{Coalesce, CoalesceLayer};
pub use self::service::{BatchExecutor, PoolService};
use crate::error::Error;

/// A boxed, type-erased error, as tower middleware uses
/// (`tower::BoxError`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed `Send` future, as [`ServicePool`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a batch returns: one result per row, in order, or an error for the
/// batch as a whole.
pub type BatchResult<O> = Result<Vec<Result<O, Error>>, Error>;

/// One owned PostgreSQL bind value of a [`Statement`]: any
/// `ToSql + Send + Sync + 'static` value, boxed.
#[cfg(feature = "postgres")]
#[derive(Debug)]
pub struct PgValue(Box<dyn tokio_postgres::types::ToSql + Send + Sync>);

#[cfg(feature = "postgres")]
impl PgValue {
    /// Boxes a value.
    pub fn new<T>(value: T) -> Self
    where
        T: tokio_postgres::types::ToSql + Send + Sync + 'static,
    {
        PgValue(Box::new(value))
    }

    /// The value, as tokio-postgres takes parameters.
    pub fn as_sql(&self) -> &(dyn tokio_postgres::types::ToSql + Sync) {
        &*self.0
    }
}

/// One statement with owned parameters: the request of [`PoolService`] and
/// [`Coalesce`].
///
/// `V` is the pool's bind value type ([`PgValue`] for PostgreSQL).
///
/// ```
/// # #[cfg(feature = "postgres")] {
/// use batchpool::tower::{PgValue, Statement};
///
/// let stmt: Statement<PgValue> = Statement::new("INSERT INTO t (a, b) VALUES ($1, $2)")
///     .bind(7i32)
///     .bind("seven".to_string());
/// assert_eq!(stmt.params().len(), 2);
/// # }
/// ```
pub struct Statement<V> {
    sql: Arc<str>,
    params: Vec<V>,
}

impl<V> Statement<V> {
    /// A statement without parameters yet; add them with
    /// [`bind`](Statement::bind).
    pub fn new(sql: impl Into<Arc<str>>) -> Self {
        Statement {
            sql: sql.into(),
            params: Vec::new(),
        }
    }

    /// A statement with its parameters.
    pub fn with_params(sql: impl Into<Arc<str>>, params: Vec<V>) -> Self {
        Statement {
            sql: sql.into(),
            params,
        }
    }

    /// Appends one parameter (`$1`, `$2`... in order).
    pub fn bind<T: IntoValue<V>>(mut self, value: T) -> Self {
        self.params.push(value.into_value());
        self
    }

    /// The SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[V] {
        &self.params
    }

    /// The SQL text and the parameters.
    pub fn into_parts(self) -> (Arc<str>, Vec<V>) {
        (self.sql, self.params)
    }
}

impl<V: fmt::Debug> fmt::Debug for Statement<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Statement")
            .field("sql", &self.sql)
            .field("params", &self.params)
            .finish()
    }
}

/// A value [`Statement::bind`] accepts for bind value type `V`: for
/// PostgreSQL ([`PgValue`]) any `ToSql + Send + Sync + 'static` value.
pub trait IntoValue<V> {
    /// Converts into the pool's bind value type.
    fn into_value(self) -> V;
}

#[cfg(feature = "postgres")]
impl<T> IntoValue<PgValue> for T
where
    T: tokio_postgres::types::ToSql + Send + Sync + 'static,
{
    fn into_value(self) -> PgValue {
        PgValue::new(self)
    }
}

/// Rows of one SQL text coalesced by [`Coalesce`]: the request of its inner
/// service, which answers one result per row, in order.
///
/// The inner service must run a batch so that each row's result is its own
/// (for example [`BatchExecutor`], which uses the pool's `execute_many`).
pub struct Batch<V> {
    sql: Arc<str>,
    rows: Vec<Vec<V>>,
}

impl<V> Batch<V> {
    /// A batch of rows (each row's parameters) for one SQL text.
    pub fn new(sql: impl Into<Arc<str>>, rows: Vec<Vec<V>>) -> Self {
        Batch {
            sql: sql.into(),
            rows,
        }
    }

    /// The SQL text every row runs with.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Each row's parameters, in order.
    pub fn rows(&self) -> &[Vec<V>] {
        &self.rows
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The SQL text and the rows.
    pub fn into_parts(self) -> (Arc<str>, Vec<Vec<V>>) {
        (self.sql, self.rows)
    }
}

impl<V: fmt::Debug> fmt::Debug for Batch<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("sql", &self.sql)
            .field("rows", &self.rows)
            .finish()
    }
}

pub(crate) mod sealed {
    use std::sync::Arc;

    use tokio::sync::Semaphore;

    use crate::config::BatchConfig;

    /// What [`PoolService`](super::PoolService) needs from a pool's engine.
    pub trait Sealed {
        /// The engine's queue slots and its batching config.
        fn queue_slots(&self) -> (&Arc<Semaphore>, &BatchConfig);
    }
}

/// A batchpool pool usable behind [`PoolService`] and [`BatchExecutor`]
/// (implemented by each backend's `Pool`; sealed).
pub trait ServicePool: sealed::Sealed + Clone + Send + Sync + 'static {
    /// One owned bind value.
    type Value: Send + 'static;
    /// What one statement returns to its caller.
    type Outcome: Send + 'static;

    /// Runs one owned statement, like the pool's `execute`, as a `'static`
    /// future (it can be spawned).
    fn execute_owned(
        &self,
        statement: Statement<Self::Value>,
    ) -> BoxFuture<'static, Result<Self::Outcome, Error>>;

    /// Runs every row of `batch`, like the pool's `execute_many`: one result
    /// per row, in order; the outer error is for the batch as a whole.
    fn execute_batch(
        &self,
        batch: Batch<Self::Value>,
    ) -> BoxFuture<'static, BatchResult<Self::Outcome>>;
}

#[cfg(feature = "postgres")]
mod pg {
    use std::sync::Arc;

    use tokio::sync::Semaphore;
    use tokio_postgres::types::ToSql;

    use super::{Batch, BatchResult, BoxFuture, PgValue, ServicePool, Statement, sealed};
    use crate::config::BatchConfig;
    use crate::error::Error;
    use crate::postgres::{Outcome, Pool};

    fn refs(params: &[PgValue]) -> Vec<&(dyn ToSql + Sync)> {
        params.iter().map(PgValue::as_sql).collect()
    }

    impl sealed::Sealed for Pool {
        fn queue_slots(&self) -> (&Arc<Semaphore>, &BatchConfig) {
            Pool::queue_slots(self)
        }
    }

    impl ServicePool for Pool {
        type Value = PgValue;
        type Outcome = Outcome;

        fn execute_owned(
            &self,
            statement: Statement<PgValue>,
        ) -> BoxFuture<'static, Result<Outcome, Error>> {
            let pool = self.clone();
            Box::pin(async move {
                let (sql, params) = statement.into_parts();
                pool.execute(&sql, &refs(&params)).await
            })
        }

        fn execute_batch(&self, batch: Batch<PgValue>) -> BoxFuture<'static, BatchResult<Outcome>> {
            let pool = self.clone();
            Box::pin(async move {
                let (sql, rows) = batch.into_parts();
                pool.execute_many(&sql, rows.iter().map(|r| refs(r))).await
            })
        }
    }
}

#[cfg(feature = "mysql")]
impl<T: Into<mysql_async::Value>> IntoValue<mysql_async::Value> for T {
    fn into_value(self) -> mysql_async::Value {
        self.into()
    }
}

#[cfg(feature = "mysql")]
mod my {
    use std::sync::Arc;

    use tokio::sync::Semaphore;

    use super::{Batch, BatchResult, BoxFuture, ServicePool, Statement, sealed};
    use crate::config::BatchConfig;
    use crate::error::Error;
    use crate::mysql::{Outcome, Pool};

    impl sealed::Sealed for Pool {
        fn queue_slots(&self) -> (&Arc<Semaphore>, &BatchConfig) {
            Pool::queue_slots(self)
        }
    }

    impl ServicePool for Pool {
        type Value = mysql_async::Value;
        type Outcome = Outcome;

        fn execute_owned(
            &self,
            statement: Statement<mysql_async::Value>,
        ) -> BoxFuture<'static, Result<Outcome, Error>> {
            let pool = self.clone();
            Box::pin(async move {
                let (sql, params) = statement.into_parts();
                pool.execute(&sql, params).await
            })
        }

        fn execute_batch(
            &self,
            batch: Batch<mysql_async::Value>,
        ) -> BoxFuture<'static, BatchResult<Outcome>> {
            let pool = self.clone();
            Box::pin(async move {
                let (sql, rows) = batch.into_parts();
                pool.execute_many(&sql, rows).await
            })
        }
    }
}
