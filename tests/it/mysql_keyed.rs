//! Keyed reads and deletes on MariaDB: concurrent callers' point reads
//! `SELECT <list> FROM t WHERE key = ? [AND ...]` of one text, coalesced
//! into one statement of the callers' conditions joined by `OR` (a base
//! table) or of their own statements joined by `UNION ALL` (a view), each
//! caller getting exactly what its own statement gets run alone: its rows
//! (none, one or several), its count, its error; the same for keyed
//! `DELETE`s and `UPDATE`s. Each test compares
//! the pool's answers with the plain driver's (a mysql_async connection on
//! the server itself running the same statement, on the same or a twin
//! table), value by value and column name by column name, or with a result
//! computed from the calls, then checks what the pool coalesced
//! (`Pool::explain`, `Pool::stats`). The PostgreSQL side is `pg_keyed.rs`.

use batchpool::mysql::Pool;
use batchpool::{BatchConfig, NotCoalesced, Stats};
use futures_util::future::join_all;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Row, Value};

use crate::common::backend::{My, TestBackend};

/// A fresh database in which `ddl` ran (on the server itself, any number
/// of statements): a pool of 4 connections with `config`, the plain
/// driver's connection, and the database's URL.
async fn setup(ddl: &str, config: BatchConfig) -> (Pool, Conn, String) {
    let url = My::fresh_db().await;
    let mut admin = My::admin(&url).await;
    admin
        .query_drop(ddl)
        .await
        .unwrap_or_else(|e| panic!("{ddl}: {e}"));
    (My::pool(&url, config, 4), admin, url)
}

/// `INSERT INTO table VALUES <rows>;` (each row a parenthesized tuple).
fn insert(table: &str, rows: impl IntoIterator<Item = String>) -> String {
    let rows: Vec<String> = rows.into_iter().collect();
    format!("INSERT INTO {table} VALUES {};", rows.join(", "))
}

/// `values` as mysql_async parameters (`Params::Empty` for none).
fn positional(values: &[Value]) -> Params {
    if values.is_empty() {
        Params::Empty
    } else {
        Params::Positional(values.to_vec())
    }
}

/// An integer parameter, or NULL.
fn int(key: Option<i64>) -> Value {
    key.map_or(Value::NULL, Value::Int)
}

/// A row as (column name, value) pairs, each value as mysql_async decoded
/// it (`Int(7)`, `Bytes("abc")`, `NULL`...), so that a value of another
/// type or another spelling differs.
type Shown = Vec<(String, String)>;

/// `value` in full, with its type (`Value`'s own `Debug` shortens strings
/// longer than 8 bytes).
fn shown(value: &Value) -> String {
    match value {
        Value::NULL => "NULL".to_owned(),
        Value::Bytes(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => format!("Bytes({text:?})"),
            Err(_) => format!("Bytes({bytes:?})"),
        },
        other => format!("{other:?}"),
    }
}

/// `row` as [`Shown`].
fn show(row: &Row) -> Shown {
    row.columns_ref()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let value = row.as_ref(i).expect("a value not taken");
            (c.name_str().into_owned(), shown(value))
        })
        .collect()
}

/// `rows` as [`Shown`], sorted (what a statement without `ORDER BY`
/// returns is a multiset).
fn show_all(rows: &[Row]) -> Vec<Shown> {
    let mut shown: Vec<Shown> = rows.iter().map(show).collect();
    shown.sort();
    shown
}

/// Which method of the pool a caller runs its statement with.
#[derive(Clone, Copy, Debug)]
enum Call {
    /// `query`.
    Query,
    /// `query_opt`.
    Opt,
    /// `query_one`.
    One,
    /// `execute`.
    Execute,
}

/// The four methods, for callers to take turns with.
const CALLS: [Call; 4] = [Call::Query, Call::Opt, Call::One, Call::Execute];

/// What a caller got.
#[derive(Debug, PartialEq)]
enum Got {
    /// `query`: the rows, sorted.
    Rows(Vec<Shown>),
    /// `query_opt`: the row, if any.
    Opt(Option<Shown>),
    /// `query_one`: the row.
    One(Shown),
    /// `execute`: the count (of a read, the rows it returned).
    Count(u64),
    /// `query_one` or `query_opt`: not a number of rows the method takes.
    RowCount,
    /// A server error's number (another error's message).
    Failed(String),
}

/// What a failed call of the pool got.
fn failed(e: &batchpool::Error) -> Got {
    if e.is_row_count() {
        Got::RowCount
    } else {
        Got::Failed(
            e.as_mysql_error()
                .map_or_else(|| e.to_string(), |m| m.code.to_string()),
        )
    }
}

/// `sql` run by a caller of `pool` with `how`.
async fn call(pool: &Pool, how: Call, sql: &str, params: &[Value]) -> Got {
    let params = positional(params);
    match how {
        Call::Query => match pool.query(sql, params).await {
            Ok(rows) => Got::Rows(show_all(&rows)),
            Err(e) => failed(&e),
        },
        Call::Opt => match pool.query_opt(sql, params).await {
            Ok(row) => Got::Opt(row.as_ref().map(show)),
            Err(e) => failed(&e),
        },
        Call::One => match pool.query_one(sql, params).await {
            Ok(row) => Got::One(show(&row)),
            Err(e) => failed(&e),
        },
        Call::Execute => match pool.execute(sql, params).await {
            Ok(out) => Got::Count(out.rows_affected()),
            Err(e) => failed(&e),
        },
    }
}

/// What the plain driver gives for `sql` run alone (a prepared statement,
/// as the pool runs a statement with parameters), as [`call`] shows it.
async fn plain(conn: &mut Conn, how: Call, sql: &str, params: &[Value]) -> Got {
    let rows: Vec<Row> = match conn.exec(sql, positional(params)).await {
        Ok(rows) => rows,
        Err(mysql_async::Error::Server(e)) => return Got::Failed(e.code.to_string()),
        Err(e) => return Got::Failed(e.to_string()),
    };
    match how {
        Call::Query => Got::Rows(show_all(&rows)),
        Call::Opt => match rows.len() {
            0 => Got::Opt(None),
            1 => Got::Opt(Some(show(&rows[0]))),
            _ => Got::RowCount,
        },
        Call::One => match rows.len() {
            1 => Got::One(show(&rows[0])),
            _ => Got::RowCount,
        },
        // A read counts the rows it returned; a write the rows it changed.
        Call::Execute if rows.is_empty() => Got::Count(conn.affected_rows()),
        Call::Execute => Got::Count(rows.len() as u64),
    }
}

