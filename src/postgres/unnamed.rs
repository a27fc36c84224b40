//! Unnamed mode: what the pool knows of a statement text without keeping a
//! prepared statement on the server. A text's parameter types are learned
//! once per pool by preparing it inside a transaction (a transaction-mode
//! pooler keeps one server connection for a transaction) and closing it
//! before the transaction ends; every run is then one unnamed
//! Parse/Bind/Execute with those types (tokio-postgres `query_typed`).
//! Behind a pooler that refuses transaction blocks the text is prepared and
//! closed right away ("bare"): the prepare's answer is its own, and the
//! close, should the pooler send it to another server connection, leaves a
//! statement under a name nobody there runs (every statement through such a
//! pooler is unnamed).

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use super::pipeline::{Step, in_order};
use super::quote_ident;
use crate::sync::lock;
use tokio_postgres::error::SqlState;

/// A statement text as the server described it.
#[derive(Debug)]
pub(crate) struct Described {
    /// Parameter types, as the server inferred them.
    pub(crate) params: Vec<Type>,
    /// The parameter and result types tokio-postgres looks up in the
    /// catalog (not built in): a connection runs the text only once it has
    /// them cached (see [`preload_types`]).
    pub(crate) custom: Vec<Type>,
}

/// A pool's learned texts (bounded LRU).
#[derive(Debug)]
pub(crate) struct Learned {
    texts: Mutex<LruCache<Box<str>, Arc<Described>>>,
}

