//! What both halves of the oracle share: the case model, the seeded
//! generator, the judge (batchpool's outcomes against the plain driver's)
//! and the report.

// Built with one backend feature, the other half's variants and helpers
// go unused.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

/// Labels of every generated enum type.
pub const LABELS: [&str; 3] = ["red", "green", "blue"];

/// Which server a case is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Pg,
    My,
}

/// A small, portable PRNG (SplitMix64): a seed means the same case on every
/// machine and every version of every crate.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    pub fn percent(&mut self, p: usize) -> bool {
        self.below(100) < p
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    /// `len` lower-case letters and digits.
    pub fn alnum(&mut self, len: usize) -> String {
        const A: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        (0..len).map(|_| A[self.below(A.len())] as char).collect()
    }

    /// `len` letters of both cases and digits: incompressible enough that
    /// PostgreSQL cannot squeeze 6,000 of them into an index row.
    pub fn noise(&mut self, len: usize) -> String {
        const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        (0..len).map(|_| A[self.below(A.len())] as char).collect()
    }
}

/// A value bound for one column (typed by the column on PostgreSQL).
#[derive(Clone, Debug, PartialEq)]
pub enum V {
    Int(i64),
    Text(String),
    Null,
}

impl V {
    pub fn text(s: &str) -> V {
        V::Text(s.to_string())
    }
}

/// Column types (the same names on both servers, rendered by each half).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ty {
    SmallInt,
    Int,
    BigInt,
    Text,
    Varchar(usize),
    Char(usize),
    /// `red`, `green`, `blue`: a PostgreSQL enum type / a MariaDB `ENUM`.
    Enum,
}

impl Ty {
    pub fn is_int(self) -> bool {
        matches!(self, Ty::SmallInt | Ty::Int | Ty::BigInt)
    }

    pub fn max_len(self) -> Option<usize> {
        match self {
            Ty::Varchar(n) | Ty::Char(n) => Some(n),
            _ => None,
        }
    }
}

/// How the statement fills a column.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Use {
    /// A placeholder bound per caller.
    Param,
    /// The `DEFAULT` keyword in the tuple.
    DefaultKw,
    /// Left out of the column list.
    Omitted,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Check {
    /// `CHECK (c BETWEEN lo AND hi)`.
    Between(i64, i64),
    /// `CHECK (c <> 'bad')`.
    NotBad,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyKind {
    No,
    Unique,
    Primary,
}

#[derive(Clone, Debug)]
pub struct Col {
    pub name: String,
    pub ty: Ty,
    pub not_null: bool,
    pub default: Option<V>,
    pub check: Option<Check>,
    pub key: KeyKind,
    /// PostgreSQL: the placeholder is cast (`$n::int8`, `$n::text`,
    /// `$n::text::enum`) so the server converts on assignment; bare `$n`
    /// takes the column's own type.
    pub cast: bool,
    /// MariaDB: `CHARACTER SET utf8mb3` (4-byte characters are rejected).
    pub narrow: bool,
    /// PostgreSQL, a `UNIQUE` key: `DEFERRABLE INITIALLY DEFERRED`, checked
    /// at commit (after a COPY's or an INSERT's CommandComplete).
    pub deferred: bool,
    pub fill: Use,
}

impl Col {
    pub fn new(name: &str, ty: Ty) -> Col {
        Col {
            name: name.to_string(),
            ty,
            not_null: false,
            default: None,
            check: None,
            key: KeyKind::No,
            cast: false,
            narrow: false,
            deferred: false,
            fill: Use::Param,
        }
    }

    pub fn not_null(mut self) -> Col {
        self.not_null = true;
        self
    }

    pub fn unique(mut self) -> Col {
        self.key = KeyKind::Unique;
        self
    }

    pub fn primary(mut self) -> Col {
        self.key = KeyKind::Primary;
        self.not_null = true;
        self
    }

    pub fn cast(mut self) -> Col {
        self.cast = true;
        self
    }
}

/// The statement around the one VALUES tuple.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verb {
    Insert,
    /// PostgreSQL `ON CONFLICT (k) DO NOTHING`.
    DoNothing,
    /// PostgreSQL `ON CONFLICT DO NOTHING` (no target).
    DoNothingAny,
    /// PostgreSQL `ON CONFLICT (k) DO UPDATE SET tag = EXCLUDED.tag, ...`.
    DoUpdate,
    /// The same with `WHERE t.tag % 2 = 0`.
    DoUpdateWhere,
    /// MariaDB `INSERT IGNORE`.
    Ignore,
    /// MariaDB `ON DUPLICATE KEY UPDATE tag = VALUES(tag), ...`.
    Odku,
    /// MariaDB `ON DUPLICATE KEY UPDATE tag = tag` (0 rows when it hits).
    OdkuNoop,
    /// MariaDB `ON DUPLICATE KEY UPDATE tag = IF(tag MOD 2 = 0, VALUES(tag), tag)`.
    OdkuCond,
    /// MariaDB `REPLACE`.
    Replace,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Audit {
    /// `AFTER INSERT` trigger writing to a transactional table.
    After,
    /// MariaDB: `AFTER INSERT` trigger writing to a MyISAM table.
    AfterMyIsam,
    /// MariaDB: `BEFORE INSERT` trigger writing to a MyISAM table.
    BeforeMyIsam,
}

#[derive(Clone, Debug, Default)]
pub struct Triggers {
    /// `BEFORE INSERT`: the key is lower-cased.
    pub lower_key: bool,
    /// PostgreSQL `BEFORE INSERT`: `RETURN NULL` when `tag % m = r`.
    pub skip: Option<(i64, i64)>,
    /// `BEFORE INSERT`: an error when `tag % m = r`, with this SQLSTATE
    /// (PostgreSQL `ERRCODE`) or error number (MariaDB `MYSQL_ERRNO`);
    /// `None`: the server's default (P0001 / 1644).
    pub raise: Option<(i64, i64, Option<&'static str>)>,
    /// A trigger writing `(tag, k)` of every inserted row to `<t>_audit`.
    pub audit: Option<Audit>,
    /// PostgreSQL: `AFTER INSERT FOR EACH STATEMENT` adds a row to `<t>_stmt`.
    pub per_statement: bool,
}

impl Triggers {
    pub fn any(&self) -> bool {
        self.lower_key
            || self.skip.is_some()
            || self.raise.is_some()
            || self.audit.is_some()
            || self.per_statement
    }
}

/// How the burst starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Start {
    /// Every connection is held (`pool.get()`) while the callers queue, then
    /// released: the queued rows go out as multi-row statements.
    Held,
    /// All callers released at once by a barrier: natural batching.
    Gate,
}

/// One oracle case: a table, rows already in it, and a burst of callers.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub flavor: Flavor,
    /// An auto-generated `id` primary key (bigserial / AUTO_INCREMENT).
    pub serial_id: bool,
    /// The columns after `tag int NOT NULL`.
    pub cols: Vec<Col>,
    /// The conflict key (ON CONFLICT target): an index into `cols`.
    pub key: Option<usize>,
    pub verb: Verb,
    /// RETURNING column names (`id` allowed); empty: no RETURNING.
    pub returning: Vec<String>,
    pub triggers: Triggers,
    /// MariaDB: the server's strict `sql_mode` (`false`: `sql_mode = ''` on
    /// every connection of both the pool and the plain driver).
    pub strict: bool,
    /// Rows in both tables before the burst: tag, then every column.
    pub pre: Vec<Vec<V>>,
    /// One row per caller: tag (the caller's index), then every column
    /// (only `Use::Param` columns are bound).
    pub burst: Vec<Vec<V>>,
    pub start: Start,
    pub pool_size: usize,
    /// `false`: the pool is built with coalescing off
    /// (`BatchConfig::enabled(false)`), every statement runs on its own.
    pub coalesce: bool,
}

