//! [`ResponseFuture`], the response future of [`Coalesce`](super::Coalesce).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project::{pin_project, pinned_drop};
use tokio::sync::oneshot;

use super::BatchService;
use super::dispatch::dispatch;
use super::queue::{Key, RowReply, Shared, Ticket};
use crate::error::Error;
use crate::tower::{BoxError, polled_after_completion};

/// Response future of [`Coalesce`](crate::tower::Coalesce): this caller's own
/// row's result.
///
/// While its row is queued it also drives a clone of the inner service:
/// when that clone is ready first, it takes the queued rows of its SQL text
/// (its own among them) and dispatches them as one batch.
#[pin_project(PinnedDrop)]
pub struct ResponseFuture<S, V> {
    state: State<S>,
    _request: PhantomData<fn(V)>,
}

enum State<S> {
    Failed(Option<BoxError>),
    Queued(Queued<S>),
    Done,
}

/// A queued row's future state.
pub(crate) struct Queued<S> {
    /// A clone of the inner service, to dispatch a batch when it is ready;
    /// `None` once this row left the queue.
    pub(crate) inner: Option<S>,
    pub(crate) rx: oneshot::Receiver<RowReply>,
    pub(crate) ticket: Arc<Ticket>,
    pub(crate) key: Key,
    pub(crate) id: u64,
    pub(crate) shared: Arc<Shared>,
}

impl<S, V> ResponseFuture<S, V> {
    pub(crate) fn failed(error: BoxError) -> Self {
        ResponseFuture {
            state: State::Failed(Some(error)),
            _request: PhantomData,
        }
    }

    pub(crate) fn queued(queued: Queued<S>) -> Self {
        ResponseFuture {
            state: State::Queued(queued),
            _request: PhantomData,
        }
    }
}

impl<S: BatchService<V>, V: Send + 'static> Future for ResponseFuture<S, V> {
    type Output = Result<S::Row, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = self.project().state;
        let q = match state {
            State::Failed(error) => {
                let error = error
                    .take()
                    .unwrap_or_else(|| polled_after_completion().into());
                *state = State::Done;
                return Poll::Ready(Err(error));
            }
            State::Done => return Poll::Ready(Err(polled_after_completion().into())),
            State::Queued(q) => q,
        };
        loop {
            if let Poll::Ready(reply) = Pin::new(&mut q.rx).poll(cx) {
                let out = match reply {
                    Ok(Ok(value)) => value
                        .downcast::<S::Row>()
                        .map(|o| *o)
                        .map_err(|_| Error::internal("row result of another type").into()),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(Error::lost().into()),
                };
                *state = State::Done;
                return Poll::Ready(out);
            }
            // Taken by a batch: only the reply is left to wait for.
            if q.ticket.is_taken() {
                q.inner = None;
                return Poll::Pending;
            }
            q.ticket.register(cx);
            if q.ticket.is_taken() {
                continue;
            }
            let Some(svc) = q.inner.as_mut() else {
                return Poll::Pending;
            };
            match svc.poll_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    q.inner = None;
                    if q.shared.remove(&q.key, q.id) {
                        *state = State::Done;
                        return Poll::Ready(Err(e.into()));
                    }
                }
                Poll::Ready(Ok(())) => {
                    let entries = q.shared.take(&q.key);
                    if !entries.is_empty() {
                        // Call the ready instance, keep a fresh clone in case
                        // this row did not fit in the batch.
                        let fresh = svc.clone();
                        let mut ready = std::mem::replace(svc, fresh);
                        dispatch(&mut ready, &q.key.1, entries);
                    }
                }
            }
        }
    }
}

#[pinned_drop]
impl<S, V> PinnedDrop for ResponseFuture<S, V> {
    fn drop(self: Pin<&mut Self>) {
        if let State::Queued(q) = self.project().state {
            if !q.ticket.is_taken() {
                // Still queued: the row is never sent, its slot is freed.
                q.shared.remove(&q.key, q.id);
            }
        }
    }
}

impl<S, V> fmt::Debug for ResponseFuture<S, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Failed(_) => "failed",
            State::Queued(q) if q.ticket.is_taken() => "sent",
            State::Queued(_) => "queued",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
