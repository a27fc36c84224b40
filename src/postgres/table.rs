//! What the server says about a coalesced statement's target table, read
//! from the catalog when a statement text is learned (and again when it is
//! re-learned): whether n single-row INSERTs into it and one n-row INSERT
//! are the same thing.

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::errors::unsent_error;
use super::manager::ClientWrapper;
use crate::classify::{Conflict, InsertShape};
use crate::error::Error;

/// Volatile functions whose re-run repeats nothing outside the failed,
/// rolled-back statement (at most a sequence value is not given back, as
/// after any failed single-row INSERT).
pub(crate) const REPEATABLE: &[&str] = &[
    "random",
    "gen_random_uuid",
    "uuid_generate_v1",
    "uuid_generate_v1mc",
    "uuid_generate_v4",
    "clock_timestamp",
    "timeofday",
    "nextval",
];

/// Key types whose stored bytes are the bytes bound, when the parameter has
/// the column's own type and no type modifier: bool, bytea, int8, int2, int4,
/// text, oid, varchar, date, timestamp, timestamptz, uuid.
const BYTE_STABLE: &[u32] = &[16, 17, 20, 21, 23, 25, 26, 1043, 1082, 1114, 1184, 2950];

/// One query, parameters: the table as written, the functions the VALUES
/// tuple calls, the trigger events that matter (a `pg_trigger.tgtype`
/// mask), the conflict key columns, and [`REPEATABLE`].
const FACTS: &str = "\
WITH rel AS (SELECT to_regclass($1) AS oid),
tree AS (
    SELECT oid AS relid FROM rel WHERE oid IS NOT NULL
    UNION SELECT t.relid FROM rel, pg_partition_tree(rel.oid) t WHERE rel.oid IS NOT NULL
)
SELECT c.relkind::text,
    EXISTS (SELECT 1 FROM pg_rewrite r
        WHERE r.ev_class IN (SELECT relid FROM tree) AND r.ev_type = '3'),
    (SELECT string_agg(DISTINCT g.tgname::text, ', ') FROM pg_trigger g
        WHERE NOT g.tgisinternal AND g.tgrelid IN (SELECT relid FROM tree)
        AND (g.tgtype::int4 & $3::int4) <> 0),
    (SELECT string_agg(DISTINCT p.proname::text, ', ') FROM pg_proc p
        WHERE p.provolatile = 'v' AND p.proname = ANY($2::text[])
        AND NOT (p.proname = ANY($5::text[]))),
    (SELECT string_agg(DISTINCT p.proname::text, ', ') FROM pg_attrdef d
        JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
            AND dep.refclassid = 'pg_proc'::regclass
        JOIN pg_proc p ON p.oid = dep.refobjid
        WHERE d.adrelid IN (SELECT relid FROM tree) AND p.provolatile = 'v'
        AND NOT (p.proname = ANY($5::text[]))),
    ARRAY(SELECT format('%s %s %s', a.atttypid::int8, a.atttypmod,
            coalesce(col.collisdeterministic, true))
        FROM unnest($4::text[]) WITH ORDINALITY k(name, ord)
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = k.name
        LEFT JOIN pg_collation col ON col.oid = a.attcollation
        ORDER BY k.ord)
FROM pg_class c JOIN rel ON c.oid = rel.oid";

/// The parameter types of [`FACTS`].
const FACTS_TYPES: [Type; 5] = [
    Type::TEXT,
    Type::TEXT_ARRAY,
    Type::INT4,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
];

