//! Flusher tasks: decide when to send, run one multi-row statement, isolate
//! failing rows, and fan the per-row outcomes back out to the callers.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use tokio::sync::OwnedSemaphorePermit;

use super::isolate::{Isolation, settle};
use super::queue::{Claim, ShapeQueue, Taken, decompose};
use super::{Backend, ChunkError, Connections, Detached, Engine, Work};
use crate::backend::{Conn, Lease, exchange};
use crate::error::Error;
use crate::stats::FlushReason;

/// One flusher task. It was counted in the queue's `waiting` when spawned;
/// it waits (timed batching only), takes a connection, then takes the rows
/// of one statement and runs them (timed batching: waits again instead if
/// the queue is no longer due, see [`take_if_due`]). Rows still queued after
/// that are claimed by further flushers (spawned by `enqueue`, or here).
/// While it waits for a connection, rows whose `wait_timeout` passes fail
/// unsent ([`acquire`]).
pub(super) async fn flusher<B: Backend>(
    engine: Arc<Engine<B>>,
    q: Arc<ShapeQueue<B>>,
    _work: Work,
) {
    let mut reason;
    let (_slot, conn, mut taken, waited) = loop {
        reason = FlushReason::Natural;
        if let Some(delay) = engine.config.max_delay {
            reason = wait_for_deadline(&engine, &q, delay).await;
        }
        let Some((slot, conn)) = acquire(&engine, &q).await else {
            // The rows this flusher was for have all timed out.
            return;
        };
        if q.flushing() > 0 && engine.config.max_delay.is_none() {
            // Under load: callers just answered by another flush of this
            // shape are runnable now and about to queue their next rows;
            // let them run first, so this statement takes them too, and do
            // not send a handful of rows while the statements on the wire
            // carry many.
            tokio::task::yield_now().await;
            balance(&engine, &q).await;
        }
        if let Some((taken, waited)) = take_if_due(&engine, &q) {
            break (slot, conn, taken, waited);
        }
    };
    engine.release(taken.rows.len() + taken.cancelled);
    engine.counters.cancelled(taken.cancelled);
    engine.expired(std::mem::take(&mut taken.expired));
    if taken.rows.is_empty() {
        return;
    }
    let replies = Unanswered {
        engine: &engine,
        replies: taken.replies,
    };
    let now = Instant::now();
    for at in waited {
        engine.counters.waited(now.saturating_duration_since(at));
    }
    if taken.full {
        reason = FlushReason::Full;
    } else if engine.is_closed() {
        reason = FlushReason::Close;
    }
    match conn {
        Ok(mut conn) => {
            let span = tracing::debug_span!(
                "batchpool.flush",
                table = q.insert.table.as_str(),
                rows = taken.rows.len(),
                reason = ?reason,
                kind = tracing::field::Empty,
                outcome = tracing::field::Empty,
                failed = tracing::field::Empty,
            );
            for caller in &taken.callers {
                span.follows_from(caller);
            }
            let started = Instant::now();
            engine.counters.flushed(reason, taken.rows.len());
            let in_flight = InFlight::new(&engine, &q, taken.rows.len());
            let results = execute_rows(
                &engine,
                &q,
                &mut conn,
                Rows {
                    rows: &mut taken.rows,
                    chunks: &taken.chunks,
                    claims: &taken.claims,
                    span: &span,
                },
                Pipeline::Independent,
            )
            .instrument(span.clone())
            .await;
            // The connection goes back before the callers hear, so a caller
            // that issues its next statement finds it free.
            drop(conn);
            drop(in_flight);
            replies.answer(results);
            tracing::debug!(elapsed_us = started.elapsed().as_micros() as u64, "flushed");
        }
        Err(e) => {
            // Nothing was sent: every taken row fails with the pool's error.
            engine.counters.unsent(taken.rows.len());
            let results = taken.rows.iter().map(|_| Err(e.clone())).collect();
            replies.answer(results);
        }
    }
}

