//! [`StatementFuture`], the response future of
//! [`PoolService`](super::PoolService).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project::pin_project;

use crate::error::Error;
use crate::tower::BoxFuture;

/// Response future of [`PoolService`](crate::tower::PoolService): the
/// caller's own outcome.
#[pin_project]
pub struct StatementFuture<O> {
    #[pin]
    state: State<O>,
}

#[pin_project(project = StateProj)]
enum State<O> {
    Failed(Option<Error>),
    Running(#[pin] BoxFuture<'static, Result<O, Error>>),
}

impl<O> StatementFuture<O> {
    pub(crate) fn failed(error: Error) -> Self {
        StatementFuture {
            state: State::Failed(Some(error)),
        }
    }

    pub(crate) fn running(fut: BoxFuture<'static, Result<O, Error>>) -> Self {
        StatementFuture {
            state: State::Running(fut),
        }
    }
}

impl<O> Future for StatementFuture<O> {
    type Output = Result<O, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Failed(error) => Poll::Ready(Err(error
                .take()
                .unwrap_or_else(crate::tower::polled_after_completion))),
            StateProj::Running(fut) => fut.poll(cx),
        }
    }
}

impl<O> fmt::Debug for StatementFuture<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatementFuture").finish_non_exhaustive()
    }
}
