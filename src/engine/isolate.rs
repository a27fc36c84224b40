//! Isolating the failing rows of a failed multi-row statement.
//!
//! Nothing of a failed statement committed, so its rows are simply run
//! again in smaller groups until every row either ran in a statement that
//! succeeded or failed in a statement of its own: then each caller has the
//! outcome of a statement that held its row, and a failure is always its own
//! single-row statement's failure.
//!
//! Where the server's error names the row it is about, or the backend found
//! the row the error's text describes ([`ChunkError::RowAt`]), that row is
//! taken out and run on its own, and the rest goes out again at once (it
//! may fail on the next bad row: the same again). Each failing row then
//! costs about two statements: the failed one and its own. The named row is
//! only a lead, never a verdict: it gets the outcome of its own single-row
//! statement, and a wrong lead costs one statement, never a wrong outcome.
//! The one exception is a failure the backend proves the row's own
//! ([`ChunkError::RowFailed`]: its single-row statement, run alone at the
//! instant the failed one ran, would have failed alike, whatever the other
//! rows): that row gets the error at once and the others go again without
//! it, so the row costs only the failed statement.
//!
//! Rows of different callers ([`Pipeline::Independent`](super::execute::Pipeline))
//! have no order among them: the named row moves to the end of its group
//! (the rows of the engine's slice are reordered; [`Isolation::order`] keeps
//! where each came from), the others run as one statement first, then the
//! named row alone. The rows keep their relative order otherwise, so rows
//! sharing a key still meet in their order: the first of them that the
//! multi-row statement would have written is the one that is written. One
//! caller's batch in order (`execute_many`) runs the rows before the named
//! one, then that row, then the rows after it, so every row still takes
//! effect after the rows before it.
//!
//! Without a named row the group is halved. Past a few failed halvings, or
//! past a third of the flush's rows named, the rest of a failing group goes
//! row by row: its failures are dense, and single-row statements are then
//! the cheapest way to every row's outcome.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::queue::{ShapeQueue, decompose};
use super::{Backend, ChunkError, ChunkResult, Engine};
use crate::error::Error;

/// How a flush is isolating its failing rows.
pub(super) struct Isolation {
    /// Statements added by splitting, sent.
    pub(super) splits: usize,
    /// Pieces of split statements not sent yet.
    split_pieces: HashSet<(usize, usize)>,
    /// Failed statements of more than one row that named no row.
    failed: usize,
    /// Failed statements of more than one row that named one.
    named: usize,
    /// After this many failed statements without a named row, the rest of
    /// a failing group goes row by row: bisection finds a few bad rows in
    /// about 2 log n failed statements.
    dense_after: usize,
    /// After this many failed statements with a named row, the same.
    named_dense_after: usize,
    /// A statement refused as stale has been re-run (once per flush).
    pub(super) healed: bool,
    /// Whether the flush's rows have an order to keep (one caller's batch,
    /// [`Pipeline::InOrder`](super::execute::Pipeline::InOrder)).
    in_order: bool,
    /// For each place of the flush's row slice, the index its row had when
    /// the flush began (rows named by an error move within their group).
    order: Vec<usize>,
    /// The statement time limit of the flush's connection: no row is sent
    /// again once this much time has passed since it was first sent.
    limit: Option<Duration>,
    /// When each row (by its index when the flush began) was first sent.
    first_sent: Vec<Option<Instant>>,
}

impl Isolation {
    /// Isolation state for a flush of `n` rows, `in_order` if they are
    /// one caller's batch, on a connection whose statement time limit is
    /// `limit`.
    pub(super) fn new(n: usize, in_order: bool, limit: Option<Duration>) -> Self {
        let dense_after = 2 * (usize::BITS - n.leading_zeros()) as usize + 2;
        Isolation {
            splits: 0,
            split_pieces: HashSet::new(),
            failed: 0,
            named: 0,
            dense_after,
            named_dense_after: n / 3 + dense_after,
            healed: false,
            in_order,
            order: (0..n).collect(),
            limit,
            first_sent: vec![None; n],
        }
    }

