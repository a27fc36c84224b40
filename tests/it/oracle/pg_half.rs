//! The PostgreSQL half: renders a case as PostgreSQL DDL and SQL, runs the
//! burst through `batchpool::postgres::Pool` into table A and the same
//! statements one by one through a plain `tokio_postgres::Client` into
//! table B, and reads both back.

use std::time::Instant;

use batchpool::BatchConfig;
use batchpool::postgres::{Outcome, Pool};
use bytes::BytesMut;
use tokio_postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, NoTls, Row, SimpleQueryMessage};

use super::burst;
use super::keyed::*;
use super::model::*;

type BoxError = Box<dyn std::error::Error + Sync + Send>;

/// A parameter, encoded with whatever type the server inferred for its
/// placeholder (so one value works bare and cast, for every column type).
#[derive(Debug)]
pub struct P(pub V);

impl ToSql for P {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match &self.0 {
            V::Null => Ok(IsNull::Yes),
            V::Int(i) => match *ty {
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT8 => i.to_sql(ty, out),
                _ => Err(format!("an integer for a {ty} parameter").into()),
            },
            V::Text(s) if *ty == Type::NUMERIC => numeric(s, out),
            V::Text(s) if *ty == Type::UUID => {
                let hex: String = s.chars().filter(char::is_ascii_hexdigit).collect();
                if hex.len() != 32 {
                    return Err(format!("{s:?} is not a uuid").into());
                }
                for at in (0..32).step_by(2) {
                    out.extend_from_slice(&[u8::from_str_radix(&hex[at..at + 2], 16)?]);
                }
                Ok(IsNull::No)
            }
            // text, varchar, bpchar, citext and enum labels are UTF-8 bytes.
            V::Text(s) => {
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A non-negative decimal written `12.50` in `numeric`'s binary form,
/// with the scale it is written with (`1.0` and `1.00` differ in bytes,
/// not on the server).
fn numeric(s: &str, out: &mut BytesMut) -> Result<IsNull, BoxError> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let int = int.trim_start_matches('0');
    // Base-10000 digits: the integer part grouped from the point leftwards,
    // the fraction rightwards.
    let int = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
    let fraction = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
    let mut digits = Vec::new();
    for chunk in int
        .as_bytes()
        .chunks(4)
        .chain(fraction.as_bytes().chunks(4))
    {
        digits.push(std::str::from_utf8(chunk)?.parse::<i16>()?);
    }
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
    out.extend_from_slice(&(digits.len() as i16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&(frac.len() as u16).to_be_bytes());
    for d in digits {
        out.extend_from_slice(&d.to_be_bytes());
    }
    Ok(IsNull::No)
}

pub fn params(values: Vec<V>) -> Vec<P> {
    values.into_iter().map(P).collect()
}

pub fn refs(ps: &[P]) -> Vec<&(dyn ToSql + Sync)> {
    ps.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

/// An enum label read as text.
struct Label(String);

impl<'a> FromSql<'a> for Label {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Label, BoxError> {
        Ok(Label(String::from_utf8_lossy(raw).into_owned()))
    }

    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), Kind::Enum(_))
    }
}

/// A value of a type without a text form in the driver (`uuid`,
/// `numeric`), as its bytes.
struct Binary(Vec<u8>);

impl<'a> FromSql<'a> for Binary {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Binary, BoxError> {
        Ok(Binary(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Column `i` of a row as text (`None` for NULL).
fn cell(row: &Row, i: usize) -> Option<String> {
    let ty = row.columns()[i].type_().clone();
    let got = match ty {
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)
            .map(|v| v.map(|x| x.to_string())),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)
            .map(|v| v.map(|x| x.to_string())),
        Type::INT8 => row
            .try_get::<_, Option<i64>>(i)
            .map(|v| v.map(|x| x.to_string())),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(i)
            .map(|v| v.map(|x| x.to_string())),
        _ if matches!(ty.kind(), Kind::Enum(_)) => {
            row.try_get::<_, Option<Label>>(i).map(|v| v.map(|l| l.0))
        }
        _ if <String as FromSql>::accepts(&ty) => row.try_get::<_, Option<String>>(i),
        _ => row.try_get::<_, Option<Binary>>(i).map(|v| {
            v.map(|b| {
                let hex: String = b.0.iter().map(|x| format!("{x:02x}")).collect();
                format!("{ty} \\x{hex}")
            })
        }),
    };
    got.unwrap_or_else(|e| Some(format!("<unreadable {ty}: {e}>")))
}

pub fn cells(row: &Row) -> Vec<Option<String>> {
    (0..row.len()).map(|i| cell(row, i)).collect()
}

/// The server's message, or the driver's text for a client-side error.
fn server_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

pub fn plain_err(e: &tokio_postgres::Error) -> Obs {
    Obs::Err {
        code: e.code().map(|c| c.code().to_string()),
        unknown: false,
        message: server_message(e),
    }
}

pub fn pool_obs(r: Result<Outcome, batchpool::Error>) -> Obs {
    match r {
        Ok(o) => Obs::Ok {
            affected: o.rows_affected(),
            exact: o.is_exact(),
            id: None,
            returned: o.returned().map(cells),
        },
        Err(e) => {
            let db = e.as_db_error();
            Obs::Err {
                code: db
                    .map(|d| d.code().code().to_string())
                    .or_else(|| e.code().map(str::to_string)),
                unknown: e.is_outcome_unknown(),
                message: db.map_or_else(|| e.to_string(), |d| d.message().to_string()),
            }
        }
    }
}

pub async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("plain driver connection");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// Every row of `sql` (simple query protocol: all columns as text).
pub async fn text_rows(client: &Client, sql: &str) -> Rows {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", server_message(&e)))
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            _ => None,
        })
        .collect()
}

fn enum_type(t: &str, c: &Col) -> String {
    format!("{t}_{}_e", c.name)
}

fn ty_sql(t: &str, c: &Col) -> String {
    match c.ty {
        Ty::SmallInt => "smallint".to_string(),
        Ty::Int => "integer".to_string(),
        Ty::BigInt => "bigint".to_string(),
        Ty::Text => "text".to_string(),
        Ty::Varchar(n) => format!("varchar({n})"),
        Ty::Char(n) => format!("char({n})"),
        Ty::Enum => enum_type(t, c),
    }
}

fn lit(v: &V) -> String {
    match v {
        V::Int(i) => i.to_string(),
        V::Text(s) => format!("'{}'", s.replace('\'', "''")),
        V::Null => "NULL".to_string(),
    }
}

/// The statements that create table `t` of `case` (with its types, side
/// tables and triggers).
pub fn ddl(case: &Case, t: &str) -> Vec<String> {
    let mut out = Vec::new();
    for c in case.cols.iter().filter(|c| c.ty == Ty::Enum) {
        out.push(format!(
            "CREATE TYPE {} AS ENUM ('red', 'green', 'blue')",
            enum_type(t, c)
        ));
    }
    let mut defs = Vec::new();
    if case.serial_id {
        defs.push("id bigserial PRIMARY KEY".to_string());
    }
    defs.push("tag integer NOT NULL".to_string());
    for c in &case.cols {
        let mut d = format!("{} {}", c.name, ty_sql(t, c));
        if c.not_null && c.key != KeyKind::Primary {
            d.push_str(" NOT NULL");
        }
        if let Some(v) = &c.default {
            d.push_str(&format!(" DEFAULT {}", lit(v)));
        }
        match c.check {
            Some(Check::Between(lo, hi)) => {
                d.push_str(&format!(" CHECK ({} BETWEEN {lo} AND {hi})", c.name))
            }
            Some(Check::NotBad) => d.push_str(&format!(" CHECK ({} <> 'bad')", c.name)),
            None => {}
        }
        d.push_str(match c.key {
            KeyKind::Unique if c.deferred => " UNIQUE DEFERRABLE INITIALLY DEFERRED",
            KeyKind::Unique => " UNIQUE",
            KeyKind::Primary => " PRIMARY KEY",
            KeyKind::No => "",
        });
        defs.push(d);
    }
    out.push(format!("CREATE TABLE {t} ({})", defs.join(", ")));

    let tr = &case.triggers;
    let key = case.key_col().map(|k| k.name.clone());
    let mut body = String::new();
    if let Some((m, r, code)) = tr.raise {
        let code = code.map_or(String::new(), |c| format!(" USING ERRCODE = '{c}'"));
        body.push_str(&format!(
            "IF NEW.tag % {m} = {r} THEN RAISE EXCEPTION 'tag % refused by trigger', NEW.tag{code}; END IF; "
        ));
    }
    if let Some((m, r)) = tr.skip {
        body.push_str(&format!(
            "IF NEW.tag % {m} = {r} THEN RETURN NULL; END IF; "
        ));
    }
    if tr.lower_key {
        let k = key.as_deref().expect("a key to lower-case");
        body.push_str(&format!("NEW.{k} := lower(NEW.{k}); "));
    }
    if !body.is_empty() {
        out.push(format!(
            "CREATE FUNCTION {t}_bi() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body}RETURN NEW; END $$"
        ));
        out.push(format!(
            "CREATE TRIGGER {t}_bi BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {t}_bi()"
        ));
    }
    if tr.audit.is_some() {
        let k = key
            .as_ref()
            .map_or("NULL".to_string(), |k| format!("NEW.{k}"));
        out.push(format!("CREATE TABLE {t}_audit (tag integer, k text)"));
        out.push(format!(
            "CREATE FUNCTION {t}_ai() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             INSERT INTO {t}_audit VALUES (NEW.tag, {k}::text); RETURN NULL; END $$"
        ));
        out.push(format!(
            "CREATE TRIGGER {t}_ai AFTER INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {t}_ai()"
        ));
    }
    if tr.per_statement {
        out.push(format!("CREATE TABLE {t}_stmt (n integer)"));
        out.push(format!(
            "CREATE FUNCTION {t}_as() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             INSERT INTO {t}_stmt VALUES (1); RETURN NULL; END $$"
        ));
        out.push(format!(
            "CREATE TRIGGER {t}_as AFTER INSERT ON {t} FOR EACH STATEMENT EXECUTE FUNCTION {t}_as()"
        ));
    }
    out
}

fn placeholder(t: &str, c: &Col, n: usize) -> String {
    if !c.cast {
        return format!("${n}");
    }
    match c.ty {
        Ty::SmallInt | Ty::Int | Ty::BigInt => format!("${n}::int8"),
        Ty::Enum => format!("${n}::text::{}", enum_type(t, c)),
        _ => format!("${n}::text"),
    }
}

/// The single-row statement every caller runs against table `t`.
pub fn insert_sql(case: &Case, t: &str) -> String {
    let mut names = vec!["tag".to_string()];
    let mut values = vec!["$1".to_string()];
    let mut sets = vec!["tag = EXCLUDED.tag".to_string()];
    let mut params = 1;
    let key = case.key_col().map(|k| k.name.clone());
    for c in &case.cols {
        match c.fill {
            Use::Omitted => continue,
            Use::DefaultKw => values.push("DEFAULT".to_string()),
            Use::Param => {
                params += 1;
                values.push(placeholder(t, c, params));
                if Some(&c.name) != key.as_ref() {
                    sets.push(format!("{0} = EXCLUDED.{0}", c.name));
                }
            }
        }
        names.push(c.name.clone());
    }
    let mut sql = format!(
        "INSERT INTO {t} ({}) VALUES ({})",
        names.join(", "),
        values.join(", ")
    );
    let target = || key.clone().expect("a conflict key");
    match case.verb {
        Verb::Insert => {}
        Verb::DoNothing => sql.push_str(&format!(" ON CONFLICT ({}) DO NOTHING", target())),
        Verb::DoNothingAny => sql.push_str(" ON CONFLICT DO NOTHING"),
        Verb::DoUpdate | Verb::DoUpdateWhere => {
            sql.push_str(&format!(
                " ON CONFLICT ({}) DO UPDATE SET {}",
                target(),
                sets.join(", ")
            ));
            if case.verb == Verb::DoUpdateWhere {
                sql.push_str(&format!(" WHERE {t}.tag % 2 = 0"));
            }
        }
        other => panic!("{other:?} is not PostgreSQL"),
    }
    if !case.returning.is_empty() {
        sql.push_str(&format!(" RETURNING {}", case.returning.join(", ")));
    }
    sql
}

fn pre_sql(case: &Case, t: &str) -> String {
    let names = case.names();
    let values: Vec<String> = (1..=names.len()).map(|i| format!("${i}")).collect();
    format!(
        "INSERT INTO {t} ({}) VALUES ({})",
        names.join(", "),
        values.join(", ")
    )
}

/// One statement through the plain driver, in autocommit.
pub async fn plain_obs(client: &Client, sql: &str, values: Vec<V>, returning: bool) -> Obs {
    let ps = params(values);
    let refs = refs(&ps);
    if returning {
        match client.query(sql, &refs).await {
            Ok(rows) => Obs::Ok {
                affected: rows.len() as u64,
                exact: true,
                id: None,
                returned: rows.first().map(cells),
            },
            Err(e) => plain_err(&e),
        }
    } else {
        match client.execute(sql, &refs).await {
            Ok(n) => Obs::Ok {
                affected: n,
                exact: true,
                id: None,
                returned: None,
            },
            Err(e) => plain_err(&e),
        }
    }
}

async fn ids(client: &Client, case: &Case, t: &str) -> std::collections::HashMap<String, String> {
    if !case.serial_id {
        return Default::default();
    }
    text_rows(client, &format!("SELECT tag, id FROM {t}"))
        .await
        .into_iter()
        .filter_map(|r| Some((r[0].clone()?, r[1].clone()?)))
        .collect()
}

/// Runs `case` with tables `<prefix>a` (batchpool) and `<prefix>b` (plain
/// driver) in the database of `url`; `client` is a plain connection to it.
pub async fn run(url: &str, client: &Client, case: &Case, prefix: &str) -> Verdict {
    let started = Instant::now();
    let (ta, tb) = (format!("{prefix}a"), format!("{prefix}b"));
    for t in [&ta, &tb] {
        for stmt in ddl(case, t) {
            if let Err(e) = client.batch_execute(&stmt).await {
                panic!("case `{}`: {stmt}: {}", case.name, server_message(&e));
            }
        }
        let pre = pre_sql(case, t);
        for row in &case.pre {
            let ps = params(row.clone());
            if let Err(e) = client.execute(&pre, &refs(&ps)).await {
                panic!(
                    "case `{}`: {pre} {}: {}",
                    case.name,
                    show_values(row),
                    server_message(&e)
                );
            }
        }
    }
    let (sql_a, sql_b) = (insert_sql(case, &ta), insert_sql(case, &tb));

    let pool = Pool::builder(url)
        .max_size(case.pool_size)
        .batching(super::common::backend::paths_config(
            BatchConfig::default()
                .enabled(case.coalesce)
                .max_rows(max_rows(case)),
        ))
        .copy_threshold(copy_threshold(case))
        .build()
        .expect("build pool");
    let before = pool.stats();
    let mut holds = Vec::new();
    if case.start == Start::Held {
        // Learn the shape first (that takes a connection), then hold every
        // connection while the callers queue.
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
            async move { pool_obs(pool.execute(&sql, &refs(&ps)).await) }
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
        plain.push(plain_obs(client, &sql_b, case.bound(row), !case.returning.is_empty()).await);
    }

    let cols = case.names().join(", ");
    let mut tables = Vec::new();
    let read = |what: &'static str, sql_of: &dyn Fn(&str) -> String| {
        let (a, b) = (sql_of(&ta), sql_of(&tb));
        async move {
            Table {
                what,
                batchpool: text_rows(client, &a).await,
                plain: text_rows(client, &b).await,
            }
        }
    };
    tables.push(read("table contents", &|t| format!("SELECT {cols} FROM {t}")).await);
    if case.triggers.audit.is_some() {
        tables.push(read("audit rows", &|t| format!("SELECT tag, k FROM {t}_audit")).await);
    }
    if case.triggers.per_statement {
        tables.push(
            read("statement-trigger rows", &|t| {
                format!("SELECT count(*) FROM {t}_stmt")
            })
            .await,
        );
    }
    let seen = Seen {
        ddl: ddl(case, &ta),
        sql: sql_a,
        batchpool,
        plain,
        tables,
        ids_promised: false,
        ids_batchpool: ids(client, case, &ta).await,
        ids_plain: ids(client, case, &tb).await,
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
    judge(case, &seen)
}

/// A third of the cases (by their name) cap statements at 6 rows, so a
/// queue of 16–100 callers holds more than a statement's worth and flushes
/// go out as pipelined pairs; the others keep the default cap.
fn max_rows(case: &Case) -> usize {
    let hash = case.name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    if hash % 3 == 0 { 6 } else { 1000 }
}

/// Half of the cases (by their name) send every multi-row flush of a plain
/// shape as COPY, the other half never use COPY: both paths meet the plain
/// driver.
fn copy_threshold(case: &Case) -> Option<usize> {
    if super::common::backend::plain_paths() {
        return None;
    }
    let hash = case.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (hash % 2 == 0).then_some(2)
}

// ---------------------------------------------------------------------------
// Keyed cases.

/// What every keyed case of a database needs once: `citext` and the
/// case-insensitive ICU collation `ci`.
pub const KEYED_SETUP: &str = "CREATE EXTENSION IF NOT EXISTS citext; \
     CREATE COLLATION IF NOT EXISTS ci (provider = icu, locale = 'und-u-ks-level2', \
     deterministic = false)";

/// The column type of a key of type `ty`.
fn key_type(ty: KTy) -> String {
    match ty {
        KTy::Int => "integer".to_string(),
        KTy::BigInt => "bigint".to_string(),
        KTy::Text => "text".to_string(),
        KTy::Varchar(n) => format!("varchar({n})"),
        KTy::Uuid => "uuid".to_string(),
        KTy::UuidText => "text".to_string(),
        KTy::Citext => "citext".to_string(),
        KTy::Numeric => "numeric".to_string(),
        KTy::Char(n) => format!("char({n})"),
        KTy::Ci => "text COLLATE ci".to_string(),
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
    defs.push("n bigint NOT NULL".to_string());
    defs.push("v varchar(10)".to_string());
    defs.push("w integer NOT NULL CHECK (w BETWEEN 0 AND 100)".to_string());
    defs.push(format!(
        "{} ({})",
        if case.primary {
            "PRIMARY KEY"
        } else {
            "UNIQUE"
        },
        names.join(", ")
    ));
    let mut out = vec![format!("CREATE TABLE {t} ({})", defs.join(", "))];
    if case.log {
        let key = |row: &str| {
            let parts: Vec<String> = names.iter().map(|k| format!("{row}.{k}::text")).collect();
            format!("concat_ws('/', {})", parts.join(", "))
        };
        out.push(format!("CREATE TABLE {t}_log (op text NOT NULL, k text)"));
        out.push(format!(
            "CREATE FUNCTION {t}_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF TG_OP = 'DELETE' THEN INSERT INTO {t}_log VALUES ('D', {}); \
             ELSE INSERT INTO {t}_log VALUES ('U', {}); END IF; RETURN NULL; END $$",
            key("OLD"),
            key("NEW")
        ));
        out.push(format!(
            "CREATE TRIGGER {t}_log AFTER UPDATE OR DELETE ON {t} \
             FOR EACH ROW EXECUTE FUNCTION {t}_log()"
        ));
    }
    out
}

/// A keyed caller's outcome through the pool.
async fn keyed_pool_obs(pool: &Pool, how: How, sql: &str, ps: &[P]) -> KObs {
    let refs = refs(ps);
    let err = |e: batchpool::Error| match pool_obs(Err(e)) {
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
    };
    match how {
        How::Query => match pool.query(sql, &refs).await {
            Ok(rows) => KObs::Rows(rows.iter().map(cells).collect()),
            Err(e) => err(e),
        },
        How::Opt => match pool.query_opt(sql, &refs).await {
            Ok(row) => KObs::Rows(row.iter().map(cells).collect()),
            Err(e) => err(e),
        },
        How::One => match pool.query_one(sql, &refs).await {
            Ok(row) => KObs::Rows(vec![cells(&row)]),
            Err(e) if e.is_row_count() => KObs::NoRow,
            Err(e) => err(e),
        },
        How::Execute => match pool.execute(sql, &refs).await {
            Ok(o) => KObs::Count {
                n: o.rows_affected(),
                exact: o.is_exact(),
            },
            Err(e) => err(e),
        },
    }
}

/// A keyed caller's statement through the plain driver, as
/// [`keyed_pool_obs`] shows it.
async fn keyed_plain_obs(client: &Client, how: How, sql: &str, ps: &[P]) -> KObs {
    let refs = refs(ps);
    let err = |e: tokio_postgres::Error| keyed_err(&e);
    if how == How::Execute {
        return match client.execute(sql, &refs).await {
            Ok(n) => KObs::Count { n, exact: true },
            Err(e) => err(e),
        };
    }
    match client.query(sql, &refs).await {
        Ok(rows) if how == How::One && rows.len() != 1 => KObs::NoRow,
        Ok(rows) => KObs::Rows(rows.iter().map(cells).collect()),
        Err(e) => err(e),
    }
}

/// What a write gives planned generically (on `planner`, a connection
/// with `plan_cache_mode = force_generic_plan`), rolled back: PostgreSQL
/// plans a fresh statement with its parameters' values, and folding them
/// can fail (a too-long value for a `varchar(10)`) where no row matches;
/// a prepared statement planned generically (as after its fifth run)
/// evaluates them only for the rows it changes.
async fn generically(planner: &Client, sql: &str, ps: &[P]) -> KObs {
    planner.batch_execute("BEGIN").await.expect("BEGIN");
    let got = match planner.prepare(sql).await {
        Ok(stmt) => match planner.execute(&stmt, &refs(ps)).await {
            Ok(n) => KObs::Count { n, exact: true },
            Err(e) => keyed_err(&e),
        },
        Err(e) => keyed_err(&e),
    };
    planner.batch_execute("ROLLBACK").await.expect("ROLLBACK");
    got
}

/// `e` as a keyed outcome.
fn keyed_err(e: &tokio_postgres::Error) -> KObs {
    match plain_err(e) {
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

/// Runs keyed `case` with tables `<prefix>a` (batchpool) and `<prefix>b`
/// (plain driver) in the database of `url` (where [`KEYED_SETUP`] ran);
/// `client` is a plain connection to it.
pub async fn run_keyed(
    url: &str,
    client: &Client,
    case: &KCase,
    prefix: &str,
) -> (Verdict, KTally) {
    let started = Instant::now();
    let (ta, tb) = (format!("{prefix}a"), format!("{prefix}b"));
    let names = case.key_names();
    let columns = format!("{}, n, v, w", names.join(", "));
    for t in [&ta, &tb] {
        for stmt in keyed_ddl(case, t) {
            if let Err(e) = client.batch_execute(&stmt).await {
                panic!("case `{}`: {stmt}: {}", case.name, server_message(&e));
            }
        }
    }
    // The rows before the burst into A, then copied into B.
    let places: Vec<String> = (1..=names.len() + 3).map(|i| format!("${i}")).collect();
    let pre = format!(
        "INSERT INTO {ta} ({columns}) VALUES ({})",
        places.join(", ")
    );
    let insert = client
        .prepare(&pre)
        .await
        .expect("prepare the rows' INSERT");
    for row in &case.pre {
        let mut values = row.key.clone();
        values.push(V::Int(row.n));
        values.push(row.v.clone().map_or(V::Null, V::Text));
        values.push(V::Int(row.w));
        let ps = params(values);
        if let Err(e) = client.execute(&insert, &refs(&ps)).await {
            panic!(
                "case `{}`: {pre} {:?}: {}",
                case.name,
                row,
                server_message(&e)
            );
        }
    }
    client
        .batch_execute(&format!("INSERT INTO {tb} SELECT * FROM {ta}"))
        .await
        .expect("copy the rows before the burst");
    let place = |n: usize| format!("${n}");
    let texts_a: Vec<String> = case
        .texts
        .iter()
        .map(|x| render(&x.sql, &ta, "/", place).0)
        .collect();
    let texts_b: Vec<String> = case
        .texts
        .iter()
        .map(|x| render(&x.sql, &tb, "/", place).0)
        .collect();

    let pool = Pool::builder(url)
        .max_size(case.pool_size)
        .batching(super::common::backend::paths_config(
            BatchConfig::default()
                .enabled(case.coalesce)
                .max_rows(case.max_rows),
        ))
        .build()
        .expect("build pool");
    let mut holds = Vec::new();
    if case.start == Start::Held {
        // Learn every text first (that takes a connection), then hold
        // every connection while the callers queue.
        for sql in &texts_a {
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
            let (pool, sql, ps) = (
                pool.clone(),
                texts_a[c.text].clone(),
                params(c.params.clone()),
            );
            let how = c.how;
            async move { keyed_pool_obs(&pool, how, &sql, &ps).await }
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
    for sql in &texts_a {
        explained.push(pool.explain(sql).await.is_ok_and(|e| e.is_coalesced()));
    }
    pool.close().await;

    // The plain driver: every read, every write in caller order, every
    // read again.
    let is_read = |c: &KCall| case.texts[c.text].role == Role::Read;
    let mut before_reads = Vec::new();
    for c in &case.calls {
        before_reads.push(if is_read(c) {
            let ps = params(c.params.clone());
            Some(keyed_plain_obs(client, c.how, &texts_b[c.text], &ps).await)
        } else {
            None
        });
    }
    let mut plain: Vec<Option<KObs>> = vec![None; case.calls.len()];
    let mut generic: Vec<Option<KObs>> = vec![None; case.calls.len()];
    let planner = connect(url).await;
    planner
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .await
        .expect("plan_cache_mode");
    for pass in [false, true] {
        for (i, c) in case.calls.iter().enumerate() {
            if is_read(c) != pass {
                continue;
            }
            let (sql, ps) = (&texts_b[c.text], params(c.params.clone()));
            let got = keyed_plain_obs(client, c.how, sql, &ps).await;
            if !pass && got.is_err() {
                generic[i] = Some(generically(&planner, sql, &ps).await);
            }
            plain[i] = Some(got);
        }
    }

    let keys: Vec<String> = names.iter().map(|k| format!("{k}::text")).collect();
    let read_back = format!("SELECT {}, n, v, w FROM ", keys.join(", "));
    let mut tables = vec![Table {
        what: "table contents",
        batchpool: text_rows(client, &format!("{read_back}{ta}")).await,
        plain: text_rows(client, &format!("{read_back}{tb}")).await,
    }];
    if case.log {
        tables.push(Table {
            what: "log rows",
            batchpool: text_rows(client, &format!("SELECT op, k FROM {ta}_log")).await,
            plain: text_rows(client, &format!("SELECT op, k FROM {tb}_log")).await,
        });
    }
    let seen = KSeen {
        ddl: keyed_ddl(case, &ta),
        texts: texts_a,
        pool: ours,
        plain: plain
            .into_iter()
            .map(|o| o.expect("every caller"))
            .collect(),
        before: before_reads,
        generic,
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
