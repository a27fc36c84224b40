//! One queue per batchable statement shape: its rows, how many flushers
//! it needs, the rule for how many rows a flush takes from it and in which
//! statements they go.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use super::work::Work;
use crate::backend::batch::Backend;
use crate::classify::Form;
use crate::error::Error;
use crate::stats::FlushReason;
use crate::sync::lock;

/// The reply channel of one queued row.
pub(crate) type Reply<B> = oneshot::Sender<Result<<B as Backend>::Output, Error>>;

/// Who decides the fate of a row with a deadline: its caller, whose
/// deadline passed first ([`expire`](Claim::expire): the row is never
/// sent, and the caller hears a wait timeout at once), or the flusher
/// about to send it ([`send`](Claim::send): the caller waits for the
/// statement's answer). Exactly one of the two wins, so a caller told "not
/// sent" is never wrong, whatever kept its row from going out (no
/// connection, a flush balancing against the statements on the wire, an
/// earlier statement of its own flush).
#[derive(Debug, Default)]
pub(crate) struct Claim(AtomicU8);

impl Claim {
    const WAITING: u8 = 0;
    const SENT: u8 = 1;
    const EXPIRED: u8 = 2;

    /// The row's deadline passed: `true` if it will never be sent (now or
    /// already so decided), `false` if a flusher sent it first.
    pub(crate) fn expire(&self) -> bool {
        match self.0.compare_exchange(
            Self::WAITING,
            Self::EXPIRED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(state) => state == Self::EXPIRED,
        }
    }

    /// The row is about to be sent: `false` if its deadline won first.
    pub(crate) fn send(&self) -> bool {
        match self.0.compare_exchange(
            Self::WAITING,
            Self::SENT,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(state) => state == Self::SENT,
        }
    }

    /// Whether the row's deadline won.
    pub(crate) fn is_expired(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::EXPIRED
    }
}

/// Whether a queued row with `claim` and `deadline` has timed out by `now`.
fn timed_out(claim: Option<&Claim>, deadline: Option<Instant>, now: Instant) -> bool {
    claim.is_some_and(Claim::is_expired) || deadline.is_some_and(|d| d <= now)
}

/// A row taken out of the queue because its deadline passed (see
/// `Engine::expired`).
pub(crate) type Expired<B> = (Reply<B>, Option<Arc<Claim>>);

/// A caller's row waiting in a queue.
pub(crate) struct Pending<B: Backend> {
    pub(crate) row: B::Row,
    pub(crate) bytes: usize,
    pub(crate) reply: Reply<B>,
    /// On the runtime's clock, the one `max_delay` timers run on.
    pub(crate) queued_at: Instant,
    /// When the row stops waiting for a connection and fails unsent
    /// (`wait_timeout` from its call's start).
    pub(crate) deadline: Option<Instant>,
    /// Set with `deadline`: whether the row was sent or timed out.
    pub(crate) claim: Option<Arc<Claim>>,
    /// The caller's span, for the flush that carries the row to link to
    /// (`follows_from`); `None` when no subscriber records flush spans.
    pub(crate) caller: Option<tracing::Span>,
    /// The call's guard, until a flusher takes the row (see
    /// `Engine::submit`).
    pub(crate) _work: Work,
}

/// Most caller spans one flush links to: a subscriber keeps every link of a
/// span, so a flush of thousands of rows would cost as much again in links;
/// the first callers of a flush are enough to find it from them.
pub(crate) const MAX_LINKS: usize = 64;

/// What the queue's lock guards.
struct State<B: Backend> {
    rows: VecDeque<Pending<B>>,
    bytes: usize,
    /// Flusher tasks spawned for this queue that have not taken rows yet.
    waiting: usize,
    /// A flusher holds a connection until the queue is balanced (see
    /// [`ShapeQueue::balanced`]): [`push`](ShapeQueue::push) wakes it once
    /// it is.
    balancing: bool,
}

