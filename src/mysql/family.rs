//! Families of keyed updates on MySQL / MariaDB: texts that update one
//! table by one key and differ only in which columns they set, each to a
//! bare placeholder (YCSB's ten `UPDATE usertable SET FIELDn = ? WHERE
//! YCSB_KEY = ?`), share one queue, and their callers go out together as
//! one statement ([`KeyedShape::render_family_case`]): each column is a
//! `CASE` over the callers, a caller whose text does not set the column
//! passing it by with a flag of 0, and its row keeping the column (`ELSE
//! <the column>`).
//!
//! That `ELSE` makes the `CASE`'s type the aggregate of the values' and
//! the column's. A text joins a family only where that changes no value:
//! each column it sets is a character column (`CHAR`, `VARCHAR`, the
//! `TEXT`s), an integer, `DECIMAL`, `DATE`, `DATETIME`, `TIME` or `YEAR`
//! column, which a kept value passes through a string or a wider number
//! and back unchanged; and a row joins a family statement only where its
//! values are strings or NULL (or integers, for an integer or `DECIMAL`
//! column), which a string or a wider number holds exactly. Other rows go
//! alone. Each text's own learning still decides whether it is coalesced
//! at all (the table's facts, see [`super::update`]), and the family's
//! statement for the texts so far must be one the server prepares with the
//! parameters it should count. A family holds at most [`MAX_MEMBERS`]
//! texts; later ones are coalesced on their own.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lru::LruCache;
use mysql_async::Value;
use mysql_async::prelude::Queryable;

use super::Client;
use super::row::MyRow;
use crate::classify::KeyedShape;
use crate::sync::lock;

/// Most texts one family holds.
pub(crate) const MAX_MEMBERS: usize = 32;

/// Most families a pool remembers (least recently joined forgotten; their
/// queues keep working).
const MAX_FAMILIES: usize = 256;

/// Tells families apart (the engine shares a queue per family).
static NEXT_FAMILY: AtomicU64 = AtomicU64::new(1);

/// The families of one pool, by [`KeyedShape::family_key`] and the key's
/// classes.
pub(crate) struct MyFamilies {
    map: Mutex<LruCache<String, Arc<MyFamily>>>,
}

impl Default for MyFamilies {
    fn default() -> Self {
        MyFamilies {
            map: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_FAMILIES).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }
}

/// Texts of one family.
pub(crate) struct MyFamily {
    /// Tells families apart.
    pub(crate) id: u64,
    /// The texts, in the order they joined (a row's member number).
    members: Mutex<Vec<Arc<MyMember>>>,
    /// One text joins at a time.
    joining: tokio::sync::Mutex<()>,
    /// Rendered statements by (highest member, callers).
    texts: Mutex<HashMap<(u16, usize), Arc<str>>>,
}

/// One text of a family.
pub(crate) struct MyMember {
    /// What the classifier read.
    form: Arc<KeyedShape>,
    /// The caller's own text (a lone caller runs it).
    pub(crate) sql: Arc<str>,
    /// Per column the text sets, whether an integer value keeps its value
    /// through the family statement's `CASE` (an integer or `DECIMAL`
    /// column).
    integers: Vec<bool>,
}

/// How a family statement binds one caller: per column of
/// [`KeyedShape::family_columns`], the member's parameter for it.
struct Plan<'a> {
    columns: Vec<Vec<Option<usize>>>,
    cond: &'a [usize],
}

impl MyFamily {
    /// Member `i`, if it has joined.
    pub(crate) fn member(&self, i: u16) -> Option<Arc<MyMember>> {
        lock(&self.members).get(usize::from(i)).cloned()
    }

    /// Whether `row` (of its member) may share a family statement: its
    /// values for the columns its text sets are strings or NULL, or
    /// integers for an integer or `DECIMAL` column.
    pub(crate) fn fits(&self, row: &MyRow) -> bool {
        let Some(member) = self.member(row.member) else {
            return false;
        };
        member.form.assigned.iter().enumerate().all(|(j, _)| {
            match member.form.bare_param(j).and_then(|p| row.values.get(p)) {
                Some(Value::NULL | Value::Bytes(_)) => true,
                Some(Value::Int(_) | Value::UInt(_)) => member.integers.get(j) == Some(&true),
                _ => false,
            }
        })
    }