    /// Notes that `piece` goes out now (a piece of a split statement is
    /// counted in [`splits`](Self::splits)).
    pub(super) fn sending(&mut self, piece: (usize, usize)) {
        if self.split_pieces.remove(&piece) {
            self.splits += 1;
        }
    }

    /// Notes that the rows of `piece` ran on the server in a statement sent
    /// at `at` (the first such statement starts their time limit). Not for
    /// a statement answered [`ChunkError::NotRun`], which may never have
    /// been sent.
    fn ran(&mut self, (start, len): (usize, usize), at: Instant) {
        for &i in &self.order[start..start + len] {
            self.first_sent[i].get_or_insert(at);
        }
    }

    /// Whether the rows of `piece` may not be sent again: the statement
    /// time limit has passed since the first of them was first sent, so a
    /// statement of theirs running now would run past the limit that their
    /// own statement, run alone, would have been held to. A piece whose
    /// rows were never sent is never out of time.
    pub(super) fn out_of_time(&self, (start, len): (usize, usize), now: Instant) -> bool {
        let Some(limit) = self.limit else {
            return false;
        };
        self.order[start..start + len]
            .iter()
            .filter_map(|&i| self.first_sent[i])
            .min()
            .is_some_and(|first| now.saturating_duration_since(first) >= limit)
    }

    /// Ends the rows of `piece`, out of time ([`out_of_time`](Self::out_of_time)),
    /// without sending them again: each fails with the pool's time-limit
    /// error (nothing of them committed).
    pub(super) fn expire<O>(
        &mut self,
        (start, len): (usize, usize),
        results: &mut [Option<Result<O, Error>>],
    ) {
        self.split_pieces.remove(&(start, len));
        let e = Error::not_rerun_after_limit(self.limit.unwrap_or_default());
        for slot in &mut results[start..start + len] {
            *slot = Some(Err(e.clone()));
        }
    }

    /// Puts the results (indexed by place in the row slice) back in the
    /// order the flush's rows came in.
    pub(super) fn in_order<T>(&self, results: Vec<T>) -> Vec<T> {
        if self.order.iter().enumerate().all(|(i, &o)| i == o) {
            return results;
        }
        let mut out: Vec<Option<T>> = (0..results.len()).map(|_| None).collect();
        for (r, &o) in results.into_iter().zip(&self.order) {
            out[o] = Some(r);
        }
        out.into_iter()
            .map(|r| r.expect("the order is a permutation"))
            .collect()
    }
}

/// The statements that send `len` rows from `start` (see
/// [`ShapeQueue::statements`]), appended to `pieces`.
fn cut<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    rows: &[B::Row],
    start: usize,
    len: usize,
    pieces: &mut Vec<(usize, usize)>,
) {
    if len > 0 {
        pieces.extend(q.statements(&engine.backend, rows, start, len));
    }
}

/// The statements that send what is left of a failed statement, `len`
/// rows from `start`, once its named row is out: one statement where the
/// backend takes any row count for a re-run and the rows need no cut
/// between them, else as [`cut`].
fn cut_rest<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    rows: &[B::Row],
    start: usize,
    len: usize,
    pieces: &mut Vec<(usize, usize)>,
) {
    if len > 0
        && len <= q.cap_rows()
        && engine.backend.reruns_any_size(&q.shape)
        && engine
            .backend
            .runs(&q.shape, &rows[start..start + len])
            .is_none()
    {
        pieces.push((start, len));
    } else {
        cut(engine, q, rows, start, len, pieces);
    }
}