/// The queue of one statement shape: its rows, the flushers on their way
/// for them, and the statements of the shape on the wire. Every count lives
/// behind its methods.
pub(crate) struct ShapeQueue<B: Backend> {
    /// The SQL text the callers gave.
    sql: Box<str>,
    /// The statement as the classifier read it.
    form: Form,
    /// What the backend prepared for it (read by the pool to encode a row).
    pub(crate) shape: B::Shape,
    /// Most rows one statement of this shape may carry (rows, parameter limit).
    cap_rows: usize,
    /// Most parameter bytes one statement may carry.
    cap_bytes: usize,
    state: Mutex<State<B>>,
    /// Wakes timed flushers early (queue full).
    wake: Notify,
    /// Statements of this shape on the wire right now (flushes, idle fast
    /// path, explicit batches).
    flushing: AtomicUsize,
    /// Rows of those statements.
    flushing_rows: AtomicUsize,
    /// Wakes flushers waiting to balance their statement (a flush of this
    /// shape ended, or the queue came into balance).
    done: Notify,
}

/// A group of rows taken for one flush.
pub(crate) struct Taken<B: Backend> {
    pub(crate) rows: Vec<B::Row>,
    /// Rows of each statement, in order (see [`ShapeQueue::take`]).
    pub(crate) chunks: Vec<usize>,
    pub(crate) replies: Vec<Reply<B>>,
    /// Each row's [`Claim`], if it has a deadline: a row taken but not yet
    /// sent when its deadline passes (it waits behind another statement of
    /// its flush) fails unsent all the same.
    pub(crate) claims: Vec<Option<Arc<Claim>>>,
    /// The spans of the first [`MAX_LINKS`] callers of the taken rows that
    /// have one.
    pub(crate) callers: Vec<tracing::Span>,
    /// When each taken row was queued (for the queue-wait counters).
    pub(crate) waited: Vec<Instant>,
    /// Rows whose deadline had passed when the flush took them: they fail
    /// unsent.
    pub(crate) expired: Vec<Expired<B>>,
    /// Rows dropped unsent: their callers had gone.
    pub(crate) cancelled: usize,
    /// Whether the last statement taken is full (the flush's reason).
    pub(crate) full: bool,
}

impl<B: Backend> ShapeQueue<B> {
    pub(crate) fn new(
        sql: &str,
        form: Form,
        shape: B::Shape,
        cap_rows: usize,
        cap_bytes: usize,
    ) -> Self {
        ShapeQueue {
            sql: sql.into(),
            form,
            shape,
            cap_rows: cap_rows.max(1),
            cap_bytes: cap_bytes.max(1),
            state: Mutex::new(State {
                rows: VecDeque::new(),
                bytes: 0,
                waiting: 0,
                balancing: false,
            }),
            wake: Notify::new(),
            flushing: AtomicUsize::new(0),
            flushing_rows: AtomicUsize::new(0),
            done: Notify::new(),
        }
    }

    /// The SQL text the callers gave.
    pub(crate) fn sql(&self) -> &str {
        &self.sql
    }

    /// The statement as the classifier read it.
    pub(crate) fn form(&self) -> &Form {
        &self.form
    }

    /// Most rows one statement of this shape may carry.
    pub(crate) fn cap_rows(&self) -> usize {
        self.cap_rows
    }

