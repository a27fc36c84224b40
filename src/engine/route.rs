//! Where a SQL text goes — coalesced through a queue, or run on its own —
//! learned once per text (bounded LRU keyed by the exact text) and learned
//! again when what the server said about it may have changed.
//!
//! A route that depends on the server (a queue, or a backend's refusal after
//! looking at the table) is checked in the background once it is older
//! than [`BatchConfig::relearn_after`](crate::BatchConfig::relearn_after):
//! one cheap catalog query per table (its [`Backend::fingerprint`]), shared
//! by every text on that table, says whether anything the text's route was
//! learned from changed; only then is the text learned again (its catalog
//! read and its prepare). A statement of its shape that failed as stale
//! (the table changed under a prepared statement) has its text learned
//! again at once. Until the new answer arrives callers keep the old one, so
//! re-learning adds no latency.
//!
//! [`Engine::route`] is the way in, and everything about a text's route is
//! here: the cache ([`Routes`]), learning a new text (one task per text,
//! shared by its concurrent callers), the background check and re-learning,
//! and the warning about an INSERT the server declines. From here a text
//! only goes down: to the backend, and to the [`ShapeQueue`] it creates.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use lru::LruCache;
use tokio::time::Instant;

use super::Engine;
use super::queue::ShapeQueue;
use crate::backend::batch::Backend;
use crate::backend::{Connections, exchange};
use crate::classify::{self, Classified, Form};
use crate::error::Error;
use crate::explain::{Explain, NotCoalesced};
use crate::sync::lock;

/// Where a statement goes.
pub(crate) enum Route<B: Backend> {
    /// Executed as it is, for this reason.
    Pass(Arc<NotCoalesced>),
    /// Coalesced through this queue.
    Batch(Arc<ShapeQueue<B>>),
    /// Coalesced through the queue of its family (see [`Backend::family`]),
    /// its rows encoded by its own shape.
    Member(Arc<ShapeQueue<B>>, Arc<B::Shape>),
}

impl<B: Backend> Clone for Route<B> {
    fn clone(&self) -> Self {
        match self {
            Route::Pass(reason) => Route::Pass(reason.clone()),
            Route::Batch(q) => Route::Batch(q.clone()),
            Route::Member(q, shape) => Route::Member(q.clone(), shape.clone()),
        }
    }
}

impl<B: Backend> Route<B> {
    /// What `Pool::explain` reports for this route.
    pub(crate) fn explain(&self) -> Explain {
        match self {
            Route::Pass(reason) => Explain::not(NotCoalesced::clone(reason)),
            Route::Batch(_) | Route::Member(..) => Explain::coalesced(),
        }
    }

    /// The queue a row goes to and the shape that encodes it, unless the
    /// statement runs on its own.
    pub(crate) fn queued(&self) -> Option<(&Arc<ShapeQueue<B>>, &B::Shape)> {
        match self {
            Route::Pass(_) => None,
            Route::Batch(q) => Some((q, &q.shape)),
            Route::Member(q, shape) => Some((q, shape)),
        }
    }

    /// Whether the answer came from the server (and may change with it);
    /// routes decided from the text alone never do.
    fn server_decided(&self) -> bool {
        match self {
            Route::Batch(_) | Route::Member(..) => true,
            Route::Pass(reason) => matches!(**reason, NotCoalesced::Declined(_)),
        }
    }
}

impl<B: Backend> Engine<B> {
    /// Where `sql` goes: classified once per text (cached), the first call
    /// for a new batchable text asking the backend to prepare its shape (one
    /// round trip); a failure there (the statement is invalid, the server is
    /// down) is returned and not cached. A route the server decided is
    /// re-learned in the background when it is due (see the module docs).
    pub(crate) async fn route(
        self: &Arc<Self>,
        sql: &str,
        deadline: Option<Instant>,
    ) -> Result<Route<B>, Error> {
        if let Some((route, due)) = self.routes.get(sql) {
            if due {
                // Counted as work (the caller holds its own, so `close()`
                // cannot miss it): `close()` waits for its statements.
                let (engine, sql, work) = (self.clone(), sql.to_owned(), self.tracker.more());
                tokio::spawn(async move {
                    engine.refresh(&sql).await;
                    drop(work);
                });
            }
            return Ok(route);
        }
        // Boxed: the first call of a text only, kept out of every call's
        // future.
        Box::pin(self.route_new(sql, deadline)).await
    }

