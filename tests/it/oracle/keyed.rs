//! Keyed cases of the oracle: a table with a unique key, rows already in
//! it, and a burst of keyed reads, updates and deletes (`SELECT ... WHERE
//! k = $1`, `UPDATE ... SET ... WHERE k = $n`, `DELETE ... WHERE k = $1`)
//! from many callers at once; the model, its seeded generator, the fixed
//! cases and the judge (see the module docs of `oracle` for the rules).

// Built with one backend feature, the other half's helpers go unused.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use super::model::{
    Delta, Flavor, Rng, Start, Table, Tally, V, Verdict, base36, mixed_case, shorten_to, show_row,
    show_values,
};

/// The type of a key column (rendered by each half: on MariaDB the
/// loose types are a column with a case-insensitive collation, which every
/// MariaDB text column has there anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KTy {
    Int,
    BigInt,
    Text,
    Varchar(usize),
    /// PostgreSQL `uuid`, MariaDB `UUID`; spelled in either case.
    Uuid,
    /// PostgreSQL `citext`.
    Citext,
    /// PostgreSQL `numeric`, MariaDB `DECIMAL(14,4)`; spelled with more or
    /// fewer trailing zeros.
    Numeric,
    /// A uuid in a text column (PostgreSQL `text`, MariaDB `CHAR(36)`):
    /// its spellings in either case are other keys on PostgreSQL.
    UuidText,
    /// Blank-padded; spelled with trailing blanks.
    Char(usize),
    /// PostgreSQL `text COLLATE ci`, a non-deterministic ICU collation
    /// (`und-u-ks-level2`: case-insensitive, `ß` = `ss`); MariaDB
    /// `utf8mb4_unicode_ci`.
    Ci,
}

impl KTy {
    /// Every key type the generator picks from.
    pub const ALL: [KTy; 10] = [
        KTy::Int,
        KTy::BigInt,
        KTy::Text,
        KTy::Varchar(12),
        KTy::Uuid,
        KTy::UuidText,
        KTy::Citext,
        KTy::Numeric,
        KTy::Char(8),
        KTy::Ci,
    ];

    /// Whether PostgreSQL's equality of this type is equality of the
    /// bytes bound: the facts under which batchpool coalesces writes by
    /// such a key.
    pub fn byte_stable(self) -> bool {
        matches!(
            self,
            KTy::Int | KTy::BigInt | KTy::Text | KTy::Varchar(_) | KTy::Uuid | KTy::UuidText
        )
    }
}

/// What a statement text does; every caller of one key group (below) that
/// writes does the same thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `SELECT`.
    Read,
    /// `UPDATE ... SET n = n + $a`: increments commute.
    Add,
    /// `UPDATE ... SET n = n / $d` (MariaDB `DIV`): divisions of a
    /// non-negative integer by positive ones commute; 0 fails where a row
    /// exists.
    Div,
    /// `UPDATE ... SET v = $1, w = $2`: one caller per key.
    Set,
    /// `DELETE`.
    Delete,
}

/// Which method of the pool (and of the plain driver) a caller uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// `query`: every row.
    Query,
    /// `query_opt`.
    Opt,
    /// `query_one` (no row: the row-count error).
    One,
    /// `execute`: the count.
    Execute,
}

/// A statement text. `sql` is a template: `{t}` the table, `{1}`, `{2}`,
/// ... the caller's parameters in the order they are bound, `{div}` the
/// server's integer division.
#[derive(Clone, Debug)]
pub struct KText {
    pub role: Role,
    pub sql: String,
    /// A read: the select list holds a column never NULL in a row (a key
    /// column, `*`, or the `NOT NULL` column `n`).
    pub witness: bool,
    /// A write whose placeholders number the key parts first and its own
    /// values after them (`SET n = n + {2} WHERE k1 = {1}`): its callers'
    /// parameters are the key, then the values.
    pub keys_first: bool,
}

/// One caller: which text, how it is called, its parameters (for `{1}`,
/// `{2}`, ...), and its key group.
#[derive(Clone, Debug)]
pub struct KCall {
    pub text: usize,
    pub how: How,
    pub params: Vec<V>,
    pub group: usize,
}

/// A row before the burst: the key columns, `n`, `v`, `w`.
#[derive(Clone, Debug)]
pub struct KRow {
    pub key: Vec<V>,
    pub n: i64,
    pub v: Option<String>,
    pub w: i64,
}

/// The callers naming one key, by the coarsest equality of both servers
/// (case, `ß` / `ss`, trailing blanks, numeric scale, uuid spelling): each
/// key the server tells apart lies within one group. Callers with a NULL
/// key part form groups of their own.
#[derive(Clone, Debug)]
pub struct Group {
    /// What its writers do (`Read`: nobody writes it).
    pub role: Role,
    /// A row of the group is in the table before the burst.
    pub exists: bool,
    /// A NULL key part (matches nothing).
    pub null: bool,
}