    /// Most parameter bytes one statement of this shape may carry.
    pub(crate) fn cap_bytes(&self) -> usize {
        self.cap_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<B>> {
        // A panic while holding this lock cannot leave the queue inconsistent
        // (every critical section is a few pushes/pops), so poisoning is ignored.
        lock(&self.state)
    }

    /// Flushers the queued rows need: one per statement's worth.
    fn flushers_needed(&self, st: &State<B>) -> usize {
        st.rows.len().div_ceil(self.cap_rows)
    }

    /// The one rule for starting flushers: counts in (`waiting`) the
    /// flushers to spawn so that [`flushers_needed`](Self::flushers_needed)
    /// are on their way, and returns how many.
    fn more_flushers(&self, st: &mut State<B>) -> usize {
        let spawn = self.flushers_needed(st).saturating_sub(st.waiting);
        st.waiting += spawn;
        spawn
    }

    /// Appends a caller's row. Returns how many flushers the caller must
    /// spawn (already counted in, see [`more_flushers`](Self::more_flushers))
    /// and whether the queue now holds a full statement's worth of rows. A
    /// flusher waiting for the queue to come into balance (see
    /// [`balanced_or_ask`](Self::balanced_or_ask)) is woken once it has.
    pub(crate) fn push(&self, p: Pending<B>) -> (usize, bool) {
        let mut st = self.lock();
        st.bytes += p.bytes;
        st.rows.push_back(p);
        let spawn = self.more_flushers(&mut st);
        if st.balancing && self.balanced(&st) {
            st.balancing = false;
            self.done.notify_waiters();
        }
        (spawn, self.is_full(&st))
    }

    /// A flusher (one of the flushers counted in) takes the rows of its
    /// `statements` statements (see [`take`](Self::take)) and is counted
    /// out. Timed batching (`delay` set): takes nothing (`None`, the
    /// flusher stays counted in) when the queue is no longer due — while
    /// the flusher waited for a connection, another one took the rows that
    /// made it due (a full statement, the oldest row's deadline), and the
    /// rest waits for its own deadline instead of going early; `closed`
    /// says the pool is closing, which makes it due. Also returns how many
    /// flushers to spawn for the rows left over (more than the taken
    /// statements' worth, or rows that came in meanwhile), counted in.
    pub(crate) fn take_due(
        &self,
        delay: Option<Duration>,
        closed: impl FnOnce() -> bool,
        statements: usize,
        any_size: impl Fn(usize) -> bool,
    ) -> Option<(Taken<B>, usize)> {
        let mut st = self.lock();
        if let Some(delay) = delay {
            let due = closed()
                || self.is_full(&st)
                || st
                    .rows
                    .front()
                    .is_none_or(|p| p.queued_at + delay <= Instant::now());
            if !due {
                return None;
            }
        }
        st.waiting -= 1;
        let taken = self.take(&mut st, statements, Instant::now(), any_size);
        let spawn = self.more_flushers(&mut st);
        Some((taken, spawn))
    }

    /// Timed batching: when the oldest queued row is `delay` old, or why
    /// the queue is to be flushed now: [`FlushReason::Full`] (a full
    /// statement's worth is queued) or [`FlushReason::Natural`] (nothing
    /// is queued: the flusher goes on to take what a connection finds).
    pub(crate) fn due_at(&self, delay: Duration) -> Result<Instant, FlushReason> {
        let st = self.lock();
        if self.is_full(&st) {
            return Err(FlushReason::Full);
        }
        match st.rows.front() {
            Some(p) => Ok(p.queued_at + delay),
            None => Err(FlushReason::Natural),
        }
    }

    /// Wakes the timed flushers waiting in [`woken`](Self::woken) (the
    /// queue holds a full statement).
    pub(crate) fn wake(&self) {
        self.wake.notify_waiters();
    }

    /// Resolves at the next [`wake`](Self::wake).
    pub(crate) fn woken(&self) -> Notified<'_> {
        self.wake.notified()
    }

