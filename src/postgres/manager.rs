//! deadpool manager for tokio-postgres connections, each with a bounded cache
//! of prepared statements, or (unnamed mode) the pool's learned parameter
//! types.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use lru::LruCache;
use tokio_postgres::Statement;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::connect::Connector;
use super::errors::{sent_error, stale_db, unsent_error};
use super::pipeline::{Step, in_order};
use super::pooler::{FarEnd, Found, StaysOpen, autocommits, behind_pooler};
use super::statements::Statements;
use super::unnamed::{Described, Learned, look_up, preload_types};
use crate::backend::{CapRefused, Capped, ConnectionCap, Lifecycle, Wire, WireState};
use crate::error::{Error, Kind};
use crate::pool::hooks::Hooks;
use crate::sync::lock;

/// What a session reset undoes: an open transaction, cursors, the role,
/// settings, `LISTEN`s, advisory locks, temporary tables and sequence state
/// (`DISCARD ALL` without `DEALLOCATE ALL`, which cannot run after the
/// `ROLLBACK` in one string).
const SESSION_RESET: &str = "ROLLBACK; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; \
     UNLISTEN *; SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES";

/// Creates and recycles connections for the pool.
#[derive(Debug)]
pub struct Manager {
    config: tokio_postgres::Config,
    /// Opens connections with the pool's TLS connector.
    connector: Connector,
    statement_cache: NonZeroUsize,
    /// The statement time limit the user asked the pool to set
    /// ([`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout)).
    statement_timeout: Option<Duration>,
    /// Its `SET statement_timeout`, sent on each new connection (not behind
    /// a pooler).
    session_setup: Option<String>,
    /// Sent when a connection comes back from `Pool::get`.
    session_reset: String,
    mode: Statements,
    /// What is between the pool and PostgreSQL (shared with the backend).
    far: Arc<FarEnd>,
    /// Whether the pool said once that autocommit statements did not
    /// commit on a connection until it committed for them.
    healed_said: AtomicBool,
    /// Parameter types learned per statement text (unnamed mode), shared by
    /// the pool's connections.
    learned: Arc<Learned>,
    /// The builder's `post_create` / `pre_recycle` hooks.
    hooks: Hooks<tokio_postgres::Client>,
    /// Open connections, and the server's connection limit when it is
    /// below the pool's size.
    cap: ConnectionCap,
    /// `max_lifetime`, `idle_timeout` and retired generations.
    lifecycle: Lifecycle,
}

/// What opening or checking a connection failed with: a
/// `tokio_postgres::Error`, or a hook's error.
type ConnectError = Box<dyn std::error::Error + Send + Sync>;

/// Which statements the pool sends, and what is between it and PostgreSQL.
pub(crate) struct Between {
    pub(crate) mode: Statements,
    pub(crate) far: Arc<FarEnd>,
}

impl Manager {
    pub(crate) fn new(
        config: tokio_postgres::Config,
        connector: Connector,
        statement_cache: usize,
        statement_timeout: Option<Duration>,
        between: Between,
        hooks: Hooks<tokio_postgres::Client>,
        lifecycle: Lifecycle,
    ) -> Manager {
        let Between { mode, far } = between;
        let statement_cache = NonZeroUsize::new(statement_cache).unwrap_or(NonZeroUsize::MIN);
        // Whole milliseconds, as the server keeps it (and `SHOW` reads it).
        let statement_timeout = statement_timeout.map(|t| {
            Duration::from_millis(u64::try_from(t.as_millis().max(1)).unwrap_or(u64::MAX))
        });
        let session_setup =
            statement_timeout.map(|t| format!("SET statement_timeout = {}", t.as_millis()));
        let mut session_reset = String::from(SESSION_RESET);
        if let Some(setup) = &session_setup {
            session_reset.push_str("; ");
            session_reset.push_str(setup);
        }
        Manager {
            config,
            connector,
            statement_cache,
            statement_timeout,
            session_setup,
            session_reset,
            mode,
            far,
            healed_said: AtomicBool::new(false),
            learned: Arc::new(Learned::new(statement_cache)),
            hooks,
            cap: ConnectionCap::default(),
            lifecycle,
        }
    }
}

impl managed::Manager for Manager {
    type Type = ClientWrapper;
    type Error = ConnectError;

