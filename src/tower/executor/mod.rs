//! [`BatchExecutor`]: a pool as a tower service, one batch per call — the
//! inner service [`Coalesce`](crate::tower::Coalesce) expects.

pub(crate) mod future;

use std::fmt;
use std::task::{Context, Poll};

use tower_service::Service;

use self::future::BatchFuture;
use super::{Batch, ServicePool};
use crate::error::Error;

/// A pool as a `tower::Service<`[`Batch`]`>`: runs every row of a batch like
/// the pool's `execute_many` (on one connection, as few multi-row statements
/// as the limits allow, a failing row isolated) and answers one result per
/// row.
///
/// Always ready; each call waits for a pooled connection. Put a
/// concurrency limit (e.g. the pool size) in front of it inside
/// [`CoalesceLayer`](crate::tower::CoalesceLayer): batches form while that
/// limit is saturated.
#[derive(Clone)]
pub struct BatchExecutor<P> {
    pool: P,
}

impl<P: ServicePool> BatchExecutor<P> {
    /// Wraps a pool.
    pub fn new(pool: P) -> Self {
        BatchExecutor { pool }
    }
}

impl<P> BatchExecutor<P> {
    inner_accessors!(pool: P, "pool");
}

impl<P: fmt::Debug> fmt::Debug for BatchExecutor<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchExecutor")
            .field("pool", &self.pool)
            .finish()
    }
}

impl<P: ServicePool> Service<Batch<P::Value>> for BatchExecutor<P> {
    type Response = Vec<Result<P::Outcome, Error>>;
    type Error = Error;
    type Future = BatchFuture<P::Outcome>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, batch: Batch<P::Value>) -> Self::Future {
        BatchFuture::new(self.pool.execute_batch(batch))
    }
}