impl Case {
    /// A case with a table of `cols`, no rows yet, plain INSERT.
    pub fn new(name: &str, flavor: Flavor, cols: Vec<Col>) -> Case {
        let key = cols.iter().position(|c| c.key != KeyKind::No);
        Case {
            name: name.to_string(),
            flavor,
            serial_id: !cols.iter().any(|c| c.key == KeyKind::Primary),
            cols,
            key,
            verb: Verb::Insert,
            returning: Vec::new(),
            triggers: Triggers::default(),
            strict: true,
            pre: Vec::new(),
            burst: Vec::new(),
            start: Start::Held,
            pool_size: 4,
            coalesce: true,
        }
    }

    /// Appends a caller whose row is `values` (every column, in order).
    pub fn caller(&mut self, values: Vec<V>) {
        let mut row = vec![V::Int(self.burst.len() as i64)];
        row.extend(values);
        self.burst.push(row);
    }

    /// Appends a row present before the burst (tags -1, -2, ...).
    pub fn existing(&mut self, values: Vec<V>) {
        let mut row = vec![V::Int(-(self.pre.len() as i64) - 1)];
        row.extend(values);
        self.pre.push(row);
    }

    /// The shape batchpool must keep coalescing after every fix: a plain
    /// INSERT (with or without RETURNING) into a table without triggers, on
    /// a strict session.
    pub fn must_coalesce(&self) -> bool {
        self.coalesce && self.verb == Verb::Insert && !self.triggers.any() && self.strict
    }

    /// Values bound for one row: tag, then the `Use::Param` columns.
    pub fn bound(&self, row: &[V]) -> Vec<V> {
        let mut out = vec![row[0].clone()];
        for (c, v) in self.cols.iter().zip(&row[1..]) {
            if c.fill == Use::Param {
                out.push(v.clone());
            }
        }
        out
    }

    /// Column names written by the pre-existing rows and read back.
    pub fn names(&self) -> Vec<String> {
        let mut v = vec!["tag".to_string()];
        v.extend(self.cols.iter().map(|c| c.name.clone()));
        v
    }

    pub fn key_col(&self) -> Option<&Col> {
        self.key.map(|k| &self.cols[k])
    }
}

// ---------------------------------------------------------------------------
// The generator.

/// What a generated caller's row gets wrong (at most one thing).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    OutOfRange,
    CheckFails,
    Null,
    TooLong,
    InvalidLabel,
    /// ~6,000 incompressible characters (into `text UNIQUE` on PostgreSQL:
    /// 54000).
    Huge,
    /// A NUL character (PostgreSQL: 22021).
    Nul,
    /// A 4-byte UTF-8 character into a utf8mb3 column (MariaDB: 1366).
    Wide,
}

