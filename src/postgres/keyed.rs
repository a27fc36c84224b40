//! Keyed reads, updates and deletes on PostgreSQL: many callers' statements
//! of one text as one statement over `unnest` of one array per parameter
//! `WITH ORDINALITY` (see [`crate::classify::KeyedShape`]), and each
//! caller's own outcome from the ordinal the server echoes.
//!
//! A read is `SELECT <list> FROM unnest(...) LEFT JOIN t ON <conditions>
//! ORDER BY ord`: one row per caller, in caller order, because the key is a
//! unique key (at most one row matches) and the join keeps callers without
//! a match; a column of the list that is never NULL in a row that exists
//! (a key column, or a validated `NOT NULL` one) tells such a caller's
//! empty answer from a row of NULLs. A write returns the ordinal of every
//! row it changed, so each caller's count is the number of its ordinals.
//!
//! The conditions and expressions are the caller's own text, evaluated by
//! the server with values of the types it inferred for the caller's
//! statement, so keys match exactly as the caller's statement matches them
//! (collations, `citext`, numeric scales, padding). Nothing is compared in
//! the client but the bytes of write keys, and only where equal bytes and
//! equal keys are the same thing (byte-stable types, deterministic
//! collations): two callers with the same key go in successive statements
//! (an `UPDATE ... FROM` joined twice to one row applies only one of them),
//! in call order. Within a statement a write's rows go in key byte order,
//! so two statements on overlapping keys take their locks in one order.
//!
//! What the catalog must say (read when the text is learned, and again when
//! the table's fingerprint changes): a plain table (or a partitioned one,
//! for reads) without row-level security or inheritance children, a unique
//! index (plain btree, default operator classes, the columns' own
//! collations, not partial, not deferrable) on exactly the key columns, the
//! key compared with a parameter of its own type; for writes also no
//! triggers or rules, no assigned column in a key, constraint or index, no
//! volatile function but those a re-run repeats harmlessly, no foreign key
//! referencing a table rows are deleted from.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::TryStreamExt;
use tokio_postgres::Row;
use tokio_postgres::types::{Kind, ToSql, Type};

use super::Client;
use super::Outcome;
use super::encode::{PgRow, Raw, RawValue};
use super::errors::sent_error;
use super::family::{Candidate, Families, Family, Member};
use super::manager::{ClientWrapper, NEXT_SHAPE_ID, Prepared};
use super::quote_ident;
use super::table::REPEATABLE;
use super::unnamed::Described;
use super::unnest::binary_array;
use crate::backend::batch::{ChunkError, ChunkResult};
use crate::classify::{Item, KeyedKind, KeyedShape};
use crate::error::Error;
use crate::explain::NotCoalesced;

/// The start of a refusal because the catalog could not be read.
pub(crate) const UNREADABLE: &str = "the catalog facts of the table cannot be read";

/// Key types whose equality is equality of the bytes bound (with a
/// deterministic collation): bool, bytea, int8, int2, int4, text, oid,
/// varchar, date, timestamp, timestamptz, uuid.
const BYTE_STABLE: &[u32] = &[16, 17, 20, 21, 23, 25, 26, 1043, 1082, 1114, 1184, 2950];

/// The `varchar` and `text` type oids: a `varchar` key is compared with a
/// `text` parameter (`varchar` has no operators of its own).
const VARCHAR: u32 = 1043;
const TEXT: u32 = 25;

