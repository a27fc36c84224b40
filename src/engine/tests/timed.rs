//! Timed batching (`max_delay`) and the statement size limits
//! (`max_rows`, `max_bytes`).

use super::*;

#[tokio::test(start_paused = true)]
async fn timed_batch_goes_at_the_deadline() {
    let delay = Duration::from_millis(100);
    let h = H::new(2, config().max_delay(delay)).await;
    h.mem().open_gates();
    let t0 = Instant::now();
    let tasks = h.queue_all(&[1, 2, 3]);
    settle().await;
    // Connections are free, yet nothing goes before the deadline.
    assert!(h.mem().log().is_empty());
    tokio::time::sleep_until(t0 + delay - Duration::from_millis(2)).await;
    settle().await;
    assert!(h.mem().log().is_empty());
    assert_eq!(h.queued(), [1, 2, 3]);

    tokio::time::sleep_until(t0 + delay).await;
    settle().await;
    assert_eq!(h.mem().log(), [[1, 2, 3]]);
    assert_eq!(h.mem().received_at(), [t0 + delay]);
    assert_all_own(&h, tasks);
    let st = h.stats();
    assert_eq!((st.flush_timer, st.batches), (1, 1));
    assert_eq!(st.queue_wait_max, delay);
    h.assert_no_leaks().await;
}

/// The deadline is measured on the runtime's clock, the one its timers use:
/// with the clock paused and moved ahead of the wall clock (as in an
/// application's tests), a row still waits `max_delay`.
#[tokio::test(start_paused = true)]
async fn timed_batching_follows_the_runtime_clock() {
    tokio::time::advance(Duration::from_secs(3600)).await;
    let delay = Duration::from_millis(100);
    let h = H::new(1, config().max_delay(delay)).await;
    h.mem().open_gates();
    let t0 = Instant::now();
    let task = h.spawn(1);
    settle().await;
    assert!(h.mem().log().is_empty(), "sent before its deadline");
    tokio::time::sleep_until(t0 + delay).await;
    settle().await;
    assert_eq!(h.mem().received_at(), [t0 + delay]);
    assert_ok_own(1, finished(task).await);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn timed_full_statement_goes_early() {
    let delay = Duration::from_secs(3600);
    let config = config().max_delay(delay).max_rows(4);
    let h = H::new(2, config).await;
    h.mem().open_gates();
    let t0 = Instant::now();
    let tasks = h.queue_all(&[1, 2, 3, 4, 5, 6]);
    settle().await;
    assert_eq!(h.mem().log(), [[1, 2, 3, 4]]);
    assert_eq!(h.mem().received_at(), [t0]);
    assert_eq!(h.queued(), [5, 6]);
    assert_eq!(h.stats().flush_full, 1);

    tokio::time::sleep_until(t0 + delay).await;
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, 2, 3, 4], vec![5, 6]]);
    assert_eq!(h.mem().received_at(), [t0, t0 + delay]);
    assert_all_own(&h, tasks);
    h.assert_end(|st| (st.flush_full, st.flush_timer), (1, 1))
        .await;
}

#[tokio::test(start_paused = true)]
async fn max_bytes_limits_a_statement() {
    let delay = Duration::from_secs(3600);
    let three_rows = 3 * ROW_BYTES;
    // The limit from the config, then from the backend (server packet size).
    for (max_bytes, server_limit) in [(three_rows, usize::MAX), (16 << 20, three_rows)] {
        let mut mem = Mem::new(2);
        mem.max_statement_bytes = server_limit;
        let config = config().max_delay(delay).max_bytes(max_bytes);
        let h = H::with(mem, config).await;
        h.mem().open_gates();
        let t0 = Instant::now();
        let tasks = h.queue_all(&[1, 2, 3, 4, 5, 6, 7]);
        settle().await;
        assert_eq!(h.mem().log(), [[1, 2, 3], [4, 5, 6]]);
        assert_eq!(h.mem().received_at(), [t0, t0]);
        assert_eq!(h.queued(), [7]);
        tokio::time::sleep_until(t0 + delay).await;
        settle().await;
        assert_eq!(h.mem().log(), [vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
        assert_all_own(&h, tasks);
        h.assert_end(|st| (st.flush_full, st.flush_timer), (2, 1))
            .await;
    }

    // A row larger than the limit fails alone, before it queues.
    let config = config().max_bytes(ROW_BYTES - 1);
    let h = H::new(1, config).await;
    assert!(matches!(poll(&mut h.submit(1)), Poll::Ready(Err(e)) if e.is_too_large()));
    assert!(h.mem().log().is_empty());
    assert_eq!((h.stats().queued, h.e.permits.available_permits()), (0, 16));
}
