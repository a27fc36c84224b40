//! The write paths ([`Mode`](super::Mode)s), written once for every
//! database: each mode's loop, clock, per-row checks and counters live here;
//! and the run phase's loop ([`operate`]). A [`Database`](super::Database)
//! supplies only what differs: how one plain connection sends a row or a
//! group of rows ([`Session`]), how a pool sends one row, reads a record or
//! updates a field ([`RowWriter`]: batchpool's pool and the plain peer
//! pool) or an explicit batch ([`Batchpool`]), and its bulk path (COPY,
//! LOAD DATA).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;
use hdrhistogram::Histogram;

use super::ops::{OpKind, Operations};
use super::report::Batching;
use super::workload::{Dataset, FIELD_COUNT, Record};
use super::{BoxError, Loaded, Progress, Ran, Result, error_chain, fail};

/// One plain connection with the single-row INSERT (`nobatch`, `batch`) and
/// the hand-built multi-row one (`rewrite-peer`).
pub trait Session {
    /// The prepared INSERT.
    type Stmt;
    /// Prepares the INSERT (the first thing on the clock).
    async fn prepare(&mut self) -> Result<Self::Stmt>;
    /// One autocommit INSERT of `r`; the rows it affected.
    async fn insert(&mut self, stmt: &Self::Stmt, r: &Record) -> Result<u64>;
    /// The `batch` mode's group: every row its own autocommit statement,
    /// sent together as the driver allows (checks what the driver reports).
    async fn insert_group(&mut self, stmt: &Self::Stmt, group: &[Record]) -> Result<()>;
    /// Most rows one multi-row statement of `rewrite-peer` may carry, rows
    /// of at most `row_bytes` bytes of data each (the server's parameter
    /// and packet limits).
    fn max_rows(&self, row_bytes: usize) -> usize;
    /// `rewrite-peer`: `rows` as one multi-row `INSERT ... VALUES (...),
    /// (...)`, its text built by hand once per row count and prepared once
    /// on this connection (cached), every value bound; the rows it affected.
    async fn insert_rows(&mut self, rows: &[Record]) -> Result<u64>;
    /// Closes the connection after the clock stopped.
    async fn close(self);
}

/// A pool that many tasks share, each sending one statement at a time
/// (`coalesce` on batchpool, `coalesce-peer` on the plain pool): the load
/// phase's single-row INSERTs, the run phase's keyed reads and updates.
pub trait RowWriter: Clone + Send + Sync + 'static {
    /// One single-row INSERT of `r`; the rows it affected.
    fn insert(&self, r: &Record) -> impl Future<Output = Result<u64>> + Send;
    /// The run phase's read: `SELECT * FROM usertable WHERE YCSB_KEY =
    /// key`; each row it returned ([`expect_read`] checks them).
    fn read(&self, key: &str) -> impl Future<Output = Result<Vec<ReadRow>>> + Send;
    /// The run phase's update: `UPDATE usertable SET FIELD<field> = value
    /// WHERE YCSB_KEY = key`; the rows it affected.
    fn update(
        &self,
        key: &str,
        field: usize,
        value: &str,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Opens `size` connections (so none opens on the clock) and keeps
    /// them in the pool.
    async fn open(&self, size: usize) -> Result<()>;
    /// batchpool's counters after the load (batchpool pools only).
    fn batching(&self) -> Option<Batching> {
        None
    }
    /// The writer task `task` (0-based) of [`concurrent`] uses: the same
    /// pool, or on a cluster the pool of the task's node ([`Spread`]).
    fn for_task(&self, _task: usize) -> Self {
        self.clone()
    }
    /// Closes the pool after the clock stopped.
    async fn release(self);
}

/// One pool per node of a cluster, as one writer: task `i` of
/// [`concurrent`] writes through the pool of node `i % nodes`, so the tasks
/// split evenly over the nodes; everything else (`batchrewrite`'s one
/// caller) writes through the first node's. One node: that pool alone.
#[derive(Clone)]
pub struct Spread<P> {
    pools: Arc<Vec<P>>,
    node: usize,
}

impl<P> Spread<P> {
    /// The pools, one per node, the first node's first.
    pub fn new(pools: Vec<P>) -> Result<Spread<P>> {
        if pools.is_empty() {
            return Err(fail("a cluster of no nodes"));
        }
        Ok(Spread {
            pools: Arc::new(pools),
            node: 0,
        })
    }

    fn pool(&self) -> &P {
        &self.pools[self.node]
    }
}

