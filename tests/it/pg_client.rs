//! The PostgreSQL escape hatches: a connection from `Pool::get` used as a
//! `&mut tokio_postgres::Client` (transactions, savepoints, migration-tool
//! style functions), what the pool does with one that comes back inside a
//! transaction, and `Pool::listen` receiving notifications from another
//! session.

use crate::common;

use std::time::Duration;

use batchpool::BatchConfig;
use batchpool::postgres::{Listener, Pool};
use futures_util::StreamExt;
use tokio_postgres::IsolationLevel;

/// How long a notification or the end of a listener's stream may take to
/// arrive. Not a speed bound: on a loaded machine delivery can take a
/// while, and a missing notification never arrives at all, so a wide bound
/// still tells the two apart.
const ARRIVAL: Duration = Duration::from_secs(30);

fn pool(url: &str, max_size: usize) -> Pool {
    Pool::builder(url)
        .max_size(max_size)
        .batching(BatchConfig::default())
        .build()
        .expect("build pool")
}

/// A plain tokio-postgres session next to the pool.
async fn session(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

async fn keys(client: &tokio_postgres::Client, table: &str) -> Vec<i32> {
    client
        .query(&format!("SELECT k FROM {table} ORDER BY k"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// What a migration tool does with the client it is given.
async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.batch_execute(
        "CREATE TABLE schema_version (v int NOT NULL);
         INSERT INTO schema_version VALUES (1);",
    )
    .await?;
    tx.commit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lent_client_gives_transactions_and_savepoints() {
    let url = common::pg_fresh_db().await;
    let pool = pool(&url, 2);
    let mut client = pool.get().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (k int PRIMARY KEY)")
        .await
        .unwrap();

    // transaction(): committed, then one rolled back.
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    tx.commit().await.unwrap();
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (100)", &[]).await.unwrap();
    tx.rollback().await.unwrap();

    // build_transaction(): the isolation level is the one asked for.
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::Serializable)
        .start()
        .await
        .unwrap();
    let level: String = tx
        .query_one("SHOW transaction_isolation", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(level, "serializable");
    tx.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
    tx.commit().await.unwrap();

    // Savepoints: a nested transaction() kept, one inside it rolled back,
    // a named savepoint rolled back, and the outer transaction committed.
    let mut tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
    {
        let mut inner = tx.transaction().await.unwrap();
        inner
            .execute("INSERT INTO t VALUES (4)", &[])
            .await
            .unwrap();
        let innermost = inner.transaction().await.unwrap();
        innermost
            .execute("INSERT INTO t VALUES (5)", &[])
            .await
            .unwrap();
        innermost.rollback().await.unwrap();
        inner.commit().await.unwrap();
    }
    {
        let named = tx.savepoint("before_six").await.unwrap();
        named
            .execute("INSERT INTO t VALUES (6)", &[])
            .await
            .unwrap();
        // A failed statement spoils only the savepoint.
        let e = named
            .execute("INSERT INTO t VALUES (3)", &[])
            .await
            .unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some("23505"));
        named.rollback().await.unwrap();
    }
    tx.execute("INSERT INTO t VALUES (7)", &[]).await.unwrap();
    tx.commit().await.unwrap();

    // A function that takes `&mut tokio_postgres::Client`.
    migrate(&mut client).await.unwrap();
    drop(client);

    let other = session(&url).await;
    assert_eq!(keys(&other, "t").await, vec![1, 2, 3, 4, 7]);
    assert_eq!(keys_of_version(&other).await, vec![1]);
    // The pool sees the same.
    let n: i64 = pool
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 5);
}

async fn keys_of_version(client: &tokio_postgres::Client) -> Vec<i32> {
    client
        .query("SELECT v FROM schema_version", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A client given back with a transaction open (the user's transaction
/// forgotten, a bare `BEGIN`) is never used for coalesced rows in that
/// transaction: with one connection in the pool, the next coalesced INSERT
/// runs on it and must commit for real, visible from another session, and
/// the row written in the abandoned transaction must not be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_returned_inside_a_transaction_is_not_reused_in_it() {
    let url = common::pg_fresh_db().await;
    let pool = pool(&url, 1);
    let other = session(&url).await;
    other
        .batch_execute("CREATE TABLE t (k int PRIMARY KEY)")
        .await
        .unwrap();
    let insert = "INSERT INTO t (k) VALUES ($1)";
    assert!(pool.explain(insert).await.unwrap().is_coalesced());

    // A tokio-postgres transaction that is never ended (its `Drop` would
    // send ROLLBACK; forgetting it sends nothing).
    let mut client = pool.get().await.unwrap();
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    std::mem::forget(tx);
    drop(client);

    let batches = pool.stats().batches;
    let out = pool.execute(insert, &[&2i32]).await.unwrap();
    assert_eq!(out.rows_affected(), 1);
    assert!(pool.stats().batches > batches, "the INSERT was coalesced");
    assert_eq!(keys(&other, "t").await, vec![2]);

    // A bare BEGIN through the simple protocol, on the same connection.
    let client = pool.get().await.unwrap();
    let again: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(again, pid, "one connection: the same session came back");
    client
        .batch_execute("BEGIN; INSERT INTO t VALUES (3)")
        .await
        .unwrap();
    drop(client);
    pool.execute(insert, &[&4i32]).await.unwrap();
    assert_eq!(keys(&other, "t").await, vec![2, 4]);

    // A transaction left failed (an error inside it).
    let client = pool.get().await.unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    assert!(client.batch_execute("SELECT 1 / 0").await.is_err());
    drop(client);
    pool.execute(insert, &[&5i32]).await.unwrap();
    assert_eq!(keys(&other, "t").await, vec![2, 4, 5]);

    // A query of the transaction given up on while the server still runs
    // it: the reset waits for its answer, then rolls the transaction back.
    let client = pool.get().await.unwrap();
    client
        .batch_execute("BEGIN; INSERT INTO t VALUES (6)")
        .await
        .unwrap();
    let slow = client.batch_execute("SELECT pg_sleep(0.5)");
    assert!(
        tokio::time::timeout(Duration::from_millis(50), slow)
            .await
            .is_err(),
        "given up on before its answer"
    );
    drop(client);
    pool.execute(insert, &[&7i32]).await.unwrap();
    assert_eq!(keys(&other, "t").await, vec![2, 4, 5, 7]);
}

/// A listener on two channels receives what another session sends (with
/// its payload, its channel and the sender's process id), in order, only
/// once committed, and nothing more from a channel it stopped listening to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_receives_notifications_from_another_session() {
    let url = common::pg_fresh_db().await;
    let pool = pool(&url, 2);
    let mut listener = pool.listen(&["orders", "Refunds"]).await.unwrap();
    let mut channels = listener.channels().await.unwrap();
    channels.sort();
    assert_eq!(channels, ["Refunds", "orders"]);

    let other = session(&url).await;
    let sender: i32 = other
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    other.batch_execute("NOTIFY orders, 'first'").await.unwrap();
    // The exact name, case included, as pg_notify takes it.
    other
        .execute("SELECT pg_notify('Refunds', $1)", &[&"second"])
        .await
        .unwrap();
    // An unquoted name is folded to lower case: not ours.
    other
        .batch_execute("NOTIFY Refunds, 'folded'")
        .await
        .unwrap();
    // Delivered at commit only: the rolled-back one never is.
    other
        .batch_execute("BEGIN; NOTIFY orders, 'rolled back'; ROLLBACK")
        .await
        .unwrap();
    other.batch_execute("NOTIFY orders").await.unwrap();

    let got = next(&mut listener).await;
    assert_eq!(
        (got.channel(), got.payload(), got.process_id()),
        ("orders", "first", sender)
    );
    let got = next(&mut listener).await;
    assert_eq!((got.channel(), got.payload()), ("Refunds", "second"));
    let got = next(&mut listener).await;
    assert_eq!((got.channel(), got.payload()), ("orders", ""));

    // After unlisten: a notification on that channel sent before one on
    // the other is not delivered (delivery is in order, so the next item
    // being the other channel's shows it).
    listener.unlisten("orders").await.unwrap();
    other.batch_execute("NOTIFY orders, 'gone'").await.unwrap();
    other
        .batch_execute("NOTIFY \"Refunds\", 'kept'")
        .await
        .unwrap();
    let got = next(&mut listener).await;
    assert_eq!((got.channel(), got.payload()), ("Refunds", "kept"));
    assert_eq!(listener.channels().await.unwrap(), ["Refunds"]);

    // Listening again later, and unlisten_all.
    listener.listen("orders").await.unwrap();
    other.batch_execute("NOTIFY orders, 'back'").await.unwrap();
    let got = next(&mut listener).await;
    assert_eq!((got.channel(), got.payload()), ("orders", "back"));
    listener.unlisten_all().await.unwrap();
    assert!(listener.channels().await.unwrap().is_empty());

    // A notification sent through the pool itself reaches it too.
    listener.listen("orders").await.unwrap();
    pool.execute("SELECT pg_notify('orders', $1)", &[&"from the pool"])
        .await
        .unwrap();
    let got = next(&mut listener).await;
    assert_eq!(got.payload(), "from the pool");
}

async fn next(listener: &mut Listener) -> tokio_postgres::Notification {
    tokio::time::timeout(ARRIVAL, listener.next())
        .await
        .expect("a notification within the bound")
        .expect("the stream goes on")
        .expect("a notification, not an error")
}

/// The listener's connection is opened as the pool's are (its hooks run
/// on it) and is not one of the pool's; when the server ends it, the stream
/// says so with an error and then ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_reports_its_lost_connection() {
    let url = common::pg_fresh_db().await;
    let pool = Pool::builder(&url)
        .max_size(2)
        .post_create(|client| {
            Box::pin(async move {
                client
                    .batch_execute("SET application_name = 'bp_listener_test'")
                    .await?;
                Ok(())
            })
        })
        .build()
        .unwrap();
    let mut listener = pool.listen(&["jobs"]).await.unwrap();
    assert_eq!(pool.status().size, 0, "not one of the pool's connections");

    let other = session(&url).await;
    let ended: i64 = other
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'bp_listener_test' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended, 1, "the hook ran on the listener's connection");

    let e = tokio::time::timeout(ARRIVAL, listener.next())
        .await
        .expect("the loss is reported within the bound")
        .expect("an item")
        .expect_err("an error");
    assert!(e.is_closed(), "{e}");
    assert!(e.to_string().contains("listener"), "{e}");
    assert!(listener.next().await.is_none(), "the stream has ended");
    assert!(listener.listen("more").await.unwrap_err().is_closed());

    // Once the pool is closed no listener is opened.
    pool.close().await;
    assert!(pool.listen(&["jobs"]).await.unwrap_err().is_pool_closed());
}
