//! Response futures of the tower services.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project::{pin_project, pinned_drop};
use tokio::sync::{OwnedSemaphorePermit, oneshot};
use tokio::task::futures::TaskLocalFuture;
use tower_service::Service;

use super::coalesce::{Entry, Key, RowReply, Shared, Ticket};
use super::{Batch, BatchResult, BoxError, BoxFuture};
use crate::error::{Error, Kind};

type Reserved = Cell<Option<OwnedSemaphorePermit>>;

/// Response future of [`PoolService`](super::PoolService): the caller's own
/// outcome.
#[pin_project]
pub struct StatementFuture<O> {
    #[pin]
    state: StatementState<O>,
}

#[pin_project(project = StatementStateProj)]
enum StatementState<O> {
    Failed(Option<Error>),
    Running(#[pin] TaskLocalFuture<Reserved, BoxFuture<'static, Result<O, Error>>>),
}

impl<O> StatementFuture<O> {
    pub(crate) fn failed(error: Error) -> Self {
        StatementFuture {
            state: StatementState::Failed(Some(error)),
        }
    }

    pub(crate) fn running(
        fut: TaskLocalFuture<Reserved, BoxFuture<'static, Result<O, Error>>>,
    ) -> Self {
        StatementFuture {
            state: StatementState::Running(fut),
        }
    }
}

impl<O> Future for StatementFuture<O> {
    type Output = Result<O, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StatementStateProj::Failed(error) => {
                Poll::Ready(Err(error.take().unwrap_or_else(polled_after_completion)))
            }
            StatementStateProj::Running(fut) => fut.poll(cx),
        }
    }
}

impl<O> fmt::Debug for StatementFuture<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatementFuture").finish_non_exhaustive()
    }
}

/// Response future of [`BatchExecutor`](super::BatchExecutor): one result
/// per row.
#[pin_project]
pub struct BatchFuture<O> {
    #[pin]
    fut: BoxFuture<'static, BatchResult<O>>,
}

impl<O> BatchFuture<O> {
    pub(crate) fn new(fut: BoxFuture<'static, BatchResult<O>>) -> Self {
        BatchFuture { fut }
    }
}

impl<O> Future for BatchFuture<O> {
    type Output = BatchResult<O>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().fut.poll(cx)
    }
}

impl<O> fmt::Debug for BatchFuture<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchFuture").finish_non_exhaustive()
    }
}

/// Response future of [`Coalesce`](super::Coalesce): this caller's own
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

impl<S, V, O, E> Future for ResponseFuture<S, V>
where
    S: Service<Batch<V>, Response = Vec<Result<O, E>>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + 'static,
    E: Into<BoxError> + 'static,
    V: Send + 'static,
    O: Send + 'static,
{
    type Output = Result<O, BoxError>;

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
                    Ok(Ok(value)) => value.downcast::<O>().map(|o| *o).map_err(|_| {
                        Error::new(Kind::OutcomeUnknown, "internal: row result of another type")
                            .into()
                    }),
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

/// Calls the ready inner service with `entries` as one batch and runs it in
/// its own task, which sends each row its result.
fn dispatch<S, V, O, E>(svc: &mut S, sql: &Arc<str>, entries: Vec<Entry>)
where
    S: Service<Batch<V>, Response = Vec<Result<O, E>>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + 'static,
    E: Into<BoxError> + 'static,
    V: Send + 'static,
    O: Send + 'static,
{
    let mut rows = Vec::with_capacity(entries.len());
    let mut replies = Vec::with_capacity(entries.len());
    for entry in entries {
        match entry.row.downcast::<Vec<V>>() {
            Ok(row) => {
                rows.push(*row);
                replies.push(entry.reply);
            }
            Err(_) => {
                let e = Error::new(Kind::Params, "internal: row of another type");
                let _ = entry.reply.send(Err(e.into()));
            }
        }
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        let e = Error::new(
            Kind::Config,
            "batchpool::tower::Coalesce needs a tokio runtime to run batches",
        );
        for reply in replies {
            let _ = reply.send(Err(e.clone().into()));
        }
        return;
    };
    let fut = svc.call(Batch::new(sql.clone(), rows));
    runtime.spawn(fan_out(fut, replies));
}

/// Awaits one batch and sends each row its own result.
async fn fan_out<F, O, E, SE>(fut: F, replies: Vec<oneshot::Sender<RowReply>>)
where
    F: Future<Output = Result<Vec<Result<O, E>>, SE>>,
    O: Send + 'static,
    E: Into<BoxError>,
    SE: Into<BoxError>,
{
    let n = replies.len();
    let failed = |replies: Vec<oneshot::Sender<RowReply>>, e: Error| {
        for reply in replies {
            let _ = reply.send(Err(e.clone().into()));
        }
    };
    match fut.await {
        Ok(results) if results.len() == n => {
            for (reply, result) in replies.into_iter().zip(results) {
                let result = match result {
                    Ok(o) => Ok(Box::new(o) as Box<dyn std::any::Any + Send>),
                    Err(e) => Err(e.into()),
                };
                let _ = reply.send(result);
            }
        }
        Ok(results) => failed(
            replies,
            Error::new(
                Kind::OutcomeUnknown,
                format!(
                    "the inner service answered {} results for a batch of {n} rows",
                    results.len()
                ),
            ),
        ),
        Err(e) => failed(
            replies,
            match e.into().downcast::<Error>() {
                Ok(e) => *e,
                Err(e) => Error::with_source(
                    Kind::OutcomeUnknown,
                    format!(
                        "the inner service failed for a batch of {n} rows; whether they were written is not known"
                    ),
                    e,
                ),
            },
        ),
    }
}

fn polled_after_completion() -> Error {
    Error::new(Kind::Params, "response future polled after completion")
}