/// One query, parameters: the table as written, the key columns, the
/// assigned columns, the functions the assignments call, and
/// [`REPEATABLE`].
const FACTS: &str = "\
WITH rel AS (SELECT to_regclass($1) AS oid),
keys AS (
    SELECT a.attnum, a.atttypid, a.attcollation, k.ord
    FROM rel JOIN unnest($2::text[]) WITH ORDINALITY k(name, ord) ON true
    JOIN pg_attribute a ON a.attrelid = rel.oid AND a.attname = k.name
        AND a.attnum > 0 AND NOT a.attisdropped
)
SELECT c.relkind::text,
    c.relrowsecurity OR c.relispartition,
    c.relkind = 'r' AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid),
    EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = c.oid),
    (SELECT string_agg(g.tgname::text, ', ') FROM pg_trigger g
        WHERE g.tgrelid = c.oid AND NOT g.tgisinternal),
    ARRAY(SELECT format('%s %s', k.atttypid::int8, coalesce(col.collisdeterministic, true))
        FROM keys k LEFT JOIN pg_collation col ON col.oid = k.attcollation ORDER BY k.ord),
    EXISTS (SELECT 1 FROM pg_index i
        JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
        WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid AND i.indimmediate
        AND i.indpred IS NULL AND i.indexprs IS NULL AND am.amname = 'btree'
        AND i.indnkeyatts = cardinality($2::text[])
        AND (SELECT count(*) FROM keys) = cardinality($2::text[])
        AND NOT EXISTS (SELECT 1 FROM keys k WHERE NOT EXISTS (
            SELECT 1 FROM generate_subscripts(i.indkey, 1) s
            JOIN pg_opclass o ON o.oid = i.indclass[s]
            WHERE s < i.indnkeyatts AND i.indkey[s] = k.attnum
            AND i.indcollation[s] = k.attcollation AND o.opcdefault))),
    ARRAY(SELECT a.attname::text FROM pg_attribute a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
    ARRAY(SELECT a.attname::text FROM pg_attribute a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull
        AND NOT EXISTS (SELECT 1 FROM pg_constraint n WHERE n.conrelid = c.oid
            AND n.contype = 'n' AND n.conkey = ARRAY[a.attnum] AND NOT n.convalidated)),
    (SELECT string_agg(DISTINCT a.attname::text, ', ') FROM pg_attribute a
        WHERE a.attrelid = c.oid AND a.attname = ANY($3::text[]) AND (
            EXISTS (SELECT 1 FROM pg_constraint n WHERE n.conrelid = c.oid
                AND n.contype IN ('p', 'u', 'f', 'x') AND a.attnum = ANY(n.conkey))
            OR EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid
                AND (a.attnum = ANY(i.indkey::int2[]) OR i.indexprs IS NOT NULL
                    OR i.indpred IS NOT NULL)))),
    EXISTS (SELECT 1 FROM pg_constraint n WHERE n.confrelid = c.oid AND n.contype = 'f'),
    (SELECT string_agg(DISTINCT p.proname::text, ', ') FROM pg_proc p
        WHERE p.provolatile = 'v' AND p.proname = ANY($4::text[])
        AND NOT (p.proname = ANY($5::text[])))
FROM pg_class c JOIN rel ON c.oid = rel.oid";

/// The parameter types of [`FACTS`].
const FACTS_TYPES: [Type; 5] = [
    Type::TEXT,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
];

/// A keyed statement shape, learned once.
pub(crate) struct PgKeyed {
    id: u64,
    form: Arc<KeyedShape>,
    /// The caller's own text (a lone caller runs it).
    sql: Box<str>,
    /// The many-caller text.
    many: Box<str>,
    /// Parameter types of the caller's statement.
    types: Vec<Type>,
    /// The array parameter types of `many`.
    arrays: Vec<Type>,
    /// Unnamed mode: the two texts as the server described them.
    described: Option<(Arc<Described>, Arc<Described>)>,
    /// A read: the result column that is NULL exactly for a caller
    /// without a row.
    witness: usize,
    /// A write: the parameters bound to the key.
    key_params: Vec<usize>,
    /// An update: its family (texts run together with it) and its number
    /// there.
    family: Option<(Arc<Family>, u16)>,
}

/// What [`FACTS`] says.
struct Facts {
    relkind: String,
    secured: bool,
    children: bool,
    rules: bool,
    triggers: Option<String>,
    /// Per key column: its type oid and whether its collation is
    /// deterministic.
    keys: Vec<(u32, bool)>,
    unique: bool,
    columns: Vec<String>,
    not_null: Vec<String>,
    assigned_constrained: Option<String>,
    referenced: bool,
    volatile: Option<String>,
}

