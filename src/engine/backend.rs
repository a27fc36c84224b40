//! The small trait a database backend implements so the flush engine can
//! drive it without knowing which database it talks to.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::classify::{Dialect, InsertShape};
use crate::error::Error;
use crate::explain::NotCoalesced;

/// Why one multi-row statement failed.
#[derive(Debug)]
pub(crate) enum ChunkError<O> {
    /// The server rejected the statement, and nothing of it committed: the
    /// error may belong to one row (a constraint, a bad value, a trigger's
    /// exception), so the engine re-runs smaller groups to find the rows
    /// whose own statement fails. Every database error is this unless it is
    /// provably about the statement as a whole.
    Row(Error),
    /// Like [`Row`](ChunkError::Row), and the error names the row it is
    /// about (its index in the statement's rows), by the server's own words
    /// or by matching the error's text against the rows' values. Only a
    /// lead: the engine runs that row on its own and the others again
    /// without it (see the engine's `isolate` module), so a wrong index
    /// costs a statement, never an outcome.
    RowAt(usize, Error),
    /// The failure is the same for every row (connection lost, outcome
    /// unknown, a statement-level error such as a syntax error or a
    /// cancelled statement): every row of the statement gets it.
    Statement(Error),
    /// The server refused a prepared statement that no longer fits its table
    /// (the table changed under it); nothing ran. The backend has dropped its
    /// cached statements for the shape: the engine re-learns the route and
    /// re-runs the rows once.
    Stale(Error),
    /// Sent in a pipelined pair inside one transaction (see
    /// [`Backend::execute_pair`]) whose other statement failed: nothing of
    /// it committed (rolled back, or never run). The engine runs its rows
    /// again.
    #[cfg_attr(
        not(feature = "postgres"),
        allow(dead_code, reason = "only PostgreSQL pipelines statements")
    )]
    NotRun,
    /// The backend ran the rows one statement each (the connection's session
    /// would make a multi-row statement differ from single-row ones): each
    /// row's own result, in order.
    #[cfg_attr(
        not(any(feature = "mysql", test)),
        allow(dead_code, reason = "only the MySQL backend runs rows one by one")
    )]
    Each(Vec<Result<O, Error>>),
}

/// Where a backend's connections come from: a deadpool pool for the real
/// backends, written once below.
pub(crate) trait Connections: Send + Sync + Sized + 'static {
    /// A pooled connection, returned to the pool when dropped.
    type Conn: Send + 'static;

    /// Takes a connection from the pool, waiting until `deadline` at most
    /// (`None`: as long as it takes).
    fn checkout(
        &self,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Lease<Self>, Error>> + Send;

    /// Takes a connection only if one is free (or can be opened) right now,
    /// without queueing behind other waiters.
    fn try_checkout(&self) -> impl Future<Output = Option<Lease<Self>>> + Send;

    /// Marks a request written to `conn` whose answer has not been read in
    /// full (`true`), or read (`false`). A connection dropped while marked
    /// never serves anyone again (see [`Lease`]).
    fn set_busy(conn: &mut Self::Conn, busy: bool);

    /// Whether `conn` is marked busy.
    fn is_busy(conn: &Self::Conn) -> bool;

    /// How long the pool waits for the answer to one statement on `conn`:
    /// the session's own statement time limit plus
    /// [`STATEMENT_GRACE`](crate::config::STATEMENT_GRACE), `None` when the
    /// session has none (then TCP keepalive and the TCP user timeout are
    /// what end a connection whose peer vanished).
    fn answer_limit(conn: &Self::Conn) -> Option<Duration>;

    /// Takes a connection out of the pool for good and closes it.
    fn discard(conn: Self::Conn);
}

/// A connection taken from the pool. Dropped while a request on it is
/// unanswered (its exchange timed out, or the future driving it was
/// dropped), it is closed at once instead of going back to the pool.
pub(crate) struct Lease<C: Connections>(Option<C::Conn>);

impl<C: Connections> Lease<C> {
    pub(crate) fn new(conn: C::Conn) -> Self {
        Lease(Some(conn))
    }

    /// The connection, to be handed on (to a user, a transaction guard):
    /// from here on its owner decides what happens to it.
    pub(crate) fn into_inner(mut self) -> C::Conn {
        self.0
            .take()
            .expect("a lease holds its connection until dropped")
    }
}

impl<C: Connections> std::ops::Deref for Lease<C> {
    type Target = C::Conn;
    fn deref(&self) -> &C::Conn {
        self.0
            .as_ref()
            .expect("a lease holds its connection until dropped")
    }
}

impl<C: Connections> std::ops::DerefMut for Lease<C> {
    fn deref_mut(&mut self) -> &mut C::Conn {
        self.0
            .as_mut()
            .expect("a lease holds its connection until dropped")
    }
}

