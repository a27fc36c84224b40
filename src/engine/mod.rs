//! The backend-agnostic coalescing engine: **classify → queue → flush → fan out.**
//!
//! * [`Engine::route`] ([`route`]) classifies a SQL text once and learns
//!   where it goes (a bounded LRU keyed by the exact text, re-learned as the
//!   server may change) and, for a batchable INSERT, finds its
//!   [`ShapeQueue`] ([`queue`]).
//! * [`Engine::submit`] puts an encoded row in that queue and awaits its own
//!   reply; flusher tasks ([`flush`]) take rows from the queue when a
//!   connection is free (or a timer/size limit says so), run them as
//!   multi-row statements through the [`Backend`] ([`execute`]), isolate
//!   failing rows ([`isolate`]), and send each caller its own outcome. A
//!   lone row at idle and an explicit batch go without a flusher
//!   ([`direct`]).
//! * [`work`]: what `close()` waits for.

mod direct;
mod execute;
mod flush;
mod isolate;
mod limit;
pub(crate) mod queue;
mod route;
#[cfg(test)]
mod tests;
mod work;

use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

use self::limit::{FlushLimit, Slot};
use self::queue::{Pending, ShapeQueue};
pub(crate) use self::route::Route;
use self::route::Routes;
pub(crate) use self::work::{Detached, Tracker, Work};
use crate::backend::Connections;
use crate::backend::batch::{Backend, ChunkError, ChunkResult};
use crate::classify::{self, StatementKind};
use crate::config::{BatchConfig, Limits, QueueFull};
use crate::error::Error;
use crate::stats::{Counters, Stats};
use crate::sync::lock;

/// Whether flushes of `form` count in the adaptive flush limit's windows:
/// writes (INSERTs, keyed updates and deletes), whose statements each pay
/// a commit; keyed reads hold slots but are not measured.
fn measured(form: &classify::Form) -> bool {
    form.keyed()
        .is_none_or(|kind| kind != classify::KeyedKind::Read)
}

/// The coalescing engine of one pool.
pub(crate) struct Engine<B: Backend> {
    pub(crate) backend: B,
    pub(crate) config: BatchConfig,
    /// Time limits the engine enforces (wait, statement).
    pub(crate) limits: Limits,
    /// Where each SQL text goes, and the texts being learned.
    routes: Routes<B>,
    /// Statement kinds of the texts run inside transactions and groups
    /// (bounded like `routes`).
    kinds: std::sync::Mutex<LruCache<Box<str>, StatementKind>>,
    /// Queue slots: one permit per queued row. In an `Arc` so a caller can
    /// reserve an owned permit ahead of its row (the tower service does, in
    /// `poll_ready`) and hand it to [`Engine::submit`].
    permits: Arc<Semaphore>,
    pub(crate) counters: Counters,
    /// Calls and tasks in progress; what `close()` waits for.
    pub(crate) tracker: Arc<Tracker>,
    /// Wakes timed flushers at close.
    closing: Notify,
    /// Flush slots: `max_in_flight`, or a number that adapts.
    flush_limit: Arc<FlushLimit>,
}

impl<B: Backend> Engine<B> {
    pub(crate) fn new(
        backend: B,
        config: BatchConfig,
        limits: Limits,
        counters: Counters,
    ) -> Result<Arc<Self>, Error> {
        config.validate()?;
        let cache = NonZeroUsize::new(config.cache_capacity).unwrap_or(NonZeroUsize::MIN);
        let flush_limit = Arc::new(FlushLimit::new(
            config.max_in_flight,
            config.adapt_in_flight,
            backend.connections().max_size(),
            Box::new(counters.flush_limit_observer()),
        ));
        Ok(Arc::new(Engine {
            backend,
            permits: Arc::new(Semaphore::new(
                config.queue_capacity.min(Semaphore::MAX_PERMITS),
            )),
            routes: Routes::new(cache, config.relearn_after),
            kinds: std::sync::Mutex::new(LruCache::new(cache)),
            config,
            limits,
            counters,
            tracker: Arc::default(),
            closing: Notify::new(),
            flush_limit,
        }))
    }

