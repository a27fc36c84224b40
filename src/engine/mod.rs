//! The backend-agnostic coalescing engine: **classify → queue → flush → fan out.**
//!
//! * [`Engine::route`] classifies a SQL text once ([`route`]: a bounded LRU
//!   keyed by the exact text, re-learned as the server may change) and, for a
//!   batchable INSERT, finds its [`ShapeQueue`].
//! * [`Engine::submit`] puts an encoded row in that queue and awaits its own
//!   reply; flusher tasks ([`flush`]) take rows from the queue when a
//!   connection is free (or a timer/size limit says so), run them as one
//!   multi-row statement through the [`Backend`], isolate failing rows, and
//!   send each caller its own outcome.

pub(crate) mod backend;
mod flush;
pub(crate) mod queue;
mod route;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use lru::LruCache;
use tokio::sync::{Notify, OnceCell, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

pub(crate) use self::backend::{Backend, ChunkError, ChunkResult, Connections};
use self::queue::{Pending, ShapeQueue};
pub(crate) use self::route::Route;
use self::route::Routes;
use crate::classify::{self, Classified, StatementKind};
use crate::config::{BatchConfig, Limits, QueueFull};
use crate::error::Error;
use crate::explain::NotCoalesced;
use crate::stats::{Counters, Stats};

/// The route of a text being learned, shared by its concurrent callers.
type Learning<B> = Arc<OnceCell<Route<B>>>;

/// The coalescing engine of one pool.
pub(crate) struct Engine<B: Backend> {
    pub(crate) backend: B,
    pub(crate) config: BatchConfig,
    /// Time limits the engine enforces (wait, statement).
    pub(crate) limits: Limits,
    routes: Routes<B>,
    /// Texts being learned right now, shared by their concurrent callers.
    learning: std::sync::Mutex<HashMap<Box<str>, Learning<B>>>,
    /// Statement kinds of the texts run inside transactions and groups
    /// (bounded like `routes`).
    kinds: std::sync::Mutex<LruCache<Box<str>, StatementKind>>,
    /// Queue slots: one permit per queued row. In an `Arc` so a caller can
    /// reserve an owned permit ahead of its row (the tower service does, in
    /// `poll_ready`) and hand it to [`Engine::submit`].
    permits: Arc<Semaphore>,
    pub(crate) counters: Counters,
    closed: AtomicBool,
    /// Flusher tasks (and inline flushes) alive.
    pub(crate) active: AtomicUsize,
    /// Signalled when `active` drops to zero, and to wake timed flushers at close.
    idle: Notify,
    closing: Notify,
    /// Flush slots when `max_in_flight` is set.
    flush_slots: Option<Semaphore>,
}

impl<B: Backend> Engine<B> {
    pub(crate) fn new(backend: B, config: BatchConfig, limits: Limits) -> Result<Arc<Self>, Error> {
        config.validate()?;
        let cache = NonZeroUsize::new(config.cache_capacity).unwrap_or(NonZeroUsize::MIN);
        let flush_slots = config.max_in_flight.map(Semaphore::new);
        Ok(Arc::new(Engine {
            backend,
            permits: Arc::new(Semaphore::new(
                config.queue_capacity.min(Semaphore::MAX_PERMITS),
            )),
            routes: Routes::new(cache, config.relearn_after),
            learning: std::sync::Mutex::default(),
            kinds: std::sync::Mutex::new(LruCache::new(cache)),
            config,
            limits,
            counters: Counters::default(),
            closed: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            idle: Notify::new(),
            closing: Notify::new(),
            flush_slots,
        }))
    }

    /// Batching counters.
    pub(crate) fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Fails with a closed error once `close()` has begun.
    pub(crate) fn check_open(&self) -> Result<(), Error> {
        if self.is_closed() {
            Err(Error::pool_closed())
        } else {
            Ok(())
        }
    }

    /// What kind of statement `sql` is (transaction control, implicit
    /// commit, other): classified once per text, then cached.
    pub(crate) fn statement_kind(&self, sql: &str) -> StatementKind {
        let lock = || self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(kind) = lock().get(sql) {
            return *kind;
        }
        let kind = classify::statement_kind(B::DIALECT, sql);
        lock().put(sql.into(), kind);
        kind
    }

    /// Where `sql` goes: classified once per text (cached), the first call
    /// for a new batchable text asking the backend to prepare its shape (one
    /// round trip); a failure there (the statement is invalid, the server is
    /// down) is returned and not cached. A route the server decided is
    /// re-learned in the background when it is due (see [`route`]).
    pub(crate) async fn route(self: &Arc<Self>, sql: &str) -> Result<Route<B>, Error> {
        if let Some((route, due)) = self.routes.get(sql) {
            if due {
                let (engine, sql) = (self.clone(), sql.to_owned());
                tokio::spawn(async move {
                    let learned = engine.learn(&sql).await.ok();
                    engine.routes.relearned(&sql, learned);
                });
            }
            return Ok(route);
        }
        // Callers of a new text arrive together: one of them asks the
        // server, the others wait for its answer (a failure is not shared:
        // the next waiter asks again).
        let cell = {
            let mut learning = self.learning.lock().unwrap_or_else(|p| p.into_inner());
            learning.entry(sql.into()).or_default().clone()
        };
        let learned = cell
            .get_or_try_init(|| async {
                self.learn(sql).await.map(|r| self.routes.put_first(sql, r))
            })
            .await
            .cloned();
        let mut learning = self.learning.lock().unwrap_or_else(|p| p.into_inner());
        if learning.get(sql).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            learning.remove(sql);
        }
        learned
    }

    /// Marks the route of `sql` stale (its table changed under a prepared
    /// statement): the next caller re-learns it.
    pub(crate) fn route_stale(&self, sql: &str) {
        self.routes.stale(sql);
    }

    /// Classifies `sql` and, for a batchable INSERT, asks the backend.
    async fn learn(&self, sql: &str) -> Result<Route<B>, Error> {
        Ok(match classify::classify(B::DIALECT, sql) {
            // Refused whether or not coalescing is on.
            Classified::Other(reason @ NotCoalesced::TransactionControl(_)) => {
                Route::Pass(Arc::new(reason))
            }
            _ if !self.config.enabled => Route::Pass(Arc::new(NotCoalesced::Disabled)),
            Classified::Other(reason) => Route::Pass(Arc::new(reason)),
            Classified::Batchable(insert) => {
                match self.backend.prepare_shape(sql, insert.clone()).await? {
                    Err(reason) => Route::Pass(Arc::new(reason)),
                    Ok(shape) => {
                        let ppr = insert.params_per_row.max(1);
                        let cap_rows = self
                            .config
                            .max_rows
                            .min(self.backend.max_params() / ppr)
                            .max(1);
                        let cap_bytes = self
                            .config
                            .max_bytes
                            .min(self.backend.max_statement_bytes());
                        Route::Batch(Arc::new(ShapeQueue::new(
                            sql, insert, shape, cap_rows, cap_bytes,
                        )))
                    }
                }
            }
        })
    }

    /// Reserves `n` queue slots, waiting or failing fast as configured.
    async fn reserve(&self, n: usize) -> Result<(), Error> {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        let permit = match self.config.queue_full {
            QueueFull::Wait => self
                .permits
                .acquire_many(n32)
                .await
                .map_err(|_| Error::pool_closed())?,
            QueueFull::Reject => match self.permits.try_acquire_many(n32) {
                Ok(p) => p,
                Err(tokio::sync::TryAcquireError::Closed) => return Err(Error::pool_closed()),
                Err(tokio::sync::TryAcquireError::NoPermits) => {
                    return Err(Error::overloaded(self.config.queue_capacity));
                }
            },
        };
        // Slots are given back by the flusher when it takes the rows.
        permit.forget();
        Ok(())
    }

    /// Checks a row's size against the statement limits before it queues.
    pub(crate) fn check_row(&self, q: &ShapeQueue<B>, bytes: usize) -> Result<(), Error> {
        if bytes > q.cap_bytes {
            return Err(Error::too_large(format!(
                "row of {bytes} parameter bytes exceeds the {} byte statement limit",
                q.cap_bytes
            )));
        }
        let ppr = q.insert.params_per_row;
        if ppr > self.backend.max_params() {
            return Err(Error::too_large(format!(
                "a row of {ppr} bind parameters exceeds the protocol limit of {}",
                self.backend.max_params()
            )));
        }
        Ok(())
    }

    /// Queues one row and waits for its own outcome.
    ///
    /// `reserved` is a queue slot the caller took ahead of time from
    /// [`queue_slots`](Engine::queue_slots) (the tower service does so in
    /// `poll_ready`); the row then takes that slot instead of waiting for
    /// one. A slot of another pool is ignored (dropped).
    ///
    /// Cancellation: dropping this future before a flush took the row leaves
    /// the row unsent (the flush skips it); after that, the statement
    /// completes anyway and the outcome is discarded.
    pub(crate) async fn submit(
        self: &Arc<Self>,
        q: &Arc<ShapeQueue<B>>,
        row: B::Row,
        bytes: usize,
        reserved: Option<OwnedSemaphorePermit>,
    ) -> Result<B::Output, Error> {
        self.check_open()?;
        self.check_row(q, bytes)?;
        // Natural batching with nothing queued and nobody flushing this
        // shape: send the row from this task at once when a connection is
        // free (no added latency at low load).
        let row = if self.config.max_delay.is_none() && q.is_idle() {
            match flush::inline(self, q, row).await {
                Ok(result) => return result,
                Err(row) => row,
            }
        } else {
            row
        };
        match reserved {
            // Given back by the flusher that takes the row.
            Some(slot) if Arc::ptr_eq(slot.semaphore(), &self.permits) => slot.forget(),
            _ => self.reserve(1).await?,
        }
        let (tx, rx) = oneshot::channel();
        self.enqueue(
            q,
            vec![Pending {
                row,
                bytes,
                reply: tx,
                queued_at: Instant::now(),
            }],
        );
        rx.await.unwrap_or_else(|_| Err(Error::lost()))
    }

    /// The queue slots (one permit per queued row), for callers that
    /// reserve a slot ahead of their row (see [`Engine::submit`]).
    #[cfg(any(feature = "tower", test))]
    pub(crate) fn queue_slots(&self) -> &Arc<Semaphore> {
        &self.permits
    }

    /// Runs an explicit batch from one caller (`execute_many`) in order on
    /// one connection; see [`flush::direct`].
    pub(crate) async fn submit_many(
        self: &Arc<Self>,
        q: &Arc<ShapeQueue<B>>,
        rows: Vec<(B::Row, usize)>,
    ) -> Result<Vec<Result<B::Output, Error>>, Error> {
        self.check_open()?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let (rows, bytes): (Vec<B::Row>, Vec<usize>) = rows.into_iter().unzip();
        let (tx, rx) = oneshot::channel();
        self.active.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(flush::direct(self.clone(), q.clone(), rows, bytes, tx));
        rx.await.unwrap_or_else(|_| Err(Error::lost()))
    }

    /// Appends rows to a queue and makes sure enough flushers are on their
    /// way: one per statement's worth of queued rows not yet claimed.
    fn enqueue(self: &Arc<Self>, q: &Arc<ShapeQueue<B>>, pending: Vec<Pending<B>>) {
        let added = pending.len();
        let (spawn, full) = {
            let mut st = q.lock();
            for p in pending {
                st.bytes += p.bytes;
                st.rows.push_back(p);
            }
            let needed = st.rows.len().div_ceil(q.cap_rows);
            let spawn = needed.saturating_sub(st.waiting);
            st.waiting += spawn;
            (spawn, q.is_full(&st))
        };
        self.counters.queued_delta(added, 0);
        for _ in 0..spawn {
            self.spawn_flusher(q.clone());
        }
        if full && self.config.max_delay.is_some() {
            q.wake.notify_waiters();
        }
    }

    fn spawn_flusher(self: &Arc<Self>, q: Arc<ShapeQueue<B>>) {
        self.active.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(flush::flusher(self.clone(), q));
    }

    /// Waits for a flush slot (`max_in_flight`); `None` when unlimited or
    /// the pool is closing (slots are then not enforced).
    pub(crate) async fn flush_slot(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.flush_slots.as_ref()?.acquire().await.ok()
    }

    /// A flush slot if one is free right now (`Ok(None)` when unlimited).
    pub(crate) fn try_flush_slot(&self) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, ()> {
        match &self.flush_slots {
            None => Ok(None),
            Some(slots) => slots.try_acquire().map(Some).map_err(|_| ()),
        }
    }

    /// Called by a flusher task as it ends.
    fn flusher_done(&self) {
        if self.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Gives back queue slots of rows taken (sent or cancelled).
    fn release(&self, n: usize) {
        if n > 0 {
            self.counters.queued_delta(0, n);
            self.permits.add_permits(n);
        }
    }

    /// Stops accepting rows, flushes every queued row now (timers are cut
    /// short) and waits until every flush has finished.
    pub(crate) async fn close(&self, limit: Option<std::time::Duration>) -> Result<(), Error> {
        let _ = limit;
        self.closed.store(true, Ordering::Release);
        self.permits.close();
        self.closing.notify_waiters();
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.active.load(Ordering::Acquire) == 0 {
                break;
            }
            // Timed flushers that started waiting after notify_waiters.
            self.closing.notify_waiters();
            tokio::select! {
                _ = &mut idle => {}
                _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
            }
        }
        Ok(())
    }
}
