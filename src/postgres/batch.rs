//! The PostgreSQL backend of the engine: builds and runs one multi-row
//! INSERT of a batchable shape on a pooled tokio-postgres connection, and
//! maps the statement's result back to each row.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::TryStreamExt;
use lru::LruCache;
use tokio_postgres::types::Type;
use tokio_postgres::{Row, Statement};

use super::copy::{PgCopy, eligible, failed_row};
use super::encode::{PgRow, Raw, RawValue};
use super::errors::{sent_error, unsent_error};
use super::keyed::PgKeyed;
use super::manager::{COPY_KEY, ClientWrapper, NEXT_SHAPE_ID, Prepared};
use super::own::OwnFailures;
use super::table::{KeyMatch, Refusal, refusal};
use super::unnamed::Described;
use super::unnest::{PgUnnest, text as unnest_text};
use super::{Client, Manager, Outcome, Postgres, quote_ident};
use crate::backend::batch::{Backend, ChunkError, ChunkResult};
use crate::classify::{Conflict, Dialect, Form, InsertShape};
use crate::error::Error;
use crate::explain::NotCoalesced;
use crate::sync::lock;

/// Rendered n-row texts kept per shape (unnamed mode).
const RENDERED: NonZeroUsize = NonZeroUsize::new(32).unwrap();

/// A batchable statement shape, prepared once.
pub(crate) struct PgInsert {
    id: u64,
    shape: Arc<InsertShape>,
    /// Unnamed mode: what was learned of the one-row text.
    described: Option<Arc<Described>>,
    /// Unnamed mode: the n-row texts rendered so far.
    texts: Mutex<LruCache<usize, Arc<str>>>,
    /// Parameter types of the one-row statement, as the server inferred them.
    pub(crate) types: Vec<Type>,
    /// ON CONFLICT with a row filter: RETURNING these quoted target columns
    /// and match them against these parameter indexes to learn which rows
    /// were written.
    key_match: Option<(String, Vec<usize>)>,
    /// A plain shape COPY may write (see [`super::copy`]).
    copy: Option<PgCopy>,
    /// Unnamed mode, a plain shape: its one text for any row count (see
    /// [`super::unnest`]).
    unnest: Option<PgUnnest>,
    /// The unique indexes whose violations are a row's own (see
    /// [`super::own`]).
    own: OwnFailures,
}

/// The conflict key of an `ON CONFLICT` that may skip rows: the quoted
/// column list to return, the parameters bound to it, and its columns.
type Key = (String, Vec<usize>, Vec<String>);

impl Postgres {
    fn key_match(shape: &InsertShape) -> Result<Option<Key>, ()> {
        let target = match &shape.conflict {
            Conflict::None | Conflict::DuplicateKeyUpdate => return Ok(None),
            // Every row is inserted or updated: one row affected each.
            Conflict::DoUpdate {
                has_where: false, ..
            } => return Ok(None),
            Conflict::DoNothing { target } | Conflict::DoUpdate { target, .. } => target,
        };
        // Rows may be skipped: which ones is learned by returning the
        // conflict key, which needs a plain column target bound to bare
        // parameters, and no RETURNING of the caller's own.
        let (Some(target), Some(columns), false) = (target, &shape.columns, shape.returning) else {
            return Err(());
        };
        let mut params = Vec::with_capacity(target.len());
        for col in target {
            let pos = columns.iter().position(|c| c == col).ok_or(())?;
            let param = shape.tuple_params.get(pos).copied().flatten().ok_or(())?;
            params.push(param);
        }
        let list = target
            .iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Some((list, params, target.clone())))
    }

    fn outputs(shape: &PgInsert, rows: &[PgRow], result: Written) -> Vec<Outcome> {
        let n = rows.len();
        match result {
            Written::Count(count) => {
                // Without triggers that skip rows, a plain or DO UPDATE
                // insert writes every row once.
                let exact = count == n as u64;
                (0..n).map(|_| Outcome::new(1, exact, None, None)).collect()
            }
            Written::Rows(returned) if shape.key_match.is_none() => {
                let exact = returned.len() == n;
                if exact {
                    returned
                        .into_iter()
                        .map(|r| Outcome::new(1, true, None, Some(r)))
                        .collect()
                } else {
                    (0..n).map(|_| Outcome::new(1, false, None, None)).collect()
                }
            }
            Written::Rows(returned) => {
                let params = shape
                    .key_match
                    .as_ref()
                    .map(|(_, p)| p.as_slice())
                    .unwrap_or_default();
                // Returned keys are a subsequence of the rows, in VALUES
                // order: walk both.
                let mut next = 0;
                rows.iter()
                    .map(|row| {
                        let written = returned.get(next).is_some_and(|r| {
                            params.iter().enumerate().all(|(col, &p)| {
                                let mine = row.param(p);
                                r.try_get::<_, RawValue<'_>>(col).ok().map(|v| v.0) == Some(mine)
                            })
                        });
                        if written {
                            next += 1;
                        }
                        Outcome::new(u64::from(written), true, None, None)
                    })
                    .collect()
            }
        }
    }
}

