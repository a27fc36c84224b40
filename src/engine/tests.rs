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
use crate::classify::{Dialect, InsertShape};
use crate::config::{BatchConfig, Limits, QueueFull, STATEMENT_GRACE};
use crate::error::{Error, Kind};
use crate::explain::NotCoalesced;
use crate::stats::Stats;

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
    /// offending row.
    names: AtomicUsize,
    /// Any row count is one statement's worth (`Backend::any_size`), but
    /// no rows go by the bulk path: a flush of a size not allowed for a
    /// multi-row text goes out as several statements, one after another
    /// (as MariaDB's rows that the bulk command refuses do).
    any_size: AtomicBool,
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
        _shape: Arc<InsertShape>,
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

    fn answer_limit(conn: &Conn) -> Option<Duration> {
        conn.statement_limit.map(|l| l + STATEMENT_GRACE)
    }

    fn discard(conn: Conn) {
        // Closed: counted by its drop (still marked busy).
        drop(conn);
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
        if let (Some(slots), Some(limit)) = (&self.e.flush_slots, self.e.config.max_in_flight) {
            assert_eq!(slots.available_permits(), limit, "flush slot leaked");
        }
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
    assert_ok_own(spawned.0, finished(spawned.1).await);
    for (v, mut caller) in queued {
        assert_ok_own(v, outcome(&mut caller));
    }
}

fn assert_ok_own(v: i64, r: Result<i64, Error>) {
    match r {
        Ok(out) => assert_eq!(out, v, "row {v} got another row's outcome"),
        Err(e) => panic!("row {v} failed: {e}"),
    }
}

// ---------------------------------------------------------------------------
// 1. Cancellation at every poll point
// ---------------------------------------------------------------------------

/// Where the row under test was when its caller's future was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// Neither queued nor sent (not polled yet, waiting for a queue slot,
    /// or holding a connection not yet used).
    NotQueued,
    Queued,
    /// Taken by a flush and sent; the reply had not reached the caller.
    Sent,
    /// The future completed by itself.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// A lone row at idle: sent from the caller's task (with a flush slot,
    /// `max_in_flight` 1).
    Inline,
    /// The one connection is busy and another row is queued: the row under
    /// test joins it in the next statement.
    Queued,
    /// The queue (capacity 1) is full: the row first waits for a slot.
    SlotWait,
    /// Timed batching: the row waits for the deadline of a queued row.
    Timed,
}

/// The row under test.
const ROW: i64 = 100;

/// The world of `s` before the row under test is submitted; returns the
/// harness and the other callers.
async fn scenario(s: Scenario) -> (H, Vec<(i64, JoinHandle<Result<i64, Error>>)>) {
    let config = config().queue_capacity(4);
    let (h, others) = match s {
        Scenario::Inline => (H::new(1, config.max_in_flight(1)).await, vec![]),
        Scenario::Queued | Scenario::SlotWait => {
            let cap = if s == Scenario::SlotWait { 1 } else { 4 };
            let h = H::new(1, config.queue_capacity(cap)).await;
            let a = h.spawn(1);
            settle().await;
            let b = h.spawn(2);
            settle().await;
            assert_eq!((h.mem().log(), h.queued()), (vec![vec![1]], vec![2]));
            (h, vec![(1, a), (2, b)])
        }
        Scenario::Timed => {
            let h = H::new(1, config.max_delay(Duration::from_millis(10))).await;
            let b = h.spawn(2);
            settle().await;
            assert_eq!(h.queued(), [2]);
            (h, vec![(2, b)])
        }
    };
    (h, others)
}

/// Polls `fut` up to `k` times, opening the next statement's gate and
/// settling before every poll but the first, and calls `pending` after each
/// poll that did not complete it. The output if it completed.
async fn poll_times<T>(
    h: &H,
    fut: &mut BoxFut<T>,
    k: usize,
    mut pending: impl FnMut(),
) -> Option<T> {
    for i in 0..k {
        if i > 0 {
            h.mem().release_next();
            settle().await;
        }
        if let Poll::Ready(r) = poll(fut) {
            return Some(r);
        }
        pending();
    }
    None
}

/// Drops the row's future after `k` polls (opening the oldest waiting gate
/// and settling between polls), finishes all work, checks that nothing
/// leaked and the row ran once or not at all. Returns where it was dropped.
async fn cancel_after(s: Scenario, k: usize) -> Stage {
    let (h, others) = scenario(s).await;
    let mut fut = h.submit(ROW);
    let mut stage = Stage::NotQueued;
    let output = poll_times(&h, &mut fut, k, || {
        stage = if h.mem().times_sent(ROW) > 0 {
            Stage::Sent
        } else if h.queued().contains(&ROW) {
            Stage::Queued
        } else {
            Stage::NotQueued
        };
        if s == Scenario::Inline {
            // Never through the queue: sent from this task.
            assert!(h.queue_is_idle() && h.stats().queued == 0);
        }
    })
    .await;
    if output.is_some() {
        stage = Stage::Done;
    }
    drop(fut);
    h.drain().await;

    let ctx = format!("{s:?}, dropped after {k} polls at {stage:?}");
    let once = usize::from(stage >= Stage::Sent);
    assert_eq!(h.mem().times_sent(ROW), once, "{ctx}");
    assert_eq!(h.mem().written(ROW), once, "{ctx}");
    if let Some(r) = output {
        assert_ok_own(ROW, r);
    }
    for (v, task) in others {
        assert_ok_own(v, finished(task).await);
        assert_eq!((h.mem().times_sent(v), h.mem().written(v)), (1, 1), "{ctx}");
    }
    let log = h.mem().log();
    let st = h.stats();
    assert_eq!(
        st.rows_cancelled,
        u64::from(stage == Stage::Queued),
        "{ctx}"
    );
    assert_eq!(
        st.rows,
        log.iter().map(Vec::len).sum::<usize>() as u64,
        "{ctx}"
    );
    assert_eq!(
        (st.batches, st.statements),
        (log.len() as u64, log.len() as u64)
    );
    assert_eq!(st.rows_failed, 0, "{ctx}");
    h.assert_no_leaks().await;
    stage
}

/// Runs [`cancel_after`] for k = 0, 1, 2, … until the future completes by
/// itself; returns the stage of each k.
async fn cancel_at_every_poll_point(s: Scenario) -> Vec<Stage> {
    let mut stages = Vec::new();
    for k in 0.. {
        assert!(k < 100, "{s:?}: the future never completes");
        let stage = cancel_after(s, k).await;
        stages.push(stage);
        if stage == Stage::Done {
            break;
        }
    }
    assert!(stages.is_sorted(), "{s:?}: {stages:?}");
    stages
}