impl<C: Connections> Drop for Lease<C> {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            if C::is_busy(&conn) {
                C::discard(conn);
            }
        }
    }
}

/// A backend's connection as the pool sees it: whether a request is
/// unanswered on it. A connection left busy (its exchange timed out, or the
/// future driving it was dropped) fails its next recycle, and dropping it
/// closes its socket at once instead of waiting for the answer.
pub(crate) trait Wire {
    /// See [`Connections::set_busy`].
    fn set_busy(&mut self, busy: bool);
    /// Whether a request is unanswered.
    fn is_busy(&self) -> bool;
    /// The statement time limit in force on this session, as read from the
    /// server after it was opened (and after every reset the pool did), or
    /// the one the user gave the pool where the server cannot enforce it;
    /// `None` when there is none.
    fn statement_limit(&self) -> Option<Duration>;
    /// Its generation and idle time (see [`Lifecycle`](super::lifecycle::Lifecycle)).
    fn stamp(&self) -> &super::lifecycle::Stamp;
}

/// How long the pool keeps to the number of connections a server's limit
/// allowed before it asks for one more (one refused connection attempt per
/// period while the limit holds; a limit raised or lifted is used from the
/// next attempt on).
const CAP_RETRY: Duration = Duration::from_secs(10);

/// How often a caller refused a connection by a server limit looks for one
/// of the pool's connections coming back.
const CAP_POLL: Duration = Duration::from_millis(5);

/// A connection limit of the server below the pool's `max_size` (a per-user
/// or per-role cap, or the server's own maximum), as the pool found it.
/// The manager counts its open connections and, while capped, refuses to
/// open more than the server allowed without asking it (see
/// [`admit`](ConnectionCap::admit)); callers then wait for the connections
/// the pool has.
#[derive(Debug, Default)]
pub(crate) struct ConnectionCap {
    /// Connections open now (created, not yet detached).
    live: std::sync::atomic::AtomicUsize,
    /// Connections the server allowed, and when to ask for one more.
    capped: std::sync::Mutex<Option<(usize, Instant)>>,
    /// The log has said so.
    warned: std::sync::atomic::AtomicBool,
}

impl ConnectionCap {
    fn capped(&self) -> std::sync::MutexGuard<'_, Option<(usize, Instant)>> {
        self.capped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the manager may try to open a connection now: not while as
    /// many are open as the server allowed, except once per [`CAP_RETRY`].
    pub(crate) fn admit(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let mut capped = self.capped();
        match &mut *capped {
            None => true,
            Some((allowed, _)) if self.live.load(Relaxed) < *allowed => true,
            Some((_, retry)) if Instant::now() >= *retry => {
                *retry = Instant::now() + CAP_RETRY;
                true
            }
            Some(_) => false,
        }
    }

    /// A connection was opened: past the cap, the limit rose.
    pub(crate) fn opened(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let live = self.live.fetch_add(1, Relaxed) + 1;
        let mut capped = self.capped();
        if capped.is_some_and(|(allowed, _)| live > allowed) {
            *capped = None;
        }
    }

    /// A connection left the pool.
    pub(crate) fn closed(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = self
            .live
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
    }

    /// The server refused a connection for a limit. With connections open,
    /// the pool keeps to their number; with none, nothing is capped (the
    /// caller gets the error: no connection could carry its work).
    pub(crate) fn refused(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let live = self.live.load(Relaxed);
        if live > 0 {
            *self.capped() = Some((live, Instant::now() + CAP_RETRY));
        }
    }

    /// Connections open now.
    fn live(&self) -> usize {
        self.live.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Says once in the log that the server caps the pool below its size.
    fn warn_once(&self, max_size: usize, error: &dyn std::fmt::Display) {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.warned.swap(true, Relaxed) {
            tracing::warn!(
                open = self.live(),
                max_size,
                "the server refuses more connections than the {} the pool has open \
                 (max_size {max_size}): {error}; callers wait for those connections, and the \
                 pool asks for one more every {} s",
                self.live(),
                CAP_RETRY.as_secs()
            );
        }
    }
}

/// The refusal of a connection the [`ConnectionCap`] made without asking
/// the server.
#[derive(Debug)]
pub(crate) struct CapRefused;

impl std::fmt::Display for CapRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the server's connection limit is reached (no more connections opened)")
    }
}

impl std::error::Error for CapRefused {}

/// A manager that knows its server's connection limit ([`ConnectionCap`]).
pub(crate) trait Capped: deadpool::managed::Manager {
    /// The manager's count of open connections and the server's cap.
    fn cap(&self) -> &ConnectionCap;
    /// Whether `e`, from `create`, is a refusal for a connection limit (the
    /// server's, or [`CapRefused`]).
    fn is_limit(e: &Self::Error) -> bool;
    /// The pool's connection lifetime settings and state.
    fn lifecycle(&self) -> &super::lifecycle::Lifecycle;
}

