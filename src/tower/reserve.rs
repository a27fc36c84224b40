//! [`Reservation`]: one queue slot reserved in `poll_ready` and handed to
//! `call` — the backpressure of both tower services.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_util::sync::PollSemaphore;

use crate::error::Error;

/// What `poll_ready` left for the next `call`.
enum State {
    /// Nothing reserved.
    Idle,
    /// A slot is held for the next `call`.
    Reserved(OwnedSemaphorePermit),
    /// The queue was full and the service fails fast: the next `call` fails
    /// with an overloaded error.
    Rejected,
}

/// What `call` gets.
pub(crate) enum Taken {
    /// The slot reserved by `poll_ready`.
    Reserved(OwnedSemaphorePermit),
    /// `poll_ready` found the queue full (fail-fast configuration).
    Rejected,
    /// `poll_ready` was not called (or did not return `Ready`).
    NotReady,
}

/// A per-service-instance reservation of one queue slot. Dropping it (the
/// service is dropped without calling) gives the slot back; a clone starts
/// with nothing reserved.
pub(crate) struct Reservation {
    slots: PollSemaphore,
    reject: bool,
    state: State,
}

impl Reservation {
    /// `reject`: fail fast instead of waiting when the queue is full.
    pub(crate) fn new(slots: Arc<Semaphore>, reject: bool) -> Reservation {
        Reservation {
            slots: PollSemaphore::new(slots),
            reject,
            state: State::Idle,
        }
    }

    /// Ready once a slot is held (or, failing fast, once the queue was found
    /// full). An error means the queue is closed (the pool closed).
    pub(crate) fn poll_reserve(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if let State::Reserved(_) = self.state {
            return Poll::Ready(Ok(()));
        }
        if self.reject {
            self.state = match self.slots.clone_inner().try_acquire_owned() {
                Ok(permit) => State::Reserved(permit),
                Err(TryAcquireError::NoPermits) => State::Rejected,
                Err(TryAcquireError::Closed) => return Poll::Ready(Err(Error::pool_closed())),
            };
            return Poll::Ready(Ok(()));
        }
        match ready!(self.slots.poll_acquire(cx)) {
            Some(permit) => {
                self.state = State::Reserved(permit);
                Poll::Ready(Ok(()))
            }
            None => Poll::Ready(Err(Error::pool_closed())),
        }
    }

    /// Takes what `poll_ready` reserved, for `call`.
    pub(crate) fn take(&mut self) -> Taken {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Reserved(permit) => Taken::Reserved(permit),
            State::Rejected => Taken::Rejected,
            State::Idle => Taken::NotReady,
        }
    }

    /// Tries to take a slot at once (`call` without `poll_ready`).
    pub(crate) fn try_now(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone_inner().try_acquire_owned().ok()
    }
}

impl Clone for Reservation {
    fn clone(&self) -> Self {
        Reservation {
            slots: self.slots.clone(),
            reject: self.reject,
            state: State::Idle,
        }
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Idle => "idle",
            State::Reserved(_) => "reserved",
            State::Rejected => "rejected",
        };
        f.debug_struct("Reservation")
            .field("state", &state)
            .field("free", &self.slots.available_permits())
            .finish()
    }
}