/// The rows of `sql` (run on the server itself, text protocol), sorted.
async fn select(conn: &mut Conn, sql: &str) -> Vec<Shown> {
    let rows: Vec<Row> = conn
        .query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    show_all(&rows)
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

/// Runs every `(sql, how, params)` of `calls` at once through `pool`, then
/// each one by one through the plain driver, and fails unless every caller
/// got what the plain driver gets. The answers, in order.
async fn differential(
    pool: &Pool,
    admin: &mut Conn,
    calls: &[(String, Call, Vec<Value>)],
) -> Vec<Got> {
    let got = join_all(
        calls
            .iter()
            .map(|(sql, how, params)| async move { call(pool, *how, sql, params).await }),
    )
    .await;
    for ((sql, how, params), got) in calls.iter().zip(&got) {
        let expected = plain(admin, *how, sql, params).await;
        assert_eq!(*got, expected, "{sql} with {params:?} by {how:?}");
    }
    got
}

/// 640 concurrent point reads of five texts (`*`, `t.*`, columns in
/// another order, aliases, literals, arithmetic, a table alias) through
/// the four methods, keys present, missing, NULL and repeated within the
/// burst (some rows with a NULL column): each caller gets exactly the
/// values and column names the plain driver gets for its statement, and
/// the burst is coalesced. Then one `execute_many` of a read over 120 keys:
/// each row's count is the number of rows its key has, coalesced too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_get_each_callers_own_rows() {
    let (pool, mut admin, _) = setup(
        &format!(
            "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(20), n INT NOT NULL); {}",
            insert(
                "t",
                (0..300).map(|i| {
                    let v = if i % 7 == 0 {
                        "NULL".to_owned()
                    } else {
                        format!("'v{i}'")
                    };
                    format!("({i}, {v}, {})", i * 3)
                })
            )
        ),
        BatchConfig::default(),
    )
    .await;
    let texts = [
        "SELECT * FROM t WHERE id = ?",
        "SELECT v, id FROM t WHERE id = ?",
        "SELECT v AS value, n * 2 + 1 AS m, 'lit' AS tag, 7 FROM t WHERE id = ?",
        "SELECT x.id, x.n - x.id AS d FROM t x WHERE x.id = ?",
        "SELECT t.*, -n AS neg FROM t WHERE t.id = ?",
    ];
    let calls: Vec<(String, Call, Vec<Value>)> = (0..640usize)
        .map(|i| {
            // Each kind of key in runs of 20 calls: every text by every
            // method.
            let key = match (i / 20) % 10 {
                0 => None,
                1 | 2 => Some(1000 + i as i64),
                3 => Some((i % 8) as i64),
                _ => Some((i as i64 * 7) % 300),
            };
            (texts[i % 5].to_owned(), CALLS[(i / 5) % 4], vec![int(key)])
        })
        .collect();
    let before = pool.stats();
    differential(&pool, &mut admin, &calls).await;
    let after = pool.stats();

    let many = "SELECT v, id FROM t WHERE id = ?";
    let keys: Vec<i64> = (0..120)
        .map(|i| if i % 6 == 5 { 5000 + i } else { (i * 11) % 300 })
        .collect();
    let before_many = pool.stats();
    let results = pool
        .execute_many(many, keys.iter().map(|k| (*k,)))
        .await
        .unwrap();
    let after_many = pool.stats();
    assert_eq!(results.len(), keys.len());
    for (key, result) in keys.iter().zip(results) {
        let got = result.map_or_else(|e| failed(&e), |out| Got::Count(out.rows_affected()));
        let expected = plain(&mut admin, Call::Execute, many, &[Value::Int(*key)]).await;
        assert_eq!(got, expected, "execute_many of {many}: key {key}");
    }

    for sql in texts {
        assert_coalesced(&pool, sql).await;
    }
    assert_burst_coalesced("point reads", &before, &after, calls.len());
    assert_burst_coalesced("execute_many of a read", &before_many, &after_many, 120);
}

/// A key parameter, bound as the type it is written in.
#[derive(Clone, Copy, Debug)]
enum Key {
    /// A string (`Value::Bytes`).
    Text(&'static str),
    /// A signed integer.
    Int(i64),
    /// A double.
    Float(f64),
}

impl Key {
    /// The key as a parameter.
    fn value(self) -> Value {
        match self {
            Key::Text(s) => Value::from(s),
            Key::Int(i) => Value::Int(i),
            Key::Float(f) => Value::Double(f),
        }
    }
}

/// A table whose key MariaDB compares otherwise than byte for byte, and the
/// spellings callers look for its keys with.
struct LooseKey {
    /// The table's name.
    name: &'static str,
    /// The key column's type.
    ty: &'static str,
    /// The keys of its rows, as SQL string literals' contents.
    rows: &'static [&'static str],
    /// The keys callers look for: other spellings of the rows' keys, in
    /// other types, and keys of no row.
    spellings: &'static [Key],
}

/// Words spelled in other cases, with and without accents, with trailing
/// and leading spaces, `ß` and `ss`: the key spellings of the text tables.
const WORDS: &[Key] = &[
    Key::Text("abc"),
    Key::Text("ABC"),
    Key::Text("aBc"),
    Key::Text("àbc"),
    Key::Text("ÀBC"),
    Key::Text("abc "),
    Key::Text("abc   "),
    Key::Text(" abc"),
    Key::Text("abc\t"),
    Key::Text("ete"),
    Key::Text("ÉTÉ"),
    Key::Text("été"),
    Key::Text("Été  "),
    Key::Text("straße"),
    Key::Text("STRASSE"),
    Key::Text("strasse"),
    Key::Text("x y"),
    Key::Text("X Y  "),
    Key::Text("xy"),
    Key::Text("abd"),
];

/// The tables of `keys_equal_on_the_server_but_not_in_bytes`.
const LOOSE_KEYS: [LooseKey; 7] = [
    LooseKey {
        name: "general_ci_keys",
        ty: "VARCHAR(20) COLLATE utf8mb4_general_ci",
        rows: &["abc", "Straße", "été", "x y"],
        spellings: WORDS,
    },
    LooseKey {
        name: "unicode_ci_keys",
        ty: "VARCHAR(20) COLLATE utf8mb4_unicode_ci",
        rows: &["abc", "Straße", "été", "x y"],
        spellings: WORDS,
    },
    LooseKey {
        name: "bin_keys",
        ty: "VARCHAR(20) COLLATE utf8mb4_bin",
        rows: &["abc", "ABC", "été"],
        spellings: &[
            Key::Text("abc"),
            Key::Text("ABC"),
            Key::Text("abc "),
            Key::Text("ABC   "),
            Key::Text("aBc"),
            Key::Text("été"),
            Key::Text("ete"),
            Key::Text("été "),
            Key::Text("Été"),
        ],
    },
    LooseKey {
        name: "nopad_bin_keys",
        ty: "VARCHAR(20) COLLATE utf8mb4_nopad_bin",
        rows: &["abc", "abc ", "x"],
        spellings: &[
            Key::Text("abc"),
            Key::Text("abc "),
            Key::Text("abc  "),
            Key::Text("ABC"),
            Key::Text("x"),
            Key::Text("x "),
        ],
    },
    LooseKey {
        name: "integer_keys",
        ty: "BIGINT",
        rows: &["7", "70", "-3", "0"],
        spellings: &[
            Key::Text("7"),
            Key::Text("7.0"),
            Key::Text(" 7"),
            Key::Text("7 "),
            Key::Text("07"),
            Key::Text("+7"),
            Key::Text("7e0"),
            Key::Text("7.5"),
            Key::Text("70"),
            Key::Text("-3"),
            Key::Text("-3.0"),
            Key::Text("-0"),
            Key::Text("abc"),
            Key::Int(7),
            Key::Int(70),
            Key::Float(7.0),
            Key::Float(7.5),
            Key::Float(-3.0),
        ],
    },
    LooseKey {
        name: "decimal_keys",
        ty: "DECIMAL(10,3)",
        rows: &["1.5", "10", "0.001"],
        spellings: &[
            Key::Text("1.5"),
            Key::Text("1.50"),
            Key::Text("1.500"),
            Key::Text("1.5000"),
            Key::Text("1.5001"),
            Key::Text("10"),
            Key::Text("10.0"),
            Key::Text("10.000"),
            Key::Text("1e1"),
            Key::Text("0.001"),
            Key::Text("0.0010"),
            Key::Text(".001"),
            Key::Text("2"),
            Key::Int(10),
            Key::Float(1.5),
            Key::Float(0.001),
        ],
    },
    LooseKey {
        name: "fixed_char_keys",
        ty: "CHAR(8)",
        rows: &["ab", "Cd", "x y"],
        spellings: &[
            Key::Text("ab"),
            Key::Text("ab "),
            Key::Text("ab      "),
            Key::Text("AB"),
            Key::Text("Cd"),
            Key::Text("cd"),
            Key::Text("Cd  "),
            Key::Text("x y"),
            Key::Text("x y   "),
            Key::Text("zz"),
        ],
    },
];