    async fn create(&self) -> Result<ClientWrapper, ConnectError> {
        if !self.cap.admit() {
            return Err(Box::new(CapRefused));
        }
        // Boxed: the connect state machine is large and is part of every
        // checkout's future (every pending caller's) otherwise.
        let mut wrapper = match Box::pin(self.connect()).await {
            Ok(wrapper) => wrapper,
            Err(e) => {
                if e.downcast_ref::<tokio_postgres::Error>()
                    .is_some_and(|e| e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS))
                {
                    self.cap.refused();
                }
                return Err(e);
            }
        };
        if self.hooks.has_post_create() {
            Box::pin(self.hooks.post_create(&mut wrapper.client)).await?;
            // A hook may have set the limit itself.
            let read = show_limit(&wrapper.client).await?;
            wrapper.settle_limit(read, self.statement_timeout);
        }
        self.cap.opened();
        Ok(wrapper)
    }

    fn detach(&self, _: &mut ClientWrapper) {
        self.cap.closed();
    }

    async fn recycle(
        &self,
        client: &mut ClientWrapper,
        metrics: &Metrics,
    ) -> RecycleResult<ConnectError> {
        // Only ever a connection in the pool: one in use is retired when it
        // comes back and is next taken (or swept).
        if client.is_broken() {
            return Err(RecycleError::message("connection closed"));
        }
        if let Some(why) = client.wire.unusable(&self.lifecycle, metrics) {
            return Err(RecycleError::message(why));
        }
        if !client.lent && client.wire.limit_stale {
            client.wire.busy = true;
            Box::pin(client.refresh_limit(self.statement_timeout))
                .await
                .map_err(|e| RecycleError::Backend(e.into()))?;
            client.wire.busy = false;
        }
        if client.resync_due.load(Ordering::Relaxed) {
            client.wire.busy = true;
            Box::pin(client.resync()).await;
            if client.is_broken() {
                return Err(RecycleError::message(
                    "pgpool-II kept taking the session for one in a failed transaction",
                ));
            }
            client.wire.busy = false;
        }
        let read_only_seen = client.read_only_seen.swap(false, Ordering::Relaxed);
        if !client.lent && !self.hooks.has_pre_recycle() && !read_only_seen {
            // The pool's own connection, nothing to run: no round trip.
            return Ok(());
        }
        // Marked busy meanwhile: past `recycle_timeout` deadpool drops it,
        // and a busy connection is closed at once.
        client.wire.busy = true;
        Box::pin(self.check(client))
            .await
            .map_err(RecycleError::Backend)?;
        if read_only_seen
            && Box::pin(read_only(&client.client))
                .await
                .map_err(RecycleError::Backend)?
        {
            // A standby (an old primary restarted as one, a host of a
            // multi-host string that was promoted away from), or a server
            // fenced with `default_transaction_read_only`: every write here
            // would fail. A new connection is opened as the connection
            // string says (`target_session_attrs=read-write` passes over
            // read-only hosts).
            return Err(RecycleError::message(
                "the session is read-only (transaction_read_only = on)",
            ));
        }
        client.wire.busy = false;
        Ok(())
    }
}

impl Capped for Manager {
    fn cap(&self) -> &ConnectionCap {
        &self.cap
    }

    fn is_limit(e: &ConnectError) -> bool {
        // 53300 too_many_connections: the server's max_connections (also
        // "remaining connection slots are reserved"), a role's or a
        // database's CONNECTION LIMIT.
        e.downcast_ref::<CapRefused>().is_some()
            || e.downcast_ref::<tokio_postgres::Error>()
                .is_some_and(|e| e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS))
    }

    fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }
}

impl Manager {
    /// `recycle` of a connection that is open and idle: resets it if it
    /// was lent out, then runs the `pre_recycle` hooks.
    async fn check(&self, client: &mut ClientWrapper) -> Result<(), ConnectError> {
        if client.lent {
            if client.pooled {
                // Behind a pooler the session is the pooler's; only a
                // transaction the user left open is ours to end (it keeps a
                // server connection, and the next batch would run in it).
                // The round trip also reads whatever a query the user
                // dropped mid-flight left pending. A pooler that refuses
                // transaction blocks closed the connection at a `BEGIN`:
                // nothing can be open, and an empty query reads alike.
                let end = if client.transactions { "ROLLBACK" } else { "" };
                client.client.batch_execute(end).await?;
            } else {
                // The user may have changed the session (`SET search_path`,
                // `SET ROLE`, `LISTEN`, cursors, temporary tables, advisory
                // locks) or left a transaction open: reset it before a batch
                // runs in it, and set it up again as a new one
                // (`post_create` hooks included). `RESET ALL` puts every
                // setting back to the session's own defaults: those of the
                // connection string (`options=-c ...`), the role, the
                // database and the server. Prepared statements are kept
                // (the pool's and tokio-postgres's own stay valid; one the
                // user deallocated is prepared again when next needed).
                let read = if self.hooks.has_post_create() {
                    client.client.batch_execute(&self.session_reset).await?;
                    self.hooks.post_create(&mut client.client).await?;
                    show_limit(&client.client).await?
                } else {
                    // The limit in force, read in the same round trip.
                    let sql = format!("{}; {SHOW_LIMIT}", self.session_reset);
                    limit_of(&client.client.simple_query(&sql).await?)
                };
                // Except the pool's COPY statements: one the user deallocated
                // would fail at its Bind, which the driver does not recover
                // from (see `retire`), so they are prepared again.
                client.forget_copies();
                client.pool_set = self.session_setup.is_some();
                client.settle_limit(read, self.statement_timeout);
            }
            client.lent = false;
        }
        self.hooks.pre_recycle(&mut client.client).await?;
        Ok(())
    }
}

