//! Queue bounds: waiting for a slot, a slot reserved ahead, rejecting when
//! full.

use super::*;

#[tokio::test(start_paused = true)]
async fn queue_full_wait_blocks_until_a_flush_takes_rows() {
    let h = H::new(1, config().queue_capacity(2)).await;
    let a = h.sent(1).await;
    let queued = h.queue_all(&[2, 3]);
    settle().await;
    let mut d = h.submit(4);
    assert!(poll(&mut d).is_pending());
    settle().await;
    assert!(poll(&mut d).is_pending());
    assert_eq!((h.queued(), h.stats().queued), (vec![2, 3], 2));

    // A flush takes [2, 3] (its statement still in flight): a slot is free.
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    assert!(poll(&mut d).is_pending());
    assert_eq!(h.queued(), [4]);

    drain_all_own(&h, (1, a), queued, (4, d)).await;
    h.assert_no_leaks().await;
}

/// A slot reserved ahead of the row (tower's `poll_ready`) is the row's
/// slot: the row queues without waiting, and the slot comes back when a
/// flush takes the row. A slot of another queue is not taken for this one.
#[tokio::test(start_paused = true)]
async fn a_reserved_slot_is_the_rows_own() {
    let h = H::new(1, config().queue_capacity(1)).await;
    let a = h.sent(1).await;
    let slot = h.e.queue_slots().clone().try_acquire_owned().unwrap();
    assert_eq!(h.e.queue_slots().available_permits(), 0);
    let (e, q) = (h.e.clone(), h.q.clone());
    let mut b: BoxFut<_> = Box::pin(async move {
        let work = e.enter()?;
        e.submit(&q, 2, ROW_BYTES, Some(slot), work, None).await
    });
    assert!(poll(&mut b).is_pending());
    assert_eq!(h.queued(), [2], "queued on its reserved slot");

    // A slot of another semaphore is dropped, and the row waits for one.
    let foreign = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
    let (e, q) = (h.e.clone(), h.q.clone());
    let mut c: BoxFut<_> = Box::pin(async move {
        let work = e.enter()?;
        e.submit(&q, 3, ROW_BYTES, Some(foreign), work, None).await
    });
    assert!(poll(&mut c).is_pending());
    assert_eq!(h.queued(), [2]);

    // The flush that takes [2] gives its slot back: now [3] queues.
    assert!(h.mem().release_next());
    settle().await;
    assert!(poll(&mut c).is_pending());
    assert_eq!(h.queued(), [3]);
    drain_all_own(&h, (1, a), vec![(2, b)], (3, c)).await;
    assert_eq!(h.e.queue_slots().available_permits(), 1);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn queue_full_reject_fails_at_once() {
    let config = config().queue_capacity(2).queue_full(QueueFull::Reject);
    let h = H::new(1, config).await;
    let a = h.sent(1).await;
    let queued = h.queue_all(&[2, 3]);
    settle().await;
    assert!(matches!(poll(&mut h.submit(4)), Poll::Ready(Err(e)) if e.is_overloaded()));
    assert_eq!(h.queued(), [2, 3]);

    assert!(h.mem().release_next());
    settle().await;
    let mut e = h.submit(5);
    assert!(poll(&mut e).is_pending());
    assert_eq!(h.queued(), [5]);

    drain_all_own(&h, (1, a), queued, (5, e)).await;
    assert_eq!(h.mem().times_sent(4), 0);
    h.assert_no_leaks().await;
}
