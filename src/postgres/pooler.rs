//! What sits between the pool and PostgreSQL, and what it lets through.
//!
//! [`Pooler`] is what the user says (`pooler=` in the connection string,
//! [`PoolBuilder::pooler`](crate::PoolBuilder::pooler)), [`FarEnd`] what
//! the pool knows for all its connections: given, or found out on its
//! first connection under [`Pooler::Auto`]. Each connection also tells by
//! itself whether it reaches PostgreSQL through a pooler that hands out
//! cancel keys of its own ([`behind_pooler`]), and whether its autocommit
//! statements commit ([`autocommits`]).
//!
//! The cancel key is read by letting tokio-postgres write the cancel
//! request it would send into an in-memory pipe. It negotiates TLS on that
//! pipe as it would on the connection (an `SSLRequest` first under
//! `sslmode=prefer` / `require`, a handshake directly under
//! `sslnegotiation=direct`): the far end of the pipe accepts, and a
//! pass-through "TLS" lets the request itself through in the clear.

use std::io;
use std::pin::Pin;
use std::str::FromStr;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

use crate::error::{Error, Kind};

/// The code of an `SSLRequest` (`1234 << 16 | 5679`).
const SSL_REQUEST: i32 = 80_877_103;

/// Whether `client` reaches PostgreSQL through a pooler (PgBouncer,
/// Odyssey, pgcat...), as [`Statements::Auto`](super::Statements::Auto)
/// decides it for each new connection: the backend process serving the
/// session is not the one its cancel key names. One round trip
/// (`SELECT pg_backend_pid()`); works with any TLS mode. A key that cannot
/// be read counts as a pooler (the safe answer). For plain tokio-postgres
/// clients next to a pool (the benches' peers send what the pool sends).
pub async fn behind_pooler(client: &tokio_postgres::Client) -> Result<bool, tokio_postgres::Error> {
    let backend_pid = client
        .simple_query("SELECT pg_backend_pid()")
        .await?
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0)?.parse::<i32>().ok(),
            _ => None,
        });
    Ok(backend_pid.is_none() || backend_pid != cancel_key_pid(client).await)
}

/// The process id of the connection's cancel key: the cancel request
/// (`Int32 length, Int32 code, Int32 pid, Int32 secret`) tokio-postgres
/// writes into a pipe.
async fn cancel_key_pid(client: &tokio_postgres::Client) -> Option<i32> {
    let (mut ours, theirs) = tokio::io::duplex(64);
    let token = client.cancel_token();
    let send = token.cancel_query_raw(theirs, PassThrough);
    let read = async move {
        let mut request = [0u8; 16];
        ours.read_exact(&mut request[..8]).await.ok()?;
        if request[4..8] == SSL_REQUEST.to_be_bytes() {
            // "S": go ahead with TLS (the pass-through below).
            ours.write_all(b"S").await.ok()?;
            ours.read_exact(&mut request).await.ok()?;
        } else {
            ours.read_exact(&mut request[8..]).await.ok()?;
        }
        let pid: [u8; 4] = request[8..12].try_into().ok()?;
        Some(i32::from_be_bytes(pid))
    };
    let (sent, pid) = tokio::join!(send, read);
    sent.ok().and(pid)
}