impl Manager {
    /// Opens a connection and finds out what it reaches: its server's own
    /// cancel key or a pooler's, whether its statements commit on their
    /// own, and (once per pool) what is in between (see [`FarEnd`]).
    async fn open(
        &self,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>, Opened), ConnectError> {
        // Connections the asking closed (see `FarEnd::find`).
        let mut closed = 0;
        loop {
            let (client, io) = self.connector.connect.connect(&self.config).await?;
            // The session's own statement time limit (connection string,
            // role, database, server) and the rest, in one round trip.
            let (keyed, own, commits) = futures_util::future::join3(
                behind_pooler(&client),
                show_limit(&client),
                autocommits(&client),
            )
            .await;
            let first = match (keyed, own, commits) {
                (Ok(keyed), Ok(own), Ok(commits)) => (keyed, own, commits),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    io.abort();
                    return Err(e.into());
                }
            };
            let (keyed, own, commits) = first;
            let found = match self.far.find(&client, keyed).await {
                // Asked whether it takes a transaction block, the pooler
                // closed this one.
                Ok(None | Some((_, true))) if closed < 2 => {
                    io.abort();
                    closed += 1;
                    continue;
                }
                Ok(Some((found, _))) => found,
                Ok(None) => {
                    io.abort();
                    return Err(
                        "the far end closed every connection asked whether it takes \
                         a transaction block"
                            .into(),
                    );
                }
                Err(e) => {
                    io.abort();
                    return Err(e.into());
                }
            };
            if !commits {
                if let Err(e) = self.commit_for(&client).await {
                    io.abort();
                    return Err(e);
                }
            }
            let opened = Opened {
                pooled: self.far.shares_sessions(found, keyed),
                own,
                transactions: found != Found::Statement,
                pgpool: found == Found::Pgpool,
            };
            return Ok((client, io, opened));
        }
    }

    /// A connection whose autocommit statements stay in a transaction
    /// begun ahead of them (pgpool-II in raw mode): commits it, and checks
    /// that the next one commits. pgpool-II begins such a transaction only
    /// on a server connection that has none of its own yet, and keeps
    /// counting the committed one as its own.
    async fn commit_for(&self, client: &tokio_postgres::Client) -> Result<(), ConnectError> {
        client.batch_execute("COMMIT").await?;
        if !autocommits(client).await? {
            return Err(Box::new(StaysOpen));
        }
        if !self.healed_said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "statements sent on their own did not commit on a new connection until the \
                 pool committed for them: something between the pool and PostgreSQL (pgpool-II \
                 in raw mode) began a transaction ahead of them; every new connection is \
                 checked and committed for once"
            );
        }
        Ok(())
    }

    async fn connect(&self) -> Result<ClientWrapper, ConnectError> {
        // Before connecting: a `retire_all` meanwhile retires it too.
        let stamp = self.lifecycle.stamp();
        let (client, io, opened) = self.open().await?;
        let Opened {
            pooled,
            own,
            transactions,
            pgpool,
        } = opened;
        if pooled && self.mode == Statements::Named {
            tracing::warn!(
                "statements=named behind a pooler: correct only if the pooler keeps each \
                 session on one server connection (session mode, or PgBouncer >= 1.21 with \
                 max_prepared_statements)"
            );
        }
        let unnamed = match self.mode {
            Statements::Named => false,
            Statements::Unnamed => true,
            Statements::Auto => pooled,
        };
        let wrapper = ClientWrapper {
            client,
            statements: Mutex::new(LruCache::new(self.statement_cache)),
            batch_statements: Mutex::new(LruCache::new(self.statement_cache)),
            learned: unnamed.then(|| Arc::clone(&self.learned)),
            io: io.abort_handle(),
            types_lost: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            read_only_seen: AtomicBool::new(false),
            types: Mutex::new(HashSet::new()),
            pooled,
            transactions,
            pgpool,
            resync_due: AtomicBool::new(false),
            lent: false,
            own_limit: own,
            pool_set: false,
            explicit_limit: self.statement_timeout,
            wire: WireState::new(stamp),
        };
        if unnamed {
            match preload_types(&wrapper.client, !transactions || pgpool).await {
                Ok(oids) => lock(&wrapper.types).extend(oids),
                Err(e) if e.as_db_error().is_some() => {
                    tracing::debug!(error = %e, "the database's own types could not be looked up");
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Behind a pooler a session setting would stay on whichever server
        // connection ran it, for other clients: the server-side limit is
        // then the database's or role's own.
        let mut wrapper = wrapper;
        if let Some(setup) = self.session_setup.as_ref().filter(|_| !pooled) {
            wrapper.client.batch_execute(setup).await?;
            wrapper.pool_set = true;
        }
        wrapper.settle_limit(
            if wrapper.pool_set {
                self.statement_timeout
            } else {
                own
            },
            self.statement_timeout,
        );
        Ok(wrapper)
    }
}

/// What opening a connection found out about it.
struct Opened {
    /// It reaches PostgreSQL through a pooler that shares server sessions.
    pooled: bool,
    /// The session's own statement time limit.
    own: Option<Duration>,
    /// Transaction blocks reach the server.
    transactions: bool,
    /// Through pgpool-II.
    pgpool: bool,
}

impl Manager {
    /// A connection of its own for a [`Listener`](super::Listener), opened
    /// as the pool's are (connection string, TLS connector, TCP settings,
    /// `post_create` hooks), with its notifications forwarded.
    pub(crate) async fn open_listener(
        &self,
    ) -> Result<
        (
            tokio_postgres::Client,
            tokio::sync::mpsc::UnboundedReceiver<super::listen::Received>,
            tokio::task::JoinHandle<()>,
            Option<Duration>,
        ),
        ConnectError,
    > {
        let (mut client, received, io) = self
            .connector
            .connect
            .connect_listening(&self.config)
            .await?;
        if let Err(e) = Box::pin(self.hooks.post_create(&mut client)).await {
            io.abort();
            return Err(e.into());
        }
        // How long to wait for an answer: the session's own limit, or the
        // builder's where it is tighter (as for the pool's statements).
        let session = match show_limit(&client).await {
            Ok(limit) => limit,
            Err(e) => {
                io.abort();
                return Err(e.into());
            }
        };
        let limit = [session, self.statement_timeout]
            .into_iter()
            .flatten()
            .min()
            .map(|l| l + crate::config::STATEMENT_GRACE);
        Ok((client, received, io, limit))
    }
}

/// A pooled connection: derefs to [`tokio_postgres::Client`], plus a bounded
/// per-connection cache of prepared statements.
pub struct ClientWrapper {
    client: tokio_postgres::Client,
    statements: Mutex<LruCache<Box<str>, Statement>>,
    batch_statements: Mutex<LruCache<(u64, usize), Statement>>,
    /// Unnamed mode: the pool's learned parameter types (no named
    /// statement is ever kept on the server).
    learned: Option<Arc<Learned>>,
    /// The task driving the socket.
    io: tokio::task::AbortHandle,
    /// Unnamed mode: tokio-postgres's own named statement for looking up
    /// types is not on the server connection the pooler gave: this
    /// connection must go.
    types_lost: AtomicBool,
    /// The driver's view of the replies may be out of step with the
    /// server's (see [`retire`](ClientWrapper::retire)): nothing more is
    /// sent, and the connection goes.
    retired: AtomicBool,
    /// A statement was refused because the transaction was read-only
    /// (25006): the session is checked before the connection is used
    /// again (see [`Manager::recycle`](managed::Manager::recycle)).
    read_only_seen: AtomicBool,
    /// Unnamed mode: oids of the catalog types tokio-postgres has cached on
    /// this connection.
    types: Mutex<HashSet<u32>>,
    /// Handed out by `Pool::get`: reset (or checked, behind a pooler)
    /// before reuse.
    pub(crate) lent: bool,
    /// Reaches PostgreSQL through a pooler.
    pooled: bool,
    /// Transaction blocks reach the server (not through a pooler that
    /// refuses them): types are learned inside one.
    transactions: bool,
    /// Through pgpool-II, which can lose track of a transaction that saw
    /// an error (see [`resync`](ClientWrapper::resync)).
    pgpool: bool,
    /// A statement failed here since pgpool-II's view was last checked.
    resync_due: AtomicBool,
    /// The session's own `statement_timeout`, before the pool set the
    /// user's [`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout)
    /// (`None`: no limit).
    own_limit: Option<Duration>,
    /// The pool's `SET statement_timeout` is in force on the session.
    pool_set: bool,
    /// [`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout).
    explicit_limit: Option<Duration>,
    /// Busy, statement limit and lifecycle stamp (see [`Wire`]).
    wire: WireState,
}

impl Wire for ClientWrapper {
    fn wire(&self) -> &WireState {
        &self.wire
    }

    fn wire_mut(&mut self) -> &mut WireState {
        &mut self.wire
    }
}

/// Whether `sql` names the `statement_timeout` setting.
fn names_limit(sql: &str) -> bool {
    const NAME: &[u8] = b"statement_timeout";
    sql.as_bytes()
        .windows(NAME.len())
        .any(|w| w.eq_ignore_ascii_case(NAME))
}

/// Whether the session's transactions are read-only (`SHOW
/// transaction_read_only`, what tokio-postgres's
/// `target_session_attrs=read-write` checks): a hot standby, or
/// `default_transaction_read_only` on.
async fn read_only(client: &tokio_postgres::Client) -> Result<bool, ConnectError> {
    let replies = client.simple_query("SHOW transaction_read_only").await?;
    Ok(replies.iter().any(
        |m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(row) if row.get(0) == Some("on")),
    ))
}

/// Reads the session's `statement_timeout`.
const SHOW_LIMIT: &str = "SHOW statement_timeout";

/// The session's statement time limit (`None`: none).
async fn show_limit(
    client: &tokio_postgres::Client,
) -> Result<Option<Duration>, tokio_postgres::Error> {
    Ok(limit_of(&client.simple_query(SHOW_LIMIT).await?))
}

/// The value of the last row of a simple query's replies, as
/// `SHOW statement_timeout` formats it: `0` (no limit), or a whole number
/// of `ms`, `s`, `min`, `h` or `d` (the largest unit that divides it). A
/// value that cannot be read counts as no limit.
fn limit_of(replies: &[tokio_postgres::SimpleQueryMessage]) -> Option<Duration> {
    let value = replies.iter().rev().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
        _ => None,
    })?;
    parse_limit(value)
}

