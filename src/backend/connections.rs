//! The connection role of a backend: where its connections come from (a
//! deadpool pool), the lease that closes a connection left with an
//! unanswered request, the server's connection cap, and the one exchange
//! with the server under the statement deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::lifecycle::{Lifecycle, Stamp, ensure_sweeper};
use crate::error::Error;
use crate::sync::lock;

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

    /// The statement time limit in force on `conn` (see
    /// [`Wire::statement_limit`]), `None` when there is none.
    fn statement_limit(conn: &Self::Conn) -> Option<Duration>;

    /// How long the pool waits for the answer to one statement on `conn`:
    /// the session's own statement time limit plus
    /// [`STATEMENT_GRACE`](crate::config::STATEMENT_GRACE), `None` when the
    /// session has none (then TCP keepalive and the TCP user timeout are
    /// what end a connection whose peer vanished).
    fn answer_limit(conn: &Self::Conn) -> Option<Duration> {
        Self::statement_limit(conn).map(|l| l + crate::config::STATEMENT_GRACE)
    }

    /// Takes a connection out of the pool for good and closes it.
    fn discard(conn: Self::Conn);

    /// The most connections the pool opens.
    fn max_size(&self) -> usize;
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
    /// What the methods below read and write.
    fn wire(&self) -> &WireState;
    /// What [`set_busy`](Wire::set_busy) writes.
    fn wire_mut(&mut self) -> &mut WireState;
    /// See [`Connections::set_busy`].
    fn set_busy(&mut self, busy: bool) {
        self.wire_mut().busy = busy;
    }
    /// Whether a request is unanswered.
    fn is_busy(&self) -> bool {
        self.wire().busy
    }
    /// The statement time limit in force on this session, as read from the
    /// server after it was opened (and after every reset the pool did), or
    /// the one the user gave the pool where the server cannot enforce it;
    /// `None` when there is none.
    fn statement_limit(&self) -> Option<Duration> {
        let wire = self.wire();
        // Unknown after a statement that may have changed it.
        wire.limit.filter(|_| !wire.limit_stale)
    }
    /// Its generation and idle time (see [`Lifecycle`]).
    fn stamp(&self) -> &Stamp {
        &self.wire().stamp
    }
}

/// What the pool keeps of a connection for [`Wire`], in each backend's
/// connection wrapper.
#[derive(Debug)]
pub(crate) struct WireState {
    /// A request of batchpool's is unanswered.
    pub(crate) busy: bool,
    /// The statement time limit in force (see [`Wire::statement_limit`]).
    pub(crate) limit: Option<Duration>,
    /// A statement of the user's that names the server's limit setting
    /// ran: the limit is read again before the pool relies on it.
    pub(crate) limit_stale: bool,
    /// Its generation and idle time, for the pool's lifecycle settings.
    pub(crate) stamp: Stamp,
}

impl WireState {
    /// A new connection's: idle, no limit known yet.
    pub(crate) fn new(stamp: Stamp) -> WireState {
        WireState {
            busy: false,
            limit: None,
            limit_stale: false,
            stamp,
        }
    }

    /// Why a connection taken from the pool must not be handed out again,
    /// found without a round trip: retired or past `max_lifetime` (see
    /// [`Lifecycle::expired`]), or a request left unanswered on it.
    pub(crate) fn unusable(
        &self,
        lifecycle: &Lifecycle,
        metrics: &deadpool::managed::Metrics,
    ) -> Option<&'static str> {
        lifecycle.expired(&self.stamp, metrics).or_else(|| {
            self.busy
                .then_some("a statement on this connection was left unanswered")
        })
    }
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
        lock(&self.capped)
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
    fn lifecycle(&self) -> &Lifecycle;
}

impl<M> Connections for deadpool::managed::Pool<M>
where
    M: Capped + 'static,
    M::Type: Send + Wire,
    M::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Debug + std::fmt::Display,
{
    type Conn = deadpool::managed::Object<M>;

    async fn checkout(&self, deadline: Option<Instant>) -> Result<Lease<Self>, Error> {
        ensure_sweeper(self);
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
        ensure_sweeper(self);
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

    fn statement_limit(conn: &Self::Conn) -> Option<Duration> {
        Wire::statement_limit(&**conn)
    }

    fn max_size(&self) -> usize {
        self.status().max_size
    }

    fn discard(conn: Self::Conn) {
        // The wrapper, dropped busy, closes its socket at once.
        super::discard(conn);
    }
}

/// Waits for the answer of one exchange with the server for at most
/// `limit`. On `Err` the request is still unanswered: the connection stays
/// marked busy and is closed when dropped.
pub(crate) fn answer<F: Future>(limit: Option<Duration>, exchange: F) -> Answer<F> {
    Answer {
        exchange,
        deadline: limit.map(tokio::time::sleep),
        limit: limit.unwrap_or_default(),
    }
}

/// The future of [`answer`]: the exchange and, with a limit, its timer,
/// side by side. (An `async fn` would hold the exchange twice, once as its
/// argument and once as the future it awaits, and every flush moves that
/// state around.)
#[pin_project::pin_project]
pub(crate) struct Answer<F> {
    #[pin]
    exchange: F,
    #[pin]
    deadline: Option<tokio::time::Sleep>,
    limit: Duration,
}

impl<F: Future> Future for Answer<F> {
    type Output = Result<F::Output, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.exchange.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        match this.deadline.as_pin_mut().map(|d| d.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(Error::statement_timeout(*this.limit))),
            _ => Poll::Pending,
        }
    }
}

/// Runs one exchange on a connection: marks it busy, waits for the answer
/// within the limit, and clears the mark once answered. Evaluates to
/// `Result<T, Error>` (`Err` only when the limit passed). If the enclosing
/// future is dropped midway, the mark stays and the connection is closed.
macro_rules! exchange {
    ($conns:ty, $limit:expr, $conn:expr, |$c:ident| $call:expr) => {{
        <$conns as $crate::backend::Connections>::set_busy($conn, true);
        let $c = &mut *$conn;
        let out = $crate::backend::answer($limit, $call).await;
        if out.is_ok() {
            <$conns as $crate::backend::Connections>::set_busy($conn, false);
        }
        out
    }};
}
pub(crate) use exchange;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::answer;

    #[tokio::test(start_paused = true)]
    async fn an_answer_within_the_limit_is_the_exchanges_and_none_after_it_is_a_timeout() {
        let limit = Duration::from_secs(2);
        let quick = answer(Some(limit), async {
            tokio::time::sleep(Duration::from_millis(1_999)).await;
            7
        });
        assert_eq!(quick.await.unwrap(), 7);

        let start = tokio::time::Instant::now();
        let stalled = answer(Some(limit), std::future::pending::<()>());
        let e = stalled.await.unwrap_err();
        assert!(e.is_statement_timeout(), "{e}");
        assert!(e.to_string().contains("2000 ms"), "{e}");
        assert_eq!(start.elapsed(), limit);

        // Without a limit the exchange takes as long as it takes.
        let slow = answer(None, async {
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            "late"
        });
        assert_eq!(slow.await.unwrap(), "late");
    }
}