/// Keys MariaDB compares otherwise than byte for byte: case- and
/// accent-insensitive collations (`utf8mb4_general_ci`,
/// `utf8mb4_unicode_ci`, where `ß` is `ss`), PAD SPACE (trailing spaces
/// ignored, also by `utf8mb4_bin`) against `utf8mb4_nopad_bin`, an
/// integer key looked up with strings (`'7.0'`, `' 7'`, `'abc'`) and
/// doubles, a DECIMAL key with other scales, a `CHAR(8)` key. Every
/// spelling of every table eight times, through the four methods, all in
/// one burst: each caller gets the row (and the key as stored) the plain
/// driver gets for its own statement, and the burst is coalesced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_equal_on_the_server_but_not_in_bytes() {
    let mut ddl = String::new();
    for t in &LOOSE_KEYS {
        ddl.push_str(&format!(
            "CREATE TABLE {} (k {} PRIMARY KEY, v VARCHAR(20) NOT NULL); ",
            t.name, t.ty
        ));
        ddl.push_str(&insert(
            t.name,
            t.rows
                .iter()
                .enumerate()
                .map(|(i, k)| format!("('{k}', 'row{i}')")),
        ));
    }
    let (pool, mut admin, _) = setup(&ddl, BatchConfig::default()).await;
    let read = |t: &LooseKey| format!("SELECT k, v FROM {} WHERE k = ?", t.name);
    let calls: Vec<(String, Call, Vec<Value>)> = (0..8)
        .flat_map(|round| {
            LOOSE_KEYS.iter().flat_map(move |t| {
                t.spellings
                    .iter()
                    .enumerate()
                    .map(move |(i, key)| (read(t), CALLS[(round + i) % 4], vec![key.value()]))
            })
        })
        .collect();
    let before = pool.stats();
    let got = differential(&pool, &mut admin, &calls).await;
    let after = pool.stats();
    // Some spelling found a row of each table.
    for t in &LOOSE_KEYS {
        let found = calls
            .iter()
            .zip(&got)
            .filter(|((sql, ..), got)| *sql == read(t) && matches!(got, Got::One(_)))
            .count();
        assert!(found > 0, "{}: no caller found a row", t.name);
    }
    for t in &LOOSE_KEYS {
        assert_coalesced(&pool, &read(t)).await;
    }
    assert_burst_coalesced("reads of loose keys", &before, &after, calls.len());
}

/// Non-unique keys, a table without any key (whose identical rows all come
/// back), a two-column condition matching several rows, a view and a
/// grouping view: concurrent callers through the four methods each get the
/// multiset of rows the plain driver gets for their statement (`query_one`
/// and `query_opt` the row-count error where several rows match), and the
/// burst is coalesced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_unique_keys_and_views_get_all_their_rows() {
    let (pool, mut admin, _) = setup(
        &format!(
            "CREATE TABLE nu (id BIGINT PRIMARY KEY, g BIGINT NOT NULL, n INT NOT NULL, KEY (g));
             {}
             CREATE TABLE heap (a INT, b VARCHAR(10));
             INSERT INTO heap VALUES (1, 'x'), (1, 'x'), (1, 'y'), (2, 'z'), (NULL, 'n'),
                 (3, NULL), (3, NULL);
             CREATE VIEW nv AS SELECT id, g, n * 10 AS n10 FROM nu;
             CREATE VIEW gv AS SELECT g, COUNT(*) AS c, SUM(n) AS s FROM nu GROUP BY g;",
            insert(
                "nu",
                (0..120).map(|i| {
                    let g = if i < 100 { i % 10 } else { i };
                    format!("({i}, {g}, {})", i % 3)
                })
            )
        ),
        BatchConfig::default(),
    )
    .await;
    // Each text with the parameter lists its callers use.
    let groups: Vec<Vec<Value>> = [0, 3, 3, 9, 100, 119, 500]
        .iter()
        .map(|g| vec![Value::Int(*g)])
        .chain([vec![Value::NULL]])
        .collect();
    let forms: Vec<(&str, Vec<Vec<Value>>)> = vec![
        ("SELECT id, n FROM nu WHERE g = ?", groups.clone()),
        (
            "SELECT * FROM nu WHERE g = ? AND n = ?",
            [(1, 0), (1, 2), (104, 2), (104, 0), (7, 7)]
                .iter()
                .map(|(g, n)| vec![Value::Int(*g), Value::Int(*n)])
                .collect(),
        ),
        (
            "SELECT b FROM heap WHERE a = ?",
            [1, 2, 3, 4]
                .iter()
                .map(|a| vec![Value::Int(*a)])
                .chain([vec![Value::NULL]])
                .collect(),
        ),
        (
            "SELECT h.* FROM heap h WHERE h.a = ? AND h.b = ?",
            [(1, "x"), (1, "y"), (1, "X"), (2, "z"), (3, "q")]
                .iter()
                .map(|(a, b)| vec![Value::Int(*a), Value::from(*b)])
                .collect(),
        ),
        ("SELECT id, n10 FROM nv WHERE g = ?", groups.clone()),
        (
            "SELECT * FROM nv WHERE id = ?",
            [0, 55, 119, 120]
                .iter()
                .map(|id| vec![Value::Int(*id)])
                .collect(),
        ),
        ("SELECT * FROM gv WHERE g = ?", groups.clone()),
    ];
    let calls: Vec<(String, Call, Vec<Value>)> = (0..4)
        .flat_map(|round| {
            forms.iter().flat_map(move |(sql, lists)| {
                lists.iter().enumerate().map(move |(i, params)| {
                    (sql.to_string(), CALLS[(round + i) % 4], params.clone())
                })
            })
        })
        .collect();
    let before = pool.stats();
    let got = differential(&pool, &mut admin, &calls).await;
    let after = pool.stats();
    let several = got
        .iter()
        .filter(|g| matches!(g, Got::Rows(rows) if rows.len() > 1))
        .count();
    assert!(several > 0, "some callers got several rows");
    for (sql, _) in &forms {
        assert_coalesced(&pool, sql).await;
    }
    assert_burst_coalesced(
        "reads of non-unique keys and views",
        &before,
        &after,
        calls.len(),
    );
}

/// Select-list items that fail for some rows only: MariaDB raises 1690
/// (`BIGINT UNSIGNED value is out of range`) for `u - 100` where `u` is
/// below 100, and for a signed product that overflows, whatever the SQL
/// mode (`1 DIV 0` and `v / 0` give NULL in a SELECT, not an error). Under
/// concurrency, the callers whose row fails get 1690, a caller of a
/// non-unique key gets it when any of its rows fails, callers of keys of
/// no row get no rows, and all others their rows: each what the plain
/// driver gets. The texts are coalesced and the failures stay with their
/// callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_row_errors_stay_with_their_callers() {
    let (pool, mut admin, _) = setup(
        &format!(
            "CREATE TABLE e (id BIGINT PRIMARY KEY, g INT NOT NULL, u BIGINT UNSIGNED NOT NULL,
                             v BIGINT NOT NULL, KEY (g));
             {}",
            insert(
                "e",
                (0..200).map(|i| format!("({i}, {}, {}, {})", i % 20, i * 3, i % 7 - 3))
            )
        ),
        BatchConfig::default(),
    )
    .await;
    let texts = [
        // Fails where id < 34.
        "SELECT id, u - 100 AS rest FROM e WHERE id = ?",
        // Fails where v is 2, 3 or -3 (-2 * 2^62 = -2^63 fits).
        "SELECT id, v * 4611686018427387904 AS big FROM e WHERE id = ?",
        // Fails where a row of the group has id < 10: the groups g < 10.
        "SELECT g, id, u - 30 AS rest FROM e WHERE g = ?",
    ];
    let calls: Vec<(String, Call, Vec<Value>)> = (0..420usize)
        .map(|i| {
            let text = i % 3;
            let key = match (text, i % 13) {
                (_, 0) => 7000 + i as i64,
                (2, _) => (i % 22) as i64,
                _ => ((i * 7) % 200) as i64,
            };
            (
                texts[text].to_owned(),
                CALLS[(i / 3) % 4],
                vec![Value::Int(key)],
            )
        })
        .collect();
    let before = pool.stats();
    let got = differential(&pool, &mut admin, &calls).await;
    let after = pool.stats();
    let errors = got
        .iter()
        .filter(|g| matches!(g, Got::Failed(code) if code == "1690"))
        .count();
    let answered = got
        .iter()
        .filter(|g| !matches!(g, Got::Failed(_) | Got::RowCount))
        .count();
    assert!(
        errors >= 50 && answered >= 200,
        "{errors} callers got 1690 and {answered} their rows or counts"
    );
    for sql in texts {
        assert_coalesced(&pool, sql).await;
    }
    let rows = after.rows - before.rows;
    assert!(
        rows * 5 >= calls.len() as u64 * 4,
        "of {} calls {rows} were coalesced",
        calls.len()
    );
}