/// See [`limit_of`].
fn parse_limit(value: &str) -> Option<Duration> {
    let value = value.trim();
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let n: u64 = value[..digits].parse().ok()?;
    let ms = match value[digits..].trim() {
        "" | "ms" => n,
        "s" => n.checked_mul(1_000)?,
        "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        "d" => n.checked_mul(86_400_000)?,
        _ => return None,
    };
    (ms > 0).then(|| Duration::from_millis(ms))
}

impl Drop for ClientWrapper {
    fn drop(&mut self) {
        if self.wire.busy {
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
            .field("unnamed", &self.learned.is_some())
            .finish_non_exhaustive()
    }
}

impl Deref for ClientWrapper {
    type Target = tokio_postgres::Client;
    fn deref(&self) -> &tokio_postgres::Client {
        &self.client
    }
}

/// `&mut` access, for what tokio-postgres takes by `&mut Client`:
/// [`transaction`](tokio_postgres::Client::transaction),
/// [`build_transaction`](tokio_postgres::Client::build_transaction) and,
/// through a transaction, savepoints. The pool needs nothing of the
/// client's own state to stay as it is: a lent connection is reset when it
/// comes back (an open transaction rolled back), and one that does not
/// answer is closed. The one thing not to do is to replace the client with
/// another connection (`*client = other`): the pool's cached statements
/// belong to the connection it opened.
impl DerefMut for ClientWrapper {
    fn deref_mut(&mut self) -> &mut tokio_postgres::Client {
        &mut self.client
    }
}

impl ClientWrapper {
    /// Settles which statement time limit the pool enforces after the
    /// session was set up, from the limit `read` from the server: the
    /// pool's own `SET` when it is still in force, else the session's (a
    /// hook's, the role's...). Where the pool could not set the user's
    /// `explicit` limit (behind a pooler) it enforces it itself, as the
    /// tighter of the two.
    fn settle_limit(&mut self, read: Option<Duration>, explicit: Option<Duration>) {
        self.wire.limit_stale = false;
        if self.pool_set && read == explicit {
            self.wire.limit = explicit;
            return;
        }
        // Not the pool's value (a hook changed it): the session's own.
        self.pool_set = false;
        self.own_limit = read;
        self.wire.limit = match (read, explicit.filter(|_| self.pooled)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Notes statements of the user's about to run here: one that names
    /// `statement_timeout` (`SET`, `SET LOCAL`, `set_config`, `RESET`) may
    /// change the session's limit, which is then read again.
    pub(crate) fn note_texts(&mut self, texts: &[&str]) {
        if texts.iter().any(|sql| names_limit(sql)) {
            self.wire.limit_stale = true;
        }
    }

    /// Reads the session's limit again if a statement may have changed it
    /// (see [`note_texts`](Self::note_texts)); `explicit` is the builder's
    /// (`None`: the one this connection was opened with).
    pub(crate) async fn refresh_limit(
        &mut self,
        explicit: Option<Duration>,
    ) -> Result<(), tokio_postgres::Error> {
        if !self.wire.limit_stale {
            return Ok(());
        }
        let read = show_limit(&self.client).await?;
        self.settle_limit(read, explicit.or(self.explicit_limit));
        Ok(())
    }

    /// Hands the connection to the user (`Pool::get`): it is reset when it
    /// comes back. A session on which the pool set the user's
    /// [`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout)
    /// for its own statements gets its own limit back first, so a long
    /// migration or `VACUUM` on it is not cut by the pool's setting.
    pub(crate) async fn lend(&mut self) -> Result<(), Error> {
        self.lent = true;
        if !self.pool_set {
            return Ok(());
        }
        let ms = self.own_limit.map_or(0, |l| l.as_millis().max(1));
        self.client
            .batch_execute(&format!("SET statement_timeout = {ms}"))
            .await
            .map_err(sent_error)?;
        self.pool_set = false;
        self.wire.limit = self.own_limit;
        Ok(())
    }

    /// Like [`tokio_postgres::Client::prepare`], but reuses a statement this
    /// connection already prepared for the same text (bounded LRU).
    pub async fn prepare_cached(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(stmt) = lock(&self.statements).get(sql) {
            return Ok(stmt.clone());
        }
        let stmt = self.prepare_typed_fresh(sql, &[]).await?;
        lock(&self.statements).put(sql.into(), stmt.clone());
        Ok(stmt)
    }

    /// Prepares a new named statement. The name is tokio-postgres's
    /// (`s<n>`, from a counter of the process): a statement of that name
    /// left on the server session by someone else (`42P05`, only possible
    /// when a pooler shares server sessions) is stepped over by preparing
    /// again under the next name.
    async fn prepare_typed_fresh(
        &self,
        sql: &str,
        types: &[Type],
    ) -> Result<Statement, tokio_postgres::Error> {
        match self.client.prepare_typed(sql, types).await {
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_PSTATEMENT) => {
                self.client.prepare_typed(sql, types).await
            }
            other => other,
        }
    }

    /// Closed, or unusable (see `types_lost`, [`retire`](Self::retire)).
    pub(crate) fn is_broken(&self) -> bool {
        self.client.is_closed()
            || self.types_lost.load(Ordering::Relaxed)
            || self.retired.load(Ordering::Relaxed)
    }

    /// Takes the connection out of use: nothing more is sent on it, and the
    /// pool drops it. For a `COPY ... FROM STDIN` that failed before its
    /// data could be sent (its Bind refused): tokio-postgres then sends
    /// `CopyFail` and `Sync`, which the server answers with a second
    /// `ReadyForQuery` that the driver would take as the end of the next
    /// request's reply.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Through pgpool-II, after a transaction in which a statement failed:
    /// makes sure pgpool-II knows the session is out of it. pgpool-II keeps
    /// its own idea of each session's transaction state and answers every
    /// statement but `COMMIT` / `ROLLBACK` itself with `25P02` while it
    /// takes the session for one inside a failed transaction. After a
    /// statement failed in a transaction whose messages were pipelined, it
    /// sometimes kept that idea after the transaction ended on the server
    /// (and a later statement could crash the pgpool-II process serving
    /// the session), so through pgpool-II a transaction's messages go out
    /// one at a time ([`in_turn`](Self::in_turn)), which did not show it;
    /// this check stays behind that. A `SELECT 1` tells;
    /// while pgpool-II answers it so, an `ABORT` (`ROLLBACK`, which it
    /// passes on) resets its idea. A connection it still answers so after
    /// three is retired. Nothing is sent when no statement failed here.
    pub(crate) async fn resync(&self) {
        if !self.resync_due.swap(false, Ordering::Relaxed) {
            return;
        }
        for _ in 0..3 {
            match self.client.simple_query("SELECT 1").await {
                Ok(_) => return,
                Err(e) if e.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION) => {
                    tracing::debug!("pgpool-II took the session for one in a failed transaction");
                    if self.client.batch_execute("ABORT").await.is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        self.retire();
    }

    /// Whether a server error says the statement no longer fits what was
    /// prepared or learned for it, before anything ran.
    pub(crate) fn stale(&self, db: &tokio_postgres::error::DbError) -> bool {
        if self.unnamed() {
            // The server parses every run afresh; only the learned
            // parameter types can be out of date.
            db.code() == &tokio_postgres::error::SqlState::DATATYPE_MISMATCH
        } else {
            stale_db(db)
        }
    }

    /// Maps an error of a statement that was sent. In unnamed mode a
    /// missing prepared statement can only be tokio-postgres's type lookup,
    /// made while reading the statement's answer: the statement itself has
    /// run, with an outcome that is not known. A statement refused as a
    /// write in a read-only transaction (25006) has the session checked
    /// before its next use: on a read-only server the connection goes.
    pub(crate) fn sent_error(&self, e: tokio_postgres::Error) -> Error {
        if self.pgpool && e.as_db_error().is_some() {
            self.resync_due.store(true, Ordering::Relaxed);
        }
        if e.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) {
            // Nothing ran; the connection may be on a read-only server.
            self.read_only_seen.store(true, Ordering::Relaxed);
        }
        if self.unnamed()
            && e.code() == Some(&tokio_postgres::error::SqlState::INVALID_SQL_STATEMENT_NAME)
        {
            self.types_lost.store(true, Ordering::Relaxed);
            return Error::with_source(
                Kind::OutcomeUnknown,
                "a type lookup failed after the statement was sent (behind a \
                 transaction-mode pooler); the connection is closed",
                e,
            );
        }
        sent_error(e)
    }

    /// Whether texts are learned without a transaction around them: behind
    /// a pooler that refuses transaction blocks, and through pgpool-II,
    /// which keeps each session on server sessions of its own (nothing is
    /// left on another client's) and loses track of a transaction in which
    /// a pipelined message failed (see [`resync`](Self::resync)).
    fn learns_bare(&self) -> bool {
        !self.transactions || self.pgpool
    }

    /// Whether a transaction's messages go out one at a time, each answered
    /// before the next is sent (through pgpool-II, which loses track of a
    /// transaction in which a pipelined statement failed).
    pub(crate) fn in_turn(&self) -> bool {
        self.pgpool
    }

    /// Whether this connection sends unnamed statements only.
    pub(crate) fn unnamed(&self) -> bool {
        self.learned.is_some()
    }

    /// `texts` ready to run here, in order: each one's cached named
    /// statement (texts not cached yet are prepared together, in one round
    /// trip), or in unnamed mode its learned parameter types (texts the pool
    /// has not learned are learned here, together, in a transaction).
    pub(crate) async fn prepare_for(
        &self,
        texts: &[&str],
        in_transaction: bool,
    ) -> Vec<Result<Prepared, Error>> {
        let Some(learned) = &self.learned else {
            if let [sql] = texts {
                return vec![self.prepare_named(sql).await];
            }
            let steps = texts
                .iter()
                .map(|sql| -> Step<'_, _> { Box::pin(self.prepare_named(sql)) })
                .collect();
            return in_order(steps).await;
        };
        let mut out: Vec<Option<Result<Prepared, Error>>> = texts
            .iter()
            .map(|sql| learned.known(sql).map(|d| Ok(Prepared::Unnamed(d))))
            .collect();
        let unknown: Vec<&str> = texts
            .iter()
            .zip(&out)
            .filter(|(_, known)| known.is_none())
            .map(|(sql, _)| *sql)
            .collect();
        if !unknown.is_empty() {
            match learned
                .learn(&self.client, &unknown, in_transaction, self.learns_bare())
                .await
            {
                Ok(replies) => {
                    let mut replies = replies.into_iter();
                    for slot in out.iter_mut().filter(|slot| slot.is_none()) {
                        let Some(reply) = replies.next() else {
                            break;
                        };
                        match &reply {
                            // Looked up in the learning transaction.
                            Ok(d) => lock(&self.types).extend(d.custom.iter().map(Type::oid)),
                            Err(_) if self.pgpool => self.resync_due.store(true, Ordering::Relaxed),
                            Err(_) => {}
                        }
                        *slot = Some(reply.map(Prepared::Unnamed).map_err(unsent_error));
                    }
                }
                Err(e) => {
                    // The transaction around the texts failed: each gets
                    // its error.
                    let e = unsent_error(e);
                    for slot in out.iter_mut().filter(|slot| slot.is_none()) {
                        *slot = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|slot| slot.unwrap_or_else(|| Err(Error::internal("a text was not prepared"))))
            .collect()
    }

    async fn prepare_named(&self, sql: &str) -> Result<Prepared, Error> {
        self.prepare_cached(sql)
            .await
            .map(Prepared::Named)
            .map_err(unsent_error)
    }

    /// Unnamed mode: makes sure tokio-postgres has `described`'s catalog
    /// types cached on this connection before a statement needing them is
    /// sent (it would look them up while reading the answer, with a named
    /// statement that may not exist on the pooler's current server
    /// connection). Nothing is sent when they are cached already.
    pub(crate) async fn ensure_types(&self, described: &Described) -> Result<(), Error> {
        if described.custom.is_empty() {
            // Built-in types only (the usual case): no lock, no lookup.
            return Ok(());
        }
        let missing: Vec<&Type> = {
            let known = lock(&self.types);
            described
                .custom
                .iter()
                .filter(|t| !known.contains(&t.oid()))
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        match look_up(&self.client, &missing, self.learns_bare()).await {
            Ok(()) => {
                lock(&self.types).extend(missing.iter().map(|t| t.oid()));
                Ok(())
            }
            Err(e) => {
                if e.code() == Some(&tokio_postgres::error::SqlState::INVALID_SQL_STATEMENT_NAME) {
                    // tokio-postgres's lookup statement is not on this
                    // server connection: this connection cannot look up
                    // types any more.
                    self.types_lost.store(true, Ordering::Relaxed);
                }
                Err(unsent_error(e))
            }
        }
    }

    /// Drops the cached statement (or learned types) of `sql`: it no longer
    /// fits its table.
    pub(crate) fn forget(&self, sql: &str) {
        lock(&self.statements).pop(sql);
        if let Some(learned) = &self.learned {
            learned.forget(sql);
        }
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

    /// Forgets the prepared COPY statements of every shape (they are
    /// prepared again when next needed).
    pub(crate) fn forget_copies(&self) {
        let mut cache = lock(&self.batch_statements);
        let copies: Vec<(u64, usize)> = cache
            .iter()
            .map(|(key, _)| *key)
            .filter(|&(_, rows)| rows == COPY_KEY)
            .collect();
        for key in copies {
            cache.pop(&key);
        }
    }

    /// The prepared multi-row statement for `rows` rows of shape `shape_id`
    /// ([`COPY_KEY`] rows: the shape's COPY).
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
        // `rows` is a cache key for statements without parameters (COPY).
        let all = if types.is_empty() {
            Vec::new()
        } else {
            let mut all = Vec::with_capacity(types.len() * rows);
            for _ in 0..rows {
                all.extend_from_slice(types);
            }
            all
        };
        let stmt = self.prepare_typed_fresh(&sql, &all).await?;
        lock(&self.batch_statements).put((shape_id, rows), stmt.clone());
        Ok(stmt)
    }
}

/// The next shape id: the key of a shape's prepared statements on a
/// connection ([`ClientWrapper::prepare_batch`]).
pub(crate) static NEXT_SHAPE_ID: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(1);

/// The cache key of a shape's prepared COPY statement among its n-row
/// statements (no n-row statement has this many rows).
pub(crate) const COPY_KEY: usize = usize::MAX;

/// A statement ready to run on one connection: a named prepared statement,
/// or (unnamed mode) the text's parameter types.
#[derive(Clone)]
pub(crate) enum Prepared {
    Named(Statement),
    Unnamed(Arc<Described>),
}

impl Prepared {
    /// The parameter types the server inferred.
    pub(crate) fn params(&self) -> &[Type] {
        match self {
            Prepared::Named(stmt) => stmt.params(),
            Prepared::Unnamed(described) => &described.params,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_limit;
    use std::time::Duration;

    #[test]
    fn statement_timeout_as_show_formats_it() {
        assert_eq!(parse_limit("0"), None);
        assert_eq!(parse_limit("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_limit("2100ms"), Some(Duration::from_millis(2100)));
        assert_eq!(parse_limit("1min"), Some(Duration::from_secs(60)));
        assert_eq!(parse_limit("3h"), Some(Duration::from_secs(3 * 3600)));
        assert_eq!(parse_limit("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_limit("250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_limit("soon"), None);
    }
}