    /// [`route`](Engine::route) of a text not cached.
    ///
    /// Callers of a new text arrive together: the first starts learning it
    /// in a task of its own (one statement on one connection), the others
    /// wait for that answer. Each waits no longer than its own `deadline`
    /// (then it fails with a wait timeout: nothing of its row was sent),
    /// and a learning cut short by its caller's going does not leave a
    /// statement half-answered on a connection. A failure is not shared: a
    /// waiter whose learning another caller started asks again itself.
    async fn route_new(
        self: &Arc<Self>,
        sql: &str,
        deadline: Option<Instant>,
    ) -> Result<Route<B>, Error> {
        loop {
            let (learning, mine) = {
                let mut map = lock(&self.routes.learning);
                match map.get(sql) {
                    Some(l) => (l.clone(), false),
                    None => {
                        let l = self.start_learning(sql, deadline);
                        map.insert(sql.into(), l.clone());
                        (l, true)
                    }
                }
            };
            let answer = match deadline {
                None => learning.answer.await,
                Some(d) => tokio::time::timeout_at(d, learning.answer)
                    .await
                    .map_err(|_| Error::wait_timeout())?,
            };
            match answer {
                Err(_) if !mine => continue,
                answer => return answer,
            }
        }
    }

    /// Learns `sql` in a task of its own, connection wait bounded by
    /// `deadline`; the task caches the route and ends the text's entry in
    /// [`Routes::learning`]. Counted as work, so `close()` waits for its statement.
    fn start_learning(self: &Arc<Self>, sql: &str, deadline: Option<Instant>) -> Learning<B> {
        let id = self.routes.learnings.fetch_add(1, Ordering::Relaxed);
        let (engine, sql, work) = (self.clone(), Box::<str>::from(sql), self.tracker.more());
        let task = tokio::spawn(async move {
            let learned = engine.learn(&sql, deadline).await.map(|r| {
                if r.unlearned() {
                    // Not kept: the next caller asks again.
                    r.route
                } else {
                    engine.routes.put_first(&sql, r)
                }
            });
            let mut map = lock(&engine.routes.learning);
            if map.get(&sql).is_some_and(|l| l.id == id) {
                map.remove(&sql);
            }
            drop(work);
            learned
        });
        Learning {
            id,
            answer: task
                .map(|joined| joined.unwrap_or_else(|_| Err(Error::lost())))
                .boxed()
                .shared(),
        }
    }

    /// Checks a due route of `sql` in the background: its table's
    /// fingerprint (one query shared by the texts on that table) unchanged
    /// since the route was learned, the route stays; otherwise (or when it
    /// is stale, or the backend has no fingerprint) the text is learned
    /// again.
    async fn refresh(self: &Arc<Self>, sql: &str) {
        // Waiting for a connection no longer than a call would.
        let deadline = self.wait_deadline();
        if let Some(check) = self.routes.check(sql) {
            match self.probe(&check, deadline).await {
                Ok((at, now)) if now.is_some() && now == check.fingerprint => {
                    self.routes.confirmed(sql, at);
                    return;
                }
                Ok(_) => {}
                Err(_) => {
                    self.routes.relearned(sql, None);
                    return;
                }
            }
        }
        let learned = self
            .learn(sql, deadline)
            .await
            .ok()
            .filter(|l| !l.unlearned());
        self.routes.relearned(sql, learned);
    }

    /// The fingerprint of `check`'s table taken after `check.at`: the one
    /// another text's check took, or a new one (one query at a time per
    /// table, so texts due together share it).
    async fn probe(
        &self,
        check: &Check,
        deadline: Option<Instant>,
    ) -> Result<(Instant, Option<Box<str>>), Error> {
        let table = self.routes.table(&check.form);
        if let Some(latest) = table.since(check.at) {
            return Ok(latest);
        }
        let _turn = match deadline {
            None => table.turn.lock().await,
            Some(d) => tokio::time::timeout_at(d, table.turn.lock())
                .await
                .map_err(|_| Error::wait_timeout())?,
        };
        if let Some(latest) = table.since(check.at) {
            return Ok(latest);
        }
        let mut conn = self.backend.connections().checkout(deadline).await?;
        let at = Instant::now();
        let limit = B::Connections::answer_limit(&conn);
        let fingerprint = exchange!(B::Connections, limit, &mut conn, |c| self
            .backend
            .fingerprint(c, &check.form))??
        .map(Box::from);
        self.counters.learn_checked();
        table.set(at, fingerprint.clone());
        Ok((at, fingerprint))
    }

    /// Marks the route of `sql` stale (its table changed under a prepared
    /// statement): the next caller re-learns it.
    pub(crate) fn route_stale(&self, sql: &str) {
        self.routes.stale(sql);
    }