/// A flush slot (`max_in_flight`) and a connection for a flusher. While it
/// waits, every row of the queue whose deadline passes fails unsent with a
/// wait timeout: the wait is bounded for every queued row, not just for the
/// rows one flusher would take. `None` when the flusher is no longer needed
/// (the rows it was spawned for timed out).
async fn acquire<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
) -> Option<(
    Option<OwnedSemaphorePermit>,
    Result<Lease<B::Connections>, Error>,
)> {
    let get = async {
        let slot = engine.flush_slot().await;
        // Waits in deadpool's queue as long as it takes: the rows' own
        // deadlines are enforced below, without losing this place.
        let conn = engine.backend.connections().checkout(None).await;
        (slot, conn)
    };
    tokio::pin!(get);
    loop {
        let expiry = q.next_expiry();
        tokio::select! {
            biased;
            got = &mut get => return Some(got),
            () = sleep_until(expiry) => {
                let (expired, surplus) = q.expire(Instant::now());
                engine.expired(expired);
                if surplus {
                    return None;
                }
            }
        }
    }
}

/// Natural batching under load: holds a flusher that has its connection
/// until taking the queue is [`balanced`](ShapeQueue::balanced) with the
/// flushes of the shape on the wire — at the latest until one of them ends
/// (its callers then queue their next rows), [`BALANCE_MARGIN`] before a
/// queued row's deadline (so a row behind a free connection is sent, not
/// timed out), or the pool closes. No timer of its own: the wait is at most
/// what is left of a statement on the wire.
async fn balance<B: Backend>(engine: &Engine<B>, q: &ShapeQueue<B>) {
    loop {
        let done = q.done.notified();
        let closing = engine.closing.notified();
        tokio::pin!(done, closing);
        done.as_mut().enable();
        closing.as_mut().enable();
        if engine.is_closed() {
            return;
        }
        {
            let mut st = q.lock();
            if q.balanced(&st) {
                return;
            }
            // `enqueue` wakes us once the queue is balanced.
            st.balancing = true;
        }
        let expiry = q.next_expiry().map(|at| at - BALANCE_MARGIN);
        tokio::select! {
            () = &mut done => {}
            () = &mut closing => return,
            () = sleep_until(expiry) => return,
        }
    }
}

/// How long before a queued row's deadline a flusher holding a connection
/// stops balancing and sends it: the flusher must take the row before the
/// caller's own timer fails it (see [`Claim`]), on a runtime that may be
/// late to wake it.
const BALANCE_MARGIN: std::time::Duration = std::time::Duration::from_millis(20);

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Takes the rows of a flusher's statement and spawns flushers for the rows
/// left over. Timed batching: takes nothing (`None`) when the queue is no
/// longer due; while this flusher waited for a connection, another one took
/// the rows that made it due (a full statement, the oldest row's deadline),
/// and the rest waits for its own deadline instead of going early.
fn take_if_due<B: Backend>(
    engine: &Arc<Engine<B>>,
    q: &Arc<ShapeQueue<B>>,
) -> Option<(Taken<B>, Vec<Instant>)> {
    let mut st = q.lock();
    if let Some(delay) = engine.config.max_delay {
        let due = engine.is_closed()
            || q.is_full(&st)
            || st
                .rows
                .front()
                .is_none_or(|p| p.queued_at + delay <= Instant::now());
        if !due {
            return None;
        }
    }
    st.waiting -= 1;
    let statements = if engine.pipelines(&q.shape) { 2 } else { 1 };
    let (taken, waited) = q.take(&mut st, statements, Instant::now(), |n| {
        engine.backend.any_size(&q.shape, n)
    });
    // Rows left over (more than one statement's worth, or rows that came in
    // meanwhile) need flushers of their own.
    let needed = st.rows.len().div_ceil(q.cap_rows);
    let spawn = needed.saturating_sub(st.waiting);
    st.waiting += spawn;
    drop(st);
    for _ in 0..spawn {
        engine.spawn_flusher(q.clone());
    }
    Some((taken, waited))
}

