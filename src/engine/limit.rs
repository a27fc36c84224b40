//! How many flushes run at once ([`FlushLimit`]).
//!
//! With [`BatchConfig::max_in_flight`](crate::BatchConfig::max_in_flight)
//! set, that many, always. Otherwise the limit adapts to what the server
//! answers: natural batching sends whatever is queued whenever a flush slot
//! is free, so the number of flushes in flight decides how many rows each
//! statement carries, and each statement pays its own commit. On a server
//! that is CPU- or commit-bound (a Galera certification round, a disk
//! flush), fewer and larger statements carry more rows per second; on one
//! with spare parallelism, more flushes do.
//!
//! The limit starts at the pool's size, today's "one flush per connection".
//! Only while it holds flushes back (a flush found no free slot) does it
//! move: it measures the rows per second answered over a window at the
//! current limit, then tries half of it (and, where there is room, twice
//! it) for a window each, and keeps a trial only when it carried
//! clearly more rows per second ([`BETTER`]) in two windows running.
//! Trials go on in the direction that helped, and are made again every
//! [`EXPLOIT_WINDOWS`] windows so the limit follows the server. Flushes
//! that already carry [`LARGE_FLUSH`] rows or more are not halved. A window that held nobody back raises the
//! limit one step back towards the pool's size: a lone caller never waits
//! for a slot while a connection is free.
//!
//! Writes drive the climb (INSERTs, keyed updates and deletes: each of
//! their statements pays a commit); keyed reads hold slots of the same
//! limit but are not measured (on MariaDB the climb on their flushes cost
//! more than it found).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::sync::lock;

/// A trial limit is kept when it carried this much more (relative) rows per
/// second than the limit before it: run-to-run noise of one window is
/// below it.
const BETTER: f64 = 0.15;
/// A measuring window lasts at least this long, and at least
/// [`WINDOW_FLUSH_TIMES`] × the mean time a flush held its slot ...
const MIN_WINDOW: Duration = Duration::from_millis(100);
const WINDOW_FLUSH_TIMES: u32 = 16;
/// ... and takes at least this many flushes (and 8 × the limit).
const MIN_FLUSHES: u32 = 32;
/// Flushes carrying this many rows on average are not halved: their
/// commit is shared so widely that larger ones gain next to nothing, and
/// fewer of them in flight leave the server's parallelism unused.
const LARGE_FLUSH: u64 = 64;
/// Windows at the kept limit between two rounds of trials.
const EXPLOIT_WINDOWS: u32 = 25;

/// The flush slots of one engine: a fixed or an adaptive number.
pub(crate) struct FlushLimit {
    slots: Arc<Semaphore>,
    /// The fixed number of slots, or the adaptive limit's maximum.
    fixed: usize,
    /// `None`: a fixed limit (`max_in_flight` set).
    adapt: Option<Mutex<Climb>>,
    /// Told the limit whenever it changes (the `metrics` gauge).
    observe: Box<dyn Fn(usize) + Send + Sync>,
}

/// A flush slot, held while a flush runs. Dropped, it gives the slot back
/// (or retires it, when the limit went down meanwhile) and reports the rows
/// it carried ([`Slot::carried`]).
pub(crate) struct Slot {
    limit: Arc<FlushLimit>,
    permit: Option<OwnedSemaphorePermit>,
    rows: u64,
    since: Instant,
    /// Whether this flush's rows and time count in the climb's windows.
    measured: bool,
}

impl Slot {
    /// Records that this flush carried `rows` rows.
    pub(crate) fn carried(&mut self, rows: usize) {
        self.rows = rows as u64;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let Some(adapt) = &self.limit.adapt else {
            return;
        };
        let change = {
            let mut climb = lock(adapt);
            if climb.debt > 0 {
                climb.debt -= 1;
                permit.forget();
            } else {
                drop(permit);
            }
            if !self.measured {
                return;
            }
            let now = Instant::now();
            climb.completed(self.rows, now.saturating_duration_since(self.since), now)
        };
        if let Some((from, to)) = change {
            self.limit.apply(from, to);
        }
    }
}

