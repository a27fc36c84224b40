//! Keyed reads, updates and deletes on PostgreSQL: concurrent callers'
//! `SELECT ... WHERE key = $1`, `UPDATE ... WHERE key = $n` and
//! `DELETE ... WHERE key = $1` of one text, coalesced into one statement,
//! each caller getting exactly what its own statement gets run alone in
//! autocommit: its rows, its count, its error. Each test compares the
//! pool's answers with the plain driver's (tokio-postgres on the server
//! itself, on the same or a twin table) or with a result computed from the
//! calls, then checks that the pool coalesced what it should
//! (`Pool::explain`, `Pool::stats`). Every test runs as `pg::name` and
//! behind each pooler (`pgbouncer::name`, ...).

use std::collections::BTreeMap;

use batchpool::postgres::Pool;
use batchpool::{BatchConfig, Stats};
use bytes::{BufMut, BytesMut};
use futures_util::future::join_all;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Row};

use crate::common::backend::{TestBackend, pg_and_bouncer};

pg_and_bouncer! {
    (flavor = "multi_thread", worker_threads = 2) => [
        point_reads_get_each_callers_own_rows,
        keys_equal_on_the_server_but_not_in_bytes,
        hot_key_updates_add_up,
        duplicate_deletes_remove_each_row_once,
        callers_read_their_own_writes,
        per_row_errors_stay_with_their_callers,
        other_forms_run_on_their_own,
        composite_keys_in_any_order,
        insert_read_delete_read_per_key,
        update_texts_of_one_family_run_together,
    ],
}

/// The backends of this suite: PostgreSQL through `batchpool::postgres::Pool`,
/// directly or through a pooler, with a plain tokio-postgres client on the
/// server itself beside it.
trait PgBackend: TestBackend<Pool = Pool, Admin = Client> {}

impl<B: TestBackend<Pool = Pool, Admin = Client>> PgBackend for B {}

/// A fresh database in which `ddl` ran (on the server itself): a pool of 4
/// connections with `config`, the plain client, and the database's URL.
async fn setup<B: PgBackend>(ddl: &str, config: BatchConfig) -> (Pool, Client, String) {
    let url = B::fresh_db().await;
    let admin = B::admin(&url).await;
    admin
        .batch_execute(ddl)
        .await
        .unwrap_or_else(|e| panic!("{ddl}: {e}"));
    (B::pool(&url, config, 4), admin, url)
}

/// A statement parameter of any type.
type Param = Box<dyn ToSql + Sync + Send>;

/// `params` as the drivers take them.
fn refs(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect()
}

/// A `numeric` parameter written as a non-negative decimal (`"1.00"`), sent
/// with the scale it is written with: `1.0` and `1.00` are different
/// values in bytes and equal on the server.
#[derive(Debug)]
struct Num(&'static str);

impl ToSql for Num {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        // The binary form: digit count, weight, sign, display scale, then
        // base-10000 digits without leading or trailing zero digits.
        let (int, frac) = self.0.split_once('.').unwrap_or((self.0, ""));
        let int = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
        let padded = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
        let mut digits: Vec<i16> = int
            .as_bytes()
            .chunks(4)
            .chain(padded.as_bytes().chunks(4))
            .map(|c| std::str::from_utf8(c).unwrap().parse().unwrap())
            .collect();
        let mut weight = (int.len() / 4) as i16 - 1;
        while digits.first() == Some(&0) {
            digits.remove(0);
            weight -= 1;
        }
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            weight = 0;
        }
        out.put_i16(digits.len() as i16);
        out.put_i16(weight);
        out.put_u16(0);
        out.put_u16(frac.len() as u16);
        for d in digits {
            out.put_i16(d);
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    to_sql_checked!();
}

/// A row as (column name, value as text) pairs, NULL as `None`.
type Shown = Vec<(String, Option<String>)>;

/// `row` as [`Shown`] (integer, boolean and text-like columns).
fn show(row: &Row) -> Shown {
    row.columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let value = match *c.type_() {
                Type::INT2 => row.get::<_, Option<i16>>(i).map(|v| v.to_string()),
                Type::INT4 => row.get::<_, Option<i32>>(i).map(|v| v.to_string()),
                Type::INT8 => row.get::<_, Option<i64>>(i).map(|v| v.to_string()),
                Type::BOOL => row.get::<_, Option<bool>>(i).map(|v| v.to_string()),
                _ => row.get::<_, Option<String>>(i),
            };
            (c.name().to_owned(), value)
        })
        .collect()
}

/// `rows` as [`Shown`], sorted (what a statement without `ORDER BY`
/// returns is a set).
fn show_all(rows: &[Row]) -> Vec<Shown> {
    let mut shown: Vec<Shown> = rows.iter().map(show).collect();
    shown.sort();
    shown
}

/// Which method of the pool a caller runs its statement with.
#[derive(Clone, Copy, Debug)]
enum Call {
    Query,
    Opt,
    One,
    Execute,
}

/// The four methods, for callers to take turns with.
const CALLS: [Call; 4] = [Call::Query, Call::Opt, Call::One, Call::Execute];

/// What a caller got.
#[derive(Debug, PartialEq)]
enum Got {
    /// `query`: the rows.
    Rows(Vec<Shown>),
    /// `query_opt`: the row, if any.
    Opt(Option<Shown>),
    /// `query_one`: the row, or `None` when there was not exactly one.
    One(Option<Shown>),
    /// `execute`: the count.
    Count(u64),
    /// A database error's SQLSTATE (another error's message).
    Failed(String),
}

/// `e`'s SQLSTATE, or its message when it has none.
fn code(e: &batchpool::Error) -> String {
    e.code().map_or_else(|| e.to_string(), str::to_owned)
}

/// `sql` run by a caller of `pool` with `how`.
async fn call(pool: &Pool, how: Call, sql: &str, params: &[Param]) -> Got {
    let params = refs(params);
    match how {
        Call::Query => match pool.query(sql, &params).await {
            Ok(rows) => Got::Rows(show_all(&rows)),
            Err(e) => Got::Failed(code(&e)),
        },
        Call::Opt => match pool.query_opt(sql, &params).await {
            Ok(row) => Got::Opt(row.as_ref().map(show)),
            Err(e) => Got::Failed(code(&e)),
        },
        Call::One => match pool.query_one(sql, &params).await {
            Ok(row) => Got::One(Some(show(&row))),
            Err(e) if e.is_row_count() => Got::One(None),
            Err(e) => Got::Failed(code(&e)),
        },
        Call::Execute => match pool.execute(sql, &params).await {
            Ok(out) => Got::Count(out.rows_affected()),
            Err(e) => Got::Failed(code(&e)),
        },
    }
}

/// What the plain driver gives for `sql` run alone, as [`call`] shows it.
async fn plain(client: &Client, how: Call, sql: &str, params: &[Param]) -> Got {
    let params = refs(params);
    let failed = |e: tokio_postgres::Error| {
        Got::Failed(
            e.code()
                .map_or_else(|| e.to_string(), |c| c.code().to_owned()),
        )
    };
    if let Call::Execute = how {
        return client
            .execute(sql, &params)
            .await
            .map_or_else(failed, Got::Count);
    }
    let rows = match client.query(sql, &params).await {
        Ok(rows) => show_all(&rows),
        Err(e) => return failed(e),
    };
    match how {
        Call::Query => Got::Rows(rows),
        Call::Opt => {
            assert!(rows.len() <= 1, "{sql}: {rows:?}");
            Got::Opt(rows.into_iter().next())
        }
        _ => Got::One((rows.len() == 1).then(|| rows.into_iter().next().unwrap())),
    }
}