/// The reply channels of rows a flusher took. Answered with
/// [`answer`](Unanswered::answer); dropped unanswered (a panic in a
/// backend, the runtime shutting down mid-flush), every row gets an
/// outcome-unknown error and is counted failed, so the counters stay exact.
struct Unanswered<'a, B: Backend> {
    engine: &'a Engine<B>,
    replies: Vec<super::queue::Reply<B>>,
}

impl<B: Backend> Unanswered<'_, B> {
    /// Sends every caller its own result. A caller that has gone after its
    /// row was sent simply does not hear; the row ran anyway.
    fn answer(mut self, results: Vec<Result<B::Output, Error>>) {
        let mut failed = 0;
        for (reply, result) in std::mem::take(&mut self.replies).into_iter().zip(results) {
            failed += usize::from(result.is_err());
            let _ = reply.send(result);
        }
        self.engine.counters.failed(failed);
    }
}

impl<B: Backend> Drop for Unanswered<'_, B> {
    fn drop(&mut self) {
        let replies = std::mem::take(&mut self.replies);
        self.engine.counters.failed(replies.len());
        for reply in replies {
            let _ = reply.send(Err(Error::lost()));
        }
    }
}

/// The idle fast path of natural batching: nothing is queued for this shape,
/// no flusher is on its way and a connection is free, so the caller's own
/// row is sent from the caller's task at once — one statement, no task
/// hand-off. Returns the row back when no connection or flush slot is free
/// right now (it then queues as usual).
///
/// Cancellation: dropped before a connection was taken, nothing is sent;
/// after, the statement is finished in a spawned task ([`Detached`]) and
/// its connection goes back to the pool only once answered.
pub(super) async fn inline<B: Backend>(
    engine: &Arc<Engine<B>>,
    q: &Arc<ShapeQueue<B>>,
    work: &Work,
    row: B::Row,
    deadline: Option<Instant>,
) -> Result<Result<B::Output, Error>, B::Row> {
    let slot = match engine.try_flush_slot() {
        Ok(slot) => slot,
        Err(()) => return Err(row),
    };
    // A free slot may mean opening a connection, which has its own limit
    // (`create_timeout`): the row's deadline bounds it.
    let checkout = engine.backend.connections().try_checkout();
    let conn = match deadline {
        None => checkout.await,
        Some(d) => match tokio::time::timeout_at(d, checkout).await {
            Ok(conn) => conn,
            Err(_) => {
                engine.counters.unsent(1);
                engine.counters.failed(1);
                return Ok(Err(Error::wait_timeout()));
            }
        },
    };
    let Some(mut conn) = conn else {
        return Err(row);
    };
    let (engine, q) = (engine.clone(), q.clone());
    let caller = caller_span();
    let flush = async move {
        engine.counters.flushed(FlushReason::Natural, 1);
        let in_flight = InFlight::new(&engine, &q, 1);
        let span = tracing::debug_span!(
            "batchpool.flush",
            table = q.insert.table.as_str(),
            rows = 1,
            reason = "idle",
            kind = tracing::field::Empty,
            outcome = tracing::field::Empty,
            failed = tracing::field::Empty,
        );
        if let Some(caller) = &caller {
            span.follows_from(caller);
        }
        let mut row = row;
        // Counted failed if no outcome comes (a panic in a backend).
        let mut no_outcome = NoOutcome(Some(&engine));
        let mut out = execute_rows(
            &engine,
            &q,
            &mut conn,
            Rows {
                rows: std::slice::from_mut(&mut row),
                chunks: &[1],
                claims: &[],
                span: &span,
            },
            Pipeline::Off,
        )
        .instrument(span.clone())
        .await;
        drop(conn);
        drop(slot);
        drop(in_flight);
        no_outcome.0 = None;
        let result = out.pop().unwrap_or_else(|| Err(Error::lost()));
        engine.counters.failed(usize::from(result.is_err()));
        result
    };
    Ok(Detached::new(work.more(), flush).await)
}

/// The idle fast path's [`Unanswered`]: its one row counts as failed if the
/// flush ends without an outcome (a panic in a backend).
struct NoOutcome<'a, B: Backend>(Option<&'a Engine<B>>);