impl FlushLimit {
    /// `fixed` slots, or (`None`) an adaptive number between 1 and `max`.
    pub(crate) fn new(
        fixed: Option<usize>,
        adaptive: bool,
        max: usize,
        observe: Box<dyn Fn(usize) + Send + Sync>,
    ) -> FlushLimit {
        let max = max.max(1);
        observe(fixed.unwrap_or(max));
        match fixed {
            Some(n) => FlushLimit {
                slots: Arc::new(Semaphore::new(n)),
                fixed: n,
                adapt: None,
                observe,
            },
            None => FlushLimit {
                slots: Arc::new(Semaphore::new(max)),
                fixed: max,
                adapt: adaptive.then(|| Mutex::new(Climb::new(max, Instant::now()))),
                observe,
            },
        }
    }

    /// The number of flushes allowed in flight now.
    pub(crate) fn current(&self) -> usize {
        match &self.adapt {
            Some(adapt) => lock(adapt).limit,
            None => self.fixed,
        }
    }

    /// A slot, waiting for one as long as it takes (`None` once the engine
    /// is gone).
    /// `measured`: the flush counts in the adaptive limit's windows.
    pub(crate) async fn acquire(self: &Arc<Self>, measured: bool) -> Option<Slot> {
        if let Some(slot) = self.try_acquire(measured) {
            return Some(slot);
        }
        let permit = self.slots.clone().acquire_owned().await.ok()?;
        Some(self.slot(permit, measured))
    }

    /// A slot if one is free right now. A miss counts as a flush held
    /// back.
    pub(crate) fn try_acquire(self: &Arc<Self>, measured: bool) -> Option<Slot> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => Some(self.slot(permit, measured)),
            Err(_) => {
                if measured {
                    self.held_back();
                }
                None
            }
        }
    }

    /// Whether every slot is free (tests check none leaked).
    #[cfg(test)]
    pub(crate) fn all_free(&self) -> bool {
        self.slots.available_permits() == self.current()
    }

    fn slot(self: &Arc<Self>, permit: OwnedSemaphorePermit, measured: bool) -> Slot {
        Slot {
            limit: self.clone(),
            permit: Some(permit),
            rows: 0,
            since: Instant::now(),
            measured,
        }
    }

    fn held_back(&self) {
        if let Some(adapt) = &self.adapt {
            lock(adapt).held_back = true;
        }
    }

    /// Moves the number of slots from `from` to `to`: more slots are added
    /// at once; fewer are retired as flushes give theirs back.
    fn apply(&self, from: usize, to: usize) {
        if to > from {
            let mut more = to - from;
            if let Some(adapt) = &self.adapt {
                let mut climb = lock(adapt);
                let repaid = climb.debt.min(more);
                climb.debt -= repaid;
                more -= repaid;
            }
            self.slots.add_permits(more);
        } else {
            let mut fewer = from - to;
            // Free slots are retired now, the rest as they come back.
            while fewer > 0 {
                match self.slots.try_acquire() {
                    Ok(permit) => {
                        permit.forget();
                        fewer -= 1;
                    }
                    Err(_) => break,
                }
            }
            if fewer > 0 {
                if let Some(adapt) = &self.adapt {
                    lock(adapt).debt += fewer;
                }
            }
        }
        (self.observe)(to);
        tracing::debug!(from, to, "flush limit");
    }
}

/// What the adaptive limit is doing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// At the kept limit; trials again after this many windows.
    Keep(u32),
    /// Trying `limit` against the kept one's rows per second (`base`);
    /// `down`: the trial is below the kept limit; `other`: the other
    /// direction is still to be tried.
    Trial {
        kept: usize,
        base: f64,
        down: bool,
        other: bool,
        /// The rows per second of the trial's first window, when it beat
        /// `base`: a second window must beat it too (one lucky window
        /// does not move the limit).
        first: Option<f64>,
    },
}

/// The adaptive limit's state: a hill climb on rows per second.
struct Climb {
    limit: usize,
    max: usize,
    /// Slots to retire as they come back (the limit went down while they
    /// were held).
    debt: usize,
    phase: Phase,
    /// Flushes to let finish before measuring (those that started under
    /// the limit before).
    settle: u32,
    window: Window,
    /// A flush found no free slot since the window began.
    held_back: bool,
}

struct Window {
    start: Instant,
    rows: u64,
    flushes: u32,
    /// The flushes' slot times added up.
    held: Duration,
}

impl Window {
    fn new(start: Instant) -> Window {
        Window {
            start,
            rows: 0,
            flushes: 0,
            held: Duration::ZERO,
        }
    }
}

