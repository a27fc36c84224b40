//! [`PoolService`]: a pool as a tower service, one statement per call.

pub(crate) mod future;

use std::fmt;
use std::task::{Context, Poll};

use tower_service::Service;

use self::future::StatementFuture;
use super::reserve::{Reservation, Taken};
use super::{ServicePool, Statement};
use crate::config::QueueFull;
use crate::error::Error;

/// A pool as a `tower::Service<`[`Statement`]`>`: each call runs one
/// statement like the pool's `execute` (single-row INSERTs are coalesced
/// with other callers' rows) and resolves to this caller's own `Outcome`.
///
/// **Backpressure.** [`poll_ready`](Service::poll_ready) reserves one slot of
/// the pool's batch queue ([`BatchConfig::queue_capacity`], shared with
/// every other caller of the pool) and is `Pending` while all are taken; the
/// next [`call`](Service::call) hands that slot to the pool with its row, so
/// it never waits for queue space. A reserved slot is given back when the
/// service is dropped without calling. A statement that is not coalesced
/// holds its slot until it completes. With [`QueueFull::Reject`],
/// `poll_ready` does not wait: when the queue is full it is `Ready` and the
/// call fails with an error for which [`is_overloaded`](Error::is_overloaded)
/// is true. `poll_ready` fails only when the pool is closed.
///
/// A call made without `poll_ready` behaves like the pool's `execute` (it
/// waits for a slot, or fails fast, inside the response future).
///
/// Clones share the pool but not the reservation: like every tower
/// service, clone it per task and drive `poll_ready` before each `call`
/// (`ServiceExt::ready`, `oneshot`, `call_all` do that).
///
/// [`BatchConfig::queue_capacity`]: crate::BatchConfig::queue_capacity
pub struct PoolService<P> {
    pool: P,
    slot: Reservation,
    capacity: usize,
}

impl<P: ServicePool> PoolService<P> {
    /// Wraps a pool.
    pub fn new(pool: P) -> Self {
        let (slots, config) = pool.queue_slots();
        let slot = Reservation::new(slots, config.queue_full == QueueFull::Reject);
        let capacity = config.queue_capacity;
        PoolService {
            pool,
            slot,
            capacity,
        }
    }
}

impl<P> PoolService<P> {
    inner_accessors!(pool: P, "pool");
}

impl<P: Clone> Clone for PoolService<P> {
    fn clone(&self) -> Self {
        PoolService {
            pool: self.pool.clone(),
            slot: self.slot.clone(),
            capacity: self.capacity,
        }
    }
}

impl<P: fmt::Debug> fmt::Debug for PoolService<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolService")
            .field("pool", &self.pool)
            .field("slot", &self.slot)
            .finish()
    }
}

impl<P: ServicePool> From<P> for PoolService<P> {
    fn from(pool: P) -> Self {
        PoolService::new(pool)
    }
}

impl<P: ServicePool> Service<Statement<P::Value>> for PoolService<P> {
    type Response = P::Outcome;
    type Error = Error;
    type Future = StatementFuture<P::Outcome>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.slot.poll_reserve(cx)
    }

    fn call(&mut self, statement: Statement<P::Value>) -> Self::Future {
        let reserved = match self.slot.take() {
            Taken::Reserved(permit) => Some(permit),
            Taken::Rejected => return StatementFuture::failed(Error::overloaded(self.capacity)),
            // `execute` reserves (or rejects) by itself.
            Taken::NotReady => None,
        };
        // A row that queues takes the reserved slot; a statement that does
        // not drops it (frees it) when it completes.
        StatementFuture::running(self.pool.execute_owned(statement, reserved))
    }
}