fn faults_of(flavor: Flavor, c: &Col) -> Vec<Fault> {
    let pg = flavor == Flavor::Pg;
    let mut f = Vec::new();
    if c.not_null {
        f.push(Fault::Null);
    }
    if c.check.is_some() {
        f.push(Fault::CheckFails);
    }
    match c.ty {
        Ty::SmallInt | Ty::Int if !pg || c.cast => f.push(Fault::OutOfRange),
        Ty::Varchar(_) | Ty::Char(_) => f.push(Fault::TooLong),
        Ty::Enum => f.push(Fault::InvalidLabel),
        _ => {}
    }
    if c.ty == Ty::Text && pg && c.key != KeyKind::No {
        f.push(Fault::Huge);
    }
    if !c.ty.is_int() && c.ty != Ty::Enum && pg {
        f.push(Fault::Nul);
    }
    if c.narrow {
        f.push(Fault::Wide);
    }
    f
}

fn faulty(r: &mut Rng, c: &Col, fault: Fault) -> V {
    match fault {
        Fault::Null => V::Null,
        Fault::CheckFails => match c.check {
            Some(Check::Between(_, hi)) => V::Int(hi + 1 + r.range(0, 50)),
            _ => V::text("bad"),
        },
        Fault::OutOfRange => {
            let sign = if r.percent(50) { 1 } else { -1 };
            match c.ty {
                Ty::SmallInt => V::Int(sign * r.range(40_000, 90_000)),
                _ => V::Int(sign * r.range(3_000_000_000, 9_000_000_000)),
            }
        }
        Fault::TooLong => {
            let n = c.ty.max_len().unwrap_or(8);
            let len = n + 1 + r.below(3);
            V::Text(r.alnum(len))
        }
        Fault::InvalidLabel => V::text(r.pick(&["purple", "", "Red"])),
        Fault::Huge => V::Text(r.noise(6_000)),
        Fault::Nul => V::text("nul\0byte"),
        Fault::Wide => V::text("x\u{1F600}"),
    }
}

/// A valid value of a non-key column (unique `u`: by the caller's index).
fn valid(r: &mut Rng, c: &Col, index: i64) -> V {
    if !c.not_null && r.percent(12) {
        return V::Null;
    }
    if c.key != KeyKind::No {
        // The non-target unique column: distinct per caller, or NULL.
        return if r.percent(50) {
            V::Null
        } else {
            V::Text(format!("u{index}"))
        };
    }
    match c.ty {
        Ty::SmallInt | Ty::Int | Ty::BigInt => match c.check {
            Some(Check::Between(lo, hi)) => V::Int(r.range(lo, hi)),
            _ => V::Int(r.range(-1_000, 1_000)),
        },
        Ty::Enum => V::text(r.pick(&LABELS)),
        Ty::Text if r.percent(3) => {
            let len = r.range(3_000, 7_000) as usize;
            V::Text(r.noise(len))
        }
        _ => {
            let max = c.ty.max_len().unwrap_or(12).min(12);
            let len = r.range(1, max as i64) as usize;
            V::Text(r.alnum(len))
        }
    }
}

/// A default that the column accepts.
fn default_of(ty: Ty) -> V {
    match ty {
        Ty::SmallInt | Ty::Int | Ty::BigInt => V::Int(42),
        Ty::Enum => V::text("green"),
        Ty::Varchar(n) | Ty::Char(n) => V::Text("dflt"[..n.min(4)].to_string()),
        Ty::Text => V::text("dflt"),
    }
}

/// `s` with about half its letters upper-cased.
pub fn mixed_case(r: &mut Rng, s: &str) -> String {
    s.chars()
        .map(|ch| {
            if r.percent(50) {
                ch.to_ascii_uppercase()
            } else {
                ch
            }
        })
        .collect()
}

/// `n` (below 1,296) as two base-36 digits: a fixed-width prefix, so no
/// two callers' keys can run into each other whatever follows.
pub fn base36(n: usize) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    assert!(n < 36 * 36, "at most 1,296 callers");
    [digits[n / 36] as char, digits[n % 36] as char]
        .iter()
        .collect()
}

