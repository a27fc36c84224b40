//! Engine tests against an in-memory backend: no database.
//!
//! [`Mem`] stands in for a server with a fixed number of connections. Rows
//! are integers; a statement is received (logged, and applied atomically to
//! the table) on the first poll of `execute`, and its reply waits until the
//! test opens the statement's gate. A negative row violates a constraint
//! (the statement fails with `ChunkError::Row`); a row at or above
//! [`BREAKS_STATEMENT`] fails the whole statement (`ChunkError::Statement`,
//! like a lost connection); the first offending row of a statement decides.
//!
//! Determinism: every test runs on the current-thread runtime with the clock
//! paused. [`settle`] sleeps 1 ms of virtual time, and a paused clock only
//! moves when no task can make progress, so when `settle` returns every task
//! has run until it waits on something the test controls (a statement's
//! gate, a connection the test holds, a later timer). A test that jumps to a
//! timer's deadline (`sleep_until`) settles afterwards, so the work that
//! timer starts has run too. Futures under test are polled by hand with a
//! no-op waker, and rows that must queue in a given order are queued by
//! polling their callers in that order. Nothing depends on wall-clock speed
//! or on the order in which ready tasks happen to run.
//!
//! This module holds the backend and the harness ([`H`]); the tests are
//! grouped by concern: [`cancel`] (a caller dropped at every poll point),
//! [`shutdown`] (`close()`, callers that leave, a panicking backend),
//! [`bounds`] (queue slots), [`natural`] and [`timed`] (when rows go, in
//! statements of which sizes), [`isolation`] (failing rows), [`pipeline`]
//! (`max_in_flight`, explicit batches, pipelined pairs), [`timeouts`]
//! (`wait_timeout`, statement deadlines), [`routes`] (learning a text) and
//! [`spans`] (tracing).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::queue::{ShapeQueue, statement_size};
use super::{Backend, ChunkError, ChunkResult, Connections, Engine, Route};
use crate::backend::Lease;
use crate::classify::{Dialect, Form};
use crate::config::{BatchConfig, Limits, QueueFull, STATEMENT_GRACE};
use crate::error::{Error, Kind};
use crate::explain::NotCoalesced;
use crate::stats::Stats;

mod bounds;
mod cancel;
mod isolation;
mod keyed;
mod natural;
mod pipeline;
mod routes;
mod shutdown;
mod spans;
mod timed;
mod timeouts;

const SQL: &str = "INSERT INTO t (v) VALUES ($1)";
/// Encoded parameter bytes of every test row.
const ROW_BYTES: usize = 8;
/// Rows at or above this value fail their whole statement.
const BREAKS_STATEMENT: i64 = 1_000_000;
/// A row that makes the backend panic.
const PANICS: i64 = 2_000_000;
/// Rows the leak check queues (and abandons).
const FILLER: i64 = 500_000;
/// Batchable texts the backend declines (as for a table with a trigger).
const DECLINED: [&str; 2] = [
    "INSERT INTO audited (v) VALUES ($1)",
    "INSERT INTO logged (v) VALUES ($1)",
];

// ---------------------------------------------------------------------------
// The in-memory backend
// ---------------------------------------------------------------------------