/// What sits between the pool and PostgreSQL (see [Behind a
/// pooler](super#behind-a-pooler)).
///
/// Set with [`PoolBuilder::pooler`](crate::PoolBuilder::pooler) or the
/// connection-string parameter `pooler=auto|none|transaction|statement|pgpool`
/// (which wins over the builder). The statement mode
/// ([`Statements::Auto`](super::Statements::Auto)) follows it: named
/// statements for `none` and `pgpool`, unnamed ones for `transaction` and
/// `statement`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Pooler {
    /// Found out on the pool's first connection (the default). pgpool-II
    /// answers `SHOW pool_version` itself (on PostgreSQL the question is an
    /// error in the server's log, once per pool). A pooler that hands out
    /// cancel keys of its own (PgBouncer, Odyssey, pgcat) is asked whether
    /// it takes a transaction block: a `BEGIN`, rolled back at once;
    /// PgBouncer in statement mode closes that connection instead, and the
    /// pool opens another.
    #[default]
    Auto,
    /// Nothing, or a proxy that keeps each client session on one server
    /// session and passes the protocol through (PgBouncer `pool_mode =
    /// session`, a TCP proxy): named statements, COPY and transactions, as
    /// on a direct connection. Nothing is asked.
    None,
    /// A pooler that keeps each transaction on one server connection and
    /// runs a statement outside one on any (PgBouncer `pool_mode =
    /// transaction`, Odyssey, pgcat): unnamed statements, COPY inside a
    /// transaction, `atomic` and [`Transaction`](super::Transaction).
    Transaction,
    /// A pooler that runs each statement on any server connection and
    /// refuses transaction blocks (PgBouncer `pool_mode = statement`):
    /// unnamed statements, types learned without a transaction, multi-row
    /// INSERTs and no COPY; what needs a transaction block (`atomic` of
    /// several statements, a [`Transaction`](super::Transaction) that runs
    /// more than `execute_and_commit` alone) is refused before anything is
    /// sent ([`Error::is_refused`](crate::Error::is_refused)).
    Statement,
    /// pgpool-II, in any clustering mode: named statements (it keeps each
    /// client session on server sessions of its own) and no COPY (a COPY
    /// sent with the extended query protocol, as tokio-postgres sends it,
    /// never gets past pgpool-II to its data).
    Pgpool,
}

impl Pooler {
    /// The name used in connection strings.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooler::Auto => "auto",
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
            Pooler::Statement => "statement",
            Pooler::Pgpool => "pgpool",
        }
    }

    /// Takes the `pooler=` parameter out of a connection string (URL or
    /// `key=value` form) and returns the rest with the value it named, as
    /// [`Statements::split_config`](super::Statements::split_config) does
    /// for `statements=`.
    ///
    /// ```
    /// use batchpool::postgres::Pooler;
    ///
    /// let (rest, pooler) =
    ///     Pooler::split_config("postgresql://app@pgbouncer:6432/app?pooler=statement")?;
    /// assert_eq!(rest, "postgresql://app@pgbouncer:6432/app");
    /// assert_eq!(pooler, Some(Pooler::Statement));
    /// # Ok::<(), batchpool::Error>(())
    /// ```
    pub fn split_config(config: &str) -> Result<(String, Option<Pooler>), Error> {
        split(config)
    }
}

crate::params::display_as_str!(Pooler);

impl FromStr for Pooler {
    type Err = Error;

    fn from_str(s: &str) -> Result<Pooler, Error> {
        let all = [
            Pooler::Auto,
            Pooler::None,
            Pooler::Transaction,
            Pooler::Statement,
            Pooler::Pgpool,
        ];
        crate::params::parse_name(
            "pooler",
            &s.to_ascii_lowercase(),
            &all,
            Pooler::as_str,
            false,
        )
    }
}

/// Removes `pooler=...` from a connection string and returns the rest with
/// the value it named.
pub(crate) fn split(config: &str) -> Result<(String, Option<Pooler>), Error> {
    let (rest, taken) = crate::params::take(config, &["pooler"]);
    let mut pooler = None;
    for (_, value) in taken {
        pooler = Some(value.parse()?);
    }
    Ok((rest, pooler))
}

/// What is between the pool and PostgreSQL, as the pool acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing that changes what the pool may send.
    Direct,
    /// A transaction-mode pooler.
    Transaction,
    /// A pooler that refuses transaction blocks.
    Statement,
    /// pgpool-II.
    Pgpool,
}

/// What the pool knows of the far end of its connections: the user's
/// [`Pooler`], or what its first connection found out (shared by every
/// connection of the pool).
#[derive(Debug)]
pub(crate) struct FarEnd {
    given: Pooler,
    found: tokio::sync::OnceCell<Found>,
    /// A connection was closed once when asked whether it takes a
    /// transaction block, without the pooler's answer getting through.
    closed_once: std::sync::atomic::AtomicBool,
}

