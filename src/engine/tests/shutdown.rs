//! `close()` and callers that leave: queued rows flushed at once, timers cut
//! short, no wait for callers that stopped polling, a statement of a
//! dropped caller finished in the background, counters exact when a backend
//! panics.

use super::*;

#[tokio::test(start_paused = true)]
async fn close_flushes_queued_rows_and_waits_for_in_flight() {
    let h = H::new(1, config().queue_capacity(3)).await;
    let a = h.sent(1).await;
    let queued = h.queue_all(&[2, 3, 4]);
    settle().await;
    assert_eq!(h.queued(), [2, 3, 4]);
    let mut waiting = h.submit(5); // the queue is full
    assert!(poll(&mut waiting).is_pending());

    let closer = h.close();
    settle().await;
    assert!(!closer.is_finished());
    // Closed to new rows at once, including a caller still waiting for a slot.
    let closed =
        |r: Poll<Result<i64, Error>>| matches!(r, Poll::Ready(Err(e)) if e.is_pool_closed());
    assert!(closed(poll(&mut waiting)));
    assert!(closed(poll(&mut h.submit(6))));
    assert!(matches!(poll(&mut h.submit_many(&[7])), Poll::Ready(Err(e)) if e.is_pool_closed()));

    // The queued rows go with the next free connection; close waits for them.
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3, 4]]);
    assert!(!closer.is_finished());
    assert!(h.mem().release_next());
    settle().await;
    finished(closer).await;

    assert_sent_and_queued_own(&h, (1, a), queued).await;
    assert_eq!(h.mem().times_sent(5), 0);
    assert!(closed(poll(&mut h.submit(8))));
    h.assert_end(|st| (st.flush_close, st.rows, st.rows_cancelled), (1, 4, 0))
        .await;
}

#[tokio::test(start_paused = true)]
async fn close_cuts_timers_short() {
    let h = H::new(2, config().max_delay(Duration::from_secs(3600))).await;
    h.mem().open_gates();
    let tasks = h.queue_all(&[1, 2, 3]);
    settle().await;
    assert!(h.mem().log().is_empty());
    let t = Instant::now();
    let closer = h.close();
    settle().await;
    finished(closer).await;
    assert_eq!(h.mem().log(), [[1, 2, 3]]);
    assert_eq!(h.mem().received_at(), [t]);
    assert_all_own(&h, tasks);
    assert!(matches!(poll(&mut h.submit(4)), Poll::Ready(Err(e)) if e.is_pool_closed()));
    h.assert_end(|st| (st.flush_close, st.flush_timer), (1, 0))
        .await;
}

#[tokio::test(start_paused = true)]
async fn close_waits_for_rows_not_for_callers_that_stopped_polling() {
    let h = H::new(1, config()).await;
    let a = h.sent(1).await;
    // Queued, then never polled again (not dropped either).
    let queued = h.queue_all(&[2, 3]);
    let closer = h.close();
    h.mem().open_gates();
    settle().await;
    finished(closer).await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    assert_sent_and_queued_own(&h, (1, a), queued).await;
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn close_timeout_reports_work_still_running() {
    let h = H::new(1, config()).await;
    let a = h.sent(1).await;
    let e =
        h.e.close(Some(Duration::from_millis(200)))
            .await
            .unwrap_err();
    assert!(e.is_timeout(), "{e}");
    assert!(h.submit(2).await.unwrap_err().is_pool_closed());
    h.mem().open_gates();
    settle().await;
    assert_ok_own(1, finished(a).await);
    h.e.close(Some(Duration::from_millis(200))).await.unwrap();
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_caller_dropped_mid_statement_does_not_cut_it_off() {
    // The idle fast path sends from the caller's task; the caller leaves.
    let h = H::new(1, config()).await;
    let lone = h.sent(1).await;
    lone.abort();
    settle().await;
    assert!(lone.is_finished());
    let closer = h.close();
    settle().await;
    assert!(
        !closer.is_finished(),
        "close waits for the statement on the wire"
    );
    assert_eq!(
        h.mem().in_use(),
        1,
        "the connection stays with its statement"
    );
    h.mem().open_gates();
    settle().await;
    finished(closer).await;
    assert_eq!(
        h.mem().discarded.load(SeqCst),
        0,
        "answered, so returned clean"
    );
    let st = h.stats();
    assert_eq!((st.rows, st.statements, st.in_flight), (1, 1, 0), "{st:?}");
    assert_eq!(h.mem().written(1), 1);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn counters_stay_exact_when_a_backend_panics() {
    let h = H::new(1, config()).await;
    h.mem().open_gates();
    // Inline: the panic reaches the caller's task (a bug is not hidden).
    let lone = h.spawn(PANICS);
    settle().await;
    assert!(finished_or_panic(lone).await);
    // Queued: the flusher task panics; its callers hear outcome-unknown.
    let hold = h.mem().hold_all();
    let queued = h.queue_all(&[PANICS, 5]);
    drop(hold);
    settle().await;
    for (_, mut caller) in queued {
        let e = outcome(&mut caller).unwrap_err();
        assert!(e.is_outcome_unknown(), "{e}");
    }
    h.assert_end(|st| (st.rows, st.rows_failed, st.in_flight), (3, 3, 0))
        .await;
}

/// Whether a task ended by panicking.
async fn finished_or_panic<T: std::fmt::Debug>(task: JoinHandle<T>) -> bool {
    match task.await {
        Err(e) => e.is_panic(),
        Ok(out) => panic!("expected a panic, got {out:?}"),
    }
}
