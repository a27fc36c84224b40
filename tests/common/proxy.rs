//! A loopback TCP proxy the tests control: it forwards bytes between clients
//! and one upstream server, counts round trips, and can cut every connection
//! at once (to simulate a connection lost mid-statement).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; stops accepting when dropped.
pub struct Proxy {
    addr: SocketAddr,
    kill: watch::Sender<u64>,
    round_trips: Arc<AtomicU64>,
    client_bytes: Arc<AtomicU64>,
    hold: Arc<AtomicBool>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy on 127.0.0.1 (free port) in front of `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (kill, _) = watch::channel(0u64);
        let round_trips = Arc::new(AtomicU64::new(0));
        let client_bytes = Arc::new(AtomicU64::new(0));
        let hold = Arc::new(AtomicBool::new(false));
        let kill_tx = kill.clone();
        let (rt, cb, h) = (round_trips.clone(), client_bytes.clone(), hold.clone());
        let accept_task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                tokio::spawn(pipe(
                    client,
                    server,
                    kill_tx.subscribe(),
                    rt.clone(),
                    cb.clone(),
                    h.clone(),
                ));
            }
        });
        Proxy {
            addr,
            kill,
            round_trips,
            client_bytes,
            hold,
            accept_task,
        }
    }

    /// The proxy's address (connect here instead of the server).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every connection open through the proxy right now.
    pub fn kill_all(&self) {
        self.kill.send_modify(|n| *n += 1);
    }

    /// While held, bytes from the server are not forwarded to clients (the
    /// server's replies are "in flight").
    pub fn hold_replies(&self, on: bool) {
        self.hold.store(on, Ordering::SeqCst);
    }

    /// Round trips seen so far: times the server answered after the client
    /// had sent something since the previous answer.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }

    /// Bytes sent by clients so far.
    pub fn client_bytes(&self) -> u64 {
        self.client_bytes.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept_task.abort();
        self.kill_all();
    }
}

async fn pipe(
    mut client: TcpStream,
    mut server: TcpStream,
    mut kill: watch::Receiver<u64>,
    round_trips: Arc<AtomicU64>,
    client_bytes: Arc<AtomicU64>,
    hold: Arc<AtomicBool>,
) {
    let mut cbuf = vec![0u8; 64 * 1024];
    let mut sbuf = vec![0u8; 64 * 1024];
    // Whether the client has sent bytes not yet answered.
    let mut awaiting = false;
    let mut held: Vec<u8> = Vec::new();
    loop {
        tokio::select! {
            // A kill wins over everything else that is ready.
            biased;
            _ = kill.changed() => return,
            r = client.read(&mut cbuf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    client_bytes.fetch_add(n as u64, Ordering::SeqCst);
                    awaiting = true;
                    if server.write_all(&cbuf[..n]).await.is_err() { return; }
                }
            },
            r = server.read(&mut sbuf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if awaiting {
                        round_trips.fetch_add(1, Ordering::SeqCst);
                        awaiting = false;
                    }
                    held.extend_from_slice(&sbuf[..n]);
                }
            },
            _ = tokio::time::sleep(std::time::Duration::from_millis(5)), if !held.is_empty() => {}
        }
        if !held.is_empty() && !hold.load(Ordering::SeqCst) {
            // Tests cut connections with `kill_all()` and only then release
            // the replies (`hold_replies(false)`, SeqCst): once this task
            // sees the release it also sees the kill, and held replies of
            // a cut connection must never reach the client.
            if kill.has_changed().unwrap_or(true) {
                return;
            }
            if client.write_all(&held).await.is_err() {
                return;
            }
            held.clear();
        }
    }
}
