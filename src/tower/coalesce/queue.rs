//! The rows waiting in a [`Coalesce`](super::Coalesce), per SQL text, and
//! the ticket that tells each caller's future when its row left the queue.

use std::any::{Any, TypeId};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Context;

use futures_util::task::AtomicWaker;
use tokio::sync::{OwnedSemaphorePermit, oneshot};

use crate::sync::lock;
use crate::tower::BoxError;

/// One row's reply: its type-erased result (`O`, boxed) or its error.
pub(crate) type RowReply = Result<Box<dyn Any + Send>, BoxError>;

/// Queues are keyed by SQL text and by the row type (a service may accept
/// several).
pub(crate) type Key = (TypeId, Arc<str>);

/// Whether a row has left the queue, and who to tell when it does.
#[derive(Default)]
pub(crate) struct Ticket {
    taken: AtomicBool,
    waker: AtomicWaker,
}

impl Ticket {
    pub(crate) fn is_taken(&self) -> bool {
        self.taken.load(Ordering::Acquire)
    }

    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.waker.register(cx.waker());
    }
}

/// A queued row.
pub(crate) struct Entry {
    pub(crate) ticket: Arc<Ticket>,
    /// The row's parameters, a boxed `Vec<V>`.
    pub(crate) row: Box<dyn Any + Send>,
    pub(crate) reply: oneshot::Sender<RowReply>,
    /// The queue slot, freed when the row leaves the queue.
    pub(crate) _slot: OwnedSemaphorePermit,
}

/// The rows of one SQL text, in arrival order.
#[derive(Default)]
struct Queue {
    order: VecDeque<u64>,
    rows: HashMap<u64, Entry>,
}

/// State shared by all clones of one [`Coalesce`](super::Coalesce).
pub(crate) struct Shared {
    queues: Mutex<HashMap<Key, Queue>>,
    max_rows: usize,
    pub(crate) capacity: usize,
    next_id: AtomicU64,
}

impl Shared {
    pub(crate) fn new(max_rows: usize, capacity: usize) -> Shared {
        Shared {
            queues: Mutex::new(HashMap::new()),
            max_rows,
            capacity,
            next_id: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Queue>> {
        // Critical sections are a few map operations: a panic cannot leave
        // them half done, so poisoning is ignored.
        lock(&self.queues)
    }

    pub(crate) fn push(&self, key: &Key, entry: Entry) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut queues = self.lock();
        let q = queues.entry(key.clone()).or_default();
        q.order.push_back(id);
        q.rows.insert(id, entry);
        id
    }

    pub(crate) fn queued(&self) -> usize {
        self.lock().values().map(|q| q.rows.len()).sum()
    }

    /// Removes a row that is still queued (its caller went away or failed);
    /// `false` if a batch already took it.
    pub(crate) fn remove(&self, key: &Key, id: u64) -> bool {
        let mut queues = self.lock();
        let Some(q) = queues.get_mut(key) else {
            return false;
        };
        let removed = q.rows.remove(&id).is_some();
        if q.rows.is_empty() {
            queues.remove(key);
        } else if q.order.len() > 2 * q.rows.len() + 64 {
            // Ids of removed rows are skipped lazily; compact now and then.
            let rows = &q.rows;
            q.order.retain(|id| rows.contains_key(id));
        }
        removed
    }

    /// Takes the next batch of `key`: up to `max_rows` rows in arrival order
    /// (rows whose caller is gone are dropped), and wakes their callers.
    pub(crate) fn take(&self, key: &Key) -> Vec<Entry> {
        let mut taken = Vec::new();
        {
            let mut queues = self.lock();
            let Some(q) = queues.get_mut(key) else {
                return taken;
            };
            while taken.len() < self.max_rows {
                let Some(id) = q.order.pop_front() else { break };
                let Some(entry) = q.rows.remove(&id) else {
                    continue;
                };
                entry.ticket.taken.store(true, Ordering::Release);
                if !entry.reply.is_closed() {
                    taken.push(entry);
                }
            }
            if q.rows.is_empty() {
                queues.remove(key);
            }
        }
        for entry in &taken {
            entry.ticket.waker.wake();
        }
        taken
    }
}