    /// Classifies `sql` and, for a batchable INSERT, asks the backend on a
    /// connection taken by `deadline`, within the statement deadline: the
    /// table's fingerprint first (a change after it is then seen by the
    /// next check), then the text's facts and prepare.
    ///
    /// Only a connection that cannot be had by `deadline` is the caller's
    /// error (its statement would have met the same). Once one is had, a
    /// failure of the asking (the connection lost, the answer late, a
    /// catalog read refused for a passing reason, or the server's refusal
    /// of the text's prepare) gives a route of this call only:
    /// [`NotCoalesced::NotLearned`], run on its own, so the caller gets
    /// what its statement alone gets, not the error of a question it never
    /// asked.
    async fn learn(&self, sql: &str, deadline: Option<Instant>) -> Result<Learned<B>, Error> {
        let pass = |reason| Learned {
            route: Route::Pass(Arc::new(reason)),
            check: None,
        };
        Ok(match classify::classify(B::DIALECT, sql) {
            // Refused whether or not coalescing is on.
            Classified::Other(reason @ NotCoalesced::TransactionControl(_)) => pass(reason),
            _ if !self.config.enabled => pass(NotCoalesced::Disabled),
            Classified::Other(reason) => pass(reason),
            Classified::Batchable(Form::Keyed(keyed)) if !self.config.coalesces(keyed.kind) => {
                pass(NotCoalesced::KindDisabled(keyed.kind.plural()))
            }
            Classified::Batchable(form) => {
                let mut conn = self.backend.connections().checkout(deadline).await?;
                let limit = B::Connections::answer_limit(&conn);
                let at = Instant::now();
                let asked = async {
                    let fingerprint = exchange!(B::Connections, limit, &mut conn, |c| self
                        .backend
                        .fingerprint(c, &form))??
                    .map(Box::from);
                    let learned = exchange!(B::Connections, limit, &mut conn, |c| self
                        .backend
                        .prepare_shape(c, sql, form.clone()))??;
                    Ok::<_, Error>((fingerprint, learned))
                };
                let (fingerprint, learned) = match asked.await {
                    Ok(answer) => answer,
                    Err(e) => {
                        tracing::debug!(sql, error = %e, "the server could not be asked about \
                            a statement text: this call runs on its own, the next asks again");
                        return Ok(Learned {
                            route: Route::Pass(Arc::new(NotCoalesced::NotLearned(e.to_string()))),
                            check: None,
                        });
                    }
                };
                self.counters.learned();
                let route = match learned {
                    Err(reason) => {
                        if form.keyed().is_none() {
                            self.warn_not_coalesced(sql, &reason);
                        } else {
                            // Most reads and writes of a service are not
                            // keyed ones: `explain()` tells, the log does
                            // not fill up.
                            tracing::debug!(sql, reason = %reason, "not coalesced");
                        }
                        Route::Pass(Arc::new(reason))
                    }
                    Ok(shape) => {
                        let ppr = B::bound_params(&shape)
                            .unwrap_or_else(|| form.params_per_row())
                            .max(1);
                        let cap_rows = self
                            .config
                            .max_rows
                            .min(self.backend.max_params() / ppr)
                            .max(1);
                        let cap_bytes = self
                            .config
                            .max_bytes
                            .min(self.backend.max_statement_bytes());
                        let family = B::family(&shape);
                        let queue = |shape| {
                            Arc::new(ShapeQueue::new(
                                sql,
                                form.clone(),
                                shape,
                                cap_rows,
                                cap_bytes,
                            ))
                        };
                        match family {
                            None => Route::Batch(queue(shape)),
                            Some(family) => self.routes.family_route(family, shape, queue),
                        }
                    }
                };
                Learned {
                    route,
                    check: Some(Check {
                        form,
                        fingerprint,
                        at,
                    }),
                }
            }
        })
    }

    /// Warns, once per text, that `sql` (an INSERT the classifier would
    /// coalesce) runs on its own for `reason`, which the backend found on
    /// the server (a trigger, a view, a table type...): nothing else tells
    /// the operator short of `explain()`.
    fn warn_not_coalesced(&self, sql: &str, reason: &NotCoalesced) {
        let first = lock(&self.routes.warned).put(sql.into(), ()).is_none();
        if first {
            tracing::warn!(sql, reason = %reason, "INSERT not coalesced: each row runs on its own");
        }
    }
}

/// A route as learned, with what tells whether it is still current.
pub(crate) struct Learned<B: Backend> {
    pub(crate) route: Route<B>,
    /// For a text the server was asked about.
    pub(crate) check: Option<Check>,
}