impl<P: RowWriter> RowWriter for Spread<P> {
    fn insert(&self, r: &Record) -> impl Future<Output = Result<u64>> + Send {
        self.pool().insert(r)
    }

    fn read(&self, key: &str) -> impl Future<Output = Result<Vec<ReadRow>>> + Send {
        self.pool().read(key)
    }

    fn update(
        &self,
        key: &str,
        field: usize,
        value: &str,
    ) -> impl Future<Output = Result<u64>> + Send {
        self.pool().update(key, field, value)
    }

    /// Opens `size` connections on every node.
    async fn open(&self, size: usize) -> Result<()> {
        try_join_all(self.pools.iter().map(|p| p.open(size))).await?;
        Ok(())
    }

    /// The counters of every node's pool, added up.
    fn batching(&self) -> Option<Batching> {
        let parts: Vec<Batching> = self.pools.iter().filter_map(P::batching).collect();
        Batching::sum(&parts)
    }

    fn for_task(&self, task: usize) -> Self {
        Spread {
            pools: self.pools.clone(),
            node: task % self.pools.len(),
        }
    }

    async fn release(self) {
        for p in self.pools.iter() {
            p.clone().release().await;
        }
    }
}

impl<P: Batchpool> Batchpool for Spread<P> {
    async fn insert_many(&self, group: &[Record]) -> Result<()> {
        self.pool().insert_many(group).await
    }
}

/// A batchpool pool: also takes explicit batches (`batchrewrite`).
pub trait Batchpool: RowWriter {
    /// One `execute_many` of `group`; checks every row's outcome with
    /// [`expect_each`].
    async fn insert_many(&self, group: &[Record]) -> Result<()>;
}

/// Implements [`RowWriter`] and [`Batchpool`] for a backend's batchpool
/// pool: `batchpool::postgres::Pool` and `batchpool::mysql::Pool` have the
/// same methods but no common trait, and each takes its driver's
/// parameters. `batchpool_writer!(PoolType, sql, |r| row, params, read,
/// update)`: `sql` is the single-row INSERT, `row` the parameters of record
/// `r` as `execute` takes them, `params` the function giving a record's
/// parameters as `execute_many` takes them; `read` and `update` the
/// backend's functions of the run phase's statements on the pool
/// (`query`, `execute`).
macro_rules! batchpool_writer {
    ($pool:ty, $sql:expr, |$r:ident| $bind:expr, $params:expr, $read:path, $update:path) => {
        impl super::modes::RowWriter for $pool {
            async fn open(&self, size: usize) -> super::Result<()> {
                super::modes::open_all(size, |_| self.get()).await
            }

            async fn insert(&self, $r: &super::workload::Record) -> super::Result<u64> {
                Ok(self.execute($sql, $bind).await?.rows_affected())
            }

            async fn read(&self, key: &str) -> super::Result<Vec<super::modes::ReadRow>> {
                $read(self, key).await
            }

            async fn update(&self, key: &str, field: usize, value: &str) -> super::Result<u64> {
                $update(self, key, field, value).await
            }

            fn batching(&self) -> Option<super::report::Batching> {
                Some(super::report::Batching::from_stats(&self.stats()))
            }

            async fn release(self) {
                self.close().await;
            }
        }

        impl super::modes::Batchpool for $pool {
            async fn insert_many(&self, group: &[super::workload::Record]) -> super::Result<()> {
                let outcomes = self.execute_many($sql, group.iter().map($params)).await?;
                let counts = outcomes.into_iter().map(|o| o.map(|o| o.rows_affected()));
                super::modes::expect_each(counts, group)
            }
        }
    };
}
pub(super) use batchpool_writer;

/// `nobatch`: one autocommit INSERT per row, one after the other.
pub(super) async fn nobatch(
    mut conn: impl Session,
    data: &Dataset,
    progress: &Progress,
) -> Result<Loaded> {
    let started = Instant::now();
    let stmt = conn.prepare().await?;
    for r in &data.rows {
        expect_one(conn.insert(&stmt, r).await?, &r.key)?;
        progress.add(1);
    }
    let elapsed = started.elapsed();
    conn.close().await;
    Ok(Loaded::plain(elapsed))
}

/// `batch`: groups of `size` single-row statements on one connection.
pub(super) async fn batch(
    mut conn: impl Session,
    data: &Dataset,
    size: usize,
    progress: &Progress,
) -> Result<Loaded> {
    let started = Instant::now();
    let stmt = conn.prepare().await?;
    for group in data.rows.chunks(size) {
        conn.insert_group(&stmt, group).await?;
        progress.add(group.len() as u64);
    }
    let elapsed = started.elapsed();
    conn.close().await;
    Ok(Loaded::plain(elapsed))
}

