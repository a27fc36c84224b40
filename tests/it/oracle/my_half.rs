//! The MariaDB half: renders a case as MariaDB DDL and SQL, runs the burst
//! through `batchpool::mysql::Pool` into table A and the same statements one
//! by one through a plain `mysql_async::Conn` (same options, so the same
//! session settings) into table B, and reads both back.

use std::collections::HashMap;
use std::time::Instant;

use batchpool::BatchConfig;
use batchpool::mysql::{Outcome, Pool};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Params, Row, Value};

use super::burst;
use super::common::backend::my_tcp_opts;
use super::keyed::*;
use super::model::*;

/// The session setting of a non-strict case, for the pool and the plain
/// driver alike. As `init` it runs when a connection opens; as `setup` also
/// after `COM_RESET_CONNECTION` (which batchpool sends when a connection
/// lent by `Pool::get` comes back).
pub const NON_STRICT: &str = "SET SESSION sql_mode = ''";

/// Connection options of a case: the URL's, plus `sql_mode = ''` when not
/// strict.
pub fn opts(url: &str, strict: bool) -> OptsBuilder {
    let opts = my_tcp_opts(url);
    if strict {
        opts
    } else {
        opts.init(vec![NON_STRICT]).setup(vec![NON_STRICT])
    }
}

pub fn params(values: Vec<V>) -> Params {
    if values.is_empty() {
        return Params::Empty;
    }
    Params::Positional(
        values
            .into_iter()
            .map(|v| match v {
                V::Int(i) => Value::Int(i),
                V::Text(s) => Value::Bytes(s.into_bytes()),
                V::Null => Value::NULL,
            })
            .collect(),
    )
}

fn cell(v: &Value) -> Option<String> {
    match v {
        Value::NULL => None,
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        other => Some(other.as_sql(true)),
    }
}

pub fn cells(row: &Row) -> Vec<Option<String>> {
    (0..row.len())
        .map(|i| row.as_ref(i).and_then(cell))
        .collect()
}

pub fn plain_err(e: &mysql_async::Error) -> Obs {
    match e {
        mysql_async::Error::Server(s) => Obs::Err {
            code: Some(s.code.to_string()),
            unknown: false,
            message: s.message.clone(),
        },
        other => Obs::Err {
            code: None,
            unknown: false,
            message: other.to_string(),
        },
    }
}

pub fn pool_obs(r: Result<Outcome, batchpool::Error>) -> Obs {
    match r {
        Ok(o) => Obs::Ok {
            affected: o.rows_affected(),
            exact: o.is_exact(),
            id: o.last_insert_id().filter(|&id| id != 0),
            returned: o.returned().map(cells),
        },
        Err(e) => {
            let server = e.as_mysql_error();
            Obs::Err {
                code: server.map(|s| s.code.to_string()),
                unknown: e.is_outcome_unknown(),
                message: server.map_or_else(|| e.to_string(), |s| s.message.clone()),
            }
        }
    }
}

pub async fn connect(url: &str, strict: bool) -> Conn {
    Conn::new(opts(url, strict))
        .await
        .expect("plain driver connection")
}

/// Every row of `sql` (text protocol).
pub async fn text_rows(conn: &mut Conn, sql: &str) -> Rows {
    match conn.query::<Row, _>(sql).await {
        Ok(rows) => rows.iter().map(cells).collect(),
        Err(e) => panic!("{sql}: {e}"),
    }
}

fn ty_sql(c: &Col) -> String {
    let mut s = match c.ty {
        Ty::SmallInt => "SMALLINT".to_string(),
        Ty::Int => "INT".to_string(),
        Ty::BigInt => "BIGINT".to_string(),
        Ty::Text => "TEXT".to_string(),
        Ty::Varchar(n) => format!("VARCHAR({n})"),
        Ty::Char(n) => format!("CHAR({n})"),
        Ty::Enum => "ENUM('red', 'green', 'blue')".to_string(),
    };
    if c.narrow {
        s.push_str(" CHARACTER SET utf8mb3");
    }
    s
}

