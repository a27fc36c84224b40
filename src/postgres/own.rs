//! Proving that a failed multi-row INSERT's error is one row's own.
//!
//! A unique violation (23505) names the key of the row it is about. It is
//! that row's own error, the one its single-row statement would have had
//! run alone at the instant the multi-row statement ran, when the row in
//! conflict was in the table before the statement: then the row's own
//! statement meets the same row, through the same index, with the same
//! message. The row in conflict was in the table already when no other
//! row of the statement can have written that key:
//!
//! - no other row of the statement has a key the server could find equal
//!   to the named row's. The bytes are compared only for key types whose
//!   equality is their bytes' (integers, `bool`, `uuid`, `date`, `oid`,
//!   `bytea`, and `text` / `varchar` under a deterministic collation, with
//!   trailing spaces ignored, since `varchar(n)` drops them past its
//!   length);
//! - the index is on plain columns that the statement binds bare (no
//!   expression, no default, no generated column), is not partial, is
//!   checked at once (not deferrable), and uses the types' default
//!   operator classes;
//! - nothing runs between the rows: the statement has no `ON CONFLICT`
//!   (whose updates could write any key), and the table (and its
//!   partitioned ancestors) has no INSERT trigger and no rule.
//!
//! The rows' part is checked against the statement's rows at once, the
//! index's part once per index (a catalog query, cached with the shape,
//! which is learned again when the table's catalog entries change). A row
//! not proven this way is only a lead, and runs on its own.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_postgres::error::DbError;
use tokio_postgres::types::Type;

use super::encode::PgRow;
use super::errors::{key_of, text_of};
use super::manager::ClientWrapper;
use super::table::query_catalog;
use crate::classify::{Conflict, InsertShape};
use crate::sync::lock;

/// Whether a unique index's violations can be a row's own (see the
/// module's text): one row, `true` or `false`, or none when there is no
/// such unique index.
const UNIQUE_INDEX: &str = "\
SELECT i.indimmediate AND i.indexprs IS NULL AND i.indpred IS NULL
   AND NOT EXISTS (
       SELECT 1 FROM pg_trigger g
       WHERE g.tgrelid IN (SELECT relid FROM pg_partition_ancestors(i.indrelid))
         AND (g.tgtype & 4) <> 0 AND NOT g.tgisinternal)
   AND NOT EXISTS (
       SELECT 1 FROM pg_rewrite r
       WHERE r.ev_class IN (SELECT relid FROM pg_partition_ancestors(i.indrelid))
         AND r.rulename <> '_RETURN')
   AND NOT EXISTS (
       SELECT 1 FROM generate_series(0, i.indnkeyatts - 1) AS s(j)
       LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[s.j]
       LEFT JOIN pg_collation c ON c.oid = i.indcollation[s.j]
       LEFT JOIN pg_opclass o ON o.oid = i.indclass[s.j]
       WHERE a.attnum IS NULL OR a.attgenerated <> ''
          OR a.atttypid <> ALL ('{16,17,20,21,23,25,26,1043,1082,2950}'::oid[])
          OR (i.indcollation[s.j] <> 0 AND c.collisdeterministic IS NOT TRUE)
          OR o.opcdefault IS NOT TRUE)
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_class tc ON tc.oid = i.indrelid
JOIN pg_namespace n ON n.oid = tc.relnamespace
WHERE i.indisunique AND n.nspname = $1 AND tc.relname = $2 AND ic.relname = $3";

/// An index as the server's error names it: schema, table, index.
type IndexName = (String, String, String);

/// What is known of the unique indexes a shape's rows have violated.
#[derive(Debug, Default)]
pub(crate) struct OwnFailures {
    indexes: Mutex<HashMap<IndexName, bool>>,
}

/// Most indexes remembered per shape (a table has few).
const MAX_INDEXES: usize = 64;

impl OwnFailures {
    /// Whether the failure `db` of the statement of `rows` (of `shape`,
    /// parameter `types`) is provably row `at`'s own (see the module's
    /// text). Asks the catalog at most once per index; an unreadable
    /// catalog answers no.
    pub(crate) async fn proven(
        &self,
        conn: &ClientWrapper,
        db: &DbError,
        shape: &InsertShape,
        types: &[Type],
        rows: &[PgRow],
        at: usize,
    ) -> bool {
        let Some(index) = rows_allow(db, shape, types, rows, at) else {
            return false;
        };
        if let Some(&known) = lock(&self.indexes).get(&index) {
            return known;
        }
        let (schema, table, name) = &index;
        let answer = query_catalog(
            conn,
            UNIQUE_INDEX,
            &[schema, table, name],
            &[Type::TEXT, Type::TEXT, Type::TEXT],
        )
        .await;
        let known = match answer {
            Ok(row) => row
                .and_then(|r| r.try_get::<_, Option<bool>>(0).ok().flatten())
                .unwrap_or(false),
            // Not remembered: the next failure asks again.
            Err(_) => return false,
        };
        let mut indexes = lock(&self.indexes);
        if indexes.len() >= MAX_INDEXES {
            indexes.clear();
        }
        indexes.insert(index, known);
        known
    }
}

