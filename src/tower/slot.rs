//! One queue slot reserved in `poll_ready` and handed to `call`: the
//! backpressure of both tower services.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::error::Error;

type Acquire =
    Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send + Sync>>;

enum State {
    /// Nothing reserved.
    Idle,
    /// Waiting for a slot to free up.
    Acquiring(Acquire),
    /// A slot is held for the next `call`.
    Reserved(OwnedSemaphorePermit),
    /// The queue was full and the pool fails fast: the next `call` fails
    /// with an overloaded error.
    Rejected,
}

/// What `call` gets.
pub(crate) enum Taken {
    /// The slot reserved by `poll_ready`.
    Reserved(OwnedSemaphorePermit),
    /// `poll_ready` found the queue full (fail-fast pool).
    Rejected,
    /// `poll_ready` was not called (or did not return `Ready`).
    NotReady,
}

/// A per-service-instance reservation of one queue slot, like
/// `tokio_util::sync::PollSemaphore` limited to one permit. Dropping it
/// (the service is dropped without calling) gives the slot back.
pub(crate) struct Slot {
    slots: Arc<Semaphore>,
    reject: bool,
    state: State,
}

impl Slot {
    /// `reject`: fail fast instead of waiting when the queue is full.
    pub(crate) fn new(slots: Arc<Semaphore>, reject: bool) -> Slot {
        Slot {
            slots,
            reject,
            state: State::Idle,
        }
    }

    /// A fresh reservation state on the same queue (for `Clone`).
    pub(crate) fn fresh(&self) -> Slot {
        Slot::new(self.slots.clone(), self.reject)
    }

    /// Ready once a slot is held (or, failing fast, once the queue was
    /// found full). An error means the queue is closed (the pool closed).
    pub(crate) fn poll_reserve(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        loop {
            match &mut self.state {
                State::Reserved(_) => return Poll::Ready(Ok(())),
                State::Idle | State::Rejected => match self.slots.clone().try_acquire_owned() {
                    Ok(permit) => self.state = State::Reserved(permit),
                    Err(TryAcquireError::Closed) => return Poll::Ready(Err(Error::pool_closed())),
                    Err(TryAcquireError::NoPermits) if self.reject => {
                        self.state = State::Rejected;
                        return Poll::Ready(Ok(()));
                    }
                    Err(TryAcquireError::NoPermits) => {
                        self.state = State::Acquiring(Box::pin(self.slots.clone().acquire_owned()));
                    }
                },
                State::Acquiring(acquire) => match acquire.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(permit)) => self.state = State::Reserved(permit),
                    Poll::Ready(Err(_)) => {
                        self.state = State::Idle;
                        return Poll::Ready(Err(Error::pool_closed()));
                    }
                },
            }
        }
    }

    /// Takes what `poll_ready` reserved, for `call`.
    pub(crate) fn take(&mut self) -> Taken {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Reserved(permit) => Taken::Reserved(permit),
            State::Rejected => Taken::Rejected,
            State::Acquiring(acquire) => {
                self.state = State::Acquiring(acquire);
                Taken::NotReady
            }
            State::Idle => Taken::NotReady,
        }
    }

    /// Tries to take a slot at once (`call` without `poll_ready`).
    pub(crate) fn try_now(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Idle => "idle",
            State::Acquiring(_) => "acquiring",
            State::Reserved(_) => "reserved",
            State::Rejected => "rejected",
        };
        f.debug_struct("Slot")
            .field("state", &state)
            .field("free", &self.slots.available_permits())
            .finish()
    }
}