/// An in-memory server and its connection pool.
struct Mem {
    /// One permit per free connection.
    conns: Arc<Semaphore>,
    size: usize,
    max_params: usize,
    max_statement_bytes: usize,
    /// While set, a statement's reply waits for the test to open its gate.
    gated: AtomicBool,
    /// The next statement is refused as stale (the table changed under it),
    /// running nothing.
    stale_once: AtomicBool,
    /// Multi-row statements run as one statement per row (as the MySQL
    /// backend does on a session that would make them differ).
    one_by_one: AtomicBool,
    /// The backend pipelines pairs of statements (as PostgreSQL does).
    pipelined: AtomicBool,
    /// A failing statement names a row (`ChunkError::RowAt`): 0 none, 1
    /// the offending row, 2 the row after it (a wrong lead), 3 the last
    /// offending row, 4 the offending row as proven its own
    /// (`ChunkError::RowFailed`).
    names: AtomicUsize,
    /// Any row count is one statement's worth (`Backend::any_size`), but
    /// no rows go by the bulk path: a flush of a size not allowed for a
    /// multi-row text goes out as several statements, one after another
    /// (as MariaDB's rows that the bulk command refuses do).
    any_size: AtomicBool,
    /// What is left of a failed statement once its named row is out goes
    /// again as one statement of any row count (`Backend::reruns_any_size`,
    /// as PostgreSQL's INSERTs).
    reruns_any_size: AtomicBool,
    /// Rows are keyed writes (as PostgreSQL's keyed updates): a row's key is
    /// its value's last two digits, two rows of one key never share a
    /// statement (`Backend::runs`), and any number of rows is one text
    /// (`Backend::one_text`).
    keyed: AtomicBool,
    /// Shapes prepared (route learned or re-learned).
    prepared: AtomicUsize,
    /// While set, learning a shape waits for the test to notify it.
    prepare_gate: Mutex<Option<Arc<Notify>>>,
    /// Connections closed because they were dropped with a request
    /// unanswered.
    discarded: Arc<AtomicUsize>,
    /// Every session's statement time limit (see `Wire::statement_limit`).
    statement_limit: Option<Duration>,
    server: Mutex<Server>,
}

#[derive(Default)]
struct Server {
    /// Every statement received, in order.
    log: Vec<Received>,
    /// Row → times written.
    table: BTreeMap<i64, usize>,
    /// Statements received whose `execute` has not returned (or been dropped).
    open: usize,
    max_open: usize,
}

struct Received {
    rows: Vec<i64>,
    at: Instant,
    /// `Some` until the test releases the reply.
    gate: Option<Arc<Notify>>,
}

/// A pooled connection: back in the pool when dropped.
struct Conn {
    _permit: OwnedSemaphorePermit,
    busy: bool,
    discarded: Arc<AtomicUsize>,
    statement_limit: Option<Duration>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.busy {
            // Closed, not reused: the server opens a new one in its place.
            self.discarded.fetch_add(1, SeqCst);
        }
    }
}

/// Counts a statement as open until its `execute` future ends.
struct Open<'a>(&'a Mem);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.server().open -= 1;
    }
}

impl Mem {
    fn new(size: usize) -> Mem {
        Mem {
            conns: Arc::new(Semaphore::new(size)),
            size,
            max_params: 65535,
            max_statement_bytes: usize::MAX,
            gated: AtomicBool::new(true),
            stale_once: AtomicBool::new(false),
            one_by_one: AtomicBool::new(false),
            pipelined: AtomicBool::new(false),
            names: AtomicUsize::new(0),
            any_size: AtomicBool::new(false),
            reruns_any_size: AtomicBool::new(false),
            keyed: AtomicBool::new(false),
            prepared: AtomicUsize::new(0),
            prepare_gate: Mutex::default(),
            discarded: Arc::default(),
            statement_limit: None,
            server: Mutex::default(),
        }
    }

