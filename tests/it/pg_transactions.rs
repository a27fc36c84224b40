//! PostgreSQL-only transaction behaviour: statements prepared and pipelined
//! with `BEGIN`/`COMMIT` in one round trip, tokio-postgres' view of an
//! aborted `COMMIT`, and cancellation while the replies are in flight.
//! What both backends share is in `transactions.rs`. The tests of the pool
//! run as `pg::name` and behind each pooler (the proxy between the pool and
//! the pooler): `pgbouncer::name` (transaction mode),
//! `pgbouncer_statement::name` (statement mode: each checks that what it
//! would send is refused before anything is sent), `pgpool::name` and
//! `pgpool_raw::name`.

use crate::common;

use crate::common::backend::{Pg, TestOutcome, pg_and_bouncer};
use crate::common::tx::{Sent, TxBackend, hold_until_sent, pg_connect, three};
use batchpool::postgres::Pool;

const INS: &str = <Pg as TxBackend>::INS;
const INS_BANG: &str = <Pg as TxBackend>::INS_BANG;
const TOUCH: &str = <Pg as TxBackend>::TOUCH;

pg_and_bouncer! {
    (flavor = "current_thread") => [
        group_of_three_is_one_round_trip_and_one_transaction,
        cancelled_atomic_group_leaves_no_open_transaction,
        cancelled_transaction_statement_then_drop_rolls_back,
    ],
}
// Not behind PgBouncer: tokio_postgres_reports_commit_of_aborted_transaction_as_ok
// checks tokio-postgres itself on a direct client (whose `execute` prepares
// named statements); no batchpool pool is involved.

async fn group_of_three_is_one_round_trip_and_one_transaction<B: TxBackend<Pool = Pool>>() {
    let env = B::env(1).await;
    // Connection opened (not through `get`, whose return costs a check).
    B::query_i64(&env.pool, "SELECT 1::int8", &[])
        .await
        .unwrap();

    // First use of the texts on this connection: one round trip prepares all
    // three, one runs the group. Unnamed mode (behind PgBouncer) learns the
    // texts' parameter types once per pool instead, inside BEGIN … ROLLBACK:
    // one round trip for BEGIN and the prepares, one for their Close and the
    // ROLLBACK (nothing stays prepared on the server connection), then the
    // group.
    let (ten, twenty) = (three::<B>(10, "v10", "v10"), three::<B>(20, "v20", "v20"));
    if !B::TRANSACTIONS {
        return env.refused(B::atomic(&env.pool, &ten)).await;
    }
    let (out, trips, log) = env.count(B::atomic(&env.pool, &ten)).await;
    let out = out.unwrap();
    // Through pgpool-II the group goes out one message at a time: BEGIN,
    // each statement, COMMIT.
    let group_trips = B::in_turn(1, 5);
    let (first_use, learned): (u64, &[&str]) = if B::BEHIND_POOLER {
        (2 + group_trips, &["BEGIN", "ROLLBACK"])
    } else {
        (1 + group_trips, &[])
    };
    assert_eq!(trips, first_use, "prepare or learn (once) + the group");
    assert_eq!(
        out.iter().map(|o| o.rows_affected()).collect::<Vec<_>>(),
        [1, 1, 1]
    );
    let group = ["BEGIN", INS, INS_BANG, TOUCH, "COMMIT"];
    assert_eq!(log, [learned, &group].concat());

    // Prepared: one round trip.
    let (out, trips, log) = env.count(B::atomic(&env.pool, &twenty)).await;
    out.unwrap();
    assert_eq!(trips, group_trips);
    assert_eq!(log, ["BEGIN", INS, INS_BANG, TOUCH, "COMMIT"]);

    // One transaction wrote all three rows' versions.
    let sql = "SELECT count(DISTINCT xmin::text) FROM item WHERE k IN (20, 21)";
    assert_eq!(B::query_i64(&env.pool, sql, &[]).await.unwrap(), 1);
    let v = B::query_text(&env.pool, "SELECT v FROM item WHERE k = 20", &[]).await;
    assert_eq!(v.unwrap(), [[Some("v20+".to_string())]]);
    env.pooled_connections_clean().await;
}

