//! deadpool manager for tokio-postgres connections, each with a bounded cache
//! of prepared statements.

use std::num::NonZeroUsize;
use std::ops::Deref;
use std::sync::Mutex;
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use lru::LruCache;
use tokio_postgres::types::Type;
use tokio_postgres::{NoTls, Statement};

use crate::engine::Wire;

/// Creates and recycles connections for the pool.
#[derive(Debug)]
pub struct Manager {
    config: tokio_postgres::Config,
    statement_cache: NonZeroUsize,
    /// `SET statement_timeout` sent on each new connection.
    session_setup: Option<String>,
}

impl Manager {
    pub(crate) fn new(
        config: tokio_postgres::Config,
        statement_cache: usize,
        statement_timeout: Option<Duration>,
    ) -> Manager {
        Manager {
            config,
            statement_cache: NonZeroUsize::new(statement_cache).unwrap_or(NonZeroUsize::MIN),
            session_setup: statement_timeout
                .map(|t| format!("SET statement_timeout = {}", t.as_millis().max(1))),
        }
    }
}

impl managed::Manager for Manager {
    type Type = ClientWrapper;
    type Error = tokio_postgres::Error;

    async fn create(&self) -> Result<ClientWrapper, tokio_postgres::Error> {
        // Boxed: the connect state machine is large and is part of every
        // checkout's future (every pending caller's) otherwise.
        Box::pin(self.connect()).await
    }

    async fn recycle(
        &self,
        client: &mut ClientWrapper,
        _: &Metrics,
    ) -> RecycleResult<tokio_postgres::Error> {
        if client.client.is_closed() {
            return Err(RecycleError::message("connection closed"));
        }
        if client.busy {
            return Err(RecycleError::message(
                "a statement on this connection was left unanswered",
            ));
        }
        if client.lent {
            // Back from `Pool::get`: a query the user dropped mid-flight
            // may still be unanswered. One empty round trip reads whatever
            // is pending (within `recycle_timeout`), so no batch waits
            // behind it.
            // Marked busy meanwhile: past `recycle_timeout` deadpool drops
            // it, and a busy connection is closed at once.
            client.busy = true;
            client.client.simple_query("").await?;
            client.busy = false;
            client.lent = false;
        }
        Ok(())
    }
}

impl Manager {
    async fn connect(&self) -> Result<ClientWrapper, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(NoTls).await?;
        let io = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "postgres connection ended");
            }
        });
        let wrapper = ClientWrapper {
            client,
            statements: Mutex::new(LruCache::new(self.statement_cache)),
            batch_statements: Mutex::new(LruCache::new(self.statement_cache)),
            io: io.abort_handle(),
            busy: false,
            lent: false,
        };
        if let Some(setup) = &self.session_setup {
            wrapper.client.batch_execute(setup).await?;
        }
        Ok(wrapper)
    }
}

/// A pooled connection: derefs to [`tokio_postgres::Client`], plus a bounded
/// per-connection cache of prepared statements.
pub struct ClientWrapper {
    client: tokio_postgres::Client,
    statements: Mutex<LruCache<Box<str>, Statement>>,
    batch_statements: Mutex<LruCache<(u64, usize), Statement>>,
    /// The task driving the socket.
    io: tokio::task::AbortHandle,
    /// A request of batchpool's is unanswered (see [`Wire`]).
    busy: bool,
    /// Handed out by `Pool::get`: checked with a round trip before reuse.
    pub(crate) lent: bool,
}

impl Wire for ClientWrapper {
    fn set_busy(&mut self, busy: bool) {
        self.busy = busy;
    }

    fn is_busy(&self) -> bool {
        self.busy
    }
}

impl Drop for ClientWrapper {
    fn drop(&mut self) {
        if self.busy {
            // Do not wait for an answer that may never come: close the
            // socket now (the server rolls back whatever was open).
            self.io.abort();
        }
    }
}

impl std::fmt::Debug for ClientWrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientWrapper")
            .field("closed", &self.client.is_closed())
            .finish_non_exhaustive()
    }
}

impl Deref for ClientWrapper {
    type Target = tokio_postgres::Client;
    fn deref(&self) -> &tokio_postgres::Client {
        &self.client
    }
}

impl ClientWrapper {
    /// Like [`tokio_postgres::Client::prepare`], but reuses a statement this
    /// connection already prepared for the same text (bounded LRU).
    pub async fn prepare_cached(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(stmt) = lock(&self.statements).get(sql) {
            return Ok(stmt.clone());
        }
        let stmt = self.client.prepare(sql).await?;
        lock(&self.statements).put(sql.into(), stmt.clone());
        Ok(stmt)
    }

    /// Drops the cached statement of `sql` (it no longer fits its table).
    pub(crate) fn forget(&self, sql: &str) {
        lock(&self.statements).pop(sql);
    }

    /// Drops every cached multi-row statement of shape `shape_id`.
    pub(crate) fn forget_batch(&self, shape_id: u64) {
        let mut cache = lock(&self.batch_statements);
        let stale: Vec<(u64, usize)> = cache
            .iter()
            .map(|(key, _)| *key)
            .filter(|(id, _)| *id == shape_id)
            .collect();
        for key in stale {
            cache.pop(&key);
        }
    }

    /// The prepared multi-row statement for `rows` rows of shape `shape_id`.
    pub(crate) async fn prepare_batch(
        &self,
        shape_id: u64,
        rows: usize,
        render: impl FnOnce() -> String,
        types: &[Type],
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(stmt) = lock(&self.batch_statements).get(&(shape_id, rows)) {
            return Ok(stmt.clone());
        }
        let sql = render();
        let mut all = Vec::with_capacity(types.len() * rows);
        for _ in 0..rows {
            all.extend_from_slice(types);
        }
        let stmt = self.client.prepare_typed(&sql, &all).await?;
        lock(&self.batch_statements).put((shape_id, rows), stmt.clone());
        Ok(stmt)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
