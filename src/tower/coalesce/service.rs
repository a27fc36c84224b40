//! [`Coalesce`]: queues each call's row per SQL text.

use std::any::TypeId;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{Semaphore, oneshot};
use tower_service::Service;

use super::future::{Queued, ResponseFuture};
use super::queue::{Entry, Shared, Ticket};
use super::{BatchService, CoalesceConfig};
use crate::config::QueueFull;
use crate::error::Error;
use crate::tower::reserve::{Reservation, Taken};
use crate::tower::{BoxError, Statement};

/// Coalesces [`Statement`]s of the same SQL text into [`Batch`](crate::tower::Batch)es for the
/// inner service `S`, which answers one result per row, in order; each
/// caller gets its own row's result.
///
/// * **Natural batching.** A call queues its row; the row is sent, with the
///   rows queued after it (at most [`max_rows`](CoalesceConfig::max_rows)), as
///   soon as the inner service is ready. While the inner service is not
///   ready (e.g. a concurrency limit is saturated), rows accumulate. Batches
///   are dispatched by the callers' response futures (the batch then runs in
///   its own tokio task, so a caller that goes away does not cut it short).
/// * **Backpressure.** [`poll_ready`](Service::poll_ready) reserves one of
///   [`queue_capacity`](CoalesceConfig::queue_capacity) queue slots (`Pending`
///   while all are taken); the slot is freed when the row leaves the queue or
///   the service is dropped without calling. With [`QueueFull::Reject`] it
///   does not wait: the call fails with an overloaded
///   [`Error`] instead. It does not poll the inner service.
/// * **Errors** are [`BoxError`]s: a row's own error from the inner service
///   as it is; a failure of the whole batch (the inner service's error)
///   reaches every row of the batch as a [`crate::Error`] — the inner error
///   itself if it is one, otherwise one for which
///   [`is_outcome_unknown`](crate::Error::is_outcome_unknown) is true, with
///   the inner error as its `source()`.
/// * Dropping a response future before its row was sent removes the row;
///   after that, the batch runs anyway.
///
/// Needs a tokio runtime.
pub struct Coalesce<S> {
    inner: S,
    shared: Arc<Shared>,
    slot: Reservation,
}

impl<S> Coalesce<S> {
    /// Coalesces rows in front of `inner` (see
    /// [`CoalesceLayer::new`](super::CoalesceLayer::new)). A zero `max_rows`
    /// or `queue_capacity` counts as 1.
    pub fn new(inner: S, config: CoalesceConfig) -> Self {
        let capacity = config.queue_capacity.clamp(1, Semaphore::MAX_PERMITS);
        let slots = Arc::new(Semaphore::new(capacity));
        let slot = Reservation::new(slots, config.queue_full == QueueFull::Reject);
        Coalesce {
            inner,
            shared: Arc::new(Shared::new(config.max_rows.max(1), capacity)),
            slot,
        }
    }

    /// A [`CoalesceLayer`](super::CoalesceLayer) with this config.
    pub fn layer(config: CoalesceConfig) -> super::CoalesceLayer {
        super::CoalesceLayer::new(config)
    }

    inner_accessors!(inner: S, "inner service");

    /// Rows waiting in this layer's queues now (all clones, all SQL texts).
    pub fn queued(&self) -> usize {
        self.shared.queued()
    }
}

impl<S: Clone> Clone for Coalesce<S> {
    fn clone(&self) -> Self {
        Coalesce {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            slot: self.slot.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for Coalesce<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalesce")
            .field("inner", &self.inner)
            .field("queued", &self.queued())
            .field("slot", &self.slot)
            .finish()
    }
}

impl<S: BatchService<V>, V: Send + 'static> Service<Statement<V>> for Coalesce<S> {
    type Response = S::Row;
    type Error = BoxError;
    type Future = ResponseFuture<S, V>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.slot.poll_reserve(cx).map_err(Into::into)
    }

    fn call(&mut self, statement: Statement<V>) -> Self::Future {
        let permit = match self.slot.take() {
            Taken::Reserved(permit) => permit,
            Taken::Rejected => {
                return ResponseFuture::failed(Error::overloaded(self.shared.capacity).into());
            }
            // Called without `poll_ready`: only if a slot is free right now.
            Taken::NotReady => match self.slot.try_now() {
                Some(permit) => permit,
                None => {
                    return ResponseFuture::failed(Error::overloaded(self.shared.capacity).into());
                }
            },
        };
        let (sql, params) = statement.into_parts();
        let key = (TypeId::of::<V>(), sql);
        let ticket = Arc::new(Ticket::default());
        let (tx, rx) = oneshot::channel();
        let id = self.shared.push(
            &key,
            Entry {
                ticket: ticket.clone(),
                row: Box::new(params),
                reply: tx,
                _slot: permit,
            },
        );
        ResponseFuture::queued(Queued {
            inner: Some(self.inner.clone()),
            rx,
            ticket,
            key,
            id,
            shared: self.shared.clone(),
        })
    }
}
