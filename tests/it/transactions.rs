//! `Pool::atomic` and `Pool::begin` against a real PostgreSQL and a real
//! MariaDB: what reaches the server is counted exactly, on the wire (a proxy
//! counting round trips) and in the server's statement log (see
//! `common/tx.rs`). Every test runs as `pg::name` and `mysql::name`, and
//! behind each pooler (the proxy between the pool and the pooler, the log
//! the server's): PgBouncer in transaction mode (`pgbouncer::name`), in
//! statement mode (`pgbouncer_statement::name`: what needs a transaction
//! block is refused before anything is sent, and the tests check that
//! instead), and pgpool-II (`pgpool::name`, `pgpool_raw::name`: a
//! transaction's messages go out one at a time, as on MySQL, and after a
//! transaction in which a statement failed the pool asks pgpool-II whether
//! it knows the transaction ended, see [`Env::resynced`]). Where the
//! protocols differ (PostgreSQL pipelines `BEGIN` and `COMMIT` with the
//! statements, MySQL and pgpool-II send each on its own) the expected
//! counts are given for both (`TestBackend::in_turn`). Tests of one backend only are in `pg_transactions.rs` and
//! `mysql_transactions.rs`.
//!
//! [`Env::resynced`]: crate::common::tx::Env::resynced

use crate::common::backend::{DbError, TestOutcome, count, three, vals};
use crate::common::tx::{Sent, TxBackend};
use batchpool::Error;

three! {
    (flavor = "current_thread") => [
        single_statement_group_is_one_round_trip_without_begin,
        failing_statement_rolls_back_the_whole_group_and_names_it,
        lazy_transaction_round_trips,
        empty_transactions_and_groups_send_nothing,
        execute_and_commit_alone_is_autocommit_and_last_rides_with_commit,
        failed_statement_makes_commit_fail_and_roll_back,
        dropping_an_open_transaction_rolls_back_and_returns_a_clean_connection,
        transaction_control_and_bad_parameters_are_refused_before_sending,
    ],
    (flavor = "multi_thread", worker_threads = 2) => [
        atomic_and_transactions_from_many_tasks,
    ],
}

async fn single_statement_group_is_one_round_trip_without_begin<B: TxBackend>() {
    let env = B::env(1).await;
    // Warm-up: connection opened, statement prepared.
    env.insert(0, "warm").await;

    let group = [(B::INS, vals![1, "a"])];
    let (out, trips, log) = env.count(B::atomic(&env.pool, &group)).await;
    let out = out.unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].rows_affected(), 1);
    assert_eq!(trips, 1);
    assert_eq!(
        log,
        env.expect(&[Sent::Statement(B::INS)]),
        "no BEGIN/COMMIT may reach the server"
    );
    assert_eq!(env.keys().await, vec![0, 1]);
    env.pooled_connections_clean().await;
}

async fn failing_statement_rolls_back_the_whole_group_and_names_it<B: TxBackend>() {
    let env = B::env(1).await;
    let group = [
        (B::INS, vals![1, "one"]),
        (B::INS_BANG, vals![2, "two"]),
        (B::TOUCH, vals![1]),
    ];
    if !B::TRANSACTIONS {
        env.insert(0, "warm").await;
        env.refused(B::atomic(&env.pool, &group)).await;
        assert_eq!(env.keys().await, vec![0]);
        return env.pooled_connections_clean().await;
    }
    B::atomic(&env.pool, &group).await.unwrap();

    // Statement 1 hits the primary key of row 1: nothing of the group stays.
    let group = [
        (B::INS, vals![30, "thirty"]),
        (B::INS_BANG, vals![1, "dup"]),
        (B::TOUCH, vals![30]),
    ];
    let (out, trips, log) = env.count(B::atomic(&env.pool, &group)).await;
    let (trips, log) = env.resynced(trips, log);
    let err = out.unwrap_err();
    assert_eq!(err.index(), Some(1), "{err}");
    let (code, native) = B::codes(DbError::DuplicateKey);
    assert_eq!(err.code(), Some(code), "{err}");
    assert!(err.error().is_db());
    assert_eq!(B::native_code(err.error()).as_deref(), Some(native));
    assert_eq!(
        B::constraint(err.error()).as_deref(),
        B::pick(Some("item_pkey"), None)
    );
    assert!(
        err.to_string()
            .starts_with("statement 1 of the atomic group failed")
    );
    // PostgreSQL: one round trip; the third statement is rejected (25P02)
    // before it executes, and COMMIT is still sent and turns into ROLLBACK.
    // MySQL, and PostgreSQL through pgpool-II: BEGIN, statement 0,
    // statement 1, ROLLBACK, one at a time.
    assert_eq!(trips, B::in_turn(1, 4));
    let end = B::in_turn(Sent::Commit, Sent::Rollback);
    let sent = [
        Sent::Begin,
        Sent::Statement(B::INS),
        Sent::Statement(B::INS_BANG),
        end,
    ];
    assert_eq!(log, env.expect(&sent));
    assert_eq!(env.keys().await, vec![1, 2], "row 30 must not be committed");
    env.pooled_connections_clean().await;

    // The connection serves the next group normally.
    let group = [(B::INS, vals![31, "x"]), (B::TOUCH, vals![31])];
    B::atomic(&env.pool, &group).await.unwrap();
    assert_eq!(env.keys().await, vec![1, 2, 31]);
}

