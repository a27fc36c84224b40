//! `max_in_flight`, explicit batches (`submit_many`) and pipelined pairs of
//! statements.

use super::*;

/// Twenty rows at once on four gated connections, replies released one by
/// one; returns the most statements open at once.
async fn most_open_statements(config: BatchConfig) -> usize {
    let limit = config.max_in_flight;
    let h = H::new(4, config).await;
    let rows: Vec<i64> = (1..=20).collect();
    let tasks: Vec<_> = rows.iter().map(|&v| (v, h.spawn(v))).collect();
    settle().await;
    loop {
        if let Some(limit) = limit {
            assert!(h.mem().in_use() <= limit);
            assert!(h.stats().in_flight <= limit as u64);
        }
        if !h.mem().release_next() {
            break;
        }
        settle().await;
    }
    for (v, task) in tasks {
        assert_ok_own(v, finished(task).await);
        assert_eq!(h.mem().written(v), 1);
    }
    h.assert_no_leaks().await;
    h.mem().max_open()
}

#[tokio::test(start_paused = true)]
async fn max_in_flight_bounds_concurrent_flushes() {
    assert_eq!(most_open_statements(config()).await, 4);
    let limited = config().max_in_flight(2);
    assert_eq!(most_open_statements(limited).await, 2);

    // An explicit batch waits for a flush slot too.
    let h = H::new(2, config().max_in_flight(1)).await;
    let a = h.sent(1).await;
    let mut many = h.submit_many(&[2, 3]);
    assert!(poll(&mut many).is_pending());
    settle().await;
    assert_eq!(h.mem().log(), [[1]]);
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    h.drain().await;
    assert!(matches!(poll(&mut many), Poll::Ready(Ok(out)) if out.len() == 2));
    assert_ok_own(1, finished(a).await);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn submit_many_runs_rows_in_order() {
    for (max_rows, statements) in [
        (2, vec![vec![1, 2], vec![3, 4], vec![5, 6], vec![7]]),
        (1000, vec![vec![1, 2, 3, 4, 5, 6], vec![7]]),
    ] {
        let h = H::new(1, config().max_rows(max_rows)).await;
        let rows = [1, 2, 3, 4, 5, 6, 7];
        let out = h.many(&rows).await;
        assert_eq!(h.mem().log(), statements);
        assert_each_own(&h, &rows, &out);
        assert!(matches!(poll(&mut h.submit_many(&[])), Poll::Ready(Ok(v)) if v.is_empty()));
        h.assert_no_leaks().await;
    }
}

#[tokio::test(start_paused = true)]
async fn submit_many_keeps_two_statements_on_the_wire() {
    let h = pipelined(1, 2).await;
    let rows = [1, 2, 3, 4, 5, 6, 7];
    let mut many = h.submit_many(&rows);
    assert!(poll(&mut many).is_pending());
    settle().await;
    // The second statement is sent before the first is answered.
    assert_eq!(h.mem().log(), [vec![1, 2], vec![3, 4]]);
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log().len(), 2, "the pair is answered together");
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, 2], vec![3, 4], vec![5, 6], vec![7]]);
    h.drain().await;
    assert_each_own(&h, &rows, &many_done(&mut many));
    h.assert_end(|st| (st.statements, st.rows), (4, 7)).await;
}

/// `BatchConfig::pipeline(false)`: a backend that pipelines still gets one
/// statement at a time, each answered before the next is sent.
#[tokio::test(start_paused = true)]
async fn pipeline_off_sends_one_statement_at_a_time() {
    let mem = Mem::new(1);
    mem.pipelined.store(true, SeqCst);
    let h = H::with(mem, config().max_rows(2).pipeline(false)).await;
    let rows = [1, 2, 3, 4, 5];
    let mut many = h.submit_many(&rows);
    assert!(poll(&mut many).is_pending());
    settle().await;
    assert_eq!(
        h.mem().log(),
        [vec![1, 2]],
        "only the first statement is on the wire"
    );
    for sent in 2..=3 {
        assert!(h.mem().release_next());
        settle().await;
        assert_eq!(h.mem().log().len(), sent);
    }
    assert!(h.mem().release_next());
    h.drain().await;
    assert_each_own(&h, &rows, &many_done(&mut many));
    assert_eq!(h.stats().pipelined_statements, 0);
    h.assert_no_leaks().await;
}

/// `submit_many` of `rows` on a pipelining pool of 2-row statements, all
/// gates open: each row's result and the statements received.
async fn many_pipelined(rows: &[i64]) -> (Vec<Result<i64, Error>>, Vec<Vec<i64>>, H) {
    let h = pipelined(1, 2).await;
    let out = h.many(rows).await;
    let log = h.mem().log();
    (out, log, h)
}

#[tokio::test(start_paused = true)]
async fn a_failed_statement_of_an_ordered_pair_rolls_the_pair_back() {
    // The first statement fails: the second, already sent, is rolled back
    // with it and runs again after the first's rows are isolated, so the
    // rows still take effect in their order.
    let (out, log, h) = many_pipelined(&[1, -2, 3, 4]).await;
    assert_eq!(
        log,
        [vec![1, -2], vec![3, 4], vec![1], vec![-2], vec![3, 4]]
    );
    // The second fails: the first, already run, is rolled back too.
    let (out2, log2, h2) = many_pipelined(&[5, 6, 7, -8]).await;
    assert_eq!(
        log2,
        [vec![5, 6], vec![7, -8], vec![5, 6], vec![7], vec![-8]]
    );
    for (h, rows, out) in [(&h, [1, -2, 3, 4], out), (&h2, [5, 6, 7, -8], out2)] {
        assert_each_own(h, &rows, &out);
        h.assert_no_leaks().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_flusher_pipelines_when_more_than_a_statement_is_queued() {
    let h = pipelined(1, 2).await;
    let hold = h.mem().hold_all();
    let rows = [1, -2, 3, 4, 5];
    let callers = h.queue_all(&rows);
    drop(hold);
    settle().await;
    // Two statements' worth on one connection, each its own autocommit
    // statement: the bad row in the first does not undo the second.
    assert_eq!(h.mem().log(), [vec![1, -2], vec![3, 4]]);
    assert_eq!(h.mem().written(3), 1);
    h.drain().await;
    assert_eq!(
        h.mem().log(),
        [vec![1, -2], vec![3, 4], vec![1], vec![-2], vec![5]]
    );
    let out: Vec<_> = callers
        .into_iter()
        .map(|(_, mut c)| outcome(&mut c))
        .collect();
    assert_each_own(&h, &rows, &out);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_stale_statement_of_a_pair_is_healed_with_its_pair() {
    let h = pipelined(1, 2).await;
    h.mem().stale_once.store(true, SeqCst);
    let rows = [1, 2, 3, 4];
    assert_each_own(&h, &rows, &h.many(&rows).await);
    assert_eq!(
        h.mem().log(),
        [vec![1, 2], vec![3, 4], vec![1, 2], vec![3, 4]]
    );
    h.assert_no_leaks().await;
}