impl<M> Connections for deadpool::managed::Pool<M>
where
    M: Capped + 'static,
    M::Type: Send + Wire,
    M::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Debug + std::fmt::Display,
{
    type Conn = deadpool::managed::Object<M>;

    async fn checkout(&self, deadline: Option<Instant>) -> Result<Lease<Self>, Error> {
        super::lifecycle::ensure_sweeper(self);
        loop {
            let mut timeouts = self.timeouts();
            timeouts.wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let get = self.timeout_get(&timeouts);
            // deadpool's wait timeout covers the wait for a free slot;
            // opening or checking a connection has limits of its own
            // (`create_timeout`, `recycle_timeout`). The caller's deadline
            // bounds all of it.
            let got = match deadline {
                None => get.await,
                Some(d) => match tokio::time::timeout_at(d, get).await {
                    Ok(got) => got,
                    Err(_) => return Err(Error::wait_timeout()),
                },
            };
            match got {
                Ok(conn) => return Ok(Lease::new(conn)),
                Err(deadpool::managed::PoolError::Timeout(
                    deadpool::managed::TimeoutType::Wait,
                )) => return Err(Error::wait_timeout()),
                // The server allows fewer connections than `max_size`, and
                // the pool has some: wait for one of them (a connection the
                // server refused must not fail work the others can carry).
                Err(deadpool::managed::PoolError::Backend(e))
                    if M::is_limit(&e) && self.manager().cap().live() > 0 =>
                {
                    self.manager().cap().warn_once(self.status().max_size, &e);
                    let next = Instant::now() + CAP_POLL;
                    match deadline {
                        Some(d) if d <= next => {
                            tokio::time::sleep_until(d).await;
                            return Err(Error::wait_timeout());
                        }
                        _ => tokio::time::sleep_until(next).await,
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    async fn try_checkout(&self) -> Option<Lease<Self>> {
        super::lifecycle::ensure_sweeper(self);
        let mut timeouts = self.timeouts();
        timeouts.wait = Some(std::time::Duration::ZERO);
        // Boxed: deadpool's get future (it may open a connection) would
        // otherwise be part of every caller's `execute` future.
        match Box::pin(self.timeout_get(&timeouts)).await {
            Ok(conn) => Some(Lease::new(conn)),
            Err(deadpool::managed::PoolError::Backend(e))
                if M::is_limit(&e) && self.manager().cap().live() > 0 =>
            {
                self.manager().cap().warn_once(self.status().max_size, &e);
                None
            }
            Err(_) => None,
        }
    }

    fn set_busy(conn: &mut Self::Conn, busy: bool) {
        Wire::set_busy(&mut **conn, busy);
    }

    fn is_busy(conn: &Self::Conn) -> bool {
        Wire::is_busy(&**conn)
    }

    fn answer_limit(conn: &Self::Conn) -> Option<Duration> {
        Wire::statement_limit(&**conn).map(|l| l + crate::config::STATEMENT_GRACE)
    }

    fn discard(conn: Self::Conn) {
        // The wrapper, dropped busy, closes its socket at once.
        drop(deadpool::managed::Object::take(conn));
    }
}

/// Waits for the answer of one exchange with the server for at most
/// `limit`. On `Err` the request is still unanswered: the connection stays
/// marked busy and is closed when dropped.
pub(crate) async fn answer<T>(
    limit: Option<Duration>,
    exchange: impl Future<Output = T>,
) -> Result<T, Error> {
    match limit {
        None => Ok(exchange.await),
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| Error::statement_timeout(limit)),
    }
}

/// Runs one exchange on a connection: marks it busy, waits for the answer
/// within the limit, and clears the mark once answered. Evaluates to
/// `Result<T, Error>` (`Err` only when the limit passed). If the enclosing
/// future is dropped midway, the mark stays and the connection is closed.
macro_rules! exchange {
    ($conns:ty, $limit:expr, $conn:expr, |$c:ident| $call:expr) => {{
        <$conns as $crate::engine::backend::Connections>::set_busy($conn, true);
        let $c = &mut *$conn;
        let out = $crate::engine::backend::answer($limit, $call).await;
        if out.is_ok() {
            <$conns as $crate::engine::backend::Connections>::set_busy($conn, false);
        }
        out
    }};
}
pub(crate) use exchange;

/// A pooled connection of backend `B`, returned to the pool when dropped.
pub(crate) type Conn<B> = <<B as Backend>::Connections as Connections>::Conn;

/// Result of one multi-row statement: one output per row, in row order.
pub(crate) type ChunkResult<O> = Result<Vec<O>, ChunkError<O>>;

/// A database backend: pooled connections plus how to run one multi-row
/// statement for a batchable shape.
pub(crate) trait Backend: Send + Sync + Sized + 'static {
    /// One caller's row, already encoded in the caller's task.
    type Row: Send + Sync + 'static;
    /// One caller's outcome.
    type Output: Send + 'static;
    /// Backend data for one batchable statement shape (parameter types,
    /// statement cache id...).
    type Shape: Send + Sync + 'static;

    /// The SQL dialect used to classify statements.
    const DIALECT: Dialect;

    /// Most bind parameters one statement may carry (both wire protocols
    /// count them in 16 bits).
    fn max_params(&self) -> usize {
        65535
    }

    /// Most encoded parameter bytes one statement may carry (server packet
    /// limit); `usize::MAX` when the protocol has none.
    fn max_statement_bytes(&self) -> usize;

    /// Whether a re-learned shape is the one already in use (so its queue and
    /// the connections' prepared statements are kept).
    fn same_shape(old: &Self::Shape, new: &Self::Shape) -> bool;

    /// Prepares backend data for a statement the classifier found batchable,
    /// asking the server on `conn`. `Ok(Err(reason))` declines batching (the
    /// statement then runs on its own, and `Pool::explain` reports the
    /// reason).
    fn prepare_shape<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        sql: &'a str,
        shape: Arc<InsertShape>,
    ) -> impl Future<Output = Result<Result<Self::Shape, NotCoalesced>, Error>> + Send + 'a;

    /// A fingerprint of everything [`prepare_shape`](Backend::prepare_shape)
    /// reads about `shape`'s table and the functions its VALUES call (one
    /// cheap catalog query): while it stays the same, learning a text on that
    /// table again would give the same answer, so the engine checks this
    /// every `relearn_after` and learns a text again only when it changed.
    /// It depends on the table and the functions called only (texts on one
    /// table share it). `None`: the backend cannot tell (every check then
    /// learns the text again).
    fn fingerprint<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        shape: &'a InsertShape,
    ) -> impl Future<Output = Result<Option<String>, Error>> + Send + 'a {
        let _ = (conn, shape);
        async { Ok(None) }
    }

    /// Where connections come from (the deadpool pool).
    type Connections: Connections;

    /// The backend's connections.
    fn connections(&self) -> &Self::Connections;

    /// Whether a statement of `rows` rows of `shape` may have any row
    /// count: where the backend's bulk path takes that many rows, it sends
    /// no statement text of its own per row count, so a flush need not be
    /// cut to the allowed sizes that keep prepared texts few. Rows that the
    /// bulk path then refuses ([`uses_bulk`](Backend::uses_bulk) false) are
    /// cut as usual.
    fn any_size(&self, _shape: &Self::Shape, _rows: usize) -> bool {
        false
    }

    /// Whether [`execute`](Backend::execute) sends `rows` of `shape` by the
    /// backend's bulk path (counted in `Stats::bulk_statements`).
    fn uses_bulk(&self, _shape: &Self::Shape, _rows: &[Self::Row]) -> bool {
        false
    }

    /// Runs `rows` of `shape` as ONE autocommit multi-row statement on `conn`.
    fn execute<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        shape: &'a Self::Shape,
        rows: &'a [Self::Row],
    ) -> impl Future<Output = ChunkResult<Self::Output>> + Send + 'a;

    /// Whether [`execute_pair`](Backend::execute_pair) pipelines statements
    /// of `first` and `second` rows of `shape`: the second is on the wire
    /// while the first runs. `None` rows: of any size (whether the backend
    /// pipelines this shape at all).
    fn pipelines(
        &self,
        _shape: &Self::Shape,
        _first: Option<usize>,
        _second: Option<usize>,
    ) -> bool {
        false
    }

    /// Runs two statements of `shape` on `conn`, `first` sent before
    /// `second` (the server runs them in that order), pipelined where the
    /// backend can ([`pipelines`](Backend::pipelines)). With `atomic` both
    /// run in one transaction: if either fails, nothing of the pair commits
    /// and the other one is answered [`ChunkError::NotRun`], so the rows of
    /// a batch still take effect in their order (`execute_many`). Without,
    /// each is its own autocommit statement, as with two `execute` calls.
    fn execute_pair<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        shape: &'a Self::Shape,
        first: &'a [Self::Row],
        second: &'a [Self::Row],
        atomic: bool,
    ) -> impl Future<Output = (ChunkResult<Self::Output>, ChunkResult<Self::Output>)> + Send + 'a
    {
        // Without pipelining: the first alone; the engine runs the second
        // after it.
        let _ = (second, atomic);
        async move {
            (
                self.execute(conn, shape, first).await,
                Err(ChunkError::NotRun),
            )
        }
    }
}