/// One query, parameters: the table as written and the functions the
/// VALUES tuple calls. A fingerprint of every catalog row that the learn
/// step ([`FACTS`], the copy facts and the server's prepare of the text)
/// reads or depends on, for the table and each partition: the name's
/// resolution (`search_path` included), the relation, its columns and their
/// types (and domain constraints), triggers, rules, defaults and the
/// functions they call, constraints, indexes, policies, and the functions
/// named in the VALUES tuple. A catalog row's `xmin` changes with every
/// update of the row, so any DDL on these objects changes the fingerprint;
/// statistics updates (VACUUM, ANALYZE) overwrite `pg_class` in place and
/// do not.
const FINGERPRINT: &str = "\
WITH rel AS (SELECT to_regclass($1) AS oid),
tree AS (
    SELECT oid AS relid FROM rel WHERE oid IS NOT NULL
    UNION SELECT t.relid FROM rel, pg_partition_tree(rel.oid) t WHERE rel.oid IS NOT NULL
),
cols AS (SELECT a.*, a.xmin AS row_xmin FROM pg_attribute a WHERE a.attrelid IN (SELECT relid FROM tree) AND a.attnum > 0)
SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s',
    current_setting('search_path'),
    (SELECT oid FROM rel),
    (SELECT string_agg(concat_ws(':', c.oid, c.xmin, c.relkind), ',' ORDER BY c.oid)
        FROM pg_class c WHERE c.oid IN (SELECT relid FROM tree)),
    (SELECT string_agg(concat_ws(':', a.attrelid, a.attnum, a.row_xmin, a.attname, a.atttypid,
            a.atttypmod, a.attcollation, a.attisdropped, t.xmin), ',' ORDER BY a.attrelid, a.attnum)
        FROM cols a JOIN pg_type t ON t.oid = a.atttypid),
    (SELECT string_agg(concat_ws(':', n.oid, n.xmin), ',' ORDER BY n.oid)
        FROM pg_constraint n WHERE n.contypid IN (SELECT atttypid FROM cols)),
    (SELECT string_agg(concat_ws(':', g.oid, g.xmin), ',' ORDER BY g.oid)
        FROM pg_trigger g WHERE g.tgrelid IN (SELECT relid FROM tree)),
    (SELECT string_agg(concat_ws(':', r.oid, r.xmin), ',' ORDER BY r.oid)
        FROM pg_rewrite r WHERE r.ev_class IN (SELECT relid FROM tree)),
    (SELECT string_agg(concat_ws(':', d.oid, d.xmin), ',' ORDER BY d.oid)
        FROM pg_attrdef d WHERE d.adrelid IN (SELECT relid FROM tree)),
    (SELECT string_agg(concat_ws(':', p.oid, p.xmin), ',' ORDER BY p.oid)
        FROM pg_attrdef d
        JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
            AND dep.refclassid = 'pg_proc'::regclass
        JOIN pg_proc p ON p.oid = dep.refobjid
        WHERE d.adrelid IN (SELECT relid FROM tree)),
    (SELECT string_agg(concat_ws(':', p.oid, p.xmin), ',' ORDER BY p.oid)
        FROM pg_proc p WHERE p.proname = ANY($2::text[])),
    (SELECT string_agg(concat_ws(':', n.oid, n.xmin), ',' ORDER BY n.oid)
        FROM pg_constraint n WHERE n.conrelid IN (SELECT relid FROM tree)),
    (SELECT string_agg(concat_ws(':', i.indexrelid, i.xmin), ',' ORDER BY i.indexrelid)
        FROM pg_index i WHERE i.indrelid IN (SELECT relid FROM tree)),
    (SELECT string_agg(concat_ws(':', o.oid, o.xmin), ',' ORDER BY o.oid)
        FROM pg_policy o WHERE o.polrelid IN (SELECT relid FROM tree)))";

/// The one row (if any) of the catalog query `sql`: a named statement
/// cached on the connection, or in unnamed mode one typed round trip with
/// the parameter `types`.
pub(crate) async fn query_catalog(
    conn: &ClientWrapper,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    types: &[Type],
) -> Result<Option<tokio_postgres::Row>, tokio_postgres::Error> {
    if conn.unnamed() {
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            params.iter().copied().zip(types.iter().cloned()).collect();
        conn.query_typed(sql, &typed)
            .await
            .map(|rows| rows.into_iter().next())
    } else {
        let stmt = conn.prepare_cached(sql).await?;
        conn.query_opt(&stmt, params).await
    }
}

/// The parameter types of [`FINGERPRINT`].
const FINGERPRINT_TYPES: [Type; 2] = [Type::TEXT, Type::TEXT_ARRAY];

/// The fingerprint of `table` and the functions `calls` (see [`FINGERPRINT`]); `None` when
/// the catalog cannot be read (the text is then learned again at every
/// check).
pub(crate) async fn fingerprint(
    conn: &ClientWrapper,
    table: &str,
    calls: &[String],
) -> Result<Option<String>, Error> {
    let params: [&(dyn ToSql + Sync); 2] = [&table, &calls];
    match query_catalog(conn, FINGERPRINT, &params, &FINGERPRINT_TYPES).await {
        Ok(row) => Ok(row.and_then(|row| row.get::<_, Option<String>>(0))),
        Err(e) if e.as_db_error().is_some() => Ok(None),
        Err(e) => Err(unsent_error(e)),
    }
}

/// The key columns of an `ON CONFLICT` whose skipped rows are told apart by
/// the key `RETURNING` sends back: their names and the parameters bound to
/// them.
pub(crate) struct KeyMatch<'a> {
    pub(crate) columns: &'a [String],
    pub(crate) params: &'a [usize],
}

