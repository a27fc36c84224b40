//! What the pool learns about a batchable text, and what keeping it current
//! costs: while nothing changes, one cheap check per table every
//! `relearn_after` (shared by the texts on it) and no new catalog read or
//! prepare of the texts; a change to the table is noticed at the next check
//! and the texts are learned again. Runs as `pg::name`, `mysql::name` and
//! `pgbouncer::name`.

use std::time::{Duration, Instant};

use crate::common::backend::{Patience, TestBackend, three, vals};
use batchpool::BatchConfig;

three! {
    (flavor = "multi_thread", worker_threads = 2) => [
        texts_on_one_table_share_one_check_and_are_learned_again_only_on_change,
    ],
}

const RELEARN: Duration = Duration::from_millis(250);

/// Waits until every text's route coalesces (`want`) or not, and returns
/// how long that took.
async fn until_coalesced<B: TestBackend>(pool: &B::Pool, texts: &[String], want: bool) -> Duration {
    let start = Instant::now();
    let patience = Patience::new("a table change to be noticed");
    loop {
        let mut all = true;
        for sql in texts {
            all &= B::explain(pool, sql).await.unwrap().is_coalesced() == want;
        }
        if all {
            return start.elapsed();
        }
        patience.wait().await;
    }
}

async fn texts_on_one_table_share_one_check_and_are_learned_again_only_on_change<B: TestBackend>() {
    let url = B::fresh_db().await;
    let config = BatchConfig::default().relearn_after(RELEARN);
    let pool = B::pool(&url, config, 4);
    let mut admin = B::admin(&url).await;
    B::admin_run(
        &mut admin,
        &B::sql("CREATE TABLE lt (id SERIAL PRIMARY KEY, k INT NOT NULL, v VARCHAR(20))")
            .replace("SERIAL", B::SERIAL),
    )
    .await;
    let texts: Vec<String> = (0..3)
        .map(|i| B::sql(&format!("INSERT INTO lt (k, v) VALUES (?, 'text {i}')")))
        .collect();
    let start = Instant::now();
    until_coalesced::<B>(&pool, &texts, true).await;
    assert_eq!(B::stats(&pool).learns, 3, "each text learned once");

    // A steady load of the three texts for six `relearn_after` periods.
    let mut k = 0i32;
    while start.elapsed() < RELEARN * 6 {
        for sql in &texts {
            k += 1;
            B::execute(&pool, sql, &vals![k]).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let steady = B::stats(&pool);
    let elapsed = start.elapsed();
    assert_eq!(
        steady.learns, 3,
        "nothing changed: no text is learned again (no catalog read, no prepare of its own)"
    );
    // Checked while in use, once per period for the table (the texts share
    // the check); a slow machine only makes checks rarer.
    let periods = (elapsed.as_millis() / RELEARN.as_millis()) as u64;
    assert!(
        steady.learn_checks >= 1 && steady.learn_checks <= periods + 2,
        "{} checks in {periods} periods",
        steady.learn_checks
    );

    // A trigger added is noticed at the next check, and each text is
    // learned again once.
    let trigger = B::pick(
        "CREATE FUNCTION lt_noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$; \
         CREATE TRIGGER lt_trig BEFORE INSERT ON lt FOR EACH ROW EXECUTE FUNCTION lt_noop()",
        "CREATE TRIGGER lt_trig BEFORE INSERT ON lt FOR EACH ROW SET NEW.v = NEW.v",
    );
    B::admin_run(&mut admin, trigger).await;
    let noticed = until_coalesced::<B>(&pool, &texts, false).await;
    // The promise is one `relearn_after` plus one check and one learn; the
    // bound is wide for a loaded machine, and without the check the change
    // would never be noticed at all.
    assert!(
        noticed < Duration::from_secs(10),
        "trigger noticed after {noticed:?}"
    );
    let after_trigger = B::stats(&pool).learns;
    assert!(after_trigger >= 6, "{after_trigger} learns");

    // Gone again: coalesced again.
    B::admin_run(
        &mut admin,
        B::pick("DROP TRIGGER lt_trig ON lt", "DROP TRIGGER lt_trig"),
    )
    .await;
    until_coalesced::<B>(&pool, &texts, true).await;

    // A column change (a new column with a default) is noticed too: the
    // texts are learned again, and still coalesce.
    let before = B::stats(&pool).learns;
    B::admin_run(&mut admin, "ALTER TABLE lt ADD COLUMN extra INT DEFAULT 7").await;
    let patience = Patience::new("a column change to be noticed");
    while B::stats(&pool).learns < before + 3 {
        for sql in &texts {
            k += 1;
            B::execute(&pool, sql, &vals![k]).await.unwrap();
        }
        patience.wait().await;
    }
    until_coalesced::<B>(&pool, &texts, true).await;
    B::close(&pool).await;
}