/// The rows' part of the proof: the index the violation names, when `db`
/// is a unique violation of a statement without `ON CONFLICT`, its key is
/// row `at`'s (bound bare, of a type compared by its bytes, no NULL), and
/// no other row's key could equal it.
fn rows_allow(
    db: &DbError,
    shape: &InsertShape,
    types: &[Type],
    rows: &[PgRow],
    at: usize,
) -> Option<IndexName> {
    if db.code().code() != "23505" || !matches!(shape.conflict, Conflict::None) {
        return None;
    }
    let columns = shape.columns.as_ref()?;
    let (cols, values) = key_of(db.detail()?, "23505")?;
    let params: Vec<usize> = cols
        .iter()
        .map(|c| {
            let at = columns.iter().position(|name| name == c)?;
            (*shape.tuple_params.get(at)?).filter(|&k| k < types.len())
        })
        .collect::<Option<_>>()?;
    if params.is_empty() || params.iter().any(|&k| !by_bytes(&types[k])) {
        return None;
    }
    let named = rows.get(at)?;
    let mut shown = Vec::with_capacity(params.len());
    for &k in &params {
        shown.push(text_of(&types[k], named.param(k))??);
    }
    if shown.join(", ") != values {
        return None;
    }
    let may_equal = |row: &PgRow| {
        params
            .iter()
            .all(|&k| may_be_equal(&types[k], row.param(k), named.param(k)))
    };
    if rows
        .iter()
        .enumerate()
        .any(|(i, row)| i != at && may_equal(row))
    {
        return None;
    }
    Some((
        db.schema()?.to_owned(),
        db.table()?.to_owned(),
        db.constraint()?.to_owned(),
    ))
}

/// Whether equality of `ty` on the server is equality of its binary
/// encoding (for text, under a deterministic collation, which the catalog
/// query checks).
fn by_bytes(ty: &Type) -> bool {
    [
        Type::BOOL,
        Type::BYTEA,
        Type::INT8,
        Type::INT2,
        Type::INT4,
        Type::TEXT,
        Type::OID,
        Type::VARCHAR,
        Type::DATE,
        Type::UUID,
    ]
    .contains(ty)
}

/// Whether two bound values of `ty` could be equal in the table: the same
/// bytes, for text with trailing spaces dropped (`varchar(n)` drops them
/// past its length), for `bool` any non-zero byte true. `a` is never NULL
/// here (its text was shown); a NULL `b` never equals it.
fn may_be_equal(ty: &Type, a: Option<&[u8]>, b: Option<&[u8]>) -> bool {
    let (Some(a), Some(b)) = (a, b) else {
        return false;
    };
    if *ty == Type::TEXT || *ty == Type::VARCHAR {
        trim_end_spaces(a) == trim_end_spaces(b)
    } else if *ty == Type::BOOL {
        a.iter().any(|&x| x != 0) == b.iter().any(|&x| x != 0)
    } else {
        a == b
    }
}

/// `b` without its trailing ASCII spaces.
fn trim_end_spaces(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&x| x != b' ').map_or(0, |i| i + 1);
    &b[..end]
}

#[cfg(test)]
mod tests {
    use super::{by_bytes, may_be_equal};
    use tokio_postgres::types::Type;

    #[test]
    fn text_keys_that_differ_only_in_trailing_spaces_may_be_equal() {
        let t = Type::VARCHAR;
        assert!(may_be_equal(&t, Some(b"ab  "), Some(b"ab")));
        assert!(!may_be_equal(&t, Some(b"ab"), Some(b"aB")));
        assert!(!may_be_equal(&t, Some(b" ab"), Some(b"ab")));
        assert!(!may_be_equal(&t, Some(b"ab"), None));
        assert!(may_be_equal(&Type::BOOL, Some(&[2]), Some(&[1])));
        assert!(!may_be_equal(
            &Type::INT4,
            Some(&[0, 0, 0, 1]),
            Some(&[0, 0, 0, 2])
        ));
    }

    #[test]
    fn only_types_equal_by_their_bytes_are_compared() {
        assert!(by_bytes(&Type::INT8));
        assert!(by_bytes(&Type::TEXT));
        for t in [
            Type::NUMERIC,
            Type::FLOAT8,
            Type::BPCHAR,
            Type::JSONB,
            Type::TIMESTAMPTZ,
        ] {
            assert!(!by_bytes(&t), "{t}");
        }
    }
}