    /// The statement of `n` callers of the members up to `highest`, and
    /// its parameters for `rows` (`cond`: the parameters of the members'
    /// shared conditions). `None` when a member is unknown.
    pub(crate) fn statement(
        &self,
        highest: u16,
        rows: &[MyRow],
        cond: &[usize],
    ) -> Option<(Arc<str>, Vec<Value>)> {
        let members: Vec<Arc<MyMember>> =
            lock(&self.members).get(..=usize::from(highest))?.to_vec();
        let forms: Vec<&KeyedShape> = members.iter().map(|m| &*m.form).collect();
        let n = rows.len();
        let text = {
            let mut texts = lock(&self.texts);
            Arc::clone(
                texts
                    .entry((highest, n))
                    .or_insert_with(|| KeyedShape::render_family_case(&forms, n).into()),
            )
        };
        let plan = Plan {
            columns: KeyedShape::family_columns(&forms)?
                .into_iter()
                .map(|(_, params)| params)
                .collect(),
            cond,
        };
        Some((text, plan.params(rows)?))
    }
}

impl Plan<'_> {
    /// The family statement's parameters for `rows`: per column, per caller
    /// its flag, its condition's values and its value (NULL where its text
    /// does not set the column); then per caller its condition's values.
    fn params(&self, rows: &[MyRow]) -> Option<Vec<Value>> {
        let per_caller = self.columns.len() * (self.cond.len() + 2) + self.cond.len();
        let mut out = Vec::with_capacity(rows.len() * per_caller);
        for column in &self.columns {
            for row in rows {
                let param = *column.get(usize::from(row.member))?;
                out.push(Value::Int(i64::from(param.is_some())));
                for &p in self.cond {
                    out.push(row.values.get(p)?.clone());
                }
                out.push(match param {
                    Some(p) => row.values.get(p)?.clone(),
                    None => Value::NULL,
                });
            }
        }
        for row in rows {
            for &p in self.cond {
                out.push(row.values.get(p)?.clone());
            }
        }
        Some(out)
    }
}