/// PostgreSQL: two round trips (`BEGIN` rides with the first statement);
/// MySQL, and PostgreSQL through pgpool-II: three (`BEGIN`, the statement,
/// `COMMIT`).
async fn lazy_transaction_round_trips<B: TxBackend>() {
    let env = B::env(1).await;
    env.insert(0, "warm").await;
    let (_, available) = B::size_available(&env.pool);

    let mut tx = B::begin(&env.pool);
    assert!(!B::is_begun(&tx));
    assert_eq!(
        B::size_available(&env.pool).1,
        available,
        "no connection taken yet"
    );
    if !B::TRANSACTIONS {
        env.refused(B::tx_execute(&mut tx, B::INS, &vals![1, "a"]))
            .await;
        assert!(!B::is_begun(&tx));
        let (out, trips, _) = env.count(B::tx_commit(tx)).await;
        out.unwrap();
        assert_eq!(trips, 0, "nothing to commit");
        return env.pooled_connections_clean().await;
    }
    let (out, first, log) = env
        .count(B::tx_execute(&mut tx, B::INS, &vals![1, "a"]))
        .await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(first, B::in_turn(1, 2), "BEGIN, then the statement");
    assert_eq!(log, env.expect(&[Sent::Begin, Sent::Statement(B::INS)]));
    assert!(B::is_begun(&tx));
    assert_eq!(env.keys().await, vec![0], "not committed yet");

    let (out, second, log) = env.count(B::tx_commit(tx)).await;
    out.unwrap();
    assert_eq!(first + second, B::in_turn(2, 3));
    assert_eq!(log, env.expect(&[Sent::Commit]));
    assert_eq!(env.keys().await, vec![0, 1]);
    env.pooled_connections_clean().await;
}

async fn empty_transactions_and_groups_send_nothing<B: TxBackend>() {
    let env = B::env(2).await;
    env.insert(0, "warm").await;
    let status = B::size_available(&env.pool);

    let (out, trips, log) = env.count(B::tx_commit(B::begin(&env.pool))).await;
    out.unwrap();
    assert_eq!((trips, log.len()), (0, 0));
    let (out, trips, log) = env.count(B::tx_rollback(B::begin(&env.pool))).await;
    out.unwrap();
    assert_eq!((trips, log.len()), (0, 0));
    let (_, trips, log) = env.count(async { drop(B::begin(&env.pool)) }).await;
    assert_eq!((trips, log.len()), (0, 0));
    let (out, trips, log) = env.count(B::atomic(&env.pool, &[])).await;
    assert!(out.unwrap().is_empty());
    assert_eq!((trips, log.len()), (0, 0));

    assert_eq!(B::size_available(&env.pool), status, "size, available");
}