/// One keyed case: the table `(k1 [, k2], n bigint NOT NULL, v
/// varchar(10), w integer NOT NULL CHECK (w BETWEEN 0 AND 100))` with a
/// unique key on the key columns, its rows, the texts and the callers.
#[derive(Clone, Debug)]
pub struct KCase {
    pub name: String,
    pub flavor: Flavor,
    /// The key columns `k1`, `k2`, ...
    pub keys: Vec<KTy>,
    /// `PRIMARY KEY`; otherwise `UNIQUE` on nullable columns (rows with a
    /// NULL key part are in the table, matched by nobody).
    pub primary: bool,
    /// Row triggers `AFTER UPDATE OR DELETE` write `(op, key)` to
    /// `<t>_log`: then writes are not coalesced.
    pub log: bool,
    pub pre: Vec<KRow>,
    pub texts: Vec<KText>,
    pub calls: Vec<KCall>,
    pub groups: Vec<Group>,
    pub start: Start,
    pub pool_size: usize,
    /// The pool's statement cap (`BatchConfig::max_rows`).
    pub max_rows: usize,
    /// `false`: coalescing off, every statement on its own.
    pub coalesce: bool,
}

impl KCase {
    /// The key column names.
    pub fn key_names(&self) -> Vec<String> {
        (1..=self.keys.len()).map(|i| format!("k{i}")).collect()
    }

    /// Whether the table facts let batchpool coalesce text `t`: on
    /// PostgreSQL, a read with a witness column, a write by a byte-stable
    /// key of a table without triggers; on MariaDB, every read (each
    /// caller's own statement is a branch of the coalesced one), and a
    /// write of a table without triggers, an update only by a key of
    /// integer, decimal or character columns (not `UUID`).
    pub fn coalescible(&self, t: usize) -> bool {
        let text = &self.texts[t];
        self.coalesce
            && match (self.flavor, text.role) {
                (Flavor::Pg, Role::Read) => text.witness,
                (Flavor::Pg, _) => !self.log && self.keys.iter().all(|k| k.byte_stable()),
                (Flavor::My, Role::Read) => true,
                // Not where a trigger writes the log.
                (Flavor::My, Role::Delete) => !self.log,
                (Flavor::My, _) => !self.log && !self.keys.contains(&KTy::Uuid),
            }
    }
}

/// What the generator varies, fixed for the named cases.
#[derive(Clone, Debug)]
pub struct KSpec {
    /// See [`KCase`].
    pub keys: Vec<KTy>,
    pub primary: bool,
    pub log: bool,
    /// Weights of the groups' roles: read-only, add, div, set, delete.
    pub weights: [usize; 5],
    /// Percent of the groups with a row before the burst.
    pub exists: usize,
    /// Most adders / dividers / deleters of one group.
    pub most: usize,
    /// Percent of the callers of a failing value (division by zero, a
    /// CHECK failure, a NULL into `w`, a too-long `v`, a bigint overflow).
    pub faults: usize,
}

impl KSpec {
    /// A spec drawn from `r`.
    fn random(r: &mut Rng) -> KSpec {
        let arity = if r.percent(25) { 2 } else { 1 };
        KSpec {
            keys: (0..arity).map(|_| r.pick(&KTy::ALL)).collect(),
            primary: r.percent(60),
            log: r.percent(20),
            weights: [30, 22, 10, 18, 20],
            exists: 70,
            most: r.range(2, 5) as usize,
            faults: r.pick(&[4, 10, 20]),
        }
    }
}

/// A canonical key part of group `g`: the value the generator spells in
/// several ways.
#[derive(Clone, Debug)]
enum Canon {
    Int(i64),
    /// Lower-case ASCII letters and digits (a text-like key).
    Text(String),
    /// 32 lower-case hex digits.
    Uuid(String),
    /// Thousandths.
    Milli(i64),
}

/// The key part of type `ty` of group `g`: distinct from every other
/// group's under any server's equality (`pg`: PostgreSQL's case, where a
/// text key may hold `ss`).
fn canon(r: &mut Rng, ty: KTy, g: usize, pg: bool) -> Canon {
    match ty {
        KTy::Int => Canon::Int(g as i64 * 7 - 3_000),
        KTy::BigInt => Canon::Int(if g % 2 == 0 {
            5_000_000_000 + g as i64 * 13
        } else {
            -(g as i64) * 11
        }),
        KTy::Uuid | KTy::UuidText => Canon::Uuid(format!(
            "{g:08x}{:04x}4{:03x}8{:03x}{:012x}",
            r.below(0x1_0000),
            r.below(0x1000),
            r.below(0x1000),
            r.next() & 0xffff_ffff_ffff
        )),
        KTy::Numeric => Canon::Milli(g as i64 * 1_000 + r.pick(&[0, 500, 250, 125, 1, 30])),
        KTy::Text | KTy::Varchar(_) | KTy::Citext | KTy::Char(_) | KTy::Ci => {
            let max: usize = match ty {
                KTy::Char(n) | KTy::Varchar(n) => n.min(10),
                _ => 10,
            };
            // `k` and two base-36 digits of the group: no two groups'
            // keys are alike under any server's equality.
            let mut s = format!("k{}", base36(g));
            // PostgreSQL: some keys hold `ss`, spelled `ß` by some callers.
            if pg && max - s.len() >= 2 && r.percent(20) {
                s.push_str("ss");
            }
            let room = max - s.len();
            let len = r.below(room + 1);
            s.push_str(&r.alnum(len));
            Canon::Text(s)
        }
    }
}