/// The premise of the detection above: tokio-postgres reports the `COMMIT`
/// of an aborted transaction (command tag `ROLLBACK`) as success.
#[tokio::test]
async fn tokio_postgres_reports_commit_of_aborted_transaction_as_ok() {
    let env = Pg::env(1).await;
    let client = pg_connect(&env.db).await;
    client
        .execute("INSERT INTO item (k, v) VALUES (1, 'a')", &[])
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute("INSERT INTO item (k, v) VALUES (2, 'b')", &[])
        .await
        .unwrap();
    let dup = client
        .execute("INSERT INTO item (k, v) VALUES (1, 'dup')", &[])
        .await
        .unwrap_err();
    assert_eq!(dup.code().map(|c| c.code()), Some("23505"));
    client.batch_execute("COMMIT").await.expect("COMMIT is Ok");
    assert_eq!(env.keys().await, vec![1], "yet nothing committed");
}

async fn cancelled_atomic_group_leaves_no_open_transaction<B: TxBackend<Pool = Pool>>() {
    let env = B::env(1).await;
    let (zero, ten) = (three::<B>(0, "x", "y"), three::<B>(10, "x", "y"));
    if !B::TRANSACTIONS {
        env.insert(0, "warm").await;
        return env.refused(B::atomic(&env.pool, &ten)).await;
    }
    B::atomic(&env.pool, &zero).await.unwrap(); // prepared
    if B::IN_TURN {
        return cancelled_in_turn_group_commits_nothing(env, &ten).await;
    }

    {
        let fut = B::atomic(&env.pool, &ten);
        tokio::pin!(fut);
        hold_until_sent(&env.proxy, &mut fut).await;
        // The server runs the whole group meanwhile; only its replies wait.
        let patience = common::backend::Patience::new("the group to run");
        while env.keys().await.len() != 4 {
            patience.wait().await;
        }
        // `fut` is dropped here, mid-flight.
    }
    assert_eq!(
        env.pool.status().available,
        0,
        "the guard holds the connection"
    );
    env.proxy.hold_replies(false);

    env.pooled_connections_clean().await;
    assert_eq!(env.pool.status().size, 1);
    // Written in one go, the group ran to its COMMIT: all of it committed.
    assert_eq!(env.keys().await, vec![0, 1, 10, 11]);
    let log = env.logged();
    let rollback = log
        .iter()
        .rposition(|s| s == "ROLLBACK")
        .expect("guard's ROLLBACK");
    assert_eq!(
        log[rollback - 1],
        env.expect(&[Sent::Commit])[0],
        "ROLLBACK came after the group: {log:?}"
    );
}

/// [`cancelled_atomic_group_leaves_no_open_transaction`] where the group
/// goes out one message at a time (through pgpool-II): cancelled while its
/// `BEGIN` waits for an answer, none of it ran, and the guard's `ROLLBACK`
/// ends the transaction.
async fn cancelled_in_turn_group_commits_nothing<B: TxBackend<Pool = Pool>>(
    env: common::tx::Env<B>,
    group: &common::tx::Group<'_>,
) {
    {
        let fut = B::atomic(&env.pool, group);
        tokio::pin!(fut);
        hold_until_sent(&env.proxy, &mut fut).await;
        let patience = common::backend::Patience::new("the transaction to be open");
        while env.open_transactions().await != 1 {
            patience.wait().await;
        }
    }
    env.proxy.hold_replies(false);
    env.pooled_connections_clean().await;
    assert_eq!(env.keys().await, vec![0, 1], "nothing of the group ran");
    // The transaction control the pool sent (pgpool-II's own questions
    // about functions' volatility show in the log too).
    let control = env.expect(&[Sent::Begin, Sent::Commit, Sent::Rollback]);
    let log: Vec<String> = env
        .logged()
        .into_iter()
        .filter(|s| control.contains(s))
        .collect();
    assert_eq!(
        log[log.len() - 2..],
        env.expect(&[Sent::Begin, Sent::Rollback]),
        "{log:?}"
    );
}

/// The first statement, which carries the `BEGIN`, is cancelled in flight.
async fn cancelled_transaction_statement_then_drop_rolls_back<B: TxBackend<Pool = Pool>>() {
    let env = B::env(1).await;
    env.insert(0, "warm").await;

    let mut tx = env.pool.begin();
    if !B::TRANSACTIONS {
        return env.refused(tx.execute(INS, &[&7i32, &"seven"])).await;
    }
    hold_until_sent(&env.proxy, tx.execute(INS, &[&7i32, &"seven"])).await;
    let patience = common::backend::Patience::new("the transaction to be open");
    while env.open_transactions().await != 1 {
        patience.wait().await;
    }
    assert!(tx.is_begun());
    drop(tx);
    env.proxy.hold_replies(false);
    env.pooled_connections_clean().await;
    assert_eq!(env.keys().await, vec![0], "row 7 rolled back");
}