/// One random case. Bursts are built so that every caller's outcome is the
/// same whatever order the server sees the rows in: each key value (new or
/// pre-existing, also after the trigger lower-cases it and under MariaDB's
/// case-insensitive collation) is used by at most one caller.
pub fn generate(flavor: Flavor, seed: u64) -> Case {
    let pg = flavor == Flavor::Pg;
    let mut r = Rng::new(seed);
    let mut cols = Vec::new();

    // The conflict key.
    if r.percent(75) {
        let ty = if pg {
            r.pick(&[Ty::Text, Ty::Text, Ty::Varchar(12), Ty::Char(8), Ty::Int])
        } else {
            r.pick(&[Ty::Varchar(12), Ty::Varchar(12), Ty::Char(8), Ty::Int])
        };
        let mut k = Col::new("k", ty);
        if r.percent(35) {
            k = k.primary();
        } else {
            k = k.unique();
            k.not_null = r.percent(50);
        }
        k.cast = pg && r.percent(50);
        cols.push(k);
    }
    let key = if cols.is_empty() { None } else { Some(0) };
    let serial_id = cols.first().is_none_or(|k| k.key != KeyKind::Primary) && r.percent(80);

    // Other columns.
    let extra = r.range(1, 4);
    for j in 1..=extra {
        let ty = r.pick(&[
            Ty::SmallInt,
            Ty::Int,
            Ty::BigInt,
            Ty::Text,
            Ty::Varchar(3),
            Ty::Varchar(10),
            Ty::Char(4),
            Ty::Enum,
        ]);
        let mut c = Col::new(&format!("c{j}"), ty);
        c.not_null = r.percent(35);
        if r.percent(25) {
            c.default = Some(default_of(ty));
        }
        if r.percent(25) {
            c.check = match ty {
                Ty::Enum => None,
                t if t.is_int() => Some(Check::Between(-100, 100)),
                _ => Some(Check::NotBad),
            };
        }
        c.cast = pg && r.percent(50);
        c.narrow = !pg && matches!(ty, Ty::Text | Ty::Varchar(_)) && r.percent(20);
        if r.percent(12) && (c.default.is_some() || !c.not_null || r.percent(15)) {
            c.fill = if r.percent(50) {
                Use::DefaultKw
            } else {
                Use::Omitted
            };
        }
        cols.push(c);
    }
    // PostgreSQL: a `text UNIQUE` column that a huge value overflows (54000).
    if pg && r.percent(25) {
        let mut u = Col::new("u", Ty::Text).unique();
        u.cast = r.percent(50);
        cols.push(u);
    }

    let has_key = key.is_some();
    let verb = if pg {
        match (has_key, r.below(100)) {
            (true, 0..=34) => Verb::Insert,
            (true, 35..=59) => Verb::DoNothing,
            (true, 60..=64) => Verb::DoNothingAny,
            (true, 65..=84) => Verb::DoUpdate,
            (true, _) => Verb::DoUpdateWhere,
            (false, 0..=84) => Verb::Insert,
            (false, _) => Verb::DoNothingAny,
        }
    } else {
        match r.below(100) {
            0..=39 => Verb::Insert,
            40..=57 => Verb::Ignore,
            58..=71 => Verb::Odku,
            72..=77 => Verb::OdkuNoop,
            78..=83 => Verb::OdkuCond,
            _ => Verb::Replace,
        }
    };

    // A quarter of the PostgreSQL plain-INSERT cases with a UNIQUE key defer
    // it to commit (ON CONFLICT refuses a deferrable arbiter). Decided from
    // the seed, not the generator, so every other draw of a seed stays as
    // it was (the kept regression seeds make the same cases).
    if pg
        && verb == Verb::Insert
        && (seed ^ (seed >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62 == 0
    {
        if let Some(k) = key.filter(|&k| cols[k].key == KeyKind::Unique) {
            cols[k].deferred = true;
        }
    }

    let mut returning = Vec::new();
    if r.percent(if pg { 40 } else { 30 }) {
        if serial_id && r.percent(60) {
            returning.push("id".to_string());
        }
        returning.push("tag".to_string());
        for c in &cols {
            if r.percent(60) {
                returning.push(c.name.clone());
            }
        }
    }

    let mut triggers = Triggers::default();
    if r.percent(35) {
        let text_key = key.is_some_and(|k| !cols[k].ty.is_int());
        triggers.lower_key = text_key && r.percent(50);
        if pg && r.percent(30) {
            triggers.skip = Some((13, 7));
        }
        if r.percent(35) {
            let code = if pg {
                r.pick(&[None, Some("U0001"), Some("23514")])
            } else {
                r.pick(&[None, Some("30001")])
            };
            triggers.raise = Some((11, 5, code));
        }
        if r.percent(45) {
            triggers.audit = Some(if pg {
                Audit::After
            } else {
                r.pick(&[Audit::After, Audit::AfterMyIsam, Audit::BeforeMyIsam])
            });
        }
        triggers.per_statement = pg && r.percent(15);
    }

    let strict = pg || r.percent(70);
    // `ORACLE_START=held|gate` overrides the start (the rest of the case
    // stays the same): a Gate case coalesces as timing has it, so a
    // difference it found is reproduced for sure with `held`.
    let held = r.percent(50);
    let start = match std::env::var("ORACLE_START").as_deref() {
        Ok("held") => Start::Held,
        Ok("gate") => Start::Gate,
        _ if held => Start::Held,
        _ => Start::Gate,
    };
    let pool_size = r.range(2, 4) as usize;
    let mut case = Case {
        name: format!("seed {seed:#x}"),
        flavor,
        serial_id,
        cols,
        key,
        verb,
        returning,
        triggers,
        strict,
        pre: Vec::new(),
        burst: Vec::new(),
        start,
        pool_size,
        coalesce: true,
    };

    // Rows already in the table: distinct lower-case keys.
    let mut pre_keys = Vec::new();
    if let Some(k) = case.key_col().cloned() {
        for j in 0..r.range(4, 12) {
            let kv = if k.ty.is_int() {
                V::Int(j * 3 + 1)
            } else {
                V::Text(format!("p{j}{}", r.alnum(2)))
            };
            pre_keys.push(kv.clone());
            let mut row: Vec<V> = case
                .cols
                .iter()
                .map(|c| valid(&mut r, c, -1000 - j))
                .collect();
            row[0] = kv;
            for (c, v) in case.cols.iter().zip(row.iter_mut()) {
                if c.name == "u" && *v != V::Null {
                    *v = V::Text(format!("pu{j}"));
                }
            }
            case.existing(row);
        }
    } else {
        for j in 0..r.range(0, 3) {
            let row = case
                .cols
                .iter()
                .map(|c| valid(&mut r, c, -1000 - j))
                .collect();
            case.existing(row);
        }
    }

    // The callers.
    let callers = r.range(16, 100) as usize;
    // Two bursts in five reuse pre-existing keys often.
    let dup_rate = if r.percent(40) { 25 } else { 10 };
    let case_insensitive = !pg || case.triggers.lower_key;
    for i in 0..callers {
        let mut row: Vec<V> = case
            .cols
            .iter()
            .map(|c| valid(&mut r, c, i as i64))
            .collect();
        if let Some(k) = case.key_col().cloned() {
            let roll = r.below(100);
            row[0] = if roll < dup_rate && !pre_keys.is_empty() {
                // A key that already exists: the same outcome in any order.
                let taken = pre_keys.remove(r.below(pre_keys.len()));
                match taken {
                    V::Text(s) if case_insensitive && r.percent(50) => V::Text(s.to_uppercase()),
                    other => other,
                }
            } else if roll < dup_rate + 4 && !k.not_null {
                V::Null
            } else if k.ty.is_int() {
                V::Int(1_000 + i as i64)
            } else {
                // Unique per caller by its base-36 index, also lower-cased.
                let max = k.ty.max_len().unwrap_or(12).min(8);
                let mut s = format!("n{}", base36(i));
                let pad = max.saturating_sub(s.len());
                let len = r.below(pad + 1);
                s.push_str(&r.alnum(len));
                V::Text(mixed_case(&mut r, &s))
            };
        }
        // MariaDB turns a bad key into a valid one where the statement
        // does not fail (sql_mode '', INSERT IGNORE: out of range → the
        // type's limit, NULL → '' / 0), and two callers' clipped keys would
        // collide in an order-dependent way: such keys stay valid there.
        let key_may_fail = pg || (case.strict && case.verb != Verb::Ignore);
        if r.percent(12) {
            let candidates: Vec<(usize, Fault)> = case
                .cols
                .iter()
                .enumerate()
                .filter(|(j, c)| c.fill == Use::Param && (key_may_fail || Some(*j) != case.key))
                .flat_map(|(j, c)| faults_of(flavor, c).into_iter().map(move |f| (j, f)))
                .collect();
            if !candidates.is_empty() {
                let (j, fault) = candidates[r.below(candidates.len())];
                row[j] = faulty(&mut r, &case.cols[j], fault);
            }
        }
        case.caller(row);
    }
    case
}

/// The seeds of a random run: `ORACLE_SEEDS=0x1f,0x2a` runs exactly those,
/// otherwise `ORACLE_CASES` (default `default_cases`) seeds derived from a
/// fixed base, the same on every run.
pub fn seeds(flavor: Flavor, default_cases: usize) -> Vec<u64> {
    if let Ok(list) = std::env::var("ORACLE_SEEDS") {
        let parsed: Vec<u64> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            })
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("ORACLE_SEEDS={list}: {e}"));
        if !parsed.is_empty() {
            return parsed;
        }
    }
    let n = std::env::var("ORACLE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_cases);
    let mut base = Rng::new(match flavor {
        Flavor::Pg => 0x0AC1_E000_0000_0001,
        Flavor::My => 0x0AC1_E000_0000_0002,
    });
    (0..n).map(|_| base.next() >> 16).collect()
}

