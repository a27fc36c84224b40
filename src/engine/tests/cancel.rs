//! A caller dropped at every poll point, on each path a row takes (inline,
//! queued, waiting for a queue slot, timed, `submit_many`): its row runs
//! once or never, and nothing leaks.

use super::*;

/// Where the row under test was when its caller's future was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// Neither queued nor sent (not polled yet, waiting for a queue slot,
    /// or holding a connection not yet used).
    NotQueued,
    Queued,
    /// Taken by a flush and sent; the reply had not reached the caller.
    Sent,
    /// The future completed by itself.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// A lone row at idle: sent from the caller's task (with a flush slot,
    /// `max_in_flight` 1).
    Inline,
    /// The one connection is busy and another row is queued: the row under
    /// test joins it in the next statement.
    Queued,
    /// The queue (capacity 1) is full: the row first waits for a slot.
    SlotWait,
    /// Timed batching: the row waits for the deadline of a queued row.
    Timed,
}

/// The row under test.
const ROW: i64 = 100;

/// The world of `s` before the row under test is submitted; returns the
/// harness and the other callers.
async fn scenario(s: Scenario) -> (H, Vec<(i64, JoinHandle<Result<i64, Error>>)>) {
    let config = config().queue_capacity(4);
    let (h, others) = match s {
        Scenario::Inline => (H::new(1, config.max_in_flight(1)).await, vec![]),
        Scenario::Queued | Scenario::SlotWait => {
            let cap = if s == Scenario::SlotWait { 1 } else { 4 };
            let h = H::new(1, config.queue_capacity(cap)).await;
            let a = h.sent(1).await;
            let b = h.spawn(2);
            settle().await;
            assert_eq!((h.mem().log(), h.queued()), (vec![vec![1]], vec![2]));
            (h, vec![(1, a), (2, b)])
        }
        Scenario::Timed => {
            let h = H::new(1, config.max_delay(Duration::from_millis(10))).await;
            let b = h.spawn(2);
            settle().await;
            assert_eq!(h.queued(), [2]);
            (h, vec![(2, b)])
        }
    };
    (h, others)
}

/// Polls `fut` up to `k` times, opening the next statement's gate and
/// settling before every poll but the first, and calls `pending` after each
/// poll that did not complete it. The output if it completed.
async fn poll_times<T>(
    h: &H,
    fut: &mut BoxFut<T>,
    k: usize,
    mut pending: impl FnMut(),
) -> Option<T> {
    for i in 0..k {
        if i > 0 {
            h.mem().release_next();
            settle().await;
        }
        if let Poll::Ready(r) = poll(fut) {
            return Some(r);
        }
        pending();
    }
    None
}

/// Drops the row's future after `k` polls (opening the oldest waiting gate
/// and settling between polls), finishes all work, checks that nothing
/// leaked and the row ran once or not at all. Returns where it was dropped.
async fn cancel_after(s: Scenario, k: usize) -> Stage {
    let (h, others) = scenario(s).await;
    let mut fut = h.submit(ROW);
    let mut stage = Stage::NotQueued;
    let output = poll_times(&h, &mut fut, k, || {
        stage = if h.mem().times_sent(ROW) > 0 {
            Stage::Sent
        } else if h.queued().contains(&ROW) {
            Stage::Queued
        } else {
            Stage::NotQueued
        };
        if s == Scenario::Inline {
            // Never through the queue: sent from this task.
            assert!(h.queue_is_idle() && h.stats().queued == 0);
        }
    })
    .await;
    if output.is_some() {
        stage = Stage::Done;
    }
    drop(fut);
    h.drain().await;

    let ctx = format!("{s:?}, dropped after {k} polls at {stage:?}");
    let once = usize::from(stage >= Stage::Sent);
    assert_eq!(h.mem().times_sent(ROW), once, "{ctx}");
    assert_eq!(h.mem().written(ROW), once, "{ctx}");
    if let Some(r) = output {
        assert_ok_own(ROW, r);
    }
    for (v, task) in others {
        assert_ok_own(v, finished(task).await);
        assert_eq!((h.mem().times_sent(v), h.mem().written(v)), (1, 1), "{ctx}");
    }
    let log = h.mem().log();
    let st = h.stats();
    assert_eq!(
        st.rows_cancelled,
        u64::from(stage == Stage::Queued),
        "{ctx}"
    );
    assert_eq!(
        st.rows,
        log.iter().map(Vec::len).sum::<usize>() as u64,
        "{ctx}"
    );
    assert_eq!(
        (st.batches, st.statements),
        (log.len() as u64, log.len() as u64)
    );
    assert_eq!(st.rows_failed, 0, "{ctx}");
    h.assert_no_leaks().await;
    stage
}

/// Runs [`cancel_after`] for k = 0, 1, 2, … until the future completes by
/// itself; returns the stage of each k.
async fn cancel_at_every_poll_point(s: Scenario) -> Vec<Stage> {
    let mut stages = Vec::new();
    for k in 0.. {
        assert!(k < 100, "{s:?}: the future never completes");
        let stage = cancel_after(s, k).await;
        stages.push(stage);
        if stage == Stage::Done {
            break;
        }
    }
    assert!(stages.is_sorted(), "{s:?}: {stages:?}");
    stages
}

/// Each way a row reaches a statement, dropped at every poll point: the
/// inline fast path never queues; a row waiting for a queue slot or a free
/// connection has not queued after its first poll.
#[tokio::test(start_paused = true)]
async fn cancel_at_every_poll_point_on_every_path() {
    for (scenario, first_polls_not_queued, queues) in [
        (Scenario::Inline, true, false),
        (Scenario::Queued, false, true),
        (Scenario::SlotWait, true, true),
        (Scenario::Timed, false, true),
    ] {
        let stages = cancel_at_every_poll_point(scenario).await;
        if first_polls_not_queued {
            assert_eq!(stages[..2], [Stage::NotQueued; 2], "{scenario:?}");
        }
        assert!(stages.contains(&Stage::Sent), "{scenario:?}");
        assert_eq!(stages.contains(&Stage::Queued), queues, "{scenario:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_submit_many_at_every_poll_point() {
    let rows = [1, 2, 3, 4, 5, 6];
    for k in 0.. {
        assert!(k < 100, "submit_many never completes");
        let h = H::new(1, config().max_rows(2)).await;
        let mut fut = h.submit_many(&rows);
        let output = poll_times(&h, &mut fut, k, || {}).await;
        let sent_at_drop = h.mem().log();
        drop(fut);
        h.drain().await;
        // Statements sent before the caller left complete; no new one starts.
        let log = h.mem().log();
        assert_eq!(log, sent_at_drop, "k={k}");
        let sent: Vec<i64> = log.concat();
        assert_eq!(sent, rows[..sent.len()], "in order");
        for v in rows {
            assert_eq!(h.mem().written(v), usize::from(sent.contains(&v)));
        }
        let st = h.stats();
        assert_eq!(st.rows, sent.len() as u64);
        h.assert_no_leaks().await;
        if let Some(out) = output {
            let out = out.unwrap();
            assert_eq!(log, [[1, 2], [3, 4], [5, 6]]);
            for (v, r) in rows.into_iter().zip(out) {
                assert_ok_own(v, r);
            }
            break;
        }
        // Rows not sent are counted cancelled once the batch task ran (it
        // is spawned by the first poll).
        let unsent = if k == 0 { 0 } else { rows.len() - sent.len() };
        assert_eq!(st.rows_cancelled, unsent as u64, "k={k}");
    }
}
