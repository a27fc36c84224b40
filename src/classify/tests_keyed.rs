//! Tests of the keyed read, update and delete recogniser and its rewrite.

use super::{Classified, Dialect, Form, Item, KeyedKind, KeyedShape, MASK_BITS, classify};
use crate::explain::NotCoalesced;

/// Classify for PostgreSQL and require a keyed shape.
fn keyed(sql: &str) -> std::sync::Arc<KeyedShape> {
    match classify(Dialect::Postgres, sql) {
        Classified::Batchable(Form::Keyed(shape)) => shape,
        other => panic!("expected a keyed shape: {sql:?}: {other:?}"),
    }
}

/// The reason a PostgreSQL text is not coalesced.
fn reason(sql: &str) -> NotCoalesced {
    match classify(Dialect::Postgres, sql) {
        Classified::Other(reason) => reason,
        Classified::Batchable(form) => panic!("expected not coalesced: {sql:?}: {form:?}"),
    }
}

/// The arrays of a rewrite of `n` bigint parameters.
fn arrays(n: usize) -> Vec<String> {
    (1..=n).map(|k| format!("${k}::int8[]")).collect()
}

#[test]
fn point_reads_become_a_left_join_in_caller_order() {
    let shape = keyed("SELECT * FROM kv WHERE id = $1");
    assert_eq!(shape.kind, KeyedKind::Read);
    assert_eq!(shape.table, "kv");
    assert_eq!(shape.keys, vec![("id".to_owned(), 0)]);
    assert_eq!(shape.items, vec![Item::All]);
    assert_eq!(
        shape.render(&arrays(1)),
        "SELECT kv.* FROM unnest($1::int8[]) WITH ORDINALITY AS \"batchpool keys\"(\"batchpool 1\", \
         \"batchpool ord\") LEFT JOIN kv ON id = \"batchpool keys\".\"batchpool 1\"\n\
         ORDER BY \"batchpool keys\".\"batchpool ord\""
    );

    let shape = keyed(
        "select k.v AS value, \"Id\", n::text, 'x' FROM s.t AS k where $2 = \"Id\" and k.b = $1;",
    );
    assert_eq!(
        shape.items,
        vec![
            Item::Column("v".into()),
            Item::Column("Id".into()),
            Item::Other,
            Item::Other
        ]
    );
    assert_eq!(shape.keys, vec![("Id".to_owned(), 1), ("b".to_owned(), 0)]);
    assert_eq!(shape.params_per_row, 2);
    let sql = shape.render(&arrays(2));
    assert!(
        sql.starts_with(
            "SELECT k.v AS value, \"Id\", n::text, 'x' FROM unnest($1::int8[], $2::int8[])"
        ),
        "{sql}"
    );
    assert!(
        sql.contains(
            "LEFT JOIN s.t AS k ON \"batchpool keys\".\"batchpool 2\" = \"Id\" and k.b = \
             \"batchpool keys\".\"batchpool 1\"\n"
        ),
        "{sql}"
    );
}

#[test]
fn updates_and_deletes_return_the_ordinal_of_each_row_written() {
    let shape = keyed("UPDATE counters SET hits = hits + $1, note = $3 WHERE id = $2");
    assert_eq!(shape.kind, KeyedKind::Update);
    assert_eq!(shape.assigned, vec!["hits".to_owned(), "note".to_owned()]);
    assert_eq!(shape.keys, vec![("id".to_owned(), 1)]);
    assert_eq!(
        shape.render(&arrays(3)),
        "UPDATE counters SET hits = hits + \"batchpool keys\".\"batchpool 1\", note = \
         \"batchpool keys\".\"batchpool 3\" FROM unnest($1::int8[], $2::int8[], $3::int8[]) WITH \
         ORDINALITY AS \"batchpool keys\"(\"batchpool 1\", \"batchpool 2\", \"batchpool 3\", \
         \"batchpool ord\") WHERE id = \"batchpool keys\".\"batchpool 2\"\n\
         RETURNING \"batchpool keys\".\"batchpool ord\""
    );
    let shape = keyed("UPDATE t SET v = lower(v) || $1::text WHERE a = $2 AND b = $3");
    assert_eq!(shape.calls, vec!["lower".to_owned()]);

    let shape = keyed("DELETE FROM sessions WHERE token = $1 -- gone\n");
    assert_eq!(shape.kind, KeyedKind::Delete);
    assert_eq!(
        shape.render(&arrays(1)),
        "DELETE FROM sessions USING unnest($1::int8[]) WITH ORDINALITY AS \"batchpool keys\"(\
         \"batchpool 1\", \"batchpool ord\") WHERE token = \"batchpool keys\".\"batchpool 1\"\n\
         RETURNING \"batchpool keys\".\"batchpool ord\""
    );
}