impl<B: Backend> Drop for NoOutcome<'_, B> {
    fn drop(&mut self) {
        if let Some(engine) = self.0 {
            engine.counters.failed(1);
        }
    }
}

/// Counts a flush of `rows` rows in `Stats::in_flight` and in its queue's
/// [`flushing`](ShapeQueue::flushing) for as long as it lives.
struct InFlight<'a, B: Backend>(&'a Engine<B>, &'a ShapeQueue<B>, usize);

impl<'a, B: Backend> InFlight<'a, B> {
    fn new(engine: &'a Engine<B>, q: &'a ShapeQueue<B>, rows: usize) -> Self {
        engine.counters.in_flight_delta(true);
        q.flushing_delta(true, rows);
        InFlight(engine, q, rows)
    }
}

impl<B: Backend> Drop for InFlight<'_, B> {
    fn drop(&mut self) {
        self.0.counters.in_flight_delta(false);
        self.1.flushing_delta(false, self.2);
    }
}

/// Timed batching: waits until the oldest queued row is `delay` old, the
/// queue holds a full statement, or the pool closes.
async fn wait_for_deadline<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    delay: std::time::Duration,
) -> FlushReason {
    loop {
        let woken = q.wake.notified();
        let closing = engine.closing.notified();
        tokio::pin!(woken, closing);
        woken.as_mut().enable();
        closing.as_mut().enable();
        let deadline = {
            let st = q.lock();
            if engine.is_closed() {
                return FlushReason::Close;
            }
            if q.is_full(&st) {
                return FlushReason::Full;
            }
            match st.rows.front() {
                Some(p) => p.queued_at + delay,
                None => return FlushReason::Natural,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return FlushReason::Timer,
            _ = &mut woken => {}
            _ = &mut closing => {}
        }
    }
}

/// Whether [`execute_rows`] may keep two statements on the wire at once
/// (where the backend [pipelines](Backend::pipelines)).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pipeline {
    /// One statement at a time.
    Off,
    /// Rows of different callers, in no order: each statement of a pair is
    /// its own autocommit statement.
    Independent,
    /// One caller's rows, in order (`execute_many`): a pair runs in one
    /// transaction, so a failed statement's rows, re-run, still take effect
    /// before the rows after them.
    InOrder,
}

/// The rows of one [`execute_rows`] call.
pub(super) struct Rows<'a, R> {
    /// The rows, in the order their results are returned. Isolating a
    /// failing row may reorder them (see [`super::isolate`]).
    pub(super) rows: &'a mut [R],
    /// The lengths of the rows' consecutive groups, each within the
    /// statement limits.
    pub(super) chunks: &'a [usize],
    /// Each row's [`Claim`] (queued rows with a deadline), or empty (rows
    /// that are sent whenever their turn comes: an explicit batch, the idle
    /// fast path).
    pub(super) claims: &'a [Option<Arc<Claim>>],
    /// The flush's span: records the kind of statements sent and the
    /// outcome.
    pub(super) span: &'a tracing::Span,
}