/// `batchrewrite`: batchpool `execute_many` in groups of `size`.
pub(super) async fn batchrewrite(
    pool: impl Batchpool,
    data: &Dataset,
    size: usize,
    progress: &Progress,
) -> Result<Loaded> {
    let started = Instant::now();
    for group in data.rows.chunks(size) {
        pool.insert_many(group).await?;
        progress.add(group.len() as u64);
    }
    let elapsed = started.elapsed();
    let batching = pool.batching();
    pool.release().await;
    Ok(Loaded {
        elapsed,
        latency: None,
        batching,
    })
}

/// `rewrite-peer`: the statements of `batchrewrite` on the plain driver,
/// groups of `size` rows, each one multi-row INSERT (a group beyond the
/// server's limits split evenly into as few statements as fit), one after
/// the other on one connection; each statement's count checked.
pub(super) async fn rewrite_peer(
    mut conn: impl Session,
    data: &Dataset,
    size: usize,
    progress: &Progress,
) -> Result<Loaded> {
    let most = conn.max_rows(data.max_row_bytes()).max(1);
    let started = Instant::now();
    for group in data.rows.chunks(size) {
        let parts = group.len().div_ceil(most);
        for part in group.chunks(group.len().div_ceil(parts)) {
            let n = conn.insert_rows(part).await?;
            if n != part.len() as u64 {
                return Err(fail(format!(
                    "a {}-row INSERT reported {n} rows",
                    part.len()
                )));
            }
        }
        progress.add(group.len() as u64);
    }
    let elapsed = started.elapsed();
    conn.close().await;
    Ok(Loaded::plain(elapsed))
}

/// `coalesce` / `coalesce-peer`: `tasks` tasks, each sending one row at a
/// time through `pool` (its [`RowWriter::for_task`]) until the rows run
/// out; per-row latency measured.
pub(super) async fn concurrent(
    pool: impl RowWriter,
    data: &Arc<Dataset>,
    tasks: usize,
    progress: &Progress,
) -> Result<Loaded> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..tasks)
        .map(|task| {
            let (pool, next, data) = (pool.for_task(task), next.clone(), data.clone());
            let done = progress.counter();
            tokio::spawn(async move {
                // Plain latencies, put in a histogram after the clock
                // stops: one histogram per task (360 KB of counters each)
                // would fault in and miss the cache on every record, and
                // merging 1,024 of them would be timed.
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(r) = data.rows.get(i) else { break };
                    let t = Instant::now();
                    let n = pool.insert(r).await;
                    latencies.push(micros(t.elapsed()));
                    match n {
                        Ok(n) if !r.duplicate => expect_one(n, &r.key)?,
                        // A duplicate key (`--fail-rate`) must fail.
                        Err(_) if r.duplicate => {}
                        Ok(_) => {
                            return Err(fail(format!("INSERT of duplicate {} succeeded", r.key)));
                        }
                        Err(e) => return Err(e),
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, BoxError>(latencies)
            })
        })
        .collect();
    let latencies = join_latencies(tasks).await;
    let elapsed = started.elapsed();
    let hist = latencies.map(|all| {
        let mut hist = histogram();
        for l in all.into_iter().flatten() {
            hist.saturating_record(l);
        }
        hist
    });
    let batching = pool.batching();
    pool.release().await;
    Ok(Loaded {
        elapsed,
        latency: Some(hist?),
        batching,
    })
}