impl FarEnd {
    pub(crate) fn new(given: Pooler) -> FarEnd {
        let known = match given {
            Pooler::Auto => None,
            Pooler::None => Some(Found::Direct),
            Pooler::Transaction => Some(Found::Transaction),
            Pooler::Statement => Some(Found::Statement),
            Pooler::Pgpool => Some(Found::Pgpool),
        };
        FarEnd {
            given,
            found: tokio::sync::OnceCell::new_with(known),
            closed_once: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// What is known so far (always known once a connection is open).
    pub(crate) fn known(&self) -> Option<Found> {
        self.found.get().copied()
    }

    /// Whether transaction blocks reach the server.
    pub(crate) fn takes_transactions(&self) -> bool {
        self.known() != Some(Found::Statement)
    }

    /// Whether the two statements of an explicit pair may go out as one
    /// pipelined transaction: not where transaction blocks are refused, nor
    /// through pgpool-II (see `ClientWrapper::in_turn`).
    pub(crate) fn pairs_in_transactions(&self) -> bool {
        matches!(self.known(), Some(Found::Direct | Found::Transaction))
    }

    /// Whether the pool may send COPY: not before the far end is known,
    /// not to a pooler that refuses the transaction around it, not through
    /// pgpool-II.
    pub(crate) fn copies(&self) -> bool {
        matches!(self.known(), Some(Found::Direct | Found::Transaction))
    }

    /// What is between, asked on `client` the first time (see
    /// [`Pooler::Auto`]); `keyed`: the connection's cancel key is not its
    /// server's. Also whether `client` was closed by the asking: a pooler
    /// that refuses transaction blocks closes the connection that asked.
    /// `None`: the asking closed `client` before an answer got through
    /// (tokio-postgres can drop an error the server sent right before it
    /// closed the connection): ask again on another connection.
    pub(crate) async fn find(
        &self,
        client: &tokio_postgres::Client,
        keyed: bool,
    ) -> Result<Option<(Found, bool)>, tokio_postgres::Error> {
        let mut asked = false;
        let found = self
            .found
            .get_or_try_init(|| {
                asked = true;
                ask(client, keyed, &self.closed_once)
            })
            .await;
        match found {
            Ok(&found) => Ok(Some((found, asked && found == Found::Statement))),
            Err(e) if asked && e.is_closed() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether a connection whose cancel key says `keyed` reaches
    /// PostgreSQL through a pooler that shares server sessions: no session
    /// settings of the pool's, unnamed statements under
    /// [`Statements::Auto`](super::Statements::Auto).
    pub(crate) fn shares_sessions(&self, found: Found, keyed: bool) -> bool {
        match (found, self.given) {
            (Found::Statement, _) => true,
            (Found::Pgpool, _) => false,
            (_, Pooler::Auto) => keyed,
            (found, _) => found == Found::Transaction,
        }
    }

    /// The refusal of what needs a transaction block (`what`), where the
    /// far end refuses them.
    pub(crate) fn refusal(&self, what: &str) -> Option<Error> {
        (!self.takes_transactions()).then(|| {
            Error::refused(format!(
                "{what} needs a transaction block, and PostgreSQL is reached through a pooler \
                 that runs each statement on its own and refuses transaction blocks (PgBouncer \
                 pool_mode = statement): run the statements one by one in autocommit, or reach \
                 the database through a pooler in transaction or session mode"
            ))
        })
    }
}

/// What sits between `client` and PostgreSQL, found out as
/// [`Pooler::Auto`] finds it on a pool's first connection (never
/// [`Pooler::Auto`]): for plain tokio-postgres clients next to a pool (the
/// benches' peers do what the pool does). It asks `SHOW pool_version` (on
/// PostgreSQL an error in the server's log) and, behind a pooler that hands
/// out cancel keys of its own, sends a lone `BEGIN`, rolled back at once:
/// PgBouncer in statement mode then closes `client`, which counts as its
/// refusal.
pub async fn find_pooler(client: &tokio_postgres::Client) -> Result<Pooler, tokio_postgres::Error> {
    let keyed = behind_pooler(client).await?;
    let closed_before = std::sync::atomic::AtomicBool::new(true);
    Ok(match ask(client, keyed, &closed_before).await? {
        Found::Direct => Pooler::None,
        Found::Transaction => Pooler::Transaction,
        Found::Statement => Pooler::Statement,
        Found::Pgpool => Pooler::Pgpool,
    })
}

/// Asks what is between (see [`Pooler::Auto`]). A connection closed at
/// the `BEGIN` without an answer is taken for a refusal the second time
/// (`closed_once`): a far end that closes two sessions right at a lone
/// `BEGIN`, and at nothing else, refuses transaction blocks.
async fn ask(
    client: &tokio_postgres::Client,
    keyed: bool,
    closed_once: &std::sync::atomic::AtomicBool,
) -> Result<Found, tokio_postgres::Error> {
    if answers_pool_version(client).await? {
        return Ok(Found::Pgpool);
    }
    if !keyed {
        return Ok(Found::Direct);
    }
    match client.batch_execute("BEGIN").await {
        Ok(()) => {
            client.batch_execute("ROLLBACK").await?;
            Ok(Found::Transaction)
        }
        // PgBouncer in statement mode answers the transaction block with a
        // FATAL error ("transaction blocks not allowed in statement pooling
        // mode") and closes the connection; `BEGIN` itself cannot fail on
        // a server's fresh session.
        Err(e) if e.as_db_error().is_some() => {
            tracing::debug!(error = %e, "the pooler refuses transaction blocks");
            Ok(Found::Statement)
        }
        Err(e) if e.is_closed() && closed_once.swap(true, std::sync::atomic::Ordering::Relaxed) => {
            tracing::debug!("the pooler closed a second session at BEGIN");
            Ok(Found::Statement)
        }
        Err(e) => Err(e),
    }
}

/// Whether `SHOW pool_version` gets an answer: pgpool-II answers it
/// itself; PostgreSQL knows no such setting.
async fn answers_pool_version(
    client: &tokio_postgres::Client,
) -> Result<bool, tokio_postgres::Error> {
    match client.simple_query("SHOW pool_version").await {
        Ok(replies) => Ok(replies
            .iter()
            .any(|m| matches!(m, SimpleQueryMessage::Row(_)))),
        Err(e) if e.as_db_error().is_some() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether a statement that started a transaction of its own is the one
/// that started it (`false`: it runs inside a transaction begun earlier).
const STARTS_OWN: &str = "SELECT transaction_timestamp() = statement_timestamp()";

/// Whether a statement sent on its own commits on this connection.
///
/// Sends an extended-query statement that takes row locks (`SELECT 1 FOR
/// UPDATE`, which locks nothing), then asks whether the next statement
/// starts a transaction of its own. pgpool-II in raw mode sends `BEGIN`
/// ahead of every such statement (as it does ahead of an INSERT, UPDATE or
/// DELETE) and never ends that transaction: each write of the session
/// would then be answered `Ok` and never committed. One round trip, written
/// with whatever the caller joins it with.
pub(crate) async fn autocommits(
    client: &tokio_postgres::Client,
) -> Result<bool, tokio_postgres::Error> {
    let (probe, check) = futures_util::future::join(
        client.query_typed("SELECT 1 FOR UPDATE", &[]),
        client.simple_query(STARTS_OWN),
    )
    .await;
    if let Err(e) = probe {
        // A server that refuses the probe still answers the check.
        if e.as_db_error().is_none() {
            return Err(e);
        }
    }
    match check {
        Ok(replies) => Ok(!replies
            .iter()
            .any(|m| matches!(m, SimpleQueryMessage::Row(row) if row.get(0) == Some("f")))),
        // The failed probe aborted a transaction someone else began.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION) => {
            Ok(false)
        }
        Err(e) if e.as_db_error().is_some() => {
            tracing::debug!(error = %e, "whether autocommit statements commit cannot be asked");
            Ok(true)
        }
        Err(e) => Err(e),
    }
}

/// Makes sure that statements sent on their own commit on `client`, as the
/// pool does on each new connection ([`Pooler`]'s guide section): where
/// something between began a transaction ahead of them and leaves it open
/// (pgpool-II in raw mode), commits it once and asks again; an error
/// ([`Error::is_connect`](crate::Error::is_connect)) that says what to
/// change when they still do not commit. One round trip when they do. For
/// plain tokio-postgres clients next to a pool (the benches' peers).
pub async fn ensure_autocommit(client: &tokio_postgres::Client) -> Result<(), Error> {
    let failed = |e| Error::with_source(Kind::Connect, "could not check the connection", e);
    if autocommits(client).await.map_err(failed)? {
        return Ok(());
    }
    client.batch_execute("COMMIT").await.map_err(failed)?;
    if autocommits(client).await.map_err(failed)? {
        return Ok(());
    }
    Err(Error::with_source(
        Kind::Connect,
        "the connection cannot be used",
        StaysOpen,
    ))
}

/// A connection whose autocommit statements stay in a transaction that
/// something between the pool and PostgreSQL began and does not end.
#[derive(Debug)]
pub(crate) struct StaysOpen;

impl std::fmt::Display for StaysOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "statements sent on their own do not commit on this connection: something between \
             the pool and PostgreSQL begins a transaction ahead of them and does not end it \
             (pgpool-II in raw mode does this to extended-query writes, and a COMMIT did not \
             stop it here); use another pgpool-II clustering mode (streaming_replication) or \
             connect to PostgreSQL directly",
        )
    }
}

impl std::error::Error for StaysOpen {}

/// A "TLS connector" for the pipe that encrypts nothing.
struct PassThrough;

impl TlsConnect<DuplexStream> for PassThrough {
    type Stream = Plain;
    type Error = io::Error;
    type Future = std::future::Ready<io::Result<Plain>>;

    fn connect(self, stream: DuplexStream) -> Self::Future {
        std::future::ready(Ok(Plain(stream)))
    }
}

/// The pipe, as the "TLS" stream [`PassThrough`] makes.
struct Plain(DuplexStream);

impl TlsStream for Plain {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for Plain {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Plain {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_is_taken_out() {
        let cases = [
            (
                "postgresql://u@h:6432/db?statements=unnamed&pooler=statement&x=1",
                "postgresql://u@h:6432/db?statements=unnamed&x=1",
                Some(Pooler::Statement),
            ),
            (
                "postgres://u@h/db?pooler=PgPool",
                "postgres://u@h/db",
                Some(Pooler::Pgpool),
            ),
            (
                "host=h pooler = 'none' user=u",
                "host=h user=u",
                Some(Pooler::None),
            ),
            ("host=h user=u", "host=h user=u", None),
        ];
        for (config, rest, pooler) in cases {
            assert_eq!(
                split(config).unwrap(),
                (rest.to_owned(), pooler),
                "{config}"
            );
        }
        let e = split("host=h pooler=pgbouncer").unwrap_err();
        assert!(e.is_config());
        assert!(
            e.to_string()
                .contains("expected auto, none, transaction, statement or pgpool"),
            "{e}"
        );
    }

    #[test]
    fn what_each_far_end_lets_through() {
        // (given, COPY, pairs in one transaction, transaction blocks)
        let cases = [
            (Pooler::None, true, true, true),
            (Pooler::Transaction, true, true, true),
            (Pooler::Statement, false, false, false),
            (Pooler::Pgpool, false, false, true),
        ];
        for (given, copies, pairs, transactions) in cases {
            let far = FarEnd::new(given);
            assert_eq!(far.copies(), copies, "{given}");
            assert_eq!(far.pairs_in_transactions(), pairs, "{given}");
            assert_eq!(far.takes_transactions(), transactions, "{given}");
            assert_eq!(far.refusal("x").is_some(), !transactions, "{given}");
        }
        // Before the first connection answers, nothing that needs the
        // answer is sent.
        let auto = FarEnd::new(Pooler::Auto);
        assert_eq!(auto.known(), None);
        assert!(!auto.copies() && !auto.pairs_in_transactions());
        // Sessions are shared by a pooler of its own kind, or as the cancel
        // key says under `auto`.
        assert!(auto.shares_sessions(Found::Direct, true));
        assert!(!auto.shares_sessions(Found::Pgpool, true));
        assert!(FarEnd::new(Pooler::Statement).shares_sessions(Found::Statement, false));
        assert!(!FarEnd::new(Pooler::None).shares_sessions(Found::Direct, true));
    }
}
