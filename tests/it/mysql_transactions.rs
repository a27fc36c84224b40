//! MariaDB-only transaction behaviour: each statement of a group is its own
//! round trip, and cancellation while the server is busy. What both
//! backends share is in `transactions.rs`.

use std::time::Duration;

use crate::common::backend::My;
use crate::common::tx::{Env, TxBackend, hold_until_sent, three};
use mysql_async::Params;

const INS: &str = <My as TxBackend>::INS;
const TOUCH: &str = <My as TxBackend>::TOUCH;

fn p(params: impl Into<Params>) -> Params {
    params.into()
}

async fn env(max_size: usize) -> Env<My> {
    My::env(max_size).await
}

#[tokio::test]
async fn group_of_three_is_n_plus_two_round_trips_and_one_transaction() {
    let env = env(1).await;
    let (zero, ten) = (three::<My>(0, "v", "w"), three::<My>(10, "v", "w"));
    My::atomic(&env.pool, &zero).await.unwrap(); // prepared

    let (out, trips, log) = env.count(My::atomic(&env.pool, &ten)).await;
    let out = out.unwrap();
    assert_eq!(
        out.iter().map(|o| o.rows_affected()).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    assert_eq!(trips, 5, "START TRANSACTION + 3 statements + COMMIT");
    assert_eq!(
        log,
        [
            "Query START TRANSACTION",
            "Execute INSERT",
            "Execute INSERT",
            "Execute UPDATE",
            "Query COMMIT"
        ]
    );
    assert_eq!(env.keys().await, vec![0, 1, 10, 11]);
    env.pooled_connections_clean().await;
}

#[tokio::test]
async fn cancelled_atomic_group_commits_nothing_and_leaves_no_open_transaction() {
    let env = env(1).await;
    const NAP: &str = "DO SLEEP(1)";
    env.pool
        .atomic([(INS, p((0, "warm"))), (NAP, Params::Empty)])
        .await
        .unwrap();

    // Cancelled while the server sleeps in statement 1, after statement 0
    // ran inside the transaction.
    let fut = env.pool.atomic([(INS, p((10, "x"))), (NAP, Params::Empty)]);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), fut)
            .await
            .is_err()
    );

    // Wait for the server to notice and roll back.
    env.no_open_transactions().await;
    assert_eq!(env.open_transactions().await, 0);
    assert_eq!(env.keys().await, vec![0], "nothing of the cancelled group");
    env.pooled_connections_clean().await;
    // The pool serves again.
    env.insert(11, "y").await;
    assert_eq!(env.keys().await, vec![0, 11]);
}

/// A later statement (after `START TRANSACTION` and a first one) is
/// cancelled in flight.
#[tokio::test]
async fn cancelled_transaction_statement_then_drop_rolls_back() {
    let env = env(1).await;
    env.insert(0, "warm").await;

    let mut tx = env.pool.begin();
    tx.execute(INS, (7, "seven")).await.unwrap();
    hold_until_sent(&env.proxy, tx.execute(TOUCH, (7,))).await;
    drop(tx);
    env.proxy.hold_replies(false);
    env.no_open_transactions().await;
    env.pooled_connections_clean().await;
    assert_eq!(env.keys().await, vec![0], "row 7 rolled back");
}