/// Records what one statement of the flush, sent at `sent_at`, gave for
/// its rows (`start`, `len`), or queues at the front of `work` what must
/// run again. `rows` and `results` are indexed by place; a named row may
/// move within its group.
#[allow(clippy::too_many_arguments)]
pub(super) fn settle<B: Backend>(
    engine: &Engine<B>,
    q: &ShapeQueue<B>,
    (start, len): (usize, usize),
    (result, sent_at): (ChunkResult<B::Output>, Instant),
    may_heal: bool,
    iso: &mut Isolation,
    rows: &mut [B::Row],
    results: &mut [Option<Result<B::Output, Error>>],
    work: &mut VecDeque<(usize, usize)>,
) {
    let rerun = |pieces: Vec<(usize, usize)>, iso: &mut Isolation, work: &mut VecDeque<_>| {
        iso.split_pieces.extend(pieces.iter().copied());
        for piece in pieces.into_iter().rev() {
            work.push_front(piece);
        }
    };
    if !matches!(result, Err(ChunkError::NotRun)) {
        iso.ran((start, len), sent_at);
    }
    // A row's own failure is taken as such only among independent callers
    // (one caller's batch keeps its order: its rows before and after the
    // named one run apart) and only for a row of this statement.
    let result = match result {
        Err(ChunkError::RowFailed(at, e)) if iso.in_order || len < 2 || at >= len => {
            Err(ChunkError::RowAt(at, e))
        }
        other => other,
    };
    match result {
        Ok(outs) => {
            debug_assert_eq!(outs.len(), len);
            for (slot, out) in results[start..start + len].iter_mut().zip(outs) {
                *slot = Some(Ok(out));
            }
        }
        // Rolled back with its pair (or not run): as if never sent.
        Err(ChunkError::NotRun) => work.push_front((start, len)),
        Err(ChunkError::Stale(_)) if may_heal => {
            iso.healed = true;
            engine.route_stale(q.sql());
            work.push_front((start, len));
        }
        Err(ChunkError::RowFailed(at, e)) => {
            // Its own error, as its own statement would have had it: the
            // row is done, the others go again at once without it.
            iso.named += 1;
            let end = start + len;
            rows[start + at..end].rotate_left(1);
            results[start + at..end].rotate_left(1);
            iso.order[start + at..end].rotate_left(1);
            results[end - 1] = Some(Err(e));
            let mut pieces = Vec::new();
            cut_rest(engine, q, rows, start, len - 1, &mut pieces);
            rerun(pieces, iso, work);
        }
        Err(ChunkError::RowAt(at, _))
            if len > 1 && at < len && iso.named < iso.named_dense_after =>
        {
            iso.named += 1;
            let mut pieces = Vec::new();
            if iso.in_order {
                // Before it, it alone, after it: the batch's order holds.
                cut(engine, q, rows, start, at, &mut pieces);
                pieces.push((start + at, 1));
                cut(engine, q, rows, start + at + 1, len - at - 1, &mut pieces);
            } else {
                // The others at once, then it alone.
                let end = start + len;
                rows[start + at..end].rotate_left(1);
                results[start + at..end].rotate_left(1);
                iso.order[start + at..end].rotate_left(1);
                cut_rest(engine, q, rows, start, len - 1, &mut pieces);
                pieces.push((end - 1, 1));
            }
            rerun(pieces, iso, work);
        }
        Err(ChunkError::Row(_) | ChunkError::RowAt(..)) if len > 1 => {
            iso.failed += 1;
            let dense = iso.failed > iso.dense_after || iso.named >= iso.named_dense_after;
            let pieces: Vec<(usize, usize)> = if dense {
                // Most rows fail: one statement each.
                (start..start + len).map(|i| (i, 1)).collect()
            } else {
                let half = len / 2;
                let mut pieces = Vec::new();
                for (from, n) in [(start, half), (start + half, len - half)] {
                    // Rows that may not share a statement stay apart.
                    let runs = engine
                        .backend
                        .runs(&q.shape, &rows[from..from + n])
                        .unwrap_or_else(|| vec![n]);
                    let mut at = from;
                    for run in runs {
                        for size in decompose(run, q.cap_rows()) {
                            pieces.push((at, size));
                            at += size;
                        }
                    }
                }
                pieces
            };
            rerun(pieces, iso, work);
        }
        Err(ChunkError::Each(outs)) => {
            debug_assert_eq!(outs.len(), len);
            for (slot, out) in results[start..start + len].iter_mut().zip(outs) {
                *slot = Some(out);
            }
        }
        Err(
            ChunkError::Row(e)
            | ChunkError::RowAt(_, e)
            | ChunkError::Statement(e)
            | ChunkError::Stale(e),
        ) => {
            for slot in &mut results[start..start + len] {
                *slot = Some(Err(e.clone()));
            }
        }
    }
}
