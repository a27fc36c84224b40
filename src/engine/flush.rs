//! Flusher tasks: decide when a queue's rows go (a free connection, timed
//! batching's deadline, a full statement, balance with the statements on the
//! wire, `close()`), take them, run them ([`execute_rows`]) and fan the
//! per-row outcomes back out to the callers. Also the flush span, shared by
//! every path that sends rows.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::execute::{InFlight, Pipeline, Rows, execute_rows};
use super::limit::Slot;
use super::queue::{Reply, ShapeQueue, Taken};
use super::{Backend, Connections, Engine, Work};
use crate::backend::Lease;
use crate::error::Error;
use crate::stats::FlushReason;

/// One flusher task, counted in by its queue when spawned (see
/// [`ShapeQueue::push`]). It waits (timed batching only), takes a
/// connection, then takes the rows of its statement (two where the backend
/// pipelines) and runs them (timed batching: waits again instead if the
/// queue is no longer due, see [`take`]). Rows still queued after that are
/// claimed by further flushers (spawned by `Engine::enqueue`, or here).
/// While it waits for a connection, rows whose `wait_timeout` passes fail
/// unsent ([`acquire`]).
pub(super) async fn flusher<B: Backend>(
    engine: Arc<Engine<B>>,
    q: Arc<ShapeQueue<B>>,
    _work: Work,
) {
    let mut reason;
    let (mut slot, conn, mut taken) = loop {
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
        if let Some(taken) = take(&engine, &q) {
            break (slot, conn, taken);
        }
    };
    engine.release(taken.rows.len() + taken.cancelled);
    slot.carried(taken.rows.len());
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
    for &at in &taken.waited {
        engine.counters.waited(now.saturating_duration_since(at));
    }
    if taken.full {
        reason = FlushReason::Full;
    } else if engine.is_closed() {
        reason = FlushReason::Close;
    }
    match conn {
        Ok(mut conn) => {
            let field = tracing::field::debug(reason);
            let span = flush_span(&q, taken.rows.len(), &field, &taken.callers);
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

/// A flush slot (see [`FlushLimit`](super::limit::FlushLimit)) and a connection for a flusher. While it
/// waits, every row of the queue whose deadline passes fails unsent with a
/// wait timeout: the wait is bounded for every queued row, not just for the
/// rows one flusher would take. `None` when the flusher is no longer needed
/// (the rows it was spawned for timed out).
async fn acquire<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
) -> Option<(Slot, Result<Lease<B::Connections>, Error>)> {
    let get = async {
        let slot = engine.flush_slot(q).await?;
        // Waits in deadpool's queue as long as it takes: the rows' own
        // deadlines are enforced below, without losing this place.
        let conn = engine.backend.connections().checkout(None).await;
        Some((slot, conn))
    };
    tokio::pin!(get);
    loop {
        let expiry = q.next_expiry();
        tokio::select! {
            biased;
            got = &mut get => return got,
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
/// until taking the queue is [balanced](ShapeQueue::balanced_or_ask) with the
/// flushes of the shape on the wire — at the latest until one of them ends
/// (its callers then queue their next rows), [`BALANCE_MARGIN`] before a
/// queued row's deadline (so a row behind a free connection is sent, not
/// timed out), or the pool closes. No timer of its own: the wait is at most
/// what is left of a statement on the wire.
async fn balance<B: Backend>(engine: &Engine<B>, q: &ShapeQueue<B>) {
    loop {
        let done = armed(q.flush_ended());
        let closing = armed(engine.closing.notified());
        // Not balanced: the row queued that balances it wakes `done`.
        if engine.is_closed() || q.balanced_or_ask() {
            return;
        }
        let expiry = q.next_expiry().map(|at| at - BALANCE_MARGIN);
        tokio::select! {
            () = done => {}
            () = closing => return,
            () = sleep_until(expiry) => return,
        }
    }
}

/// How long before a queued row's deadline a flusher holding a connection
/// stops balancing and sends it: the flusher must take the row before the
/// caller's own timer fails it (see [`Claim`](super::queue::Claim)), on a
/// runtime that may be late to wake it.
const BALANCE_MARGIN: std::time::Duration = std::time::Duration::from_millis(20);

/// `notified`, registered now (a wake-up from here on is not missed).
fn armed(notified: Notified<'_>) -> Pin<Box<Notified<'_>>> {
    let mut notified = Box::pin(notified);
    notified.as_mut().enable();
    notified
}

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Takes the rows of a flusher's statements (see [`ShapeQueue::take_due`]:
/// nothing when timed batching finds the queue no longer due) and spawns
/// flushers for the rows left over.
fn take<B: Backend>(engine: &Arc<Engine<B>>, q: &Arc<ShapeQueue<B>>) -> Option<Taken<B>> {
    let statements = if engine.pipelines(&q.shape) { 2 } else { 1 };
    let closed = || engine.is_closed();
    let any_size = |n| engine.backend.any_size(&q.shape, n) || engine.backend.one_text(&q.shape);
    let (taken, spawn) = q.take_due(engine.config.max_delay, closed, statements, any_size)?;
    engine.spawn_flushers(q, spawn);
    Some(taken)
}

/// The reply channels of rows a flusher took. Answered with
/// [`answer`](Unanswered::answer); dropped unanswered (a panic in a
/// backend, the runtime shutting down mid-flush), every row gets an
/// outcome-unknown error and is counted failed, so the counters stay exact.
struct Unanswered<'a, B: Backend> {
    engine: &'a Engine<B>,
    replies: Vec<Reply<B>>,
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

/// Timed batching: waits until the oldest queued row is `delay` old, the
/// queue holds a full statement, or the pool closes.
async fn wait_for_deadline<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    delay: std::time::Duration,
) -> FlushReason {
    loop {
        let woken = armed(q.woken());
        let closing = armed(engine.closing.notified());
        if engine.is_closed() {
            return FlushReason::Close;
        }
        let deadline = match q.due_at(delay) {
            Ok(at) => at,
            Err(now) => return now,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return FlushReason::Timer,
            () = woken => {}
            () = closing => {}
        }
    }
}

/// The span of one flush of `rows` rows into `q`'s table, for `reason`,
/// following from the spans of the callers whose rows it carries. It
/// records the kind of statements sent and the outcome when the rows have
/// run ([`execute_rows`]); an explicit batch records how many statements it
/// cut its rows into.
pub(super) fn flush_span<'a, B: Backend>(
    q: &ShapeQueue<B>,
    rows: usize,
    reason: &dyn tracing::Value,
    callers: impl IntoIterator<Item = &'a tracing::Span>,
) -> tracing::Span {
    let span = tracing::debug_span!(
        "batchpool.flush",
        table = q.form().table(),
        rows,
        statements = tracing::field::Empty,
        reason,
        kind = tracing::field::Empty,
        outcome = tracing::field::Empty,
        failed = tracing::field::Empty,
    );
    for caller in callers {
        span.follows_from(caller);
    }
    span
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