async fn execute_and_commit_alone_is_autocommit_and_last_rides_with_commit<B: TxBackend>() {
    let env = B::env(1).await;
    let warm = [(B::INS, vals![0, "warm"]), (B::TOUCH, vals![0])];
    if B::TRANSACTIONS {
        B::atomic(&env.pool, &warm).await.unwrap();
    } else {
        // One statement at a time: each is its own transaction.
        for (sql, params) in &warm {
            B::atomic(&env.pool, &[(sql, params.clone())])
                .await
                .unwrap();
        }
    }

    let tx = B::begin(&env.pool);
    let (out, trips, log) = env
        .count(B::tx_execute_and_commit(tx, B::INS, &vals![1, "a"]))
        .await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(trips, 1);
    assert_eq!(
        log,
        env.expect(&[Sent::Statement(B::INS)]),
        "no BEGIN, no COMMIT"
    );

    // PostgreSQL: BEGIN rides with the first statement, COMMIT with the
    // last; MySQL, and PostgreSQL through pgpool-II: BEGIN, each statement,
    // COMMIT.
    let mut tx = B::begin(&env.pool);
    if !B::TRANSACTIONS {
        env.refused(B::tx_execute(&mut tx, B::INS, &vals![2, "b"]))
            .await;
        assert_eq!(env.keys().await, vec![0, 1]);
        return env.pooled_connections_clean().await;
    }
    let (out, trips, log) = env
        .count(async {
            B::tx_execute(&mut tx, B::INS, &vals![2, "b"])
                .await
                .unwrap();
            B::tx_execute_and_commit(tx, B::TOUCH, &vals![2]).await
        })
        .await;
    assert_eq!(out.unwrap().rows_affected(), 1);
    assert_eq!(trips, B::in_turn(2, 4));
    let sent = [
        Sent::Begin,
        Sent::Statement(B::INS),
        Sent::Statement(B::TOUCH),
        Sent::Commit,
    ];
    assert_eq!(log, env.expect(&sent));
    assert_eq!(env.keys().await, vec![0, 1, 2]);

    // The last statement failing: nothing of the transaction commits.
    let tx = env.begin_with(3, "c").await;
    let err = B::tx_execute_and_commit(tx, B::INS, &vals![1, "dup"])
        .await
        .unwrap_err();
    let duplicate = B::codes(DbError::DuplicateKey).1;
    assert_eq!(B::native_code(&err).as_deref(), Some(duplicate), "{err}");
    assert_eq!(env.keys().await, vec![0, 1, 2]);
    env.pooled_connections_clean().await;
}

async fn failed_statement_makes_commit_fail_and_roll_back<B: TxBackend>() {
    let env = B::env(1).await;
    env.insert(1, "one").await;
    if !B::TRANSACTIONS {
        let mut tx = B::begin(&env.pool);
        env.refused(B::tx_execute(&mut tx, B::INS, &vals![2, "two"]))
            .await;
        return env.pooled_connections_clean().await;
    }

    let mut tx = env.begin_with(2, "two").await;
    let dup = B::tx_execute(&mut tx, B::INS, &vals![1, "dup"])
        .await
        .unwrap_err();
    let duplicate = B::codes(DbError::DuplicateKey).1;
    assert_eq!(B::native_code(&dup).as_deref(), Some(duplicate), "{dup}");
    // PostgreSQL runs the next statement in the aborted transaction, which
    // refuses it (25P02); MySQL refuses it without sending it: the
    // transaction is over.
    let (out, trips, _) = env
        .count(B::tx_execute(&mut tx, B::INS, &vals![3, "three"]))
        .await;
    let aborted = out.unwrap_err();
    let expected = B::pick("25P02", duplicate);
    assert_eq!(B::native_code(&aborted).as_deref(), Some(expected));
    assert_eq!(trips, B::pick(1, 0));
    let (out, trips, log) = env.count(B::tx_commit(tx)).await;
    let (trips, log) = env.resynced(trips, log);
    let err = out.unwrap_err();
    assert_eq!(
        B::native_code(&err).as_deref(),
        Some(duplicate),
        "commit reports the first failure"
    );
    assert_eq!(trips, 1);
    assert_eq!(log, env.expect(&[Sent::Rollback]));
    assert_eq!(env.keys().await, vec![1]);
    env.pooled_connections_clean().await;
}

async fn dropping_an_open_transaction_rolls_back_and_returns_a_clean_connection<B: TxBackend>() {
    let env = B::env(1).await;
    env.insert(0, "warm").await;
    if !B::TRANSACTIONS {
        let mut tx = B::begin(&env.pool);
        env.refused(B::tx_query(&mut tx, "SELECT k FROM item ORDER BY k"))
            .await;
        drop(tx);
        return env.pooled_connections_clean().await;
    }

    let mut tx = env.begin_with(5, "five").await;
    let rows = B::tx_query(&mut tx, "SELECT k FROM item ORDER BY k").await;
    assert_eq!(rows.unwrap(), 2, "the transaction sees its own row");
    assert_eq!(env.open_transactions().await, 1);
    drop(tx);

    // The guard sends ROLLBACK, and returns the connection once answered.
    env.all_returned().await;
    let (size, _) = B::size_available(&env.pool);
    assert_eq!(size, 1, "the same connection came back");
    assert_eq!(env.keys().await, vec![0]);
    assert_eq!(env.logged().last(), env.expect(&[Sent::Rollback]).last());
    env.pooled_connections_clean().await;
}