/// One spelling of key part `c` of type `ty`; `stored`: for a row before
/// the burst (no trailing blanks, which a text key would keep).
fn spell(r: &mut Rng, ty: KTy, c: &Canon, pg: bool, stored: bool) -> V {
    match c {
        Canon::Int(i) => V::Int(*i),
        Canon::Uuid(hex) => {
            let s = format!(
                "{}-{}-{}-{}-{}",
                &hex[..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..]
            );
            V::Text(if r.percent(40) { s.to_uppercase() } else { s })
        }
        Canon::Milli(m) => {
            let (int, frac) = (m / 1_000, m % 1_000);
            let mut s = int.to_string();
            let digits = format!("{frac:03}");
            let digits = digits.trim_end_matches('0');
            let extra = r.below(3);
            if !digits.is_empty() || extra > 0 {
                s.push('.');
                s.push_str(digits);
                s.push_str(&"0".repeat(extra));
            }
            V::Text(s)
        }
        Canon::Text(s) => {
            let mut s = if r.percent(40) {
                mixed_case(r, s)
            } else {
                s.clone()
            };
            if pg && r.percent(30) {
                if let Some(at) = s.to_lowercase().find("ss") {
                    s.replace_range(at..at + 2, if r.percent(50) { "ß" } else { "ẞ" });
                }
            }
            let blanks = match ty {
                _ if stored => 0,
                KTy::Char(_) if r.percent(40) => r.range(1, 3) as usize,
                _ if r.percent(8) => 1,
                _ => 0,
            };
            s.push_str(&" ".repeat(blanks));
            V::Text(s)
        }
    }
}

/// The key conditions of a text: `k1 = {p} AND k2 = {p+1}`, each column
/// qualified by `qual`, in reverse order when `swapped`, written
/// `{p} = k1` when `flipped`.
fn conditions(keys: &[KTy], first: usize, qual: &str, swapped: bool, flipped: bool) -> String {
    let mut parts: Vec<String> = (0..keys.len())
        .map(|i| {
            let (col, p) = (format!("{qual}k{}", i + 1), first + i);
            if flipped {
                format!("{{{p}}} = {col}")
            } else {
                format!("{col} = {{{p}}}")
            }
        })
        .collect();
    if swapped {
        parts.reverse();
    }
    parts.join(" AND ")
}

/// The texts of a case with key columns `keys`: the reads chosen from `r`,
/// then every kind of write.
fn texts(r: &mut Rng, keys: &[KTy]) -> Vec<KText> {
    let arity = keys.len();
    let names: Vec<String> = (1..=arity).map(|i| format!("k{i}")).collect();
    let swapped = arity > 1;
    let mut out = Vec::new();
    let read = |sql: String, witness: bool| KText {
        role: Role::Read,
        sql,
        witness,
        keys_first: false,
    };
    out.push(if r.percent(50) {
        read(
            format!(
                "SELECT * FROM {{t}} WHERE {}",
                conditions(keys, 1, "", false, false)
            ),
            true,
        )
    } else {
        read(
            format!(
                "SELECT {}, n, v, w FROM {{t}} WHERE {}",
                names.join(", "),
                conditions(keys, 1, "", false, false)
            ),
            true,
        )
    });
    if r.percent(50) {
        out.push(read(
            format!(
                "SELECT x.n, x.v AS value, x.k1 FROM {{t}} AS x WHERE {}",
                conditions(keys, 1, "x.", swapped, false)
            ),
            true,
        ));
    }
    if r.percent(50) {
        out.push(read(
            format!(
                "SELECT n, w + 1 AS w1, v FROM {{t}} WHERE {}",
                conditions(keys, 1, "", false, true)
            ),
            true,
        ));
    }
    if r.percent(20) {
        // No column of the list is known to be non-NULL in a row that
        // exists: PostgreSQL runs it on its own.
        out.push(read(
            format!(
                "SELECT v, n * 2 AS n2 FROM {{t}} WHERE {}",
                conditions(keys, 1, "", false, false)
            ),
            false,
        ));
    }
    let write = |role: Role, sql: String| KText {
        role,
        sql,
        witness: false,
        keys_first: false,
    };
    out.push(write(
        Role::Add,
        format!(
            "UPDATE {{t}} SET n = n + {{1}} WHERE {}",
            conditions(keys, 2, "", false, false)
        ),
    ));
    if r.percent(50) {
        out.push(KText {
            keys_first: true,
            ..write(
                Role::Add,
                format!(
                    "UPDATE {{t}} SET n = n + {{{}}} WHERE {}",
                    arity + 1,
                    conditions(keys, 1, "", swapped, false)
                ),
            )
        });
    }
    if r.percent(40) {
        out.push(write(
            Role::Add,
            format!(
                "UPDATE {{t}} AS u SET n = u.n + {{1}} WHERE {}",
                conditions(keys, 2, "u.", false, true)
            ),
        ));
    }
    out.push(write(
        Role::Div,
        format!(
            "UPDATE {{t}} SET n = n {{div}} {{1}} WHERE {}",
            conditions(keys, 2, "", false, false)
        ),
    ));
    out.push(write(
        Role::Set,
        format!(
            "UPDATE {{t}} SET v = {{1}}, w = {{2}} WHERE {}",
            conditions(keys, 3, "", swapped, false)
        ),
    ));
    // The same assignments in the other order: one family with the text
    // above, whose callers share its statements.
    out.push(write(
        Role::Set,
        format!(
            "UPDATE {{t}} SET w = {{2}}, v = {{1}} WHERE {}",
            conditions(keys, 3, "", swapped, false)
        ),
    ));
    out.push(write(
        Role::Delete,
        format!(
            "DELETE FROM {{t}} WHERE {}",
            conditions(keys, 1, "", false, false)
        ),
    ));
    out
}

