//! The YCSB load-phase workload: `usertable` rows with YCSB's hashed keys and
//! random printable fields, all generated before any timing; and the SQL of
//! both phases.

use std::collections::HashSet;

use rand::{RngCore, SeedableRng, rngs::StdRng};

use super::{Result, fail};

/// Fields per row (YCSB `fieldcount`).
pub const FIELD_COUNT: usize = 10;
/// Bytes per field (YCSB `fieldlength`).
pub const FIELD_LEN: usize = 100;
/// How far before a failing row (`--fail-rate`) the row whose key it takes
/// is, at least.
pub const FAIL_GAP: usize = 1000;
/// The table every mode loads.
pub const TABLE: &str = "usertable";

/// Column names in insert order: `YCSB_KEY, FIELD0, ..., FIELD9`.
pub fn columns() -> Vec<String> {
    std::iter::once("YCSB_KEY".to_string())
        .chain((0..FIELD_COUNT).map(|i| format!("FIELD{i}")))
        .collect()
}

/// `INSERT INTO usertable (YCSB_KEY, FIELD0, ...) VALUES (...)`, the n-th
/// (1-based) placeholder written by `placeholder(n)`.
pub fn insert_sql(placeholder: impl Fn(usize) -> String) -> String {
    let cols = columns();
    let params: Vec<String> = (1..=cols.len()).map(placeholder).collect();
    format!(
        "INSERT INTO {TABLE} ({}) VALUES ({})",
        cols.join(", "),
        params.join(", ")
    )
}

/// `INSERT INTO usertable (YCSB_KEY, FIELD0, ...) VALUES (...), (...)`:
/// `rows` tuples written by hand (the `rewrite-peer` mode's text), the n-th
/// placeholder of the statement (1-based, counted over all tuples) written
/// by `placeholder(n)`.
pub fn insert_rows_sql(rows: usize, placeholder: impl Fn(usize) -> String) -> String {
    let cols = columns();
    let per_row = cols.len();
    let mut sql = format!("INSERT INTO {TABLE} ({}) VALUES ", cols.join(", "));
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for k in 1..=per_row {
            if k > 1 {
                sql.push_str(", ");
            }
            sql.push_str(&placeholder(row * per_row + k));
        }
        sql.push(')');
    }
    sql
}

/// `SELECT * FROM usertable WHERE YCSB_KEY = <key>`: YCSB's read of every
/// field of one record, the key written as `key` (a placeholder).
pub fn read_sql(key: &str) -> String {
    format!("SELECT * FROM {TABLE} WHERE YCSB_KEY = {key}")
}

/// `UPDATE usertable SET FIELD<field> = <value> WHERE YCSB_KEY = <key>`:
/// YCSB's update of one field of one record, value and key written as
/// `value` and `key` (placeholders).
pub fn update_sql(field: usize, value: &str, key: &str) -> String {
    format!("UPDATE {TABLE} SET FIELD{field} = {value} WHERE YCSB_KEY = {key}")
}

/// `CREATE TABLE usertable (YCSB_KEY VARCHAR(255) PRIMARY KEY, FIELD0 TEXT, ...)`.
pub fn create_table_sql() -> String {
    let fields: Vec<String> = (0..FIELD_COUNT).map(|i| format!("FIELD{i} TEXT")).collect();
    format!(
        "CREATE TABLE {TABLE} (YCSB_KEY VARCHAR(255) PRIMARY KEY, {})",
        fields.join(", ")
    )
}

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes of the
/// index, then Java's `Math.abs` (which leaves `i64::MIN` as it is).
pub fn fnvhash64(index: i64) -> i64 {
    const OFFSET_BASIS: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
    const PRIME: i64 = 1_099_511_628_211;
    let mut val = index;
    let mut hash = OFFSET_BASIS;
    for _ in 0..8 {
        let octet = val & 0xff;
        val >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(PRIME);
    }
    hash.wrapping_abs()
}

/// The key of record `index` in YCSB's default hashed insert order:
/// `"user"` followed by the decimal hash.
pub fn key(index: u64) -> String {
    // Indexes are far below i64::MAX (they count rows).
    format!("user{}", fnvhash64(index as i64))
}

/// A field of `buf.len()` random printable ASCII bytes (`' '..='~'`) from
/// `rng` (`buf` is scratch space).
pub fn random_field(rng: &mut impl RngCore, buf: &mut [u8]) -> String {
    rng.fill_bytes(buf);
    buf.iter().map(|b| char::from(b' ' + b % 95)).collect()
}

/// One `usertable` row.
#[derive(Clone, Debug)]
pub struct Record {
    /// `YCSB_KEY`.
    pub key: String,
    /// `FIELD0..FIELD9`.
    pub fields: [String; FIELD_COUNT],
    /// The key is an earlier row's (`--fail-rate`): the INSERT must fail.
    pub duplicate: bool,
}

/// All rows of a run, generated once and shared by every mode.
#[derive(Debug)]
pub struct Dataset {
    /// Rows in index order.
    pub rows: Vec<Record>,
}

impl Dataset {
    /// `records` rows: keys as YCSB hashes them, fields of `field_len`
    /// random printable ASCII bytes (`' '..='~'`) from a seeded generator.
    /// Fails if two keys collide (they would break the primary key).
    pub fn generate(records: usize, field_len: usize, seed: u64) -> Result<Dataset> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut seen = HashSet::with_capacity(records);
        let mut rows = Vec::with_capacity(records);
        let mut buf = vec![0u8; field_len];
        for i in 0..records {
            let key = key(i as u64);
            if !seen.insert(key.clone()) {
                return Err(fail(format!("YCSB key collision at index {i}: {key}")));
            }
            let fields = std::array::from_fn(|_| random_field(&mut rng, &mut buf));
            rows.push(Record {
                key,
                fields,
                duplicate: false,
            });
        }
        Ok(Dataset { rows })
    }

    /// `--fail-rate`: about `percent` % of the rows (picked by a generator
    /// seeded with `seed`) take the key of a row at least [`FAIL_GAP`] rows
    /// before them, long written when they are sent, so their INSERT fails
    /// with a duplicate key. Rows before the first [`FAIL_GAP`] never do.
    /// Returns how many rows fail.
    pub fn add_failures(&mut self, percent: f64, seed: u64) -> usize {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xfa11);
        let mut failing = 0;
        for i in FAIL_GAP..self.rows.len() {
            let draw = rng.next_u64() as f64 / u64::MAX as f64 * 100.0;
            if draw < percent {
                let j = rng.next_u64() as usize % (i - FAIL_GAP + 1);
                self.rows[i].key = self.rows[j].key.clone();
                self.rows[i].duplicate = true;
                failing += 1;
            }
        }
        failing
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The first `n` rows (all of them when `n` is larger), as a dataset of
    /// their own: a sweep point that loads fewer rows than were generated.
    pub fn prefix(&self, n: usize) -> Dataset {
        Dataset {
            rows: self.rows[..n.min(self.rows.len())].to_vec(),
        }
    }

    /// Bytes of key and fields of the largest row.
    pub fn max_row_bytes(&self) -> usize {
        self.rows
            .iter()
            .map(|r| r.key.len() + r.fields.iter().map(String::len).sum::<usize>())
            .max()
            .unwrap_or(0)
    }

    /// Bytes of key and field data (what the table receives, without overhead).
    pub fn payload_bytes(&self) -> usize {
        self.rows
            .iter()
            .map(|r| r.key.len() + r.fields.iter().map(String::len).sum::<usize>())
            .sum()
    }
}
