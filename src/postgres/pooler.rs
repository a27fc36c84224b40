//! Whether a connection reaches PostgreSQL through a pooler: the backend
//! process serving its session is not the one named by the cancel key the
//! other end of the connection gave (a pooler hands out keys of its own).
//!
//! The key is read by letting tokio-postgres write the cancel request it
//! would send into an in-memory pipe. It negotiates TLS on that pipe as it
//! would on the connection (an `SSLRequest` first under `sslmode=prefer` /
//! `require`, a handshake directly under `sslnegotiation=direct`): the far
//! end of the pipe accepts, and a pass-through "TLS" lets the request
//! itself through in the clear.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

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
