//! How the manager opens a connection: tokio-postgres's `connect` with the
//! pool's TLS connector. `MakeTlsConnect` is generic (its stream type is in
//! the connection's type), so the connector sits behind a small object-safe
//! trait that connects and spawns the connection's task.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use tokio_postgres::Socket;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

use super::listen::{Received, forward};

/// An open connection and the task that drives it.
pub(crate) type Connected = (tokio_postgres::Client, tokio::task::JoinHandle<()>);

/// An open connection, the receiver of its notifications and the task that
/// drives it.
pub(crate) type ConnectedListening = (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<Received>,
    tokio::task::JoinHandle<()>,
);

/// Opens a connection and drives it on a spawned task.
#[async_trait]
pub(crate) trait Connect: Send + Sync {
    async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<Connected, tokio_postgres::Error>;

    /// Like `connect`, with the connection's notifications forwarded to the
    /// returned receiver (a [`Listener`](super::Listener)'s connection).
    async fn connect_listening(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<ConnectedListening, tokio_postgres::Error>;
}

/// Any tokio-postgres TLS connector (`NoTls`, tokio-postgres-rustls,
/// postgres-native-tls, postgres-openssl, your own).
pub(crate) struct WithTls<T>(pub(crate) T);

#[async_trait]
impl<T> Connect for WithTls<T>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<Connected, tokio_postgres::Error> {
        let (client, connection) = config.connect(self.0.clone()).await?;
        let io = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "postgres connection ended");
            }
        });
        Ok((client, io))
    }

    async fn connect_listening(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<ConnectedListening, tokio_postgres::Error> {
        let (client, connection) = config.connect(self.0.clone()).await?;
        let (received, io) = forward(connection);
        Ok((client, received, io))
    }
}

/// The pool's connector, and whether it is the user's own.
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) connect: Arc<dyn Connect>,
    pub(crate) custom: bool,
}

impl Connector {
    pub(crate) fn new(connect: impl Connect + 'static, custom: bool) -> Connector {
        Connector {
            connect: Arc::new(connect),
            custom,
        }
    }
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.custom {
            "Connector(custom)"
        } else {
            "Connector(built-in)"
        })
    }
}
