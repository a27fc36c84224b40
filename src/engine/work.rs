//! What `close()` waits for: every call the pool accepted holds a [`Work`]
//! guard until it has its outcome, and so does every task that carries
//! work on (flushers, statements finishing for a caller that left).
//! [`Detached`] runs a statement in the caller's task and, if the caller's
//! future is dropped midway, finishes it in a spawned task instead of
//! cutting it off.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::task::{Context, Poll};

use tokio::sync::Notify;

use crate::error::Error;

/// Counts the work in progress and whether the pool is closing.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    closed: AtomicBool,
    active: AtomicUsize,
    /// Signalled when `active` drops to zero.
    idle: Notify,
}

impl Tracker {
    /// Admits a new call, or fails once `close()` has begun.
    ///
    /// The count goes up before the closed flag is read, and `close()` sets
    /// the flag before it reads the count (all sequentially consistent): a
    /// call that gets in is seen by `close()`, which then waits for it.
    pub(crate) fn enter(self: &Arc<Self>) -> Result<Work, Error> {
        let work = self.more();
        if self.closed.load(SeqCst) {
            return Err(Error::pool_closed());
        }
        Ok(work)
    }

    /// More work on behalf of work already admitted (a task it spawns).
    pub(crate) fn more(self: &Arc<Self>) -> Work {
        self.active.fetch_add(1, SeqCst);
        Work(self.clone())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(SeqCst)
    }

    /// Refuses new calls from now on.
    pub(crate) fn close(&self) {
        self.closed.store(true, SeqCst);
    }

    /// Work in progress right now.
    pub(crate) fn active(&self) -> usize {
        self.active.load(SeqCst)
    }

    /// Waits until no work is in progress.
    pub(crate) async fn drained(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.active.load(SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// One piece of work in progress; `close()` waits until all are dropped.
#[derive(Debug)]
pub(crate) struct Work(Arc<Tracker>);

impl Work {
    /// More work on behalf of this one.
    pub(crate) fn more(&self) -> Work {
        self.0.more()
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A statement's future, polled in the caller's task. Dropped before it
/// completes (the caller went away), the rest of it runs in a spawned task:
/// a statement on the wire is finished, its connection goes back to the
/// pool clean, the counters see its outcome, and `close()` waits for it
/// (the future carries a [`Work`]). Outside a tokio runtime it is dropped
/// instead (its connection, left marked busy, is then closed).
///
/// Boxed, so a caller's own future stays small however large the
/// statement's state machine is; the [`Work`] rides beside the box, so the
/// statement's future is moved once, into the box.
pub(crate) struct Detached<T: Send + 'static> {
    fut: Option<(BoxFuture<T>, Work)>,
}

impl<T: Send + 'static> Detached<T> {
    pub(crate) fn new(work: Work, fut: impl Future<Output = T> + Send + 'static) -> Self {
        Detached {
            fut: Some((Box::pin(fut), work)),
        }
    }
}

impl<T: Send + 'static> Future for Detached<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some((fut, _)) = self.fut.as_mut() else {
            panic!("Detached polled after it completed");
        };
        let out = std::task::ready!(fut.as_mut().poll(cx));
        self.fut = None;
        Poll::Ready(out)
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        if let Some((fut, work)) = self.fut.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _work = work;
                    fut.await
                });
            }
        }
    }
}