/// The parameters of a write of `role` other than the key, and whether
/// they make the statement fail where a row exists.
fn write_values(r: &mut Rng, role: Role, faults: usize) -> Vec<V> {
    let fault = r.percent(faults);
    match role {
        // An overflow fails whatever the other (small, positive)
        // increments of the key did before; 0 changes nothing (MariaDB
        // counts changed rows: 0 for every order).
        Role::Add if fault => vec![V::Int(i64::MAX - 1_000)],
        Role::Add => vec![V::Int(if r.percent(5) { 0 } else { r.range(1, 9) })],
        Role::Div if fault => vec![V::Int(0)],
        Role::Div => vec![V::Int(r.range(1, 4))],
        Role::Set => {
            let v = if r.percent(8) {
                V::Null
            } else {
                let len = r.range(1, 10) as usize;
                V::Text(r.alnum(len))
            };
            let w = V::Int(r.range(0, 100));
            if !fault {
                return vec![v, w];
            }
            match r.below(3) {
                0 => vec![v, V::Int(r.range(101, 130))],
                1 => vec![v, V::Null],
                _ => {
                    let len = r.range(11, 14) as usize;
                    vec![V::Text(r.alnum(len)), w]
                }
            }
        }
        Role::Read | Role::Delete => Vec::new(),
    }
}