/// The next limit below `n` (half of it), and above (twice it): steps
/// large enough that their effect stands out of one window's noise.
fn lower(n: usize) -> usize {
    (n / 2).max(1)
}

fn higher(n: usize, max: usize) -> usize {
    (n * 2).min(max)
}

impl Climb {
    fn new(max: usize, now: Instant) -> Climb {
        Climb {
            limit: max,
            max,
            debt: 0,
            phase: Phase::Keep(0),
            settle: 0,
            window: Window::new(now),
            held_back: false,
        }
    }

    /// A flush that carried `rows` rows ended at `now`. Returns the limit's
    /// change, if the window this ends decides one.
    fn completed(&mut self, rows: u64, held: Duration, now: Instant) -> Option<(usize, usize)> {
        if self.settle > 0 {
            self.settle -= 1;
            if self.settle == 0 {
                self.window = Window::new(now);
                self.held_back = false;
            }
            return None;
        }
        self.window.rows += rows;
        self.window.flushes += 1;
        self.window.held += held;
        let elapsed = now.saturating_duration_since(self.window.start);
        let flushes = self.window.flushes;
        let long = MIN_WINDOW.max(self.window.held / flushes * WINDOW_FLUSH_TIMES);
        let enough = (MIN_FLUSHES as usize).max(8 * self.limit);
        if elapsed < long || (flushes as usize) < enough {
            return None;
        }
        let rate = self.window.rows as f64 / elapsed.as_secs_f64();
        let held_back = std::mem::take(&mut self.held_back);
        // Statements that already carry many rows share their commit so
        // widely that halving the flushes saves next to nothing.
        let small = self.window.rows < LARGE_FLUSH * u64::from(flushes);
        self.window = Window::new(now);
        let to = self.decide(rate, held_back, small);
        (to != self.limit).then(|| {
            let from = std::mem::replace(&mut self.limit, to);
            // Let the flushes sent under the old limit end first.
            self.settle = from.max(to) as u32;
            (from, to)
        })
    }

    /// The limit for the next window, given the rows per second of the one
    /// that ended and whether it held any flush back.
    fn decide(&mut self, rate: f64, held_back: bool, small: bool) -> usize {
        let limit = self.limit;
        match self.phase {
            Phase::Keep(left) => {
                if !held_back {
                    // Nobody waited for a slot: the limit is not what
                    // bounds the rows per second; give the room back.
                    self.phase = Phase::Keep(left);
                    return higher(limit, self.max);
                }
                if left > 0 {
                    self.phase = Phase::Keep(left - 1);
                    return limit;
                }
                self.trial(limit, rate, small && limit > 1, limit < self.max)
            }
            Phase::Trial {
                kept,
                base,
                down,
                other,
                first,
            } => {
                if rate > base * (1.0 + BETTER) {
                    let Some(first) = first else {
                        self.phase = Phase::Trial {
                            kept,
                            base,
                            down,
                            other,
                            first: Some(rate),
                        };
                        return limit;
                    };
                    let rate = rate.min(first);
                    // Kept; go on the same way.
                    let further = if down {
                        small && limit > 1
                    } else {
                        limit < self.max
                    };
                    if further {
                        return self.trial(limit, rate, down, false);
                    }
                    self.phase = Phase::Keep(EXPLOIT_WINDOWS);
                    return limit;
                }
                if other {
                    return self.trial(kept, base, !down, false);
                }
                self.phase = Phase::Keep(EXPLOIT_WINDOWS);
                kept
            }
        }
    }