// ---------------------------------------------------------------------------
// Observations and the judge.

/// One caller's outcome, reduced to what the oracle compares.
#[derive(Clone, Debug)]
pub enum Obs {
    Ok {
        affected: u64,
        exact: bool,
        /// MariaDB `last_insert_id` (0 read as `None`).
        id: Option<u64>,
        returned: Option<Vec<Option<String>>>,
    },
    Err {
        /// SQLSTATE (PostgreSQL) or error number (MariaDB); `None` for a
        /// client-side error.
        code: Option<String>,
        unknown: bool,
        message: String,
    },
}

impl std::fmt::Display for Obs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Obs::Ok {
                affected,
                exact,
                id,
                returned,
            } => {
                write!(f, "Ok(rows_affected {affected}")?;
                if !exact {
                    write!(f, ", INEXACT")?;
                }
                if let Some(id) = id {
                    write!(f, ", last_insert_id {id}")?;
                }
                if let Some(row) = returned {
                    write!(f, ", returned {}", show_row(row))?;
                }
                write!(f, ")")
            }
            Obs::Err {
                code,
                unknown,
                message,
            } => {
                let code = code.as_deref().unwrap_or("no code");
                let unknown = if *unknown { " OUTCOME UNKNOWN" } else { "" };
                write!(f, "Err({code}{unknown}: {})", shorten_to(message, 160))
            }
        }
    }
}

pub type Rows = Vec<Vec<Option<String>>>;

/// A multiset of rows.
type Counts = BTreeMap<Vec<Option<String>>, i64>;

/// A table read back from both sides.
pub struct Table {
    pub what: &'static str,
    pub batchpool: Rows,
    pub plain: Rows,
}