impl Learned {
    fn texts(&self) -> std::sync::MutexGuard<'_, LruCache<Box<str>, Arc<Described>>> {
        lock(&self.texts)
    }

    pub(crate) fn new(capacity: NonZeroUsize) -> Learned {
        Learned {
            texts: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// The pool's description of `sql`, if it has one.
    pub(crate) fn known(&self, sql: &str) -> Option<Arc<Described>> {
        self.texts().get(sql).cloned()
    }

    /// Learns `texts` on `client`, together, and keeps them for the pool;
    /// `bare`: without a transaction around them.
    pub(crate) async fn learn(
        &self,
        client: &Client,
        texts: &[&str],
        in_transaction: bool,
        bare: bool,
    ) -> Result<Vec<Result<Arc<Described>, tokio_postgres::Error>>, tokio_postgres::Error> {
        let learned = learn(client, texts, in_transaction, bare).await?;
        let mut cache = self.texts();
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
        self.texts().pop(sql);
    }
}

/// Prepares `texts` (named statements of tokio-postgres's), reads their
/// types, and closes them, all on one server connection: inside the
/// caller's open transaction, or else inside `BEGIN` … `ROLLBACK` (nothing
/// runs; the rollback also ends a transaction a failed prepare aborted), or
/// (`bare`) each on its own. All texts go out in one write: two round trips
/// outside a transaction, one inside or bare.
async fn learn(
    client: &Client,
    texts: &[&str],
    in_transaction: bool,
    bare: bool,
) -> Result<Vec<Result<Described, tokio_postgres::Error>>, tokio_postgres::Error> {
    // Another client's named statement of the same name may be left on the
    // server connection (`42P05`): a second prepare takes the next names.
    let mut retried = false;
    loop {
        let learned = learn_once(client, texts, in_transaction, bare).await?;
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
    bare: bool,
) -> Result<Vec<Result<Described, tokio_postgres::Error>>, tokio_postgres::Error> {
    let prepares: Vec<Step<'_, _>> = texts
        .iter()
        .map(|sql| -> Step<'_, _> { Box::pin(client.prepare(sql)) })
        .collect();
    if in_transaction || bare {
        // Each statement is closed as it is dropped, right here.
        return Ok(in_order(prepares)
            .await
            .into_iter()
            .map(|r| r.map(|stmt| describe(&stmt)))
            .collect());
    }
    // Polled in order in one poll: BEGIN and the texts leave in one write.
    let (began, prepared) =
        futures_util::future::join(client.batch_execute("BEGIN"), in_order(prepares)).await;
    let mut statements = Vec::with_capacity(texts.len());
    let described: Vec<_> = prepared
        .into_iter()
        .map(|r| {
            r.map(|stmt| {
                let described = describe(&stmt);
                statements.push(stmt);
                described
            })
        })
        .collect();
    // Dropping the statements queues their Close messages; the ROLLBACK is
    // queued right after, with no await in between, so they leave in one
    // write and the Closes run inside the transaction.
    drop(statements);
    let ended = client.batch_execute("ROLLBACK").await;
    began?;
    ended?;
    Ok(described)
}

fn describe(stmt: &tokio_postgres::Statement) -> Described {
    let mut custom: Vec<Type> = Vec::new();
    let all = stmt
        .params()
        .iter()
        .chain(stmt.columns().iter().map(|c| c.type_()));
    for t in all {
        if Type::from_oid(t.oid()).is_none() && !custom.iter().any(|c| c.oid() == t.oid()) {
            custom.push(t.clone());
        }
    }
    Described {
        params: stmt.params().to_vec(),
        custom,
    }
}

/// The database's own types (enums, domains, ranges, composite types,
/// extension types, and arrays of them; not the row types of tables): oid
/// and `NULL::schema.type`, at most 512.
const CATALOG_TYPES: &str = "\
SELECT t.oid::text, format('NULL::%I.%I', n.nspname, t.typname)
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'
    AND t.typtype <> 'p' AND t.typisdefined
    AND NOT EXISTS (SELECT 1 FROM pg_class c
        WHERE c.reltype IN (t.oid, t.typelem) AND c.relkind <> 'c')
ORDER BY t.oid LIMIT 512";

/// Looks up the database's own types on a new connection, inside one
/// transaction, so that tokio-postgres has them cached before any
/// statement needs them; returns their oids.
///
/// tokio-postgres looks a type up with a named statement of its own that it
/// prepares once per connection and keeps: behind a transaction-mode pooler
/// that statement exists only on the server connection of the transaction
/// that prepared it. Looking everything up in the first transaction means
/// it is rarely needed again; a type created later is looked up by
/// [`look_up`] before a statement that needs it is sent.
///
/// `bare`: the pooler refuses transaction blocks; the lookups then run on
/// whichever server connection it picks, which holds tokio-postgres's
/// lookup statement only if it is the one that prepared it.
pub(crate) async fn preload_types(
    client: &Client,
    bare: bool,
) -> Result<Vec<u32>, tokio_postgres::Error> {
    let mut oids = Vec::new();
    let mut exprs = Vec::new();
    for message in client.simple_query(CATALOG_TYPES).await? {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
            if let (Some(oid), Some(expr)) = (row.get(0).and_then(|o| o.parse().ok()), row.get(1)) {
                oids.push(oid);
                exprs.push(expr.to_string());
            }
        }
    }
    if !exprs.is_empty() {
        let select = format!("SELECT {}", exprs.join(", "));
        learn_once(client, &[&select], false, bare)
            .await?
            .pop()
            .transpose()?;
    }
    Ok(oids)
}

/// Looks up `types` inside a transaction (they were created after the
/// connection opened); `bare`: without one (see [`preload_types`]).
pub(crate) async fn look_up(
    client: &Client,
    types: &[&Type],
    bare: bool,
) -> Result<(), tokio_postgres::Error> {
    let exprs: Vec<String> = types
        .iter()
        .map(|t| {
            format!(
                "NULL::{}.{}",
                quote_ident(t.schema()),
                quote_ident(t.name())
            )
        })
        .collect();
    let select = format!("SELECT {}", exprs.join(", "));
    learn_once(client, &[&select], false, bare)
        .await?
        .pop()
        .transpose()?;
    Ok(())
}
