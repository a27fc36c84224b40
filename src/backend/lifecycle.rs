//! How long a connection lives: [`max_lifetime`], [`idle_timeout`] and
//! [`Pool::retire_all`], enforced when a connection is taken from the pool
//! (deadpool's `recycle`) and by a background task that sweeps the idle
//! ones (deadpool's `Pool::retain`, which only ever sees connections in the
//! pool, never one in use).
//!
//! [`max_lifetime`]: crate::PoolBuilder::max_lifetime
//! [`idle_timeout`]: crate::PoolBuilder::idle_timeout
//! [`Pool::retire_all`]: crate::Pool::retire_all

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool::managed::Metrics;

use super::{Capped, Wire};
use crate::sync::lock;

/// Shortest pause between two sweeps.
const MIN_SWEEP: Duration = Duration::from_millis(10);
/// Longest pause between two sweeps: also how long a connection retired by
/// [`Pool::retire_all`](crate::Pool::retire_all) while in use may stay open
/// after it comes back.
const MAX_SWEEP: Duration = Duration::from_secs(1);

/// A pool's lifecycle settings and state, kept by its manager.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    max_lifetime: Option<Duration>,
    idle_timeout: Option<Duration>,
    /// Connections whose opening began in an earlier generation are
    /// retired ([`retire_all`](Lifecycle::retire_all) starts a new one).
    generation: AtomicU64,
    /// Whether connections must be swept at all: a lifetime or idle limit
    /// is set, or a generation was retired.
    sweeping: AtomicBool,
    /// The sweeping task runs (cleared by the task as it ends).
    running: Arc<AtomicBool>,
}

/// What the pool knows of one connection's life beyond deadpool's
/// [`Metrics`].
#[derive(Debug)]
pub(crate) struct Stamp {
    /// The generation in which its opening began.
    generation: u64,
    /// When a sweep first found it idle, with deadpool's recycle count then:
    /// a connection taken out since has a higher count. deadpool records
    /// when a connection was last taken, not when it came back, so this is
    /// what says how long it has been idle (never more than it has).
    idle_since: Mutex<Option<(usize, Instant)>>,
}

impl Lifecycle {
    pub(crate) fn new(max_lifetime: Option<Duration>, idle_timeout: Option<Duration>) -> Lifecycle {
        Lifecycle {
            max_lifetime,
            idle_timeout,
            generation: AtomicU64::new(0),
            sweeping: AtomicBool::new(max_lifetime.is_some() || idle_timeout.is_some()),
            running: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The stamp of a connection whose opening begins now.
    pub(crate) fn stamp(&self) -> Stamp {
        Stamp {
            generation: self.generation.load(Ordering::Acquire),
            idle_since: Mutex::new(None),
        }
    }

    /// Why a connection must not be handed out again (checked when it is
    /// taken from the pool), if it must not.
    pub(crate) fn expired(&self, stamp: &Stamp, metrics: &Metrics) -> Option<&'static str> {
        if stamp.generation < self.generation.load(Ordering::Acquire) {
            return Some("connection retired");
        }
        if self.max_lifetime.is_some_and(|l| metrics.age() >= l) {
            return Some("connection reached max_lifetime");
        }
        None
    }

    /// Whether a sweep keeps an idle connection (false: it is closed).
    fn keep(&self, stamp: &Stamp, metrics: &Metrics, now: Instant) -> bool {
        if self.expired(stamp, metrics).is_some() {
            return false;
        }
        let Some(idle_timeout) = self.idle_timeout else {
            return true;
        };
        let mut since = lock(&stamp.idle_since);
        match *since {
            Some((count, at)) if count == metrics.recycle_count => {
                now.saturating_duration_since(at) < idle_timeout
            }
            _ => {
                // Idle for the first time since it was last taken: it may
                // have come back a moment ago.
                *since = Some((metrics.recycle_count, now));
                true
            }
        }
    }

    /// Retires every connection open now: the idle ones are closed at the
    /// next sweep (`sweep` does one at once), the ones in use when they come
    /// back.
    pub(crate) fn retire_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.sweeping.store(true, Ordering::Release);
    }

