//! A loopback TCP proxy the tests control: it forwards bytes between clients
//! and one upstream server, counts round trips, can cut every connection at
//! once (to simulate a connection lost mid-statement), hold the server's
//! replies, and black-hole connections (a network stall: the connection stays
//! open, nothing it carries arrives, nothing is closed).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; stops accepting when dropped.
pub struct Proxy {
    addr: SocketAddr,
    kill: watch::Sender<u64>,
    shared: Arc<Shared>,
    accept_task: tokio::task::JoinHandle<()>,
}

/// State shared by the proxy handle and its connection tasks.
struct Shared {
    round_trips: AtomicU64,
    client_bytes: AtomicU64,
    /// Bytes clients sent into a black hole (swallowed, not forwarded).
    holed_client_bytes: AtomicU64,
    /// Connections accepted so far.
    accepted: AtomicU64,
    hold: AtomicBool,
    /// The black-hole flag of each connection (dead ones pruned lazily).
    holes: Mutex<Vec<Weak<AtomicBool>>>,
    /// Bumped whenever a black hole opens or closes, to wake the tasks.
    hole_changed: watch::Sender<u64>,
    /// One marker per connection that has swallowed client bytes in a
    /// black hole, alive while that connection is open.
    stalled: Mutex<Vec<Weak<()>>>,
}

impl Shared {
    fn set_holes(&self, on: bool) {
        let mut holes = self.holes.lock().unwrap();
        holes.retain(|h| match h.upgrade() {
            Some(h) => {
                h.store(on, Ordering::SeqCst);
                true
            }
            None => false,
        });
        drop(holes);
        self.hole_changed.send_modify(|n| *n += 1);
    }
}

impl Proxy {
    /// Starts a proxy on 127.0.0.1 (free port) in front of `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (kill, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            round_trips: AtomicU64::new(0),
            client_bytes: AtomicU64::new(0),
            holed_client_bytes: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            hold: AtomicBool::new(false),
            holes: Mutex::new(Vec::new()),
            stalled: Mutex::new(Vec::new()),
            hole_changed: watch::channel(0u64).0,
        });
        let kill_tx = kill.clone();
        let sh = shared.clone();
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
                let hole = Arc::new(AtomicBool::new(false));
                sh.holes.lock().unwrap().push(Arc::downgrade(&hole));
                sh.accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(pipe(client, server, kill_tx.subscribe(), sh.clone(), hole));
            }
        });
        Proxy {
            addr,
            kill,
            shared,
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
        self.shared.hold.store(on, Ordering::SeqCst);
    }

    /// Black-holes every connection open through the proxy right now: they
    /// stay open, but from now on nothing is forwarded either way (bytes
    /// are read and kept, nothing is closed), as in a network stall.
    /// Connections made afterwards pass normally. Ended by
    /// [`Proxy::kill_all`] or the client closing its end.
    pub fn black_hole_existing(&self) {
        self.shared.set_holes(true);
    }

    /// Round trips seen so far: times the server answered after the client
    /// had sent something since the previous answer.
    pub fn round_trips(&self) -> u64 {
        self.shared.round_trips.load(Ordering::SeqCst)
    }

    /// Bytes sent by clients so far (black-holed ones included).
    pub fn client_bytes(&self) -> u64 {
        self.shared.client_bytes.load(Ordering::SeqCst)
    }

    /// Connections still open that had a request swallowed by a black hole
    /// (a client that gives up on one closes it).
    pub fn stalled_open(&self) -> usize {
        let stalled = self.shared.stalled.lock().unwrap();
        stalled.iter().filter(|m| m.strong_count() > 0).count()
    }

    /// Bytes clients sent into a black hole so far (never forwarded while
    /// the hole lasts): nonzero once a client wrote to a stalled
    /// connection.
    pub fn holed_client_bytes(&self) -> u64 {
        self.shared.holed_client_bytes.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
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
    shared: Arc<Shared>,
    hole: Arc<AtomicBool>,
) {
    let mut hole_changed = shared.hole_changed.subscribe();
    // Alive (and registered) once this connection swallowed bytes in a hole.
    let mut stalled: Option<Arc<()>> = None;
    let holed = || hole.load(Ordering::SeqCst);
    let mut cbuf = vec![0u8; 64 * 1024];
    let mut sbuf = vec![0u8; 64 * 1024];
    // Whether the client has sent bytes not yet answered.
    let mut awaiting = false;
    // Client bytes kept in a black hole, not yet forwarded.
    let mut to_server: Vec<u8> = Vec::new();
    // Server bytes not yet forwarded (held replies, or a black hole).
    let mut held: Vec<u8> = Vec::new();
    loop {
        tokio::select! {
            // A kill wins over everything else that is ready.
            biased;
            _ = kill.changed() => return,
            r = hole_changed.changed() => if r.is_err() { return },
            r = client.read(&mut cbuf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    shared.client_bytes.fetch_add(n as u64, Ordering::SeqCst);
                    // Read after the bytes arrived: a hole opened before
                    // this read returned swallows them.
                    if holed() {
                        shared.holed_client_bytes.fetch_add(n as u64, Ordering::SeqCst);
                        if stalled.is_none() {
                            let marker = Arc::new(());
                            shared.stalled.lock().unwrap().push(Arc::downgrade(&marker));
                            stalled = Some(marker);
                        }
                        to_server.extend_from_slice(&cbuf[..n]);
                    } else {
                        awaiting = true;
                        if server.write_all(&cbuf[..n]).await.is_err() { return; }
                    }
                }
            },
            r = server.read(&mut sbuf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if awaiting {
                        shared.round_trips.fetch_add(1, Ordering::SeqCst);
                        awaiting = false;
                    }
                    held.extend_from_slice(&sbuf[..n]);
                }
            },
            _ = tokio::time::sleep(std::time::Duration::from_millis(5)), if !held.is_empty() => {}
        }
        if holed() {
            continue;
        }
        if !to_server.is_empty() {
            awaiting = true;
            if server.write_all(&to_server).await.is_err() {
                return;
            }
            to_server.clear();
        }
        if !held.is_empty() && !shared.hold.load(Ordering::SeqCst) {
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
