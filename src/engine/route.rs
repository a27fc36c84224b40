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

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lru::LruCache;
use tokio::time::Instant;

use super::queue::ShapeQueue;
use crate::backend::batch::Backend;
use crate::classify::InsertShape;
use crate::explain::{Explain, NotCoalesced};
use crate::sync::lock;

/// Where a statement goes.
pub(crate) enum Route<B: Backend> {
    /// Executed as it is, for this reason.
    Pass(Arc<NotCoalesced>),
    /// Coalesced through this queue.
    Batch(Arc<ShapeQueue<B>>),
}

impl<B: Backend> Clone for Route<B> {
    fn clone(&self) -> Self {
        match self {
            Route::Pass(reason) => Route::Pass(reason.clone()),
            Route::Batch(q) => Route::Batch(q.clone()),
        }
    }
}

impl<B: Backend> Route<B> {
    /// What `Pool::explain` reports for this route.
    pub(crate) fn explain(&self) -> Explain {
        match self {
            Route::Pass(reason) => Explain::not(NotCoalesced::clone(reason)),
            Route::Batch(_) => Explain::coalesced(),
        }
    }

    /// Whether the answer came from the server (and may change with it);
    /// routes decided from the text alone never do.
    fn server_decided(&self) -> bool {
        match self {
            Route::Batch(_) => true,
            Route::Pass(reason) => matches!(**reason, NotCoalesced::Declined(_)),
        }
    }
}

/// A route as learned, with what tells whether it is still current.
pub(crate) struct Learned<B: Backend> {
    pub(crate) route: Route<B>,
    /// For a text the server was asked about.
    pub(crate) check: Option<Check>,
}

/// What a learned route is checked against.
#[derive(Clone)]
pub(crate) struct Check {
    /// The text's INSERT: its table and the functions it calls.
    pub(crate) insert: Arc<InsertShape>,
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

/// The route cache of one engine.
pub(crate) struct Routes<B: Backend> {
    cache: Mutex<LruCache<Box<str>, Entry<B>>>,
    /// The latest fingerprint of each table (and functions called), shared
    /// by the texts on it (bounded like `cache`).
    tables: Mutex<LruCache<Box<str>, Arc<TableProbe>>>,
    relearn_after: Duration,
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
        }
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

    /// The fingerprint record of the table `insert` writes to (with the
    /// functions its VALUES call, whose facts the fingerprint includes).
    pub(crate) fn table(&self, insert: &InsertShape) -> Arc<TableProbe> {
        let mut key = insert.table.clone();
        for call in &insert.calls {
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
            (
                Some(Learned {
                    route: Route::Batch(new),
                    ..
                }),
                Some(Route::Batch(old)),
            ) => B::same_shape(&old.shape, &new.shape),
            (Some(_), _) => false,
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
