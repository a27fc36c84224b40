//! Shared parts of the fuzz targets: the row counts each input is rendered
//! at, the statement generators of `render_structured` and `keyed`, and the
//! count of inputs that reached the batchable and the keyed paths (printed
//! as the run goes).

pub mod grammar;

use std::sync::atomic::{AtomicU64, Ordering};

use batchpool::fuzzing::Dialect;

/// The row counts an input is rendered at: 1, 2, 3 and one from 4 to 64
/// chosen by the input's bytes (FNV-1a), so the same input always checks
/// the same sizes.
pub fn sizes(input: &[u8]) -> [usize; 4] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in input {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    [1, 2, 3, 4 + (hash % 61) as usize]
}

/// Inputs seen, those batchable per dialect, and the keyed ones per kind.
pub struct Reached {
    runs: AtomicU64,
    postgres: AtomicU64,
    mysql: AtomicU64,
    /// Keyed reads, updates and deletes.
    keyed: [AtomicU64; 3],
}

impl Reached {
    /// No inputs yet.
    pub const fn new() -> Reached {
        Reached {
            runs: AtomicU64::new(0),
            postgres: AtomicU64::new(0),
            mysql: AtomicU64::new(0),
            keyed: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Counts one input, the dialects it was batchable for and the kind of
    /// keyed statement it was on PostgreSQL (`reads`, `updates`, `deletes`);
    /// at every power of two from 2^12 inputs on, prints the counts to
    /// stderr (the keyed ones once there are any).
    pub fn record(&self, target: &str, batchable: &[Dialect], keyed: Option<&str>) {
        for dialect in batchable {
            match dialect {
                Dialect::Postgres => self.postgres.fetch_add(1, Ordering::Relaxed),
                Dialect::MySql => self.mysql.fetch_add(1, Ordering::Relaxed),
            };
        }
        let kind = match keyed {
            Some("reads") => Some(0),
            Some("updates") => Some(1),
            Some(_) => Some(2),
            None => None,
        };
        if let Some(counter) = kind.and_then(|k| self.keyed.get(k)) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let runs = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        if runs >= 1 << 12 && runs.is_power_of_two() {
            let share = |n: u64| n as f64 * 100.0 / runs as f64;
            let pg = self.postgres.load(Ordering::Relaxed);
            let my = self.mysql.load(Ordering::Relaxed);
            let [reads, updates, deletes] =
                self.keyed.each_ref().map(|c| c.load(Ordering::Relaxed));
            let keyed = if reads + updates + deletes > 0 {
                format!(
                    "; keyed: reads {reads} ({:.1}%), updates {updates} ({:.1}%), deletes \
                     {deletes} ({:.1}%)",
                    share(reads),
                    share(updates),
                    share(deletes)
                )
            } else {
                String::new()
            };
            eprintln!(
                "batchable[{target}]: {runs} inputs: postgres {pg} ({:.1}%), mysql {my} ({:.1}%){keyed}",
                share(pg),
                share(my)
            );
        }
    }
}

impl Default for Reached {
    fn default() -> Reached {
        Reached::new()
    }
}