    /// The pause between two sweeps: a quarter of the shortest limit, so an
    /// idle connection is closed at most about half its `idle_timeout`
    /// late (one pause to be first seen idle, one to be found expired).
    fn period(&self) -> Duration {
        match (self.max_lifetime, self.idle_timeout) {
            (None, None) => MAX_SWEEP,
            (a, b) => a.into_iter().chain(b).min().unwrap_or(MAX_SWEEP) / 4,
        }
        .clamp(MIN_SWEEP, MAX_SWEEP)
    }
}

/// Closes the idle connections of `pool` that [`Lifecycle`] says must go.
pub(crate) fn sweep<M>(pool: &deadpool::managed::Pool<M>)
where
    M: Capped,
    M::Type: Wire,
{
    let lifecycle = pool.manager().lifecycle();
    let now = Instant::now();
    // deadpool detaches the removed connections (the manager counts them
    // closed); they are closed when dropped here, outside the pool's lock.
    let removed = pool.retain(|conn, metrics| lifecycle.keep(conn.stamp(), &metrics, now));
    drop(removed);
}

/// Starts the sweeping task of `pool` if it needs one and none runs: on
/// the caller's tokio runtime, holding the pool only weakly (it ends when
/// the pool is dropped or closed).
pub(crate) fn ensure_sweeper<M>(pool: &deadpool::managed::Pool<M>)
where
    M: Capped + 'static,
    M::Type: Wire,
{
    let lifecycle = pool.manager().lifecycle();
    if !lifecycle.sweeping.load(Ordering::Acquire) || lifecycle.running.load(Ordering::Acquire) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // The next call on a runtime starts it.
        return;
    };
    if lifecycle.running.swap(true, Ordering::AcqRel) {
        return;
    }
    let weak = pool.weak();
    let running = Arc::clone(&lifecycle.running);
    let period = lifecycle.period();
    runtime.spawn(async move {
        // Also dropped with the task when its runtime shuts down: the next
        // call (on another runtime) starts a new one.
        let _running = Running(running);
        loop {
            tokio::time::sleep(period).await;
            let Some(pool) = weak.upgrade() else { return };
            if pool.is_closed() {
                return;
            }
            sweep(&pool);
        }
    });
}

/// Clears [`Lifecycle::running`] when the sweeping task ends.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(age: Duration, recycle_count: usize) -> Metrics {
        Metrics {
            created: Instant::now() - age,
            recycle_count,
            ..Metrics::default()
        }
    }

    #[test]
    fn lifetime_expires_a_connection_when_it_is_taken() {
        let l = Lifecycle::new(Some(Duration::from_secs(60)), None);
        let stamp = l.stamp();
        assert_eq!(
            l.expired(&stamp, &metrics(Duration::from_secs(59), 3)),
            None
        );
        assert!(
            l.expired(&stamp, &metrics(Duration::from_secs(61), 3))
                .is_some()
        );
    }

    #[test]
    fn retire_all_expires_older_generations_only() {
        let l = Lifecycle::new(None, None);
        let old = l.stamp();
        l.retire_all();
        let new = l.stamp();
        let m = metrics(Duration::ZERO, 0);
        assert!(l.expired(&old, &m).is_some());
        assert_eq!(l.expired(&new, &m), None);
        assert!(l.sweeping.load(Ordering::Acquire));
    }

    #[test]
    fn idle_time_counts_from_the_first_sweep_that_saw_it_idle() {
        let idle = Duration::from_secs(10);
        let l = Lifecycle::new(None, Some(idle));
        let stamp = l.stamp();
        let t0 = Instant::now();
        // Taken long ago (deadpool's last use is old), back a moment ago:
        // not closed at once.
        assert!(l.keep(&stamp, &metrics(Duration::from_secs(100), 1), t0));
        assert!(l.keep(&stamp, &metrics(Duration::from_secs(100), 1), t0 + idle / 2));
        assert!(!l.keep(&stamp, &metrics(Duration::from_secs(100), 1), t0 + idle));
        // Taken and back again in between: its idle time starts over.
        let stamp = l.stamp();
        assert!(l.keep(&stamp, &metrics(Duration::ZERO, 1), t0));
        assert!(l.keep(&stamp, &metrics(Duration::ZERO, 2), t0 + idle));
        assert!(l.keep(&stamp, &metrics(Duration::ZERO, 2), t0 + idle + idle / 2));
        assert!(!l.keep(&stamp, &metrics(Duration::ZERO, 2), t0 + idle * 2));
    }
}