/// Fails unless `pool` coalesces `sql`.
async fn assert_coalesced(pool: &Pool, sql: &str) {
    let explain = pool.explain(sql).await.unwrap();
    assert!(explain.is_coalesced(), "{sql}: {explain}");
}

/// Fails if `pool` coalesces `sql`; prints why it does not.
async fn assert_alone(pool: &Pool, sql: &str) {
    let explain = pool.explain(sql).await.unwrap();
    println!("{sql}: {explain}");
    assert!(!explain.is_coalesced(), "{sql} is coalesced");
}

/// Prints whether `pool` coalesces `sql`.
async fn print_explain(pool: &Pool, sql: &str) {
    println!("{sql}: {}", pool.explain(sql).await.unwrap());
}

/// Fails unless the `calls` calls made between `before` and `after` were
/// nearly all coalesced (at least 80% counted in `rows`: a few, such as
/// NULL keys, may run on their own), in well under half as many
/// statements.
fn assert_burst_coalesced(what: &str, before: &Stats, after: &Stats, calls: usize) {
    let calls = calls as u64;
    let rows = after.rows - before.rows;
    let statements = after.statements - before.statements;
    let alone = after.passthrough - before.passthrough;
    assert!(
        rows * 5 >= calls * 4 && statements >= 1 && statements * 2 < calls,
        "{what}: of {calls} calls {rows} were coalesced, in {statements} statements, and \
         {alone} statements ran on their own"
    );
}

/// The rows of `sql` (run on the server itself), sorted.
async fn select(client: &Client, sql: &str) -> Vec<Shown> {
    show_all(
        &client
            .query(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
    )
}

/// The rows of `table` (on the server itself), sorted.
async fn table(client: &Client, table: &str) -> Vec<Shown> {
    select(client, &format!("SELECT * FROM {table}")).await
}

/// 640 concurrent point reads of four texts through the four methods, keys
/// present, missing, NULL and repeated within the burst (some rows with
/// a NULL column): each caller gets exactly what the plain driver gets for
/// its key, and the burst is coalesced.
async fn point_reads_get_each_callers_own_rows<B: PgBackend>() {
    let (pool, admin, _) = setup::<B>(
        "CREATE TABLE t (id bigint PRIMARY KEY, v text, n int NOT NULL);
         INSERT INTO t SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE 'v' || g END, g * 3
             FROM generate_series(0, 299) g",
        BatchConfig::default(),
    )
    .await;
    let texts = [
        "SELECT * FROM t WHERE id = $1",
        "SELECT v, id FROM t WHERE id = $1",
        "SELECT v AS value, n FROM t WHERE id = $1",
        "SELECT x.id, x.n::bigint AS n8 FROM t x WHERE id = $1",
    ];
    let calls: Vec<(&str, Call, Option<i64>)> = (0..640usize)
        .map(|i| {
            // Each kind of key in runs of 16 calls: every text by every
            // method.
            let key = match (i / 16) % 10 {
                0 => None,
                1 | 2 => Some(1000 + i as i64),
                3 => Some((i % 8) as i64),
                _ => Some((i as i64 * 7) % 300),
            };
            (texts[i % 4], CALLS[(i / 4) % 4], key)
        })
        .collect();
    let before = pool.stats();
    let got = join_all(calls.iter().map(|&(sql, how, key)| {
        let pool = &pool;
        async move { call(pool, how, sql, &[Box::new(key)]).await }
    }))
    .await;
    let after = pool.stats();
    for ((sql, how, key), got) in calls.iter().zip(got) {
        let expected = plain(&admin, *how, sql, &[Box::new(*key)]).await;
        assert_eq!(got, expected, "{sql} with {key:?} by {how:?}");
    }
    for sql in texts {
        assert_coalesced(&pool, sql).await;
    }
    assert_burst_coalesced("point reads", &before, &after, calls.len());
}

/// A table whose key compares equal on the server for values that differ
/// in bytes, and the spellings callers use for its keys.
struct LooseKey {
    /// The table's name (each test database has `pool_<name>` and
    /// `plain_<name>`).
    name: &'static str,
    /// The key column's type.
    ty: &'static str,
    /// The keys of its rows.
    rows: &'static [&'static str],
    /// The keys callers look for: other spellings of the rows' keys, and
    /// keys of no row.
    spellings: &'static [&'static str],
    /// Whether the key is `numeric` (else text-like).
    numeric: bool,
    /// Whether the key's type is an extension's (which tokio-postgres
    /// looks up in the catalog).
    extension: bool,
}

impl LooseKey {
    /// `key` as a parameter of the key's type.
    fn key(&self, key: &'static str) -> Param {
        if self.numeric {
            Box::new(Num(key))
        } else {
            Box::new(key.to_owned())
        }
    }
}

/// The tables of `keys_equal_on_the_server_but_not_in_bytes`.
const LOOSE_KEYS: [LooseKey; 4] = [
    LooseKey {
        name: "citext_keys",
        ty: "citext",
        rows: &["Alpha", "beta", "GAMMA", "Straße"],
        spellings: &[
            "alpha", "ALPHA", "Alpha", "aLpHa", "beta", "BETA", "gamma", "Gamma", "straße",
            "STRASSE", "delta", "alpha ",
        ],
        numeric: false,
        extension: true,
    },
    LooseKey {
        name: "icu_keys",
        ty: "text COLLATE ci",
        rows: &["Alpha", "beta", "GAMMA", "Straße"],
        spellings: &[
            "alpha", "ALPHA", "Alpha", "aLpHa", "beta", "BETA", "gamma", "Gamma", "straße",
            "STRASSE", "delta", "alpha ",
        ],
        numeric: false,
        extension: false,
    },
    LooseKey {
        name: "numeric_keys",
        ty: "numeric",
        rows: &["1.0", "2.5", "10", "0.001"],
        spellings: &[
            "1", "1.0", "1.00", "1.000", "2.5", "2.50", "10", "10.0", "10.00", "0.001", "0.0010",
            "3",
        ],
        numeric: true,
        extension: false,
    },
    LooseKey {
        name: "padded_keys",
        ty: "char(8)",
        rows: &["ab", "Cd", "x y"],
        spellings: &[
            "ab", "ab ", "ab      ", "AB", "Cd", "cd", "Cd  ", "x y", "x y   ", "zz",
        ],
        numeric: false,
        extension: false,
    },
];