impl<B: Backend> Learned<B> {
    /// The server could not be asked: a route for one call, never kept.
    fn unlearned(&self) -> bool {
        matches!(&self.route, Route::Pass(reason) if matches!(**reason, NotCoalesced::NotLearned(_)))
    }
}

/// What a learned route is checked against.
#[derive(Clone)]
pub(crate) struct Check {
    /// The text's statement: its table and the functions it calls.
    pub(crate) form: Form,
    /// The table's fingerprint taken just before the route was learned;
    /// `None` when the backend has none (the route is then learned again
    /// whenever it is due).
    pub(crate) fingerprint: Option<Box<str>>,
    /// When that fingerprint was taken, or a later one found equal to it.
    pub(crate) at: Instant,
}

struct Entry<B: Backend> {
    route: Route<B>,
    check: Option<Check>,
    /// When the route was last known current (a fingerprint taken at that
    /// time matched); `None` once it is known to be stale.
    learned: Option<Instant>,
    /// A background check is on its way.
    refreshing: bool,
}

/// The route cache of one engine, and the texts being learned.
pub(crate) struct Routes<B: Backend> {
    cache: Mutex<LruCache<Box<str>, Entry<B>>>,
    /// The latest fingerprint of each table (and functions called), shared
    /// by the texts on it (bounded like `cache`).
    tables: Mutex<LruCache<Box<str>, Arc<TableProbe>>>,
    relearn_after: Duration,
    /// Texts being learned right now, shared by their concurrent callers.
    learning: Mutex<HashMap<Box<str>, Learning<B>>>,
    /// The id of the next [`Learning`].
    learnings: AtomicU64,
    /// Texts already warned about as not coalesced (bounded like `cache`:
    /// a text forgotten here may be warned about again).
    warned: Mutex<LruCache<Box<str>, ()>>,
    /// The queue of each family of shapes (see [`Backend::family`]), kept
    /// while a route holds it.
    families: Mutex<HashMap<u64, Weak<ShapeQueue<B>>>>,
}

/// A text being learned in a task of its own, awaited by its concurrent
/// callers, each for as long as its own wait allows.
struct Learning<B: Backend> {
    /// Tells learnings of one text apart.
    id: u64,
    answer: Shared<BoxFuture<'static, Result<Route<B>, Error>>>,
}

impl<B: Backend> Clone for Learning<B> {
    fn clone(&self) -> Self {
        Learning {
            id: self.id,
            answer: self.answer.clone(),
        }
    }
}

/// The latest fingerprint taken of one table, and the turn to take the next
/// one (so texts due together share one query).
#[derive(Default)]
pub(crate) struct TableProbe {
    latest: Mutex<Option<(Instant, Option<Box<str>>)>>,
    pub(crate) turn: tokio::sync::Mutex<()>,
}

impl TableProbe {
    /// The latest fingerprint if it was taken after `after`.
    pub(crate) fn since(&self, after: Instant) -> Option<(Instant, Option<Box<str>>)> {
        let latest = lock(&self.latest);
        latest.as_ref().filter(|(at, _)| *at > after).cloned()
    }

    pub(crate) fn set(&self, at: Instant, fingerprint: Option<Box<str>>) {
        let mut latest = lock(&self.latest);
        if latest.as_ref().is_none_or(|(old, _)| *old < at) {
            *latest = Some((at, fingerprint));
        }
    }
}

impl<B: Backend> Routes<B> {
    pub(crate) fn new(capacity: NonZeroUsize, relearn_after: Duration) -> Routes<B> {
        Routes {
            cache: Mutex::new(LruCache::new(capacity)),
            tables: Mutex::new(LruCache::new(capacity)),
            relearn_after,
            learning: Mutex::default(),
            learnings: AtomicU64::new(0),
            warned: Mutex::new(LruCache::new(capacity)),
            families: Mutex::default(),
        }
    }