/// Why a statement must not be coalesced, from its table's facts.
pub(crate) enum Refusal {
    /// What the catalog says of the table, the VALUES tuple or the key.
    Facts(String),
    /// The catalog could not be read (a PostgreSQL-wire engine without
    /// `pg_partition_tree`, `pg_rewrite` or `pg_trigger`, or a role those
    /// are not granted to): the server's error. Nothing about the table is
    /// known, so nothing is coalesced.
    Unreadable(String),
}

/// Reads the table's facts and says why its statement must not be
/// coalesced, if it must not.
pub(crate) async fn refusal(
    conn: &ClientWrapper,
    shape: &InsertShape,
    types: &[Type],
    key: Option<KeyMatch<'_>>,
) -> Result<Option<Refusal>, Error> {
    facts(conn, shape, types, key).await.map(|r| {
        r.map(|why| match why {
            Ok(why) => Refusal::Facts(why),
            Err(unreadable) => Refusal::Unreadable(unreadable),
        })
    })
}

/// The oldest PostgreSQL release whose catalog answers [`FACTS`]:
/// `pg_partition_tree()` and `pg_collation.collisdeterministic` are new in
/// PostgreSQL 12.
pub(crate) const MIN_SERVER_VERSION_NUM: i32 = 120_000;

/// The server's `server_version_num` (`150004` for 15.4), `None` when it
/// cannot be read (a transaction the failed catalog query aborted, an
/// engine without the setting). Asked only after the catalog query failed,
/// to say why.
async fn server_version_num(conn: &ClientWrapper) -> Option<i32> {
    let messages = conn.simple_query("SHOW server_version_num").await.ok()?;
    messages.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
        _ => None,
    })
}

/// Why nothing is coalesced when the catalog query failed with `error`, on
/// a server of `version` (its `server_version_num`, when known).
fn unreadable(version: Option<i32>, error: &Error) -> String {
    match version {
        Some(v) if v < MIN_SERVER_VERSION_NUM => format!(
            "the server is PostgreSQL {}, older than 12, the oldest release batchpool \
             coalesces on (the table's catalog facts need pg_partition_tree() and \
             pg_collation.collisdeterministic, new in 12), so every INSERT runs as its own \
             statement: {error}",
            major(v)
        ),
        _ => format!(
            "the table's catalog facts could not be read, so what a multi-row \
             statement would do differently is not known: {error}"
        ),
    }
}

/// Whether the catalog query's error `code` means this server cannot
/// answer it at all: class 42 (an unknown function, relation or column, a
/// syntax the engine lacks, no privilege on a catalog) or 0A (a feature
/// not supported). Everything else (class 08, 40, 53, 55, 57: a connection
/// or session ended, a timeout, a conflict, too few resources) is transient.
fn catalog_cannot_answer(code: &SqlState) -> bool {
    let code = code.code();
    code.starts_with("42") || code.starts_with("0A")
}

/// The release a `server_version_num` names: `11` for 110022, `9.6` for
/// 90624.
fn major(version_num: i32) -> String {
    if version_num >= 100_000 {
        (version_num / 10_000).to_string()
    } else {
        format!("{}.{}", version_num / 10_000, version_num / 100 % 100)
    }
}

