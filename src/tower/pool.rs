//! [`ServicePool`]: what the tower services need from a pool, implemented by
//! both backends' pools.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Batch, BatchResult, BoxFuture, Statement};
use crate::backend::Backend;
use crate::config::BatchConfig;
use crate::error::Error;
use crate::pool::Pool;

pub(crate) mod sealed {
    use std::sync::Arc;

    use tokio::sync::{OwnedSemaphorePermit, Semaphore};

    use super::super::{Batch, BatchResult, BoxFuture, Statement};
    use super::ServicePool;
    use crate::config::BatchConfig;
    use crate::error::Error;

    /// What the services call on a pool.
    pub trait Sealed {
        /// The pool's queue slots and batching config.
        fn queue_slots(&self) -> (Arc<Semaphore>, &BatchConfig);

        /// Runs one owned statement like the pool's `execute`, as a
        /// `'static` future; `reserved` is the queue slot `poll_ready` took.
        fn execute_owned(
            &self,
            statement: Statement<<Self as ServicePool>::Value>,
            reserved: Option<OwnedSemaphorePermit>,
        ) -> BoxFuture<'static, Result<<Self as ServicePool>::Outcome, Error>>
        where
            Self: ServicePool;

        /// Runs every row of `batch` like the pool's `execute_many`.
        fn execute_batch(
            &self,
            batch: Batch<<Self as ServicePool>::Value>,
        ) -> BoxFuture<'static, BatchResult<<Self as ServicePool>::Outcome>>
        where
            Self: ServicePool;
    }
}

/// A batchpool pool usable behind [`PoolService`](super::PoolService) and
/// [`BatchExecutor`](super::BatchExecutor):
/// [`postgres::Pool`](crate::postgres::Pool) and
/// [`mysql::Pool`](crate::mysql::Pool). Sealed.
pub trait ServicePool: sealed::Sealed + Clone + Send + Sync + 'static {
    /// One owned bind value: [`PgValue`](super::PgValue) for PostgreSQL,
    /// [`mysql_async::Value`] for MySQL.
    type Value: Send + 'static;
    /// What one statement returns to its caller.
    type Outcome: Send + 'static;
}

fn queue_slots<B: Backend>(pool: &Pool<B>) -> (Arc<Semaphore>, &BatchConfig) {
    let engine = pool.engine();
    (engine.queue_slots().clone(), &engine.config)
}

fn execute_owned<B, V>(
    pool: &Pool<B>,
    statement: Statement<V>,
    reserved: Option<OwnedSemaphorePermit>,
    args: for<'a> fn(&'a mut Vec<V>) -> B::Args<'a>,
) -> BoxFuture<'static, Result<B::Output, Error>>
where
    B: Backend,
    V: Send + 'static,
{
    let pool = pool.clone();
    Box::pin(async move {
        let (sql, mut params) = statement.into_parts();
        pool.execute_args(&sql, args(&mut params), reserved).await
    })
}

fn execute_batch<B, V>(
    pool: &Pool<B>,
    batch: Batch<V>,
    args: for<'a> fn(&'a mut Vec<V>) -> B::Args<'a>,
) -> BoxFuture<'static, BatchResult<B::Output>>
where
    B: Backend,
    V: Send + 'static,
{
    let pool = pool.clone();
    Box::pin(async move {
        let (sql, mut rows) = batch.into_parts();
        let rows = rows.iter_mut().map(args).collect();
        pool.execute_many_args(&sql, rows).await
    })
}

/// Implements [`ServicePool`] for a backend's pool, whose owned values turn
/// into its parameters with `$args`.
macro_rules! service_pool {
    ($backend:ty, $value:ty, $outcome:ty, $args:expr) => {
        impl sealed::Sealed for Pool<$backend> {
            fn queue_slots(&self) -> (Arc<Semaphore>, &BatchConfig) {
                queue_slots(self)
            }
            fn execute_owned(
                &self,
                statement: Statement<$value>,
                reserved: Option<OwnedSemaphorePermit>,
            ) -> BoxFuture<'static, Result<<Self as ServicePool>::Outcome, Error>> {
                execute_owned(self, statement, reserved, $args)
            }
            fn execute_batch(
                &self,
                batch: Batch<$value>,
            ) -> BoxFuture<'static, BatchResult<<Self as ServicePool>::Outcome>> {
                execute_batch(self, batch, $args)
            }
        }

        impl ServicePool for Pool<$backend> {
            type Value = $value;
            type Outcome = $outcome;
        }
    };
}

#[cfg(feature = "postgres")]
service_pool!(
    crate::postgres::Postgres,
    super::PgValue,
    crate::postgres::Outcome,
    |v| { crate::postgres::PgArgs::Owned(v) }
);

#[cfg(feature = "mysql")]
service_pool!(
    crate::mysql::MySql,
    mysql_async::Value,
    crate::mysql::Outcome,
    |v| { mysql_async::Params::Positional(std::mem::take(v)) }
);