    /// Resolves when a flush of this shape ends, or the queue comes into
    /// balance after [`balanced_or_ask`](Self::balanced_or_ask) said no.
    pub(crate) fn flush_ended(&self) -> Notified<'_> {
        self.done.notified()
    }

    /// Counts a flush of `rows` rows of this shape in or out (see
    /// [`flushing`](Self::flushing)); a flush counted out wakes the
    /// flushers waiting in [`flush_ended`](Self::flush_ended).
    pub(crate) fn flushing_delta(&self, up: bool, rows: usize) {
        if up {
            self.flushing.fetch_add(1, Ordering::Relaxed);
            self.flushing_rows.fetch_add(rows, Ordering::Relaxed);
        } else {
            self.flushing_rows.fetch_sub(rows, Ordering::Relaxed);
            self.flushing.fetch_sub(1, Ordering::Relaxed);
            self.done.notify_waiters();
        }
    }

    /// Flushes of this shape running right now.
    pub(crate) fn flushing(&self) -> usize {
        self.flushing.load(Ordering::Relaxed)
    }

    /// Whether a flush taking the queue now would be in balance with the
    /// flushes of this shape on the wire: nothing is on the wire, or the
    /// queue holds at least half the rows of an average statement on the
    /// wire, or a full statement. Under load this keeps a connection that
    /// came free from carrying a handful of rows while the callers of the
    /// statements on the wire are about to queue theirs.
    fn balanced(&self, st: &State<B>) -> bool {
        let flushing = self.flushing();
        let on_wire = self.flushing_rows.load(Ordering::Relaxed);
        flushing == 0
            || st.rows.is_empty()
            || self.is_full(st)
            || st.rows.len() * 2 * flushing >= on_wire
    }

    /// Whether the queue is [balanced](Self::balanced) now; if not,
    /// [`push`](Self::push) wakes the waiters of
    /// [`flush_ended`](Self::flush_ended) once it is.
    pub(crate) fn balanced_or_ask(&self) -> bool {
        let mut st = self.lock();
        if self.balanced(&st) {
            return true;
        }
        st.balancing = true;
        false
    }

    /// Nothing queued and no flusher on its way.
    pub(crate) fn is_idle(&self) -> bool {
        let st = self.lock();
        st.rows.is_empty() && st.waiting == 0
    }

    /// [`is_idle`](Self::is_idle), and no statement of this shape on the
    /// wire either: the shape is not under load.
    pub(crate) fn is_unloaded(&self) -> bool {
        self.flushing() == 0 && self.is_idle()
    }

    /// The earliest deadline of a queued row.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.lock().rows.iter().filter_map(|p| p.deadline).min()
    }

    /// Takes the rows whose deadline has passed out of the queue. Also
    /// decides whether the calling flusher (one of `waiting`) is still
    /// needed for what is left; if not, it is counted out (`true`).
    pub(crate) fn expire(&self, now: Instant) -> (Vec<Expired<B>>, bool) {
        let mut st = self.lock();
        let mut expired = Vec::new();
        let is_out = |p: &Pending<B>| timed_out(p.claim.as_deref(), p.deadline, now);
        if st.rows.iter().any(is_out) {
            let rows = std::mem::take(&mut st.rows);
            for p in rows {
                if is_out(&p) {
                    st.bytes -= p.bytes;
                    expired.push((p.reply, p.claim));
                } else {
                    st.rows.push_back(p);
                }
            }
        }
        let surplus = self.flushers_needed(&st) < st.waiting;
        if surplus {
            st.waiting -= 1;
        }
        (expired, surplus)
    }

    /// Whether the queue holds a full statement's worth of rows.
    fn is_full(&self, st: &State<B>) -> bool {
        st.rows.len() >= self.cap_rows || st.bytes >= self.cap_bytes
    }

    /// Something of each queued row, in queue order.
    #[cfg(test)]
    pub(crate) fn queued<T>(&self, f: impl FnMut(&Pending<B>) -> T) -> Vec<T> {
        self.lock().rows.iter().map(f).collect()
    }

    /// The statements that send `len` rows of `rows` from `start`, in
    /// order: first cut where the backend says two rows may not share a
    /// statement ([`Backend::runs`]), then one bulk statement where
    /// `backend` takes them so (no text per row count to keep to), else
    /// allowed statement sizes ([`decompose`]).
    pub(crate) fn statements(
        &self,
        backend: &B,
        rows: &[B::Row],
        start: usize,
        len: usize,
    ) -> Vec<(usize, usize)> {
        match backend.runs(&self.shape, &rows[start..start + len]) {
            None => self.sized(backend, rows, start, len),
            Some(runs) => {
                let mut at = start;
                let mut out = Vec::new();
                for run in runs {
                    out.extend(self.sized(backend, rows, at, run));
                    at += run;
                }
                debug_assert_eq!(at, start + len);
                out
            }
        }
    }

    /// [`statements`](Self::statements) for rows that need no cut between
    /// them.
    fn sized(&self, backend: &B, rows: &[B::Row], start: usize, len: usize) -> Vec<(usize, usize)> {
        if len == 0 {
            return Vec::new();
        }
        let one = backend.one_text(&self.shape) && len <= self.cap_rows;
        if one
            || (backend.any_size(&self.shape, len)
                && backend.uses_bulk(&self.shape, &rows[start..start + len]))
        {
            return vec![(start, len)];
        }
        let mut at = start;
        decompose(len, self.cap_rows)
            .into_iter()
            .map(|size| {
                let piece = (at, size);
                at += size;
                piece
            })
            .collect()
    }

    /// Takes the rows of the next `statements` statements (1, or 2 when the
    /// backend pipelines): rows whose caller is gone are dropped unsent,
    /// rows whose deadline has passed by `now` are taken out to fail unsent
    /// ([`Taken::expired`]), whatever kept them queued until now; of
    /// the live rows at most `cap_rows` / `cap_bytes` are taken per
    /// statement, rounded down to an allowed statement size so one flush is
    /// one statement each (the rest stays queued, in order, for the next
    /// flush) — unless `any_size` says a statement of that many rows needs
    /// no text of its own (the backend's bulk path), which takes them all.
    /// A second statement is taken only from what is left once the first
    /// is full.
    fn take(
        &self,
        st: &mut State<B>,
        statements: usize,
        now: Instant,
        any_size: impl Fn(usize) -> bool,
    ) -> Taken<B> {
        let mut taken = Taken {
            rows: Vec::new(),
            replies: Vec::new(),
            claims: Vec::new(),
            callers: Vec::new(),
            waited: Vec::new(),
            expired: Vec::new(),
            chunks: Vec::with_capacity(statements),
            cancelled: 0,
            full: false,
        };
        for _ in 0..statements.max(1) {
            let full = self.take_one(st, &mut taken, now, &any_size);
            taken.full = full;
            if !full || st.rows.is_empty() {
                break;
            }
        }
        taken
    }

    /// One statement's rows for [`take`](Self::take); whether it is full.
    fn take_one(
        &self,
        st: &mut State<B>,
        taken: &mut Taken<B>,
        now: Instant,
        any_size: &impl Fn(usize) -> bool,
    ) -> bool {
        let mut full = false;
        let mut bytes = 0usize;
        let mut kept: Vec<Pending<B>> = Vec::new();
        while let Some(p) = st.rows.pop_front() {
            // Timed out first: a caller that heard its timeout has gone too.
            // Whether it has gone is read before its claim: a caller expires
            // its claim before it goes, so a caller seen gone whose claim is
            // not expired went before its deadline.
            let gone = p.reply.is_closed();
            if timed_out(p.claim.as_deref(), p.deadline, now) {
                st.bytes -= p.bytes;
                taken.expired.push((p.reply, p.claim));
                continue;
            }
            if gone {
                st.bytes -= p.bytes;
                taken.cancelled += 1;
                continue;
            }
            if kept.len() == self.cap_rows || (!kept.is_empty() && bytes + p.bytes > self.cap_bytes)
            {
                full = true;
                st.rows.push_front(p);
                break;
            }
            bytes += p.bytes;
            kept.push(p);
        }
        let size = if any_size(kept.len()) {
            kept.len()
        } else {
            statement_size(kept.len(), self.cap_rows)
        };
        // Return the excess to the front of the queue, keeping order.
        for p in kept.drain(size..).rev() {
            st.rows.push_front(p);
        }
        if size > 0 {
            taken.chunks.push(size);
        }
        taken.rows.reserve(size);
        taken.replies.reserve(size);
        taken.claims.reserve(size);
        for p in kept {
            st.bytes -= p.bytes;
            taken.waited.push(p.queued_at);
            taken.rows.push(p.row);
            taken.replies.push(p.reply);
            taken.claims.push(p.claim);
            if taken.callers.len() < MAX_LINKS {
                taken.callers.extend(p.caller);
            }
        }
        full
    }
}