/// Runs `rows` as consecutive statements on one connection, in order:
/// `chunks` are the lengths of its consecutive groups, each within the
/// statement limits, each cut into allowed statement sizes. Each row is
/// claimed ([`Claim::send`]) as its first statement goes out: a row whose
/// caller's deadline won (it waited behind an earlier statement of the
/// flush) fails unsent with a wait timeout, as it would have in the queue. A
/// statement that fails with an error that may belong to a row is re-run in
/// smaller groups ([`super::isolate`]): the row the error names on its own
/// and the rest at once, or halves where none is named; nothing of a failed
/// statement committed, so every row ends up written exactly once or failed
/// with its own statement's error. A statement refused as stale is re-run
/// once.
///
/// With `pipeline` on (and a backend that pipelines), statements go out in
/// pairs until one fails; from then on one at a time.
/// Returns one result per row, in order.
pub(super) async fn execute_rows<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    conn: &mut Conn<B>,
    Rows {
        rows,
        chunks,
        claims,
        span,
    }: Rows<'_, B::Row>,
    pipeline: Pipeline,
) -> Vec<Result<B::Output, Error>> {
    let n = rows.len();
    // The caller counted these rows flushed; sent, less those not sent.
    let mut flushed = engine.counters.sending(n);
    debug_assert_eq!(chunks.iter().sum::<usize>(), n);
    debug_assert!(claims.is_empty() || claims.len() == n);
    let mut results: Vec<Option<Result<B::Output, Error>>> = (0..n).map(|_| None).collect();
    let mut iso = Isolation::new(n, pipeline);
    let mut work: VecDeque<(usize, usize)> = VecDeque::new();
    let mut at = 0;
    for &chunk in chunks {
        work.extend(statements_of(engine, q, rows, at, chunk));
        at += chunk;
    }
    // Rows from here on have not been sent yet. Re-runs (isolation, a
    // stale or not-run statement) go to the front of `work` and hold rows
    // before it; rows after it are sent in order.
    let mut unsent_from = 0;
    // Statements sent by the bulk path, and as multi-row texts.
    let (mut bulk, mut multi) = (0usize, 0usize);
    let mut pairing = pipeline != Pipeline::Off && engine.pipelines(&q.shape);
    while let Some(first) = work.pop_front() {
        if first.0 >= unsent_from && !claims.is_empty() {
            // Rows not sent yet: each is claimed now, or its caller's
            // deadline has won.
            let live = claim(engine, q, rows, claims, first, &mut results);
            if live.len() != 1 || live[0] != first {
                flushed.not_sent(first.1 - live.iter().map(|p| p.1).sum::<usize>());
                for piece in live.into_iter().rev() {
                    work.push_front(piece);
                }
                // The pieces of the claimed rows are sent as they are.
                unsent_from = first.0 + first.1;
                continue;
            }
        }
        let second = match work.front() {
            Some(&(start, len))
                if pairing
                    && engine.backend.pipelines(&q.shape, Some(first.1), Some(len))
                    && (start < unsent_from
                        || claims.is_empty()
                        || claim_all(&claims[start..start + len])) =>
            {
                work.pop_front()
            }
            _ => None,
        };
        let sent_pieces: Vec<(usize, usize)> = std::iter::once(first).chain(second).collect();
        for &(start, len) in &sent_pieces {
            unsent_from = unsent_from.max(start + len);
            // Counted as it is sent: the inline path runs in the caller's
            // task, and a caller dropped mid-statement must not hide a
            // statement whose rows `Stats::rows` already counts.
            engine.counters.statement(len);
            if engine
                .backend
                .uses_bulk(&q.shape, &rows[start..start + len])
            {
                engine.counters.bulk();
                bulk += 1;
            } else {
                multi += 1;
            }
        }
        let limit = B::Connections::answer_limit(conn);
        let started = engine.counters.round_trip();
        let sent = match second {
            None => {
                let chunk = &rows[first.0..first.0 + first.1];
                exchange!(B::Connections, limit, conn, |c| engine
                    .backend
                    .execute(c, &q.shape, chunk))
                .map(|r| vec![(first, r)])
            }
            Some(second) => {
                engine.counters.pipelined();
                let a = &rows[first.0..first.0 + first.1];
                let b = &rows[second.0..second.0 + second.1];
                // Each statement of the pair has its own limit, back to back.
                let limit = limit.map(|l| l * 2);
                let atomic = pipeline == Pipeline::InOrder;
                exchange!(B::Connections, limit, conn, |c| engine
                    .backend
                    .execute_pair(c, &q.shape, a, b, atomic))
                .map(|(ra, rb)| vec![(first, ra), (second, rb)])
            }
        };
        engine.counters.answered(started);
        let outcomes = match sent {
            Ok(outcomes) => outcomes,
            Err(timeout) => {
                // The connection is gone with the statement: whatever of
                // this flush was not sent yet fails unsent.
                for (start, len) in sent_pieces {
                    for slot in &mut results[start..start + len] {
                        *slot = Some(Err(timeout.clone()));
                    }
                }
                let mut unsent = 0;
                for (start, len) in work.drain(..) {
                    unsent += len;
                    for slot in &mut results[start..start + len] {
                        *slot = Some(Err(Error::not_sent_after_timeout()));
                    }
                }
                flushed.not_sent(unsent);
                break;
            }
        };
        // Every statement of this round was sent before any was healed.
        let may_heal = !iso.healed;
        // Last first: re-runs are pushed to the front, and must run in
        // the order of the statements they come from.
        for (piece, result) in outcomes.into_iter().rev() {
            if result
                .as_ref()
                .is_err_and(|e| !matches!(e, ChunkError::NotRun))
            {
                pairing = false;
            }
            settle(
                engine,
                q,
                piece,
                result,
                may_heal,
                &mut iso,
                rows,
                &mut results,
                &mut work,
            );
        }
    }
    engine.counters.split(iso.splits);
    let results: Vec<_> = iso.in_order(
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::lost())))
            .collect(),
    );
    if !span.is_disabled() {
        record_outcome::<B>(span, bulk, multi, &results);
    }
    results
}