/// Keys the server compares otherwise than byte for byte: `citext`, a
/// nondeterministic (case-insensitive) ICU collation, `numeric` (`1.0` =
/// `1.00`) and blank-padded `char(n)`. Concurrent reads with different
/// spellings of one key each get the row the plain driver gets; concurrent
/// updates and deletes give the counts and the table that running them one
/// by one gives (one delete of a row counts it, whichever spelling it
/// used). Whether these are coalesced is the pool's choice: printed, not
/// asserted.
///
/// Behind a pooler that refuses transaction blocks (PgBouncer in statement
/// mode) an extension's type cannot be looked up reliably (the guide's
/// "PgBouncer in statement mode"): there the `citext` key is bound as text
/// and cast (`$1::text::citext`) and read back as text, as the guide
/// advises.
async fn keys_equal_on_the_server_but_not_in_bytes<B: PgBackend>() {
    let url = B::fresh_db().await;
    let admin = B::admin(&url).await;
    let citext: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'citext'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        citext, 1,
        "the server has no citext extension: install PostgreSQL's contrib modules \
         (Debian: apt-get install postgresql-contrib)"
    );
    let icu: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_collation WHERE collprovider = 'i'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(icu > 0, "the server was built without ICU collations");
    let mut ddl = String::from(
        "CREATE EXTENSION IF NOT EXISTS citext;
         CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);",
    );
    for t in &LOOSE_KEYS {
        for p in ["pool_", "plain_"] {
            ddl.push_str(&format!(
                "CREATE TABLE {p}{name} (k {ty} PRIMARY KEY, v text NOT NULL, \
                 hits bigint NOT NULL DEFAULT 0);",
                name = t.name,
                ty = t.ty
            ));
            for (i, k) in t.rows.iter().enumerate() {
                ddl.push_str(&format!(
                    "INSERT INTO {p}{name} (k, v) VALUES ('{k}', 'row{i}');",
                    name = t.name
                ));
            }
        }
    }
    admin.batch_execute(&ddl).await.unwrap();
    let pool = B::pool(&url, BatchConfig::default(), 4);

    let bare = !B::TRANSACTIONS;
    let key = |t: &LooseKey, n: u8| {
        if t.extension && bare {
            format!("${n}::text::{}", t.ty)
        } else {
            format!("${n}")
        }
    };

    // Reads: every spelling eight times, through the four methods, at once.
    let read = |t: &LooseKey| {
        let column = if t.numeric || (t.extension && bare) {
            "k::text AS k"
        } else {
            "k"
        };
        format!(
            "SELECT {column}, v FROM pool_{} WHERE k = {}",
            t.name,
            key(t, 1)
        )
    };
    let reads: Vec<(String, Call, &LooseKey, &'static str)> = LOOSE_KEYS
        .iter()
        .flat_map(|t| {
            let sql = read(t);
            (0..8).flat_map(move |round| {
                let sql = sql.clone();
                t.spellings
                    .iter()
                    .enumerate()
                    .map(move |(i, s)| (sql.clone(), CALLS[(round + i) % 4], t, *s))
            })
        })
        .collect();
    let got = join_all(reads.iter().map(|(sql, how, t, key)| {
        let pool = &pool;
        async move { call(pool, *how, sql, &[t.key(key)]).await }
    }))
    .await;
    for ((sql, how, t, key), got) in reads.iter().zip(got) {
        let expected = plain(&admin, *how, sql, &[t.key(key)]).await;
        assert_eq!(got, expected, "{sql} with {key:?} by {how:?}");
    }

    // Updates: every spelling three times at once, each adding its own
    // amount; the plain driver runs the same one by one on the twins.
    let update = |p: &str, t: &LooseKey| {
        format!(
            "UPDATE {p}{} SET hits = hits + $1 WHERE k = {}",
            t.name,
            key(t, 2)
        )
    };
    let rows = |table: String| {
        let admin = &admin;
        async move { select(admin, &format!("SELECT k::text AS k, v, hits FROM {table}")).await }
    };
    let updates: Vec<(&LooseKey, &'static str, i64)> = LOOSE_KEYS
        .iter()
        .flat_map(|t| {
            (0..3).flat_map(move |round| {
                t.spellings
                    .iter()
                    .enumerate()
                    .map(move |(i, s)| (t, *s, 1 + (round * 13 + i as i64) % 5))
            })
        })
        .collect();
    let got = join_all(updates.iter().map(|(t, key, by)| {
        let (pool, sql) = (&pool, update("pool_", t));
        async move { call(pool, Call::Execute, &sql, &[Box::new(*by), t.key(key)]).await }
    }))
    .await;
    for ((t, key, by), got) in updates.iter().zip(got) {
        let sql = update("plain_", t);
        let expected = plain(&admin, Call::Execute, &sql, &[Box::new(*by), t.key(key)]).await;
        assert_eq!(got, expected, "{sql} with {key:?}");
    }
    for t in &LOOSE_KEYS {
        let (ours, theirs) = (format!("pool_{}", t.name), format!("plain_{}", t.name));
        assert_eq!(rows(ours.clone()).await, rows(theirs).await, "{ours}");
    }

    // Deletes: every spelling twice at once. Which caller's delete finds
    // the row depends on the order; exactly one of those naming a row
    // counts it.
    let delete =
        |p: &str, t: &LooseKey| format!("DELETE FROM {p}{} WHERE k = {}", t.name, key(t, 1));
    let mut deletes = Vec::new();
    for t in &LOOSE_KEYS {
        let find = format!(
            "SELECT k::text FROM pool_{} WHERE k = {}",
            t.name,
            key(t, 1)
        );
        for _ in 0..2 {
            for key in t.spellings {
                let row = admin.query_opt(&find, &refs(&[t.key(key)])).await.unwrap();
                deletes.push((t, *key, row.map(|r| r.get::<_, String>(0))));
            }
        }
    }
    let got = join_all(deletes.iter().map(|(t, key, _)| {
        let (pool, sql) = (&pool, delete("pool_", t));
        async move { call(pool, Call::Execute, &sql, &[t.key(key)]).await }
    }))
    .await;
    let mut counted: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for ((t, key, row), got) in deletes.iter().zip(got) {
        match (row, got) {
            (Some(row), Got::Count(n @ (0 | 1))) => {
                *counted.entry((t.name, row.as_str())).or_default() += n;
            }
            (None, Got::Count(0)) => {}
            (row, got) => panic!("delete from {} with {key:?} (row {row:?}): {got:?}", t.name),
        }
    }
    assert!(
        counted.values().all(|n| *n == 1),
        "deletes per row: {counted:?}"
    );
    for t in &LOOSE_KEYS {
        for (_, key, _) in deletes.iter().filter(|(d, ..)| d.name == t.name) {
            admin
                .execute(&delete("plain_", t), &refs(&[t.key(key)]))
                .await
                .unwrap();
        }
        let (ours, theirs) = (format!("pool_{}", t.name), format!("plain_{}", t.name));
        assert_eq!(rows(ours.clone()).await, rows(theirs).await, "{ours}");
        assert_eq!(
            counted.keys().filter(|(name, _)| *name == t.name).count(),
            t.rows.len(),
            "every row of {ours} was named by some delete"
        );
    }
    for t in &LOOSE_KEYS {
        print_explain(&pool, &read(t)).await;
        print_explain(&pool, &update("pool_", t)).await;
        print_explain(&pool, &delete("pool_", t)).await;
    }
}

/// 600 concurrent `UPDATE c SET hits = hits + $1 WHERE id = $2`, a third
/// of them on five hot keys, some on keys of no row: each caller's count is
/// 1 for a row and 0 for none, and each row's hits are the sum of its
/// callers' amounts. Coalesced.
async fn hot_key_updates_add_up<B: PgBackend>() {
    let (pool, admin, _) = setup::<B>(
        "CREATE TABLE c (id bigint PRIMARY KEY, hits bigint NOT NULL DEFAULT 0);
         INSERT INTO c (id) SELECT g FROM generate_series(0, 199) g",
        BatchConfig::default(),
    )
    .await;
    let sql = "UPDATE c SET hits = hits + $1 WHERE id = $2";
    let calls: Vec<(i64, i64)> = (0..600i64)
        .map(|i| {
            let key = if i % 12 == 0 {
                5000 + i
            } else if i % 3 == 0 {
                i % 5
            } else {
                i % 200
            };
            (i % 7 + 1, key)
        })
        .collect();
    let before = pool.stats();
    let got = join_all(calls.iter().map(|&(by, key)| {
        let pool = &pool;
        async move { call(pool, Call::Execute, sql, &[Box::new(by), Box::new(key)]).await }
    }))
    .await;
    let after = pool.stats();
    let mut hits = vec![0i64; 200];
    for ((by, key), got) in calls.iter().zip(got) {
        let expected = if *key < 200 {
            hits[*key as usize] += by;
            1
        } else {
            0
        };
        assert_eq!(got, Got::Count(expected), "{sql} with ({by}, {key})");
    }
    let stored: Vec<i64> = admin
        .query("SELECT hits FROM c ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stored, hits, "each row's hits are its callers' sum");
    assert_coalesced(&pool, sql).await;
    assert_burst_coalesced("hot key updates", &before, &after, calls.len());
}

/// 500 concurrent `DELETE FROM d WHERE id = $1`, most rows named by two
/// callers, some keys of no row: per row exactly one caller gets 1, the
/// others 0, callers of no row 0; exactly the named rows are gone.
/// Coalesced.
async fn duplicate_deletes_remove_each_row_once<B: PgBackend>() {
    let (pool, admin, _) = setup::<B>(
        "CREATE TABLE d (id bigint PRIMARY KEY, v text NOT NULL);
         INSERT INTO d SELECT g, 'v' || g FROM generate_series(0, 299) g",
        BatchConfig::default(),
    )
    .await;
    let sql = "DELETE FROM d WHERE id = $1";
    let keys: Vec<i64> = (0..500i64)
        .map(|i| {
            if i % 10 == 0 {
                9000 + i
            } else {
                (i * 13) % 250
            }
        })
        .collect();
    let before = pool.stats();
    let got = join_all(keys.iter().map(|&key| {
        let pool = &pool;
        async move { call(pool, Call::Execute, sql, &[Box::new(key)]).await }
    }))
    .await;
    let after = pool.stats();
    let mut deleted: BTreeMap<i64, u64> = BTreeMap::new();
    for (key, got) in keys.iter().zip(got) {
        match got {
            Got::Count(n @ (0 | 1)) if *key < 300 => *deleted.entry(*key).or_default() += n,
            Got::Count(0) => {}
            got => panic!("{sql} with {key}: {got:?}"),
        }
    }
    assert!(
        deleted.values().all(|n| *n == 1),
        "deletes per row: {deleted:?}"
    );
    let left: Vec<i64> = admin
        .query("SELECT id FROM d ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let expected: Vec<i64> = (0..300).filter(|k| !deleted.contains_key(k)).collect();
    assert_eq!(left, expected);
    assert_coalesced(&pool, sql).await;
    assert_burst_coalesced("duplicate deletes", &before, &after, keys.len());
}

/// 64 tasks, each ten times: update its own row and read it back, then
/// insert a new row (a coalesced INSERT) and read that: every read sees
/// what its task was just told was written.
async fn callers_read_their_own_writes<B: PgBackend>() {
    let (pool, _admin, _) = setup::<B>(
        "CREATE TABLE rw (id bigint PRIMARY KEY, v bigint NOT NULL);
         INSERT INTO rw SELECT g, 0 FROM generate_series(0, 63) g",
        BatchConfig::default(),
    )
    .await;
    const UPDATE: &str = "UPDATE rw SET v = $1 WHERE id = $2";
    const READ: &str = "SELECT v FROM rw WHERE id = $1";
    const INSERT: &str = "INSERT INTO rw (id, v) VALUES ($1, $2)";
    const READ_ROW: &str = "SELECT id, v FROM rw WHERE id = $1";
    let before = pool.stats();
    let tasks: Vec<_> = (0..64i64)
        .map(|task| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for round in 0..10i64 {
                    let v = task * 1000 + round;
                    let out = pool.execute(UPDATE, &[&v, &task]).await.unwrap();
                    assert_eq!(out.rows_affected(), 1, "task {task} round {round}");
                    let seen: i64 = pool.query_one(READ, &[&task]).await.unwrap().get(0);
                    assert_eq!(seen, v, "task {task} round {round}: its own update");
                    let id = 10_000 + task * 100 + round;
                    let out = pool.execute(INSERT, &[&id, &v]).await.unwrap();
                    assert_eq!(out.rows_affected(), 1, "insert of {id}");
                    let row = pool.query_opt(READ_ROW, &[&id]).await.unwrap();
                    let row = row.map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)));
                    assert_eq!(row, Some((id, v)), "task {task}: the row it inserted");
                }
            })
        })
        .collect();
    for task in join_all(tasks).await {
        task.unwrap();
    }
    let after = pool.stats();
    for sql in [UPDATE, READ, INSERT, READ_ROW] {
        assert_coalesced(&pool, sql).await;
    }
    assert_burst_coalesced("reads after writes", &before, &after, 64 * 10 * 4);
}