impl Facts {
    fn of(row: &Row) -> Result<Facts, tokio_postgres::Error> {
        let keys: Vec<String> = row.try_get(5)?;
        Ok(Facts {
            relkind: row.try_get(0)?,
            secured: row.try_get(1)?,
            children: row.try_get(2)?,
            rules: row.try_get(3)?,
            triggers: row.try_get(4)?,
            keys: keys
                .iter()
                .map(|k| {
                    let mut parts = k.split(' ');
                    let oid = parts.next().and_then(|o| o.parse().ok()).unwrap_or(0);
                    (oid, matches!(parts.next(), Some("t" | "true")))
                })
                .collect(),
            unique: row.try_get(6)?,
            columns: row.try_get(7)?,
            not_null: row.try_get(8)?,
            assigned_constrained: row.try_get(9)?,
            referenced: row.try_get(10)?,
            volatile: row.try_get(11)?,
        })
    }

    /// Why statements of `form` (parameter `types`) on this table must run
    /// on their own; `None` when they may be coalesced.
    fn refusal(&self, form: &KeyedShape, types: &[Type]) -> Option<String> {
        let write = form.kind != KeyedKind::Read;
        let kinds: &[&str] = if write { &["r"] } else { &["r", "p"] };
        if !kinds.contains(&self.relkind.as_str()) {
            return Some(format!(
                "{} is not a plain table (relkind {}): only tables{} are coalesced",
                form.table,
                self.relkind,
                if write { "" } else { " and partitioned tables" }
            ));
        }
        if self.secured {
            return Some(format!(
                "{} has row-level security or is a partition",
                form.table
            ));
        }
        if self.children {
            return Some(format!("{} has inheritance children", form.table));
        }
        if self.keys.len() != form.keys.len() || !self.unique {
            return Some(format!(
                "no unique index of {} is on exactly the key columns ({}) with their own \
                 collations and default operator classes",
                form.table,
                form.keys
                    .iter()
                    .map(|(c, _)| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for ((column, param), &(oid, deterministic)) in form.keys.iter().zip(&self.keys) {
            let param_oid = types.get(*param).map_or(0, Type::oid);
            if param_oid != oid && !(oid == VARCHAR && param_oid == TEXT) {
                return Some(format!(
                    "the key column {column} is compared with a parameter of another type"
                ));
            }
            if write && (!BYTE_STABLE.contains(&oid) || !deterministic) {
                return Some(format!(
                    "the key column {column} has a type or collation whose equality is not \
                     byte equality: two callers of one key could not be kept apart"
                ));
            }
        }
        if !write {
            return None;
        }
        if self.rules {
            return Some(format!("{} has rules", form.table));
        }
        if let Some(triggers) = &self.triggers {
            return Some(format!("{} has triggers ({triggers})", form.table));
        }
        if let Some(columns) = &self.assigned_constrained {
            return Some(format!(
                "assigned columns are in a key, constraint or index ({columns}), or the table \
                 has an expression or partial index"
            ));
        }
        if form.kind == KeyedKind::Delete && self.referenced {
            return Some(format!("a foreign key references {}", form.table));
        }
        if let Some(functions) = &self.volatile {
            return Some(format!(
                "the assignments call volatile functions ({functions})"
            ));
        }
        None
    }

    /// A read's result column that is never NULL in a row that exists.
    fn witness(&self, form: &KeyedShape) -> Option<usize> {
        let certain = |column: &str| {
            form.keys.iter().any(|(k, _)| k == column) || self.not_null.iter().any(|c| c == column)
        };
        let mut position = 0;
        for item in &form.items {
            match item {
                Item::All => {
                    for column in &self.columns {
                        if certain(column) {
                            return Some(position);
                        }
                        position += 1;
                    }
                }
                Item::Column(column) => {
                    if self.columns.contains(column) && certain(column) {
                        return Some(position);
                    }
                    position += 1;
                }
                Item::Other => position += 1,
            }
        }
        None
    }
}

/// The array type of `ty` as written in a cast, `None` for a type whose
/// values an array would not carry as they are (arrays, domains,
/// composites, ranges, pseudo-types).
fn array_of(ty: &Type) -> Option<String> {
    match ty.kind() {
        Kind::Simple | Kind::Enum(_) => {}
        _ => return None,
    }
    Some(format!(
        "{}.{}[]",
        quote_ident(ty.schema()),
        quote_ident(ty.name())
    ))
}

/// Declines with `why`.
fn declined(why: impl Into<String>) -> Result<Result<PgKeyed, NotCoalesced>, Error> {
    Ok(Err(NotCoalesced::Declined(why.into())))
}

impl PgKeyed {
    /// Parameter types of one caller's statement.
    pub(crate) fn types(&self) -> &[Type] {
        &self.types
    }

    /// Whether a re-learned shape is this one.
    pub(crate) fn same(&self, other: &PgKeyed) -> bool {
        self.types == other.types
            && self.many == other.many
            && self.witness == other.witness
            && self.key_params == other.key_params
            && self.family.as_ref().map(|(f, m)| (f.id, *m))
                == other.family.as_ref().map(|(f, m)| (f.id, *m))
    }

    /// Its family's id, if it is in one (the engine gives a family one
    /// queue).
    pub(crate) fn family_id(&self) -> Option<u64> {
        self.family.as_ref().map(|(f, _)| f.id)
    }

    /// Its number in its family (0 outside families): a row of its caller
    /// carries it.
    pub(crate) fn member(&self) -> u16 {
        self.family.as_ref().map_or(0, |(_, m)| *m)
    }

    /// The text of `row`'s caller where it is another text of the family.
    fn other_member(&self, row: &PgRow) -> Option<Arc<Member>> {
        match &self.family {
            Some((family, me)) if row.member() != *me => family.member(row.member()),
            _ => None,
        }
    }

    /// Learns `form` (the text `sql`) on `conn`: the caller's statement
    /// prepared, the table's facts, the many-caller text prepared.
    pub(crate) async fn learn(
        conn: &mut Client,
        sql: &str,
        form: Arc<KeyedShape>,
        families: &Families,
    ) -> Result<Result<PgKeyed, NotCoalesced>, Error> {
        conn.forget(sql);
        let one = conn
            .prepare_for(&[sql], false)
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::internal("a text was not prepared")))?;
        let types = one.params().to_vec();
        if types.len() != form.params_per_row {
            return declined(format!(
                "the server counts {} parameters where the text shows {}",
                types.len(),
                form.params_per_row
            ));
        }
        let Some(arrays) = types.iter().map(array_of).collect::<Option<Vec<String>>>() else {
            return declined("a parameter of an array, domain, composite or range type");
        };
        let casts: Vec<String> = arrays
            .iter()
            .enumerate()
            .map(|(i, a)| format!("${}::{a}", i + 1))
            .collect();
        let keys: Vec<&str> = form.keys.iter().map(|(c, _)| c.as_str()).collect();
        let params: [&(dyn ToSql + Sync); 5] =
            [&form.table, &keys, &form.assigned, &form.calls, &REPEATABLE];
        let facts = match super::table::query_catalog(conn, FACTS, &params, &FACTS_TYPES).await {
            Ok(Some(row)) => Facts::of(&row).map_err(sent_error)?,
            Ok(None) => return declined(format!("{} is not a table", form.table)),
            Err(e) if e.as_db_error().is_some() => {
                return declined(format!("{UNREADABLE}: {e}"));
            }
            Err(e) => return Err(sent_error(e)),
        };
        if let Some(why) = facts.refusal(&form, &types) {
            return declined(why);
        }
        let witness = match form.kind {
            KeyedKind::Read => match facts.witness(&form) {
                Some(w) => w,
                None => {
                    return declined(
                        "the select list holds no key column and no NOT NULL column, so a \
                         missing row could not be told from a row of NULLs",
                    );
                }
            },
            _ => 0,
        };
        let many = form.render(&casts);
        let many_prepared = match conn.prepare_for(&[&many], false).await.pop() {
            Some(Ok(p)) => p,
            Some(Err(e)) if e.is_db() => {
                return declined(format!("the server refused the coalesced form: {e}"));
            }
            Some(Err(e)) => return Err(e),
            None => return Err(Error::internal("a text was not prepared")),
        };
        let array_types = many_prepared.params().to_vec();
        let fits = array_types.len() == types.len()
            && array_types
                .iter()
                .zip(&types)
                .all(|(a, t)| matches!(a.kind(), Kind::Array(e) if e.oid() == t.oid()));
        if !fits {
            return declined("the server typed the coalesced form's parameters otherwise");
        }
        if let (Prepared::Named(a), Prepared::Named(b)) = (&one, &many_prepared) {
            let columns = |s: &tokio_postgres::Statement| {
                s.columns()
                    .iter()
                    .map(|c| (c.name().to_owned(), c.type_().oid()))
                    .collect::<Vec<_>>()
            };
            if form.kind == KeyedKind::Read && columns(a) != columns(b) {
                return declined("the coalesced form returns other columns");
            }
        }
        let described = match (&one, &many_prepared) {
            (Prepared::Unnamed(a), Prepared::Unnamed(b)) => Some((a.clone(), b.clone())),
            _ => None,
        };
        let id = NEXT_SHAPE_ID.fetch_add(1, Ordering::Relaxed);
        let key_params: Vec<usize> = form.keys.iter().map(|&(_, p)| p).collect();
        let family = match form.kind {
            KeyedKind::Update => {
                let candidate = Candidate {
                    form: &form,
                    sql,
                    id,
                    described: described.as_ref().map(|(one, _)| one.clone()),
                    types: &types,
                    key_params: &key_params,
                    arrays: &casts,
                };
                families.join(conn, candidate).await
            }
            _ => None,
        };
        Ok(Ok(PgKeyed {
            id,
            key_params,
            form,
            sql: sql.into(),
            many: many.into(),
            types,
            arrays: array_types,
            described,
            witness,
            family,
        }))
    }

    /// Writes: where two rows of one key meet, the rows are cut (see
    /// [`Backend::runs`](crate::backend::batch::Backend::runs)).
    pub(crate) fn runs(&self, rows: &[PgRow]) -> Option<Vec<usize>> {
        if self.form.kind == KeyedKind::Read || rows.len() < 2 {
            return None;
        }
        // By the hash of the key's bytes: two keys whose hashes meet are
        // cut apart too, which costs a statement, never an outcome.
        let hash = |row: &PgRow| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for &p in &self.key_params {
                row.param(p).hash(&mut h);
            }
            h.finish()
        };
        let mut runs = Vec::new();
        let mut seen: HashSet<u64> = HashSet::with_capacity(rows.len());
        let mut run = 0;
        for row in rows {
            let key = hash(row);
            if !seen.insert(key) {
                runs.push(run);
                run = 0;
                seen.clear();
                seen.insert(key);
            }
            run += 1;
        }
        if runs.is_empty() {
            return None;
        }
        runs.push(run);
        Some(runs)
    }

    /// Runs `rows`: one row as the caller's own statement, more as the
    /// many-caller statement.
    pub(crate) async fn execute(&self, conn: &mut Client, rows: &[PgRow]) -> ChunkResult<Outcome> {
        if conn.is_broken() {
            return Err(ChunkError::Statement(Error::closed_before_send()));
        }
        let conn: &ClientWrapper = conn;
        let result = match rows {
            [row] => self.one(conn, row).await,
            _ => self.many(conn, rows).await,
        };
        result.map_err(|e| self.failed(conn, e))
    }

    /// A failed statement: a stale prepared statement is dropped (nothing
    /// ran), an error of the server that may be one row's re-runs the rows
    /// in smaller groups, anything else ends them all.
    fn failed(&self, conn: &ClientWrapper, e: RunError) -> ChunkError<Outcome> {
        let e = match e {
            RunError::Ours(e) => return ChunkError::Statement(e),
            RunError::Anomaly(e) => return ChunkError::Row(e),
            RunError::Driver(e) => e,
        };
        if e.as_db_error().is_some_and(|db| conn.stale(db)) {
            conn.forget_batch(self.id);
            if let Some((family, _)) = &self.family {
                for id in family.statement_ids() {
                    conn.forget_batch(id);
                }
            }
            return ChunkError::Stale(sent_error(e));
        }
        let err = conn.sent_error(e);
        if err.is_db() && !err.is_statement_level() {
            ChunkError::Row(err)
        } else {
            ChunkError::Statement(err)
        }
    }

    /// One caller: its own statement (the text it gave, which in a family
    /// may be another than this shape's).
    async fn one(&self, conn: &ClientWrapper, row: &PgRow) -> Result<Vec<Outcome>, RunError> {
        let other = self.other_member(row);
        let (id, sql, described) = match &other {
            Some(m) => (m.id, &*m.sql, m.described.as_ref()),
            None => (
                self.id,
                &*self.sql,
                self.described.as_ref().map(|(one, _)| one),
            ),
        };
        let (rows, count) = match described {
            Some(one) => {
                conn.ensure_types(one).await.map_err(RunError::Ours)?;
                let params = row.raw().zip(self.types.iter().cloned());
                let stream = conn.query_typed_raw(sql, params).await?;
                futures_util::pin_mut!(stream);
                let mut rows = Vec::new();
                while let Some(r) = stream.try_next().await? {
                    rows.push(r);
                }
                let count = stream.rows_affected().unwrap_or(rows.len() as u64);
                (rows, count)
            }
            None => {
                let stmt = conn
                    .prepare_batch(id, 1, || sql.to_string(), &self.types)
                    .await
                    .map_err(|e| RunError::Ours(super::errors::unsent_error(e)))?;
                if self.form.kind == KeyedKind::Read {
                    let rows: Vec<Row> = conn
                        .query_raw(&stmt, row.raw())
                        .await?
                        .try_collect()
                        .await?;
                    let count = rows.len() as u64;
                    (rows, count)
                } else {
                    (Vec::new(), conn.execute_raw(&stmt, row.raw()).await?)
                }
            }
        };
        Ok(vec![match self.form.kind {
            KeyedKind::Read => Outcome::read(rows),
            _ => Outcome::new(count, true, None, None),
        }])
    }

    /// Many callers: the many-caller statement.
    async fn many(&self, conn: &ClientWrapper, rows: &[PgRow]) -> Result<Vec<Outcome>, RunError> {
        let n = rows.len();
        // Writes in key byte order: locks are taken in one order.
        let mut order: Vec<usize> = (0..n).collect();
        if self.form.kind != KeyedKind::Read {
            let key = |i: usize| self.key_params.iter().map(move |&p| rows[i].param(p));
            order.sort_by(|&a, &b| key(a).cmp(key(b)));
        }
        let mut arrays = self.arrays(rows, &order);
        // Callers of other texts of the family: the family's statement for
        // the texts up to the highest one here, with each row's text.
        let family = match &self.family {
            Some((family, me)) if rows.iter().any(|r| r.member() != *me) => {
                let highest = rows.iter().map(PgRow::member).max().unwrap_or(0);
                let member = family.member(highest).ok_or_else(|| {
                    RunError::Ours(Error::internal("a row of a family's unknown text"))
                })?;
                let tags: Vec<[u8; 4]> = order
                    .iter()
                    .map(|&i| i32::from(rows[i].member()).to_be_bytes())
                    .collect();
                arrays.push(binary_array(Type::INT4.oid(), || {
                    tags.iter().map(|t| Some(&t[..]))
                }));
                Some(member)
            }
            _ => None,
        };
        let (id, text, described) = match &family {
            Some(m) => (m.combined_id, &*m.combined, m.combined_described.as_ref()),
            None => (
                self.id,
                &*self.many,
                self.described.as_ref().map(|(_, many)| many),
            ),
        };
        let returned: Vec<Row> = match described {
            Some(many) => {
                conn.ensure_types(many).await.map_err(RunError::Ours)?;
                let types = self
                    .arrays
                    .iter()
                    .cloned()
                    .chain(family.is_some().then_some(Type::INT4_ARRAY));
                let params = arrays
                    .iter()
                    .zip(types)
                    .map(|(bytes, ty)| (Raw::bytes(bytes), ty));
                let stream = conn.query_typed_raw(text, params).await?;
                futures_util::pin_mut!(stream);
                let mut out = Vec::new();
                while let Some(r) = stream.try_next().await? {
                    out.push(r);
                }
                out
            }
            None => {
                let stmt = conn
                    .prepare_batch(id, 0, || text.to_string(), &[])
                    .await
                    .map_err(|e| RunError::Ours(super::errors::unsent_error(e)))?;
                let params = arrays.iter().map(|b| Raw::bytes(b));
                conn.query_raw(&stmt, params).await?.try_collect().await?
            }
        };
        match self.form.kind {
            KeyedKind::Read => self.reads(returned, n),
            _ => Ok(self.writes(&returned, &order)),
        }
    }

    /// One array parameter per parameter of the caller's statement, its
    /// elements the rows' encoded values in `order`.
    fn arrays(&self, rows: &[PgRow], order: &[usize]) -> Vec<bytes::Bytes> {
        (0..self.types.len())
            .map(|p| {
                let values = || order.iter().map(|&i| rows[i].param(p));
                binary_array(self.types[p].oid(), values)
            })
            .collect()
    }

    /// A read's outcomes: row `i` is caller `i`'s, none where the witness
    /// column is NULL.
    fn reads(&self, returned: Vec<Row>, n: usize) -> Result<Vec<Outcome>, RunError> {
        if returned.len() != n {
            // The key was not unique after all (the table changed): the
            // callers go again in smaller groups, a lone one as its own
            // statement.
            return Err(RunError::Anomaly(Error::internal(format!(
                "a coalesced read of {n} callers returned {} rows",
                returned.len()
            ))));
        }
        Ok(returned
            .into_iter()
            .map(|row| {
                let present = row
                    .try_get::<_, RawValue<'_>>(self.witness)
                    .is_ok_and(|v| v.0.is_some());
                Outcome::read(if present { vec![row] } else { Vec::new() })
            })
            .collect())
    }

    /// A write's outcomes: each caller's count is the number of its
    /// ordinals returned (rows were sent in `order`).
    fn writes(&self, returned: &[Row], order: &[usize]) -> Vec<Outcome> {
        let mut counts = vec![0u64; order.len()];
        let mut exact = true;
        for row in returned {
            let caller = row
                .try_get::<_, i64>(0)
                .ok()
                .and_then(|ord| usize::try_from(ord).ok()?.checked_sub(1))
                .and_then(|at| order.get(at));
            match caller {
                Some(&i) => counts[i] += 1,
                None => exact = false,
            }
        }
        counts
            .into_iter()
            .map(|count| Outcome::new(count, exact && count <= 1, None, None))
            .collect()
    }
}

/// Why a keyed statement failed.
enum RunError {
    /// The driver's error for the statement.
    Driver(tokio_postgres::Error),
    /// Before the statement was sent (a type lookup, a prepare).
    Ours(Error),
    /// The answer did not fit the callers.
    Anomaly(Error),
}

impl From<tokio_postgres::Error> for RunError {
    fn from(e: tokio_postgres::Error) -> Self {
        RunError::Driver(e)
    }
}
