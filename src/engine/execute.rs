//! Running a flush's rows on one connection: its statements in order (two
//! on the wire at once where the backend pipelines), each row claimed as its
//! statement goes out, failing rows isolated ([`super::isolate`]), one
//! result per row.

use std::collections::VecDeque;
use std::sync::Arc;

use tracing::Instrument;

use super::isolate::{Isolation, settle};
use super::queue::{Claim, ShapeQueue};
use super::{Backend, ChunkError, Connections, Engine};
use crate::backend::{Conn, exchange};
use crate::error::Error;

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
/// Returns one result per row, in order. Runs inside the flush's span.
pub(super) async fn execute_rows<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    conn: &mut Conn<B>,
    rows: Rows<'_, B::Row>,
    pipeline: Pipeline,
) -> Vec<Result<B::Output, Error>> {
    let span = rows.span.clone();
    run(engine, q, conn, rows, pipeline).instrument(span).await
}

/// [`execute_rows`] inside its span.
async fn run<B: Backend>(
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
    let mut iso = Isolation::new(
        n,
        pipeline == Pipeline::InOrder,
        B::Connections::statement_limit(conn),
    );
    let mut work: VecDeque<(usize, usize)> = VecDeque::new();
    let mut at = 0;
    for &chunk in chunks {
        work.extend(q.statements(&engine.backend, rows, at, chunk));
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
        let now = tokio::time::Instant::now();
        if iso.out_of_time(first, now) {
            // A re-run of rows whose time limit has passed since they were
            // first sent: they end here, not sent again.
            iso.expire(first, &mut results);
            continue;
        }
        let second = match work.front() {
            Some(&(start, len))
                if pairing
                    && !iso.out_of_time((start, len), now)
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
            iso.sending((start, len));
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
                // Boxed: a pair's state is twice a statement's, and every
                // flush would otherwise carry (and move) room for it.
                exchange!(B::Connections, limit, conn, |c| Box::pin(
                    engine.backend.execute_pair(c, &q.shape, a, b, atomic)
                ))
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
                (result, now),
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
            live.extend(q.statements(&engine.backend, rows, run, i - run));
        }
        run = i + 1;
    }
    if run == start {
        return vec![(start, len)];
    }
    if run < start + len {
        live.extend(q.statements(&engine.backend, rows, run, start + len - run));
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

/// Counts a flush of `rows` rows in `Stats::in_flight` and in its queue's
/// [`flushing`](ShapeQueue::flushing) for as long as it lives.
pub(super) struct InFlight<'a, B: Backend>(&'a Engine<B>, &'a ShapeQueue<B>, usize);

impl<'a, B: Backend> InFlight<'a, B> {
    pub(super) fn new(engine: &'a Engine<B>, q: &'a ShapeQueue<B>, rows: usize) -> Self {
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