/// Records on a flush's span the kind of statements it sent (`multi-row`,
/// the backend's bulk path: `copy` on PostgreSQL, `bulk` on MySQL, or
/// `mixed`) and its outcome (`ok`, or `rows failed` with their count).
fn record_outcome<B: Backend>(
    span: &tracing::Span,
    bulk: usize,
    multi: usize,
    results: &[Result<B::Output, Error>],
) {
    let bulk_kind = match B::DIALECT {
        crate::classify::Dialect::Postgres => "copy",
        crate::classify::Dialect::MySql => "bulk",
    };
    let kind = match (bulk, multi) {
        (0, _) => "multi-row",
        (_, 0) => bulk_kind,
        _ => "mixed",
    };
    let failed = results.iter().filter(|r| r.is_err()).count();
    span.record("kind", kind);
    span.record("outcome", if failed == 0 { "ok" } else { "rows failed" });
    span.record("failed", failed);
}

/// The caller's span, for the flush that carries its row to link to
/// (`follows_from`). `None`, at the cost of a level check, when no
/// subscriber records this module's DEBUG spans (the flush spans): then
/// nothing of the caller's span is kept.
pub(super) fn caller_span() -> Option<tracing::Span> {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return None;
    }
    let span = tracing::Span::current();
    (!span.is_disabled()).then_some(span)
}

/// The statements that send `len` rows from `start`: one bulk statement
/// where the backend takes them so (no text per row count to keep to), else
/// allowed statement sizes.
pub(super) fn statements_of<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    rows: &[B::Row],
    start: usize,
    len: usize,
) -> Vec<(usize, usize)> {
    if engine.backend.any_size(&q.shape, len)
        && engine
            .backend
            .uses_bulk(&q.shape, &rows[start..start + len])
    {
        return vec![(start, len)];
    }
    let mut at = start;
    decompose(len, q.cap_rows)
        .into_iter()
        .map(|size| {
            let piece = (at, size);
            at += size;
            piece
        })
        .collect()
}

/// Claims the rows of `piece` (none of them sent yet) for sending. A row
/// whose caller's deadline won fails unsent with a wait timeout; the pieces
/// that carry the rows left are returned (`piece` itself when every row was
/// claimed).
fn claim<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    rows: &[B::Row],
    claims: &[Option<Arc<Claim>>],
    (start, len): (usize, usize),
    results: &mut [Option<Result<B::Output, Error>>],
) -> Vec<(usize, usize)> {
    let mut live = Vec::new();
    let mut run = start;
    for i in start..start + len {
        if claims[i].as_deref().is_none_or(Claim::send) {
            continue;
        }
        results[i] = Some(Err(Error::wait_timeout()));
        if i > run {
            live.extend(statements_of(engine, q, rows, run, i - run));
        }
        run = i + 1;
    }
    if run == start {
        return vec![(start, len)];
    }
    if run < start + len {
        live.extend(statements_of(engine, q, rows, run, start + len - run));
    }
    live
}