/// One keyed case from `seed` (`spec`: what to keep fixed; `None`: drawn
/// from the seed too). Bursts are built so that every caller's outcome is
/// one the rules of the module docs can judge whatever order the server
/// sees the callers in: a key group's writers all do one commutative thing
/// (increments, divisions, deletes) or are one setter; readers only on
/// groups with at most one value-changing writer (or deleters).
pub fn generate_keyed(flavor: Flavor, seed: u64, spec: Option<KSpec>) -> KCase {
    let pg = flavor == Flavor::Pg;
    let mut r = Rng::new(seed);
    let spec = spec.unwrap_or_else(|| KSpec::random(&mut r));
    let held = r.percent(50);
    let start = match std::env::var("ORACLE_START").as_deref() {
        Ok("held") => Start::Held,
        Ok("gate") => Start::Gate,
        _ if held => Start::Held,
        _ => Start::Gate,
    };
    let pool_size = r.range(2, 4) as usize;
    let max_rows = if r.percent(30) { 40 } else { 1_000 };
    let texts = texts(&mut r, &spec.keys);
    let of_role = |role: Role| -> Vec<usize> {
        (0..texts.len())
            .filter(|&t| texts[t].role == role)
            .collect()
    };
    let reads = of_role(Role::Read);
    let roles = [Role::Read, Role::Add, Role::Div, Role::Set, Role::Delete];
    let total: usize = spec.weights.iter().sum();
    let pick_role = |r: &mut Rng| {
        let mut at = r.below(total);
        for (role, w) in roles.iter().zip(spec.weights) {
            if at < w {
                return *role;
            }
            at -= w;
        }
        Role::Read
    };

    let target = r.range(600, 900) as usize;
    let mut pre = Vec::new();
    let mut calls: Vec<KCall> = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let hows = [How::Query, How::Opt, How::One, How::Execute];
    while calls.len() < target {
        let g = groups.len();
        let key: Vec<Canon> = spec
            .keys
            .iter()
            .map(|&ty| canon(&mut r, ty, g, pg))
            .collect();
        let spelled = |r: &mut Rng| -> Vec<V> {
            spec.keys
                .iter()
                .zip(&key)
                .map(|(&ty, c)| spell(r, ty, c, pg, false))
                .collect()
        };
        let call = |r: &mut Rng, role: Role, key: Vec<V>| {
            let text = r.pick(&of_role(role));
            let how = if role == Role::Read {
                r.pick(&hows)
            } else {
                How::Execute
            };
            let values = write_values(r, role, spec.faults);
            let params = if texts[text].keys_first {
                key.into_iter().chain(values).collect()
            } else {
                values.into_iter().chain(key).collect()
            };
            KCall {
                text,
                how,
                params,
                group: g,
            }
        };
        if r.percent(2) {
            // A NULL key part: a group of one caller, matching nothing.
            let role = pick_role(&mut r);
            let mut k = spelled(&mut r);
            let at = r.below(k.len());
            k[at] = V::Null;
            calls.push(call(&mut r, role, k));
            groups.push(Group {
                role,
                exists: false,
                null: true,
            });
            continue;
        }
        let exists = r.percent(spec.exists);
        if exists {
            let key = spec
                .keys
                .iter()
                .zip(&key)
                .map(|(&ty, c)| spell(&mut r, ty, c, pg, true))
                .collect();
            let v = if r.percent(15) {
                None
            } else {
                let len = r.range(1, 10) as usize;
                Some(r.alnum(len))
            };
            pre.push(KRow {
                key,
                n: r.range(1_000_000, 9_000_000),
                v,
                w: r.range(0, 100),
            });
        }
        let role = pick_role(&mut r);
        let writers = match role {
            Role::Read => 0,
            Role::Set => 1,
            _ => r.range(1, spec.most as i64) as usize,
        };
        let readers = match role {
            Role::Read => r.range(1, 4) as usize,
            Role::Set | Role::Delete => r.below(3),
            _ if writers == 1 => r.below(3),
            _ => 0,
        };
        for _ in 0..writers {
            let k = spelled(&mut r);
            calls.push(call(&mut r, role, k));
        }
        for _ in 0..readers {
            let k = spelled(&mut r);
            let mut c = call(&mut r, Role::Read, k);
            c.text = r.pick(&reads);
            calls.push(c);
        }
        groups.push(Group {
            role,
            exists,
            null: false,
        });
    }
    // Rows with a NULL key part, which no caller's key matches.
    if !spec.primary {
        for j in 0..r.range(0, 3) {
            let g = groups.len() + j as usize;
            let mut key: Vec<V> = spec
                .keys
                .iter()
                .map(|&ty| {
                    let c = canon(&mut r, ty, g, pg);
                    spell(&mut r, ty, &c, pg, true)
                })
                .collect();
            let at = r.below(key.len());
            key[at] = V::Null;
            pre.push(KRow {
                key,
                n: 1_000_000,
                v: None,
                w: 50,
            });
        }
    }
    // The callers in a seeded order (the plain driver's order).
    for i in (1..calls.len()).rev() {
        let j = r.below(i + 1);
        calls.swap(i, j);
    }
    KCase {
        name: format!("seed {seed:#x} (keyed)"),
        flavor,
        keys: spec.keys,
        primary: spec.primary,
        log: spec.log,
        pre,
        texts,
        calls,
        groups,
        start,
        pool_size,
        max_rows,
        coalesce: true,
    }
}

