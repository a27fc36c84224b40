//! [`Listener`]: a dedicated connection that receives `NOTIFY`s.
//!
//! tokio-postgres hands a notification only to whoever polls the
//! connection with `Connection::poll_message`; awaited as a plain future
//! (as the pool's connections are) the connection drops them. The
//! listener's connection task polls it that way and forwards each
//! notification to the listener's stream.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Connection, Notification};

use super::quote_ident;
use crate::error::{Error, Kind};

/// What the connection task sends: a notification, or why the connection
/// ended (the last item).
pub(crate) type Received = Result<Notification, tokio_postgres::Error>;

/// Drives `connection` on a spawned task that forwards its notifications
/// (and, last, the error that ended it) to the returned receiver. Notices
/// go to the log. The task ends when the connection ends or the receiver
/// is dropped.
pub(crate) fn forward<S, T>(
    mut connection: Connection<S, T>,
) -> (
    mpsc::UnboundedReceiver<Received>,
    tokio::task::JoinHandle<()>,
)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Unbounded: a bounded channel would stop the task from reading the
    // socket while the stream is not read, and with it the replies to
    // `listen` / `unlisten` (awaiting one of them while not reading the
    // stream would never end).
    let (tx, rx) = mpsc::unbounded_channel();
    let io = tokio::spawn(async move {
        loop {
            match poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if tx.send(Ok(n)).is_err() {
                        // The listener is gone.
                        return;
                    }
                }
                Some(Ok(AsyncMessage::Notice(notice))) => {
                    tracing::info!(
                        severity = notice.severity(),
                        message = notice.message(),
                        "postgres notice on a listener connection"
                    );
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let _ = tx.send(Err(e));
                    return;
                }
                // Ended without an error: the client was dropped (the
                // listener is gone) or the server closed the session.
                None => return,
            }
        }
    });
    (rx, io)
}

/// A connection of its own that receives PostgreSQL notifications
/// (`LISTEN` / `NOTIFY`), from [`Pool::listen`](super::Pool::listen).
///
/// It is a [`Stream`] of the notifications sent on the channels it listens
/// to, in the order the server delivers them (a notification is delivered
/// when the notifying transaction commits). Between reads they wait in
/// memory: read the stream as long as you listen.
///
/// The connection is opened as the pool's are (the pool's connection
/// string, TLS connector, TCP keepalive and user timeout, `post_create`
/// hooks) but is not one of the pool's: it does not count toward
/// `max_size`, no batch ever runs on it, and it stays open until the
/// listener is dropped.
///
/// It does not reconnect. If the connection ends (the server restarts, a
/// `pg_terminate_backend`, the network fails and the keepalive gives up),
/// the stream yields one error, for which
/// [`is_closed`](crate::Error::is_closed) is true, and then ends:
/// notifications sent while no listener was connected are not delivered to
/// a new one, so open a new listener and check whatever state they stood
/// for.
///
/// `LISTEN` needs a session of its own: behind a pooler in transaction mode
/// notifications go to whichever client the pooler's server connection
/// serves next. Build the pool that opens listeners with a connection
/// string that reaches PostgreSQL directly (or a pooler in session mode).
///
/// ```no_run
/// # async fn demo(pool: batchpool::postgres::Pool) -> Result<(), batchpool::Error> {
/// use futures_util::StreamExt;
///
/// let mut listener = pool.listen(&["orders"]).await?;
/// while let Some(notification) = listener.next().await {
///     let notification = notification?;
///     println!("{}: {}", notification.channel(), notification.payload());
/// }
/// # Ok(()) }
/// ```
pub struct Listener {
    client: tokio_postgres::Client,
    received: mpsc::UnboundedReceiver<Received>,
    io: tokio::task::JoinHandle<()>,
    /// How long `listen` / `unlisten` may wait for their answer (the pool's
    /// statement deadline).
    limit: Option<Duration>,
    /// The stream has yielded its last item.
    ended: bool,
}