/// 64 tasks, each ten times: update its own row and read it back, insert a
/// new row and read that, and every fifth round delete it and read it
/// again: every read sees what its task was just told was written, and the
/// table ends as computed. All of it is coalesced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_read_their_own_writes() {
    let (pool, mut admin, _) = setup(
        &format!(
            "CREATE TABLE rw (id BIGINT PRIMARY KEY, v BIGINT NOT NULL); {}",
            insert("rw", (0..64).map(|i| format!("({i}, 0)")))
        ),
        BatchConfig::default(),
    )
    .await;
    const UPDATE: &str = "UPDATE rw SET v = ? WHERE id = ?";
    const READ: &str = "SELECT v FROM rw WHERE id = ?";
    const INSERT: &str = "INSERT INTO rw (id, v) VALUES (?, ?)";
    const READ_ROW: &str = "SELECT id, v FROM rw WHERE id = ?";
    const DELETE: &str = "DELETE FROM rw WHERE id = ?";
    let before = pool.stats();
    let tasks: Vec<_> = (0..64i64)
        .map(|task| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let read_row = |id: i64| {
                    let pool = pool.clone();
                    async move {
                        let row = pool.query_opt(READ_ROW, (id,)).await.unwrap();
                        row.map(|r| (r.get::<i64, _>(0).unwrap(), r.get::<i64, _>(1).unwrap()))
                    }
                };
                for round in 0..10i64 {
                    let v = task * 1000 + round + 1;
                    let out = pool.execute(UPDATE, (v, task)).await.unwrap();
                    assert_eq!(out.rows_affected(), 1, "task {task} round {round}");
                    let seen: i64 = pool.query_one(READ, (task,)).await.unwrap().get(0).unwrap();
                    assert_eq!(seen, v, "task {task} round {round}: its own update");
                    let id = 10_000 + task * 100 + round;
                    let out = pool.execute(INSERT, (id, v)).await.unwrap();
                    assert_eq!(out.rows_affected(), 1, "insert of {id}");
                    assert_eq!(read_row(id).await, Some((id, v)), "the row it inserted");
                    if round % 5 == 4 {
                        let out = pool.execute(DELETE, (id,)).await.unwrap();
                        assert_eq!(out.rows_affected(), 1, "delete of {id}");
                        assert_eq!(read_row(id).await, None, "the row it deleted");
                    }
                }
            })
        })
        .collect();
    for task in join_all(tasks).await {
        task.unwrap();
    }
    let after = pool.stats();
    let stored: Vec<(i64, i64)> = admin
        .query("SELECT id, v FROM rw ORDER BY id")
        .await
        .unwrap();
    let mut expected: Vec<(i64, i64)> = (0..64).map(|t| (t, t * 1000 + 10)).collect();
    for task in 0..64 {
        for round in (0..10).filter(|r| r % 5 != 4) {
            expected.push((10_000 + task * 100 + round, task * 1000 + round + 1));
        }
    }
    expected.sort();
    assert_eq!(stored, expected);
    for sql in [UPDATE, INSERT, READ, READ_ROW, DELETE] {
        assert_coalesced(&pool, sql).await;
    }
    assert_burst_coalesced("reads after writes", &before, &after, 64 * (10 * 4 + 2 + 2));
}

/// The tables of `other_forms_run_on_their_own`, prefixed with `p`: each
/// test database has them twice, `pool_…` for the pool and `plain_…` for
/// the plain driver.
fn other_forms_ddl(p: &str) -> String {
    format!(
        "CREATE TABLE {p}t (id BIGINT PRIMARY KEY, n BIGINT NOT NULL, v VARCHAR(20)); {}
         CREATE TABLE {p}nu (id BIGINT PRIMARY KEY, g BIGINT NOT NULL, n BIGINT NOT NULL,
                             KEY (g)); {}",
        insert(
            &format!("{p}t"),
            (0..100).map(|i| format!("({i}, {}, 'v{i}')", i * 10))
        ),
        insert(
            &format!("{p}nu"),
            (0..100).map(|i| format!("({i}, {}, {i})", i % 10))
        ),
    )
}

/// The tables [`other_forms_ddl`] makes.
const OTHER_FORMS_TABLES: [&str; 2] = ["t", "nu"];

/// Forms outside the point read run on their own (`Pool::explain` says
/// so) and their callers get what the plain driver gives on twin tables:
/// `ORDER BY`, `LIMIT`, `FOR UPDATE`, `LOCK IN SHARE MODE`, function calls
/// in the select list, a subquery, `IN (?, ?)`, `OR`, a range, `GROUP BY`.
/// Keyed UPDATEs (on a unique key) and DELETEs are coalesced, each caller's
/// count what the plain driver counts one by one, and the tables end up the
/// same; an UPDATE on a non-unique key runs on its own. A pool with
/// `reads(false)` runs reads on their own (and still coalesces INSERTs);
/// nothing is coalesced inside `Pool::begin` transactions or on a
/// `Pool::get` connection. The plain point read of the same table is
/// coalesced. `DISTINCT` and a key written `? = id` may go either way:
/// their results are compared, whether they are coalesced is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_forms_run_on_their_own() {
    let (pool, mut admin, url) = setup(
        &format!("{}{}", other_forms_ddl("pool_"), other_forms_ddl("plain_")),
        BatchConfig::default(),
    )
    .await;
    let point = |k: i64| vec![k];
    let keys = [0i64, 5, 5, 42, 99, 500];
    // (SQL with `{p}` for the prefix, how it is called, parameter lists).
    let reads: Vec<(&str, Call, Vec<Vec<i64>>)> = vec![
        (
            "SELECT id, v FROM {p}t WHERE id = ? ORDER BY id",
            Call::Query,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, v FROM {p}t WHERE id = ? LIMIT 1",
            Call::Opt,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, v FROM {p}t WHERE id = ? FOR UPDATE",
            Call::Query,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, n FROM {p}t WHERE id = ? LOCK IN SHARE MODE",
            Call::Opt,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, UPPER(v) AS up, CONCAT(v, '!') AS loud FROM {p}t WHERE id = ?",
            Call::One,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, (SELECT COUNT(*) FROM {p}t) AS total FROM {p}t WHERE id = ?",
            Call::Query,
            keys.map(point).to_vec(),
        ),
        (
            "SELECT id, v FROM {p}t WHERE id IN (?, ?)",
            Call::Query,
            vec![vec![1, 2], vec![2, 2], vec![3, 300], vec![400, 401]],
        ),
        (
            "SELECT id, v FROM {p}t WHERE id = ? OR id = ?",
            Call::Execute,
            vec![vec![1, 2], vec![2, 1], vec![3, 300], vec![400, 401]],
        ),
        (
            "SELECT id, n FROM {p}t WHERE id > ?",
            Call::Query,
            vec![vec![95], vec![99], vec![500]],
        ),
        (
            "SELECT g, COUNT(*) AS c, SUM(n) AS s FROM {p}nu WHERE g = ? GROUP BY g",
            Call::Opt,
            vec![vec![3], vec![3], vec![11]],
        ),
    ];
    let either: Vec<(&str, Call, Vec<Vec<i64>>)> = vec![
        (
            "SELECT DISTINCT g FROM {p}nu WHERE g = ?",
            Call::Query,
            vec![vec![3], vec![4], vec![11]],
        ),
        (
            "SELECT id, v FROM {p}t WHERE ? = id",
            Call::Opt,
            keys.map(point).to_vec(),
        ),
    ];
    // Disjoint rows for each statement, so that the counts do not depend
    // on the order the callers run in (an increment always changes its
    // row).
    let writes: Vec<(&str, Call, Vec<Vec<i64>>)> = vec![
        (
            "UPDATE {p}t SET n = n + ? WHERE id = ?",
            Call::Execute,
            (0..40)
                .map(|i| vec![i % 4 + 1, if i % 7 == 6 { 1000 + i } else { i % 10 }])
                .collect(),
        ),
        (
            "DELETE FROM {p}t WHERE id = ?",
            Call::Execute,
            (50..60).chain([2000, 2001]).map(point).collect(),
        ),
        (
            "UPDATE {p}nu SET n = n + ? WHERE g = ?",
            Call::Execute,
            (0..20).map(|i| vec![i % 3 + 1, i % 6]).collect(),
        ),
        (
            "DELETE FROM {p}nu WHERE g = ? AND n = ?",
            Call::Execute,
            vec![
                vec![7, 7],
                vec![7, 17],
                vec![8, 8],
                vec![9, 10],
                vec![12, 12],
            ],
        ),
    ];
    let with = |sql: &str, p: &str| sql.replace("{p}", p);
    let params = |row: &[i64]| -> Vec<Value> { row.iter().map(|k| Value::Int(*k)).collect() };
    // Every read, then every write, all at once through the pool; one by
    // one through the plain driver.
    for forms in [&reads, &either, &writes] {
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
            let expected = plain(&mut admin, *how, &theirs, &params(row)).await;
            assert_eq!(got, expected, "{sql} with {row:?} by {how:?}");
        }
    }
    for name in OTHER_FORMS_TABLES {
        let ours = select(&mut admin, &format!("SELECT * FROM pool_{name}")).await;
        let theirs = select(&mut admin, &format!("SELECT * FROM plain_{name}")).await;
        assert_eq!(ours, theirs, "pool_{name}");
    }
    for (sql, ..) in &reads {
        assert_alone(&pool, &with(sql, "pool_")).await;
    }
    for (sql, ..) in &either {
        print_explain(&pool, &with(sql, "pool_")).await;
    }
    for (sql, ..) in &writes {
        if sql.starts_with("UPDATE") && sql.contains("WHERE g = ?") {
            assert_alone(&pool, &with(sql, "pool_")).await;
        } else {
            assert_coalesced(&pool, &with(sql, "pool_")).await;
        }
    }

    // Inside transactions and on a lent connection nothing is coalesced:
    // eight transactions at once, each reading its row, raising it, reading
    // it again and committing.
    let read = "SELECT id, n, v FROM pool_t WHERE id = ?";
    let update = "UPDATE pool_t SET n = n + ? WHERE id = ?";
    let before = pool.stats();
    let txs = (10..18i64).map(|id| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin();
            let row = tx.query_one(read, (id,)).await.unwrap();
            let n: i64 = row.get(1).unwrap();
            let out = tx.execute(update, (5, id)).await.unwrap();
            assert_eq!(out.rows_affected(), 1);
            let again: i64 = tx.query_one(read, (id,)).await.unwrap().get(1).unwrap();
            assert_eq!(again, n + 5, "row {id}: the transaction's own update");
            assert!(tx.query_opt(read, (700 + id,)).await.unwrap().is_none());
            tx.commit().await.unwrap();
            (id, n + 5)
        }
    });
    let committed = join_all(txs).await;
    {
        let mut conn = pool.get().await.unwrap();
        let rows: Vec<Row> = conn.exec(read, (2,)).await.unwrap();
        assert_eq!(rows.len(), 1);
    }
    let after = pool.stats();
    assert_eq!(
        (after.rows, after.statements),
        (before.rows, before.statements),
        "nothing coalesced in a transaction or on a lent connection"
    );
    for (id, n) in committed {
        let stored: Option<i64> = admin
            .exec_first("SELECT n FROM pool_t WHERE id = ?", (id,))
            .await
            .unwrap();
        assert_eq!(stored, Some(n), "row {id} after its transaction");
    }

    // Reads turned off: run on their own, with the same answers; INSERTs
    // are still coalesced.
    let off = My::pool(&url, BatchConfig::default().reads(false), 4);
    let explain = off.explain(read).await.unwrap();
    assert!(
        matches!(explain.reason(), Some(NotCoalesced::KindDisabled(_))),
        "{read} with reads(false): {explain}"
    );
    let keys: Vec<i64> = (0..40)
        .map(|i| if i % 9 == 0 { 900 + i } else { i })
        .collect();
    let got = join_all(keys.iter().map(|k| {
        let off = &off;
        async move { call(off, CALLS[*k as usize % 4], read, &[Value::Int(*k)]).await }
    }))
    .await;
    for (k, got) in keys.iter().zip(got) {
        let how = CALLS[*k as usize % 4];
        let expected = plain(&mut admin, how, read, &[Value::Int(*k)]).await;
        assert_eq!(
            got, expected,
            "{read} with {k} by {how:?} with reads(false)"
        );
    }
    let stats = off.stats();
    assert_eq!(stats.rows, 0, "reads(false): {stats:?}");
    assert!(stats.passthrough >= 40, "reads(false): {stats:?}");
    assert_coalesced(&off, "INSERT INTO pool_t (id, n, v) VALUES (?, ?, ?)").await;

    // The plain point read of the same table is coalesced.
    assert_coalesced(&pool, read).await;
    assert_coalesced(&pool, "SELECT id, g, n FROM pool_nu WHERE g = ?").await;
}