/// The fixed keyed cases: each key type of interest (and a composite key,
/// triggers, failure-dense and hot-key bursts), with a seed of its own,
/// queued behind held connections so they coalesce whatever the timing.
pub fn fixed_keyed(flavor: Flavor) -> Vec<KCase> {
    let spec = |keys: Vec<KTy>, primary: bool, log: bool| KSpec {
        keys,
        primary,
        log,
        weights: [30, 22, 10, 18, 20],
        exists: 70,
        most: 3,
        faults: 10,
    };
    let hot = KSpec {
        weights: [10, 60, 10, 0, 20],
        exists: 90,
        most: 12,
        faults: 2,
        ..spec(vec![KTy::BigInt], true, false)
    };
    let failing = KSpec {
        weights: [20, 20, 30, 30, 0],
        faults: 45,
        ..spec(vec![KTy::Text], true, false)
    };
    // Setters only, half of them failing, half the keys of no row: a
    // too-long `v` fails the single statement even where no row matches
    // (PostgreSQL folds the parameter's length check into a fresh
    // statement's plan).
    let too_long = KSpec {
        weights: [0, 0, 0, 1, 0],
        exists: 50,
        faults: 50,
        ..spec(vec![KTy::BigInt], true, false)
    };
    let named: Vec<(&str, KSpec, u64)> = vec![
        ("bigint key, hot keys", hot, 0x4b01),
        (
            "bigint key, setters, values failing for keys of no row",
            too_long,
            0x4b0c,
        ),
        ("text key, failure-dense writes", failing, 0x4b02),
        ("uuid key", spec(vec![KTy::Uuid], true, false), 0x4b03),
        ("citext key", spec(vec![KTy::Citext], true, false), 0x4b04),
        (
            "ICU ci collation key",
            spec(vec![KTy::Ci], false, false),
            0x4b05,
        ),
        ("numeric key", spec(vec![KTy::Numeric], true, false), 0x4b06),
        (
            "uuid in a text key",
            spec(vec![KTy::UuidText], true, false),
            0x4b0b,
        ),
        (
            "char(8) key",
            spec(vec![KTy::Char(8)], false, false),
            0x4b07,
        ),
        (
            "composite (integer, varchar) key",
            spec(vec![KTy::Int, KTy::Varchar(12)], true, false),
            0x4b08,
        ),
        (
            "bigint key, AFTER UPDATE OR DELETE trigger into a log",
            spec(vec![KTy::BigInt], true, true),
            0x4b09,
        ),
        (
            "composite (citext, bigint) key, trigger",
            spec(vec![KTy::Citext, KTy::BigInt], false, true),
            0x4b0a,
        ),
    ];
    named
        .into_iter()
        .map(|(name, spec, seed)| {
            let mut c = generate_keyed(flavor, seed, Some(spec));
            c.name = format!("{name} (keyed seed {seed:#x})");
            c.start = Start::Held;
            c
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Observations and the judge.

/// One keyed caller's outcome.
#[derive(Clone, Debug)]
pub enum KObs {
    /// `query`, `query_opt`, `query_one`: the rows, every column as text.
    Rows(Vec<Vec<Option<String>>>),
    /// `query_one` without a row (the row-count error).
    NoRow,
    /// `execute`.
    Count { n: u64, exact: bool },
    Err {
        /// SQLSTATE / MariaDB error number; `None` for a client-side error.
        code: Option<String>,
        unknown: bool,
        message: String,
    },
}

impl KObs {
    /// The outcome as compared (an error by its code alone), sortable.
    pub fn key(&self) -> String {
        match self {
            KObs::Rows(rows) => {
                let mut shown: Vec<String> = rows.iter().map(|r| show_row(r)).collect();
                shown.sort();
                format!("rows [{}]", shown.join(", "))
            }
            KObs::NoRow => "no row".to_string(),
            KObs::Count { n, exact } => {
                format!("count {n}{}", if *exact { "" } else { " INEXACT" })
            }
            KObs::Err { code, unknown, .. } => format!(
                "error {}{}",
                code.as_deref().unwrap_or("without a code"),
                if *unknown { " OUTCOME UNKNOWN" } else { "" }
            ),
        }
    }

    /// Whether it is an error.
    pub fn is_err(&self) -> bool {
        matches!(self, KObs::Err { .. })
    }
}

impl std::fmt::Display for KObs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KObs::Err { message, .. } => {
                write!(f, "{}: {}", self.key(), shorten_to(message, 160))
            }
            _ => f.write_str(&self.key()),
        }
    }
}

/// Everything one keyed case produced.
pub struct KSeen {
    /// Table A's DDL and its texts as run by the pool.
    pub ddl: Vec<String>,
    pub texts: Vec<String>,
    /// Per caller: through batchpool.
    pub pool: Vec<KObs>,
    /// Per caller: through the plain driver; a reader's after every write.
    pub plain: Vec<KObs>,
    /// Per reader: through the plain driver before any write.
    pub before: Vec<Option<KObs>>,
    /// PostgreSQL, per writer the plain driver failed: the same statement
    /// at the same point, planned generically (`plan_cache_mode =
    /// force_generic_plan`, rolled back).
    pub generic: Vec<Option<KObs>>,
    pub tables: Vec<Table>,
    /// PostgreSQL, per text: `Pool::explain` says it is coalesced.
    pub explained: Option<Vec<bool>>,
    pub delta: Delta,
    pub elapsed: Duration,
}

/// Counts of the keyed cases beyond [`Tally`].
#[derive(Clone, Copy, Debug, Default)]
pub struct KTally {
    /// Calls of texts the table facts let batchpool coalesce.
    pub coalescible: u64,
    /// Calls coalesced (`Stats::rows`).
    pub rows: u64,
    /// Coalesced statements (`Stats::statements`) and flushes.
    pub statements: u64,
    pub batches: u64,
    /// Statements run on their own (`Stats::passthrough`).
    pub passthrough: u64,
    /// Readers that saw the row as it was after the writes (and not as
    /// before).
    pub reads_after: u64,
    /// Writers told what their statement gives planned generically where
    /// a fresh statement fails while it is planned.
    pub generic: u64,
}

impl KTally {
    /// Adds `o`'s counts.
    pub fn add(&mut self, o: &KTally) {
        self.coalescible += o.coalescible;
        self.rows += o.rows;
        self.statements += o.statements;
        self.batches += o.batches;
        self.passthrough += o.passthrough;
        self.reads_after += o.reads_after;
        self.generic += o.generic;
    }
}

