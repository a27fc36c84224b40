//! Connection lifecycle against a real PostgreSQL and a real MariaDB:
//! `max_lifetime`, `idle_timeout` and `Pool::retire_all`, watched from the
//! server's side (`pg_stat_activity`, `information_schema.PROCESSLIST`).
//! Every test runs as `pg::name` and `mysql::name`.

use crate::common;

use std::time::Duration;

use crate::common::backend::{Patience, TestBackend, TestOutcome, Val, both, wait_for};
use batchpool::BatchConfig;

both! {
    (flavor = "multi_thread", worker_threads = 2) => [
        max_lifetime_replaces_connections_but_never_one_in_use,
        idle_timeout_closes_idle_connections_only,
        retire_all_replaces_every_connection_without_cutting_work,
        coalesced_rows_run_across_lifetime_and_idle_limits,
    ],
}

/// What these tests need beyond [`TestBackend`].
trait Life: TestBackend {
    /// `pool.retire_all()`.
    fn retire_all(pool: &Self::Pool);
}

#[cfg(feature = "postgres")]
impl Life for common::backend::Pg {
    fn retire_all(pool: &batchpool::postgres::Pool) {
        pool.retire_all();
    }
}

#[cfg(feature = "mysql")]
impl Life for common::backend::My {
    fn retire_all(pool: &batchpool::mysql::Pool) {
        pool.retire_all();
    }
}

/// The server's id of the session a pooled statement runs on.
async fn session_id<B: TestBackend>(pool: &B::Pool) -> i64 {
    let sql = B::pick(
        "SELECT pg_backend_pid()::bigint",
        "SELECT CAST(CONNECTION_ID() AS SIGNED)",
    );
    B::query_i64(pool, sql, &[]).await.expect("session id")
}

/// The ids of the sessions on the test's database other than `admin`'s
/// own, as the server lists them.
async fn sessions<B: TestBackend>(admin: &mut B::Admin) -> Vec<i64> {
    let sql = B::pick(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY pid",
        "SELECT ID FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND ID <> CONNECTION_ID() ORDER BY ID",
    );
    B::admin_rows(admin, sql)
        .await
        .expect("session list")
        .into_iter()
        .map(|row| row[0].as_deref().expect("an id").parse().expect("an id"))
        .collect()
}

/// Waits until the server lists exactly `n` sessions, and returns them. A
/// session the client side just closed can stay listed for a moment (on
/// MariaDB, the TCP session mysql_async leaves for the server's socket).
async fn exactly<B: TestBackend>(admin: &mut B::Admin, n: usize) -> Vec<i64> {
    let patience = Patience::new("the server to list the pool's sessions");
    loop {
        let open = sessions::<B>(admin).await;
        if open.len() == n {
            return open;
        }
        patience.wait().await;
    }
}

/// Waits until the server no longer lists session `id`.
async fn gone<B: TestBackend>(admin: &mut B::Admin, id: i64) {
    let patience = Patience::new("the session to be closed");
    while sessions::<B>(admin).await.contains(&id) {
        patience.wait().await;
    }
}

/// A long statement on the pool, run on a connection of its own while the
/// test watches: it must come back with its result.
fn long_statement<B: TestBackend>(pool: &B::Pool) -> tokio::task::JoinHandle<i64> {
    let pool = pool.clone();
    tokio::spawn(async move {
        let sql = B::pick(
            "SELECT count(*) FROM (SELECT pg_sleep(2)) AS s",
            "SELECT count(*) FROM (SELECT SLEEP(2)) AS s",
        );
        B::query_i64(&pool, sql, &[])
            .await
            .expect("the long statement")
    })
}

async fn max_lifetime_replaces_connections_but_never_one_in_use<B: Life>() {
    let url = B::fresh_db().await;
    let mut admin = B::admin(&url).await;
    let lifetime = Duration::from_millis(800);
    let pool = B::pool_with(&url, None, BatchConfig::default(), 2, |b| {
        b.max_lifetime(lifetime)
    });

    // An idle connection past its lifetime is closed by the pool, unused.
    let first = session_id::<B>(&pool).await;
    assert!(sessions::<B>(&mut admin).await.contains(&first));
    gone::<B>(&mut admin, first).await;
    wait_for("the pool to count it closed", || {
        B::size_available(&pool).0 == 0
    })
    .await;
    let second = session_id::<B>(&pool).await;
    assert_ne!(first, second, "a new session after the lifetime");

    // A connection lent by get() outlives its lifetime while held: the
    // pool sweeps several times meanwhile (every lifetime / 4) and never
    // closes it. Given back, it goes.
    let held = B::hold(&pool).await;
    let held_ids: Vec<i64> = sessions::<B>(&mut admin).await;
    tokio::time::sleep(lifetime * 3).await;
    let now = sessions::<B>(&mut admin).await;
    assert!(
        held_ids.iter().any(|id| now.contains(id)),
        "the held connection is still open ({held_ids:?} then {now:?})"
    );
    // A statement longer than the lifetime runs to its end.
    let long = long_statement::<B>(&pool);
    assert_eq!(long.await.expect("the long statement's task"), 1);
    drop(held);
    for id in &held_ids {
        gone::<B>(&mut admin, *id).await;
    }
    // Work goes on, on new sessions.
    let third = session_id::<B>(&pool).await;
    assert!(!held_ids.contains(&third), "a session opened after them");
}