#[test]
fn other_forms_say_what_is_not_covered() {
    for sql in [
        "SELECT * FROM t WHERE id = $1 ORDER BY id",
        "SELECT * FROM t WHERE id = $1 LIMIT 1",
        "SELECT * FROM t WHERE id = $1 FOR UPDATE",
        "SELECT * FROM t WHERE id = $1 OR id = $2",
        "SELECT * FROM t WHERE id = $1 + 1",
        "SELECT * FROM t WHERE id IN ($1, $2)",
        "SELECT * FROM t WHERE id = $1 AND id = $2",
        "SELECT * FROM t WHERE id = $2",
        "SELECT * FROM t WHERE id = 1",
        "SELECT * FROM t",
        "SELECT * FROM t, u WHERE id = $1",
        "SELECT * FROM t JOIN u ON true WHERE id = $1",
        "SELECT * FROM ONLY t WHERE id = $1",
        "SELECT DISTINCT v FROM t WHERE id = $1",
        "SELECT count(*) FROM t WHERE id = $1",
        "SELECT nextval('s'), id FROM t WHERE id = $1",
        "SELECT (SELECT 1), id FROM t WHERE id = $1",
        "SELECT $2::int, id FROM t WHERE id = $1",
        "SELECT 1",
        "SELECT * FROM t WHERE id = $1; SELECT 1",
        "SELECT \"batchpool keys\".* FROM t WHERE id = $1",
        "UPDATE t SET v = $1 WHERE id = $2 RETURNING v",
        "UPDATE t SET v = (SELECT max(v) FROM u) WHERE id = $1",
        "UPDATE t SET v = (TABLE u) WHERE id = $1",
        "UPDATE t SET v = coalesce((TABLE u), 0) WHERE id = $1",
        "UPDATE t SET v = (VALUES (1)) WHERE id = $1",
        "UPDATE t SET v = U&\"batchpool\\0020ord\" WHERE id = $1",
        "UPDATE t SET v = DEFAULT WHERE id = $1",
        "UPDATE t SET v = u.v FROM u WHERE t.id = $1",
        "UPDATE t SET (a, b) = ($1, $2) WHERE id = $3",
        "UPDATE t SET v = $1",
        "UPDATE ONLY t SET v = $1 WHERE id = $2",
        "UPDATE t SET v = $1 WHERE id = $2 AND v = 'x'",
        "DELETE FROM t USING u WHERE t.id = $1",
        "DELETE FROM t WHERE id = $1 RETURNING *",
        "DELETE t WHERE id = $1",
        "WITH x AS (SELECT 1) SELECT * FROM t WHERE id = $1",
    ] {
        match reason(sql) {
            NotCoalesced::KeyedForm(_) | NotCoalesced::NotAnInsert => {}
            other => panic!("{sql:?}: {other:?}"),
        }
    }
    assert_eq!(reason("CREATE TABLE t (a int)"), NotCoalesced::NotAnInsert);
}

