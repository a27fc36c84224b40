//! [`ServicePool`]: what the tower services need from a pool, implemented by
//! both backends' pools.

use std::future::Future;
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

/// How a backend's owned bind values become its parameters.
pub(crate) trait OwnedArgs: Backend {
    /// One owned bind value.
    type Value: Send + 'static;
    /// The parameters of one statement, from its owned values.
    fn args(values: &mut Vec<Self::Value>) -> Self::Args<'_>;
}

#[cfg(feature = "postgres")]
impl OwnedArgs for crate::postgres::Postgres {
    type Value = super::PgValue;
    fn args(values: &mut Vec<super::PgValue>) -> crate::postgres::PgArgs<'_> {
        crate::postgres::PgArgs::Owned(values)
    }
}

#[cfg(feature = "mysql")]
impl OwnedArgs for crate::mysql::MySql {
    type Value = mysql_async::Value;
    fn args(values: &mut Vec<mysql_async::Value>) -> mysql_async::Params {
        mysql_async::Params::Positional(std::mem::take(values))
    }
}

/// Runs `f` on a clone of the pool, as a `'static` future.
fn owned<B, F, T>(pool: &Pool<B>, f: impl FnOnce(Pool<B>) -> F) -> BoxFuture<'static, T>
where
    B: Backend,
    F: Future<Output = T> + Send + 'static,
{
    Box::pin(f(pool.clone()))
}

/// Implements [`ServicePool`] for a backend's pool.
macro_rules! service_pool {
    ($backend:ty, $value:ty, $outcome:ty) => {
        impl sealed::Sealed for Pool<$backend> {
            fn queue_slots(&self) -> (Arc<Semaphore>, &BatchConfig) {
                let engine = self.engine();
                (engine.queue_slots().clone(), &engine.config)
            }

            fn execute_owned(
                &self,
                statement: Statement<$value>,
                reserved: Option<OwnedSemaphorePermit>,
            ) -> BoxFuture<'static, Result<$outcome, Error>> {
                owned(self, |pool| async move {
                    let (sql, mut params) = statement.into_parts();
                    let args = <$backend as OwnedArgs>::args(&mut params);
                    pool.execute_args(&sql, args, reserved).await
                })
            }

            fn execute_batch(
                &self,
                batch: Batch<$value>,
            ) -> BoxFuture<'static, BatchResult<$outcome>> {
                owned(self, |pool| async move {
                    let (sql, mut rows) = batch.into_parts();
                    let rows = rows.iter_mut().map(<$backend as OwnedArgs>::args).collect();
                    pool.execute_many_args(&sql, rows).await
                })
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
    crate::postgres::Outcome
);

#[cfg(feature = "mysql")]
service_pool!(
    crate::mysql::MySql,
    mysql_async::Value,
    crate::mysql::Outcome
);