async fn idle_timeout_closes_idle_connections_only<B: Life>() {
    let url = B::fresh_db().await;
    let mut admin = B::admin(&url).await;
    let idle = Duration::from_millis(800);
    let pool = B::pool_with(&url, None, BatchConfig::default(), 3, |b| {
        b.idle_timeout(idle)
    });

    // Three connections at once, then all idle: every one is closed, as
    // the server sees it, and the pool counts none.
    let held = futures_util::future::join_all((0..3).map(|_| B::hold(&pool))).await;
    let opened = exactly::<B>(&mut admin, 3).await;
    drop(held);
    wait_for("the pool to close its idle connections", || {
        B::size_available(&pool).0 == 0
    })
    .await;
    for id in &opened {
        gone::<B>(&mut admin, *id).await;
    }

    // One held by get() is not idle however long it is held.
    let held = B::hold(&pool).await;
    let [id] = exactly::<B>(&mut admin, 1).await[..] else {
        unreachable!("one session")
    };
    tokio::time::sleep(idle * 3).await;
    assert!(
        sessions::<B>(&mut admin).await.contains(&id),
        "the held connection is still open"
    );
    // Given back, it is idle from then on: closed in turn.
    drop(held);
    gone::<B>(&mut admin, id).await;
    assert_eq!(B::size_available(&pool).0, 0);

    // And the pool works on, opening what it needs.
    let again = session_id::<B>(&pool).await;
    assert_ne!(again, id);
}

async fn retire_all_replaces_every_connection_without_cutting_work<B: Life>() {
    let url = B::fresh_db().await;
    let mut admin = B::admin(&url).await;
    // No lifetime or idle limit: only retire_all closes anything.
    let pool = B::pool_with(&url, None, BatchConfig::default(), 3, |b| b);

    // Three connections: one lent by get(), one running a long statement,
    // one idle.
    let held = B::hold(&pool).await;
    let long = long_statement::<B>(&pool);
    let running_prefix = B::pick(
        "SELECT count(*) FROM (SELECT pg_sleep",
        "SELECT count(*) FROM (SELECT SLEEP",
    );
    let patience = Patience::new("the long statement to start");
    while !B::running(&mut admin, running_prefix).await {
        patience.wait().await;
    }
    let idle = session_id::<B>(&pool).await;
    let before = exactly::<B>(&mut admin, 3).await;
    assert_eq!(B::size_available(&pool), (3, 1));

    pool_retire::<B>(&pool);
    // The idle one is closed at once.
    gone::<B>(&mut admin, idle).await;
    assert_eq!(B::size_available(&pool).0, 2);
    // The long statement finishes on its connection, and the held one is
    // still open.
    assert_eq!(long.await.expect("the long statement's task"), 1);
    let busy: Vec<i64> = before.iter().copied().filter(|id| *id != idle).collect();
    let live = sessions::<B>(&mut admin).await;
    assert!(
        busy.iter().any(|id| live.contains(id)),
        "the held connection is still open ({busy:?}, {live:?})"
    );

    // New work runs on a new session.
    let fresh = session_id::<B>(&pool).await;
    assert!(!before.contains(&fresh), "{fresh} is a new session");

    // Given back, the held connection goes too: none of the sessions open
    // at retire_all is left.
    drop(held);
    for id in &busy {
        gone::<B>(&mut admin, *id).await;
    }
    let after = sessions::<B>(&mut admin).await;
    assert!(
        after.iter().all(|id| !before.contains(id)),
        "{after:?} has none of {before:?}"
    );
    // Connections opened after retire_all stay.
    assert!(after.contains(&fresh), "{after:?} has {fresh}");
}

async fn coalesced_rows_run_across_lifetime_and_idle_limits<B: Life>() {
    let url = B::fresh_db().await;
    let mut admin = B::admin(&url).await;
    let limit = Duration::from_millis(600);
    let pool = B::pool_with(&url, None, BatchConfig::default(), 2, |b| {
        b.max_lifetime(limit).idle_timeout(limit)
    });
    let create = B::pick(
        "CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL)",
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL) ENGINE=InnoDB",
    );
    B::execute(&pool, create, &[]).await.expect("create");
    let insert = B::sql("INSERT INTO t (id, v) VALUES (?, ?)");

    // Bursts of coalesced rows, each on connections the limits retired
    // after the one before: every row is stored once and every caller
    // hears its own count.
    const ROUNDS: i32 = 4;
    const PER_ROUND: i32 = 100;
    let mut rounds: Vec<Vec<i64>> = Vec::new();
    for round in 0..ROUNDS {
        let calls = (0..PER_ROUND).map(|i| {
            let id = round * PER_ROUND + i;
            let (pool, insert) = (pool.clone(), insert.clone());
            async move {
                let params = [Val::from(id), Val::from(format!("r{id}"))];
                B::execute(&pool, &insert, &params).await
            }
        });
        for out in futures_util::future::join_all(calls).await {
            assert_eq!(out.expect("a coalesced insert").rows_affected(), 1);
        }
        let open = sessions::<B>(&mut admin).await;
        assert!(!open.is_empty(), "round {round} ran on a session");
        // Idle past both limits: each is closed before the next round.
        for id in &open {
            gone::<B>(&mut admin, *id).await;
        }
        rounds.push(open);
    }
    for (i, earlier) in rounds.iter().enumerate() {
        for later in &rounds[i + 1..] {
            assert!(
                earlier.iter().all(|id| !later.contains(id)),
                "a session outlived its limits: {rounds:?}"
            );
        }
    }

    let stored = B::query_i64(&pool, "SELECT COUNT(*) FROM t", &[])
        .await
        .expect("count");
    assert_eq!(stored, i64::from(ROUNDS * PER_ROUND));
    let stats = B::stats(&pool);
    assert_eq!(stats.rows, (ROUNDS * PER_ROUND) as u64, "{stats:?}");
    assert_eq!(stats.rows_failed, 0, "{stats:?}");
    assert!(
        stats.statements < stats.rows,
        "rows were coalesced: {stats:?}"
    );
}

fn pool_retire<B: Life>(pool: &B::Pool) {
    B::retire_all(pool);
}