/// Counters of the burst's pool (after minus before).
#[derive(Clone, Copy, Debug, Default)]
pub struct Delta {
    pub batches: u64,
    pub statements: u64,
    pub rows: u64,
    pub passthrough: u64,
    pub split: u64,
    /// Statements sent second in a pipelined pair.
    pub pipelined: u64,
    /// Statements sent by the backend's bulk path (COPY, MariaDB's bulk
    /// command).
    pub bulk: u64,
}

/// Everything one case produced.
pub struct Seen {
    /// Table A's DDL and the statement the pool ran.
    pub ddl: Vec<String>,
    pub sql: String,
    pub batchpool: Vec<Obs>,
    pub plain: Vec<Obs>,
    pub tables: Vec<Table>,
    /// tag → id in table A and table B (empty without an `id` column).
    pub ids_batchpool: HashMap<String, String>,
    pub ids_plain: HashMap<String, String>,
    /// Every caller told Ok exactly must be given the `last_insert_id` its
    /// statement alone reports, where that is one (a Galera node, where
    /// ids are read back from the coalesced statement); elsewhere batchpool
    /// may withhold an id it cannot prove.
    pub ids_promised: bool,
    pub delta: Delta,
    pub elapsed: Duration,
}

/// Counts over cases.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub cases: usize,
    pub callers: usize,
    pub ok: usize,
    pub inexact: usize,
    pub unknown: usize,
    pub failed: usize,
    /// Rows and flushes of the cases that must coalesce.
    pub plain_rows: u64,
    pub plain_batches: u64,
    /// Cases whose pool sent at least one multi-row statement.
    pub coalesced_cases: usize,
    /// Cases where the plain driver failed every caller.
    pub all_failed_cases: usize,
    /// Statements sent second in a pipelined pair, over all cases.
    pub pipelined: u64,
    /// Statements sent by the bulk path, over all cases.
    pub bulk: u64,
    /// Statements sent (coalesced ones and their re-runs), over all cases.
    pub statements: u64,
    /// Callers of cases run entirely on their own whose statements
    /// deadlocked each other (see `judge`).
    pub deadlocks: usize,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.cases += o.cases;
        self.callers += o.callers;
        self.ok += o.ok;
        self.inexact += o.inexact;
        self.unknown += o.unknown;
        self.failed += o.failed;
        self.deadlocks += o.deadlocks;
        self.plain_rows += o.plain_rows;
        self.plain_batches += o.plain_batches;
        self.pipelined += o.pipelined;
        self.bulk += o.bulk;
        self.statements += o.statements;
        self.coalesced_cases += o.coalesced_cases;
        self.all_failed_cases += o.all_failed_cases;
    }
}

pub struct Verdict {
    pub name: String,
    /// Empty when batchpool matched the plain driver.
    pub kinds: BTreeSet<String>,
    pub report: String,
    pub tally: Tally,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.kinds.is_empty()
    }
}

pub fn shorten(s: &str) -> String {
    shorten_to(s, 60)
}

/// `s` escaped, cut to about `max` characters (the length says how long).
pub fn shorten_to(s: &str, max: usize) -> String {
    let chars = s.chars().count();
    if chars <= max {
        s.escape_debug().to_string()
    } else {
        let head: String = s.chars().take(max.saturating_sub(36).max(24)).collect();
        format!("{}…<{chars} chars>", head.escape_debug())
    }
}

fn show_cell(v: &Option<String>) -> String {
    match v {
        None => "NULL".to_string(),
        Some(s) => format!("'{}'", shorten(s)),
    }
}

pub fn show_row(row: &[Option<String>]) -> String {
    let cells: Vec<String> = row.iter().map(show_cell).collect();
    format!("({})", cells.join(", "))
}

pub fn show_values(row: &[V]) -> String {
    let cells: Vec<String> = row
        .iter()
        .map(|v| match v {
            V::Int(i) => i.to_string(),
            V::Text(s) => format!("'{}'", shorten(s)),
            V::Null => "NULL".to_string(),
        })
        .collect();
    format!("({})", cells.join(", "))
}

/// The id column of a returned row, as its relation to the caller's own
/// row (ids are handed out in arrival order, so only that relation can be
/// compared).
fn relate_id(v: &Option<String>, own: Option<&String>) -> Option<String> {
    v.as_ref().map(|v| {
        if Some(v) == own {
            "<its own row's id>".to_string()
        } else {
            format!("<not its own row's id: {v}>")
        }
    })
}

