//! [`BatchFuture`], the response future of
//! [`BatchExecutor`](super::BatchExecutor).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project::pin_project;

use crate::tower::{BatchResult, BoxFuture};

/// Response future of [`BatchExecutor`](crate::tower::BatchExecutor): one
/// result per row.
#[pin_project]
pub struct BatchFuture<O> {
    #[pin]
    fut: BoxFuture<'static, BatchResult<O>>,
}

impl<O> BatchFuture<O> {
    pub(crate) fn new(fut: BoxFuture<'static, BatchResult<O>>) -> Self {
        BatchFuture { fut }
    }
}

impl<O> Future for BatchFuture<O> {
    type Output = BatchResult<O>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().fut.poll(cx)
    }
}

impl<O> fmt::Debug for BatchFuture<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchFuture").finish_non_exhaustive()
    }
}