/// Errors of one caller's row stay with it: under concurrency, the
/// callers of `UPDATE e SET v = v / $1 WHERE id = $2` dividing a row by
/// zero get 22012 (division_by_zero), callers dividing by zero where there
/// is no row get 0 (the expression is never evaluated), all others their
/// count, and each row is divided by its successful callers' divisors. The
/// same for updates some of which break a CHECK constraint (23514).
async fn per_row_errors_stay_with_their_callers<B: PgBackend>() {
    let (pool, admin, _) = setup::<B>(
        "CREATE TABLE e (id bigint PRIMARY KEY, v int NOT NULL,
                         w int NOT NULL CHECK (w <= 100));
         INSERT INTO e SELECT g, 1000000 + g, 90 FROM generate_series(0, 199) g",
        BatchConfig::default(),
    )
    .await;
    let divide = "UPDATE e SET v = v / $1 WHERE id = $2";
    let calls: Vec<(i32, i64)> = (0..400i64)
        .map(|i| {
            let divisor = if i % 9 == 0 { 0 } else { (i % 3) as i32 + 1 };
            let key = if i % 11 == 0 { 7000 + i } else { i % 200 };
            (divisor, key)
        })
        .collect();
    let got = join_all(calls.iter().map(|&(divisor, key)| {
        let pool = &pool;
        async move {
            call(
                pool,
                Call::Execute,
                divide,
                &[Box::new(divisor), Box::new(key)],
            )
            .await
        }
    }))
    .await;
    let mut divided: Vec<i64> = (0..200).map(|k| 1_000_000 + k).collect();
    for ((divisor, key), got) in calls.iter().zip(got) {
        let expected = match (*key < 200, *divisor) {
            (false, _) => Got::Count(0),
            (true, 0) => Got::Failed("22012".into()),
            (true, d) => {
                // (v / a) / b = v / (a b) for positive integers: the order
                // of the callers does not matter.
                divided[*key as usize] /= i64::from(d);
                Got::Count(1)
            }
        };
        assert_eq!(got, expected, "{divide} with ({divisor}, {key})");
    }
    let stored: Vec<i64> = admin
        .query("SELECT v::bigint FROM e ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stored, divided);

    let raise = "UPDATE e SET w = w + $1 WHERE id = $2";
    let calls: Vec<(i32, i64)> = (0..220i64)
        .map(|k| {
            (
                if k % 4 == 0 { 20 } else { 5 },
                if k < 200 { k } else { 8000 + k },
            )
        })
        .collect();
    let got = join_all(calls.iter().map(|&(by, key)| {
        let pool = &pool;
        async move { call(pool, Call::Execute, raise, &[Box::new(by), Box::new(key)]).await }
    }))
    .await;
    for ((by, key), got) in calls.iter().zip(got) {
        let expected = match (*key < 200, *by) {
            (false, _) => Got::Count(0),
            (true, 20) => Got::Failed("23514".into()),
            (true, _) => Got::Count(1),
        };
        assert_eq!(got, expected, "{raise} with ({by}, {key})");
    }
    let stored: Vec<i32> = admin
        .query("SELECT w FROM e ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let expected: Vec<i32> = (0..200).map(|k| if k % 4 == 0 { 90 } else { 95 }).collect();
    assert_eq!(stored, expected);
    print_explain(&pool, raise).await;
    assert_coalesced(&pool, divide).await;
}

/// The tables of `other_forms_run_on_their_own`, prefixed with `p`: each
/// test database has them twice, `pool_…` for the pool and `plain_…` for
/// the plain driver.
/// (The tests connect as a superuser, whom the row-level security policy
/// does not filter: what matters is that it is enabled.)
fn other_forms_ddl(p: &str) -> String {
    format!(
        "CREATE TABLE {p}t (id bigint PRIMARY KEY, n bigint NOT NULL, v text);
         INSERT INTO {p}t SELECT g, g * 10, 'v' || g FROM generate_series(0, 99) g;
         CREATE VIEW {p}tv AS SELECT id, n, v FROM {p}t;
         CREATE TABLE {p}r (id bigint PRIMARY KEY, n bigint NOT NULL);
         INSERT INTO {p}r SELECT g, g FROM generate_series(0, 99) g;
         ALTER TABLE {p}r ENABLE ROW LEVEL SECURITY;
         CREATE POLICY even ON {p}r USING (id % 2 = 0);
         CREATE TABLE {p}tg (id bigint PRIMARY KEY, n bigint NOT NULL);
         INSERT INTO {p}tg SELECT g, g FROM generate_series(0, 99) g;
         CREATE TABLE {p}tg_log (id bigint NOT NULL);
         CREATE FUNCTION {p}log_update() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN INSERT INTO {p}tg_log VALUES (NEW.id); RETURN NEW; END $$;
         CREATE TRIGGER on_update AFTER UPDATE ON {p}tg
             FOR EACH ROW EXECUTE FUNCTION {p}log_update();
         CREATE TABLE {p}nu (id bigint NOT NULL, g bigint NOT NULL, n bigint NOT NULL);
         CREATE INDEX ON {p}nu (g);
         INSERT INTO {p}nu SELECT i, i % 10, i FROM generate_series(0, 99) i;
         CREATE TABLE {p}cp (a bigint, b bigint, n bigint NOT NULL, PRIMARY KEY (a, b));
         INSERT INTO {p}cp SELECT i / 5, i % 5, i FROM generate_series(0, 99) i;
         CREATE TABLE {p}parent (id bigint PRIMARY KEY, n bigint NOT NULL);
         INSERT INTO {p}parent SELECT g, g FROM generate_series(0, 99) g;
         CREATE TABLE {p}child (id bigint PRIMARY KEY,
                                parent bigint REFERENCES {p}parent ON DELETE CASCADE);
         INSERT INTO {p}child SELECT g, g FROM generate_series(0, 99, 3) g;
         CREATE TABLE {p}ix (id bigint PRIMARY KEY, u bigint NOT NULL UNIQUE);
         INSERT INTO {p}ix SELECT g, g * 1000 FROM generate_series(0, 99) g;"
    )
}

/// The tables [`other_forms_ddl`] makes.
const OTHER_FORMS_TABLES: [&str; 9] = [
    "t", "r", "tg", "tg_log", "nu", "cp", "parent", "child", "ix",
];

/// Forms outside the keyed shapes, or on tables where one statement for
/// many callers would not do what each caller's own does, run on their
/// own (`Pool::explain` says so): `ORDER BY`, `LIMIT`, `FOR UPDATE`, a
/// subquery, `RETURNING`, a view, row-level security, an UPDATE trigger
/// (which fires once per caller), a non-unique key, part of a composite
/// key, `OR`, an assigned column in a unique index, a DELETE from a table
/// a foreign key references. Their callers get what the plain driver gives
/// on twin tables, and the tables end up the same. Each kind turned off
/// (`reads(false)`, `updates(false)`, `deletes(false)`) runs on its own,
/// and nothing is coalesced inside `Pool::begin` or on a `Pool::get`
/// connection; the plain keyed forms of the same table are coalesced.
async fn other_forms_run_on_their_own<B: PgBackend>() {
    let (pool, admin, url) = setup::<B>(
        &format!("{}{}", other_forms_ddl("pool_"), other_forms_ddl("plain_")),
        BatchConfig::default(),
    )
    .await;
    let point = |k: i64| vec![k];
    let keys = [0i64, 5, 5, 42, 99, 500];
    // (SQL with `{p}` for the prefix, how it is called, parameter lists).
    let reads: Vec<(&str, Call, Vec<Vec<i64>>)> = vec![
        (
            "SELECT id, v FROM {p}t WHERE id = $1 ORDER BY id",
            Call::Query,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, v FROM {p}t WHERE id = $1 LIMIT 1",
            Call::Opt,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, v FROM {p}t WHERE id = $1 FOR UPDATE",
            Call::Query,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, (SELECT count(*) FROM {p}t) AS total FROM {p}t WHERE id = $1",
            Call::One,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, n, v FROM {p}tv WHERE id = $1",
            Call::Query,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, n FROM {p}r WHERE id = $1",
            Call::Opt,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, g, n FROM {p}nu WHERE g = $1",
            Call::Query,
            vec![vec![3], vec![3], vec![11]],
        ),
        (
            "SELECT a, b, n FROM {p}cp WHERE a = $1",
            Call::Execute,
            vec![vec![4], vec![4], vec![90]],
        ),
        (
            "SELECT id, v FROM {p}t WHERE id = $1 OR id = $2",
            Call::Query,
            vec![vec![1, 2], vec![2, 1], vec![3, 300], vec![400, 401]],
        ),
    ];
    let dupes = |from: i64| -> Vec<Vec<i64>> {
        (0..30)
            .map(|i| vec![i % 4 + 1, if i % 7 == 6 { 1000 + i } else { from + i % 10 }])
            .collect()
    };
    let distinct = |from: i64, n: i64| -> Vec<Vec<i64>> {
        (from..from + n).chain([2000, 2001]).map(point).collect()
    };
    let writes: Vec<(&str, Call, Vec<Vec<i64>>)> = vec![
        (
            "UPDATE {p}t SET n = n + 1 WHERE id = $1 RETURNING id, n",
            Call::Query,
            distinct(0, 10),
        ),
        (
            "UPDATE {p}tv SET n = n + $1 WHERE id = $2",
            Call::Execute,
            dupes(10),
        ),
        (
            "UPDATE {p}r SET n = n + $1 WHERE id = $2",
            Call::Execute,
            dupes(0),
        ),
        (
            "DELETE FROM {p}r WHERE id = $1",
            Call::Execute,
            distinct(50, 10),
        ),
        (
            "UPDATE {p}tg SET n = n + $1 WHERE id = $2",
            Call::Execute,
            dupes(0),
        ),
        (
            "UPDATE {p}nu SET n = n + $1 WHERE g = $2",
            Call::Execute,
            dupes(0),
        ),
        (
            "UPDATE {p}cp SET n = n + $1 WHERE a = $2",
            Call::Execute,
            dupes(0),
        ),
        (
            "DELETE FROM {p}cp WHERE a = $1",
            Call::Execute,
            distinct(15, 5),
        ),
        (
            "DELETE FROM {p}parent WHERE id = $1",
            Call::Execute,
            distinct(0, 20),
        ),
        (
            "UPDATE {p}ix SET u = u + $1 WHERE id = $2",
            Call::Execute,
            dupes(0),
        ),
        (
            "UPDATE {p}t SET n = n + $1 WHERE id = $2 OR id = $3",
            Call::Execute,
            (0..20)
                .map(|i| vec![i % 3 + 1, 20 + 2 * (i % 6), 21 + 2 * (i % 6)])
                .collect(),
        ),
        (
            "DELETE FROM {p}t WHERE id = $1 OR id = $2",
            Call::Execute,
            (0..5)
                .map(|i| vec![80 + 2 * i, 81 + 2 * i])
                .chain([vec![3000, 3001]])
                .collect(),
        ),
    ];
    let with = |sql: &str, p: &str| sql.replace("{p}", p);
    let params =
        |row: &[i64]| -> Vec<Param> { row.iter().map(|k| Box::new(*k) as Param).collect() };
    // Every read, then every write, all at once through the pool; one by
    // one through the plain driver.
    for forms in [&reads, &writes] {
        let calls: Vec<(String, Call, &Vec<i64>)> = forms
            .iter()
            .flat_map(|(sql, how, rows)| {
                rows.iter().map(move |row| (with(sql, "pool_"), *how, row))
            })
            .collect();
        let got = join_all(calls.iter().map(|(sql, how, row)| {
            let pool = &pool;
            async move { call(pool, *how, sql, &params(row)).await }
        }))
        .await;
        for ((sql, how, row), got) in calls.iter().zip(got) {
            let theirs = sql.replace("pool_", "plain_");
            let expected = plain(&admin, *how, &theirs, &params(row)).await;
            assert_eq!(got, expected, "{sql} with {row:?} by {how:?}");
        }
    }
    for name in OTHER_FORMS_TABLES {
        let ours = table(&admin, &format!("pool_{name}")).await;
        assert_eq!(
            ours,
            table(&admin, &format!("plain_{name}")).await,
            "pool_{name}"
        );
    }
    for (sql, ..) in reads.iter().chain(&writes) {
        assert_alone(&pool, &with(sql, "pool_")).await;
    }

    // Inside a transaction and on a lent connection nothing is coalesced.
    let read = "SELECT id, v FROM pool_t WHERE id = $1";
    let update = "UPDATE pool_t SET n = n + $1 WHERE id = $2";
    let delete = "DELETE FROM pool_t WHERE id = $1";
    let before = pool.stats();
    let mut tx = pool.begin();
    if B::TRANSACTIONS {
        let row = tx.query_opt(read, &[&1i64]).await.unwrap();
        assert_eq!(row.map(|r| r.get::<_, i64>(0)), Some(1));
        assert_eq!(
            tx.execute(update, &[&1i64, &1i64])
                .await
                .unwrap()
                .rows_affected(),
            1
        );
        tx.commit().await.unwrap();
    } else {
        // A pooler that refuses transaction blocks: a transaction of one
        // statement only (sent alone, in autocommit).
        let out = tx
            .execute_and_commit(update, &[&1i64, &1i64])
            .await
            .unwrap();
        assert_eq!(out.rows_affected(), 1);
    }
    let client = pool.get().await.unwrap();
    let rows = client
        .query_typed(read, &[(&2i64, Type::INT8)])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let out = client
        .query_typed(delete, &[(&500i64, Type::INT8)])
        .await
        .unwrap();
    assert!(out.is_empty());
    drop(client);
    let after = pool.stats();
    assert_eq!(
        (after.rows, after.statements),
        (before.rows, before.statements),
        "nothing coalesced in a transaction or on a lent connection"
    );

    // Each kind turned off runs on its own; the others are still coalesced.
    let off = [
        (BatchConfig::default().reads(false), read),
        (BatchConfig::default().updates(false), update),
        (BatchConfig::default().deletes(false), delete),
    ];
    let mut pools = Vec::new();
    for (config, sql) in off {
        let other = B::pool(&url, config, 4);
        assert_alone(&other, sql).await;
        let keys = [3i64, 4, 4, 600];
        let got = join_all(keys.iter().map(|k| {
            let other = &other;
            async move { call(other, Call::Query, read, &params(&[*k])).await }
        }))
        .await;
        for (k, got) in keys.iter().zip(got) {
            assert_eq!(
                got,
                plain(&admin, Call::Query, read, &params(&[*k])).await,
                "{read} with {k}"
            );
        }
        pools.push((other, sql));
    }
    for (other, off) in &pools {
        for sql in [read, update, delete].into_iter().filter(|s| s != off) {
            assert_coalesced(other, sql).await;
        }
    }
    for sql in [read, update, delete] {
        assert_coalesced(&pool, sql).await;
    }
}

/// A two-column primary key `(a, b)`: concurrent reads name it as
/// `a = $1 AND b = $2` and as `b = $2 AND a = $1`, updates with the
/// parameters in other orders than the columns, keys whose `a` exists
/// with another `b`, keys of no row, repeated keys; then deletes of
/// repeated keys. Each caller gets what its own statement gets, the rows
/// end up as computed. Coalesced.
async fn composite_keys_in_any_order<B: PgBackend>() {
    let (pool, admin, _) = setup::<B>(
        "CREATE TABLE ck (a bigint, b text, v bigint NOT NULL, PRIMARY KEY (a, b));
         INSERT INTO ck SELECT a, b, a * 100 FROM generate_series(0, 19) a,
             unnest(ARRAY['x', 'y', 'z']) b",
        BatchConfig::default(),
    )
    .await;
    let bs = ["x", "y", "z", "w"];
    let reads = [
        "SELECT a, b, v FROM ck WHERE a = $1 AND b = $2",
        "SELECT v, b, a FROM ck WHERE b = $2 AND a = $1",
    ];
    let calls: Vec<(&str, Call, i64, &str)> = (0..300usize)
        .map(|i| {
            (
                reads[i % 2],
                CALLS[(i / 2) % 4],
                (i % 25) as i64,
                bs[(i / 25) % 4],
            )
        })
        .collect();
    let before = pool.stats();
    let got = join_all(calls.iter().map(|&(sql, how, a, b)| {
        let pool = &pool;
        async move { call(pool, how, sql, &[Box::new(a), Box::new(b.to_owned())]).await }
    }))
    .await;
    let after_reads = pool.stats();
    for ((sql, how, a, b), got) in calls.iter().zip(got) {
        let expected = plain(&admin, *how, sql, &[Box::new(*a), Box::new(b.to_string())]).await;
        assert_eq!(got, expected, "{sql} with ({a}, {b}) by {how:?}");
    }

    // Two texts: (a, b, amount) and (amount, b, a).
    let updates = [
        "UPDATE ck SET v = v + $3 WHERE b = $2 AND a = $1",
        "UPDATE ck SET v = v + $1 WHERE b = $2 AND a = $3",
    ];
    let mut v: BTreeMap<(i64, &str), i64> = (0..20)
        .flat_map(|a| bs[..3].iter().map(move |b| ((a, *b), a * 100)))
        .collect();
    let calls: Vec<(usize, i64, &str, i64)> = (0..300usize)
        .map(|i| (i % 2, (i % 23) as i64, bs[(i / 3) % 4], (i % 5) as i64 + 1))
        .collect();
    let got = join_all(calls.iter().map(|&(text, a, b, by)| {
        let pool = &pool;
        let b = Box::new(b.to_owned()) as Param;
        let params: Vec<Param> = if text == 0 {
            vec![Box::new(a), b, Box::new(by)]
        } else {
            vec![Box::new(by), b, Box::new(a)]
        };
        async move { call(pool, Call::Execute, updates[text], &params).await }
    }))
    .await;
    let after_updates = pool.stats();
    for ((text, a, b, by), got) in calls.iter().zip(got) {
        let expected = match v.get_mut(&(*a, *b)) {
            Some(v) => {
                *v += by;
                1
            }
            None => 0,
        };
        assert_eq!(
            got,
            Got::Count(expected),
            "{} with a {a}, b {b}",
            updates[*text]
        );
    }

    let delete = "DELETE FROM ck WHERE a = $1 AND b = $2";
    let keys: Vec<(i64, &str)> = (0..48usize)
        .map(|i| (10 + (i % 12) as i64, bs[(i / 12) % 2 * 3]))
        .collect();
    let got = join_all(keys.iter().map(|&(a, b)| {
        let pool = &pool;
        async move {
            call(
                pool,
                Call::Execute,
                delete,
                &[Box::new(a), Box::new(b.to_owned())],
            )
            .await
        }
    }))
    .await;
    let mut deleted: BTreeMap<(i64, &str), u64> = BTreeMap::new();
    for ((a, b), got) in keys.iter().zip(got) {
        match got {
            Got::Count(n @ (0 | 1)) if v.contains_key(&(*a, *b)) => {
                *deleted.entry((*a, *b)).or_default() += n;
            }
            Got::Count(0) => {}
            got => panic!("{delete} with ({a}, {b}): {got:?}"),
        }
    }
    assert!(
        deleted.values().all(|n| *n == 1),
        "deletes per key: {deleted:?}"
    );
    v.retain(|key, _| !deleted.contains_key(key));
    let stored: BTreeMap<(i64, String), i64> = admin
        .query("SELECT a, b, v FROM ck", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect();
    let expected: BTreeMap<(i64, String), i64> = v
        .iter()
        .map(|((a, b), v)| ((*a, b.to_string()), *v))
        .collect();
    assert_eq!(stored, expected);

    for sql in reads.iter().chain(&updates).chain([&delete]) {
        assert_coalesced(&pool, sql).await;
    }
    assert_burst_coalesced("composite key reads", &before, &after_reads, 300);
    assert_burst_coalesced("composite key updates", &after_reads, &after_updates, 300);
}

/// 200 tasks each with a key of its own: insert it (a coalesced INSERT),
/// read it (seen), delete it (1), read it (gone); every third inserts it
/// again and reads the new row; meanwhile each reads a row nobody writes.
/// Every caller is told what its own statement does, and the table ends
/// with the untouched rows and the reinserted ones. Coalesced.
async fn insert_read_delete_read_per_key<B: PgBackend>() {
    let (pool, admin, _) = setup::<B>(
        "CREATE TABLE m (id bigint PRIMARY KEY, v text NOT NULL);
         INSERT INTO m SELECT g, 'old' || g FROM generate_series(0, 99) g",
        BatchConfig::default(),
    )
    .await;
    const INSERT: &str = "INSERT INTO m (id, v) VALUES ($1, $2)";
    const READ: &str = "SELECT id, v FROM m WHERE id = $1";
    const DELETE: &str = "DELETE FROM m WHERE id = $1";
    let before = pool.stats();
    let tasks: Vec<_> = (0..200i64)
        .map(|task| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let read = |id: i64| {
                    let pool = pool.clone();
                    async move {
                        let row = pool.query_opt(READ, &[&id]).await.unwrap();
                        row.map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
                    }
                };
                let key = 1000 + task;
                let v = format!("new{task}");
                let out = pool.execute(INSERT, &[&key, &v]).await.unwrap();
                assert_eq!(out.rows_affected(), 1, "insert {key}");
                assert_eq!(read(key).await, Some((key, v)), "read after insert");
                let old = task % 100;
                assert_eq!(read(old).await, Some((old, format!("old{old}"))));
                let out = pool.execute(DELETE, &[&key]).await.unwrap();
                assert_eq!(out.rows_affected(), 1, "delete {key}");
                assert_eq!(read(key).await, None, "read after delete");
                let out = pool.execute(DELETE, &[&key]).await.unwrap();
                assert_eq!(out.rows_affected(), 0, "second delete of {key}");
                if task % 3 == 0 {
                    let v = format!("again{task}");
                    let out = pool.execute(INSERT, &[&key, &v]).await.unwrap();
                    assert_eq!(out.rows_affected(), 1, "reinsert {key}");
                    assert_eq!(read(key).await, Some((key, v)), "read after reinsert");
                    6 + 2
                } else {
                    6
                }
            })
        })
        .collect();
    let mut calls = 0;
    for task in join_all(tasks).await {
        calls += task.unwrap();
    }
    let after = pool.stats();
    let stored: Vec<(i64, String)> = admin
        .query("SELECT id, v FROM m ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected: Vec<(i64, String)> = (0..100)
        .map(|k| (k, format!("old{k}")))
        .chain(
            (0..200)
                .filter(|t| t % 3 == 0)
                .map(|t| (1000 + t, format!("again{t}"))),
        )
        .collect();
    assert_eq!(stored, expected);
    for sql in [INSERT, READ, DELETE] {
        assert_coalesced(&pool, sql).await;
    }
    assert_burst_coalesced("inserts, reads and deletes", &before, &after, calls);
}