/// Point reads by a two-column condition written in either order
/// (`a = ? AND b = ?`, `b = ? AND a = ?`), concurrent with reads of the
/// same keys by a one-column text, keys whose `a` exists with another `b`,
/// keys of no row, repeated keys: each caller gets what the plain driver
/// gets for its statement, and the burst is coalesced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_keys_in_any_order() {
    let (pool, mut admin, _) = setup(
        &format!(
            "CREATE TABLE ck (a BIGINT, b VARCHAR(10), v BIGINT NOT NULL, PRIMARY KEY (a, b)); {}",
            insert(
                "ck",
                (0..20).flat_map(|a| ["x", "y", "z"].map(|b| format!("({a}, '{b}', {})", a * 100)))
            )
        ),
        BatchConfig::default(),
    )
    .await;
    let texts = [
        "SELECT a, b, v FROM ck WHERE a = ? AND b = ?",
        "SELECT v, b, a FROM ck WHERE b = ? AND a = ?",
    ];
    let bs = ["x", "y", "z", "w", "X"];
    let calls: Vec<(String, Call, Vec<Value>)> = (0..300usize)
        .map(|i| {
            let (a, b) = (Value::Int((i % 25) as i64), Value::from(bs[(i / 25) % 5]));
            let text = i % 3;
            let (sql, params) = match text {
                0 => (texts[0], vec![a, b]),
                1 => (texts[1], vec![b, a]),
                _ => ("SELECT * FROM ck WHERE a = ?", vec![a]),
            };
            (sql.to_owned(), CALLS[(i / 3) % 4], params)
        })
        .collect();
    let before = pool.stats();
    differential(&pool, &mut admin, &calls).await;
    let after = pool.stats();
    for sql in texts.into_iter().chain(["SELECT * FROM ck WHERE a = ?"]) {
        assert_coalesced(&pool, sql).await;
    }
    assert_burst_coalesced("composite key reads", &before, &after, calls.len());
}

/// A fresh database with `kv (id, v)` holding ids 0 to 999 (`v` is
/// `'v<id>'`) and whatever `ddl` makes after it: a pool of one connection,
/// and the plain driver's connection.
async fn kv_on_one_connection(ddl: &str) -> (Pool, Conn) {
    let url = My::fresh_db().await;
    let mut admin = My::admin(&url).await;
    admin
        .query_drop(format!(
            "CREATE TABLE kv (id BIGINT PRIMARY KEY, v VARCHAR(20) NOT NULL); {} {ddl}",
            insert("kv", (0..1000).map(|i| format!("({i}, 'v{i}')")))
        ))
        .await
        .unwrap();
    (My::pool(&url, BatchConfig::default(), 1), admin)
}

/// `Select_range` of the session behind `pool`'s one connection.
async fn range_scans(pool: &Pool) -> u64 {
    let mut conn = pool.get().await.unwrap();
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Select_range'")
        .await
        .unwrap();
    row.unwrap().1.parse().unwrap()
}

/// On a base table the callers' conditions go out joined by `OR`: the
/// server reads their keys in one range scan (the session's `Select_range`
/// counts it), and every caller gets its own row or none, also when several
/// callers ask for one key. Through a view the callers' statements are
/// joined by `UNION ALL`, each branch its own key lookup (no range scan),
/// as a view's rows need not be the same when it is read twice. One
/// connection, so every statement of the burst runs on the session read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_tables_are_read_in_one_scan_views_in_branches() {
    let (pool, mut admin) = kv_on_one_connection("CREATE VIEW kvv AS SELECT id, v FROM kv;").await;
    for (sql, range) in [
        ("SELECT v FROM kv WHERE id = ?", true),
        ("SELECT v FROM kvv WHERE id = ?", false),
    ] {
        assert_coalesced(&pool, sql).await;
        let scans = range_scans(&pool).await;
        let before = pool.stats();
        let keys: Vec<i64> = (0..60).map(|i| (i * 37) % 1100).chain([5, 5, 5]).collect();
        let calls: Vec<(String, Call, Vec<Value>)> = keys
            .iter()
            .map(|k| (sql.to_owned(), Call::Query, vec![Value::Int(*k)]))
            .collect();
        differential(&pool, &mut admin, &calls).await;
        assert_burst_coalesced(sql, &before, &pool.stats(), calls.len());
        let scanned = range_scans(&pool).await - scans;
        if range {
            assert!(scanned >= 1, "{sql}: no range scan");
        } else {
            assert_eq!(scanned, 0, "{sql}: a range scan");
        }
    }
}