    /// The route of a shape of `family`: through the family's queue if it
    /// has one, else through a new queue (made by `queue`) that becomes
    /// the family's.
    fn family_route(
        &self,
        family: u64,
        shape: B::Shape,
        queue: impl FnOnce(B::Shape) -> Arc<ShapeQueue<B>>,
    ) -> Route<B> {
        let mut families = lock(&self.families);
        if let Some(q) = families.get(&family).and_then(Weak::upgrade) {
            return Route::Member(q, Arc::new(shape));
        }
        families.retain(|_, q| q.strong_count() > 0);
        let q = queue(shape);
        families.insert(family, Arc::downgrade(&q));
        Route::Batch(q)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Box<str>, Entry<B>>> {
        // Each critical section is one map operation: poisoning is ignored.
        lock(&self.cache)
    }

    /// The cached route of `sql`, and whether the caller should check it in
    /// the background (it is then marked as being checked, so only one
    /// caller does).
    pub(crate) fn get(&self, sql: &str) -> Option<(Route<B>, bool)> {
        let mut cache = self.lock();
        let entry = cache.get_mut(sql)?;
        let due = entry.route.server_decided()
            && !entry.refreshing
            && entry
                .learned
                .is_none_or(|at| at.elapsed() >= self.relearn_after);
        if due {
            entry.refreshing = true;
        }
        Some((entry.route.clone(), due))
    }

    /// What a due route of `sql` is checked against, if a fingerprint can
    /// tell: `None` when it must be learned again (stale, or no
    /// fingerprint).
    pub(crate) fn check(&self, sql: &str) -> Option<Check> {
        let cache = self.lock();
        let entry = cache.peek(sql)?;
        entry.learned?;
        entry
            .check
            .clone()
            .filter(|check| check.fingerprint.is_some())
    }

    /// The fingerprint record of the table `form` acts on (with the
    /// functions its VALUES call, whose facts the fingerprint includes).
    pub(crate) fn table(&self, form: &Form) -> Arc<TableProbe> {
        let mut key = form.table().to_owned();
        for call in form.calls() {
            key.push('\0');
            key.push_str(call);
        }
        let mut tables = lock(&self.tables);
        if let Some(probe) = tables.get(key.as_str()) {
            return probe.clone();
        }
        let probe = Arc::new(TableProbe::default());
        tables.put(key.into(), probe.clone());
        probe
    }

    /// Caches a newly learned route, unless another caller raced us here:
    /// then its route is kept (so rows of one text share one queue).
    pub(crate) fn put_first(&self, sql: &str, learned: Learned<B>) -> Route<B> {
        let mut cache = self.lock();
        if let Some(existing) = cache.get(sql) {
            return existing.route.clone();
        }
        let route = learned.route.clone();
        cache.put(sql.into(), Self::fresh(learned));
        route
    }

    /// A due route of `sql` is still current: its table's fingerprint taken
    /// at `at` is the one it was learned with.
    pub(crate) fn confirmed(&self, sql: &str, at: Instant) {
        if let Some(entry) = self.lock().get_mut(sql) {
            if entry.learned.is_some() {
                entry.learned = Some(at);
                if let Some(check) = &mut entry.check {
                    check.at = at;
                }
            }
            entry.refreshing = false;
        }
    }

    /// Replaces the route of `sql` with a re-learned one (or, when
    /// re-learning failed, `None`: the old route is kept and tried again
    /// after another `relearn_after`).
    pub(crate) fn relearned(&self, sql: &str, learned: Option<Learned<B>>) {
        let mut cache = self.lock();
        let unchanged = match (&learned, cache.peek(sql).map(|e| &e.route)) {
            (Some(learned), Some(old)) => match (learned.route.queued(), old.queued()) {
                (Some((_, new)), Some((_, old))) => B::same_shape(old, new),
                _ => false,
            },
            (Some(_), None) => false,
            (None, _) => true,
        };
        match learned {
            // Nothing changed (or the server could not be asked): keep the
            // queue, and the statements the connections prepared for it.
            Some(learned) if unchanged => {
                if let Some(entry) = cache.get_mut(sql) {
                    entry.learned =
                        Some(learned.check.as_ref().map_or_else(Instant::now, |c| c.at));
                    entry.check = learned.check;
                    entry.refreshing = false;
                }
            }
            None => {
                if let Some(entry) = cache.get_mut(sql) {
                    if entry.learned.is_none() {
                        // Stale: learned in full next time, whatever the
                        // fingerprint says.
                        if let Some(check) = &mut entry.check {
                            check.fingerprint = None;
                        }
                    }
                    entry.learned = Some(Instant::now());
                    entry.refreshing = false;
                }
            }
            Some(learned) => {
                cache.put(sql.into(), Self::fresh(learned));
            }
        }
    }

    /// Marks the route of `sql` stale: the next caller re-learns it.
    pub(crate) fn stale(&self, sql: &str) {
        if let Some(entry) = self.lock().get_mut(sql) {
            entry.learned = None;
        }
    }

    fn fresh(learned: Learned<B>) -> Entry<B> {
        Entry {
            route: learned.route,
            learned: Some(learned.check.as_ref().map_or_else(Instant::now, |c| c.at)),
            check: learned.check,
            refreshing: false,
        }
    }
}