/// The deletes of one key group: their outcomes through batchpool and
/// through the plain driver, and the callers.
#[derive(Default)]
struct Deletes {
    ours: Vec<String>,
    plain: Vec<String>,
    callers: Vec<usize>,
}

/// Compares every caller's outcome with the plain driver's by the rules of
/// the module docs, the tables, and (PostgreSQL) coalescing.
pub fn judge_keyed(case: &KCase, seen: &KSeen) -> (Verdict, KTally) {
    let mut kinds = BTreeSet::new();
    let mut lines = Vec::new();
    let mut tally = Tally {
        cases: 1,
        callers: case.calls.len(),
        ..Tally::default()
    };
    let mut ktally = KTally::default();
    let mut bad = |kind: String, line: String| {
        kinds.insert(kind);
        lines.push(line);
    };
    let show_call = |i: usize| {
        let c = &case.calls[i];
        let g = &case.groups[c.group];
        format!(
            "caller {i} ({:?} text {}, {:?}; key group {}, {}) {}",
            case.texts[c.text].role,
            c.text,
            c.how,
            c.group,
            if g.null {
                "a NULL key part"
            } else if g.exists {
                "a row of the group before"
            } else {
                "no row of the group"
            },
            show_values(&c.params)
        )
    };
    // Deleters: per group, the multisets of outcomes.
    let mut deletes: BTreeMap<usize, Deletes> = BTreeMap::new();
    for (i, call) in case.calls.iter().enumerate() {
        let (ours, plain) = (&seen.pool[i], &seen.plain[i]);
        if ours.is_err() {
            tally.failed += 1;
        } else {
            tally.ok += 1;
        }
        match ours {
            KObs::Count { exact: false, .. } => tally.inexact += 1,
            KObs::Err { unknown: true, .. } => tally.unknown += 1,
            _ => {}
        }
        let role = case.texts[call.text].role;
        if role == Role::Read {
            let before = seen.before[i].as_ref().expect("a reader's first read");
            let (now, was) = (ours.key(), before.key());
            if now != was && now != plain.key() {
                bad(
                    "a read is neither the row before the writes nor after them".to_string(),
                    format!(
                        "  {}:\n      batchpool {ours}\n      before    {before}\n      after     {plain}",
                        show_call(i)
                    ),
                );
            } else if now != was {
                ktally.reads_after += 1;
            }
            continue;
        }
        if case.groups[call.group].role == Role::Delete && role == Role::Delete {
            let entry = deletes.entry(call.group).or_default();
            entry.ours.push(ours.key());
            entry.plain.push(plain.key());
            entry.callers.push(i);
            continue;
        }
        if ours.key() == plain.key() {
            continue;
        }
        if seen.generic[i]
            .as_ref()
            .is_some_and(|g| g.key() == ours.key())
        {
            ktally.generic += 1;
            continue;
        }
        let kind = match (ours, plain) {
            (KObs::Err { code: a, .. }, KObs::Err { code: b, .. }) if a != b => format!(
                "error code differs ({} vs plain {})",
                a.as_deref().unwrap_or("none"),
                b.as_deref().unwrap_or("none")
            ),
            (KObs::Err { unknown: true, .. }, _) => "outcome unknown".to_string(),
            (KObs::Err { code, .. }, _) => format!(
                "innocent caller failed ({})",
                code.as_deref().unwrap_or("no code")
            ),
            (_, KObs::Err { code, .. }) => format!(
                "accepted a statement the single statement rejects ({})",
                code.as_deref().unwrap_or("no code")
            ),
            (KObs::Count { exact: false, .. }, _) => "an inexact count".to_string(),
            _ => "wrong count".to_string(),
        };
        bad(
            kind,
            format!(
                "  {}:\n      batchpool {ours}\n      plain     {plain}",
                show_call(i)
            ),
        );
    }
    for (
        group,
        Deletes {
            mut ours,
            mut plain,
            callers,
        },
    ) in deletes
    {
        ours.sort();
        plain.sort();
        if ours != plain {
            let who: Vec<String> = callers.iter().map(|&i| show_call(i)).collect();
            bad(
                "the deletes of one key were counted otherwise".to_string(),
                format!(
                    "  key group {group} (row before: {}), {}:\n      batchpool {ours:?}\n      plain     {plain:?}",
                    case.groups[group].exists,
                    who.join("; ")
                ),
            );
        }
    }
    let shown = 14;
    if lines.len() > shown {
        let more = lines.len() - shown;
        lines.truncate(shown);
        lines.push(format!("  ... and {more} more"));
    }

    for t in &seen.tables {
        let count = |rows: &super::model::Rows| {
            let mut m: BTreeMap<Vec<Option<String>>, i64> = BTreeMap::new();
            for r in rows {
                *m.entry(r.clone()).or_insert(0) += 1;
            }
            m
        };
        let (a, b) = (count(&t.batchpool), count(&t.plain));
        if a != b {
            kinds.insert(format!("{} differ", t.what));
            let diff = |x: &BTreeMap<Vec<Option<String>>, i64>,
                        y: &BTreeMap<Vec<Option<String>>, i64>| {
                x.iter()
                    .filter_map(|(row, n)| {
                        let extra = n - y.get(row).copied().unwrap_or(0);
                        (extra > 0).then(|| format!("{} ×{extra}", show_row(row)))
                    })
                    .take(8)
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            lines.push(format!(
                "  {}: {} rows via batchpool, {} via the plain driver\n    only via batchpool: {}\n    only via plain: {}",
                t.what,
                t.batchpool.len(),
                t.plain.len(),
                diff(&a, &b),
                diff(&b, &a)
            ));
        }
    }

    let d = seen.delta;
    tally.statements += d.statements;
    tally.pipelined += d.pipelined;
    if d.rows > d.batches {
        tally.coalesced_cases += 1;
    }
    ktally.rows = d.rows;
    ktally.statements = d.statements;
    ktally.batches = d.batches;
    ktally.passthrough = d.passthrough;
    if let Some(explained) = &seen.explained {
        for (t, &said) in explained.iter().enumerate() {
            let expected = case.coalescible(t);
            if said != expected {
                kinds.insert("explain() disagrees with the table facts".to_string());
                lines.push(format!(
                    "  text {t}: explain() says coalesced {said}, the table facts say {expected}: {}",
                    seen.texts[t]
                ));
            }
        }
        let coalescible = case
            .calls
            .iter()
            .filter(|c| case.coalescible(c.text))
            .count() as u64;
        ktally.coalescible = coalescible;
        // Every connection held while the callers queue: the callers of a
        // coalescible text go out together, in fewer statements than
        // calls (isolation re-runs included).
        if case.start == Start::Held
            && coalescible >= 20
            && (d.rows * 2 < coalescible || d.statements >= d.rows)
        {
            kinds.insert("keyed calls not coalesced".to_string());
            lines.push(format!(
                "  {coalescible} calls of coalescible texts: {} coalesced, in {} statements",
                d.rows, d.statements
            ));
        }
    }

    let report = if kinds.is_empty() {
        String::new()
    } else {
        describe(case, seen, &kinds, &lines)
    };
    (
        Verdict {
            name: case.name.clone(),
            kinds,
            report,
            tally,
        },
        ktally,
    )
}

/// The report of a keyed case that differed: the case, its DDL and texts,
/// the pool's counters, and `lines` (the differences).
fn describe(case: &KCase, seen: &KSeen, kinds: &BTreeSet<String>, lines: &[String]) -> String {
    let mut s = String::new();
    let server = match case.flavor {
        Flavor::Pg => "PostgreSQL",
        Flavor::My => "MariaDB",
    };
    let _ = writeln!(
        s,
        "case `{}` ({server}): {} callers in {} key groups, {} rows before, pool of {} \
         (max_rows {}), start {:?}",
        case.name,
        case.calls.len(),
        case.groups.len(),
        case.pre.len(),
        case.pool_size,
        case.max_rows,
        case.start
    );
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    let _ = writeln!(s, "  differs: {}", kinds.join("; "));
    for d in &seen.ddl {
        let _ = writeln!(s, "  ddl: {d}");
    }
    for (t, sql) in seen.texts.iter().enumerate() {
        let _ = writeln!(s, "  text {t}: {sql}");
    }
    let d = seen.delta;
    let _ = writeln!(
        s,
        "  pool stats: {} calls coalesced in {} flushes, {} statements ({} isolation splits), \
         {} run on their own; {:.2?}",
        d.rows, d.batches, d.statements, d.split, d.passthrough, seen.elapsed
    );
    for l in lines {
        let _ = writeln!(s, "{l}");
    }
    s
}

/// Prints the keyed counts of a test.
pub fn print_keyed(test: &str, k: &KTally) {
    println!(
        "{test}: {} calls of coalescible texts, {} calls coalesced in {} flushes and {} \
         statements, {} statements on their own; {} reads saw the writes; {} writers got \
         what their statement gives planned generically, where a fresh statement fails",
        k.coalescible, k.rows, k.batches, k.statements, k.passthrough, k.reads_after, k.generic
    );
}

/// `sql` (a template) for table `t`, with `div` for `{div}` and each
/// `{n}` replaced by `place(n)`; also the parameter numbers in the order
/// they appear.
pub fn render(
    sql: &str,
    t: &str,
    div: &str,
    place: impl Fn(usize) -> String,
) -> (String, Vec<usize>) {
    let sql = sql.replace("{t}", t).replace("{div}", div);
    let mut out = String::new();
    let mut order = Vec::new();
    let mut rest = sql.as_str();
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('}').expect("a closing brace") + at;
        let n: usize = rest[at + 1..end].parse().expect("a parameter number");
        out.push_str(&place(n));
        order.push(n);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    (out, order)
}
