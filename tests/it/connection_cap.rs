//! A server that allows a user fewer connections than the pool's
//! `max_size`: a connection refused for that limit fails no row that the
//! connections the pool has can carry. Runs as `pg::name` and `mysql::name`
//! with a role / user of its own (unique name, dropped at the end).

use crate::common::backend::{TestBackend, both, count, vals};
use batchpool::BatchConfig;

both! {
    (flavor = "multi_thread", worker_threads = 2) => [
        a_burst_succeeds_on_the_connections_a_user_limit_allows,
    ],
}

/// A name no other test process uses.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}_{}_{nanos}", std::process::id())
}

async fn a_burst_succeeds_on_the_connections_a_user_limit_allows<B: TestBackend>() {
    let url = B::fresh_db().await;
    let mut admin = B::admin(&url).await;
    let user = unique("bp_cap");
    B::admin_run(&mut admin, "CREATE TABLE capped (k INT PRIMARY KEY)").await;
    // A role that is not a superuser: PostgreSQL does not hold superusers
    // to a role's CONNECTION LIMIT.
    let setup = B::pick(
        format!(
            "CREATE ROLE {user} LOGIN CONNECTION LIMIT 3; \
             GRANT SELECT, INSERT ON capped TO {user}"
        ),
        format!(
            "CREATE USER '{user}'@'%' WITH MAX_USER_CONNECTIONS 3; \
             GRANT SELECT, INSERT ON capped TO '{user}'@'%'"
        ),
    );
    for sql in setup.split("; ") {
        B::admin_run(&mut admin, sql).await;
    }
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (_, host) = rest.split_once('@').expect("a user in the URL");
    let user_url = format!("{scheme}://{user}@{host}");

    let pool = B::pool(&user_url, BatchConfig::default(), 8);
    let sql = B::sql("INSERT INTO capped (k) VALUES (?)");
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..600i32 {
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.spawn(async move { B::execute(&pool, &sql, &vals![k]).await });
    }
    let mut failed = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done.expect("a caller's task") {
            failed.push(e.to_string());
        }
    }
    let (size, _) = B::size_available(&pool);
    B::close(&pool).await;
    assert!(
        failed.is_empty(),
        "{} of 600 callers failed, e.g. {}",
        failed.len(),
        failed[0]
    );
    assert!(size <= 3, "{size} connections open under a limit of 3");
    let admin_pool = B::pool(&url, BatchConfig::default(), 1);
    assert_eq!(count::<B>(&admin_pool, "capped").await, 600);
    B::close(&admin_pool).await;

    B::admin_run(&mut admin, "DROP TABLE capped").await;
    let drop = B::pick(
        format!("DROP ROLE {user}"),
        format!("DROP USER '{user}'@'%'"),
    );
    B::admin_run(&mut admin, &drop).await;
}