/// One statement of a shape, ready to send: whatever may need a round trip
/// of its own (preparing, type lookups) is done, so sending it is one write.
enum Ready<'a> {
    /// The connection's prepared n-row statement.
    Named(Statement),
    /// Unnamed mode: the n-row text, sent with the learned types.
    Unnamed(Arc<str>),
    /// The shape's prepared COPY.
    Copy(Statement, &'a PgCopy),
    /// Unnamed mode: the shape's text of one array per column.
    Unnest(&'a PgUnnest),
    /// Unnamed mode: the shape's COPY, prepared and closed inside the
    /// transaction that runs it (see [`Postgres::send`]).
    CopyInTransaction {
        copy: &'a PgCopy,
        /// Set when the COPY could not be prepared: nothing ran.
        unprepared: AtomicBool,
    },
}

impl Ready<'_> {
    fn copies(&self) -> bool {
        matches!(self, Ready::Copy(..) | Ready::CopyInTransaction { .. })
    }
}

impl Postgres {
    /// Says once in the pool's life that the table facts cannot be read
    /// from the catalog, so no statement is coalesced (each text's
    /// [`explain`](crate::Pool::explain) gives the server's error).
    fn warn_unreadable(&self, why: &str) {
        if !self.catalog_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "batchpool cannot read the catalog facts of the tables it is asked to \
                 coalesce into (pg_class, pg_attribute, pg_trigger, pg_rewrite, pg_proc, \
                 pg_partition_tree...), so every INSERT runs as its own statement: {why}"
            );
        }
    }

    /// Whether `n` rows of `shape` go out as one COPY (never through a
    /// pooler that cannot pass it: see [`FarEnd::copies`](super::pooler::FarEnd::copies)).
    fn copies(&self, shape: &PgInsert, n: usize) -> bool {
        shape.copy.is_some() && self.copy_threshold.is_some_and(|min| n >= min) && self.far.copies()
    }

    /// Gets the statement for `n` rows of `shape` ready on `conn`.
    async fn ready<'a>(
        &self,
        conn: &ClientWrapper,
        shape: &'a PgInsert,
        n: usize,
    ) -> Result<Ready<'a>, ChunkError<Outcome>> {
        let unsent = |e| ChunkError::Statement(unsent_error(e));
        if let Some(copy) = shape.copy.as_ref().filter(|_| self.copies(shape, n)) {
            if conn.unnamed() {
                return Ok(Ready::CopyInTransaction {
                    copy,
                    unprepared: AtomicBool::new(false),
                });
            }
            let stmt = conn
                .prepare_batch(shape.id, COPY_KEY, || copy.sql.clone(), &[])
                .await
                .map_err(unsent)?;
            return Ok(Ready::Copy(stmt, copy));
        }
        let extra = shape.key_match.as_ref().map(|(list, _)| list.as_str());
        if conn.unnamed() {
            if let Some(described) = &shape.described {
                conn.ensure_types(described)
                    .await
                    .map_err(ChunkError::Statement)?;
            }
            if let Some(unnest) = shape.unnest.as_ref().filter(|_| n >= 2) {
                return Ok(Ready::Unnest(unnest));
            }
            let mut texts = lock(&shape.texts);
            let sql = match texts.get(&n) {
                Some(sql) => Arc::clone(sql),
                None => {
                    let sql: Arc<str> = shape.shape.render(n, extra).into();
                    texts.put(n, Arc::clone(&sql));
                    sql
                }
            };
            return Ok(Ready::Unnamed(sql));
        }
        let stmt = conn
            .prepare_batch(shape.id, n, || shape.shape.render(n, extra), &shape.types)
            .await
            .map_err(unsent)?;
        Ok(Ready::Named(stmt))
    }

    /// Sends `rows` as `ready` and reads the answer. The request is written
    /// on the first poll, before anything is awaited: futures of two
    /// statements polled in turn go out in that order, and the second is on
    /// the wire while the first runs.
    async fn send(
        conn: &ClientWrapper,
        shape: &PgInsert,
        ready: &Ready<'_>,
        rows: &[PgRow],
    ) -> Result<Written, tokio_postgres::Error> {
        match ready {
            Ready::Named(stmt) => {
                let mut params = Vec::with_capacity(rows.len() * shape.types.len());
                for row in rows {
                    params.extend(row.raw());
                }
                if stmt.columns().is_empty() {
                    conn.execute_raw(stmt, params).await.map(Written::Count)
                } else {
                    let stream = conn.query_raw(stmt, params).await?;
                    stream.try_collect::<Vec<Row>>().await.map(Written::Rows)
                }
            }
            Ready::Unnamed(sql) => {
                let params = rows
                    .iter()
                    .flat_map(|row| row.raw().zip(shape.types.iter().cloned()));
                let stream = conn.query_typed_raw(sql, params).await?;
                futures_util::pin_mut!(stream);
                let mut returned = Vec::new();
                while let Some(row) = stream.try_next().await? {
                    returned.push(row);
                }
                Ok(if shape.shape.returning || shape.key_match.is_some() {
                    Written::Rows(returned)
                } else {
                    Written::Count(stream.rows_affected().unwrap_or(0))
                })
            }
            Ready::Unnest(unnest) => {
                let arrays = unnest.arrays(rows);
                let params = arrays
                    .iter()
                    .map(|(bytes, ty)| (Raw::bytes(bytes), ty.clone()));
                let stream = conn.query_typed_raw(&unnest.sql, params).await?;
                futures_util::pin_mut!(stream);
                while stream.try_next().await?.is_some() {}
                Ok(Written::Count(stream.rows_affected().unwrap_or(0)))
            }
            Ready::CopyInTransaction { copy, unprepared } => {
                // Behind a transaction-mode pooler a named statement lives
                // only as long as the transaction that holds the server
                // connection: the COPY is prepared after BEGIN (one round
                // trip), run, and closed before COMMIT, all on the one
                // server connection the pooler keeps for the transaction.
                let data = copy.data(rows);
                let client: &tokio_postgres::Client = conn;
                let (begun, prepared) = futures_util::future::join(
                    client.batch_execute("BEGIN"),
                    client.prepare(&copy.sql),
                )
                .await;
                if let Err(e) = begun {
                    // Not a transaction: the statement may be left on
                    // whichever server connection ran the prepare.
                    conn.retire();
                    return Err(e);
                }
                let stmt = match prepared {
                    Ok(stmt) => stmt,
                    Err(e) => {
                        // Nothing ran; the failed prepare aborted the
                        // transaction.
                        unprepared.store(true, Ordering::Relaxed);
                        if client.batch_execute("ROLLBACK").await.is_err() {
                            conn.retire();
                        }
                        return Err(e);
                    }
                };
                let sink = client.copy_in::<_, bytes::Bytes>(&stmt).await;
                // The Close queued by the drop leaves after the COPY's data
                // and ahead of the COMMIT (the driver sends requests in
                // order, a COPY's until its end); the server takes a Close
                // in a failed transaction too.
                drop(stmt);
                let sink = match sink {
                    Ok(sink) => sink,
                    Err(e) => {
                        conn.retire();
                        return Err(e);
                    }
                };
                Self::copy_and_commit(conn, sink, data).await
            }
            Ready::Copy(stmt, copy) => {
                // COPY's rows commit when the server reaches the Sync after
                // its data, which it answers after COPY's CommandComplete;
                // the driver's sink stops reading at CommandComplete, so a
                // commit that fails (a deferred constraint) or never happens
                // (the session ends) would go unseen. In an explicit
                // transaction the COMMIT's own answer is the statement's.
                // BEGIN goes out ahead of the COPY and COMMIT right behind its
                // data: no round trip is added.
                let data = copy.data(rows);
                let (begun, sink) = futures_util::future::join(
                    conn.batch_execute("BEGIN"),
                    conn.copy_in::<_, bytes::Bytes>(stmt),
                )
                .await;
                let sink = match (begun, sink) {
                    (Ok(()), Ok(sink)) => sink,
                    (Err(e), _) | (_, Err(e)) => {
                        conn.retire();
                        return Err(e);
                    }
                };
                Self::copy_and_commit(conn, sink, data).await
            }
        }
    }

    /// Sends a started COPY's `data` and, right behind it, the `COMMIT` of
    /// its transaction.
    async fn copy_and_commit(
        conn: &ClientWrapper,
        sink: tokio_postgres::CopyInSink<bytes::Bytes>,
        data: bytes::Bytes,
    ) -> Result<Written, tokio_postgres::Error> {
        futures_util::pin_mut!(sink);
        if let Err(e) = futures_util::SinkExt::send(&mut sink, data).await {
            // The sink, dropped unfinished, ends the COPY with
            // CopyFail: the transaction would stay open, aborted.
            conn.retire();
            return Err(e);
        }
        let (copied, committed) =
            futures_util::future::join(sink.finish(), conn.batch_execute("COMMIT")).await;
        // A COPY that failed was rolled back by that COMMIT.
        let n = copied?;
        committed.map(|()| Written::Count(n))
    }

    /// Each row's outcome from what the server answered to its statement.
    fn conclude(
        conn: &ClientWrapper,
        shape: &PgInsert,
        ready: &Ready<'_>,
        rows: &[PgRow],
        written: Result<Written, tokio_postgres::Error>,
    ) -> ChunkResult<Outcome> {
        match written {
            Ok(w) => Ok(Self::outputs(shape, rows, w)),
            Err(e)
                if matches!(ready, Ready::CopyInTransaction { unprepared, .. }
                    if unprepared.load(Ordering::Relaxed)) =>
            {
                // The COPY was not prepared (the table changed, or a
                // statement of the same name was left on the server
                // connection): nothing ran, the rows go again.
                Err(ChunkError::Stale(unsent_error(e)))
            }
            Err(e) if e.as_db_error().is_some_and(|db| conn.stale(db)) => {
                // Nothing ran: prepare afresh next time.
                conn.forget_batch(shape.id);
                Err(ChunkError::Stale(sent_error(e)))
            }
            Err(e) => {
                let at = ready
                    .copies()
                    .then(|| failed_row(&e))
                    .flatten()
                    .or_else(|| {
                        let db = e.as_db_error()?;
                        super::errors::matched_row(db, &shape.shape, &shape.types, rows)
                    });
                let err = conn.sent_error(e);
                let row = err.is_db() && !err.is_statement_level();
                Err(match (row, at) {
                    (true, Some(at)) => ChunkError::RowAt(at, err),
                    (true, None) => ChunkError::Row(err),
                    (false, _) => ChunkError::Statement(err),
                })
            }
        }
    }

    /// Both statements of a pipelined pair, in one transaction (see
    /// [`Backend::execute_pair`]): a statement that failed is answered as
    /// it is, the other one is not run (rolled back, or never run).
    async fn atomic_pair(
        conn: &ClientWrapper,
        shape: &PgInsert,
        (a, a_rows): (&Ready<'_>, &[PgRow]),
        (b, b_rows): (&Ready<'_>, &[PgRow]),
    ) -> (ChunkResult<Outcome>, ChunkResult<Outcome>) {
        let (begin, wa, wb, commit) = futures_util::future::join4(
            conn.batch_execute("BEGIN"),
            Self::send(conn, shape, a, a_rows),
            Self::send(conn, shape, b, b_rows),
            conn.batch_execute("COMMIT"),
        )
        .await;
        let unknown = |e: tokio_postgres::Error| {
            let err = conn.sent_error(e);
            (
                Err(ChunkError::Statement(err.clone())),
                Err(ChunkError::Statement(err)),
            )
        };
        if let Err(e) = begin {
            // Not a transaction after all: whatever ran, ran on its own.
            return unknown(e);
        }
        match (wa, wb) {
            (Err(e), _) if e.as_db_error().is_some() => (
                Self::conclude(conn, shape, a, a_rows, Err(e)),
                Err(ChunkError::NotRun),
            ),
            (Ok(_), Err(e)) if e.as_db_error().is_some() => (
                Err(ChunkError::NotRun),
                Self::conclude(conn, shape, b, b_rows, Err(e)),
            ),
            (Err(e), _) | (_, Err(e)) => unknown(e),
            (Ok(wa), Ok(wb)) => match commit {
                Ok(()) => (
                    Self::conclude(conn, shape, a, a_rows, Ok(wa)),
                    Self::conclude(conn, shape, b, b_rows, Ok(wb)),
                ),
                // A deferred constraint or a serialization failure at
                // COMMIT: nothing committed, and the row it is about may be
                // in either statement.
                Err(e) if e.as_db_error().is_some() => {
                    let err = conn.sent_error(e);
                    (Err(ChunkError::Row(err.clone())), Err(ChunkError::Row(err)))
                }
                Err(e) => unknown(e),
            },
        }
    }
}

impl Postgres {
    /// Unnamed mode: the unnest text of a plain `shape` (parameter
    /// `types`), learned like any text; `None` for a shape that does not
    /// qualify or a text the server does not take.
    async fn learn_unnest(
        conn: &ClientWrapper,
        shape: &InsertShape,
        types: &[Type],
    ) -> Result<Option<PgUnnest>, Error> {
        let Some((sql, params)) = unnest_text(shape, types) else {
            return Ok(None);
        };
        let learned = conn.prepare_for(&[&sql], false).await.pop();
        Ok(match learned {
            Some(Ok(Prepared::Unnamed(described))) => PgUnnest::new(sql, params, &described, types),
            Some(Err(e)) if e.as_db_error().is_none() => return Err(e),
            _ => None,
        })
    }
}

enum Written {
    Count(u64),
    Rows(Vec<Row>),
}

/// The INSERT side of the backend (see `Backend`'s methods of the same
/// names).
impl Postgres {
    fn same_insert(old: &PgInsert, new: &PgInsert) -> bool {
        old.types == new.types
            && old.key_match == new.key_match
            && old.copy == new.copy
            && old.unnest.as_ref().map(|u| &u.sql) == new.unnest.as_ref().map(|u| &u.sql)
    }

    async fn prepare_insert(
        &self,
        conn: &mut Client,
        sql: &str,
        shape: Arc<InsertShape>,
    ) -> Result<Result<PgInsert, NotCoalesced>, Error> {
        let Ok(key_match) = Self::key_match(&shape) else {
            return Ok(Err(NotCoalesced::Declined(
                "ON CONFLICT that may skip rows is coalesced only with a plain column \
                 conflict target bound to bare parameters and no RETURNING of its own \
                 (otherwise the skipped rows cannot be told apart)"
                    .into(),
            )));
        };
        // Learned afresh: the table may have changed since a cached prepare.
        conn.forget(sql);
        let stmt = conn
            .prepare_for(&[sql], false)
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::internal("a text was not prepared")))?;
        if stmt.params().len() != shape.params_per_row {
            // The server sees the parameters differently from the classifier:
            // do not rewrite what we do not understand.
            return Ok(Err(NotCoalesced::Declined(format!(
                "the server counts {} parameters where the text shows {}",
                stmt.params().len(),
                shape.params_per_row
            ))));
        }
        let key = key_match
            .as_ref()
            .map(|(_, params, columns)| KeyMatch { columns, params });
        match refusal(conn, &shape, stmt.params(), key).await? {
            None => {}
            Some(Refusal::Facts(why)) => return Ok(Err(NotCoalesced::Declined(why))),
            Some(Refusal::Unreadable(why)) => {
                self.warn_unreadable(&why);
                return Ok(Err(NotCoalesced::Declined(why)));
            }
        }
        Ok(Ok(PgInsert {
            id: NEXT_SHAPE_ID.fetch_add(1, Ordering::Relaxed),
            types: stmt.params().to_vec(),
            described: match &stmt {
                Prepared::Unnamed(described) => Some(Arc::clone(described)),
                Prepared::Named(_) => None,
            },
            texts: Mutex::new(LruCache::new(RENDERED)),
            own: OwnFailures::default(),
            copy: match self.copy_threshold {
                Some(_) if self.far.copies() => eligible(conn, &shape, stmt.params()).await?,
                _ => None,
            },
            unnest: match &stmt {
                Prepared::Unnamed(_) => Self::learn_unnest(conn, &shape, stmt.params()).await?,
                Prepared::Named(_) => None,
            },
            shape,
            key_match: key_match.map(|(list, params, _)| (list, params)),
        }))
    }

    async fn execute_insert(
        &self,
        conn: &mut Client,
        shape: &PgInsert,
        rows: &[PgRow],
    ) -> ChunkResult<Outcome> {
        if conn.is_broken() {
            return Err(ChunkError::Statement(Error::closed_before_send()));
        }
        let ready = self.ready(conn, shape, rows.len()).await?;
        if conn.is_broken() {
            return Err(ChunkError::Statement(Error::closed_before_send()));
        }
        let written = Self::send(conn, shape, &ready, rows).await;
        let result = Self::conclude(conn, shape, &ready, rows, written);
        Self::own(conn, shape, &ready, rows, result).await
    }

    /// `result` of an autocommit statement of `rows`, with a failure that
    /// is provably the named row's own said so (see [`super::own`]): only a
    /// multi-row INSERT's, not a COPY's, whose error carries the COPY's
    /// context where the row's own INSERT would have none.
    async fn own(
        conn: &ClientWrapper,
        shape: &PgInsert,
        ready: &Ready<'_>,
        rows: &[PgRow],
        result: ChunkResult<Outcome>,
    ) -> ChunkResult<Outcome> {
        match result {
            Err(ChunkError::RowAt(at, err)) if rows.len() > 1 && !ready.copies() => {
                let own = match err.as_db_error() {
                    Some(db) => {
                        shape
                            .own
                            .proven(conn, db, &shape.shape, &shape.types, rows, at)
                            .await
                    }
                    None => false,
                };
                Err(if own {
                    ChunkError::RowFailed(at, err)
                } else {
                    ChunkError::RowAt(at, err)
                })
            }
            result => result,
        }
    }

    fn pipelines_insert(
        &self,
        shape: &PgInsert,
        first: Option<usize>,
        second: Option<usize>,
    ) -> bool {
        // Multi-row INSERTs only: see `execute_pair` for COPY.
        let insert = |rows: Option<usize>| rows.is_none_or(|n| !self.copies(shape, n));
        insert(first) && insert(second)
    }

    async fn execute_insert_pair(
        &self,
        conn: &mut Client,
        shape: &PgInsert,
        first: &[PgRow],
        second: &[PgRow],
        atomic: bool,
    ) -> (ChunkResult<Outcome>, ChunkResult<Outcome>) {
        let a = match self.ready(conn, shape, first.len()).await {
            Ok(a) => a,
            Err(e) => return (Err(e), Err(ChunkError::NotRun)),
        };
        let b = match self.ready(conn, shape, second.len()).await {
            Ok(b) => b,
            Err(_) => {
                // The second one fails again when it is run on its own.
                let written = Self::send(conn, shape, &a, first).await;
                let result = Self::conclude(conn, shape, &a, first, written);
                return (
                    Self::own(conn, shape, &a, first, result).await,
                    Err(ChunkError::NotRun),
                );
            }
        };
        if conn.is_broken() {
            let closed = || Err(ChunkError::Statement(Error::closed_before_send()));
            return (closed(), closed());
        }
        if a.copies() || b.copies() || (atomic && !self.far.pairs_in_transactions()) {
            // No COPY in a pipeline: the second COPY's data could not go out
            // before the first is answered anyway, and a COPY refused at its
            // Bind (in a transaction the first statement aborted) leaves the
            // driver out of step with the server (see `retire`). Nor a pair
            // that must be one transaction where the pooler refuses
            // transaction blocks, or through pgpool-II (see
            // `ClientWrapper::in_turn`): one after the other keeps their
            // order. The first alone; the engine sends the second after it.
            let written = Self::send(conn, shape, &a, first).await;
            let result = Self::conclude(conn, shape, &a, first, written);
            return (
                Self::own(conn, shape, &a, first, result).await,
                Err(ChunkError::NotRun),
            );
        }
        if atomic {
            return Self::atomic_pair(conn, shape, (&a, first), (&b, second)).await;
        }
        let (wa, wb) = futures_util::future::join(
            Self::send(conn, shape, &a, first),
            Self::send(conn, shape, &b, second),
        )
        .await;
        // Two statements on their own, one after the other: the second's
        // key in conflict may be the first's row, which was then in the
        // table before the second ran.
        let ra = Self::conclude(conn, shape, &a, first, wa);
        let rb = Self::conclude(conn, shape, &b, second, wb);
        (
            Self::own(conn, shape, &a, first, ra).await,
            Self::own(conn, shape, &b, second, rb).await,
        )
    }
}

