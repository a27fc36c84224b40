//! The YCSB run phase: the core workloads' operations over the loaded
//! records, all drawn before any timing from seeded generators.
//!
//! As YCSB's `CoreWorkload` with its defaults: each operation's type drawn
//! with the workload's proportions, its key by the scrambled zipfian choice
//! ([`ScrambledZipfian`], constant 0.99) over the loaded records; a read
//! fetches every field of the record (`readallfields=true`), an update
//! writes one field picked uniformly (`writeallfields=false`) with a new
//! random value of the load's field length, a read-modify-write reads the
//! record and then updates one field of it, from the same task.

use std::collections::HashMap;

use serde::Serialize;

use super::workload::{FIELD_COUNT, random_field};
use super::zipf::{ScrambledZipfian, seeded};

/// A YCSB core workload the run phase runs (`--workload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Update heavy: 50 % reads, 50 % updates.
    A,
    /// Read mostly: 95 % reads, 5 % updates.
    B,
    /// Read only: 100 % reads.
    C,
    /// Read-modify-write: 50 % reads, 50 % read-modify-writes.
    F,
}

impl Workload {
    /// Every workload, in order.
    pub const ALL: [Workload; 4] = [Workload::A, Workload::B, Workload::C, Workload::F];

    /// Its letter, as `--workload` takes it and the reports show it.
    pub fn name(self) -> &'static str {
        match self {
            Workload::A => "a",
            Workload::B => "b",
            Workload::C => "c",
            Workload::F => "f",
        }
    }

    /// Shares of reads, updates and read-modify-writes (YCSB's
    /// `readproportion`, `updateproportion`, `readmodifywriteproportion`).
    pub fn proportions(self) -> [f64; 3] {
        match self {
            Workload::A => [0.5, 0.5, 0.0],
            Workload::B => [0.95, 0.05, 0.0],
            Workload::C => [1.0, 0.0, 0.0],
            Workload::F => [0.5, 0.0, 0.5],
        }
    }

    /// `50% read / 50% update`, for the reports.
    pub fn mix(self) -> String {
        let names = ["read", "update", "read-modify-write"];
        let parts: Vec<String> = self
            .proportions()
            .iter()
            .zip(names)
            .filter(|(p, _)| **p > 0.0)
            .map(|(p, name)| format!("{}% {name}", (p * 100.0).round()))
            .collect();
        parts.join(" / ")
    }

    /// A seed of its own for each workload, from the run's `--seed`.
    fn seed(self, seed: u64) -> u64 {
        seed ^ (0x0a11_0000 + self as u64)
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("{s:?} is not a workload: a, b, c, f or none"))
    }
}

/// What one operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Every field of the record.
    Read,
    /// One field of the record.
    Update,
    /// A read of the record, then an update of one field of it.
    ReadModifyWrite,
}

impl OpKind {
    /// Every kind, in the order of the reports.
    pub const ALL: [OpKind; 3] = [OpKind::Read, OpKind::Update, OpKind::ReadModifyWrite];

    /// The statements it sends on its own: one, or two for a
    /// read-modify-write.
    pub fn statements(self) -> u64 {
        match self {
            OpKind::ReadModifyWrite => 2,
            _ => 1,
        }
    }

    /// Whether it writes a field (and so has a value).
    pub fn writes(self) -> bool {
        self != OpKind::Read
    }

    /// `read`, `update`, `rmw`.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::ReadModifyWrite => "rmw",
        }
    }
}

/// One operation of the run phase.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    /// What it does.
    pub kind: OpKind,
    /// The index of its record in the loaded rows.
    pub record: usize,
    /// The field it writes (`FIELD<field>`), for the kinds that write.
    pub field: usize,
}

/// The operations of one workload, in the order the tasks take them.
#[derive(Clone, Debug)]
pub struct Operations {
    /// The workload.
    pub workload: Workload,
    /// Records the keys were chosen among (the loaded rows `0..records`).
    pub records: usize,
    /// The operations.
    pub ops: Vec<Op>,
}

impl Operations {
    /// `operations` operations of `workload` over `records` loaded records,
    /// from generators seeded with `seed` (and the workload): the same list
    /// on every run.
    pub fn generate(
        workload: Workload,
        operations: usize,
        records: usize,
        seed: u64,
    ) -> Operations {
        let mut rng = seeded(workload.seed(seed));
        let keys = ScrambledZipfian::new(records as u64);
        let [read, update, _] = workload.proportions();
        let ops = (0..operations)
            .map(|_| {
                let u: f64 = rand::Rng::random(&mut rng);
                let kind = if u < read {
                    OpKind::Read
                } else if u < read + update {
                    OpKind::Update
                } else {
                    OpKind::ReadModifyWrite
                };
                let record = keys.next(&mut rng) as usize;
                let field = if kind.writes() {
                    rand::Rng::random_range(&mut rng, 0..FIELD_COUNT)
                } else {
                    0
                };
                Op {
                    kind,
                    record,
                    field,
                }
            })
            .collect();
        Operations {
            workload,
            records,
            ops,
        }
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Operations of `kind`.
    pub fn count(&self, kind: OpKind) -> usize {
        self.ops.iter().filter(|o| o.kind == kind).count()
    }

    /// Statements the operations send when each is sent as it is: one per
    /// read and update, two per read-modify-write.
    pub fn plain_statements(&self) -> u64 {
        self.ops.iter().map(|o| o.kind.statements()).sum()
    }

    /// Distinct records the operations touch.
    pub fn distinct_records(&self) -> usize {
        self.popularity().len()
    }

    /// The most popular record's share of the operations (0 for none).
    pub fn hottest_share(&self) -> f64 {
        let top = self.popularity().into_values().max().unwrap_or(0);
        top as f64 / self.ops.len().max(1) as f64
    }

    /// Operations per record.
    fn popularity(&self) -> HashMap<usize, usize> {
        let mut by_record = HashMap::new();
        for o in &self.ops {
            *by_record.entry(o.record).or_insert(0) += 1;
        }
        by_record
    }

    /// The values one run writes: for each operation that writes, a new
    /// field of `field_len` random printable bytes from a generator seeded
    /// with `seed`, else an empty string. Each run gets its own seed, so no
    /// update writes the value a field already holds (MariaDB counts such
    /// a row as unchanged, not affected).
    pub fn values(&self, field_len: usize, seed: u64) -> Vec<String> {
        let mut rng = seeded(seed);
        let mut buf = vec![0u8; field_len];
        self.ops
            .iter()
            .map(|o| {
                if o.kind.writes() {
                    random_field(&mut rng, &mut buf)
                } else {
                    String::new()
                }
            })
            .collect()
    }
}

/// `--workload`: a comma-separated list of `a`, `b`, `c`, `f` (each once,
/// in the given order), or `none` (no run phase).
pub fn parse_workloads(s: &str) -> Result<Vec<Workload>, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut list = Vec::new();
    for part in s.split(',') {
        if part.trim().eq_ignore_ascii_case("none") {
            return Err("--workload none stands alone (no run phase)".into());
        }
        let w: Workload = part.parse()?;
        if !list.contains(&w) {
            list.push(w);
        }
    }
    Ok(list)
}