    fn server(&self) -> MutexGuard<'_, Server> {
        self.server.lock().unwrap()
    }

    /// The server receives a statement: logs it and runs it atomically (all
    /// rows written, or none and an error). Returns the reply and the gate
    /// it waits for.
    fn receive(&self, rows: &[i64]) -> (Option<Arc<Notify>>, ChunkResult<i64>) {
        self.receive_as(rows, true)
    }

    /// [`receive`](Mem::receive); with `apply` false a statement that
    /// succeeds writes nothing yet (inside a transaction: see
    /// [`commit`](Mem::commit)).
    fn receive_as(&self, rows: &[i64], apply: bool) -> (Option<Arc<Notify>>, ChunkResult<i64>) {
        let mut s = self.server();
        let offender = rows.iter().find(|&&v| !(0..BREAKS_STATEMENT).contains(&v));
        let reply = match offender {
            _ if rows.len() > 1 && self.one_by_one.load(SeqCst) => {
                let each = rows
                    .iter()
                    .map(|&v| {
                        if v < 0 {
                            Err(Error::new(Kind::Db, format!("bad row {v}")))
                        } else {
                            *s.table.entry(v).or_default() += 1;
                            Ok(v)
                        }
                    })
                    .collect();
                Err(ChunkError::Each(each))
            }
            _ if self.stale_once.swap(false, SeqCst) => Err(ChunkError::Stale(Error::new(
                Kind::Db,
                "cached plan must not change result type",
            ))),
            Some(&v) if v < 0 => {
                let e = Error::new(Kind::Db, format!("bad row {v}"));
                let at = rows.iter().position(|&r| r == v).unwrap_or(0);
                match self.names.load(SeqCst) {
                    1 => Err(ChunkError::RowAt(at, e)),
                    2 => Err(ChunkError::RowAt((at + 1) % rows.len(), e)),
                    3 => Err(ChunkError::RowAt(
                        rows.iter().rposition(|&r| r < 0).unwrap_or(0),
                        e,
                    )),
                    4 => Err(ChunkError::RowFailed(at, e)),
                    _ => Err(ChunkError::Row(e)),
                }
            }
            Some(&v) => Err(ChunkError::Statement(Error::new(
                Kind::OutcomeUnknown,
                format!("statement broken by row {v}"),
            ))),
            None => {
                if apply {
                    for &v in rows {
                        *s.table.entry(v).or_default() += 1;
                    }
                }
                Ok(rows.to_vec())
            }
        };
        let gate = self.gated.load(SeqCst).then(|| Arc::new(Notify::new()));
        s.log.push(Received {
            rows: rows.to_vec(),
            at: Instant::now(),
            gate: gate.clone(),
        });
        s.open += 1;
        s.max_open = s.max_open.max(s.open);
        (gate, reply)
    }

    /// Commits rows received with `apply` false.
    fn commit(&self, rows: &[i64]) {
        let mut s = self.server();
        for &v in rows {
            *s.table.entry(v).or_default() += 1;
        }
    }

    /// Lets the oldest statement still waiting reply; false if none waits.
    fn release_next(&self) -> bool {
        let mut s = self.server();
        match s.log.iter_mut().find_map(|r| r.gate.take()) {
            Some(gate) => {
                gate.notify_one();
                true
            }
            None => false,
        }
    }

    /// From now on statements reply at once; those waiting reply now.
    fn open_gates(&self) {
        self.gated.store(false, SeqCst);
        while self.release_next() {}
    }

    /// Rows of every statement received, in order.
    fn log(&self) -> Vec<Vec<i64>> {
        self.server().log.iter().map(|r| r.rows.clone()).collect()
    }

    /// When each statement was received (virtual time).
    fn received_at(&self) -> Vec<Instant> {
        self.server().log.iter().map(|r| r.at).collect()
    }

    /// Statements that carried row `v`.
    fn times_sent(&self, v: i64) -> usize {
        self.server()
            .log
            .iter()
            .filter(|r| r.rows.contains(&v))
            .count()
    }

    fn written(&self, v: i64) -> usize {
        self.server().table.get(&v).copied().unwrap_or(0)
    }

    fn max_open(&self) -> usize {
        self.server().max_open
    }

    fn in_use(&self) -> usize {
        self.size - self.conns.available_permits()
    }

    fn conn(&self, permit: OwnedSemaphorePermit) -> Conn {
        Conn {
            _permit: permit,
            busy: false,
            discarded: self.discarded.clone(),
            statement_limit: self.statement_limit,
        }
    }

    /// Takes every connection (they must all be free).
    fn hold_all(&self) -> OwnedSemaphorePermit {
        let n = u32::try_from(self.size).unwrap();
        self.conns.clone().try_acquire_many_owned(n).unwrap()
    }
}

impl Backend for Mem {
    type Connections = Mem;
    type Row = i64;
    type Output = i64;
    type Shape = ();

    const DIALECT: Dialect = Dialect::Postgres;

    fn max_params(&self) -> usize {
        self.max_params
    }