/// Concurrent keyed deletes, several callers naming one row in ways the
/// server finds equal and the bytes do not (`_ci` case, `PAD SPACE`
/// trailing blanks, a number against a string key), missing keys and NULL:
/// every row that existed is counted by exactly one of the callers that
/// named it, every other caller counts 0, as their own deletes run one
/// after another would; the rows are gone and no other row is. A referenced
/// row's caller gets the foreign key's error (1451), as its own statement
/// does, and the callers beside it their counts. Tables whose deletes could
/// differ row by row run on their own (`explain` says why): a trigger, a
/// non-transactional engine, a view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_count_each_row_for_one_caller() {
    let (pool, mut admin, _) = setup(
        &format!(
            "CREATE TABLE d (k VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, n INT) ENGINE=InnoDB;
             {}
             CREATE TABLE parent (id BIGINT PRIMARY KEY) ENGINE=InnoDB;
             {}
             CREATE TABLE child (id BIGINT PRIMARY KEY, p BIGINT NOT NULL,
                 FOREIGN KEY (p) REFERENCES parent (id)) ENGINE=InnoDB;
             INSERT INTO child VALUES (1, 3), (2, 7), (3, 7);
             CREATE TABLE trig (id BIGINT PRIMARY KEY) ENGINE=InnoDB;
             INSERT INTO trig VALUES (1), (2);
             CREATE TABLE gone (id BIGINT);
             CREATE TRIGGER trig_d AFTER DELETE ON trig FOR EACH ROW INSERT INTO gone VALUES (OLD.id);
             CREATE TABLE aria (id BIGINT PRIMARY KEY) ENGINE=Aria;
             INSERT INTO aria VALUES (1), (2);
             CREATE VIEW dv AS SELECT k, n FROM d;",
            insert("d", (0..200).map(|i| format!("('k{i}', {i})"))),
            insert("parent", (0..20).map(|i| format!("({i})"))),
        ),
        BatchConfig::default(),
    )
    .await;
    const DELETE: &str = "DELETE FROM d WHERE k = ?";
    assert_coalesced(&pool, DELETE).await;

    // Each row named by up to three callers in different spellings.
    let mut calls: Vec<(usize, Value)> = Vec::new();
    for i in 0..120usize {
        let row = i % 60;
        let spelled = match i / 60 {
            0 => format!("k{row}"),
            _ if row % 3 == 0 => format!("K{row}"),
            _ if row % 3 == 1 => format!("k{row}  "),
            _ => format!("k{row}"),
        };
        calls.push((row, Value::from(spelled)));
    }
    for missing in ["nope", "k9999"] {
        calls.push((usize::MAX, Value::from(missing)));
    }
    calls.push((usize::MAX, Value::NULL));
    calls.push((usize::MAX, Value::Int(5)));
    let before = pool.stats();
    let counts = join_all(calls.iter().map(|(_, key)| {
        let pool = &pool;
        async move {
            pool.execute(DELETE, (key.clone(),))
                .await
                .unwrap_or_else(|e| panic!("{key:?}: {e}"))
                .rows_affected()
        }
    }))
    .await;
    let after = pool.stats();
    for row in 0..60usize {
        let of_row: Vec<u64> = calls
            .iter()
            .zip(&counts)
            .filter(|((r, _), _)| *r == row)
            .map(|(_, c)| *c)
            .collect();
        assert_eq!(
            of_row.iter().sum::<u64>(),
            1,
            "row k{row}: counts {of_row:?}"
        );
    }
    for ((row, key), count) in calls.iter().zip(&counts) {
        if *row == usize::MAX {
            assert_eq!(*count, 0, "{key:?} deleted a row");
        }
    }
    let left: Vec<String> = admin.query("SELECT k FROM d ORDER BY n").await.unwrap();
    let expected: Vec<String> = (60..200).map(|i| format!("k{i}")).collect();
    assert_eq!(left, expected);
    assert_burst_coalesced("keyed deletes", &before, &after, calls.len());

    // A referenced row's delete fails for its caller alone.
    const PARENT: &str = "DELETE FROM parent WHERE id = ?";
    assert_coalesced(&pool, PARENT).await;
    let ids: Vec<i64> = (0..20).collect();
    let got = join_all(ids.iter().map(|id| {
        let pool = &pool;
        async move { pool.execute(PARENT, (*id,)).await }
    }))
    .await;
    for (id, got) in ids.iter().zip(got) {
        match got {
            Err(e) if *id == 3 || *id == 7 => {
                assert_eq!(e.code(), Some("23000"), "parent {id}: {e}");
                assert!(e.to_string().contains("1451"), "parent {id}: {e}");
            }
            Ok(out) if *id != 3 && *id != 7 => assert_eq!(out.rows_affected(), 1, "parent {id}"),
            other => panic!("parent {id}: {other:?}"),
        }
    }
    let left: Vec<i64> = admin
        .query("SELECT id FROM parent ORDER BY id")
        .await
        .unwrap();
    assert_eq!(left, vec![3, 7]);

    // Run on their own, and still right.
    for (sql, why) in [
        ("DELETE FROM trig WHERE id = ?", "trigger"),
        ("DELETE FROM aria WHERE id = ?", "transactional"),
        ("DELETE FROM dv WHERE k = ?", "base table"),
    ] {
        let explain = pool.explain(sql).await.unwrap();
        assert!(!explain.is_coalesced(), "{sql}: {explain}");
        assert!(explain.to_string().contains(why), "{sql}: {explain}");
    }
    let got = join_all((1..=3i64).map(|id| {
        let pool = &pool;
        async move {
            pool.execute("DELETE FROM trig WHERE id = ?", (id,))
                .await
                .unwrap()
                .rows_affected()
        }
    }))
    .await;
    assert_eq!(got, vec![1, 1, 0]);
    let logged: Vec<i64> = admin
        .query("SELECT id FROM gone ORDER BY id")
        .await
        .unwrap();
    assert_eq!(logged, vec![1, 2]);
}

/// More callers in one statement than one mask column numbers (63): 200
/// reads and then 200 deletes queue behind the pool's one connection, held,
/// so that they go out in statements of more than 63 callers on average.
/// Each reader gets its own row (keys repeated, some missing), each row
/// deleted is counted by one of its callers, and the rows no one named are
/// left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_of_more_callers_than_one_mask_holds() {
    let (pool, mut admin) = kv_on_one_connection("").await;
    const READ: &str = "SELECT id, v FROM kv WHERE id = ?";
    const DELETE: &str = "DELETE FROM kv WHERE id = ?";
    // Keys 0..180 with every tenth named twice, and 10 missing ones.
    let keys: Vec<i64> = (0..180)
        .chain((0..180).step_by(18))
        .chain(5000..5010)
        .collect();
    assert_eq!(keys.len(), 200);
    for sql in [READ, DELETE] {
        assert_coalesced(&pool, sql).await;
        let held = pool.get().await.unwrap();
        let before = pool.stats();
        let calls = keys.iter().map(|k| {
            let pool = pool.clone();
            let k = *k;
            tokio::spawn(async move {
                if sql == READ {
                    let row = pool.query_opt(READ, (k,)).await.unwrap();
                    u64::from(row.is_some_and(|r| {
                        r.get::<i64, _>(0) == Some(k)
                            && r.get::<String, _>(1) == Some(format!("v{k}"))
                    }))
                } else {
                    pool.execute(DELETE, (k,)).await.unwrap().rows_affected()
                }
            })
        });
        let calls: Vec<_> = calls.collect();
        while pool.stats().queued < keys.len() as u64 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        drop(held);
        let mut got = Vec::new();
        for call in calls {
            got.push(call.await.unwrap());
        }
        let after = pool.stats();
        let (rows, statements) = (
            after.rows - before.rows,
            after.statements - before.statements,
        );
        assert_eq!(rows, keys.len() as u64, "{sql}: every call coalesced");
        assert!(
            statements * 63 < rows,
            "{sql}: {rows} rows in {statements} statements"
        );
        for (k, n) in keys.iter().zip(&got) {
            if *k >= 5000 {
                assert_eq!(*n, 0, "{sql}: key {k}");
            }
        }
        for k in 0..180i64 {
            let of_key: u64 = keys
                .iter()
                .zip(&got)
                .filter(|(x, _)| **x == k)
                .map(|(_, n)| n)
                .sum();
            let named = keys.iter().filter(|x| **x == k).count() as u64;
            let expected = if sql == READ { named } else { 1 };
            assert_eq!(of_key, expected, "{sql}: key {k}");
        }
    }
    let left: Vec<i64> = admin.query("SELECT id FROM kv ORDER BY id").await.unwrap();
    assert_eq!(left, (180..1000).collect::<Vec<i64>>());
}

