//! A throwaway 3-node MariaDB Galera cluster on loopback ([`galera_cluster`]),
//! built from three [`MysqlServer`]s (each its own temp dir, data dir, port
//! and watchdog) joined by the Galera provider.

use super::mysql::MysqlServer;
use super::util;
use mysql_async::prelude::Queryable;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// What to tell a user whose machine lacks the cluster's pieces.
const MISSING: &str = "the Galera cluster needs the Galera provider (libgalera_smm.so), rsync \
    (state transfer) and ss or lsof (the state-transfer script checks its port): install the \
    Debian packages `galera-4`, `rsync` and `iproute2` (apt-get install galera-4 rsync \
    iproute2) next to `mariadb-server`";

/// Nodes in the cluster.
pub const GALERA_NODES: usize = 3;

/// How long the three nodes may take to see each other once all run.
const FORM_TIMEOUT: Duration = Duration::from_secs(90);

/// The shared cluster of this process (see [`galera_cluster`]).
static CLUSTER: OnceLock<GaleraCluster> = OnceLock::new();

/// A throwaway 3-node MariaDB Galera cluster, started once per process on
/// first use and removed (each node by its watchdog) when the process
/// exits. Every node listens on 127.0.0.1: its client port, its group
/// communication port, and its ports for incremental and full state
/// transfer (rsync). Ready when every node reports `wsrep_cluster_size` 3,
/// `wsrep_ready` ON and `Synced`.
///
/// Blocks while the nodes start (about 10 to 30 s): call it before awaiting.
/// A test that kills a node or changes a global setting starts a cluster
/// of its own instead ([`GaleraCluster::start`]).
pub fn galera_cluster() -> &'static GaleraCluster {
    CLUSTER.get_or_init(|| GaleraCluster::start(""))
}

/// The nodes of a Galera cluster (see [`galera_cluster`]).
pub struct GaleraCluster {
    /// Behind a lock so a node can be killed and restarted.
    nodes: Mutex<Vec<MysqlServer>>,
    /// Every node's client URL (ports do not change on a restart).
    urls: Vec<String>,
    /// Every node's temp dir.
    dirs: Vec<PathBuf>,
}

