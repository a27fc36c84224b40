//! Families of keyed updates on PostgreSQL: texts that update one table by
//! one key and differ only in what they assign (YCSB's ten `UPDATE
//! usertable SET fieldN = $1 WHERE ycsb_key = $2`) share one queue, and
//! their callers go out together as one statement
//! ([`KeyedShape::render_family`]), each row assigned by a `CASE` on the
//! number of its caller's text. A service whose callers spread over many
//! such texts then pays one statement and one commit per flush, not one
//! per text.
//!
//! A text joins a family only when that statement is the text's own for
//! every row: the same parameter types and key parameters as the family's
//! other texts (so rows are encoded, keyed and cut at duplicate keys
//! alike), each assigned expression of exactly its column's type (the
//! `CASE` then converts neither the new value nor a kept one), and the
//! family's statement for the texts so far accepted by the server, run
//! once with no rows (its privileges, every assigned column's included).
//! Each text's own learning still decides whether it is coalesced at all
//! (the table's triggers, rules, constraints). A family holds at most
//! [`MAX_MEMBERS`] texts; later ones are coalesced on their own.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use tokio_postgres::types::Type;

use super::Client;
use super::manager::{NEXT_SHAPE_ID, Prepared};
use super::unnamed::Described;
use crate::classify::KeyedShape;
use crate::sync::lock;

/// Most texts one family holds.
pub(crate) const MAX_MEMBERS: usize = 32;

/// Most families a pool remembers (least recently joined forgotten; their
/// queues keep working).
const MAX_FAMILIES: usize = 256;

/// The families of one pool, by [`KeyedShape::family_key`].
pub(crate) struct Families {
    map: Mutex<LruCache<String, Arc<Family>>>,
}

impl Default for Families {
    fn default() -> Self {
        Families {
            map: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_FAMILIES).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }
}

/// Texts of one family and the statements that run their callers together.
pub(crate) struct Family {
    /// Tells families apart (the engine shares a queue per family).
    pub(crate) id: u64,
    /// Parameter types of each text's statement.
    types: Vec<Type>,
    /// The parameters bound to the key.
    key_params: Vec<usize>,
    /// The array casts of the family's statement (`$1::pg_catalog."int8"[]`).
    arrays: Vec<String>,
    /// The texts, in the order they joined (a row's member number).
    members: Mutex<Vec<Arc<Member>>>,
    /// One text joins at a time.
    joining: tokio::sync::Mutex<()>,
}

/// One text of a family.
pub(crate) struct Member {
    /// What the classifier read.
    form: Arc<KeyedShape>,
    /// The caller's own text (a lone caller runs it).
    pub(crate) sql: Box<str>,
    /// Its prepared statements' key on a connection.
    pub(crate) id: u64,
    /// Unnamed mode: the text as the server described it.
    pub(crate) described: Option<Arc<Described>>,
    /// The family's statement for the texts up to this one.
    pub(crate) combined: Box<str>,
    /// Its prepared statements' key on a connection.
    pub(crate) combined_id: u64,
    /// Unnamed mode: the family's statement as the server described it.
    pub(crate) combined_described: Option<Arc<Described>>,
}

/// A text about to join, as its own learning found it.
pub(crate) struct Candidate<'a> {
    pub(crate) form: &'a Arc<KeyedShape>,
    pub(crate) sql: &'a str,
    pub(crate) id: u64,
    pub(crate) described: Option<Arc<Described>>,
    pub(crate) types: &'a [Type],
    pub(crate) key_params: &'a [usize],
    /// The array casts of its own many-caller statement.
    pub(crate) arrays: &'a [String],
}

/// The cast of the array of text numbers in a family's statement, after
/// the `params` arrays of the texts' parameters.
fn tag_cast(params: usize) -> String {
    format!("${}::pg_catalog.int4[]", params + 1)
}

/// A typed NULL in place of each `$k::type[]` cast (a statement with the
/// same types that binds nothing).
fn nulls(arrays: &[String]) -> Vec<String> {
    arrays
        .iter()
        .map(|a| match a.split_once("::") {
            Some((_, ty)) => format!("NULL::{ty}"),
            None => "NULL".to_owned(),
        })
        .collect()
}

impl Family {
    /// Member `i`, if it has joined.
    pub(crate) fn member(&self, i: u16) -> Option<Arc<Member>> {
        lock(&self.members).get(usize::from(i)).cloned()
    }

    /// Every member's prepared statement keys (dropped together when the
    /// table changed under one of them).
    pub(crate) fn statement_ids(&self) -> Vec<u64> {
        lock(&self.members)
            .iter()
            .flat_map(|m| [m.id, m.combined_id])
            .collect()
    }

