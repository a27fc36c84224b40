//! Unnamed mode: what the pool knows of a statement text without keeping a
//! prepared statement on the server. A text's parameter types are learned
//! once per pool by preparing it inside a transaction (a transaction-mode
//! pooler keeps one server connection for a transaction) and closing it
//! before the transaction ends; every run is then one unnamed
//! Parse/Bind/Execute with those types (tokio-postgres `query_typed`).

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use super::manager::lock;
use super::pipeline::{Step, in_order};
use tokio_postgres::error::SqlState;

/// A statement text as the server described it.
#[derive(Debug)]
pub(crate) struct Described {
    /// Parameter types, as the server inferred them.
    pub(crate) params: Vec<Type>,
    /// Some parameter or result column has a type tokio-postgres looks up in
    /// the catalog (enum, domain, composite, range...). It keeps what it
    /// looked up per connection, and looking up runs a named statement, so
    /// each connection learns such a text itself, inside a transaction,
    /// before its first run there.
    pub(crate) custom: bool,
}

/// A pool's learned texts (bounded LRU).
#[derive(Debug)]
pub(crate) struct Learned {
    texts: Mutex<LruCache<Box<str>, Arc<Described>>>,
}

impl Learned {
    pub(crate) fn new(capacity: NonZeroUsize) -> Learned {
        Learned {
            texts: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// The pool's description of `sql`, if it has one that `client` can use
    /// without learning the text itself.
    pub(crate) fn known(&self, sql: &str) -> Option<Arc<Described>> {
        lock(&self.texts).get(sql).filter(|d| !d.custom).cloned()
    }

    /// Learns `texts` on `client`, together, and keeps them for the pool.
    pub(crate) async fn learn(
        &self,
        client: &Client,
        texts: &[&str],
        in_transaction: bool,
    ) -> Result<Vec<Result<Arc<Described>, tokio_postgres::Error>>, tokio_postgres::Error> {
        let learned = learn(client, texts, in_transaction).await?;
        let mut cache = lock(&self.texts);
        Ok(texts
            .iter()
            .zip(learned)
            .map(|(sql, described)| {
                let described = Arc::new(described?);
                cache.put((*sql).into(), Arc::clone(&described));
                Ok(described)
            })
            .collect())
    }

    /// Drops what is known of `sql` (its table changed).
    pub(crate) fn forget(&self, sql: &str) {
        lock(&self.texts).pop(sql);
    }
}

/// Prepares `texts` (named statements of tokio-postgres's), reads their
/// types, and closes them, all on one server connection: inside the
/// caller's open transaction, or else inside `BEGIN` … `ROLLBACK` (nothing
/// runs; the rollback also ends a transaction a failed prepare aborted). All
/// texts go out in one write: two round trips outside a transaction, one
/// inside.
async fn learn(
    client: &Client,
    texts: &[&str],
    in_transaction: bool,
) -> Result<Vec<Result<Described, tokio_postgres::Error>>, tokio_postgres::Error> {
    // Another client's named statement of the same name may be left on the
    // server connection (`42P05`): a second prepare takes the next names.
    let mut retried = false;
    loop {
        let learned = learn_once(client, texts, in_transaction).await?;
        let clash = learned.iter().any(|r| {
            r.as_ref()
                .err()
                .and_then(tokio_postgres::Error::code)
                .is_some_and(|c| *c == SqlState::DUPLICATE_PSTATEMENT)
        });
        if !clash || retried || in_transaction {
            return Ok(learned);
        }
        retried = true;
    }
}

async fn learn_once(
    client: &Client,
    texts: &[&str],
    in_transaction: bool,
) -> Result<Vec<Result<Described, tokio_postgres::Error>>, tokio_postgres::Error> {
    let prepares: Vec<Step<'_, _>> = texts
        .iter()
        .map(|sql| -> Step<'_, _> {
            // The statement is dropped once described, which queues its
            // Close (before the ROLLBACK below).
            Box::pin(async move { client.prepare(sql).await.map(|stmt| describe(&stmt)) })
        })
        .collect();
    if in_transaction {
        return Ok(in_order(prepares).await);
    }
    // Polled in order in one poll: BEGIN and the texts leave in one write.
    let (began, described) =
        futures_util::future::join(client.batch_execute("BEGIN"), in_order(prepares)).await;
    let ended = client.batch_execute("ROLLBACK").await;
    began?;
    ended?;
    Ok(described)
}

fn describe(stmt: &tokio_postgres::Statement) -> Described {
    let catalog = |t: &Type| Type::from_oid(t.oid()).is_none();
    Described {
        params: stmt.params().to_vec(),
        custom: stmt.params().iter().any(catalog)
            || stmt.columns().iter().any(|c| catalog(c.type_())),
    }
}