/// Compares every caller's outcome, the tables, and coalescing.
pub fn judge(case: &Case, seen: &Seen) -> Verdict {
    let mut kinds = BTreeSet::new();
    let mut lines = Vec::new();
    let mut tally = Tally {
        cases: 1,
        callers: case.burst.len(),
        ..Tally::default()
    };
    let id_at = case.returning.iter().position(|c| c == "id");
    let mut unknown_tags = BTreeSet::new();
    // Nothing of the case was coalesced: every statement ran on its own,
    // concurrently (see `deadlocked` below).
    let all_alone = seen.delta.rows == 0;
    let mut deadlocked = false;
    for (i, (bp, plain)) in seen.batchpool.iter().zip(&seen.plain).enumerate() {
        let tag = i.to_string();
        let mut bad = |kind: String| {
            lines.push(format!(
                "  caller {i} {}:\n      batchpool {bp}\n      plain     {plain}",
                show_values(&case.burst[i])
            ));
            kinds.insert(kind);
        };
        match (bp, plain) {
            (Obs::Err { unknown: true, .. }, _) => {
                tally.unknown += 1;
                unknown_tags.insert(tag.clone());
            }
            (Obs::Err { code: a, .. }, Obs::Err { code: b, .. }) => {
                tally.failed += 1;
                if a != b {
                    bad(format!(
                        "error code differs ({} vs plain {})",
                        a.as_deref().unwrap_or("none"),
                        b.as_deref().unwrap_or("none")
                    ));
                }
            }
            // Statements that ran on their own, side by side on the pool's
            // connections, may deadlock each other (MariaDB's REPLACE on a
            // table of two unique keys): the server's answer to concurrent
            // statements, which the one-by-one run cannot give and the pool
            // does not cause. Counted, and the case's tables are not
            // compared (that caller's statement did not run).
            (
                Obs::Err {
                    code: Some(code), ..
                },
                Obs::Ok { .. },
            ) if all_alone && matches!(code.as_str(), "1213" | "40P01") => {
                tally.failed += 1;
                tally.deadlocks += 1;
                deadlocked = true;
            }
            (Obs::Err { code, .. }, Obs::Ok { .. }) => {
                tally.failed += 1;
                bad(format!(
                    "innocent caller failed ({})",
                    code.as_deref().unwrap_or("no code")
                ));
            }
            (Obs::Ok { .. }, Obs::Err { code, .. }) => {
                tally.ok += 1;
                bad(format!(
                    "accepted a row the single statement rejects ({})",
                    code.as_deref().unwrap_or("no code")
                ));
            }
            (
                Obs::Ok {
                    affected: a_n,
                    exact,
                    id: a_id,
                    returned: a_ret,
                },
                Obs::Ok {
                    affected: b_n,
                    id: b_id,
                    returned: b_ret,
                    ..
                },
            ) => {
                tally.ok += 1;
                let own_a = seen.ids_batchpool.get(&tag);
                let own_b = seen.ids_plain.get(&tag);
                if !exact {
                    tally.inexact += 1;
                    if a_ret.is_some() || a_id.is_some() {
                        bad("an inexact outcome claims a RETURNING row or an id".to_string());
                    }
                    continue;
                }
                if a_n != b_n {
                    bad(format!("wrong exact rows_affected ({a_n} vs plain {b_n})"));
                }
                let relate = |row: &Option<Vec<Option<String>>>, own: Option<&String>| {
                    row.clone().map(|mut r| {
                        if let Some(at) = id_at {
                            if at < r.len() {
                                r[at] = relate_id(&r[at], own);
                            }
                        }
                        r
                    })
                };
                if relate(a_ret, own_a) != relate(b_ret, own_b) {
                    bad("wrong RETURNING row".to_string());
                }
                if let Some(a) = a_id {
                    let a = relate_id(&Some(a.to_string()), own_a);
                    let b = relate_id(&b_id.map(|b| b.to_string()), own_b);
                    if a != b {
                        bad("wrong last_insert_id".to_string());
                    }
                } else if seen.ids_promised && b_id.is_some() {
                    bad("last_insert_id withheld".to_string());
                }
            }
        }
    }
    let shown = 12;
    if lines.len() > shown {
        let more = lines.len() - shown;
        lines.truncate(shown);
        lines.push(format!("  ... and {more} more callers"));
    }

    for t in seen.tables.iter().filter(|_| !deadlocked) {
        let keep = |rows: &Rows| -> Counts {
            let mut m = BTreeMap::new();
            for r in rows {
                let unknown = r
                    .first()
                    .and_then(|c| c.as_ref())
                    .is_some_and(|tag| unknown_tags.contains(tag));
                if !unknown {
                    *m.entry(r.clone()).or_insert(0) += 1;
                }
            }
            m
        };
        if t.what == "statement-trigger rows" && !unknown_tags.is_empty() {
            continue;
        }
        let (a, b) = (keep(&t.batchpool), keep(&t.plain));
        if a != b {
            kinds.insert(format!("{} differ", t.what));
            let diff = |x: &Counts, y: &Counts| -> Vec<String> {
                x.iter()
                    .filter_map(|(row, n)| {
                        let extra = n - y.get(row).copied().unwrap_or(0);
                        (extra > 0).then(|| format!("{}{}", show_row(row), times(extra)))
                    })
                    .collect()
            };
            let (only_a, only_b) = (diff(&a, &b), diff(&b, &a));
            lines.push(format!(
                "  {}: {} rows via batchpool, {} via the plain driver",
                t.what,
                t.batchpool.len(),
                t.plain.len()
            ));
            for (side, rows) in [("only via batchpool", only_a), ("only via plain", only_b)] {
                if rows.is_empty() {
                    continue;
                }
                let n = rows.len();
                let head: Vec<String> = rows.into_iter().take(8).collect();
                let more = if n > 8 {
                    format!(" ... {} more", n - 8)
                } else {
                    String::new()
                };
                lines.push(format!("    {side}: {}{more}", head.join(" ")));
            }
        }
    }

    if !seen.plain.is_empty() && seen.plain.iter().all(|o| matches!(o, Obs::Err { .. })) {
        tally.all_failed_cases += 1;
    }
    let d = seen.delta;
    tally.pipelined += d.pipelined;
    tally.bulk += d.bulk;
    tally.statements += d.statements;
    if d.rows > d.batches {
        tally.coalesced_cases += 1;
    }
    if case.must_coalesce() {
        tally.plain_rows += d.rows;
        tally.plain_batches += d.batches;
        if case.start == Start::Held && case.burst.len() > 1 && d.rows <= d.batches {
            kinds.insert("plain INSERT not coalesced".to_string());
            lines.push(format!(
                "  no multi-row statement for a plain INSERT into a table without triggers \
                 ({} rows in {} flushes)",
                d.rows, d.batches
            ));
        }
    }

    let report = if kinds.is_empty() {
        String::new()
    } else {
        describe(case, seen, &kinds, &lines)
    };
    Verdict {
        name: case.name.clone(),
        kinds,
        report,
        tally,
    }
}

