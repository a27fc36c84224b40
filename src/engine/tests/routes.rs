//! Routes: learning a text (bounded by its callers' waits), re-learning a
//! stale one.

use super::*;

/// A statement refused as stale (its table changed under the prepared
/// statement; nothing ran) is re-run once, and its route is re-learned.
#[tokio::test(start_paused = true)]
async fn a_stale_statement_is_rerun_once_and_relearned() {
    let h = H::new(1, config()).await;
    assert_eq!(h.mem().prepared.load(SeqCst), 1);
    h.mem().stale_once.store(true, SeqCst);
    let rows = [1, 2, 3];
    for (v, r) in flush_together(&h, &rows).await {
        assert_ok_own(v, r);
        assert_eq!(h.mem().written(v), 1);
    }
    assert_eq!(h.mem().log(), [rows.to_vec(), rows.to_vec()]);
    // The next caller of the text re-learns its route in the background.
    h.e.route(SQL, None).await.unwrap();
    settle().await;
    assert_eq!(h.mem().prepared.load(SeqCst), 2);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_caller_waiting_for_its_text_to_be_learned_times_out_at_its_deadline() {
    // Learning a new text takes a statement on the server (stuck here, as
    // behind a table lock). Its callers wait no longer than their own wait;
    // the learning goes on, and once done the text is coalesced as usual.
    // (Not re-learned while the test runs.)
    let config = config().relearn_after(Duration::from_secs(3600));
    let h = H::limited(Mem::new(2), config, limits(Some(1), None)).await;
    let gate = Arc::new(Notify::new());
    *h.mem().prepare_gate.lock().unwrap() = Some(gate.clone());
    let other = "INSERT INTO u (v) VALUES ($1)";
    let route = |e: Arc<Engine<Mem>>| async move {
        let _work = e.enter()?;
        let deadline = e.wait_deadline();
        e.route(other, deadline).await.map(|r| r.explain())
    };
    let start = Instant::now();
    let callers: Vec<_> = (0..3).map(|_| tokio::spawn(route(h.e.clone()))).collect();
    tokio::time::sleep_until(start + Duration::from_millis(999)).await;
    assert!(callers.iter().all(|c| !c.is_finished()));
    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    settle().await;
    for c in callers {
        let e = finished(c).await.expect_err("learning is stuck");
        assert!(e.is_timeout() && !e.is_outcome_unknown(), "{e}");
    }
    let prepared = h.mem().prepared.load(SeqCst);
    *h.mem().prepare_gate.lock().unwrap() = None;
    gate.notify_one();
    settle().await;
    assert_eq!(h.mem().prepared.load(SeqCst), prepared + 1, "learned once");
    let later = tokio::spawn(route(h.e.clone()));
    settle().await;
    let later = finished(later).await;
    assert!(later.expect("learned").is_coalesced());
    assert_eq!(
        h.mem().prepared.load(SeqCst),
        prepared + 1,
        "from the cache"
    );
    h.assert_no_leaks().await;
}