/// A batchable statement shape, prepared once.
pub(crate) enum PgShape {
    /// A single-row INSERT.
    Insert(PgInsert),
    /// A keyed read, update or delete.
    Keyed(PgKeyed),
}

impl PgShape {
    /// Parameter types of one caller's statement, as the server inferred
    /// them (a row is encoded to them).
    pub(crate) fn types(&self) -> &[Type] {
        match self {
            PgShape::Insert(s) => &s.types,
            PgShape::Keyed(s) => s.types(),
        }
    }
}

impl Backend for Postgres {
    const DIALECT: Dialect = Dialect::Postgres;

    type Connections = deadpool::managed::Pool<Manager>;
    type Row = PgRow;
    type Output = Outcome;
    type Shape = PgShape;

    fn max_statement_bytes(&self) -> usize {
        // The protocol's message length is an Int32.
        (i32::MAX as usize) - 4096
    }

    fn any_size(&self, shape: &PgShape, rows: usize) -> bool {
        matches!(shape, PgShape::Insert(s) if self.copies(s, rows))
    }

    fn one_text(&self, shape: &PgShape) -> bool {
        matches!(shape, PgShape::Keyed(_))
    }

    fn reruns_any_size(&self, shape: &PgShape) -> bool {
        // Any n-row INSERT is prepared (named mode) or rendered (unnamed
        // mode) on first use, and kept in the connection's or the shape's
        // bounded cache.
        matches!(shape, PgShape::Insert(_))
    }

