//! Failing-row isolation: every row gets its own statement's outcome,
//! whatever rows fail and whatever row the backend names.

use super::*;

#[tokio::test(start_paused = true)]
async fn failing_rows_are_isolated_by_halving() {
    let h = H::new(1, config()).await;
    let rows = [10, 11, -12, 13, 14, -15, 16, 17];
    flush_each_own(&h, &rows).await;
    let expected: [&[i64]; 11] = [
        &rows,
        &[10, 11, -12, 13],
        &[10, 11],
        &[-12, 13],
        &[-12],
        &[13],
        &[14, -15, 16, 17],
        &[14, -15],
        &[14],
        &[-15],
        &[16, 17],
    ];
    assert_eq!(h.mem().log(), expected);
    let st = h.stats();
    assert_eq!(
        (st.batches, st.statements, st.split_statements),
        (1, 11, 10)
    );
    assert_eq!((st.rows, st.rows_failed), (8, 2));
    h.assert_no_leaks().await;
}

/// When most rows of a flush fail alike, isolation costs about one
/// statement per row (not the 2n of a full bisection), and every caller
/// still gets its own statement's error.
#[tokio::test(start_paused = true)]
async fn rows_failing_alike_cost_about_one_statement_each() {
    let h = H::new(1, config().queue_capacity(64)).await;
    let rows: Vec<i64> = (1..=64).map(|v| -v).collect();
    flush_each_own(&h, &rows).await;
    let statements = h.stats().statements as usize;
    // 64 single-row statements are needed anyway; bisection adds at most
    // the failed statements before it gives up (2 log2 64 + 2) and their
    // halves.
    assert!(
        (64..=64 + 2 * (2 * 7 + 2) + 1).contains(&statements),
        "{statements} statements for 64 failing rows"
    );
    h.assert_no_leaks().await;
}