    fn max_statement_bytes(&self) -> usize {
        self.max_statement_bytes
    }

    fn same_shape(_: &(), _: &()) -> bool {
        true
    }

    async fn prepare_shape(
        &self,
        _conn: &mut Conn,
        sql: &str,
        _form: Form,
    ) -> Result<Result<(), NotCoalesced>, Error> {
        let gate = self.prepare_gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.notified().await;
        }
        self.prepared.fetch_add(1, SeqCst);
        if DECLINED.contains(&sql) {
            return Ok(Err(NotCoalesced::Declined(format!("{sql} has a trigger"))));
        }
        Ok(Ok(()))
    }

    fn any_size(&self, _shape: &(), _rows: usize) -> bool {
        self.any_size.load(SeqCst)
    }

    fn one_text(&self, _shape: &()) -> bool {
        self.keyed.load(SeqCst)
    }

    fn reruns_any_size(&self, _shape: &()) -> bool {
        self.reruns_any_size.load(SeqCst)
    }

    fn runs(&self, _shape: &(), rows: &[i64]) -> Option<Vec<usize>> {
        if !self.keyed.load(SeqCst) {
            return None;
        }
        let mut runs = Vec::new();
        let mut keys = std::collections::HashSet::new();
        let mut run = 0;
        for &v in rows {
            if !keys.insert(v.abs() % 100) {
                runs.push(run);
                run = 0;
                keys.clear();
                keys.insert(v.abs() % 100);
            }
            run += 1;
        }
        runs.push(run);
        Some(runs)
    }

    fn connections(&self) -> &Mem {
        self
    }

    async fn execute(&self, _conn: &mut Conn, _shape: &(), rows: &[i64]) -> ChunkResult<i64> {
        // Sent on the first poll; the server runs it whether or not anyone
        // waits for the reply.
        let (gate, reply) = self.receive(rows);
        let _open = Open(self);
        assert!(!rows.contains(&PANICS), "a backend bug");
        if let Some(gate) = gate {
            gate.notified().await;
        }
        reply
    }

    fn pipelines(&self, _shape: &(), _first: Option<usize>, _second: Option<usize>) -> bool {
        self.pipelined.load(SeqCst)
    }

    async fn execute_pair(
        &self,
        _conn: &mut Conn,
        _shape: &(),
        first: &[i64],
        second: &[i64],
        atomic: bool,
    ) -> (ChunkResult<i64>, ChunkResult<i64>) {
        // Both sent on the first poll, answered in order. In a transaction
        // a failed statement aborts it: the other writes nothing.
        let (gate_a, a) = self.receive_as(first, !atomic);
        let (gate_b, b) = self.receive_as(second, !atomic);
        let (a, b) = match (atomic, a, b) {
            (false, a, b) => (a, b),
            (true, Err(e), _) => (Err(e), Err(ChunkError::NotRun)),
            (true, Ok(_), Err(e)) => (Err(ChunkError::NotRun), Err(e)),
            (true, Ok(a), Ok(b)) => {
                self.commit(first);
                self.commit(second);
                (Ok(a), Ok(b))
            }
        };
        let _open = (Open(self), Open(self));
        for gate in [gate_a, gate_b].into_iter().flatten() {
            gate.notified().await;
        }
        (a, b)
    }
}

impl Connections for Mem {
    type Conn = Conn;

    async fn checkout(&self, _deadline: Option<tokio::time::Instant>) -> Result<Lease<Mem>, Error> {
        let permit = self.conns.clone().acquire_owned().await;
        let permit = permit.map_err(|_| Error::pool_closed())?;
        // Checking a connection out takes a round trip (deadpool recycles
        // it): one more point where the caller may be dropped.
        tokio::task::yield_now().await;
        Ok(Lease::new(self.conn(permit)))
    }

    async fn try_checkout(&self) -> Option<Lease<Mem>> {
        let permit = self.conns.clone().try_acquire_owned().ok()?;
        tokio::task::yield_now().await;
        Some(Lease::new(self.conn(permit)))
    }