/// The Galera provider, where Debian and the upstream packages put it.
fn provider() -> Option<PathBuf> {
    [
        "/usr/lib/galera/libgalera_smm.so",
        "/usr/lib/libgalera_smm.so",
        "/usr/lib/galera-4/libgalera_smm.so",
        "/usr/lib64/galera-4/libgalera_smm.so",
        "/usr/lib64/galera/libgalera_smm.so",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

impl GaleraCluster {
    /// A cluster of this caller's own, as [`galera_cluster`] starts it, with
    /// `provider_options` added to every node's `wsrep_provider_options`
    /// (`;`-separated, e.g. shorter failure detection timeouts; empty for
    /// none). Each node stops and deletes itself when the cluster is
    /// dropped. Blocks while the nodes start.
    pub fn start(provider_options: &str) -> GaleraCluster {
        let extra = if provider_options.is_empty() {
            String::new()
        } else {
            format!(";{provider_options}")
        };
        let bins = ["/usr/bin", "/usr/sbin", "/bin", "/sbin"];
        let Some(provider) = provider() else {
            panic!("{MISSING}");
        };
        if util::find_on_path_or("rsync", &bins).is_none()
            || util::find_on_path_or("wsrep_sst_rsync", &bins).is_none()
            || (util::find_on_path_or("ss", &bins).is_none()
                && util::find_on_path_or("lsof", &bins).is_none())
        {
            panic!("{MISSING}");
        }
        // Group communication, incremental and full state transfer ports of
        // every node, chosen before any starts: each node lists all the
        // group ports in its cluster address.
        let ports: Vec<[u16; 3]> = (0..GALERA_NODES)
            .map(|_| [util::free_port(), util::free_port(), util::free_port()])
            .collect();
        let address = ports
            .iter()
            .map(|[g, _, _]| format!("127.0.0.1:{g}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::with_capacity(GALERA_NODES);
        for (i, [group, ist, sst]) in ports.iter().enumerate() {
            let mut args = vec![
                "--wsrep-on=ON".to_string(),
                format!("--wsrep-provider={}", provider.display()),
                format!("--wsrep-cluster-address=gcomm://{address}"),
                "--wsrep-cluster-name=batchpool".to_string(),
                format!("--wsrep-node-name=node{}", i + 1),
                format!("--wsrep-node-address=127.0.0.1:{group}"),
                format!("--wsrep-sst-receive-address=127.0.0.1:{sst}"),
                format!(
                    "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{group};\
                     ist.recv_addr=127.0.0.1:{ist};gcache.size=64M{extra}"
                ),
                "--wsrep-sst-method=rsync".to_string(),
                "--binlog-format=ROW".to_string(),
                "--default-storage-engine=InnoDB".to_string(),
                "--innodb-autoinc-lock-mode=2".to_string(),
                "--innodb-buffer-pool-size=64M".to_string(),
                "--innodb-log-file-size=16M".to_string(),
            ];
            if i == 0 {
                // The first node forms the cluster; the others join it
                // (and take its state by rsync).
                args.push("--wsrep-new-cluster".to_string());
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            nodes.push(MysqlServer::start(&args));
        }
        let cluster = GaleraCluster {
            urls: nodes.iter().map(MysqlServer::url).collect(),
            dirs: nodes.iter().map(|n| n.dir().to_path_buf()).collect(),
            nodes: Mutex::new(nodes),
        };
        cluster.wait_formed();
        cluster
    }

    fn nodes(&self) -> MutexGuard<'_, Vec<MysqlServer>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connection URL of node `i` (0-based), database `test`.
    pub fn url(&self, i: usize) -> String {
        self.urls[i].clone()
    }

    /// Connection URLs of every node, database `test`.
    pub fn urls(&self) -> Vec<String> {
        self.urls.clone()
    }

    /// `host:port` of every node's client port.
    pub fn hosts(&self) -> Vec<String> {
        self.urls
            .iter()
            .map(|u| {
                let rest = u.split_once('@').map_or(u.as_str(), |(_, r)| r);
                rest.split('/').next().unwrap_or(rest).to_string()
            })
            .collect()
    }

    /// The temp dir of node `i` (its `mariadbd.log`).
    pub fn dir(&self, i: usize) -> &Path {
        &self.dirs[i]
    }

    /// Kills node `i` with SIGKILL, as a crash: the other nodes find it
    /// gone when their group communication times it out.
    pub fn kill(&self, i: usize) {
        self.nodes()[i].sigkill();
    }

    /// Starts node `i` again after [`kill`](GaleraCluster::kill), as a
    /// joiner (never as the node that forms the cluster): it takes the
    /// writes it missed from a donor (incremental or full state transfer).
    /// Blocks (call it from `spawn_blocking`) until every node is back in
    /// one synced cluster of [`GALERA_NODES`] (as [`galera_cluster`] waits
    /// at the start).
    pub fn restart(&self, i: usize) {
        self.nodes()[i].restart(&["--wsrep-new-cluster"]);
        self.wait_formed();
    }

    /// Makes the cluster whole again after a test that may have stopped
    /// part-way through a fault: a node killed or exited is started again
    /// as a joiner, a node cut off (`gmcast.isolate=1`) is let back in, and
    /// this waits, as [`restart`](GaleraCluster::restart) does, until every
    /// node is synced in one cluster. Blocks (call it from
    /// `spawn_blocking`).
    pub fn heal(&self) {
        for i in 0..GALERA_NODES {
            let mut nodes = self.nodes();
            if !nodes[i].is_running() {
                // Reaps a node that exited on its own.
                nodes[i].sigkill();
                nodes[i].restart(&["--wsrep-new-cluster"]);
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        for url in &self.urls {
            rt.block_on(async {
                let fut = async {
                    let opts = mysql_async::Opts::from_url(url).ok()?;
                    let mut conn = mysql_async::Conn::new(opts).await.ok()?;
                    let _ = conn
                        .query_drop("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'")
                        .await;
                    let _ = conn.disconnect().await;
                    Some(())
                };
                let _ = tokio::time::timeout(Duration::from_secs(5), fut).await;
            });
        }
        self.wait_formed();
    }

    /// A new, uniquely named database (created on node 1, replicated to
    /// all): its URL on every node.
    pub async fn fresh_db(&self) -> Vec<String> {
        let name = util::unique_db_name();
        let mut admin = connect(&self.url(0)).await;
        admin
            .query_drop(format!("CREATE DATABASE `{name}`"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name} failed: {e}"));
        let _ = admin.disconnect().await;
        self.urls()
            .iter()
            .map(|u| util::with_database(u, &name))
            .collect()
    }

    /// Waits until every node sees all [`GALERA_NODES`] in its primary
    /// component and is synced and ready for writes.
    pub fn wait_formed(&self) {
        let urls = self.urls();
        let deadline = Instant::now() + FORM_TIMEOUT;
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                loop {
                    let states: Vec<String> = rt.block_on(async {
                        let mut states = Vec::with_capacity(urls.len());
                        for url in &urls {
                            states.push(state(url).await);
                        }
                        states
                    });
                    let want = format!("{GALERA_NODES} ON Synced");
                    if states.iter().all(|s| *s == want) {
                        return;
                    }
                    if Instant::now() > deadline {
                        let logs: Vec<String> = (0..GALERA_NODES)
                            .map(|i| util::tail(&self.dir(i).join("mariadbd.log"), 15))
                            .collect();
                        panic!(
                            "the Galera cluster did not form within {FORM_TIMEOUT:?}: \
                             node states (size, ready, state) {states:?}\n{}",
                            logs.join("\n---\n")
                        );
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
            .join()
            .expect("cluster readiness thread panicked");
        });
    }
}

/// `"<wsrep_cluster_size> <wsrep_ready> <wsrep_local_state_comment>"` of
/// the node at `url`, or the error.
async fn state(url: &str) -> String {
    let fut = async {
        let mut conn =
            mysql_async::Conn::new(mysql_async::Opts::from_url(url).map_err(|e| e.to_string())?)
                .await
                .map_err(|e| e.to_string())?;
        let rows: Vec<(String, String)> = conn
            .query(
                "SHOW STATUS WHERE Variable_name IN \
                 ('wsrep_cluster_size', 'wsrep_ready', 'wsrep_local_state_comment')",
            )
            .await
            .map_err(|e| e.to_string())?;
        let _ = conn.disconnect().await;
        let get = |name: &str| {
            rows.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        Ok::<_, String>(format!(
            "{} {} {}",
            get("wsrep_cluster_size"),
            get("wsrep_ready"),
            get("wsrep_local_state_comment")
        ))
    };
    match tokio::time::timeout(Duration::from_secs(5), fut).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => e,
        Err(_) => "timed out".into(),
    }
}

/// Opens one connection, panicking with a readable message on failure.
async fn connect(url: &str) -> mysql_async::Conn {
    let opts = mysql_async::Opts::from_url(url)
        .unwrap_or_else(|e| panic!("bad MySQL URL {}: {e}", util::redact(url)));
    mysql_async::Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to MySQL at {}: {e}", util::redact(url)))
}