impl MyFamilies {
    /// Lets the text `sql` (`form`, whose columns' integer fitness is
    /// `integers`, see [`MyMember`]) join its family on `conn`: the family
    /// and the text's number in it, or `None` when it is coalesced on its
    /// own. `classes` tells the key's comparison classes (texts of one
    /// family compare their keys alike). Errors of the check only keep it
    /// out.
    pub(crate) async fn join(
        &self,
        conn: &mut Client,
        form: &Arc<KeyedShape>,
        sql: &str,
        integers: Vec<bool>,
        classes: &str,
        cond: usize,
    ) -> Option<(Arc<MyFamily>, u16)> {
        let key = format!("{}\0{classes}", form.family_key()?);
        let family = {
            let mut map = lock(&self.map);
            match map.get(&key) {
                Some(f) => f.clone(),
                None => {
                    let f = Arc::new(MyFamily {
                        id: NEXT_FAMILY.fetch_add(1, Ordering::Relaxed),
                        members: Mutex::default(),
                        joining: tokio::sync::Mutex::new(()),
                        texts: Mutex::default(),
                    });
                    map.put(key, f.clone());
                    f
                }
            }
        };
        let _turn = family.joining.lock().await;
        let members = lock(&family.members).clone();
        if let Some(i) = members.iter().position(|m| *m.sql == *sql) {
            return Some((family.clone(), u16::try_from(i).ok()?));
        }
        if members.len() >= MAX_MEMBERS {
            return None;
        }
        let mut forms: Vec<&KeyedShape> = members.iter().map(|m| &*m.form).collect();
        forms.push(form);
        let columns = KeyedShape::family_columns(&forms)?.len();
        let two = KeyedShape::render_family_case(&forms, 2);
        let stmt = conn.prep(&two).await.ok()?;
        let expected = 2 * (columns * (cond + 2) + cond);
        if usize::from(stmt.num_params()) != expected {
            return None;
        }
        let number = u16::try_from(members.len()).ok()?;
        lock(&family.members).push(Arc::new(MyMember {
            form: form.clone(),
            sql: sql.into(),
            integers,
        }));
        Some((family.clone(), number))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mysql_async::Value;

    use super::{MyFamily, MyMember, Plan};
    use crate::classify::{Classified, Dialect, Form, KeyedShape, classify};
    use crate::mysql::row::MyRow;

    fn shape(sql: &str) -> Arc<KeyedShape> {
        match classify(Dialect::MySql, sql) {
            Classified::Batchable(Form::Keyed(shape)) => shape,
            other => panic!("{sql}: {other:?}"),
        }
    }

    fn row(member: u16, values: Vec<Value>) -> MyRow {
        MyRow {
            member,
            ..MyRow::of(values)
        }
    }

    fn family(texts: &[(&str, Vec<bool>)]) -> MyFamily {
        MyFamily {
            id: 1,
            members: std::sync::Mutex::new(
                texts
                    .iter()
                    .map(|(sql, integers)| {
                        Arc::new(MyMember {
                            form: shape(sql),
                            sql: (*sql).into(),
                            integers: integers.clone(),
                        })
                    })
                    .collect(),
            ),
            joining: tokio::sync::Mutex::new(()),
            texts: std::sync::Mutex::default(),
        }
    }

    #[test]
    fn each_column_is_a_case_of_the_callers_that_set_it() {
        let a = shape("UPDATE t SET f1 = ? WHERE k = ?");
        let b = shape("UPDATE t SET `f2` = ? , f1 = ? WHERE k = ?");
        assert_eq!(
            KeyedShape::render_family_case(&[&a, &b], 2),
            "UPDATE t SET f1 = CASE WHEN ? AND (k = ?) THEN (?) WHEN ? AND (k = ?) THEN (?) \
             ELSE f1 END, `f2` = CASE WHEN ? AND (k = ?) THEN (?) WHEN ? AND (k = ?) THEN (?) \
             ELSE `f2` END WHERE (k = ?) OR (k = ?)"
        );
        // Not a bare placeholder: no family statement.
        let c = shape("UPDATE t SET f1 = f1 + ? WHERE k = ?");
        assert!(KeyedShape::family_columns(&[&a, &c]).is_none());
        assert_eq!(KeyedShape::render_family_case(&[&a, &c], 2), "");
    }

    #[test]
    fn a_caller_binds_its_flag_condition_and_value_per_column() {
        let a = shape("UPDATE t SET f1 = ? WHERE k = ?");
        let b = shape("UPDATE t SET f2 = ? WHERE k = ?");
        let columns: Vec<Vec<Option<usize>>> = KeyedShape::family_columns(&[&a, &b])
            .unwrap()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        assert_eq!(columns, vec![vec![Some(0), None], vec![None, Some(0)]]);
        let plan = Plan {
            columns,
            cond: &[1],
        };
        let s = |v: &str| Value::Bytes(v.as_bytes().to_vec());
        let rows = [
            row(0, vec![s("a"), Value::Int(1)]),
            row(1, vec![s("b"), Value::Int(2)]),
        ];
        let i = Value::Int;
        assert_eq!(
            plan.params(&rows).unwrap(),
            vec![
                i(1),
                i(1),
                s("a"),
                i(0),
                i(2),
                Value::NULL, // f1
                i(0),
                i(1),
                Value::NULL,
                i(1),
                i(2),
                s("b"), // f2
                i(1),
                i(2), // WHERE
            ]
        );
        // A member the plan does not know.
        assert!(plan.params(&[row(2, vec![s("c"), i(3)])]).is_none());
    }

    #[test]
    fn rows_fit_a_family_statement_with_strings_null_or_integers_for_integer_columns() {
        let f = family(&[
            ("UPDATE t SET v = ? WHERE k = ?", vec![false]),
            ("UPDATE t SET n = ? WHERE k = ?", vec![true]),
        ]);
        let s = |v: &str| Value::Bytes(v.as_bytes().to_vec());
        assert!(f.fits(&row(0, vec![s("x"), Value::Int(1)])));
        assert!(f.fits(&row(0, vec![Value::NULL, Value::Int(1)])));
        assert!(!f.fits(&row(0, vec![Value::Int(5), Value::Int(1)])));
        assert!(f.fits(&row(1, vec![Value::Int(5), Value::Int(1)])));
        assert!(!f.fits(&row(1, vec![Value::Double(0.5), Value::Int(1)])));
        assert!(!f.fits(&row(2, vec![s("x"), Value::Int(1)])));
    }
}