    fn set_busy(conn: &mut Conn, busy: bool) {
        conn.busy = busy;
    }

    fn is_busy(conn: &Conn) -> bool {
        conn.busy
    }

    fn statement_limit(conn: &Conn) -> Option<Duration> {
        conn.statement_limit
    }

    fn discard(conn: Conn) {
        // Closed: counted by its drop (still marked busy).
        drop(conn);
    }

    fn max_size(&self) -> usize {
        self.size
    }
}

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Many = Result<Vec<Result<i64, Error>>, Error>;
/// A caller's row and its `submit` future, polled by the test.
type Caller = (i64, BoxFut<Result<i64, Error>>);

/// Lets every task run until it waits on something the test controls (see
/// the module docs). Advances the paused clock by 1 ms.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// Polls once with a no-op waker, outside tokio's cooperative budget (so a
/// ready resource is never reported pending for budget reasons).
fn poll<T>(f: &mut BoxFut<T>) -> Poll<T> {
    let mut f = tokio::task::unconstrained(f);
    Pin::new(&mut f).poll(&mut Context::from_waker(Waker::noop()))
}

/// The default configuration with a small queue, so the leak check can fill it.
fn config() -> BatchConfig {
    BatchConfig::default().queue_capacity(16)
}

/// The outcome of a caller whose reply must have arrived.
fn outcome<T>(f: &mut BoxFut<T>) -> T {
    match poll(f) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("no outcome yet"),
    }
}

/// The output of a task that must have finished.
async fn finished<T>(task: JoinHandle<T>) -> T {
    assert!(task.is_finished(), "task still running");
    task.await.unwrap()
}

/// An engine over a [`Mem`] and the queue of [`SQL`].
struct H {
    e: Arc<Engine<Mem>>,
    q: Arc<ShapeQueue<Mem>>,
}

impl H {
    /// `conns` gated connections.
    async fn new(conns: usize, config: BatchConfig) -> H {
        H::with(Mem::new(conns), config).await
    }

    async fn with(mem: Mem, config: BatchConfig) -> H {
        H::limited(mem, config, TestLimits::default()).await
    }

    async fn limited(mut mem: Mem, config: BatchConfig, limits: TestLimits) -> H {
        mem.statement_limit = limits.statement;
        let counters = crate::stats::Counters::new("default", "memory");
        let e = Engine::new(mem, config, limits.engine, counters).unwrap();
        let Route::Batch(q) = e.route(SQL, None).await.unwrap() else {
            panic!("{SQL} should be batchable");
        };
        H { e, q }
    }

    fn mem(&self) -> &Mem {
        &self.e.backend
    }

    fn stats(&self) -> Stats {
        self.e.stats()
    }

    /// One caller's `execute` of row `v` (the one place rows enter).
    fn submit(&self, v: i64) -> BoxFut<Result<i64, Error>> {
        let (e, q) = (self.e.clone(), self.q.clone());
        Box::pin(async move {
            let work = e.enter()?;
            let deadline = e.wait_deadline();
            e.submit(&q, v, ROW_BYTES, None, work, deadline).await
        })
    }

    fn spawn(&self, v: i64) -> JoinHandle<Result<i64, Error>> {
        tokio::spawn(self.submit(v))
    }

    /// A spawned caller of row `v`, settled: at idle the row went out at
    /// once from the caller's task (inline), its statement unanswered.
    async fn sent(&self, v: i64) -> JoinHandle<Result<i64, Error>> {
        let task = self.spawn(v);
        settle().await;
        assert_eq!(self.mem().log(), [[v]], "idle: sent inline");
        task
    }

    /// Callers of `rows`, each polled once, in order: with no connection
    /// free (or with timed batching) each has queued its row, in this order.
    fn queue_all(&self, rows: &[i64]) -> Vec<Caller> {
        let mut callers: Vec<Caller> = rows.iter().map(|&v| (v, self.submit(v))).collect();
        for (v, f) in &mut callers {
            assert!(poll(f).is_pending(), "row {v} did not queue");
        }
        callers
    }