fn times(n: i64) -> String {
    if n == 1 {
        String::new()
    } else {
        format!(" ×{n}")
    }
}

fn describe(case: &Case, seen: &Seen, kinds: &BTreeSet<String>, lines: &[String]) -> String {
    let mut s = String::new();
    let server = match case.flavor {
        Flavor::Pg => "PostgreSQL",
        Flavor::My => "MariaDB",
    };
    let _ = writeln!(
        s,
        "case `{}` ({server}): {} callers, {} rows before, pool of {}, start {:?}{}",
        case.name,
        case.burst.len(),
        case.pre.len(),
        case.pool_size,
        case.start,
        if case.strict {
            ""
        } else {
            ", sql_mode = '' on every connection"
        }
    );
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    let _ = writeln!(s, "  differs: {}", kinds.join("; "));
    for d in &seen.ddl {
        let _ = writeln!(s, "  ddl: {d}");
    }
    let _ = writeln!(s, "  statement: {}", seen.sql);
    let d = seen.delta;
    let _ = writeln!(
        s,
        "  pool stats: {} rows in {} flushes, {} statements ({} isolation splits), {} passed through; {:.2?}",
        d.rows, d.batches, d.statements, d.split, d.passthrough, seen.elapsed
    );
    for l in lines {
        let _ = writeln!(s, "{l}");
    }
    s
}

/// Fails the test with a summary when any case differed; prints the tally.
/// `limit_inexact`: also fail when more than a quarter of the successful
/// outcomes were inexact (for the random runs).
pub fn conclude(test: &str, verdicts: &[Verdict], elapsed: Duration, limit_inexact: bool) -> Tally {
    let mut tally = Tally::default();
    for v in verdicts {
        tally.add(&v.tally);
    }
    let failed: Vec<&Verdict> = verdicts.iter().filter(|v| !v.passed()).collect();
    println!(
        "{test}: {} cases, {} callers in {:.1?}: {} Ok ({} inexact), {} errors, {} outcome unknown, \
         {} deadlocked among statements run on their own; \
         {} of {} cases sent multi-row statements ({} cases where every row fails alone); \
         plain INSERTs {} rows in {} flushes; {} pipelined statements; {} bulk statements; \
         {} cases differ",
        tally.cases,
        tally.callers,
        elapsed,
        tally.ok,
        tally.inexact,
        tally.failed,
        tally.unknown,
        tally.deadlocks,
        tally.coalesced_cases,
        tally.cases,
        tally.all_failed_cases,
        tally.plain_rows,
        tally.plain_batches,
        tally.pipelined,
        tally.bulk,
        failed.len()
    );
    let mut problems = String::new();
    if !failed.is_empty() {
        let mut by_kind: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for v in &failed {
            for k in &v.kinds {
                by_kind.entry(k).or_default().push(&v.name);
            }
        }
        let _ = writeln!(
            problems,
            "{} of {} cases: batchpool differs from the plain driver",
            failed.len(),
            verdicts.len()
        );
        for (k, names) in &by_kind {
            let _ = writeln!(problems, "  {k}: {}", names.join(", "));
        }
        // One full report per kind of difference, at most six.
        let mut shown = BTreeSet::new();
        for v in &failed {
            if shown.len() >= 6 {
                break;
            }
            if v.kinds.iter().any(|k| !shown.contains(k)) {
                shown.extend(v.kinds.iter().cloned());
                let _ = writeln!(problems, "\n{}", v.report);
            }
        }
        if failed.iter().any(|v| v.name.starts_with("seed ")) {
            let _ = writeln!(
                problems,
                "reproduce a random case with ORACLE_SEEDS=<seed> cargo test --test oracle {test}"
            );
        }
    }
    // An oracle that passes because nothing was coalesced, or because every
    // outcome was inexact, proves nothing.
    if tally.plain_rows > 0 && tally.plain_rows <= tally.plain_batches {
        let _ = writeln!(
            problems,
            "plain INSERTs were never coalesced ({} rows in {} flushes)",
            tally.plain_rows, tally.plain_batches
        );
    }
    if limit_inexact && tally.inexact * 4 > tally.ok {
        let _ = writeln!(
            problems,
            "{} of {} successful outcomes were inexact (more than a quarter)",
            tally.inexact, tally.ok
        );
    }
    assert!(problems.is_empty(), "{test}:\n{problems}");
    tally
}
