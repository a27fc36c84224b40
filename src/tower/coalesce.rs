//! [`CoalesceLayer`] / [`Coalesce`]: coalesce statements per SQL text into
//! batches for an inner service.

use std::any::{Any, TypeId};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tower_layer::Layer;
use tower_service::Service;

use super::future::{Queued, ResponseFuture};
use super::slot::{Slot, Taken};
use super::{Batch, BoxError, Statement};
use crate::config::{BatchConfig, QueueFull};
use crate::error::Error;

/// Puts statement coalescing in front of a service that executes batches:
/// layer of [`Coalesce`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::time::Duration;
/// use batchpool::BatchConfig;
/// use batchpool::postgres::Pool;
/// use batchpool::tower::{BatchExecutor, CoalesceLayer, Statement};
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// let pool = Pool::builder("host=127.0.0.1 user=postgres dbname=app").build()?;
/// let mut svc = ServiceBuilder::new()
///     .timeout(Duration::from_secs(5)) // per row
///     .layer(CoalesceLayer::new(BatchConfig::default().max_rows(500)))
///     .concurrency_limit(8) // batches in flight
///     .timeout(Duration::from_secs(2)) // per batch
///     .service(BatchExecutor::new(pool));
/// let stmt = Statement::new("INSERT INTO events (body) VALUES ($1)").bind("hi");
/// let outcome = svc.ready().await?.call(stmt).await?;
/// assert_eq!(outcome.rows_affected(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct CoalesceLayer {
    config: BatchConfig,
}

impl CoalesceLayer {
    /// Coalescing configured by [`max_rows`](BatchConfig::max_rows),
    /// [`queue_capacity`](BatchConfig::queue_capacity) and
    /// [`queue_full`](BatchConfig::queue_full); see [`Coalesce`].
    pub fn new(config: BatchConfig) -> Self {
        CoalesceLayer { config }
    }
}

impl<S> Layer<S> for CoalesceLayer {
    type Service = Coalesce<S>;

    fn layer(&self, inner: S) -> Coalesce<S> {
        Coalesce::new(inner, self.config.clone())
    }
}

/// Coalesces [`Statement`]s of the same SQL text into [`Batch`]es for the
/// inner service `S`, which answers one result per row, in order; each
/// caller gets its own row's result.
///
/// * **Natural batching.** A call queues its row; the row is sent, with the
///   rows queued after it (at most [`max_rows`](BatchConfig::max_rows)), as
///   soon as the inner service is ready. While the inner service is not
///   ready (e.g. a concurrency limit is saturated), rows accumulate. Batches
///   are dispatched by the callers' response futures (the batch then runs in
///   its own tokio task, so a caller that goes away does not cut it short).
/// * **Backpressure.** [`poll_ready`](Service::poll_ready) reserves one of
///   [`queue_capacity`](BatchConfig::queue_capacity) queue slots (`Pending`
///   while all are taken); the slot is freed when the row leaves the queue or
///   the service is dropped without calling. With [`QueueFull::Reject`] it
///   does not wait: the call fails with an overloaded
///   [`Error`](crate::Error) instead. It does not poll the inner service.
/// * **Errors** are [`BoxError`]s: a row's own error from the inner service
///   as it is; a failure of the whole batch (the inner service's error)
///   reaches every row of the batch as a [`crate::Error`] — the inner error
///   itself if it is one, otherwise one for which
///   [`is_outcome_unknown`](crate::Error::is_outcome_unknown) is true, with
///   the inner error as its `source()`.
/// * Dropping a response future before its row was sent removes the row;
///   after that, the batch runs anyway.
///
/// Needs a tokio runtime. Timed batching (`max_delay`) and `max_bytes` of
/// the [`BatchConfig`] do not apply here.
pub struct Coalesce<S> {
    inner: S,
    shared: Arc<Shared>,
    slot: Slot,
}

impl<S> Coalesce<S> {
    /// Coalesces rows in front of `inner` (see [`CoalesceLayer::new`]). A
    /// zero `max_rows` or `queue_capacity` counts as 1.
    pub fn new(inner: S, config: BatchConfig) -> Self {
        let capacity = config.queue_capacity.clamp(1, Semaphore::MAX_PERMITS);
        let slots = Arc::new(Semaphore::new(capacity));
        let slot = Slot::new(slots, config.queue_full == QueueFull::Reject);
        Coalesce {
            inner,
            shared: Arc::new(Shared {
                queues: Mutex::new(HashMap::new()),
                max_rows: config.max_rows.max(1),
                capacity,
                next_id: AtomicU64::new(0),
            }),
            slot,
        }
    }