    fn uses_bulk(&self, shape: &PgShape, rows: &[PgRow]) -> bool {
        matches!(shape, PgShape::Insert(s) if self.copies(s, rows.len()))
    }

    fn runs(&self, shape: &PgShape, rows: &[PgRow]) -> Option<Vec<usize>> {
        match shape {
            PgShape::Insert(_) => None,
            PgShape::Keyed(k) => k.runs(rows),
        }
    }

    fn connections(&self) -> &deadpool::managed::Pool<Manager> {
        &self.pool
    }

    fn family(shape: &PgShape) -> Option<u64> {
        match shape {
            PgShape::Keyed(k) => k.family_id(),
            PgShape::Insert(_) => None,
        }
    }

    fn same_shape(old: &PgShape, new: &PgShape) -> bool {
        match (old, new) {
            (PgShape::Insert(a), PgShape::Insert(b)) => Self::same_insert(a, b),
            (PgShape::Keyed(a), PgShape::Keyed(b)) => a.same(b),
            _ => false,
        }
    }

    async fn fingerprint(&self, conn: &mut Client, form: &Form) -> Result<Option<String>, Error> {
        super::table::fingerprint(conn, form.table(), form.calls()).await
    }

    async fn prepare_shape(
        &self,
        conn: &mut Client,
        sql: &str,
        form: Form,
    ) -> Result<Result<PgShape, NotCoalesced>, Error> {
        Ok(match form {
            Form::Insert(shape) => self
                .prepare_insert(conn, sql, shape)
                .await?
                .map(PgShape::Insert),
            Form::Keyed(shape) => {
                let learned = PgKeyed::learn(conn, sql, shape, &self.families).await?;
                if let Err(NotCoalesced::Declined(why)) = &learned
                    && why.starts_with(super::keyed::UNREADABLE)
                {
                    self.warn_unreadable(why);
                }
                learned.map(PgShape::Keyed)
            }
        })
    }

    async fn execute<'a>(
        &'a self,
        conn: &'a mut Client,
        shape: &'a PgShape,
        rows: &'a [PgRow],
    ) -> ChunkResult<Outcome> {
        match shape {
            PgShape::Insert(s) => self.execute_insert(conn, s, rows).await,
            PgShape::Keyed(k) => k.execute(conn, rows).await,
        }
    }

    fn pipelines(&self, shape: &PgShape, first: Option<usize>, second: Option<usize>) -> bool {
        match shape {
            PgShape::Insert(s) => self.pipelines_insert(s, first, second),
            PgShape::Keyed(_) => false,
        }
    }

    async fn execute_pair<'a>(
        &'a self,
        conn: &'a mut Client,
        shape: &'a PgShape,
        first: &'a [PgRow],
        second: &'a [PgRow],
        atomic: bool,
    ) -> (ChunkResult<Outcome>, ChunkResult<Outcome>) {
        match shape {
            PgShape::Insert(s) => {
                self.execute_insert_pair(conn, s, first, second, atomic)
                    .await
            }
            PgShape::Keyed(k) => (k.execute(conn, first).await, Err(ChunkError::NotRun)),
        }
    }
}