/// A backend that ran a group's rows one statement each reports each row's
/// own outcome: no isolation needed, nothing re-run.
#[tokio::test(start_paused = true)]
async fn rows_run_one_by_one_keep_their_own_outcomes() {
    let h = H::new(1, config()).await;
    h.mem().one_by_one.store(true, SeqCst);
    let rows = [1, -2, 3, -4];
    flush_each_own(&h, &rows).await;
    assert_eq!(h.mem().log(), [rows.to_vec()]);
    assert_eq!(h.stats().split_statements, 0);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn every_pattern_of_bad_rows_is_isolated() {
    for n in 1..=7usize {
        for mask in 0u32..(1 << n) {
            let h = H::new(1, config()).await;
            let rows = masked(n, mask);
            flush_each_own(&h, &rows).await;
            let log = h.mem().log();
            let st = h.stats();
            assert_eq!(st.rows_failed, u64::from(mask.count_ones()));
            assert_eq!(st.statements, log.len() as u64);
            assert_eq!(
                st.split_statements,
                st.statements - st.batches,
                "{rows:?}: {log:?}"
            );
            assert_eq!(st.rows, n as u64);
            h.assert_no_leaks().await;
        }
    }
}

/// A failing statement that names its row: that row runs alone after the
/// rest, which goes out again at once (in allowed statement sizes), so each
/// failing row costs about two statements; the other rows keep their order.
#[tokio::test(start_paused = true)]
async fn a_named_failing_row_runs_alone_and_the_rest_at_once() {
    let h = H::new(1, config()).await;
    h.mem().names.store(1, SeqCst);
    let rows = [10, 11, -12, 13, 14, -15, 16, 17];
    flush_each_own(&h, &rows).await;
    // The rest goes out in allowed statement sizes (7 rows: 6 and 1).
    let expected: [&[i64]; 7] = [
        &rows,
        &[10, 11, 13, 14, -15, 16],
        &[10, 11, 13, 14],
        &[16],
        &[-15],
        &[17],
        &[-12],
    ];
    assert_eq!(h.mem().log(), expected);
    h.assert_end(|st| (st.batches, st.statements, st.rows_failed), (1, 7, 2))
        .await;
}

/// Every pattern of bad rows, with a backend naming the right row, a wrong
/// one, or the last bad one: every row gets its own outcome, written once,
/// for rows of many callers and for one caller's batch in order.
#[tokio::test(start_paused = true)]
async fn every_pattern_of_bad_rows_is_isolated_whatever_row_is_named() {
    for (names, any) in (1..=4).flat_map(|names| [(names, false), (names, true)]) {
        for n in 1..=6usize {
            for mask in 0u32..(1 << n) {
                let rows = masked(n, mask);
                let h = H::new(1, config()).await;
                h.mem().names.store(names, SeqCst);
                h.mem().reruns_any_size.store(any, SeqCst);
                flush_each_own(&h, &rows).await;
                let st = h.stats();
                assert_eq!(st.statements, h.mem().log().len() as u64);
                let bad = u64::from(mask.count_ones());
                if names == 1 {
                    // Two per failing row, and the pieces of allowed sizes.
                    assert!(
                        st.statements <= 3 * bad + 2,
                        "{rows:?}: {:?}",
                        h.mem().log()
                    );
                }
                if names == 4 && n > 1 {
                    // A proven row's failure costs only the failed
                    // statement: each failing row is in one failed
                    // statement, the one that named it.
                    let failed = h
                        .mem()
                        .log()
                        .iter()
                        .filter(|s| s.iter().any(|&v| v < 0))
                        .count();
                    assert_eq!(failed as u64, bad, "{rows:?}: {:?}", h.mem().log());
                    assert!(
                        st.statements <= 2 * bad + 2,
                        "{rows:?}: {:?}",
                        h.mem().log()
                    );
                }
                h.assert_no_leaks().await;

                if names == 4 && any && n > 1 {
                    // Each failed statement is followed by at most one
                    // statement of what is left (the flush's own first
                    // statements aside: two at most for up to 6 rows).
                    let ok = h
                        .mem()
                        .log()
                        .iter()
                        .filter(|s| s.iter().all(|&v| v >= 0))
                        .count();
                    assert!(ok as u64 <= bad + 2, "{rows:?}: {:?}", h.mem().log());
                }
                h.assert_no_leaks().await;

                // One caller's batch: the rows take effect in order.
                let h = H::new(1, config()).await;
                h.mem().names.store(names, SeqCst);
                h.mem().reruns_any_size.store(any, SeqCst);
                assert_each_own(&h, &rows, &h.many(&rows).await);
                let written: Vec<i64> = h
                    .mem()
                    .log()
                    .into_iter()
                    .filter(|s| s.iter().all(|&v| v >= 0))
                    .flatten()
                    .collect();
                let good: Vec<i64> = rows.iter().copied().filter(|&v| v >= 0).collect();
                assert_eq!(written, good, "{rows:?}: {:?}", h.mem().log());
                h.assert_no_leaks().await;
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn statement_error_fails_that_statement_only() {
    let broken = |r: &Result<i64, Error>, by: i64| {
        matches!(r, Err(e) if e.is_outcome_unknown()
            && e.to_string() == format!("statement broken by row {by}"))
    };
    let b = BREAKS_STATEMENT;

    // Five queued rows go as statements of 4 and 1: the first breaks.
    let h = H::new(1, config()).await;
    let results = flush_together(&h, &[10, 11, b, 12, 13]).await;
    assert_eq!(h.mem().log(), [vec![10, 11, b, 12], vec![13]]);
    for (v, r) in &results[..4] {
        assert!(broken(r, b), "row {v}: {r:?}");
    }
    assert!(matches!(results[4].1, Ok(13)));
    assert_eq!((h.mem().written(10), h.mem().written(13)), (0, 1));
    h.assert_end(|st| (st.split_statements, st.rows_failed), (0, 4))
        .await;

    // While isolating a bad row: only the piece that breaks fails whole.
    let h = H::new(1, config()).await;
    let results = flush_together(&h, &[-1, 2, b, 3]).await;
    assert_eq!(
        h.mem().log(),
        [
            vec![-1, 2, b, 3],
            vec![-1, 2],
            vec![-1],
            vec![2],
            vec![b, 3]
        ]
    );
    assert_own_error(-1, &results[0].1);
    assert!(matches!(results[1].1, Ok(2)));
    assert!(broken(&results[2].1, b) && broken(&results[3].1, b));
    assert_eq!((h.mem().written(2), h.mem().written(3)), (1, 0));
    h.assert_end(|st| (st.split_statements, st.rows_failed), (4, 3))
        .await;

    // An explicit batch of 7 runs as statements of 6 and 1.
    let h = H::new(1, config()).await;
    let out = h.many(&[1, 2, 3, 4, 5, 6, b]).await;
    assert_eq!(h.mem().log(), [vec![1, 2, 3, 4, 5, 6], vec![b]]);
    for (v, r) in (1..=6).zip(&out) {
        assert!(matches!(r, Ok(o) if *o == v));
    }
    assert!(broken(&out[6], b));
    h.assert_no_leaks().await;
}

/// A row of a failed statement is not sent again once the session's
/// statement time limit has passed since it was first sent: its own
/// statement, run alone, would not have run past that limit. Re-runs that
/// start within it go out as usual.
#[tokio::test(start_paused = true)]
async fn no_row_is_sent_again_once_its_limit_has_passed() {
    let h = H::limited(Mem::new(1), config(), limits(None, Some(2))).await;
    let rows = [1, 2, -3, 4];
    let hold = h.mem().hold_all();
    let mut callers = h.queue_all(&rows);
    settle().await;
    drop(hold);
    settle().await;
    assert_eq!(h.mem().log(), [rows.to_vec()]);
    // It fails 1.5 s after it was sent, within the 2 s limit: its halves
    // are sent.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [rows.to_vec(), vec![1, 2]]);
    // The first half answers 2.5 s after the rows were first sent: the
    // second half, due after it, is not sent.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log().len(), 2, "{:?}", h.mem().log());
    let out: Vec<_> = callers.iter_mut().map(|(_, f)| outcome(f)).collect();
    assert_own(1, &out[0]);
    assert_own(2, &out[1]);
    for (v, r) in [(-3, &out[2]), (4, &out[3])] {
        let e = r.as_ref().expect_err("not sent again");
        assert!(
            e.is_timeout() && e.is_retryable() && !e.is_outcome_unknown() && !e.is_db(),
            "row {v}: {e:?}"
        );
        assert!(e.to_string().contains("2000 ms"), "{e}");
        assert_eq!(h.mem().written(v), 0);
    }
    let st = h.stats();
    assert_eq!(
        (st.statements, st.split_statements, st.rows_failed),
        (2, 1, 2),
        "{st:?}"
    );
    h.assert_no_leaks().await;
}

/// Within the limit every failing row is isolated as without one: a slow
/// failure that leaves time re-runs the rows until each has its own
/// outcome.
#[tokio::test(start_paused = true)]
async fn rows_are_isolated_while_their_limit_has_not_passed() {
    let h = H::limited(Mem::new(1), config(), limits(None, Some(10))).await;
    let rows = [1, 2, -3, 4];
    let hold = h.mem().hold_all();
    let mut callers = h.queue_all(&rows);
    settle().await;
    drop(hold);
    settle().await;
    // Each statement answers 1 s after it was sent: the last of them is
    // sent 4 s after the first.
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !h.mem().release_next() {
            break;
        }
        settle().await;
    }
    let expected: [&[i64]; 5] = [&rows, &[1, 2], &[-3, 4], &[-3], &[4]];
    assert_eq!(h.mem().log(), expected);
    let out: Vec<_> = callers.iter_mut().map(|(_, f)| outcome(f)).collect();
    assert_each_own(&h, &rows, &out);
    h.assert_no_leaks().await;
}

/// With pipelined pairs, a statement queued behind a failed one whose rows
/// ran out of time is not paired: only rows within their limit go out.
#[tokio::test(start_paused = true)]
async fn rows_out_of_time_are_not_sent_in_a_pipelined_pair() {
    let mem = Mem::new(1);
    mem.pipelined.store(true, SeqCst);
    let h = H::limited(mem, config().max_rows(2), limits(None, Some(2))).await;
    let rows = [1, -2, 3, 4];
    let hold = h.mem().hold_all();
    let mut callers = h.queue_all(&rows);
    settle().await;
    drop(hold);
    settle().await;
    // Two statements of two rows, on the wire together.
    assert_eq!(h.mem().log(), [vec![1, -2], vec![3, 4]]);
    // The pair answers after 2.5 s: the second succeeded; the first failed,
    // and its rows, first sent 2.5 s ago, are not sent again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    h.mem().open_gates();
    settle().await;
    assert_eq!(h.mem().log().len(), 2, "{:?}", h.mem().log());
    let out: Vec<_> = callers.iter_mut().map(|(_, f)| outcome(f)).collect();
    assert_own(3, &out[2]);
    assert_own(4, &out[3]);
    for r in &out[..2] {
        assert!(
            r.as_ref().is_err_and(|e| e.is_timeout() && !e.is_db()),
            "{r:?}"
        );
    }
    h.assert_no_leaks().await;
}

/// A statement answered "not run" (its pipelined pair's transaction
/// failed) does not start its rows' time limit: they are sent again however
/// long the other statement took, while the failed statement's rows, past
/// their limit, are not.
#[tokio::test(start_paused = true)]
async fn rows_not_run_are_sent_whatever_the_time() {
    let mem = Mem::new(1);
    mem.pipelined.store(true, SeqCst);
    let h = H::limited(mem, config().max_rows(2), limits(None, Some(2))).await;
    let rows = [1, -2, 3, 4];
    let mut many = h.submit_many(&rows);
    assert!(poll(&mut many).is_pending());
    settle().await;
    // One caller's batch: a pair in one transaction.
    assert_eq!(h.mem().log(), [vec![1, -2], vec![3, 4]]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    h.mem().open_gates();
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, -2], vec![3, 4], vec![3, 4]]);
    let out = many_done(&mut many);
    for r in &out[..2] {
        assert!(
            r.as_ref().is_err_and(|e| e.is_timeout() && !e.is_db()),
            "{r:?}"
        );
    }
    assert_own(3, &out[2]);
    assert_own(4, &out[3]);
    assert_eq!((h.mem().written(1), h.mem().written(3)), (0, 1));
    h.assert_no_leaks().await;
}