    fn fits(&self, c: &Candidate<'_>) -> bool {
        self.types == c.types && self.key_params == c.key_params && self.arrays == c.arrays
    }
}

impl Families {
    /// Lets the text `c` join its family on `conn` (see the module docs):
    /// the family and the text's number in it, or `None` when it is
    /// coalesced on its own. Errors of the checks only keep it out.
    pub(crate) async fn join(
        &self,
        conn: &mut Client,
        c: Candidate<'_>,
    ) -> Option<(Arc<Family>, u16)> {
        // Texts with values of other types are another family.
        let mut key = c.form.family_key()?;
        for ty in c.types {
            key.push_str(&format!("\0{}", ty.oid()));
        }
        let family = {
            let mut map = lock(&self.map);
            match map.get(&key) {
                Some(f) if f.fits(&c) => f.clone(),
                _ => {
                    // New, or the table changed under the old one (whose
                    // texts keep it until they are learned again).
                    let f = Arc::new(Family {
                        id: NEXT_SHAPE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                        types: c.types.to_vec(),
                        key_params: c.key_params.to_vec(),
                        arrays: c.arrays.to_vec(),
                        members: Mutex::default(),
                        joining: tokio::sync::Mutex::new(()),
                    });
                    map.put(key, f.clone());
                    f
                }
            }
        };
        let _turn = family.joining.lock().await;
        let members = lock(&family.members).clone();
        let mut forms: Vec<&KeyedShape> = members.iter().map(|m| &*m.form).collect();
        let again = members.iter().position(|m| *m.sql == *c.sql);
        if again.is_none() {
            if members.len() >= MAX_MEMBERS {
                return None;
            }
            forms.push(c.form);
        }
        let number = again.unwrap_or(members.len());
        let tag = tag_cast(family.types.len());
        let combined = KeyedShape::render_family(&forms[..=number], &family.arrays, &tag);
        let checked = match again {
            // Learned again: the family's statement was checked when the
            // text joined.
            Some(i) => Some((
                members[i].combined_id,
                members[i].combined_described.clone(),
            )),
            None => check(conn, &forms, &family, &combined).await,
        };
        let (combined_id, combined_described) = checked?;
        let member = Arc::new(Member {
            form: c.form.clone(),
            sql: c.sql.into(),
            id: c.id,
            described: c.described,
            combined: combined.into(),
            combined_id,
            combined_described,
        });
        let mut all = lock(&family.members);
        match again {
            Some(i) => all[i] = member,
            None => all.push(member),
        }
        let number = u16::try_from(number).ok()?;
        drop(all);
        Some((family.clone(), number))
    }
}

/// The checks of the family's statement `combined` for the texts `forms`
/// (see the module docs): its prepared statements' key and, unnamed, its
/// description; `None` when it must not be used.
async fn check(
    conn: &mut Client,
    forms: &[&KeyedShape],
    family: &Family,
    combined: &str,
) -> Option<(u64, Option<Arc<Described>>)> {
    let nulls = nulls(&family.arrays);
    let null_tag = "NULL::pg_catalog.int4[]";
    let types = KeyedShape::render_family_types(forms, &nulls, null_tag);
    let row = conn
        .query_typed(&types, &[])
        .await
        .ok()?
        .into_iter()
        .next()?;
    let oids: Vec<i64> = (0..row.len())
        .map(|i| row.try_get::<_, i64>(i))
        .collect::<Result<_, _>>()
        .ok()?;
    if oids.chunks(2).any(|pair| pair.first() != pair.get(1)) {
        tracing::debug!(
            combined,
            "keyed update texts not run together: an assigned expression is not of its \
             column's type"
        );
        return None;
    }
    // Run with no rows: the server checks the statement's privileges.
    let empty = KeyedShape::render_family(forms, &nulls, null_tag);
    if let Err(e) = conn.query_typed(&empty, &[]).await {
        tracing::debug!(combined, error = %e, "keyed update texts not run together");
        return None;
    }
    let prepared = conn.prepare_for(&[combined], false).await.pop()?.ok()?;
    let expected = family.types.iter().map(Type::oid).chain([Type::INT4.oid()]);
    let fits = prepared.params().len() == family.types.len() + 1
        && prepared.params().iter().zip(expected).all(
            |(a, e)| matches!(a.kind(), tokio_postgres::types::Kind::Array(t) if t.oid() == e),
        );
    if !fits {
        return None;
    }
    let described = match prepared {
        Prepared::Unnamed(d) => Some(d),
        Prepared::Named(_) => None,
    };
    Some((
        NEXT_SHAPE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        described,
    ))
}