    /// A [`CoalesceLayer`] with this config.
    pub fn layer(config: BatchConfig) -> CoalesceLayer {
        CoalesceLayer::new(config)
    }

    /// The inner service (each call clones it to dispatch batches).
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service (a reserved queue slot is given back).
    pub fn into_inner(self) -> S {
        self.inner
    }

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
            slot: self.slot.fresh(),
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

impl<S, V, O, E> Service<Statement<V>> for Coalesce<S>
where
    S: Service<Batch<V>, Response = Vec<Result<O, E>>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + 'static,
    E: Into<BoxError> + 'static,
    V: Send + 'static,
    O: Send + 'static,
{
    type Response = O;
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

/// One row's reply: its type-erased result (`O`, boxed) or its error.
pub(crate) type RowReply = Result<Box<dyn Any + Send>, BoxError>;

/// Queues are keyed by SQL text and by the row type (a service may accept
/// several).
pub(crate) type Key = (TypeId, Arc<str>);

/// Whether a row has left the queue, and who to tell when it does.
#[derive(Default)]
pub(crate) struct Ticket {
    taken: AtomicBool,
    waker: AtomicWaker,
}

impl Ticket {
    pub(crate) fn is_taken(&self) -> bool {
        self.taken.load(Ordering::Acquire)
    }

    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.waker.register(cx.waker());
    }
}

/// A queued row.
pub(crate) struct Entry {
    ticket: Arc<Ticket>,
    /// The row's parameters, a boxed `Vec<V>`.
    pub(crate) row: Box<dyn Any + Send>,
    pub(crate) reply: oneshot::Sender<RowReply>,
    /// The queue slot, freed when the row leaves the queue.
    _slot: OwnedSemaphorePermit,
}

/// The rows of one SQL text, in arrival order.
#[derive(Default)]
struct Queue {
    order: VecDeque<u64>,
    rows: HashMap<u64, Entry>,
}

/// State shared by all clones of one [`Coalesce`].
pub(crate) struct Shared {
    queues: Mutex<HashMap<Key, Queue>>,
    max_rows: usize,
    capacity: usize,
    next_id: AtomicU64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Queue>> {
        // Critical sections are a few map operations: a panic cannot leave
        // them half done, so poisoning is ignored.
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, key: &Key, entry: Entry) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut queues = self.lock();
        let q = queues.entry(key.clone()).or_default();
        q.order.push_back(id);
        q.rows.insert(id, entry);
        id
    }

    fn queued(&self) -> usize {
        self.lock().values().map(|q| q.rows.len()).sum()
    }

    /// Removes a row that is still queued (its caller went away or failed);
    /// `false` if a batch already took it.
    pub(crate) fn remove(&self, key: &Key, id: u64) -> bool {
        let mut queues = self.lock();
        let Some(q) = queues.get_mut(key) else {
            return false;
        };
        let removed = q.rows.remove(&id).is_some();
        if q.rows.is_empty() {
            queues.remove(key);
        } else if q.order.len() > 2 * q.rows.len() + 64 {
            // Ids of removed rows are skipped lazily; compact now and then.
            let rows = &q.rows;
            q.order.retain(|id| rows.contains_key(id));
        }
        removed
    }

    /// Takes the next batch of `key`: up to `max_rows` rows in arrival order
    /// (rows whose caller is gone are dropped), and wakes their callers.
    pub(crate) fn take(&self, key: &Key) -> Vec<Entry> {
        let mut taken = Vec::new();
        {
            let mut queues = self.lock();
            let Some(q) = queues.get_mut(key) else {
                return taken;
            };
            while taken.len() < self.max_rows {
                let Some(id) = q.order.pop_front() else { break };
                let Some(entry) = q.rows.remove(&id) else {
                    continue;
                };
                entry.ticket.taken.store(true, Ordering::Release);
                if !entry.reply.is_closed() {
                    taken.push(entry);
                }
            }
            if q.rows.is_empty() {
                queues.remove(key);
            }
        }
        for entry in &taken {
            entry.ticket.waker.wake();
        }
        taken
    }
}