/// The texts of the family test on table `{t}`: four that update one
/// table by one key with `int8` parameters and differ only in what they
/// assign (one family), one with its key first (another family), one whose
/// expression is not of its column's type (`text` into `char(5)`, `float8`
/// into `numeric`: run without the family, whose `CASE` would round the
/// `numeric` of every other caller's row through `float8`), one whose values are of another type (`numeric`:
/// another family). Calls on one key commute.
fn family_texts(t: &str) -> [String; 8] {
    [
        format!("UPDATE {t} SET n = n + $1 WHERE id = $2"),
        format!("UPDATE {t} SET m = $1, n = n + 1 WHERE id = $2"),
        format!("UPDATE {t} SET c = c + $1::int8 WHERE id = $2"),
        format!("UPDATE {t} SET ts = ts + $1::int8 * interval '1 second' WHERE id = $2"),
        format!("UPDATE {t} SET q = $2 WHERE id = $1"),
        format!("UPDATE {t} SET p = repeat('x', $1::int8::int4) WHERE id = $2"),
        format!("UPDATE {t} SET r = r * $1 WHERE id = $2"),
        format!("UPDATE {t} SET z = $1::int8::float8 / 8 WHERE id = $2"),
    ]
}

/// The parameters of call `i` of text `text` on key `key` (values that do
/// not depend on the order of calls on one key; from call 1000 on, a few
/// overflowing `numeric(10,2)`).
fn family_params(text: usize, i: usize, key: i64) -> Vec<Param> {
    match text {
        1 => vec![Box::new(key * 7), Box::new(key)],
        2 if i >= 1000 && i % 41 == 0 => vec![Box::new(1_000_000_000i64), Box::new(key)],
        4 => vec![Box::new(key), Box::new(key * 3)],
        5 => vec![Box::new((key % 5) + 1), Box::new(key)],
        6 if i % 37 == 0 => vec![Box::new(Num("100000000")), Box::new(key)],
        6 => vec![Box::new(Num("1.5")), Box::new(key)],
        _ => vec![Box::new((i % 9) as i64 + 1), Box::new(key)],
    }
}