    /// Starts a trial next to `kept` (rows per second `base`): below it
    /// when `down` (then above it too when `up_too`), else above it.
    fn trial(&mut self, kept: usize, base: f64, down: bool, up_too: bool) -> usize {
        let (down, other) = match (down, up_too) {
            (true, other) => (true, other),
            (false, true) => (false, false),
            (false, false) => {
                self.phase = Phase::Keep(EXPLOIT_WINDOWS);
                return kept;
            }
        };
        let to = if down {
            lower(kept)
        } else {
            higher(kept, self.max)
        };
        if to == kept {
            self.phase = Phase::Keep(EXPLOIT_WINDOWS);
            return kept;
        }
        self.phase = Phase::Trial {
            kept,
            base,
            down,
            other,
            first: None,
        };
        to
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a climb for `flushes` flushes, one a millisecond, with a
    /// server whose rows per second at each limit `rate` gives, every
    /// window held back; returns the limit after each flush.
    fn drive(max: usize, rate: impl Fn(usize) -> f64, flushes: usize) -> Vec<usize> {
        let mut now = Instant::now();
        let mut climb = Climb::new(max, now);
        let mut seen = Vec::with_capacity(flushes);
        for _ in 0..flushes {
            now += Duration::from_millis(1);
            climb.held_back = true;
            let rows = (rate(climb.limit) / 1000.0) as u64;
            climb.completed(rows, Duration::from_millis(1), now);
            seen.push(climb.limit);
        }
        seen
    }

    #[test]
    fn a_lower_limit_retires_slots_as_they_come_back() {
        let limit = Arc::new(FlushLimit::new(None, true, 8, Box::new(|_| {})));
        let held: Vec<_> = (0..6).map(|_| limit.try_acquire(true).unwrap()).collect();
        lock(limit.adapt.as_ref().unwrap()).limit = 2;
        limit.apply(8, 2);
        // The two free slots are retired now, four of the six held later.
        assert!(limit.try_acquire(true).is_none());
        drop(held);
        assert_eq!(limit.slots.available_permits(), 2);
        assert!(limit.all_free());
        lock(limit.adapt.as_ref().unwrap()).limit = 5;
        limit.apply(2, 5);
        assert_eq!(limit.slots.available_permits(), 5);
    }

    #[test]
    fn a_fixed_limit_never_moves() {
        let limit = Arc::new(FlushLimit::new(Some(3), true, 8, Box::new(|_| {})));
        assert_eq!(limit.current(), 3);
        for _ in 0..10_000 {
            let mut slot = limit.try_acquire(true).unwrap();
            slot.carried(100);
        }
        assert_eq!(limit.current(), 3);
        assert!(limit.all_free());
    }

    #[test]
    fn ladder() {
        assert_eq!(lower(8), 4);
        assert_eq!(lower(3), 1);
        assert_eq!(lower(1), 1);
        assert_eq!(higher(1, 8), 2);
        assert_eq!(higher(5, 8), 8);
        assert_eq!(higher(8, 8), 8);
    }

    #[test]
    fn a_commit_bound_server_gets_few_large_flushes() {
        // Rows per second fall as more flushes compete.
        let seen = drive(8, |l| 100_000.0 / l as f64, 20_000);
        assert!(seen[5_000..].iter().all(|&l| l <= 2), "{seen:?}");
        assert_eq!(seen[19_999], 1);
    }

    #[test]
    fn a_parallel_server_keeps_every_slot() {
        let seen = drive(8, |l| 10_000.0 * l as f64, 20_000);
        let at_max = seen.iter().filter(|&&l| l == 8).count();
        assert!(at_max * 10 >= seen.len() * 9, "{at_max} of {}", seen.len());
    }

    #[test]
    fn a_flat_server_stays_at_the_pool_size() {
        let seen = drive(8, |_| 50_000.0, 20_000);
        let at_max = seen.iter().filter(|&&l| l == 8).count();
        assert!(at_max * 10 >= seen.len() * 9, "{at_max} of {}", seen.len());
    }

    #[test]
    fn large_flushes_are_not_halved() {
        // Fewer flushes would be faster, but each already carries 125 rows.
        let seen = drive(8, |l| 1_000_000.0 / l as f64, 5_000);
        assert!(seen.iter().all(|&l| l == 8), "{seen:?}");
    }

    #[test]
    fn the_climb_finds_an_inner_peak() {
        // Best at 2 (of 8).
        let seen = drive(8, |l| 60_000.0 - 6_000.0 * (l as f64 - 2.0).abs(), 20_000);
        let at_peak = seen[5_000..].iter().filter(|&&l| l == 2).count();
        assert!(at_peak * 10 >= 15_000 * 8, "{at_peak} of 15000");
    }

    #[test]
    fn windows_that_hold_nobody_back_restore_the_pool_size() {
        let mut now = Instant::now();
        let mut climb = Climb::new(8, now);
        climb.limit = 2;
        for _ in 0..1000 {
            now += Duration::from_millis(1);
            if let Some((_, to)) = climb.completed(10, Duration::from_millis(1), now) {
                assert!(to > 2);
            }
        }
        assert_eq!(climb.limit, 8);
    }
}
