//! Shared parts of the fuzz targets: the row counts each input is rendered
//! at, the statement generator of `render_structured`, and the count of
//! inputs that reached the batchable path (printed as the run goes).

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

/// Inputs seen, and those batchable per dialect.
pub struct Reached {
    runs: AtomicU64,
    postgres: AtomicU64,
    mysql: AtomicU64,
}

impl Reached {
    /// No inputs yet.
    pub const fn new() -> Reached {
        Reached {
            runs: AtomicU64::new(0),
            postgres: AtomicU64::new(0),
            mysql: AtomicU64::new(0),
        }
    }

    /// Counts one input and the dialects it was batchable for; at every
    /// power of two from 2^12 inputs on, prints the counts to stderr.
    pub fn record(&self, target: &str, batchable: &[Dialect]) {
        for dialect in batchable {
            match dialect {
                Dialect::Postgres => self.postgres.fetch_add(1, Ordering::Relaxed),
                Dialect::MySql => self.mysql.fetch_add(1, Ordering::Relaxed),
            };
        }
        let runs = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        if runs >= 1 << 12 && runs.is_power_of_two() {
            let pg = self.postgres.load(Ordering::Relaxed);
            let my = self.mysql.load(Ordering::Relaxed);
            eprintln!(
                "batchable[{target}]: {runs} inputs: postgres {pg} ({:.1}%), mysql {my} ({:.1}%)",
                pg as f64 * 100.0 / runs as f64,
                my as f64 * 100.0 / runs as f64
            );
        }
    }
}

impl Default for Reached {
    fn default() -> Reached {
        Reached::new()
    }
}