/// Each family call `(text, call number, key)` got what the plain driver
/// gets for the same statement on the twin table.
async fn same_as_twin(
    admin: &Client,
    ours: &[String],
    twin: &[String],
    calls: &[(usize, usize, i64)],
    got: &[Got],
) {
    for (&(text, i, key), got) in calls.iter().zip(got) {
        let expected = plain(
            admin,
            Call::Execute,
            &twin[text],
            &family_params(text, i, key),
        )
        .await;
        assert_eq!(*got, expected, "{} with key {key}", ours[text]);
    }
}

/// Update texts that differ only in what they assign go out together: a
/// burst of four such texts queued behind a held connection is sent in
/// one or two statements (one per text would be four), and a mixed
/// concurrent burst of those texts, a text of another family, one that
/// cannot join (its expression is of another type than its column) and
/// failing rows (`numeric(10,2)` overflows) gives each caller exactly what
/// the plain driver gives for its statement run alone on a twin table, and
/// leaves the same table: the columns a text does not assign are kept as
/// they were (`numeric`, `timestamptz`, `char`, NULL).
async fn update_texts_of_one_family_run_together<B: PgBackend>() {
    let ddl = |t: &str| {
        format!(
            "CREATE TABLE {t} (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0, m bigint,
                 c numeric(10,2) NOT NULL DEFAULT 1.25,
                 ts timestamptz NOT NULL DEFAULT '2024-03-31 01:59:59.123456+00',
                 p char(5) DEFAULT 'ab', q bigint, r numeric(10,2) NOT NULL DEFAULT 2.5,
                 z numeric NOT NULL DEFAULT 0.12345678901234567890123);
             INSERT INTO {t} (id, m) SELECT g, CASE WHEN g % 3 = 0 THEN NULL ELSE g END
                 FROM generate_series(0, 399) g;"
        )
    };
    let (pool, admin, _) =
        setup::<B>(&format!("{}{}", ddl("f"), ddl("g")), BatchConfig::default()).await;
    let ours = family_texts("f");
    let twin = family_texts("g");
    for sql in &ours {
        assert_coalesced(&pool, sql).await;
    }
    let dump = |t: &'static str| {
        let admin = &admin;
        async move {
            select(
                admin,
                &format!(
                    "SELECT id, n, m, c::text, ts::text, p::text, q, r::text, z::text FROM {t}"
                ),
            )
            .await
        }
    };

    // Four texts of one family queued behind the only free connection.
    let held = crate::pg_coalesce::hold_all(&pool, 4).await;
    let before = pool.stats();
    let calls: Vec<(usize, usize, i64)> = (0..300).map(|i| (i % 4, i, i as i64)).collect();
    let burst = {
        let pool = pool.clone();
        let ours = ours.clone();
        let calls = calls.clone();
        tokio::spawn(async move {
            join_all(calls.iter().map(|&(text, i, key)| {
                let (pool, sql) = (&pool, &ours[text]);
                async move { call(pool, Call::Execute, sql, &family_params(text, i, key)).await }
            }))
            .await
        })
    };
    let got = crate::pg_coalesce::release_when_queued(&pool, held, calls.len(), burst).await;
    let after = pool.stats();
    same_as_twin(&admin, &ours, &twin, &calls, &got).await;
    assert_eq!(
        dump("f").await,
        dump("g").await,
        "the tables after the queued burst"
    );
    let statements = after.statements - before.statements;
    assert!(
        (1..=2).contains(&statements),
        "300 queued updates of one family's four texts went out in {statements} statements"
    );

    // All eight texts at once, keys named by several callers.
    let calls: Vec<(usize, usize, i64)> =
        (1000..1800).map(|i| (i % 8, i, (i % 170) as i64)).collect();
    let got = join_all(calls.iter().map(|&(text, i, key)| {
        let (pool, sql) = (&pool, &ours[text]);
        async move { call(pool, Call::Execute, sql, &family_params(text, i, key)).await }
    }))
    .await;
    same_as_twin(&admin, &ours, &twin, &calls, &got).await;
    assert!(
        got.iter()
            .any(|g| matches!(g, Got::Failed(c) if c == "22003")),
        "some callers' numeric overflowed"
    );
    assert_eq!(
        dump("f").await,
        dump("g").await,
        "the tables after the mixed burst"
    );
}