/// Each way a row reaches a statement, dropped at every poll point: the
/// inline fast path never queues; a row waiting for a queue slot or a free
/// connection has not queued after its first poll.
#[tokio::test(start_paused = true)]
async fn cancel_at_every_poll_point_on_every_path() {
    for (scenario, first_polls_not_queued, queues) in [
        (Scenario::Inline, true, false),
        (Scenario::Queued, false, true),
        (Scenario::SlotWait, true, true),
        (Scenario::Timed, false, true),
    ] {
        let stages = cancel_at_every_poll_point(scenario).await;
        if first_polls_not_queued {
            assert_eq!(stages[..2], [Stage::NotQueued; 2], "{scenario:?}");
        }
        assert!(stages.contains(&Stage::Sent), "{scenario:?}");
        assert_eq!(stages.contains(&Stage::Queued), queues, "{scenario:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_submit_many_at_every_poll_point() {
    let rows = [1, 2, 3, 4, 5, 6];
    for k in 0.. {
        assert!(k < 100, "submit_many never completes");
        let h = H::new(1, config().max_rows(2)).await;
        let mut fut = h.submit_many(&rows);
        let output = poll_times(&h, &mut fut, k, || {}).await;
        let sent_at_drop = h.mem().log();
        drop(fut);
        h.drain().await;
        // Statements sent before the caller left complete; no new one starts.
        let log = h.mem().log();
        assert_eq!(log, sent_at_drop, "k={k}");
        let sent: Vec<i64> = log.concat();
        assert_eq!(sent, rows[..sent.len()], "in order");
        for v in rows {
            assert_eq!(h.mem().written(v), usize::from(sent.contains(&v)));
        }
        let st = h.stats();
        assert_eq!(st.rows, sent.len() as u64);
        h.assert_no_leaks().await;
        if let Some(out) = output {
            let out = out.unwrap();
            assert_eq!(log, [[1, 2], [3, 4], [5, 6]]);
            for (v, r) in rows.into_iter().zip(out) {
                assert_ok_own(v, r);
            }
            break;
        }
        // Rows not sent are counted cancelled once the batch task ran (it
        // is spawned by the first poll).
        let unsent = if k == 0 { 0 } else { rows.len() - sent.len() };
        assert_eq!(st.rows_cancelled, unsent as u64, "k={k}");
    }
}

// ---------------------------------------------------------------------------
// 2. close()
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn close_flushes_queued_rows_and_waits_for_in_flight() {
    let h = H::new(1, config().queue_capacity(3)).await;
    let a = h.spawn(1);
    settle().await;
    let queued = h.queue_all(&[2, 3, 4]);
    settle().await;
    assert_eq!(h.queued(), [2, 3, 4]);
    let mut waiting = h.submit(5); // the queue is full
    assert!(poll(&mut waiting).is_pending());

    let closer = h.close();
    settle().await;
    assert!(!closer.is_finished());
    // Closed to new rows at once, including a caller still waiting for a slot.
    let closed =
        |r: Poll<Result<i64, Error>>| matches!(r, Poll::Ready(Err(e)) if e.is_pool_closed());
    assert!(closed(poll(&mut waiting)));
    assert!(closed(poll(&mut h.submit(6))));
    assert!(matches!(poll(&mut h.submit_many(&[7])), Poll::Ready(Err(e)) if e.is_pool_closed()));

    // The queued rows go with the next free connection; close waits for them.
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3, 4]]);
    assert!(!closer.is_finished());
    assert!(h.mem().release_next());
    settle().await;
    finished(closer).await;

    assert_ok_own(1, finished(a).await);
    for (v, mut caller) in queued {
        assert_ok_own(v, outcome(&mut caller));
        assert_eq!(h.mem().written(v), 1);
    }
    assert_eq!(h.mem().times_sent(5), 0);
    let st = h.stats();
    assert_eq!((st.flush_close, st.rows, st.rows_cancelled), (1, 4, 0));
    assert!(closed(poll(&mut h.submit(8))));
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn close_cuts_timers_short() {
    let h = H::new(2, config().max_delay(Duration::from_secs(3600))).await;
    h.mem().open_gates();
    let tasks = h.queue_all(&[1, 2, 3]);
    settle().await;
    assert!(h.mem().log().is_empty());
    let t = Instant::now();
    let closer = h.close();
    settle().await;
    finished(closer).await;
    assert_eq!(h.mem().log(), [[1, 2, 3]]);
    assert_eq!(h.mem().received_at(), [t]);
    for (v, mut caller) in tasks {
        assert_ok_own(v, outcome(&mut caller));
    }
    let st = h.stats();
    assert_eq!((st.flush_close, st.flush_timer), (1, 0));
    assert!(matches!(poll(&mut h.submit(4)), Poll::Ready(Err(e)) if e.is_pool_closed()));
    h.assert_no_leaks().await;
}

// ---------------------------------------------------------------------------
// 3. Queue bounds
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn queue_full_wait_blocks_until_a_flush_takes_rows() {
    let h = H::new(1, config().queue_capacity(2)).await;
    let a = h.spawn(1);
    settle().await;
    let queued = h.queue_all(&[2, 3]);
    settle().await;
    let mut d = h.submit(4);
    assert!(poll(&mut d).is_pending());
    settle().await;
    assert!(poll(&mut d).is_pending());
    assert_eq!((h.queued(), h.stats().queued), (vec![2, 3], 2));

    // A flush takes [2, 3] (its statement still in flight): a slot is free.
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    assert!(poll(&mut d).is_pending());
    assert_eq!(h.queued(), [4]);

    drain_all_own(&h, (1, a), queued, (4, d)).await;
    h.assert_no_leaks().await;
}