    fn submit_many(&self, rows: &[i64]) -> BoxFut<Many> {
        let (e, q) = (self.e.clone(), self.q.clone());
        let rows = rows.iter().map(|&v| (v, ROW_BYTES)).collect();
        Box::pin(async move {
            let work = e.enter()?;
            e.submit_many(work, &q, rows, None).await
        })
    }

    /// One caller's batch of `rows`, every gate open: each row's result.
    async fn many(&self, rows: &[i64]) -> Vec<Result<i64, Error>> {
        self.mem().open_gates();
        let mut many = self.submit_many(rows);
        assert!(poll(&mut many).is_pending());
        settle().await;
        many_done(&mut many)
    }

    fn close(&self) -> JoinHandle<()> {
        let e = self.e.clone();
        tokio::spawn(async move { e.close(None).await.unwrap() })
    }

    /// Rows waiting in the queue, in order.
    fn queued(&self) -> Vec<i64> {
        self.q.queued(|p| p.row)
    }

    fn queue_is_idle(&self) -> bool {
        self.q.is_idle()
    }

    /// Opens every gate and lets all work finish (timers included).
    async fn drain(&self) {
        self.mem().open_gates();
        if let Some(delay) = self.e.config.max_delay {
            tokio::time::sleep(delay).await;
        }
        settle().await;
    }

    /// The counters `pick` reads are `expected`, and nothing leaked
    /// ([`assert_no_leaks`](H::assert_no_leaks)).
    async fn assert_end<T>(&self, pick: impl Fn(&Stats) -> T, expected: T)
    where
        T: PartialEq + std::fmt::Debug,
    {
        let st = self.stats();
        assert_eq!(pick(&st), expected, "{st:?}");
        self.assert_no_leaks().await;
    }

    /// Nothing running, queued or held; every queue slot free: with every
    /// connection busy, `queue_capacity` new rows all queue without waiting.
    async fn assert_no_leaks(&self) {
        let cap = self.e.config.queue_capacity;
        let st = self.stats();
        assert_eq!(self.e.tracker.active(), 0, "flushers still running");
        assert_eq!(self.mem().in_use(), 0, "connection leaked");
        assert_eq!((st.queued, st.in_flight), (0, 0), "{st:?}");
        assert!(self.queue_is_idle(), "queue not idle");
        assert_eq!(self.e.permits.available_permits(), cap, "queue slot leaked");
        assert!(self.e.flush_limit.all_free(), "flush slot leaked");
        if self.e.is_closed() {
            return;
        }
        let hold = self.mem().hold_all();
        let mut fillers: Vec<_> = (0..cap as i64).map(|i| self.submit(FILLER + i)).collect();
        for f in &mut fillers {
            assert!(poll(f).is_pending());
        }
        assert_eq!(self.stats().queued, cap as u64, "a queue slot leaked");
        drop(fillers);
        drop(hold);
        self.drain().await;
        let after = self.stats();
        assert_eq!(after.rows_cancelled, st.rows_cancelled + cap as u64);
        assert_eq!((after.queued, after.rows), (0, st.rows));
        assert_eq!(self.e.permits.available_permits(), cap);
        assert_eq!(self.e.tracker.active(), 0);
    }
}

/// Lets everything finish and checks that the spawned caller, the queued
/// callers and the last caller each got their own row back.
async fn drain_all_own(
    h: &H,
    spawned: (i64, JoinHandle<Result<i64, Error>>),
    queued: Vec<Caller>,
    (v, mut last): Caller,
) {
    h.drain().await;
    assert_ok_own(v, outcome(&mut last));
    assert_sent_and_queued_own(h, spawned, queued).await;
}

/// The spawned caller ([`H::sent`]) and the queued callers, their replies
/// arrived, each got their own row back.
async fn assert_sent_and_queued_own(
    h: &H,
    (v, sent): (i64, JoinHandle<Result<i64, Error>>),
    queued: Vec<Caller>,
) {
    assert_ok_own(v, finished(sent).await);
    assert_all_own(h, queued);
}