/// The run phase: `tasks` tasks, each taking the next operation of `ops`
/// and awaiting it through `pool` until the operations run out; every read
/// and update checked ([`expect_read`], [`expect_updated`]), each
/// operation's latency measured (a read-modify-write's from its read to its
/// update's reply). `values[i]` is what operation `i` writes. Every task
/// uses the pool of the first node ([`RowWriter::for_task`] of task 0): on
/// a multi-primary cluster, updates of one popular key from several nodes
/// would fail each other's certification.
pub(super) async fn operate(
    pool: impl RowWriter,
    data: &Arc<Dataset>,
    ops: &Arc<Operations>,
    values: Arc<Vec<String>>,
    tasks: usize,
    progress: &Progress,
) -> Result<Ran> {
    if values.len() != ops.len() {
        return Err(fail(format!(
            "{} values for {} operations",
            values.len(),
            ops.len()
        )));
    }
    if let Some(op) = ops.ops.iter().find(|o| o.record >= data.len()) {
        return Err(fail(format!(
            "an operation on record {} of {} loaded",
            op.record,
            data.len()
        )));
    }
    let first = pool.for_task(0);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..tasks)
        .map(|_| {
            let (pool, next, data) = (first.clone(), next.clone(), data.clone());
            let (ops, values, done) = (ops.clone(), values.clone(), progress.counter());
            tokio::spawn(async move {
                // Plain latencies, put in histograms after the clock stops
                // (as `concurrent` does).
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(op) = ops.ops.get(i) else { break };
                    let key = &data.rows[op.record].key;
                    let t = Instant::now();
                    if op.kind != OpKind::Update {
                        let rows = pool.read(key).await.map_err(|e| {
                            fail(format!("read of {key} failed: {}", error_chain(&*e)))
                        })?;
                        expect_read(&rows, key)?;
                    }
                    if op.kind.writes() {
                        let n = pool.update(key, op.field, &values[i]).await.map_err(|e| {
                            fail(format!(
                                "update of FIELD{} of {key} failed: {}",
                                op.field,
                                error_chain(&*e)
                            ))
                        })?;
                        expect_updated(n, key)?;
                    }
                    latencies.push((op.kind, micros(t.elapsed())));
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, BoxError>(latencies)
            })
        })
        .collect();
    let latencies = join_latencies(tasks).await;
    let elapsed = started.elapsed();
    let latency = latencies.map(|all| {
        OpKind::ALL.map(|kind| {
            (ops.count(kind) > 0).then(|| {
                let mut hist = histogram();
                for &(_, l) in all.iter().flatten().filter(|(k, _)| *k == kind) {
                    hist.saturating_record(l);
                }
                hist
            })
        })
    });
    let batching = pool.batching();
    pool.release().await;
    Ok(Ran {
        elapsed,
        latency: latency?,
        batching,
    })
}

/// One row a run-phase read returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRow {
    /// Its `YCSB_KEY`.
    pub key: String,
    /// Its columns (`SELECT *`: the key and every field).
    pub columns: usize,
}

/// A read of a loaded key must return exactly one row: that key's, with
/// the key and every field.
pub fn expect_read(rows: &[ReadRow], key: &str) -> Result<()> {
    match rows {
        [row] if row.key == key && row.columns == 1 + FIELD_COUNT => Ok(()),
        [row] => Err(fail(format!(
            "read of {key} returned the row of {} with {} columns, expected its own with {}",
            row.key,
            row.columns,
            1 + FIELD_COUNT
        ))),
        _ => Err(fail(format!(
            "read of {key} returned {} rows, expected 1",
            rows.len()
        ))),
    }
}

/// An update of a field of a loaded key must report exactly one row.
pub fn expect_updated(n: u64, key: &str) -> Result<()> {
    if n == 1 {
        Ok(())
    } else {
        Err(fail(format!(
            "UPDATE of {key} reported {n} rows, expected 1"
        )))
    }
}

/// Opens `size` connections of a pool through `get` (so none opens on the
/// clock) and gives them back.
pub async fn open_all<C, E, F>(size: usize, get: impl FnMut(usize) -> F) -> Result<()>
where
    F: Future<Output = std::result::Result<C, E>>,
    E: Into<BoxError>,
{
    let open = try_join_all((0..size).map(get)).await.map_err(Into::into)?;
    drop(open);
    Ok(())
}

/// Each single-row INSERT must report exactly one row.
pub fn expect_one(n: u64, key: &str) -> Result<()> {
    if n == 1 {
        Ok(())
    } else {
        Err(fail(format!(
            "INSERT of {key} reported {n} rows, expected 1"
        )))
    }
}

/// Checks an `execute_many` answer: one outcome per row of `group`, each
/// exactly one row (the first failed row's error wins).
pub fn expect_each<E: Into<BoxError>>(
    counts: impl ExactSizeIterator<Item = std::result::Result<u64, E>>,
    group: &[Record],
) -> Result<()> {
    if counts.len() != group.len() {
        return Err(fail(format!(
            "execute_many returned {} outcomes for {} rows",
            counts.len(),
            group.len()
        )));
    }
    for (n, r) in counts.zip(group) {
        expect_one(n.map_err(Into::into)?, &r.key)?;
    }
    Ok(())
}

/// A new histogram of microseconds (1 µs to 1 h, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Awaits every task and collects their latencies; the first error wins.
async fn join_latencies<T>(
    tasks: Vec<tokio::task::JoinHandle<Result<Vec<T>>>>,
) -> Result<Vec<Vec<T>>> {
    let mut all = Vec::with_capacity(tasks.len());
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(l)) => all.push(l),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(e.into());
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(all),
    }
}