/// Claims every row of a statement that is to join another on the wire;
/// `false` (nothing claimed for good: the rows claimed go with the
/// statement anyway, see below) if a row's deadline won, and the statement
/// is then left to be claimed again on its own.
fn claim_all(claims: &[Option<Arc<Claim>>]) -> bool {
    // Claiming in order and stopping at the first refusal: the rows claimed
    // before it are sent in this statement's place when it comes up again
    // (their claim holds), so no row claimed is ever left unsent.
    claims.iter().all(|c| c.as_deref().is_none_or(Claim::send))
}

/// Per-row results of an explicit batch, or the error that stopped it.
pub(super) type ManyResult<B> = Result<Vec<Result<<B as Backend>::Output, Error>>, Error>;

/// An explicit batch from one caller (`execute_many`): its rows run in
/// order on one connection, in statements of allowed sizes, without waiting
/// in the queue. Runs in its own task (inside a [`Detached`] carrying the
/// call's [`Work`]) so a dropped caller cannot cut a statement in half;
/// statements not yet sent when the caller is gone are not sent.
pub(super) async fn direct<B: Backend>(
    engine: Arc<Engine<B>>,
    q: Arc<ShapeQueue<B>>,
    mut rows: Vec<B::Row>,
    bytes: Vec<usize>,
    deadline: Option<Instant>,
    caller: Option<tracing::Span>,
    reply: tokio::sync::oneshot::Sender<ManyResult<B>>,
) {
    let slot = engine.flush_slot();
    let slot = match deadline {
        None => slot.await,
        Some(d) => match tokio::time::timeout_at(d, slot).await {
            Ok(slot) => slot,
            Err(_) => {
                let _ = reply.send(Err(Error::wait_timeout()));
                return;
            }
        },
    };
    let _slot = slot;
    let mut conn = match engine.backend.connections().checkout(deadline).await {
        Ok(conn) => conn,
        Err(e) => {
            let _ = reply.send(Err(e));
            return;
        }
    };
    let mut results = Vec::with_capacity(rows.len());
    // Two statements' worth at a time where the backend pipelines: the
    // second is on the wire while the first runs.
    let per_round = if engine.pipelines(&q.shape) { 2 } else { 1 };
    let mut start = 0;
    while start < rows.len() {
        // Up to `per_round` flushes' worth: each within the statement
        // limits (rows and bytes).
        let mut chunks = Vec::with_capacity(per_round);
        let mut end = start;
        while chunks.len() < per_round && end < rows.len() {
            let from = end;
            let mut size = 0usize;
            while end < rows.len()
                && end - from < q.cap_rows
                && (end == from || size + bytes[end] <= q.cap_bytes)
            {
                size += bytes[end];
                end += 1;
            }
            chunks.push(end - from);
        }
        if reply.is_closed() {
            engine.counters.cancelled(rows.len() - start);
            return;
        }
        let span = tracing::debug_span!(
            "batchpool.flush",
            table = q.insert.table.as_str(),
            rows = end - start,
            statements = chunks.len(),
            reason = "explicit",
            kind = tracing::field::Empty,
            outcome = tracing::field::Empty,
            failed = tracing::field::Empty,
        );
        if let Some(caller) = &caller {
            span.follows_from(caller);
        }
        for &chunk in &chunks {
            engine.counters.flushed(FlushReason::Full, chunk);
        }
        let in_flight = InFlight::new(&engine, &q, end - start);
        let out = execute_rows(
            &engine,
            &q,
            &mut conn,
            Rows {
                rows: &mut rows[start..end],
                chunks: &chunks,
                claims: &[],
                span: &span,
            },
            Pipeline::InOrder,
        )
        .instrument(span.clone())
        .await;
        drop(in_flight);
        engine
            .counters
            .failed(out.iter().filter(|r| r.is_err()).count());
        let timed_out = out.iter().any(|r| r.as_ref().is_err_and(Error::is_timeout));
        results.extend(out);
        start = end;
        if timed_out {
            // The connection is gone: the rest is not sent.
            engine.counters.unsent(rows.len() - start);
            engine.counters.failed(rows.len() - start);
            results.extend((start..rows.len()).map(|_| Err(Error::not_sent_after_timeout())));
            break;
        }
    }
    let _ = reply.send(Ok(results));
}
