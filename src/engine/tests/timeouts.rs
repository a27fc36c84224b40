//! Time limits: every queued row failing unsent at its own `wait_timeout`,
//! a statement unanswered at its deadline closing its connection.

use super::*;

#[tokio::test(start_paused = true)]
async fn wait_timeout_bounds_every_queued_row_not_one_statement() {
    // One connection, stuck; 2,500 rows queue (three statements' worth)
    // over 2 s. Each row fails unsent exactly when its own wait_timeout
    // (1 s from its call) passes, whichever flusher notices.
    let config = config().max_rows(1000).queue_capacity(10_000);
    let h = H::limited(Mem::new(1), config, limits(Some(1), None)).await;
    let stuck = h.spawn(-1);
    settle().await;
    assert_eq!(h.mem().log().len(), 1, "the stuck statement is sent");
    let start = Instant::now();
    let mut callers = Vec::new();
    for batch in 0..5i64 {
        for i in 0..500 {
            let v = 1 + batch * 500 + i;
            let f = h.submit(v);
            callers.push((
                v,
                Instant::now(),
                tokio::spawn(async move {
                    let out = f.await;
                    (out, Instant::now())
                }),
            ));
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    settle().await;
    tokio::time::sleep_until(start + Duration::from_secs(4)).await;
    settle().await;
    for (v, at, task) in callers {
        let (out, done) = finished(task).await;
        let e = out.expect_err("no connection was ever free");
        assert!(e.is_timeout() && !e.is_outcome_unknown(), "row {v}: {e}");
        let waited = done - at;
        assert!(
            waited >= Duration::from_secs(1) && waited <= Duration::from_millis(1002),
            "row {v} waited {waited:?}"
        );
        assert_eq!(h.mem().times_sent(v), 0);
    }
    let st = h.stats();
    assert_eq!(
        (st.rows_unsent, st.rows_failed, st.queued),
        (2500, 2500, 0),
        "{st:?}"
    );
    // The stuck statement still completes, and the pool serves again.
    h.mem().open_gates();
    settle().await;
    assert!(
        finished(stuck).await.is_err(),
        "row -1 violates a constraint"
    );
    let last = h.spawn(7);
    settle().await;
    assert_ok_own(7, finished(last).await);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_row_behind_an_earlier_statement_of_its_flush_times_out_unsent() {
    // Seven rows go as one flush of two statements, 6 then 1 (no bulk
    // path for them); the first is stuck past the last row's deadline. The
    // row that waits behind it fails at its own deadline, and is never
    // sent, not even once the first statement is answered.
    let mem = Mem::new(1);
    mem.any_size.store(true, SeqCst);
    let h = H::limited(mem, config(), limits(Some(1), None)).await;
    let hold = h.mem().hold_all();
    let start = Instant::now();
    let callers: Vec<_> = (1..=7).map(|v| (v, h.spawn(v))).collect();
    settle().await;
    drop(hold);
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, 2, 3, 4, 5, 6]]);
    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    settle().await;
    let (_, last) = &callers[6];
    assert!(last.is_finished(), "row 7 has its outcome at its deadline");
    h.mem().open_gates();
    settle().await;
    for (v, task) in callers {
        let out = finished(task).await;
        if v < 7 {
            assert_ok_own(v, out);
        } else {
            let e = out.expect_err("row 7 waited past its deadline");
            assert!(e.is_timeout() && !e.is_outcome_unknown(), "{e}");
        }
    }
    assert_eq!(h.mem().times_sent(7), 0, "{:?}", h.mem().log());
    h.assert_end(|st| (st.rows, st.rows_unsent, st.rows_failed), (6, 1, 1))
        .await;
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_statement_fails_at_its_deadline_and_its_connection_is_closed() {
    let h = H::limited(Mem::new(1), config(), limits(None, Some(2))).await;
    let lone = h.sent(1).await;
    let queued = h.queue_all(&[2, 3]);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(2) + STATEMENT_GRACE).await;
    settle().await;
    let e = finished(lone).await.unwrap_err();
    assert!(
        e.is_outcome_unknown() && e.is_timeout() && e.is_statement_timeout(),
        "{e}"
    );
    assert_eq!(
        h.mem().discarded.load(SeqCst),
        1,
        "the connection was closed"
    );
    // The next flush runs on a new connection; the queued rows were never
    // sent, so they only waited.
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    h.mem().open_gates();
    settle().await;
    assert_all_own(&h, queued);
    assert!(Instant::now() - start < Duration::from_secs(4));
    h.assert_end(|st| (st.rows, st.rows_failed, st.statements), (3, 1, 2))
        .await;
}