impl Listener {
    pub(crate) async fn new(
        client: tokio_postgres::Client,
        received: mpsc::UnboundedReceiver<Received>,
        io: tokio::task::JoinHandle<()>,
        limit: Option<Duration>,
        channels: &[&str],
    ) -> Result<Listener, Error> {
        let listener = Listener {
            client,
            received,
            io,
            limit,
            ended: false,
        };
        if !channels.is_empty() {
            listener.send(&listen_all(channels)).await?;
        }
        Ok(listener)
    }

    /// Starts listening on `channel` (`LISTEN`). The name is taken as it
    /// is, case included, as `pg_notify('name', ...)` takes it (an unquoted
    /// name in `NOTIFY Orders` is folded to lower case by the server).
    /// Listening twice on one channel is the same as once.
    pub async fn listen(&self, channel: &str) -> Result<(), Error> {
        self.send(&format!("LISTEN {}", quote_ident(channel))).await
    }

    /// Stops listening on `channel` (`UNLISTEN`). Notifications of it
    /// already received are still in the stream.
    pub async fn unlisten(&self, channel: &str) -> Result<(), Error> {
        self.send(&format!("UNLISTEN {}", quote_ident(channel)))
            .await
    }

    /// Stops listening on every channel (`UNLISTEN *`).
    pub async fn unlisten_all(&self) -> Result<(), Error> {
        self.send("UNLISTEN *").await
    }

    /// The channels this session listens to, as the server reports them
    /// (`pg_listening_channels()`).
    pub async fn channels(&self) -> Result<Vec<String>, Error> {
        let rows = self
            .bounded(self.client.query("SELECT pg_listening_channels()", &[]))
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// Runs `sql` (simple protocol), within the statement deadline.
    async fn send(&self, sql: &str) -> Result<(), Error> {
        self.bounded(self.client.batch_execute(sql)).await
    }

    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, Error> {
        let reply = match self.limit {
            None => request.await,
            Some(limit) => match tokio::time::timeout(limit, request).await {
                Ok(reply) => reply,
                Err(_) => {
                    // The connection's state is unknown: close it, and the
                    // stream ends with an error.
                    self.io.abort();
                    return Err(Error::statement_timeout(limit));
                }
            },
        };
        reply.map_err(|e| {
            if e.as_db_error().is_some() {
                Error::db(e)
            } else {
                Error::with_source(
                    Kind::ConnectionClosed,
                    "the listener's connection is closed",
                    e,
                )
            }
        })
    }
}

impl Stream for Listener {
    type Item = Result<Notification, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.received.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(n))) => Poll::Ready(Some(Ok(n))),
            Poll::Ready(Some(Err(e))) => {
                self.ended = true;
                Poll::Ready(Some(Err(Error::with_source(
                    Kind::ConnectionClosed,
                    lost_message(),
                    e,
                ))))
            }
            Poll::Ready(None) => {
                // The task ended without an error (the server closed the
                // session) or was aborted: the same for the reader.
                self.ended = true;
                Poll::Ready(Some(Err(Error::new(
                    Kind::ConnectionClosed,
                    lost_message(),
                ))))
            }
        }
    }
}

fn lost_message() -> &'static str {
    "the listener's connection was lost; notifications sent from now on are not received \
     (open a new listener)"
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("closed", &self.client.is_closed())
            .finish_non_exhaustive()
    }
}

/// `LISTEN` for each channel, in one string (one round trip).
fn listen_all(channels: &[&str]) -> String {
    channels
        .iter()
        .map(|c| format!("LISTEN {}", quote_ident(c)))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted() {
        assert_eq!(quote_ident("orders"), "\"orders\"");
        assert_eq!(quote_ident("Or\"ders"), "\"Or\"\"ders\"");
        assert_eq!(listen_all(&["a", "B"]), "LISTEN \"a\"; LISTEN \"B\"");
    }
}
