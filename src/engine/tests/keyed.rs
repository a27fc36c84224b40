//! Keyed writes: rows of one key never share a statement, and go in call
//! order, also when a statement fails and its rows are run again.

use super::*;

/// A pool of one connection whose rows are keyed (see `Mem::keyed`).
async fn keyed(max_rows: usize) -> H {
    let h = H::new(1, config().max_rows(max_rows)).await;
    h.mem().keyed.store(true, SeqCst);
    h
}

/// The position in the log of the first statement that carried row `v`
/// and succeeded (every row of it written).
fn written_at(h: &H, v: i64) -> usize {
    let log = h.mem().log();
    log.iter()
        .position(|rows| rows.contains(&v) && rows.iter().all(|&r| r >= 0))
        .unwrap_or_else(|| panic!("row {v} never written: {log:?}"))
}

#[tokio::test(start_paused = true)]
async fn rows_of_one_key_go_in_successive_statements() {
    // Keys 1, 2, 1, 3, 1, 2: cut where a key comes again, in order.
    let h = keyed(1000).await;
    let rows = [1, 2, 101, 3, 201, 102];
    let out = h.many(&rows).await;
    assert_eq!(h.mem().log(), [vec![1, 2], vec![101, 3], vec![201, 102]]);
    assert_each_own(&h, &rows, &out);

    // Callers queued together: the same cuts, one flush.
    let h = keyed(1000).await;
    flush_each_own(&h, &rows).await;
    assert_eq!(h.mem().log(), [vec![1, 2], vec![101, 3], vec![201, 102]]);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_statement_keeps_its_keys_before_the_next_ones() {
    // Row -5 fails its statement; its rows are run again (halves) before
    // the statement of the repeated keys.
    for rows in [
        vec![1, 2, -5, 3, 101, 102],
        vec![1, -5, 2, 101, -105, 102, 201],
        vec![4, 3, 2, 1, 104, -7, 103, 102, 101, 204],
    ] {
        let h = keyed(1000).await;
        flush_each_own(&h, &rows).await;
        for &v in rows.iter().filter(|&&v| v >= 0) {
            for &later in rows
                .iter()
                .filter(|&&w| w >= 0 && w > v && w % 100 == v % 100)
            {
                assert!(
                    written_at(&h, v) < written_at(&h, later),
                    "{v} before {later}: {:?}",
                    h.mem().log()
                );
            }
        }
        for rows in h.mem().log() {
            let mut keys: Vec<i64> = rows.iter().map(|v| v.abs() % 100).collect();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), rows.len(), "a key twice in {rows:?}");
        }
        h.assert_no_leaks().await;
    }
}