fn assert_ok_own(v: i64, r: Result<i64, Error>) {
    match r {
        Ok(out) => assert_eq!(out, v, "row {v} got another row's outcome"),
        Err(e) => panic!("row {v} failed: {e}"),
    }
}

/// Every caller, its reply arrived, has its own row back, written once.
fn assert_all_own(h: &H, callers: impl IntoIterator<Item = Caller>) {
    for (v, mut caller) in callers {
        assert_ok_own(v, outcome(&mut caller));
        assert_eq!(h.mem().written(v), 1, "row {v}");
    }
}

/// Queues `rows` behind a held connection, lets them flush (gates open) and
/// returns each caller's result.
async fn flush_together(h: &H, rows: &[i64]) -> Vec<(i64, Result<i64, Error>)> {
    h.mem().open_gates();
    let hold = h.mem().hold_all();
    let tasks = h.queue_all(rows);
    settle().await;
    assert_eq!(h.queued(), rows);
    drop(hold);
    settle().await;
    tasks
        .into_iter()
        .map(|(v, mut caller)| (v, outcome(&mut caller)))
        .collect()
}

/// [`flush_together`], then checks that every row has its own outcome
/// ([`assert_own`]) and was written once if good, never if bad.
async fn flush_each_own(h: &H, rows: &[i64]) {
    let results = flush_together(h, rows).await;
    let out: Vec<_> = results.into_iter().map(|(_, r)| r).collect();
    assert_each_own(h, rows, &out);
}

/// The per-row results of a `submit_many` that must have finished.
fn many_done(many: &mut BoxFut<Many>) -> Vec<Result<i64, Error>> {
    let Poll::Ready(Ok(out)) = poll(many) else {
        panic!("submit_many did not finish");
    };
    out
}

/// Every row of `rows` has its own outcome in `out` ([`assert_own`]) and
/// was written once if good, never if bad.
fn assert_each_own(h: &H, rows: &[i64], out: &[Result<i64, Error>]) {
    assert_eq!(rows.len(), out.len());
    for (&v, r) in rows.iter().zip(out) {
        assert_own(v, r);
        assert_eq!(h.mem().written(v), usize::from(v >= 0), "row {v}");
    }
}

/// Rows `1..=n`, those whose bit is set in `mask` negated (bad).
fn masked(n: usize, mask: u32) -> Vec<i64> {
    (0..n as i64)
        .map(|i| {
            if mask & (1 << i) != 0 {
                -(i + 1)
            } else {
                i + 1
            }
        })
        .collect()
}

/// Row `v` has its own outcome: its own error if it is bad (negative),
/// else its own row back.
fn assert_own(v: i64, r: &Result<i64, Error>) {
    if v < 0 {
        assert_own_error(v, r);
    } else {
        assert!(matches!(r, Ok(out) if *out == v), "row {v}: {r:?}");
    }
}

fn assert_own_error(v: i64, r: &Result<i64, Error>) {
    match r {
        Err(e) => {
            assert!(e.is_db(), "{e:?}");
            assert_eq!(
                e.to_string(),
                format!("bad row {v}"),
                "row {v} got another row's error"
            );
        }
        Ok(_) => panic!("bad row {v} succeeded"),
    }
}

/// A pool whose backend pipelines pairs of statements, on `conns`
/// connections, at most `max_rows` rows per statement.
async fn pipelined(conns: usize, max_rows: usize) -> H {
    let mem = Mem::new(conns);
    mem.pipelined.store(true, SeqCst);
    H::with(mem, config().max_rows(max_rows)).await
}

/// The engine's limits, and every session's statement time limit.
#[derive(Default)]
struct TestLimits {
    engine: Limits,
    statement: Option<Duration>,
}

fn limits(wait: Option<u64>, statement: Option<u64>) -> TestLimits {
    TestLimits {
        engine: Limits {
            wait: wait.map(Duration::from_secs),
        },
        statement: statement.map(Duration::from_secs),
    }
}