/// The tables of `updates_count_each_callers_own_row`, prefixed with `p`:
/// `u` keyed by a case-insensitive `VARCHAR` (200 rows), `m` by a `BIGINT`
/// (100 rows).
fn updates_ddl(p: &str) -> String {
    format!(
        "CREATE TABLE {p}u (k VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY,
                            n BIGINT NOT NULL, v VARCHAR(5)) ENGINE=InnoDB; {}
         CREATE TABLE {p}m (id BIGINT PRIMARY KEY, n BIGINT NOT NULL, v VARCHAR(5)) ENGINE=InnoDB; {}",
        insert(&format!("{p}u"), (0..200).map(|i| format!("('k{i}', {i}, 'v')"))),
        insert(&format!("{p}m"), (0..100).map(|i| format!("({i}, {i}, 'v')"))),
    )
}

/// The calls of `updates_count_each_callers_own_row` on the tables
/// prefixed `p`, each `execute`. Their counts do not depend on the order
/// they run in: increments always change their row; each row that is set
/// is set by one caller.
fn update_calls(p: &str) -> Vec<(String, Call, Vec<Value>)> {
    let inc = format!("UPDATE {p}u SET n = n + ? WHERE k = ?");
    let set = format!("UPDATE {p}u SET v = ? WHERE k = ?");
    let by_id = format!("UPDATE {p}m SET n = n + ?, v = ? WHERE id = ?");
    let div = format!("UPDATE {p}m SET n = n DIV ? WHERE id = ?");
    let text = |s: String| Value::from(s);
    let mut calls = Vec::new();
    // Increments: rows k0..k59 named up to three times in spellings the
    // server finds equal (`_ci` case, PAD SPACE blanks), missing keys,
    // NULL, and a number against the text key (which the server compares
    // as numbers: 0 meets every row, in strict mode an error).
    for i in 0..150usize {
        let row = i % 60;
        let key = match i / 60 {
            0 => format!("k{row}"),
            1 if row % 3 == 0 => format!("K{row}"),
            1 if row % 3 == 1 => format!("k{row}  "),
            _ => format!("k{row}"),
        };
        calls.push((
            inc.clone(),
            Call::Execute,
            vec![Value::Int(1 + (i % 3) as i64), text(key)],
        ));
    }
    for key in [
        text("nope".into()),
        text("k9999".into()),
        Value::NULL,
        Value::Int(0),
        Value::Int(7),
    ] {
        calls.push((inc.clone(), Call::Execute, vec![Value::Int(1), key]));
    }
    // Sets of rows k100..k139, one caller each: the value already stored
    // (0 rows changed, unless rows found are counted), a new one, and once
    // one too long for the column (1406, that caller's own error).
    for i in 100..140usize {
        let v = match i % 4 {
            _ if i == 121 => "far too long".to_owned(),
            0 => "v".to_owned(),
            _ => format!("w{}", i % 100),
        };
        calls.push((
            set.clone(),
            Call::Execute,
            vec![text(v), text(format!("k{i}"))],
        ));
    }
    // Divisions of rows k150..k169, each by two callers whose keys the
    // server finds equal: one by 1 (the row keeps its value, 0 rows
    // changed), one by 3. Either order gives the same counts.
    let halve = format!("UPDATE {p}u SET n = n DIV ? WHERE k = ?");
    for i in 150..170usize {
        for (by, key) in [(1, format!("k{i}")), (3, format!("K{i}"))] {
            calls.push((
                halve.clone(),
                Call::Execute,
                vec![Value::Int(by), text(key)],
            ));
        }
    }
    // Two assignments by integer key; an integer key bound as text; a
    // division by zero (1365 in strict mode, that caller's own error).
    for i in 0..60i64 {
        let key = if i % 10 == 9 {
            text(format!("{}", i % 50))
        } else {
            Value::Int(i % 50)
        };
        calls.push((
            by_id.clone(),
            Call::Execute,
            vec![Value::Int(i), text(format!("x{}", i % 50)), key],
        ));
    }
    for i in 0..20i64 {
        calls.push((
            div.clone(),
            Call::Execute,
            vec![Value::Int(if i == 7 { 0 } else { 2 }), Value::Int(50 + i)],
        ));
    }
    calls
}

/// Runs `calls` at once through `pool`; with `hold`, on a pool of one
/// connection held until every call is queued. The answers, in order.
async fn burst(pool: &Pool, calls: Vec<(String, Call, Vec<Value>)>, hold: bool) -> Vec<Got> {
    let held = if hold {
        Some(pool.get().await.unwrap())
    } else {
        None
    };
    let queued = pool.stats().queued;
    let n = calls.len() as u64;
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|(sql, how, params)| {
            let pool = pool.clone();
            tokio::spawn(async move { call(&pool, how, &sql, &params).await })
        })
        .collect();
    if let Some(held) = held {
        while pool.stats().queued < queued + n {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        drop(held);
    }
    let mut got = Vec::new();
    for task in tasks {
        got.push(task.await.unwrap());
    }
    got
}