fn lit(v: &V) -> String {
    match v {
        V::Int(i) => i.to_string(),
        V::Text(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''")),
        V::Null => "NULL".to_string(),
    }
}

/// The statements that create table `t` of `case` (with its side table and
/// triggers).
pub fn ddl(case: &Case, t: &str) -> Vec<String> {
    let mut defs = Vec::new();
    if case.serial_id {
        defs.push("id BIGINT AUTO_INCREMENT PRIMARY KEY".to_string());
    }
    defs.push("tag INT NOT NULL".to_string());
    for c in &case.cols {
        let mut d = format!("{} {}", c.name, ty_sql(c));
        if c.not_null && c.key != KeyKind::Primary {
            d.push_str(" NOT NULL");
        }
        if let Some(v) = &c.default {
            d.push_str(&format!(" DEFAULT {}", lit(v)));
        }
        d.push_str(match c.key {
            KeyKind::Unique => " UNIQUE",
            KeyKind::Primary => " PRIMARY KEY",
            KeyKind::No => "",
        });
        match c.check {
            Some(Check::Between(lo, hi)) => {
                d.push_str(&format!(" CHECK ({} BETWEEN {lo} AND {hi})", c.name))
            }
            Some(Check::NotBad) => d.push_str(&format!(" CHECK ({} <> 'bad')", c.name)),
            None => {}
        }
        defs.push(d);
    }
    let mut out = vec![format!(
        "CREATE TABLE {t} ({}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        defs.join(", ")
    )];

    let tr = &case.triggers;
    let key = case
        .key_col()
        .map_or("NULL".to_string(), |k| format!("NEW.{}", k.name));
    if let Some(audit) = tr.audit {
        let engine = if audit == Audit::After {
            "InnoDB"
        } else {
            "MyISAM"
        };
        out.push(format!(
            "CREATE TABLE {t}_audit (tag INT, k VARCHAR(100)) ENGINE={engine} DEFAULT CHARSET=utf8mb4"
        ));
    }
    let mut before = String::new();
    if let Some((m, r, errno)) = tr.raise {
        let errno = errno.map_or(String::new(), |n| format!(", MYSQL_ERRNO = {n}"));
        before.push_str(&format!(
            "IF NEW.tag MOD {m} = {r} THEN SIGNAL SQLSTATE '45000' \
             SET MESSAGE_TEXT = 'refused by trigger'{errno}; END IF; "
        ));
    }
    if tr.lower_key {
        before.push_str(&format!("SET {key} = LOWER({key}); "));
    }
    if tr.audit == Some(Audit::BeforeMyIsam) {
        before.push_str(&format!("INSERT INTO {t}_audit VALUES (NEW.tag, {key}); "));
    }
    if !before.is_empty() {
        out.push(format!(
            "CREATE TRIGGER {t}_bi BEFORE INSERT ON {t} FOR EACH ROW BEGIN {before}END"
        ));
    }
    if matches!(tr.audit, Some(Audit::After | Audit::AfterMyIsam)) {
        out.push(format!(
            "CREATE TRIGGER {t}_ai AFTER INSERT ON {t} FOR EACH ROW \
             INSERT INTO {t}_audit VALUES (NEW.tag, {key})"
        ));
    }
    out
}

/// The single-row statement every caller runs against table `t`.
pub fn insert_sql(case: &Case, t: &str) -> String {
    let mut names = vec!["tag".to_string()];
    let mut values = vec!["?".to_string()];
    let mut sets = vec!["tag = VALUES(tag)".to_string()];
    let key = case.key_col().map(|k| k.name.clone());
    for c in &case.cols {
        match c.fill {
            Use::Omitted => continue,
            Use::DefaultKw => values.push("DEFAULT".to_string()),
            Use::Param => {
                values.push("?".to_string());
                if Some(&c.name) != key.as_ref() {
                    sets.push(format!("{0} = VALUES({0})", c.name));
                }
            }
        }
        names.push(c.name.clone());
    }
    let head = match case.verb {
        Verb::Ignore => "INSERT IGNORE INTO",
        Verb::Replace => "REPLACE INTO",
        _ => "INSERT INTO",
    };
    let mut sql = format!(
        "{head} {t} ({}) VALUES ({})",
        names.join(", "),
        values.join(", ")
    );
    match case.verb {
        Verb::Insert | Verb::Ignore | Verb::Replace => {}
        Verb::Odku => sql.push_str(&format!(" ON DUPLICATE KEY UPDATE {}", sets.join(", "))),
        Verb::OdkuNoop => sql.push_str(" ON DUPLICATE KEY UPDATE tag = tag"),
        Verb::OdkuCond => {
            sql.push_str(" ON DUPLICATE KEY UPDATE tag = IF(tag MOD 2 = 0, VALUES(tag), tag)")
        }
        other => panic!("{other:?} is not MariaDB"),
    }
    if !case.returning.is_empty() {
        sql.push_str(&format!(" RETURNING {}", case.returning.join(", ")));
    }
    sql
}

fn pre_sql(case: &Case, t: &str) -> String {
    let names = case.names();
    let values = vec!["?"; names.len()];
    format!(
        "INSERT INTO {t} ({}) VALUES ({})",
        names.join(", "),
        values.join(", ")
    )
}

/// One statement through the plain driver, in autocommit.
///
/// MariaDB does not count the rows of an `INSERT ... RETURNING` (the driver
/// reports 0 affected rows, `ROW_COUNT()` is -1): for those the count
/// compared is the number of rows the statement returned, which is also
/// what batchpool reports when it runs the statement on its own.
pub async fn plain_obs(conn: &mut Conn, sql: &str, values: Vec<V>, returning: bool) -> Obs {
    match conn.exec::<Row, _, _>(sql, params(values)).await {
        Ok(rows) => Obs::Ok {
            affected: if returning {
                rows.len() as u64
            } else {
                conn.affected_rows()
            },
            exact: true,
            id: conn.last_insert_id().filter(|&id| id != 0),
            returned: rows.first().map(cells),
        },
        Err(e) => plain_err(&e),
    }
}

async fn ids(conn: &mut Conn, case: &Case, t: &str) -> HashMap<String, String> {
    if !case.serial_id {
        return HashMap::new();
    }
    text_rows(conn, &format!("SELECT tag, id FROM {t}"))
        .await
        .into_iter()
        .filter_map(|r| Some((r[0].clone()?, r[1].clone()?)))
        .collect()
}

/// Runs `case` with tables `<prefix>a` (batchpool) and `<prefix>b` (plain
/// driver) in the database of `url`.
pub async fn run(url: &str, case: &Case, prefix: &str) -> Verdict {
    run_nodes(&[url.to_string()], case, prefix).await
}

/// What is compared on each node of a cluster, by node.
const NODE_CONTENTS: [&str; 3] = [
    "table contents on node 1",
    "table contents on node 2",
    "table contents on node 3",
];
const NODE_AUDIT: [&str; 3] = [
    "audit rows on node 1",
    "audit rows on node 2",
    "audit rows on node 3",
];
const NODE_IDS: [&str; 3] = [
    "ids of the pool's table on node 1, against node 1",
    "ids of the pool's table on node 2, against node 1",
    "ids of the pool's table on node 3, against node 1",
];

/// [`run`] on the nodes of a cluster (`urls`, at most three, the same
/// database on each): the pool and the plain driver write through the
/// first node, and both tables are read back on every node, once it has
/// applied every write set it received (`wsrep_sync_wait`), each node's
/// compared on its own; the ids stored in the pool's table must be the
/// same on every node.
pub async fn run_nodes(urls: &[String], case: &Case, prefix: &str) -> Verdict {
    assert!(!urls.is_empty() && urls.len() <= NODE_CONTENTS.len());
    let url = urls[0].as_str();
    let started = Instant::now();
    let mut conn = connect(url, case.strict).await;
    let (ta, tb) = (format!("{prefix}a"), format!("{prefix}b"));
    for t in [&ta, &tb] {
        for stmt in ddl(case, t) {
            if let Err(e) = conn.query_drop(&stmt).await {
                panic!("case `{}`: {stmt}: {e}", case.name);
            }
        }
        let pre = pre_sql(case, t);
        for row in &case.pre {
            if let Err(e) = conn.exec_drop(&pre, params(row.clone())).await {
                panic!("case `{}`: {pre} {}: {e}", case.name, show_values(row));
            }
        }
    }
    let (sql_a, sql_b) = (insert_sql(case, &ta), insert_sql(case, &tb));

    let pool = Pool::from_opts(opts(url, case.strict))
        .max_size(case.pool_size)
        .batching(BatchConfig::default().enabled(case.coalesce))
        .bulk_threshold(bulk_threshold(case))
        .build()
        .expect("build pool");
    let before = pool.stats();
    let mut holds = Vec::new();
    if case.start == Start::Held {
        let _ = pool.explain(&sql_a).await;
        for _ in 0..case.pool_size {
            holds.push(pool.get().await.expect("hold a pooled connection"));
        }
    }
    let calls: Vec<_> = case
        .burst
        .iter()
        .map(|row| {
            let (pool, sql, ps) = (pool.clone(), sql_a.clone(), params(case.bound(row)));
            async move { pool_obs(pool.execute(&sql, ps).await) }
        })
        .collect();
    let watched = pool.clone();
    let batchpool = burst(
        calls,
        case.start,
        move || (watched.stats().queued as usize, watched.status().waiting),
        move || drop(holds),
    )
    .await;
    let after = pool.stats();
    pool.close().await;

    let mut plain = Vec::new();
    for row in &case.burst {
        plain.push(
            plain_obs(
                &mut conn,
                &sql_b,
                case.bound(row),
                !case.returning.is_empty(),
            )
            .await,
        );
    }

    let cols = case.names().join(", ");
    let mut tables = Vec::new();
    if urls.len() == 1 {
        tables.push(Table {
            what: "table contents",
            batchpool: text_rows(&mut conn, &format!("SELECT {cols} FROM {ta}")).await,
            plain: text_rows(&mut conn, &format!("SELECT {cols} FROM {tb}")).await,
        });
        if case.triggers.audit.is_some() {
            tables.push(Table {
                what: "audit rows",
                batchpool: text_rows(&mut conn, &format!("SELECT tag, k FROM {ta}_audit")).await,
                plain: text_rows(&mut conn, &format!("SELECT tag, k FROM {tb}_audit")).await,
            });
        }
    } else {
        let ids_here = if case.serial_id {
            text_rows(&mut conn, &format!("SELECT tag, id FROM {ta}")).await
        } else {
            Vec::new()
        };
        for (i, node_url) in urls.iter().enumerate() {
            let mut node = connect(node_url, case.strict).await;
            // Reads see every write set the node has received.
            node.query_drop("SET SESSION wsrep_sync_wait = 1")
                .await
                .expect("wsrep_sync_wait");
            tables.push(Table {
                what: NODE_CONTENTS[i],
                batchpool: text_rows(&mut node, &format!("SELECT {cols} FROM {ta}")).await,
                plain: text_rows(&mut node, &format!("SELECT {cols} FROM {tb}")).await,
            });
            if case.triggers.audit.is_some() {
                tables.push(Table {
                    what: NODE_AUDIT[i],
                    batchpool: text_rows(&mut node, &format!("SELECT tag, k FROM {ta}_audit"))
                        .await,
                    plain: text_rows(&mut node, &format!("SELECT tag, k FROM {tb}_audit")).await,
                });
            }
            if case.serial_id {
                tables.push(Table {
                    what: NODE_IDS[i],
                    batchpool: text_rows(&mut node, &format!("SELECT tag, id FROM {ta}")).await,
                    plain: ids_here.clone(),
                });
            }
            let _ = node.disconnect().await;
        }
    }
    let seen = Seen {
        ddl: ddl(case, &ta),
        sql: sql_a,
        batchpool,
        plain,
        tables,
        ids_promised: urls.len() > 1,
        ids_batchpool: ids(&mut conn, case, &ta).await,
        ids_plain: ids(&mut conn, case, &tb).await,
        delta: Delta {
            batches: after.batches - before.batches,
            statements: after.statements - before.statements,
            rows: after.rows - before.rows,
            passthrough: after.passthrough - before.passthrough,
            split: after.split_statements - before.split_statements,
            pipelined: after.pipelined_statements - before.pipelined_statements,
            bulk: after.bulk_statements - before.bulk_statements,
        },
        elapsed: started.elapsed(),
    };
    let _ = conn.disconnect().await;
    judge(case, &seen)
}

/// Half of the cases (by their name) send every multi-row flush of a plain
/// shape as MariaDB's bulk command where it may go, the other half never
/// use it: both paths meet the plain driver.
fn bulk_threshold(case: &Case) -> Option<usize> {
    if super::common::backend::plain_paths() {
        return None;
    }
    let hash = case.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (hash % 2 == 0).then_some(2)
}

// ---------------------------------------------------------------------------
// Keyed cases (MariaDB runs each statement on its own: they must match all
// the same).

/// The column type of a key of type `ty`.
fn key_type(ty: KTy) -> String {
    match ty {
        KTy::Int => "INT".to_string(),
        KTy::BigInt => "BIGINT".to_string(),
        KTy::Text | KTy::Citext => "VARCHAR(64)".to_string(),
        KTy::Varchar(n) => format!("VARCHAR({n})"),
        KTy::Uuid => "UUID".to_string(),
        KTy::UuidText => "CHAR(36)".to_string(),
        KTy::Numeric => "DECIMAL(14,4)".to_string(),
        KTy::Char(n) => format!("CHAR({n})"),
        KTy::Ci => "VARCHAR(64) COLLATE utf8mb4_unicode_ci".to_string(),
    }
}

/// The statements that create keyed table `t` (and its log and triggers).
pub fn keyed_ddl(case: &KCase, t: &str) -> Vec<String> {
    let names = case.key_names();
    let mut defs: Vec<String> = names
        .iter()
        .zip(&case.keys)
        .map(|(k, &ty)| format!("{k} {}", key_type(ty)))
        .collect();
    defs.push("n BIGINT NOT NULL".to_string());
    defs.push("v VARCHAR(10)".to_string());
    defs.push("w INT NOT NULL CHECK (w BETWEEN 0 AND 100)".to_string());
    defs.push(format!(
        "{} ({})",
        if case.primary {
            "PRIMARY KEY"
        } else {
            "UNIQUE KEY"
        },
        names.join(", ")
    ));
    let mut out = vec![format!(
        "CREATE TABLE {t} ({}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        defs.join(", ")
    )];
    if case.log {
        let key = |row: &str| {
            let parts: Vec<String> = names.iter().map(|k| format!("{row}.{k}")).collect();
            format!("CONCAT_WS('/', {})", parts.join(", "))
        };
        out.push(format!(
            "CREATE TABLE {t}_log (op CHAR(1) NOT NULL, k VARCHAR(200)) ENGINE=InnoDB \
             DEFAULT CHARSET=utf8mb4"
        ));
        out.push(format!(
            "CREATE TRIGGER {t}_au AFTER UPDATE ON {t} FOR EACH ROW \
             INSERT INTO {t}_log VALUES ('U', {})",
            key("NEW")
        ));
        out.push(format!(
            "CREATE TRIGGER {t}_ad AFTER DELETE ON {t} FOR EACH ROW \
             INSERT INTO {t}_log VALUES ('D', {})",
            key("OLD")
        ));
    }
    out
}

/// An error observed as [`Obs`], as a keyed outcome.
fn keyed_err(obs: Obs) -> KObs {
    match obs {
        Obs::Err {
            code,
            unknown,
            message,
        } => KObs::Err {
            code,
            unknown,
            message,
        },
        ok => unreachable!("an error read as {ok}"),
    }
}

/// A keyed caller's outcome through the pool.
async fn keyed_pool_obs(pool: &Pool, how: How, sql: &str, ps: Params) -> KObs {
    let err = |e: batchpool::Error| keyed_err(pool_obs(Err(e)));
    match how {
        How::Query => match pool.query(sql, ps).await {
            Ok(rows) => KObs::Rows(rows.iter().map(cells).collect()),
            Err(e) => err(e),
        },
        How::Opt => match pool.query_opt(sql, ps).await {
            Ok(row) => KObs::Rows(row.iter().map(cells).collect()),
            Err(e) => err(e),
        },
        How::One => match pool.query_one(sql, ps).await {
            Ok(row) => KObs::Rows(vec![cells(&row)]),
            Err(e) if e.is_row_count() => KObs::NoRow,
            Err(e) => err(e),
        },
        How::Execute => match pool.execute(sql, ps).await {
            Ok(o) => KObs::Count {
                n: o.rows_affected(),
                exact: o.is_exact(),
            },
            Err(e) => err(e),
        },
    }
}

/// A keyed caller's statement through the plain driver, as
/// [`keyed_pool_obs`] shows it. A `SELECT` through `execute` counts the
/// rows it returned (MariaDB counts none; batchpool's convention).
async fn keyed_plain_obs(conn: &mut Conn, how: How, sql: &str, ps: Params) -> KObs {
    match conn.exec::<Row, _, _>(sql, ps).await {
        Ok(rows) if how == How::Execute => KObs::Count {
            n: match conn.affected_rows() {
                0 => rows.len() as u64,
                n => n,
            },
            exact: true,
        },
        Ok(rows) if how == How::One && rows.len() != 1 => KObs::NoRow,
        Ok(rows) => KObs::Rows(rows.iter().map(cells).collect()),
        Err(e) => keyed_err(plain_err(&e)),
    }
}

/// Runs keyed `case` with tables `<prefix>a` (batchpool) and `<prefix>b`
/// (plain driver) in the database of `url`.
pub async fn run_keyed(url: &str, case: &KCase, prefix: &str) -> (Verdict, KTally) {
    let started = Instant::now();
    let mut conn = connect(url, true).await;
    let (ta, tb) = (format!("{prefix}a"), format!("{prefix}b"));
    let names = case.key_names();
    let columns = format!("{}, n, v, w", names.join(", "));
    for t in [&ta, &tb] {
        for stmt in keyed_ddl(case, t) {
            if let Err(e) = conn.query_drop(&stmt).await {
                panic!("case `{}`: {stmt}: {e}", case.name);
            }
        }
    }
    // The rows before the burst into A, then copied into B.
    let places = vec!["?"; names.len() + 3];
    let pre = format!(
        "INSERT INTO {ta} ({columns}) VALUES ({})",
        places.join(", ")
    );
    for row in &case.pre {
        let mut values = row.key.clone();
        values.push(V::Int(row.n));
        values.push(row.v.clone().map_or(V::Null, V::Text));
        values.push(V::Int(row.w));
        if let Err(e) = conn.exec_drop(&pre, params(values)).await {
            panic!("case `{}`: {pre} {:?}: {e}", case.name, row);
        }
    }
    conn.query_drop(format!("INSERT INTO {tb} SELECT * FROM {ta}"))
        .await
        .expect("copy the rows before the burst");
    // `?` in the order the parameters appear.
    let rendered = |t: &str| -> Vec<(String, Vec<usize>)> {
        case.texts
            .iter()
            .map(|x| render(&x.sql, t, "DIV", |_| "?".to_string()))
            .collect()
    };
    let (texts_a, texts_b) = (rendered(&ta), rendered(&tb));
    let bind = |order: &[usize], c: &KCall| -> Params {
        params(order.iter().map(|&n| c.params[n - 1].clone()).collect())
    };

    let pool = Pool::from_opts(opts(url, true))
        .max_size(case.pool_size)
        .batching(BatchConfig::default().enabled(case.coalesce))
        .build()
        .expect("build pool");
    let mut holds = Vec::new();
    if case.start == Start::Held {
        for (sql, _) in &texts_a {
            let _ = pool.explain(sql).await;
        }
        for _ in 0..case.pool_size {
            holds.push(pool.get().await.expect("hold a pooled connection"));
        }
    }
    let before = pool.stats();
    let calls: Vec<_> = case
        .calls
        .iter()
        .map(|c| {
            let (sql, order) = &texts_a[c.text];
            let (pool, sql, ps, how) = (pool.clone(), sql.clone(), bind(order, c), c.how);
            async move { keyed_pool_obs(&pool, how, &sql, ps).await }
        })
        .collect();
    // Held: a caller of a coalescible text queues its row, any other waits
    // for a connection; once as many rows and tasks wait as there are
    // callers, all of them are in (the flushes waiting for a connection
    // may count a few too early: that only changes how rows are grouped).
    let watched = pool.clone();
    let ours = burst(
        calls,
        case.start,
        move || {
            let waiting = watched.stats().queued as usize + watched.status().waiting;
            (waiting, 0)
        },
        move || drop(holds),
    )
    .await;
    let after = pool.stats();
    let mut explained = Vec::new();
    for (sql, _) in &texts_a {
        explained.push(pool.explain(sql).await.is_ok_and(|e| e.is_coalesced()));
    }
    pool.close().await;

    // The plain driver: every read, every write in caller order, every
    // read again.
    let is_read = |c: &KCall| case.texts[c.text].role == Role::Read;
    let mut before_reads = Vec::new();
    for c in &case.calls {
        before_reads.push(if is_read(c) {
            let (sql, order) = &texts_b[c.text];
            Some(keyed_plain_obs(&mut conn, c.how, sql, bind(order, c)).await)
        } else {
            None
        });
    }
    let mut plain: Vec<Option<KObs>> = vec![None; case.calls.len()];
    for pass in [false, true] {
        for (i, c) in case.calls.iter().enumerate() {
            if is_read(c) == pass {
                let (sql, order) = &texts_b[c.text];
                plain[i] = Some(keyed_plain_obs(&mut conn, c.how, sql, bind(order, c)).await);
            }
        }
    }

    let keys: Vec<String> = names.iter().map(|k| format!("CAST({k} AS CHAR)")).collect();
    let read_back = format!("SELECT {}, n, v, w FROM ", keys.join(", "));
    let mut tables = vec![Table {
        what: "table contents",
        batchpool: text_rows(&mut conn, &format!("{read_back}{ta}")).await,
        plain: text_rows(&mut conn, &format!("{read_back}{tb}")).await,
    }];
    if case.log {
        tables.push(Table {
            what: "log rows",
            batchpool: text_rows(&mut conn, &format!("SELECT op, k FROM {ta}_log")).await,
            plain: text_rows(&mut conn, &format!("SELECT op, k FROM {tb}_log")).await,
        });
    }
    let _ = conn.disconnect().await;
    let seen = KSeen {
        ddl: keyed_ddl(case, &ta),
        texts: texts_a.into_iter().map(|(sql, _)| sql).collect(),
        pool: ours,
        plain: plain
            .into_iter()
            .map(|o| o.expect("every caller"))
            .collect(),
        before: before_reads,
        generic: vec![None; case.calls.len()],
        tables,
        explained: Some(explained),
        delta: Delta {
            batches: after.batches - before.batches,
            statements: after.statements - before.statements,
            rows: after.rows - before.rows,
            passthrough: after.passthrough - before.passthrough,
            split: after.split_statements - before.split_statements,
            pipelined: after.pipelined_statements - before.pipelined_statements,
            bulk: after.bulk_statements - before.bulk_statements,
        },
        elapsed: started.elapsed(),
    };
    judge_keyed(case, &seen)
}