/// Refused before anything is sent: transaction control, and in a group
/// PostgreSQL's SAVEPOINT behind comments / MySQL's DDL (which commits
/// implicitly); a wrong parameter count.
async fn transaction_control_and_bad_parameters_are_refused_before_sending<B: TxBackend>() {
    let env = B::env(1).await;
    env.insert(0, "warm").await;

    let group = [(B::INS, vals![1, "a"]), ("COMMIT", vals![])];
    let (out, trips, _) = env.count(B::atomic(&env.pool, &group)).await;
    let err = out.unwrap_err();
    assert_eq!((err.index(), err.error().is_refused()), (Some(1), true));
    assert_eq!(trips, 0);

    let refused = B::pick(
        " /* a /* nested */ comment */ -- line\n  savepoint s",
        "/* x */ CREATE TABLE other (x INT)",
    );
    let group = [(B::INS, vals![1, "a"]), (refused, vals![])];
    let (out, trips, _) = env.count(B::atomic(&env.pool, &group)).await;
    assert_eq!(out.unwrap_err().index(), Some(1));
    assert_eq!(trips, 0);
    // DDL alone is fine.
    B::atomic(&env.pool, &[("CREATE TABLE other (x INT)", vals![])])
        .await
        .unwrap();

    // Wrong parameter count in statement 1: nothing sent (both prepared).
    // Through a pooler that refuses transaction blocks the group as a
    // whole is refused first.
    let group = [(B::INS, vals![1, "a"]), (B::INS, vals![2])];
    if B::TRANSACTIONS {
        let (out, trips, log) = env.count(B::atomic(&env.pool, &group)).await;
        let err = out.unwrap_err();
        assert_eq!(
            (err.index(), err.error().is_params()),
            (Some(1), true),
            "{err}"
        );
        assert_eq!((trips, log.len()), (0, 0));
    } else {
        env.refused(B::atomic(&env.pool, &group)).await;
    }

    let mut tx = B::begin(&env.pool);
    let refused: &[&str] = B::pick(
        &["ROLLBACK", "prepare transaction 'x'"],
        &[
            "ROLLBACK",
            "lock tables item write",
            "ALTER TABLE item ADD COLUMN z INT",
        ],
    );
    for sql in refused {
        let err = B::tx_execute(&mut tx, sql, &[]).await.unwrap_err();
        assert!(err.is_refused(), "{sql}: {err}");
    }
    assert!(!B::is_begun(&tx));
    // Statements merely starting with such words are fine, and so are
    // MySQL's temporary tables (no implicit commit).
    let fine: &[&str] = B::pick(
        &["SELECT 1 AS beginning"],
        &[
            "SELECT 1 AS beginning",
            "CREATE TEMPORARY TABLE scratch (x INT)",
        ],
    );
    for sql in fine {
        if B::TRANSACTIONS {
            B::tx_execute(&mut tx, sql, &[]).await.unwrap();
        } else {
            env.refused(B::tx_execute(&mut tx, sql, &[])).await;
        }
    }
    B::tx_rollback(tx).await.unwrap();
    assert_eq!(env.keys().await, vec![0]);
    env.pooled_connections_clean().await;
}

async fn atomic_and_transactions_from_many_tasks<B: TxBackend>() {
    let env = B::env(4).await;
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..200i32 {
        let pool = env.pool.clone();
        tasks.spawn(async move {
            let v = format!("v{k}");
            if !B::TRANSACTIONS {
                // Refused, before anything is sent, from many tasks at once;
                // the row goes in as its own transaction.
                let group = [(B::INS, vals![k, v.clone()]), (B::TOUCH, vals![k])];
                let e = B::atomic(&pool, &group).await.unwrap_err();
                assert!(e.error().is_refused(), "{e}");
                let mut tx = B::begin(&pool);
                let e = B::tx_execute(&mut tx, B::TOUCH, &vals![k])
                    .await
                    .unwrap_err();
                assert!(e.is_refused(), "{e}");
                let tx = B::begin(&pool);
                return B::tx_execute_and_commit(tx, B::INS, &vals![k, format!("{v}+")])
                    .await
                    .map(|_| ());
            }
            if k % 2 == 0 {
                let group = [(B::INS, vals![k, v]), (B::TOUCH, vals![k])];
                B::atomic(&pool, &group)
                    .await
                    .map(|_| ())
                    .map_err(Error::from)
            } else {
                let mut tx = B::begin(&pool);
                B::tx_execute(&mut tx, B::INS, &vals![k, v]).await?;
                B::tx_execute_and_commit(tx, B::TOUCH, &vals![k])
                    .await
                    .map(|_| ())
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().unwrap();
    }
    assert_eq!(env.keys().await, (0..200).collect::<Vec<_>>());
    let touched = count::<B>(&env.pool, "item WHERE v LIKE '%+'").await;
    assert_eq!(touched, 200);
    env.pooled_connections_clean().await;
}