/// Two update texts of one family whose family statement the pool's role
/// may not run. In the first round it may update `a` and `b` and read the
/// key, but not read `a` or `b`, which the family's `CASE ... ELSE a END`
/// does; in the second it may read every column and update `a` only, so
/// the second text fails for its caller, as it does alone. Either way each
/// text is coalesced with its own callers only, never with the other's:
/// 199 queued calls of the first text and one of the second go out in
/// exactly two statements (a family statement would fail and be cut into
/// many), each caller gets its own text's outcome, and the table holds
/// exactly the updates told Ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn texts_whose_family_statement_is_refused_run_apart() {
    let url = crate::common::pg_fresh_db().await;
    let (su, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let texts = [
        "UPDATE p SET a = $1 WHERE id = $2",
        "UPDATE p SET b = $1 WHERE id = $2",
    ];
    // The one caller of the second text among callers of the first.
    const ONE_OF_B: i64 = 101;
    // The grants, and whether the second text's callers may update.
    let rounds = [
        (
            "GRANT SELECT (id) ON p TO {r}; GRANT UPDATE (a, b) ON p TO {r};",
            true,
        ),
        (
            "GRANT SELECT ON p TO {r}; GRANT UPDATE (a) ON p TO {r};",
            false,
        ),
    ];
    for (round, (grants, b_allowed)) in rounds.into_iter().enumerate() {
        let role = format!(
            "bp_family_{round}_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        su.batch_execute(&format!(
            "DROP TABLE IF EXISTS p;
             CREATE ROLE \"{role}\" LOGIN;
             CREATE TABLE p (id bigint PRIMARY KEY, a bigint, b bigint);
             INSERT INTO p (id) SELECT generate_series(0, 199);
             {}",
            grants.replace("{r}", &format!("\"{role}\""))
        ))
        .await
        .unwrap();
        let mut config: tokio_postgres::Config = url.parse().unwrap();
        config.user(&role);
        let pool = Pool::from_config(config)
            .batching(BatchConfig::default())
            .max_size(2)
            .build()
            .unwrap();
        for sql in texts {
            assert_coalesced(&pool, sql).await;
        }
        let held = crate::pg_coalesce::hold_all(&pool, 2).await;
        let before = pool.stats();
        let burst = {
            let pool = pool.clone();
            tokio::spawn(async move {
                join_all((0..200i64).map(|i| {
                    let pool = &pool;
                    async move {
                        let sql = texts[usize::from(i == ONE_OF_B)];
                        call(pool, Call::Execute, sql, &[Box::new(i * 3), Box::new(i)]).await
                    }
                }))
                .await
            })
        };
        while pool.stats().queued < 200 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        drop(held);
        let got = burst.await.unwrap();
        let after = pool.stats();
        for (i, got) in got.iter().enumerate() {
            let of_b = i as i64 == ONE_OF_B;
            let expected = if !of_b || b_allowed {
                Got::Count(1)
            } else {
                Got::Failed("42501".into())
            };
            assert_eq!(
                *got,
                expected,
                "round {round}: {}",
                texts[usize::from(of_b)]
            );
        }
        assert_eq!(
            after.statements - before.statements,
            2,
            "round {round}: one statement for the first text's callers, one for the \
             second's: {after:?}"
        );
        let stored = select(&su, "SELECT id, a, b FROM p").await;
        let mut expected: Vec<Shown> = (0..200i64)
            .map(|i| {
                let value = Some((i * 3).to_string());
                let (a, b) = match (i != ONE_OF_B, b_allowed) {
                    (true, _) => (value, None),
                    (false, true) => (None, value),
                    (false, false) => (None, None),
                };
                vec![
                    ("id".to_owned(), Some(i.to_string())),
                    ("a".to_owned(), a),
                    ("b".to_owned(), b),
                ]
            })
            .collect();
        expected.sort();
        assert_eq!(stored, expected, "round {round}");
        pool.close().await;
        su.batch_execute(&format!("DROP TABLE p; DROP ROLE \"{role}\""))
            .await
            .unwrap();
    }
}