#[test]
fn mysql_reads_become_the_callers_statements_joined_by_union_all() {
    let shape = match classify(
        Dialect::MySql,
        "SELECT * FROM `t` AS k WHERE `id` = ? AND b = ?",
    ) {
        Classified::Batchable(Form::Keyed(shape)) => shape,
        other => panic!("{other:?}"),
    };
    assert_eq!(shape.keys, vec![("id".to_owned(), 0), ("b".to_owned(), 1)]);
    assert_eq!(
        shape.render_union(2),
        "SELECT 1 AS `batchpool ord`, k.* FROM `t` AS k WHERE `id` = ? AND b = ?\n UNION ALL \
         SELECT 2 AS `batchpool ord`, k.* FROM `t` AS k WHERE `id` = ? AND b = ?\n"
    );
    match classify(Dialect::MySql, "UPDATE t SET v = ? WHERE id = ?") {
        Classified::Batchable(Form::Keyed(shape)) => assert_eq!(
            shape.render_case(2),
            "UPDATE t SET v = CASE WHEN (id = ?) THEN (?) WHEN (id = ?) THEN (?) END \
             WHERE (id = ?) OR (id = ?)"
        ),
        other => panic!("{other:?}"),
    }
    // Modifiers and session variables are not kept by the rewrite.
    for sql in [
        "UPDATE IGNORE t SET v = ? WHERE id = ?",
        "UPDATE LOW_PRIORITY t SET v = ? WHERE id = ?",
        "UPDATE t SET v = @x WHERE id = ?",
        "UPDATE t SET v = @@sql_mode WHERE id = ?",
        "UPDATE t SET v = (@x := ?) WHERE id = ?",
        "UPDATE t SET v = @`x` WHERE id = ?",
        "UPDATE t SET v = ? WHERE id = ? ORDER BY id LIMIT 1",
    ] {
        match classify(Dialect::MySql, sql) {
            Classified::Other(NotCoalesced::KeyedForm(_)) => {}
            other => panic!("{sql}: {other:?}"),
        }
    }
    match classify(Dialect::MySql, "SELECT * FROM t WHERE id = ? LIMIT 1") {
        Classified::Other(NotCoalesced::KeyedForm(_)) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn mysql_reads_on_a_base_table_become_the_callers_conditions_joined_by_or() {
    let shape = match classify(
        Dialect::MySql,
        "SELECT *, b + 1 FROM `t` AS k WHERE `id` = ? AND b = ?",
    ) {
        Classified::Batchable(Form::Keyed(shape)) => shape,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        shape.render_or(2),
        "SELECT IF((`id` = ? AND b = ?), 1, 0) | IF((`id` = ? AND b = ?), 2, 0) \
         AS `batchpool mask 1`, k.*, b + 1 FROM `t` AS k \
         WHERE (`id` = ? AND b = ?) OR (`id` = ? AND b = ?)"
    );
    // One mask column per 63 callers, each numbering its callers from bit 0.
    let text = shape.render_or(MASK_BITS + 2);
    assert!(text.contains("AS `batchpool mask 1`, IF("), "{text}");
    assert!(text.contains("AS `batchpool mask 2`, k.*"), "{text}");
    assert!(!text.contains("batchpool mask 3"), "{text}");
    assert!(text.contains(&format!("{}, 0) AS `batchpool mask 1`", 1u64 << 62)));
    assert!(text.contains("IF((`id` = ? AND b = ?), 2, 0) AS `batchpool mask 2`"));
    assert_eq!(text.matches('?').count(), 2 * 2 * (MASK_BITS + 2));
    assert_eq!(text.matches(" OR ").count(), MASK_BITS + 1);
}

#[test]
fn mysql_deletes_become_the_callers_conditions_joined_by_or() {
    let shape = match classify(Dialect::MySql, "DELETE FROM `t` WHERE `id` = ? AND b = ?") {
        Classified::Batchable(Form::Keyed(shape)) => shape,
        other => panic!("{other:?}"),
    };
    assert_eq!(shape.kind, KeyedKind::Delete);
    assert_eq!(
        shape.render_or(2),
        "DELETE FROM `t` WHERE (`id` = ? AND b = ?) OR (`id` = ? AND b = ?) \
         RETURNING IF((`id` = ? AND b = ?), 1, 0) | IF((`id` = ? AND b = ?), 2, 0) \
         AS `batchpool mask 1`"
    );
    let text = shape.render_or(MASK_BITS + 1);
    assert!(
        text.ends_with(
            "AS `batchpool mask 1`, IF((`id` = ? AND b = ?), 1, 0) AS `batchpool mask 2`"
        ),
        "{text}"
    );
}

#[test]
fn update_texts_that_differ_only_in_what_they_assign_are_one_family() {
    let status = keyed("UPDATE kv SET status = $1 WHERE id = $2");
    let hits = keyed("update kv set hits = hits + $1, seen = now() where id = $2;");
    assert!(status.family_key().is_some());
    assert_eq!(status.family_key(), hits.family_key());
    for other in [
        "UPDATE kv SET status = $2 WHERE id = $1",
        "UPDATE kv AS k SET status = $1 WHERE k.id = $2",
        "UPDATE kv2 SET status = $1 WHERE id = $2",
        "UPDATE kv SET status = $1 WHERE id = $2 AND v = $3",
        "UPDATE kv SET status = 1 WHERE id = $1",
    ] {
        assert_ne!(keyed(other).family_key(), status.family_key(), "{other}");
    }
    assert_eq!(keyed("SELECT * FROM kv WHERE id = $1").family_key(), None);
    assert_eq!(keyed("DELETE FROM kv WHERE id = $1").family_key(), None);

    let sql = KeyedShape::render_family(&[&status, &hits], &arrays(2), "$3::int4[]");
    assert_eq!(
        sql,
        "UPDATE kv SET \"status\" = CASE \"batchpool keys\".\"batchpool member\" WHEN 0 THEN \
         (\"batchpool keys\".\"batchpool 1\") ELSE \"status\" END, \"hits\" = CASE \
         \"batchpool keys\".\"batchpool member\" WHEN 1 THEN (hits + \"batchpool keys\".\"batchpool \
         1\") ELSE \"hits\" END, \"seen\" = CASE \"batchpool keys\".\"batchpool member\" WHEN 1 THEN \
         (now()) ELSE \"seen\" END FROM unnest($1::int8[], $2::int8[], $3::int4[]) WITH ORDINALITY AS \
         \"batchpool keys\"(\"batchpool 1\", \"batchpool 2\", \"batchpool member\", \"batchpool ord\") \
         WHERE id = \"batchpool keys\".\"batchpool 2\"\nRETURNING \"batchpool keys\".\"batchpool ord\""
    );
    let types =
        KeyedShape::render_family_types(&[&status], &vec!["NULL::int8[]".to_owned(); 2], "NULL");
    assert_eq!(
        types,
        "SELECT pg_catalog.pg_typeof((\"batchpool keys\".\"batchpool 1\"))::pg_catalog.oid::\
         pg_catalog.int8, pg_catalog.pg_typeof(\"status\")::pg_catalog.oid::pg_catalog.int8 FROM \
         (SELECT) AS \"batchpool one\" LEFT JOIN (kv CROSS JOIN unnest(NULL::int8[], NULL::int8[], \
         NULL) WITH ORDINALITY AS \"batchpool keys\"(\"batchpool 1\", \"batchpool 2\", \"batchpool \
         member\", \"batchpool ord\")) ON false"
    );
}
