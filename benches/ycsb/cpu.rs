//! CPU time around each timed mode, from Linux's `/proc`: the bench
//! process's own (the client: load generator, drivers, batchpool), the
//! server's process tree (when the bench knows the server's process, see
//! [`Database::server_pid`](super::Database::server_pid)), and the whole
//! machine's busy share. Where `/proc` cannot be read the figures are
//! missing, never wrong.

/// Clock ticks per second of `/proc`'s times (Linux's `USER_HZ`).
const TICKS: f64 = 100.0;

/// CPU counters at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds of CPU used by this process.
    client: Option<f64>,
    /// Seconds of CPU used by the server's process tree.
    server: Option<f64>,
    /// Busy and total ticks of the machine (all cores).
    machine: Option<(u64, u64)>,
    /// Context switches of this process's threads (voluntary and not).
    switches: Option<u64>,
}

/// CPU used between two [`Sample`]s.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Used {
    /// Seconds of CPU of the bench process.
    pub client_secs: Option<f64>,
    /// Seconds of CPU of the server's processes.
    pub server_secs: Option<f64>,
    /// Share of the machine's cores busy (any process), 0–1.
    pub machine_busy: Option<f64>,
    /// Context switches of the bench process's threads (each a thread that
    /// went to sleep or was put off a core).
    pub client_switches: Option<u64>,
}

impl Sample {
    /// The counters now; `server` is the server's main process.
    pub fn now(server: Option<u32>) -> Sample {
        Sample {
            client: own(std::process::id()).map(|(_, own, _)| own),
            server: server.and_then(tree),
            machine: machine(),
            switches: switches(),
        }
    }

    /// What was used from `self` to `later`.
    pub fn until(&self, later: &Sample) -> Used {
        // A process tree that changed in between can give less than before.
        let diff = |a: Option<f64>, b: Option<f64>| Some(b? - a?).filter(|d| *d >= 0.0);
        Used {
            client_secs: diff(self.client, later.client),
            server_secs: diff(self.server, later.server),
            machine_busy: match (self.machine, later.machine) {
                (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                    Some((b1 - b0) as f64 / (t1 - t0) as f64)
                }
                _ => None,
            },
            client_switches: later
                .switches
                .zip(self.switches)
                .and_then(|(b, a)| b.checked_sub(a)),
        }
    }
}

impl Used {
    /// `client 1.23 s (12.3 µs/row), server ..., machine busy 97%`.
    pub fn describe(&self, rows: usize) -> String {
        self.describe_per(rows, "row")
    }

    /// [`describe`](Used::describe) per `n` of `unit` (`µs/op`).
    pub fn describe_per(&self, n: usize, unit: &str) -> String {
        let per = |s: f64| s * 1e6 / n.max(1) as f64;
        let mut parts = Vec::new();
        if let Some(c) = self.client_secs {
            parts.push(format!("client {c:.2} s ({:.1} µs/{unit})", per(c)));
        }
        if let Some(s) = self.server_secs {
            parts.push(format!("server {s:.2} s ({:.1} µs/{unit})", per(s)));
        }
        if let Some(b) = self.machine_busy {
            parts.push(format!("machine busy {:.0}%", b * 100.0));
        }
        if let Some(w) = self.client_switches {
            let per = w as f64 / n.max(1) as f64;
            parts.push(format!("client context switches {per:.2}/{unit}"));
        }
        parts.join(", ")
    }
}

/// Parent, own CPU seconds, and CPU seconds of its reaped children, of a
/// process (`/proc/PID/stat`).
fn own(pid: u32) -> Option<(u32, f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    let ppid = num(1)? as u32;
    let own = (num(11)? + num(12)?) as f64 / TICKS;
    let children = (num(13)? + num(14)?) as f64 / TICKS;
    Some((ppid, own, children))
}

/// CPU seconds of `root` and all its descendants, including the ones that
/// ended and were reaped (their parent's children's times).
fn tree(root: u32) -> Option<f64> {
    let mut procs = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some((ppid, cpu, reaped)) = own(pid) {
            procs.push((pid, ppid, cpu + reaped));
        }
    }
    procs.iter().find(|p| p.0 == root)?;
    let mut members = vec![root];
    let mut i = 0;
    while i < members.len() {
        let parent = members[i];
        members.extend(procs.iter().filter(|p| p.1 == parent).map(|p| p.0));
        i += 1;
    }
    Some(
        procs
            .iter()
            .filter(|p| members.contains(&p.0))
            .map(|p| p.2)
            .sum(),
    )
}

/// Busy and total ticks of all cores (`/proc/stat`): busy is all but idle
/// and iowait.
fn machine() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((total - idle, total))
}

/// Context switches of this process's live threads
/// (`/proc/self/task/*/status`).
fn switches() -> Option<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<u64>().ok()?;
            }
        }
    }
    Some(total)
}

/// The parent of `pid` (a PostgreSQL backend's is the postmaster).
pub fn parent(pid: u32) -> Option<u32> {
    own(pid).map(|(ppid, _, _)| ppid)
}

/// `pid` if it is a process of this machine whose command name is one of
/// `names` (a server reached over the network has no process here).
pub fn local_process(pid: u32, names: &[&str]) -> Option<u32> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    names.contains(&comm.trim()).then_some(pid)
}