    /// Batching counters.
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.counters.snapshot();
        stats.flush_limit = self.flush_limit.current() as u64;
        stats
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tracker.is_closed()
    }

    /// Admits a call (see [`Tracker::enter`]): fails once `close()` has
    /// begun; `close()` waits until the returned guard is dropped.
    pub(crate) fn enter(&self) -> Result<Work, Error> {
        self.tracker.enter()
    }

    /// The end of a call's wait for a queue slot and a connection
    /// (`wait_timeout` from now).
    pub(crate) fn wait_deadline(&self) -> Option<Instant> {
        self.limits.wait.map(|w| Instant::now() + w)
    }

    /// What kind of statement `sql` is (transaction control, implicit
    /// commit, other): classified once per text, then cached.
    pub(crate) fn statement_kind(&self, sql: &str) -> StatementKind {
        if let Some(kind) = lock(&self.kinds).get(sql) {
            return *kind;
        }
        let kind = classify::statement_kind(B::DIALECT, sql);
        lock(&self.kinds).put(sql.into(), kind);
        kind
    }

    /// Reserves `n` queue slots, waiting or failing fast as configured.
    async fn reserve(&self, n: usize, deadline: Option<Instant>) -> Result<(), Error> {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        let permit = match self.config.queue_full {
            QueueFull::Wait => {
                let acquire = self.permits.acquire_many(n32);
                match deadline {
                    None => acquire.await,
                    Some(d) => tokio::time::timeout_at(d, acquire)
                        .await
                        .map_err(|_| Error::wait_timeout())?,
                }
                .map_err(|_| Error::pool_closed())?
            }
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
        if bytes > q.cap_bytes() {
            return Err(Error::too_large(format!(
                "row of {bytes} parameter bytes exceeds the {} byte statement limit",
                q.cap_bytes()
            )));
        }
        let ppr = q.form().params_per_row();
        if ppr > self.backend.max_params() {
            return Err(Error::too_large(format!(
                "a row of {ppr} bind parameters exceeds the protocol limit of {}",
                self.backend.max_params()
            )));
        }
        Ok(())
    }

    /// Queues one row and waits for its own outcome. `work` is the call's
    /// guard: it goes with the row into the queue, and the flusher that
    /// takes the row carries the work on (so `close()` waits for the row's
    /// outcome, not for its caller to look at it). `deadline` ends the
    /// row's wait for a queue slot and a connection.
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
        work: Work,
        deadline: Option<Instant>,
    ) -> Result<B::Output, Error> {
        self.check_row(q, bytes)?;
        // Natural batching with nothing queued and nobody flushing this
        // shape: send the row from this task at once when a connection is
        // free (no added latency at low load). Under load (a statement of
        // this shape on the wire) the row queues instead, so a connection
        // that comes free takes it with the rows queued meanwhile rather
        // than carrying it alone.
        let row = if self.config.max_delay.is_none() && q.is_unloaded() {
            match direct::inline(self, q, &work, row, deadline).await {
                Ok(result) => return result,
                Err(row) => row,
            }
        } else {
            row
        };
        match reserved {
            // Given back by the flusher that takes the row.
            Some(slot) if Arc::ptr_eq(slot.semaphore(), &self.permits) => slot.forget(),
            _ => self.reserve(1, deadline).await?,
        }
        let (tx, mut rx) = oneshot::channel();
        // Timed batching holds a row back on purpose: that is not waiting
        // for a connection.
        let deadline = deadline.map(|d| d + self.config.max_delay.unwrap_or_default());
        let claim = deadline.map(|_| Arc::new(queue::Claim::default()));
        self.enqueue(
            q,
            Pending {
                row,
                bytes,
                reply: tx,
                queued_at: Instant::now(),
                deadline,
                claim: claim.clone(),
                caller: flush::caller_span(),
                _work: work,
            },
        );
        let lost = |_| Err(Error::lost());
        let (Some(deadline), Some(claim)) = (deadline, claim) else {
            return rx.await.unwrap_or_else(lost);
        };
        // The caller keeps its own deadline, whatever holds its row: not
        // sent by then, it never will be (the flusher that takes it fails it
        // and counts it).
        tokio::select! {
            biased;
            answer = &mut rx => answer.unwrap_or_else(lost),
            () = tokio::time::sleep_until(deadline) => {
                if claim.expire() {
                    Err(Error::wait_timeout())
                } else {
                    rx.await.unwrap_or_else(lost)
                }
            }
        }
    }

    /// The queue slots (one permit per queued row), for callers that
    /// reserve a slot ahead of their row (see [`Engine::submit`]).
    #[cfg(any(feature = "tower", test))]
    pub(crate) fn queue_slots(&self) -> &Arc<Semaphore> {
        &self.permits
    }

    /// Runs an explicit batch from one caller (`execute_many`) in order on
    /// one connection; see [`direct::direct`].
    pub(crate) async fn submit_many(
        self: &Arc<Self>,
        work: Work,
        q: &Arc<ShapeQueue<B>>,
        rows: Vec<(B::Row, usize)>,
        deadline: Option<Instant>,
    ) -> Result<Vec<Result<B::Output, Error>>, Error> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let (rows, bytes): (Vec<B::Row>, Vec<usize>) = rows.into_iter().unzip();
        let (tx, rx) = oneshot::channel();
        let caller = flush::caller_span();
        let batch = direct::direct(self.clone(), q.clone(), rows, bytes, deadline, caller, tx);
        tokio::spawn(Detached::new(work, batch));
        rx.await.unwrap_or_else(|_| Err(Error::lost()))
    }

    /// Appends a row to its queue and spawns the flushers the queue asks
    /// for (see [`ShapeQueue::push`]); a queue holding a full statement
    /// wakes its timed flushers.
    fn enqueue(self: &Arc<Self>, q: &Arc<ShapeQueue<B>>, p: Pending<B>) {
        let (spawn, full) = q.push(p);
        self.counters.queued_delta(1, 0);
        self.spawn_flushers(q, spawn);
        if full && self.config.max_delay.is_some() {
            q.wake();
        }
    }

    /// Spawns `n` flushers for `q` (counted in by the queue). Called while
    /// the caller holds a [`Work`] guard (a call, or another flusher), so
    /// `close()` cannot miss them.
    fn spawn_flushers(self: &Arc<Self>, q: &Arc<ShapeQueue<B>>, n: usize) {
        for _ in 0..n {
            let work = self.tracker.more();
            tokio::spawn(flush::flusher(self.clone(), q.clone(), work));
        }
    }

    /// Whether statements of `shape` go out two at a time (the backend
    /// pipelines it, and [`BatchConfig::pipeline`] is on).
    pub(crate) fn pipelines(&self, shape: &B::Shape) -> bool {
        self.config.pipeline && self.backend.pipelines(shape, None, None)
    }

    /// Waits for a flush slot for rows of `q` (see [`FlushLimit`]; writes
    /// are what the adaptive limit measures).
    pub(crate) async fn flush_slot(&self, q: &ShapeQueue<B>) -> Option<Slot> {
        self.flush_limit.acquire(measured(q.form())).await
    }

    /// A flush slot for rows of `q` if one is free right now.
    pub(crate) fn try_flush_slot(&self, q: &ShapeQueue<B>) -> Option<Slot> {
        self.flush_limit.try_acquire(measured(q.form()))
    }

    /// Fails rows taken out of the queue because their wait for a
    /// connection timed out: nothing of them was sent. Gives their queue
    /// slots back.
    fn expired(&self, rows: Vec<queue::Expired<B>>) {
        if rows.is_empty() {
            return;
        }
        self.release(rows.len());
        let (mut cancelled, mut failed) = (0, 0);
        for (reply, claim) in rows {
            // A caller that went before its deadline cancelled its row; one
            // that heard its timeout (its claim expired) did not. Read in
            // that order: a caller expires its claim before it goes.
            let gone = reply.is_closed();
            let heard = claim.as_deref().is_some_and(queue::Claim::is_expired);
            if gone && !heard {
                cancelled += 1;
            } else {
                if let Some(claim) = claim {
                    claim.expire();
                }
                failed += 1;
                let _ = reply.send(Err(Error::wait_timeout()));
            }
        }
        self.counters.cancelled(cancelled);
        self.counters.unsent(failed);
        self.counters.failed(failed);
    }

    /// Gives back queue slots of rows taken (sent or cancelled).
    fn release(&self, n: usize) {
        if n > 0 {
            self.counters.queued_delta(0, n);
            self.permits.add_permits(n);
        }
    }

    /// Stops accepting calls, flushes every queued row now (timers are cut
    /// short) and waits until every accepted call has its outcome and every
    /// statement sent has been answered (or given up on), or `limit` passed.
    pub(crate) async fn close(&self, limit: Option<std::time::Duration>) -> Result<(), Error> {
        self.tracker.close();
        self.permits.close();
        // Timed flushers waiting now wake; those that start waiting later
        // see the closed flag first.
        self.closing.notify_waiters();
        match limit {
            None => {
                self.tracker.drained().await;
                Ok(())
            }
            Some(limit) => tokio::time::timeout(limit, self.tracker.drained())
                .await
                .map_err(|_| {
                    Error::new(
                        crate::error::Kind::Timeout,
                        format!(
                            "close: {} calls or flushes still running after {} ms",
                            self.tracker.active(),
                            limit.as_millis()
                        ),
                    )
                }),
        }
    }
}