/// The largest allowed statement size not above `n`.
///
/// Allowed sizes are `cap` and every `2^k` and `3 * 2^k` below it: about 20
/// distinct statement texts per shape for `cap = 1000` (pgjdbc uses powers of
/// two only), so prepared statements are reused, while a flush never needs
/// more than one statement and leaves at most a third of its rows for the
/// next one.
pub(crate) fn statement_size(n: usize, cap: usize) -> usize {
    if n >= cap {
        return cap;
    }
    if n <= 2 {
        return n;
    }
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros()); // highest power of two <= n
    if p / 2 * 3 <= n { p / 2 * 3 } else { p }
}

/// Splits `n` rows into allowed statement sizes, largest first.
pub(crate) fn decompose(mut n: usize, cap: usize) -> Vec<usize> {
    let mut out = Vec::new();
    while n > 0 {
        let s = statement_size(n, cap);
        out.push(s);
        n -= s;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bounded_and_cover() {
        let cap = 1000;
        let mut distinct = std::collections::BTreeSet::new();
        for n in 1..=cap {
            let s = statement_size(n, cap);
            assert!(s >= 1 && s <= n, "n={n} s={s}");
            assert!(
                s * 3 >= n * 2,
                "a flush keeps at least 2/3 of its rows: n={n} s={s}"
            );
            distinct.insert(s);
            assert_eq!(decompose(n, cap).iter().sum::<usize>(), n);
        }
        assert!(distinct.len() <= 21, "{distinct:?}");
        assert_eq!(statement_size(5000, cap), cap);
        assert_eq!(statement_size(7, 4), 4);
        assert_eq!(statement_size(1, 1), 1);
    }
}
