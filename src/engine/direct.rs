//! Rows sent without a flusher task: the idle fast path ([`inline`], one
//! caller's row from its own task) and an explicit batch ([`direct`], one
//! caller's rows in order).

use std::sync::Arc;

use tokio::time::Instant;

use super::execute::{InFlight, Pipeline, Rows, execute_rows};
use super::flush::{caller_span, flush_span};
use super::queue::ShapeQueue;
use super::{Backend, Connections, Detached, Engine, Work};
use crate::error::Error;
use crate::stats::FlushReason;

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
    let Some(mut slot) = engine.try_flush_slot(q) else {
        return Err(row);
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
        let span = flush_span(&q, 1, &"idle", &caller);
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
        .await;
        drop(conn);
        slot.carried(1);
        drop(slot);
        drop(in_flight);
        no_outcome.0 = None;
        let result = out.pop().unwrap_or_else(|| Err(Error::lost()));
        engine.counters.failed(usize::from(result.is_err()));
        result
    };
    Ok(Detached::new(work.more(), flush).await)
}

/// The idle fast path's [`Unanswered`](super::flush): its one row counts as failed if the
/// flush ends without an outcome (a panic in a backend).
struct NoOutcome<'a, B: Backend>(Option<&'a Engine<B>>);

impl<B: Backend> Drop for NoOutcome<'_, B> {
    fn drop(&mut self) {
        if let Some(engine) = self.0 {
            engine.counters.failed(1);
        }
    }
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
    let slot = engine.flush_slot(&q);
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
    let Some(mut slot) = slot else {
        let _ = reply.send(Err(Error::pool_closed()));
        return;
    };
    slot.carried(rows.len());
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
                && end - from < q.cap_rows()
                && (end == from || size + bytes[end] <= q.cap_bytes())
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
        let span = flush_span(&q, end - start, &"explicit", &caller);
        span.record("statements", chunks.len());
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