/// Concurrent keyed updates of four texts through a pool of 4: every
/// caller's count or error is what the plain driver gets for its own
/// statement (run one by one on twin tables), and the tables end equal.
/// Callers meet one row through keys the server finds equal and the bytes
/// do not, keys are missing or NULL, a number is compared with a text key
/// (it runs on its own), a value is already stored (0 rows changed), or
/// too long for its column, or divides by zero (those callers' own
/// errors). The same again with `client_found_rows`, which counts rows
/// found rather than changed. A burst of increments of existing distinct
/// rows goes out in few statements. Updates whose rows could differ from
/// their own statements' run on their own (`explain` says why): no unique
/// key, an assigned unique column, a function call, a trigger, a
/// non-transactional engine, a view, a key of a type not compared exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_count_each_callers_own_row() {
    for found_rows in [false, true] {
        let url = My::fresh_db().await;
        let url = if found_rows {
            format!("{url}?client_found_rows=true")
        } else {
            url
        };
        let mut admin = Conn::new(mysql_async::Opts::from_url(&url).unwrap())
            .await
            .unwrap();
        admin
            .query_drop(format!("{}{}", updates_ddl("pool_"), updates_ddl("plain_")))
            .await
            .unwrap();
        let pool = My::pool(&url, BatchConfig::default(), 4);
        // Each burst twice: the second time every row set holds its value.
        for (round, size) in [(0, 4), (1, 4), (2, 1), (3, 1)] {
            let pool = My::pool(&url, BatchConfig::default(), size);
            let ours = update_calls("pool_");
            for (sql, ..) in &ours {
                assert_coalesced(&pool, sql).await;
            }
            // A pool of one connection holds it until every call is queued,
            // so that statements carry many callers.
            let got = burst(&pool, ours, size == 1).await;
            for ((sql, how, params), got) in update_calls("plain_").iter().zip(&got) {
                let expected = plain(&mut admin, *how, sql, params).await;
                assert_eq!(
                    *got, expected,
                    "{sql} with {params:?} (client_found_rows {found_rows}, round {round})"
                );
            }
            for name in ["u", "m"] {
                let ours = select(&mut admin, &format!("SELECT * FROM pool_{name}")).await;
                let theirs = select(&mut admin, &format!("SELECT * FROM plain_{name}")).await;
                assert_eq!(ours, theirs, "pool_{name} (client_found_rows {found_rows})");
            }
        }
        // Distinct existing rows: one statement for many callers.
        let before = pool.stats();
        let calls: Vec<(String, Call, Vec<Value>)> = (0..100i64)
            .map(|i| {
                let sql = "UPDATE pool_m SET n = n + ? WHERE id = ?".to_owned();
                (sql, Call::Execute, vec![Value::Int(1), Value::Int(i)])
            })
            .collect();
        let got = join_all(calls.iter().map(|(sql, how, params)| {
            let pool = &pool;
            async move { call(pool, *how, sql, params).await }
        }))
        .await;
        assert!(got.iter().all(|g| *g == Got::Count(1)), "{got:?}");
        assert_burst_coalesced("distinct increments", &before, &pool.stats(), calls.len());
    }

    let (pool, _admin, _) = setup(
        "CREATE TABLE nu (id BIGINT PRIMARY KEY, g BIGINT NOT NULL, n BIGINT, KEY (g));
         CREATE TABLE uq (id BIGINT PRIMARY KEY, e VARCHAR(20), n BIGINT, UNIQUE KEY (e));
         CREATE TABLE trig (id BIGINT PRIMARY KEY, n BIGINT);
         CREATE TABLE log (id BIGINT);
         CREATE TRIGGER trig_u AFTER UPDATE ON trig FOR EACH ROW INSERT INTO log VALUES (NEW.id);
         CREATE TABLE aria (id BIGINT PRIMARY KEY, n BIGINT) ENGINE=Aria;
         CREATE VIEW nv AS SELECT id, n FROM uq;
         CREATE TABLE dt (at DATETIME PRIMARY KEY, n BIGINT);",
        BatchConfig::default(),
    )
    .await;
    for (sql, why) in [
        ("UPDATE nu SET n = ? WHERE g = ?", "unique index"),
        ("UPDATE uq SET e = ? WHERE id = ?", "unique index"),
        ("UPDATE uq SET n = LENGTH(?) WHERE id = ?", "function"),
        ("UPDATE trig SET n = ? WHERE id = ?", "trigger"),
        ("UPDATE aria SET n = ? WHERE id = ?", "transactional"),
        ("UPDATE nv SET n = ? WHERE id = ?", "base table"),
        ("UPDATE dt SET n = ? WHERE at = ?", "type"),
    ] {
        let explain = pool.explain(sql).await.unwrap();
        assert!(!explain.is_coalesced(), "{sql}: {explain}");
        assert!(explain.to_string().contains(why), "{sql}: {explain}");
    }
    assert_coalesced(&pool, "UPDATE uq SET n = n * ? WHERE e = ?").await;
}

/// The tables of `update_texts_of_one_family_share_statements`, prefixed
/// with `p`: 120 rows keyed by a `VARCHAR`.
fn family_ddl(p: &str) -> String {
    format!(
        "CREATE TABLE {p}fam (k VARCHAR(20) PRIMARY KEY, a VARCHAR(8), b BIGINT, c DATETIME(3),
                              d DOUBLE, e INT NOT NULL) ENGINE=InnoDB; {}",
        insert(
            &format!("{p}fam"),
            (0..120).map(|i| format!(
                "('k{i}', 'a{i}', {}, '2020-01-01 00:00:00.{i:03}', {i}.5, {i})",
                i64::MAX - i
            ))
        ),
    )
}

/// The texts of `update_texts_of_one_family_share_statements`: five that
/// set one column each to a bare placeholder (`d`, a `DOUBLE`, keeps its
/// text out of the family).
fn family_texts(p: &str) -> [String; 5] {
    ["a", "b", "c", "e", "d"].map(|c| format!("UPDATE {p}fam SET {c} = ? WHERE k = ?"))
}

/// Update texts that differ only in the column they set share one queue
/// and go out as one statement on MariaDB, each caller still getting what
/// the plain driver gets for its own statement (run one by one on a twin
/// table) and the tables ending equal: strings, integers, NULL and
/// date-times, a value already stored, a missing key, an integer into an
/// integer column and into a text one, a floating-point value (that caller
/// goes alone), a value too long or NULL into a `NOT NULL` column (those
/// callers' own errors), several texts on one row. A burst of the four
/// family texts queued behind the pool's one connection goes out in fewer
/// statements than there are texts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_texts_of_one_family_share_statements() {
    let (pool, mut admin, url) = setup(
        &format!("{}{}", family_ddl("pool_"), family_ddl("plain_")),
        BatchConfig::default(),
    )
    .await;
    let pool1 = My::pool(&url, BatchConfig::default(), 1);
    for p in [&pool, &pool1] {
        for sql in family_texts("pool_") {
            assert_coalesced(p, &sql).await;
        }
    }
    let text = |s: String| Value::from(s);
    let calls = |p: &str| -> Vec<(String, Call, Vec<Value>)> {
        let [a, b, c, e, d] = family_texts(p);
        let mut calls = Vec::new();
        for i in 0..100usize {
            let key = text(format!("k{i}"));
            let (sql, value) = match i % 5 {
                0 => (
                    &a,
                    if i == 25 {
                        text("far too long".into())
                    } else {
                        text(format!("x{i}"))
                    },
                ),
                1 => (
                    &b,
                    if i == 31 {
                        Value::Double(2.5)
                    } else {
                        Value::Int(i as i64)
                    },
                ),
                2 => (
                    &c,
                    if i == 12 {
                        Value::NULL
                    } else {
                        text(format!("2021-02-03 04:05:06.{i:03}"))
                    },
                ),
                3 => (
                    &e,
                    match i {
                        8 => Value::NULL,
                        13 => text("77".into()),
                        _ => Value::Int(i as i64 * 2),
                    },
                ),
                _ => (&d, Value::Double(i as f64 / 4.0)),
            };
            calls.push((sql.clone(), Call::Execute, vec![value, key]));
        }
        // Another text on rows `a` sets.
        for i in (0..50usize).step_by(5) {
            calls.push((
                e.clone(),
                Call::Execute,
                vec![Value::Int(-1), text(format!("k{i}"))],
            ));
        }
        // A value already stored; a missing key; an integer into `a`.
        calls.push((
            a.clone(),
            Call::Execute,
            vec![text("a100".into()), text("k100".into())],
        ));
        calls.push((
            b.clone(),
            Call::Execute,
            vec![Value::Int(1), text("nope".into())],
        ));
        calls.push((
            a.clone(),
            Call::Execute,
            vec![Value::Int(42), text("k101".into())],
        ));
        calls
    };
    for (round, pool) in [(0, &pool), (1, &pool1), (2, &pool)] {
        let got = burst(pool, calls("pool_"), round == 1).await;
        for ((sql, how, params), got) in calls("plain_").iter().zip(&got) {
            let expected = plain(&mut admin, *how, sql, params).await;
            assert_eq!(*got, expected, "{sql} with {params:?} (round {round})");
        }
        let ours = select(&mut admin, "SELECT * FROM pool_fam").await;
        let theirs = select(&mut admin, "SELECT * FROM plain_fam").await;
        let differ: Vec<_> = ours
            .iter()
            .zip(&theirs)
            .filter(|(a, b)| a != b)
            .take(5)
            .collect();
        assert!(differ.is_empty(), "round {round}: rows differ: {differ:?}");
    }
    // Clean rows, four texts, queued: fewer statements than texts.
    let [a, b, c, e, _] = family_texts("pool_");
    let clean: Vec<(String, Call, Vec<Value>)> = (0..80usize)
        .map(|i| {
            let (sql, value) = match i % 4 {
                0 => (&a, text(format!("y{i}"))),
                1 => (&b, Value::Int(-(i as i64))),
                2 => (&c, text(format!("2022-01-01 00:00:{:02}", i % 60))),
                _ => (&e, Value::Int(1000 + i as i64)),
            };
            (
                sql.clone(),
                Call::Execute,
                vec![value, text(format!("k{i}"))],
            )
        })
        .collect();
    let before = pool1.stats();
    let got = burst(&pool1, clean, true).await;
    assert!(got.iter().all(|g| *g == Got::Count(1)), "{got:?}");
    let after = pool1.stats();
    let statements = after.statements - before.statements;
    assert!(
        statements < 4,
        "80 callers of 4 texts of one family in {statements} statements"
    );
}
