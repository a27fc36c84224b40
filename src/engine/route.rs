//! Where a SQL text goes — coalesced through a queue, or run on its own —
//! learned once per text (bounded LRU keyed by the exact text) and learned
//! again when what the server said about it may have changed.
//!
//! A route that depends on the server (a queue, or a backend's refusal after
//! looking at the table) is re-learned in the background once it is older
//! than [`BatchConfig::relearn_after`](crate::BatchConfig::relearn_after), or
//! at once after a statement of its shape failed as stale (the table
//! changed under a prepared statement). Until the new answer arrives callers
//! keep the old one, so re-learning adds no latency.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lru::LruCache;
use tokio::time::Instant;

use super::backend::Backend;
use super::queue::ShapeQueue;
use crate::explain::{Explain, NotCoalesced};

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

struct Entry<B: Backend> {
    route: Route<B>,
    /// When the route was learned; `None` once it is known to be stale.
    learned: Option<Instant>,
    /// A background re-learn is on its way.
    refreshing: bool,
}

/// The route cache of one engine.
pub(crate) struct Routes<B: Backend> {
    cache: Mutex<LruCache<Box<str>, Entry<B>>>,
    relearn_after: Duration,
}

impl<B: Backend> Routes<B> {
    pub(crate) fn new(capacity: NonZeroUsize, relearn_after: Duration) -> Routes<B> {
        Routes {
            cache: Mutex::new(LruCache::new(capacity)),
            relearn_after,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Box<str>, Entry<B>>> {
        // Each critical section is one map operation: poisoning is ignored.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached route of `sql`, and whether the caller should re-learn it
    /// in the background (it is then marked as being re-learned, so only one
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

    /// Caches a newly learned route, unless another caller raced us here:
    /// then its route is kept (so rows of one text share one queue).
    pub(crate) fn put_first(&self, sql: &str, route: Route<B>) -> Route<B> {
        let mut cache = self.lock();
        if let Some(existing) = cache.get(sql) {
            return existing.route.clone();
        }
        cache.put(sql.into(), Self::fresh(route.clone()));
        route
    }

    /// Replaces the route of `sql` with a re-learned one (or, when
    /// re-learning failed, `None`: the old route is kept and tried again
    /// after another `relearn_after`).
    pub(crate) fn relearned(&self, sql: &str, route: Option<Route<B>>) {
        let mut cache = self.lock();
        let unchanged = match (&route, cache.peek(sql).map(|e| &e.route)) {
            (Some(Route::Batch(new)), Some(Route::Batch(old))) => {
                B::same_shape(&old.shape, &new.shape)
            }
            (Some(_), _) => false,
            (None, _) => true,
        };
        match route {
            // Nothing changed (or the server could not be asked): keep the
            // queue, and the statements the connections prepared for it.
            _ if unchanged => {
                if let Some(entry) = cache.get_mut(sql) {
                    entry.learned = Some(Instant::now());
                    entry.refreshing = false;
                }
            }
            Some(route) => {
                cache.put(sql.into(), Self::fresh(route));
            }
            None => {}
        }
    }

    /// Marks the route of `sql` stale: the next caller re-learns it.
    pub(crate) fn stale(&self, sql: &str) {
        if let Some(entry) = self.lock().get_mut(sql) {
            entry.learned = None;
        }
    }

    fn fresh(route: Route<B>) -> Entry<B> {
        Entry {
            route,
            learned: Some(Instant::now()),
            refreshing: false,
        }
    }
}