/// A slot reserved ahead of the row (tower's `poll_ready`) is the row's
/// slot: the row queues without waiting, and the slot comes back when a
/// flush takes the row. A slot of another queue is not taken for this one.
#[tokio::test(start_paused = true)]
async fn a_reserved_slot_is_the_rows_own() {
    let h = H::new(1, config().queue_capacity(1)).await;
    let a = h.spawn(1);
    settle().await;
    let slot = h.e.queue_slots().clone().try_acquire_owned().unwrap();
    assert_eq!(h.e.queue_slots().available_permits(), 0);
    let (e, q) = (h.e.clone(), h.q.clone());
    let mut b: BoxFut<_> = Box::pin(async move {
        let work = e.enter()?;
        e.submit(&q, 2, ROW_BYTES, Some(slot), work, None).await
    });
    assert!(poll(&mut b).is_pending());
    assert_eq!(h.queued(), [2], "queued on its reserved slot");

    // A slot of another semaphore is dropped, and the row waits for one.
    let foreign = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
    let (e, q) = (h.e.clone(), h.q.clone());
    let mut c: BoxFut<_> = Box::pin(async move {
        let work = e.enter()?;
        e.submit(&q, 3, ROW_BYTES, Some(foreign), work, None).await
    });
    assert!(poll(&mut c).is_pending());
    assert_eq!(h.queued(), [2]);

    // The flush that takes [2] gives its slot back: now [3] queues.
    assert!(h.mem().release_next());
    settle().await;
    assert!(poll(&mut c).is_pending());
    assert_eq!(h.queued(), [3]);
    drain_all_own(&h, (1, a), vec![(2, b)], (3, c)).await;
    assert_eq!(h.e.queue_slots().available_permits(), 1);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn queue_full_reject_fails_at_once() {
    let config = config().queue_capacity(2).queue_full(QueueFull::Reject);
    let h = H::new(1, config).await;
    let a = h.spawn(1);
    settle().await;
    let queued = h.queue_all(&[2, 3]);
    settle().await;
    assert!(matches!(poll(&mut h.submit(4)), Poll::Ready(Err(e)) if e.is_overloaded()));
    assert_eq!(h.queued(), [2, 3]);

    assert!(h.mem().release_next());
    settle().await;
    let mut e = h.submit(5);
    assert!(poll(&mut e).is_pending());
    assert_eq!(h.queued(), [5]);

    drain_all_own(&h, (1, a), queued, (5, e)).await;
    assert_eq!(h.mem().times_sent(4), 0);
    h.assert_no_leaks().await;
}

// ---------------------------------------------------------------------------
// 4. Natural flushing
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn lone_row_at_idle_is_sent_inline() {
    let h = H::new(1, config()).await;
    let mut f = h.submit(7);
    // Polled twice (the connection check-out yields once), without this task
    // ever yielding to another: the statement went out from the caller.
    assert!(poll(&mut f).is_pending());
    assert!(poll(&mut f).is_pending());
    assert_eq!(h.mem().log(), [[7]]);
    assert!(h.queue_is_idle());
    assert_eq!(h.stats().in_flight, 1);
    assert!(h.mem().release_next());
    assert!(matches!(poll(&mut f), Poll::Ready(Ok(7))));
    let st = h.stats();
    assert_eq!(
        (st.flush_natural, st.rows, st.queued, st.in_flight),
        (1, 1, 0, 0)
    );
    assert_eq!(st.queue_wait_max, Duration::ZERO);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn under_load_a_lone_row_queues_and_goes_with_the_rows_queued_meanwhile() {
    let h = H::new(3, config()).await;
    let a = h.spawn(1);
    settle().await;
    assert_eq!(h.mem().log(), [[1]], "idle: sent inline");
    // A statement of the shape is on the wire and two connections are free:
    // the next rows queue (no inline send from the caller's task) and the
    // flusher that takes a free connection sends them together.
    let callers = h.queue_all(&[2, 3]);
    assert_eq!(h.mem().log(), [[1]]);
    assert_eq!(h.queued(), [2, 3]);
    settle().await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    assert_eq!(h.mem().in_use(), 2);
    h.drain().await;
    assert_ok_own(1, finished(a).await);
    assert_all_own(callers);
    h.assert_no_leaks().await;
}

/// Every caller, after a drain, has its own row back.
fn assert_all_own(callers: impl IntoIterator<Item = Caller>) {
    for (v, mut caller) in callers {
        assert_ok_own(v, outcome(&mut caller));
    }
}

#[tokio::test(start_paused = true)]
async fn a_free_connection_waits_until_its_statement_is_balanced() {
    let h = H::new(3, config()).await;
    // Eight rows on the wire in one statement.
    let hold = h.mem().hold_all();
    let first = h.queue_all(&[1, 2, 3, 4, 5, 6, 7, 8]);
    drop(hold);
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, 2, 3, 4, 5, 6, 7, 8]]);
    // One row: a connection is free, but a 1-row statement beside an
    // 8-row one is not sent; the flusher holds its connection and waits.
    let mut second = h.queue_all(&[9]);
    settle().await;
    assert_eq!(h.mem().log().len(), 1);
    assert_eq!(h.queued(), [9]);
    assert_eq!(
        h.mem().in_use(),
        2,
        "the waiting flusher holds a connection"
    );
    // Half the statement on the wire is queued: it goes at once.
    second.extend(h.queue_all(&[10, 11, 12]));
    settle().await;
    assert_eq!(h.mem().log()[1], [9, 10, 11, 12]);
    // A lone row waits for a statement on the wire to end; once none is
    // left it goes (no timer of its own).
    let third = h.queue_all(&[13]);
    settle().await;
    assert_eq!(h.mem().log().len(), 2);
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log().len(), 2, "4 rows still on the wire");
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log()[2], [13]);
    h.drain().await;
    assert_all_own(first.into_iter().chain(second).chain(third));
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_balancing_flusher_sends_at_the_rows_deadline() {
    let h = H::limited(Mem::new(2), config(), limits(Some(1), None)).await;
    let hold = h.mem().hold_all();
    let first = h.queue_all(&[1, 2, 3, 4, 5, 6]);
    drop(hold);
    settle().await;
    let start = Instant::now();
    let lone = h.queue_all(&[7]);
    settle().await;
    assert_eq!(h.mem().log().len(), 1, "row 7 waits for balance");
    tokio::time::sleep_until(start + Duration::from_millis(979)).await;
    assert_eq!(h.mem().log().len(), 1, "row 7 still waits for balance");
    tokio::time::sleep_until(start + Duration::from_millis(981)).await;
    // Shortly before its wait deadline the row is sent, not failed: a
    // connection was free all along.
    assert_eq!(h.mem().log()[1], [7]);
    h.drain().await;
    assert_all_own(first.into_iter().chain(lone));
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn busy_connections_accumulate_rows_into_allowed_statement_sizes() {
    // (backend max_params, config max_rows, rows queued)
    let cases = [(65535, 1000, 1..=40), (65535, 5, 1..=25), (4, 1000, 1..=10)];
    for (max_params, max_rows, counts) in cases {
        for n in counts {
            let mut mem = Mem::new(1);
            mem.max_params = max_params;
            let config = config().max_rows(max_rows).queue_capacity(64);
            let h = H::with(mem, config).await;
            let cap = h.q.cap_rows();
            assert_eq!(cap, max_rows.min(max_params));
            h.mem().open_gates();
            let hold = h.mem().hold_all();
            let rows: Vec<i64> = (0..n as i64).collect();
            let tasks = h.queue_all(&rows);
            settle().await;
            assert!(h.mem().log().is_empty());
            assert_eq!((h.queued(), h.stats().queued), (rows.clone(), n as u64));

            drop(hold);
            settle().await;
            let log = h.mem().log();
            let mut left = n;
            for s in &log {
                assert_eq!(
                    s.len(),
                    statement_size(left, cap),
                    "n={n} cap={cap} {log:?}"
                );
                left -= s.len();
            }
            assert_eq!(left, 0);
            assert_eq!(log.concat(), rows, "rows go in queue order");
            for (v, mut caller) in tasks {
                assert_ok_own(v, outcome(&mut caller));
                assert_eq!(h.mem().written(v), 1);
            }
            let st = h.stats();
            assert_eq!(
                (st.batches, st.statements),
                (log.len() as u64, log.len() as u64)
            );
            assert_eq!(st.flush_natural + st.flush_full, log.len() as u64);
            h.assert_no_leaks().await;
        }
    }
}

// ---------------------------------------------------------------------------
// 5. Timed flushing
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn timed_batch_goes_at_the_deadline() {
    let delay = Duration::from_millis(100);
    let h = H::new(2, config().max_delay(delay)).await;
    h.mem().open_gates();
    let t0 = Instant::now();
    let tasks = h.queue_all(&[1, 2, 3]);
    settle().await;
    // Connections are free, yet nothing goes before the deadline.
    assert!(h.mem().log().is_empty());
    tokio::time::sleep_until(t0 + delay - Duration::from_millis(2)).await;
    settle().await;
    assert!(h.mem().log().is_empty());
    assert_eq!(h.queued(), [1, 2, 3]);

    tokio::time::sleep_until(t0 + delay).await;
    settle().await;
    assert_eq!(h.mem().log(), [[1, 2, 3]]);
    assert_eq!(h.mem().received_at(), [t0 + delay]);
    for (v, mut caller) in tasks {
        assert_ok_own(v, outcome(&mut caller));
    }
    let st = h.stats();
    assert_eq!((st.flush_timer, st.batches), (1, 1));
    assert_eq!(st.queue_wait_max, delay);
    h.assert_no_leaks().await;
}

/// The deadline is measured on the runtime's clock, the one its timers use:
/// with the clock paused and moved ahead of the wall clock (as in an
/// application's tests), a row still waits `max_delay`.
#[tokio::test(start_paused = true)]
async fn timed_batching_follows_the_runtime_clock() {
    tokio::time::advance(Duration::from_secs(3600)).await;
    let delay = Duration::from_millis(100);
    let h = H::new(1, config().max_delay(delay)).await;
    h.mem().open_gates();
    let t0 = Instant::now();
    let task = h.spawn(1);
    settle().await;
    assert!(h.mem().log().is_empty(), "sent before its deadline");
    tokio::time::sleep_until(t0 + delay).await;
    settle().await;
    assert_eq!(h.mem().received_at(), [t0 + delay]);
    assert_ok_own(1, finished(task).await);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn timed_full_statement_goes_early() {
    let delay = Duration::from_secs(3600);
    let config = config().max_delay(delay).max_rows(4);
    let h = H::new(2, config).await;
    h.mem().open_gates();
    let t0 = Instant::now();
    let tasks = h.queue_all(&[1, 2, 3, 4, 5, 6]);
    settle().await;
    assert_eq!(h.mem().log(), [[1, 2, 3, 4]]);
    assert_eq!(h.mem().received_at(), [t0]);
    assert_eq!(h.queued(), [5, 6]);
    assert_eq!(h.stats().flush_full, 1);

    tokio::time::sleep_until(t0 + delay).await;
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, 2, 3, 4], vec![5, 6]]);
    assert_eq!(h.mem().received_at(), [t0, t0 + delay]);
    for (v, mut caller) in tasks {
        assert_ok_own(v, outcome(&mut caller));
    }
    let st = h.stats();
    assert_eq!((st.flush_full, st.flush_timer), (1, 1));
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn max_bytes_limits_a_statement() {
    let delay = Duration::from_secs(3600);
    let three_rows = 3 * ROW_BYTES;
    // The limit from the config, then from the backend (server packet size).
    for (max_bytes, server_limit) in [(three_rows, usize::MAX), (16 << 20, three_rows)] {
        let mut mem = Mem::new(2);
        mem.max_statement_bytes = server_limit;
        let config = config().max_delay(delay).max_bytes(max_bytes);
        let h = H::with(mem, config).await;
        h.mem().open_gates();
        let t0 = Instant::now();
        let tasks = h.queue_all(&[1, 2, 3, 4, 5, 6, 7]);
        settle().await;
        assert_eq!(h.mem().log(), [[1, 2, 3], [4, 5, 6]]);
        assert_eq!(h.mem().received_at(), [t0, t0]);
        assert_eq!(h.queued(), [7]);
        tokio::time::sleep_until(t0 + delay).await;
        settle().await;
        assert_eq!(h.mem().log(), [vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
        for (v, mut caller) in tasks {
            assert_ok_own(v, outcome(&mut caller));
        }
        let st = h.stats();
        assert_eq!((st.flush_full, st.flush_timer), (2, 1));
        h.assert_no_leaks().await;
    }

    // A row larger than the limit fails alone, before it queues.
    let config = config().max_bytes(ROW_BYTES - 1);
    let h = H::new(1, config).await;
    assert!(matches!(poll(&mut h.submit(1)), Poll::Ready(Err(e)) if e.is_too_large()));
    assert!(h.mem().log().is_empty());
    assert_eq!((h.stats().queued, h.e.permits.available_permits()), (0, 16));
}

// ---------------------------------------------------------------------------
// 6. Failing-row isolation
// ---------------------------------------------------------------------------

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
    let mut out = Vec::new();
    for (v, mut caller) in tasks {
        out.push((v, outcome(&mut caller)));
    }
    out
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

#[tokio::test(start_paused = true)]
async fn failing_rows_are_isolated_by_halving() {
    let h = H::new(1, config()).await;
    let rows = [10, 11, -12, 13, 14, -15, 16, 17];
    for (v, r) in flush_together(&h, &rows).await {
        if v < 0 {
            assert_own_error(v, &r);
        } else {
            assert_ok_own(v, r);
        }
        assert_eq!(h.mem().written(v), usize::from(v >= 0));
    }
    let expected: [&[i64]; 11] = [
        &rows,
        &[10, 11, -12, 13],
        &[10, 11],
        &[-12, 13],
        &[-12],
        &[13],
        &[14, -15, 16, 17],
        &[14, -15],
        &[14],
        &[-15],
        &[16, 17],
    ];
    assert_eq!(h.mem().log(), expected);
    let st = h.stats();
    assert_eq!(
        (st.batches, st.statements, st.split_statements),
        (1, 11, 10)
    );
    assert_eq!((st.rows, st.rows_failed), (8, 2));
    h.assert_no_leaks().await;
}

/// When most rows of a flush fail alike, isolation costs about one
/// statement per row (not the 2n of a full bisection), and every caller
/// still gets its own statement's error.
#[tokio::test(start_paused = true)]
async fn rows_failing_alike_cost_about_one_statement_each() {
    let h = H::new(1, config().queue_capacity(64)).await;
    let rows: Vec<i64> = (1..=64).map(|v| -v).collect();
    for (v, r) in flush_together(&h, &rows).await {
        assert_own_error(v, &r);
        assert_eq!(h.mem().written(v), 0);
    }
    let statements = h.stats().statements as usize;
    // 64 single-row statements are needed anyway; bisection adds at most
    // the failed statements before it gives up (2 log2 64 + 2) and their
    // halves.
    assert!(
        (64..=64 + 2 * (2 * 7 + 2) + 1).contains(&statements),
        "{statements} statements for 64 failing rows"
    );
    h.assert_no_leaks().await;
}

/// A backend that ran a group's rows one statement each reports each row's
/// own outcome: no isolation needed, nothing re-run.
#[tokio::test(start_paused = true)]
async fn rows_run_one_by_one_keep_their_own_outcomes() {
    let h = H::new(1, config()).await;
    h.mem().one_by_one.store(true, SeqCst);
    let rows = [1, -2, 3, -4];
    for (v, r) in flush_together(&h, &rows).await {
        if v < 0 {
            assert_own_error(v, &r);
        } else {
            assert_ok_own(v, r);
        }
        assert_eq!(h.mem().written(v), usize::from(v >= 0));
    }
    assert_eq!(h.mem().log(), [rows.to_vec()]);
    assert_eq!(h.stats().split_statements, 0);
    h.assert_no_leaks().await;
}

/// A statement refused as stale (its table changed under the prepared
/// statement; nothing ran) is re-run once, and its route is re-learned.
#[tokio::test(start_paused = true)]
async fn a_stale_statement_is_rerun_once_and_relearned() {
    let h = H::new(1, config()).await;
    assert_eq!(h.mem().prepared.load(SeqCst), 1);
    h.mem().stale_once.store(true, SeqCst);
    let rows = [1, 2, 3];
    for (v, r) in flush_together(&h, &rows).await {
        assert_ok_own(v, r);
        assert_eq!(h.mem().written(v), 1);
    }
    assert_eq!(h.mem().log(), [rows.to_vec(), rows.to_vec()]);
    // The next caller of the text re-learns its route in the background.
    h.e.route(SQL, None).await.unwrap();
    settle().await;
    assert_eq!(h.mem().prepared.load(SeqCst), 2);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn every_pattern_of_bad_rows_is_isolated() {
    for n in 1..=7usize {
        for mask in 0u32..(1 << n) {
            let h = H::new(1, config()).await;
            let rows: Vec<i64> = (0..n as i64)
                .map(|i| {
                    if mask & (1 << i) != 0 {
                        -(i + 1)
                    } else {
                        i + 1
                    }
                })
                .collect();
            let results = flush_together(&h, &rows).await;
            for (v, r) in &results {
                if *v < 0 {
                    assert_own_error(*v, r);
                    assert_eq!(h.mem().written(*v), 0);
                } else {
                    assert!(matches!(r, Ok(out) if out == v), "row {v}: {r:?}");
                    assert_eq!(h.mem().written(*v), 1, "row {v}");
                }
            }
            let log = h.mem().log();
            let st = h.stats();
            assert_eq!(st.rows_failed, u64::from(mask.count_ones()));
            assert_eq!(st.statements, log.len() as u64);
            assert_eq!(
                st.split_statements,
                st.statements - st.batches,
                "{rows:?}: {log:?}"
            );
            assert_eq!(st.rows, n as u64);
            h.assert_no_leaks().await;
        }
    }
}

/// A failing statement that names its row: that row runs alone after the
/// rest, which goes out again at once (in allowed statement sizes), so each
/// failing row costs about two statements; the other rows keep their order.
#[tokio::test(start_paused = true)]
async fn a_named_failing_row_runs_alone_and_the_rest_at_once() {
    let h = H::new(1, config()).await;
    h.mem().names.store(1, SeqCst);
    let rows = [10, 11, -12, 13, 14, -15, 16, 17];
    for (v, r) in flush_together(&h, &rows).await {
        if v < 0 {
            assert_own_error(v, &r);
        } else {
            assert_ok_own(v, r);
        }
        assert_eq!(h.mem().written(v), usize::from(v >= 0));
    }
    // The rest goes out in allowed statement sizes (7 rows: 6 and 1).
    let expected: [&[i64]; 7] = [
        &rows,
        &[10, 11, 13, 14, -15, 16],
        &[10, 11, 13, 14],
        &[16],
        &[-15],
        &[17],
        &[-12],
    ];
    assert_eq!(h.mem().log(), expected);
    let st = h.stats();
    assert_eq!((st.batches, st.statements, st.rows_failed), (1, 7, 2));
    h.assert_no_leaks().await;
}

/// Every pattern of bad rows, with a backend naming the right row, a wrong
/// one, or the last bad one: every row gets its own outcome, written once,
/// for rows of many callers and for one caller's batch in order.
#[tokio::test(start_paused = true)]
async fn every_pattern_of_bad_rows_is_isolated_whatever_row_is_named() {
    for names in 1..=3 {
        for n in 1..=6usize {
            for mask in 0u32..(1 << n) {
                let rows: Vec<i64> = (0..n as i64)
                    .map(|i| {
                        if mask & (1 << i) != 0 {
                            -(i + 1)
                        } else {
                            i + 1
                        }
                    })
                    .collect();
                let h = H::new(1, config()).await;
                h.mem().names.store(names, SeqCst);
                let results = flush_together(&h, &rows).await;
                for (v, r) in &results {
                    if *v < 0 {
                        assert_own_error(*v, r);
                    } else {
                        assert!(matches!(r, Ok(out) if out == v), "row {v}: {r:?}");
                    }
                    assert_eq!(h.mem().written(*v), usize::from(*v >= 0), "row {v}");
                }
                let st = h.stats();
                assert_eq!(st.statements, h.mem().log().len() as u64);
                if names == 1 {
                    let bad = u64::from(mask.count_ones());
                    // Two per failing row, and the pieces of allowed sizes.
                    assert!(
                        st.statements <= 3 * bad + 2,
                        "{rows:?}: {:?}",
                        h.mem().log()
                    );
                }
                h.assert_no_leaks().await;

                // One caller's batch: the rows take effect in order.
                let h = H::new(1, config()).await;
                h.mem().names.store(names, SeqCst);
                h.mem().open_gates();
                let mut many = h.submit_many(&rows);
                assert!(poll(&mut many).is_pending());
                settle().await;
                let Poll::Ready(Ok(out)) = poll(&mut many) else {
                    panic!("submit_many did not finish");
                };
                for (v, r) in rows.iter().zip(&out) {
                    if *v < 0 {
                        assert_own_error(*v, r);
                    } else {
                        assert!(matches!(r, Ok(out) if out == v), "row {v}: {r:?}");
                    }
                }
                let written: Vec<i64> = h
                    .mem()
                    .log()
                    .into_iter()
                    .filter(|s| s.iter().all(|&v| v >= 0))
                    .flatten()
                    .collect();
                let good: Vec<i64> = rows.iter().copied().filter(|&v| v >= 0).collect();
                assert_eq!(written, good, "{rows:?}: {:?}", h.mem().log());
                h.assert_no_leaks().await;
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn statement_error_fails_that_statement_only() {
    let broken = |r: &Result<i64, Error>, by: i64| {
        matches!(r, Err(e) if e.is_outcome_unknown()
            && e.to_string() == format!("statement broken by row {by}"))
    };
    let b = BREAKS_STATEMENT;

    // Five queued rows go as statements of 4 and 1: the first breaks.
    let h = H::new(1, config()).await;
    let results = flush_together(&h, &[10, 11, b, 12, 13]).await;
    assert_eq!(h.mem().log(), [vec![10, 11, b, 12], vec![13]]);
    for (v, r) in &results[..4] {
        assert!(broken(r, b), "row {v}: {r:?}");
    }
    assert!(matches!(results[4].1, Ok(13)));
    assert_eq!((h.mem().written(10), h.mem().written(13)), (0, 1));
    let st = h.stats();
    assert_eq!((st.split_statements, st.rows_failed), (0, 4));
    h.assert_no_leaks().await;

    // While isolating a bad row: only the piece that breaks fails whole.
    let h = H::new(1, config()).await;
    let results = flush_together(&h, &[-1, 2, b, 3]).await;
    assert_eq!(
        h.mem().log(),
        [
            vec![-1, 2, b, 3],
            vec![-1, 2],
            vec![-1],
            vec![2],
            vec![b, 3]
        ]
    );
    assert_own_error(-1, &results[0].1);
    assert!(matches!(results[1].1, Ok(2)));
    assert!(broken(&results[2].1, b) && broken(&results[3].1, b));
    assert_eq!((h.mem().written(2), h.mem().written(3)), (1, 0));
    let st = h.stats();
    assert_eq!((st.split_statements, st.rows_failed), (4, 3));
    h.assert_no_leaks().await;

    // An explicit batch of 7 runs as statements of 6 and 1.
    let h = H::new(1, config()).await;
    h.mem().open_gates();
    let mut many = h.submit_many(&[1, 2, 3, 4, 5, 6, b]);
    assert!(poll(&mut many).is_pending());
    settle().await;
    let Poll::Ready(Ok(out)) = poll(&mut many) else {
        panic!("submit_many did not finish");
    };
    assert_eq!(h.mem().log(), [vec![1, 2, 3, 4, 5, 6], vec![b]]);
    for (v, r) in (1..=6).zip(&out) {
        assert!(matches!(r, Ok(o) if *o == v));
    }
    assert!(broken(&out[6], b));
    h.assert_no_leaks().await;
}

// ---------------------------------------------------------------------------
// 7. max_in_flight, submit_many
// ---------------------------------------------------------------------------

/// Twenty rows at once on four gated connections, replies released one by
/// one; returns the most statements open at once.
async fn most_open_statements(config: BatchConfig) -> usize {
    let limit = config.max_in_flight;
    let h = H::new(4, config).await;
    let rows: Vec<i64> = (1..=20).collect();
    let tasks: Vec<_> = rows.iter().map(|&v| (v, h.spawn(v))).collect();
    settle().await;
    loop {
        if let Some(limit) = limit {
            assert!(h.mem().in_use() <= limit);
            assert!(h.stats().in_flight <= limit as u64);
        }
        if !h.mem().release_next() {
            break;
        }
        settle().await;
    }
    for (v, task) in tasks {
        assert_ok_own(v, finished(task).await);
        assert_eq!(h.mem().written(v), 1);
    }
    h.assert_no_leaks().await;
    h.mem().max_open()
}

#[tokio::test(start_paused = true)]
async fn max_in_flight_bounds_concurrent_flushes() {
    assert_eq!(most_open_statements(config()).await, 4);
    let limited = config().max_in_flight(2);
    assert_eq!(most_open_statements(limited).await, 2);

    // An explicit batch waits for a flush slot too.
    let h = H::new(2, config().max_in_flight(1)).await;
    let a = h.spawn(1);
    settle().await;
    let mut many = h.submit_many(&[2, 3]);
    assert!(poll(&mut many).is_pending());
    settle().await;
    assert_eq!(h.mem().log(), [[1]]);
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    h.drain().await;
    assert!(matches!(poll(&mut many), Poll::Ready(Ok(out)) if out.len() == 2));
    assert_ok_own(1, finished(a).await);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn submit_many_runs_rows_in_order() {
    for (max_rows, statements) in [
        (2, vec![vec![1, 2], vec![3, 4], vec![5, 6], vec![7]]),
        (1000, vec![vec![1, 2, 3, 4, 5, 6], vec![7]]),
    ] {
        let h = H::new(1, config().max_rows(max_rows)).await;
        h.mem().open_gates();
        let rows = [1, 2, 3, 4, 5, 6, 7];
        let mut many = h.submit_many(&rows);
        assert!(poll(&mut many).is_pending());
        settle().await;
        let Poll::Ready(Ok(out)) = poll(&mut many) else {
            panic!("submit_many did not finish");
        };
        assert_eq!(h.mem().log(), statements);
        for (v, r) in rows.into_iter().zip(out) {
            assert_ok_own(v, r);
        }
        assert!(matches!(poll(&mut h.submit_many(&[])), Poll::Ready(Ok(v)) if v.is_empty()));
        h.assert_no_leaks().await;
    }
}

/// A pool whose backend pipelines pairs of statements, on `conns`
/// connections, at most `max_rows` rows per statement.
async fn pipelined(conns: usize, max_rows: usize) -> H {
    let mem = Mem::new(conns);
    mem.pipelined.store(true, SeqCst);
    H::with(mem, config().max_rows(max_rows)).await
}

#[tokio::test(start_paused = true)]
async fn submit_many_keeps_two_statements_on_the_wire() {
    let h = pipelined(1, 2).await;
    let rows = [1, 2, 3, 4, 5, 6, 7];
    let mut many = h.submit_many(&rows);
    assert!(poll(&mut many).is_pending());
    settle().await;
    // The second statement is sent before the first is answered.
    assert_eq!(h.mem().log(), [vec![1, 2], vec![3, 4]]);
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log().len(), 2, "the pair is answered together");
    assert!(h.mem().release_next());
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, 2], vec![3, 4], vec![5, 6], vec![7]]);
    h.drain().await;
    let Poll::Ready(Ok(out)) = poll(&mut many) else {
        panic!("submit_many did not finish");
    };
    for (v, r) in rows.into_iter().zip(out) {
        assert_ok_own(v, r);
        assert_eq!(h.mem().written(v), 1);
    }
    let st = h.stats();
    assert_eq!((st.statements, st.rows), (4, 7));
    h.assert_no_leaks().await;
}

/// `BatchConfig::pipeline(false)`: a backend that pipelines still gets one
/// statement at a time, each answered before the next is sent.
#[tokio::test(start_paused = true)]
async fn pipeline_off_sends_one_statement_at_a_time() {
    let mem = Mem::new(1);
    mem.pipelined.store(true, SeqCst);
    let h = H::with(mem, config().max_rows(2).pipeline(false)).await;
    let rows = [1, 2, 3, 4, 5];
    let mut many = h.submit_many(&rows);
    assert!(poll(&mut many).is_pending());
    settle().await;
    assert_eq!(
        h.mem().log(),
        [vec![1, 2]],
        "only the first statement is on the wire"
    );
    for sent in 2..=3 {
        assert!(h.mem().release_next());
        settle().await;
        assert_eq!(h.mem().log().len(), sent);
    }
    assert!(h.mem().release_next());
    h.drain().await;
    let Poll::Ready(Ok(out)) = poll(&mut many) else {
        panic!("submit_many did not finish");
    };
    for (v, r) in rows.into_iter().zip(out) {
        assert_ok_own(v, r);
    }
    assert_eq!(h.stats().pipelined_statements, 0);
    h.assert_no_leaks().await;
}

/// `submit_many` of `rows` on a pipelining pool of 2-row statements, all
/// gates open: each row's result and the statements received.
async fn many_pipelined(rows: &[i64]) -> (Vec<Result<i64, Error>>, Vec<Vec<i64>>, H) {
    let h = pipelined(1, 2).await;
    h.mem().open_gates();
    let mut many = h.submit_many(rows);
    assert!(poll(&mut many).is_pending());
    settle().await;
    let Poll::Ready(Ok(out)) = poll(&mut many) else {
        panic!("submit_many did not finish");
    };
    let log = h.mem().log();
    (out, log, h)
}

#[tokio::test(start_paused = true)]
async fn a_failed_statement_of_an_ordered_pair_rolls_the_pair_back() {
    // The first statement fails: the second, already sent, is rolled back
    // with it and runs again after the first's rows are isolated, so the
    // rows still take effect in their order.
    let (out, log, h) = many_pipelined(&[1, -2, 3, 4]).await;
    assert_eq!(
        log,
        [vec![1, -2], vec![3, 4], vec![1], vec![-2], vec![3, 4]]
    );
    // The second fails: the first, already run, is rolled back too.
    let (out2, log2, h2) = many_pipelined(&[5, 6, 7, -8]).await;
    assert_eq!(
        log2,
        [vec![5, 6], vec![7, -8], vec![5, 6], vec![7], vec![-8]]
    );
    for (h, rows, out) in [(&h, [1, -2, 3, 4], out), (&h2, [5, 6, 7, -8], out2)] {
        for (v, r) in rows.into_iter().zip(out) {
            if v < 0 {
                assert_own_error(v, &r);
                assert_eq!(h.mem().written(v), 0);
            } else {
                assert_ok_own(v, r);
                assert_eq!(h.mem().written(v), 1, "row {v} written once");
            }
        }
        h.assert_no_leaks().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_flusher_pipelines_when_more_than_a_statement_is_queued() {
    let h = pipelined(1, 2).await;
    let hold = h.mem().hold_all();
    let callers = h.queue_all(&[1, -2, 3, 4, 5]);
    drop(hold);
    settle().await;
    // Two statements' worth on one connection, each its own autocommit
    // statement: the bad row in the first does not undo the second.
    assert_eq!(h.mem().log(), [vec![1, -2], vec![3, 4]]);
    assert_eq!(h.mem().written(3), 1);
    h.drain().await;
    assert_eq!(
        h.mem().log(),
        [vec![1, -2], vec![3, 4], vec![1], vec![-2], vec![5]]
    );
    for (v, mut caller) in callers {
        let r = outcome(&mut caller);
        if v < 0 {
            assert_own_error(v, &r);
        } else {
            assert_ok_own(v, r);
        }
        assert_eq!(h.mem().written(v), usize::from(v > 0));
    }
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_stale_statement_of_a_pair_is_healed_with_its_pair() {
    let h = pipelined(1, 2).await;
    h.mem().open_gates();
    h.mem().stale_once.store(true, SeqCst);
    let mut many = h.submit_many(&[1, 2, 3, 4]);
    assert!(poll(&mut many).is_pending());
    settle().await;
    let Poll::Ready(Ok(out)) = poll(&mut many) else {
        panic!("submit_many did not finish");
    };
    for (v, r) in [1, 2, 3, 4].into_iter().zip(out) {
        assert_ok_own(v, r);
        assert_eq!(h.mem().written(v), 1);
    }
    assert_eq!(
        h.mem().log(),
        [vec![1, 2], vec![3, 4], vec![1, 2], vec![3, 4]]
    );
    h.assert_no_leaks().await;
}

// ---------------------------------------------------------------------------
// 7. Time limits
// ---------------------------------------------------------------------------

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

#[tokio::test(start_paused = true)]
async fn wait_timeout_bounds_every_queued_row_not_one_statement() {
    // One connection, stuck; 2,500 rows queue (three statements' worth)
    // over 2 s. Each row fails unsent exactly when its own wait_timeout
    // (1 s from its call) passes, whichever flusher notices.
    let config = config().max_rows(1000).queue_capacity(10_000);
    let h = H::limited(Mem::new(1), config, limits(Some(1), None)).await;
    let stuck = h.spawn(-1);
    settle().await;
    assert_eq!(h.mem().log().len(), 1, "the stuck statement is sent");
    let start = Instant::now();
    let mut callers = Vec::new();
    for batch in 0..5i64 {
        for i in 0..500 {
            let v = 1 + batch * 500 + i;
            let f = h.submit(v);
            callers.push((
                v,
                Instant::now(),
                tokio::spawn(async move {
                    let out = f.await;
                    (out, Instant::now())
                }),
            ));
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    settle().await;
    tokio::time::sleep_until(start + Duration::from_secs(4)).await;
    settle().await;
    for (v, at, task) in callers {
        let (out, done) = finished(task).await;
        let e = out.expect_err("no connection was ever free");
        assert!(e.is_timeout() && !e.is_outcome_unknown(), "row {v}: {e}");
        let waited = done - at;
        assert!(
            waited >= Duration::from_secs(1) && waited <= Duration::from_millis(1002),
            "row {v} waited {waited:?}"
        );
        assert_eq!(h.mem().times_sent(v), 0);
    }
    let st = h.stats();
    assert_eq!(
        (st.rows_unsent, st.rows_failed, st.queued),
        (2500, 2500, 0),
        "{st:?}"
    );
    // The stuck statement still completes, and the pool serves again.
    h.mem().open_gates();
    settle().await;
    assert!(
        finished(stuck).await.is_err(),
        "row -1 violates a constraint"
    );
    let last = h.spawn(7);
    settle().await;
    assert_ok_own(7, finished(last).await);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_row_behind_an_earlier_statement_of_its_flush_times_out_unsent() {
    // Seven rows go as one flush of two statements, 6 then 1 (no bulk
    // path for them); the first is stuck past the last row's deadline. The
    // row that waits behind it fails at its own deadline, and is never
    // sent, not even once the first statement is answered.
    let mem = Mem::new(1);
    mem.any_size.store(true, SeqCst);
    let h = H::limited(mem, config(), limits(Some(1), None)).await;
    let hold = h.mem().hold_all();
    let start = Instant::now();
    let callers: Vec<_> = (1..=7).map(|v| (v, h.spawn(v))).collect();
    settle().await;
    drop(hold);
    settle().await;
    assert_eq!(h.mem().log(), [vec![1, 2, 3, 4, 5, 6]]);
    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    settle().await;
    let (_, last) = &callers[6];
    assert!(last.is_finished(), "row 7 has its outcome at its deadline");
    h.mem().open_gates();
    settle().await;
    for (v, task) in callers {
        let out = finished(task).await;
        if v < 7 {
            assert_ok_own(v, out);
        } else {
            let e = out.expect_err("row 7 waited past its deadline");
            assert!(e.is_timeout() && !e.is_outcome_unknown(), "{e}");
        }
    }
    assert_eq!(h.mem().times_sent(7), 0, "{:?}", h.mem().log());
    let st = h.stats();
    assert_eq!(
        (st.rows, st.rows_unsent, st.rows_failed),
        (6, 1, 1),
        "{st:?}"
    );
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_caller_waiting_for_its_text_to_be_learned_times_out_at_its_deadline() {
    // Learning a new text takes a statement on the server (stuck here, as
    // behind a table lock). Its callers wait no longer than their own wait;
    // the learning goes on, and once done the text is coalesced as usual.
    // (Not re-learned while the test runs.)
    let config = config().relearn_after(Duration::from_secs(3600));
    let h = H::limited(Mem::new(2), config, limits(Some(1), None)).await;
    let gate = Arc::new(Notify::new());
    *h.mem().prepare_gate.lock().unwrap() = Some(gate.clone());
    let other = "INSERT INTO u (v) VALUES ($1)";
    let route = |e: Arc<Engine<Mem>>| async move {
        let _work = e.enter()?;
        let deadline = e.wait_deadline();
        e.route(other, deadline).await.map(|r| r.explain())
    };
    let start = Instant::now();
    let callers: Vec<_> = (0..3).map(|_| tokio::spawn(route(h.e.clone()))).collect();
    tokio::time::sleep_until(start + Duration::from_millis(999)).await;
    assert!(callers.iter().all(|c| !c.is_finished()));
    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    settle().await;
    for c in callers {
        let e = finished(c).await.expect_err("learning is stuck");
        assert!(e.is_timeout() && !e.is_outcome_unknown(), "{e}");
    }
    let prepared = h.mem().prepared.load(SeqCst);
    *h.mem().prepare_gate.lock().unwrap() = None;
    gate.notify_one();
    settle().await;
    assert_eq!(h.mem().prepared.load(SeqCst), prepared + 1, "learned once");
    let later = tokio::spawn(route(h.e.clone()));
    settle().await;
    let later = finished(later).await;
    assert!(later.expect("learned").is_coalesced());
    assert_eq!(
        h.mem().prepared.load(SeqCst),
        prepared + 1,
        "from the cache"
    );
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_statement_fails_at_its_deadline_and_its_connection_is_closed() {
    let h = H::limited(Mem::new(1), config(), limits(None, Some(2))).await;
    let lone = h.spawn(1); // inline
    settle().await;
    let queued = h.queue_all(&[2, 3]);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(2) + STATEMENT_GRACE).await;
    settle().await;
    let e = finished(lone).await.unwrap_err();
    assert!(
        e.is_outcome_unknown() && e.is_timeout() && e.is_statement_timeout(),
        "{e}"
    );
    assert_eq!(
        h.mem().discarded.load(SeqCst),
        1,
        "the connection was closed"
    );
    // The next flush runs on a new connection; the queued rows were never
    // sent, so they only waited.
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    h.mem().open_gates();
    settle().await;
    for (v, mut caller) in queued {
        assert_ok_own(v, outcome(&mut caller));
    }
    assert!(Instant::now() - start < Duration::from_secs(4));
    let st = h.stats();
    assert_eq!(
        (st.rows, st.rows_failed, st.statements),
        (3, 1, 2),
        "{st:?}"
    );
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn a_caller_dropped_mid_statement_does_not_cut_it_off() {
    // The idle fast path sends from the caller's task; the caller leaves.
    let h = H::new(1, config()).await;
    let lone = h.spawn(1);
    settle().await;
    assert_eq!(h.mem().log(), [vec![1]]);
    lone.abort();
    settle().await;
    assert!(lone.is_finished());
    let closer = h.close();
    settle().await;
    assert!(
        !closer.is_finished(),
        "close waits for the statement on the wire"
    );
    assert_eq!(
        h.mem().in_use(),
        1,
        "the connection stays with its statement"
    );
    h.mem().open_gates();
    settle().await;
    finished(closer).await;
    assert_eq!(
        h.mem().discarded.load(SeqCst),
        0,
        "answered, so returned clean"
    );
    let st = h.stats();
    assert_eq!((st.rows, st.statements, st.in_flight), (1, 1, 0), "{st:?}");
    assert_eq!(h.mem().written(1), 1);
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn close_waits_for_rows_not_for_callers_that_stopped_polling() {
    let h = H::new(1, config()).await;
    let a = h.spawn(1);
    settle().await;
    // Queued, then never polled again (not dropped either).
    let queued = h.queue_all(&[2, 3]);
    let closer = h.close();
    h.mem().open_gates();
    settle().await;
    finished(closer).await;
    assert_eq!(h.mem().log(), [vec![1], vec![2, 3]]);
    assert_ok_own(1, finished(a).await);
    for (v, mut caller) in queued {
        assert_ok_own(v, outcome(&mut caller));
    }
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn close_timeout_reports_work_still_running() {
    let h = H::new(1, config()).await;
    let a = h.spawn(1);
    settle().await;
    let e =
        h.e.close(Some(Duration::from_millis(200)))
            .await
            .unwrap_err();
    assert!(e.is_timeout(), "{e}");
    assert!(h.submit(2).await.unwrap_err().is_pool_closed());
    h.mem().open_gates();
    settle().await;
    assert_ok_own(1, finished(a).await);
    h.e.close(Some(Duration::from_millis(200))).await.unwrap();
    h.assert_no_leaks().await;
}

#[tokio::test(start_paused = true)]
async fn counters_stay_exact_when_a_backend_panics() {
    let h = H::new(1, config()).await;
    h.mem().open_gates();
    // Inline: the panic reaches the caller's task (a bug is not hidden).
    let lone = h.spawn(PANICS);
    settle().await;
    assert!(finished_or_panic(lone).await);
    // Queued: the flusher task panics; its callers hear outcome-unknown.
    let hold = h.mem().hold_all();
    let queued = h.queue_all(&[PANICS, 5]);
    drop(hold);
    settle().await;
    for (_, mut caller) in queued {
        let e = outcome(&mut caller).unwrap_err();
        assert!(e.is_outcome_unknown(), "{e}");
    }
    let st = h.stats();
    assert_eq!((st.rows, st.rows_failed, st.in_flight), (3, 3, 0), "{st:?}");
    h.assert_no_leaks().await;
}

/// Whether a task ended by panicking.
async fn finished_or_panic<T: std::fmt::Debug>(task: JoinHandle<T>) -> bool {
    match task.await {
        Err(e) => e.is_panic(),
        Ok(out) => panic!("expected a panic, got {out:?}"),
    }
}

// ---------------------------------------------------------------------------
// Tracing
// ---------------------------------------------------------------------------

/// A span as the test subscriber saw it, from creation to close.
#[derive(Debug, Default, Clone)]
struct SpanSeen {
    name: &'static str,
    /// Fields given at creation or recorded later, as text.
    fields: BTreeMap<&'static str, String>,
    /// The spans it follows from, in order.
    follows: Vec<u64>,
}

/// What the test subscriber saw.
#[derive(Debug, Default)]
struct Seen {
    open: std::collections::HashMap<u64, SpanSeen>,
    closed: Vec<SpanSeen>,
    /// The fields of every WARN event.
    warnings: Vec<BTreeMap<&'static str, String>>,
}

impl Seen {
    fn flushes(&self) -> Vec<SpanSeen> {
        let open = self.open.values();
        let all = self.closed.iter().chain(open);
        all.filter(|s| s.name == "batchpool.flush")
            .cloned()
            .collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

/// A layer that records spans, their follows-from links and warnings.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Seen>>);

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut span = SpanSeen {
            name: attrs.metadata().name(),
            ..SpanSeen::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        self.0.lock().unwrap().open.insert(id.into_u64(), span);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = self.0.lock().unwrap().open.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_follows_from(
        &self,
        id: &tracing::span::Id,
        follows: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = self.0.lock().unwrap().open.get_mut(&id.into_u64()) {
            span.follows.push(follows.into_u64());
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().warnings.push(fields);
        }
    }

    fn on_close(&self, id: tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        if let Some(span) = seen.open.remove(&id.into_u64()) {
            seen.closed.push(span);
        }
    }
}

/// Records what this thread's spans and events do (every test runs on a
/// current-thread runtime, so the engine's tasks run here too) until the
/// guard is dropped.
fn capture() -> (Capture, tracing::subscriber::DefaultGuard) {
    use tracing_subscriber::layer::SubscriberExt as _;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    (capture, tracing::subscriber::set_default(subscriber))
}

/// Each caller's span is linked (follows-from) from the flush span that
/// carried its row: the first `MAX_LINKS` callers of a queued flush, the
/// caller of the idle fast path, the caller of an explicit batch; flush
/// spans carry rows, statement kind and outcome.
#[tokio::test(start_paused = true)]
async fn flush_spans_follow_from_their_callers() {
    use tracing::Instrument as _;
    let (capture, _guard) = capture();
    let n = super::queue::MAX_LINKS + 6;
    let h = H::new(1, config().queue_capacity(2 * n).max_rows(n)).await;

    // Every connection busy: the rows queue, then go out in one flush.
    let hold = h.mem().hold_all();
    let rows: Vec<i64> = (1..=n as i64)
        .map(|v| if v == 5 { -5 } else { v })
        .collect();
    let spans: Vec<tracing::Span> = rows
        .iter()
        .map(|v| tracing::info_span!("caller", v))
        .collect();
    let mut callers: Vec<Caller> = rows
        .iter()
        .zip(&spans)
        .map(|(&v, span)| -> Caller { (v, Box::pin(h.submit(v).instrument(span.clone()))) })
        .collect();
    for (v, f) in &mut callers {
        assert!(poll(f).is_pending(), "row {v} did not queue");
    }
    drop(hold);
    h.drain().await;
    for (v, mut f) in callers {
        match outcome(&mut f) {
            Ok(out) => assert_eq!(out, v),
            Err(_) => assert_eq!(v, -5, "only the negative row fails"),
        }
    }
    assert_eq!(h.mem().log()[0].len(), n, "one flush took every row");
    let ids: Vec<u64> = spans.iter().map(|s| s.id().unwrap().into_u64()).collect();
    let flushes = capture.0.lock().unwrap().flushes();
    assert_eq!(flushes.len(), 1, "{flushes:?}");
    let flush = &flushes[0];
    assert_eq!(
        flush.follows,
        ids[..super::queue::MAX_LINKS],
        "the first callers, bounded"
    );
    assert_eq!(flush.fields["rows"], n.to_string());
    assert_eq!(flush.fields["kind"], "multi-row");
    assert_eq!(flush.fields["outcome"], "rows failed");
    assert_eq!(flush.fields["failed"], "1");

    // Nothing queued or on the wire: the idle fast path, in the caller's task.
    let idle = tracing::info_span!("caller", v = 1000);
    let task = tokio::spawn(h.submit(1000).instrument(idle.clone()));
    h.drain().await;
    assert_ok_own(1000, finished(task).await);
    // An explicit batch, from its caller's span.
    let many = tracing::info_span!("caller", v = 2000);
    let task = tokio::spawn(h.submit_many(&[2000, 2001]).instrument(many.clone()));
    h.drain().await;
    assert!(finished(task).await.unwrap().iter().all(Result::is_ok));

    let flushes = capture.0.lock().unwrap().flushes();
    assert_eq!(flushes.len(), 3, "{flushes:?}");
    let by_reason = |reason: &str| {
        flushes
            .iter()
            .find(|s| s.fields["reason"] == reason)
            .unwrap_or_else(|| panic!("no {reason} flush: {flushes:?}"))
            .clone()
    };
    let inline = by_reason("idle");
    assert_eq!(inline.follows, [idle.id().unwrap().into_u64()]);
    assert_eq!(
        (
            inline.fields["outcome"].as_str(),
            inline.fields["failed"].as_str()
        ),
        ("ok", "0")
    );
    let explicit = by_reason("explicit");
    assert_eq!(explicit.follows, [many.id().unwrap().into_u64()]);
    assert_eq!(explicit.fields["kind"], "multi-row");
    assert_eq!(explicit.fields["rows"], "2");
    h.assert_no_leaks().await;
}

/// A text that looks batchable but that the backend declines is warned
/// about once, with `explain()`'s reason, however often it is learned
/// again; each such text has its own warning; texts coalesced or refused
/// from the text alone are not warned about.
#[tokio::test(start_paused = true)]
async fn declined_insert_is_warned_about_once_per_text() {
    let (capture, _guard) = capture();
    let h = H::new(2, config()).await;
    let explain = |sql: &str| -> String {
        let reason = h.e.routes.get(sql).unwrap().0.explain();
        reason.reason().unwrap().to_string()
    };
    for _ in 0..3 {
        let Route::Pass(_) = h.e.route(DECLINED[0], None).await.unwrap() else {
            panic!("declined");
        };
        settle().await;
        // Learned again by the next call (in the background).
        h.e.route_stale(DECLINED[0]);
    }
    let Route::Pass(_) = h.e.route(DECLINED[1], None).await.unwrap() else {
        panic!("declined");
    };
    let Route::Pass(_) = h.e.route("SELECT 1", None).await.unwrap() else {
        panic!("not an insert");
    };
    assert!(matches!(
        h.e.route(SQL, None).await.unwrap(),
        Route::Batch(_)
    ));
    settle().await;
    // The first text was asked about once and learned twice again.
    assert_eq!(h.mem().prepared.load(SeqCst), 1 + 3 + 1);
    let warnings = capture.0.lock().unwrap().warnings.clone();
    let texts: Vec<&str> = warnings.iter().map(|w| w["sql"].as_str()).collect();
    assert_eq!(texts, DECLINED, "{warnings:?}");
    for (w, sql) in warnings.iter().zip(DECLINED) {
        assert_eq!(w["reason"], explain(sql));
    }
}

/// With no subscriber recording flush spans, a queued row keeps nothing of
/// its caller's span: linking costs a level check.
#[tokio::test(start_paused = true)]
async fn caller_span_is_kept_only_when_flush_spans_are_recorded() {
    use tracing::Instrument as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let info_only = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(Capture::default());
    for subscriber in [None, Some(info_only)] {
        let _guard = subscriber.map(tracing::subscriber::set_default);
        let h = H::new(1, config()).await;
        let hold = h.mem().hold_all();
        let span = tracing::info_span!("caller");
        let mut f: BoxFut<_> = Box::pin(h.submit(1).instrument(span));
        assert!(poll(&mut f).is_pending());
        assert!(
            h.q.queued(|p| p.caller.is_none())
                .into_iter()
                .all(|none| none)
        );
        drop(hold);
        h.drain().await;
        assert_ok_own(1, outcome(&mut f));
    }
}
