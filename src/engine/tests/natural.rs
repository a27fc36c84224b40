//! Natural batching: the idle fast path, rows queued under load, balance
//! with the statements on the wire, allowed statement sizes.

use super::*;

#[tokio::test(start_paused = true)]
async fn lone_row_at_idle_is_sent_inline() {
    let h = H::new(1, config()).await;
    let mut f = h.submit(7);
    // Polled twice (the connection check-out yields once), without this task
    // ever yielding to another: the statement went out from the caller.
    assert!(poll(&mut f).is_pending());
    assert!(poll(&mut f).is_pending());
    assert_eq!(h.mem().log(), [[7]]);
    assert!(h.queue_is_idle());
    assert_eq!(h.stats().in_flight, 1);
    assert!(h.mem().release_next());
    assert!(matches!(poll(&mut f), Poll::Ready(Ok(7))));
    let st = h.stats();
    assert_eq!(
        (st.flush_natural, st.rows, st.queued, st.in_flight),
        (1, 1, 0, 0)
    );
    assert_eq!(st.queue_wait_max, Duration::ZERO);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn under_load_a_lone_row_queues_and_goes_with_the_rows_queued_meanwhile() {
    let h = H::new(3, config()).await;
    let a = h.sent(1).await;
    // A statement of the shape is on the wire and two connections are free:
    // the next rows queue (no inline send from the caller's task) and the
    // flusher that takes a free connection sends them together.
    let callers = h.queue_all(&[2, 3]);
    assert_eq!(h.mem().log(), [[1]]);
    assert_eq!(h.queued(), [2, 3]);
    settle().await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    assert_eq!(h.mem().in_use(), 2);
    h.drain().await;
    assert_sent_and_queued_own(&h, (1, a), callers).await;
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_free_connection_waits_until_its_statement_is_balanced() {
    let h = H::new(3, config()).await;
    // Eight rows on the wire in one statement.
    let hold = h.mem().hold_all();
    let first = h.queue_all(&[1, 2, 3, 4, 5, 6, 7, 8]);
    drop(hold);
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, 2, 3, 4, 5, 6, 7, 8]]);
    // One row: a connection is free, but a 1-row statement beside an
    // 8-row one is not sent; the flusher holds its connection and waits.
    let mut second = h.queue_all(&[9]);
    settle().await;
    assert_eq!(h.mem().log().len(), 1);
    assert_eq!(h.queued(), [9]);
    assert_eq!(
        h.mem().in_use(),
        2,
        "the waiting flusher holds a connection"
    );
    // Half the statement on the wire is queued: it goes at once.
    second.extend(h.queue_all(&[10, 11, 12]));
    settle().await;
    assert_eq!(h.mem().log()[1], [9, 10, 11, 12]);
    // A lone row waits for a statement on the wire to end; once none is
    // left it goes (no timer of its own).
    let third = h.queue_all(&[13]);
    settle().await;
    assert_eq!(h.mem().log().len(), 2);
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log().len(), 2, "4 rows still on the wire");
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log()[2], [13]);
    h.drain().await;
    assert_all_own(&h, first.into_iter().chain(second).chain(third));
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_balancing_flusher_sends_at_the_rows_deadline() {
    let h = H::limited(Mem::new(2), config(), limits(Some(1), None)).await;
    let hold = h.mem().hold_all();
    let first = h.queue_all(&[1, 2, 3, 4, 5, 6]);
    drop(hold);
    settle().await;
    let start = Instant::now();
    let lone = h.queue_all(&[7]);
    settle().await;
    assert_eq!(h.mem().log().len(), 1, "row 7 waits for balance");
    tokio::time::sleep_until(start + Duration::from_millis(979)).await;
    assert_eq!(h.mem().log().len(), 1, "row 7 still waits for balance");
    tokio::time::sleep_until(start + Duration::from_millis(981)).await;
    // Shortly before its wait deadline the row is sent, not failed: a
    // connection was free all along.
    assert_eq!(h.mem().log()[1], [7]);
    h.drain().await;
    assert_all_own(&h, first.into_iter().chain(lone));
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn busy_connections_accumulate_rows_into_allowed_statement_sizes() {
    // (backend max_params, config max_rows, rows queued)
    let cases = [(65535, 1000, 1..=40), (65535, 5, 1..=25), (4, 1000, 1..=10)];
    for (max_params, max_rows, counts) in cases {
        for n in counts {
            let mut mem = Mem::new(1);
            mem.max_params = max_params;
            let config = config().max_rows(max_rows).queue_capacity(64);
            let h = H::with(mem, config).await;
            let cap = h.q.cap_rows();
            assert_eq!(cap, max_rows.min(max_params));
            h.mem().open_gates();
            let hold = h.mem().hold_all();
            let rows: Vec<i64> = (0..n as i64).collect();
            let tasks = h.queue_all(&rows);
            settle().await;
            assert!(h.mem().log().is_empty());
            assert_eq!((h.queued(), h.stats().queued), (rows.clone(), n as u64));

            drop(hold);
            settle().await;
            let log = h.mem().log();
            let mut left = n;
            for s in &log {
                assert_eq!(
                    s.len(),
                    statement_size(left, cap),
                    "n={n} cap={cap} {log:?}"
                );
                left -= s.len();
            }
            assert_eq!(left, 0);
            assert_eq!(log.concat(), rows, "rows go in queue order");
            assert_all_own(&h, tasks);
            let st = h.stats();
            assert_eq!(
                (st.batches, st.statements),
                (log.len() as u64, log.len() as u64)
            );
            assert_eq!(st.flush_natural + st.flush_full, log.len() as u64);
            h.assert_no_leaks().await;
        }
    }
}