/// [`refusal`]: `Ok(why)` from the facts, `Err(error)` when the catalog
/// could not be read.
async fn facts(
    conn: &ClientWrapper,
    shape: &InsertShape,
    types: &[Type],
    key: Option<KeyMatch<'_>>,
) -> Result<Option<Result<String, String>>, Error> {
    // INSERT triggers; ON CONFLICT DO UPDATE fires UPDATE triggers too.
    let events: i32 = match shape.conflict {
        Conflict::DoUpdate { .. } => 4 | 16,
        _ => 4,
    };
    let keys: Vec<String> = key.as_ref().map_or_else(Vec::new, |k| k.columns.to_vec());
    let repeatable: Vec<&str> = REPEATABLE.to_vec();
    let params: [&(dyn ToSql + Sync); 5] =
        [&shape.table, &shape.calls, &events, &keys, &repeatable];
    let row = match query_catalog(conn, FACTS, &params, &FACTS_TYPES).await {
        Ok(row) => row,
        // A server that cannot answer (an old version, an engine without
        // these catalogs or functions, no catalog access): not coalesced.
        // Any other server error (the session killed, a statement or lock
        // timeout, a serialization failure) says nothing of the catalog:
        // the learning fails, is not cached (its caller's statement runs on
        // its own), and the next call asks again.
        Err(e)
            if e.as_db_error()
                .is_some_and(|db| catalog_cannot_answer(db.code())) =>
        {
            let version = server_version_num(conn).await;
            return Ok(Some(Err(unreadable(version, &Error::db(e)))));
        }
        Err(e) => return Err(unsent_error(e)),
    };
    let table = &shape.table;
    let Some(row) = row else {
        return Ok(Some(Ok(format!(
            "table {table} is not found as a table of its own (a temporary table?)"
        ))));
    };
    let relkind: String = row.get(0);
    let rules: bool = row.get(1);
    let triggers: Option<String> = row.get(2);
    let calls: Option<String> = row.get(3);
    let defaults: Option<String> = row.get(4);
    let key_types: Vec<String> = row.get(5);
    if relkind != "r" && relkind != "p" {
        return Ok(Some(Ok(format!(
            "{table} is not a table (a view or foreign table, relkind {relkind}): what an \
             INSERT into it does is not known"
        ))));
    }
    if rules {
        return Ok(Some(Ok(format!(
            "table {table} has INSERT rules, which rewrite each statement"
        ))));
    }
    if let Some(triggers) = triggers {
        return Ok(Some(Ok(format!(
            "table {table} has triggers ({triggers}): they may skip or change rows, see the \
             other rows of a multi-row statement, or act once per statement, and what they do \
             outside the transaction would be repeated when a failed statement is re-run"
        ))));
    }
    if let Some(calls) = calls {
        return Ok(Some(Ok(format!(
            "the VALUES tuple calls volatile functions ({calls}), which a re-run after a \
             failed multi-row statement could repeat"
        ))));
    }
    if let Some(defaults) = defaults {
        return Ok(Some(Ok(format!(
            "column defaults of table {table} call volatile functions ({defaults}), which a \
             re-run after a failed multi-row statement could repeat"
        ))));
    }
    if let Some(key) = key {
        if key_types.len() != key.columns.len() {
            return Ok(Some(Ok(format!(
                "the ON CONFLICT columns are not all columns of {table}"
            ))));
        }
        for ((column, &param), facts) in key.columns.iter().zip(key.params).zip(&key_types) {
            let mut parts = facts.split(' ');
            let typid: u32 = parts.next().and_then(|t| t.parse().ok()).unwrap_or(0);
            let typmod: i32 = parts.next().and_then(|t| t.parse().ok()).unwrap_or(0);
            let deterministic = matches!(parts.next(), Some("t" | "true"));
            let bound = types.get(param).map(Type::oid);
            if !(BYTE_STABLE.contains(&typid)
                && typmod == -1
                && deterministic
                && bound == Some(typid))
            {
                return Ok(Some(Ok(format!(
                    "the ON CONFLICT key column {column} may store other bytes than those \
                     bound (its type, type modifier, collation or the parameter's type), so \
                     which rows were skipped cannot be told from the keys returned"
                ))));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_of_the_catalog_itself_stop_coalescing() {
        for code in [
            SqlState::UNDEFINED_FUNCTION,
            SqlState::UNDEFINED_TABLE,
            SqlState::UNDEFINED_COLUMN,
            SqlState::INSUFFICIENT_PRIVILEGE,
            SqlState::SYNTAX_ERROR,
            SqlState::FEATURE_NOT_SUPPORTED,
        ] {
            assert!(catalog_cannot_answer(&code), "{code:?}");
        }
        for code in [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::QUERY_CANCELED,
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::OUT_OF_MEMORY,
            SqlState::CONNECTION_FAILURE,
            SqlState::READ_ONLY_SQL_TRANSACTION,
            SqlState::IN_FAILED_SQL_TRANSACTION,
        ] {
            assert!(!catalog_cannot_answer(&code), "{code:?}");
        }
    }

    #[test]
    fn a_server_older_than_12_is_named_in_the_reason() {
        let error = Error::new(
            crate::error::Kind::Config,
            "function pg_partition_tree(oid) does not exist",
        );
        let old = unreadable(Some(110_022), &error);
        assert!(old.contains("PostgreSQL 11, older than 12"), "{old}");
        assert!(
            old.contains("pg_partition_tree(oid) does not exist"),
            "{old}"
        );
        let older = unreadable(Some(90_624), &error);
        assert!(older.contains("PostgreSQL 9.6, older than 12"), "{older}");
        for version in [Some(MIN_SERVER_VERSION_NUM), Some(150_004), None] {
            let why = unreadable(version, &error);
            assert!(
                why.starts_with("the table's catalog facts could not be read"),
                "{why}"
            );
        }
    }
}
