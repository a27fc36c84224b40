//! Requests written together: tokio-postgres queues a request on the
//! connection the first time its future is polled, and the connection task
//! writes everything queued in one go.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

pub(crate) type Step<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Polls every future, always in the given order, until all are done, and
/// returns their outputs in that order.
///
/// The first poll polls each future once, in order, without yielding in
/// between: with tokio-postgres every request is queued on the connection,
/// in order, before its task can run and flush, so they leave in one write.
pub(crate) async fn in_order<T>(steps: Vec<Step<'_, T>>) -> Vec<T> {
    enum Slot<'a, T> {
        Running(Step<'a, T>),
        Done(T),
    }
    let mut slots: Vec<Slot<'_, T>> = steps.into_iter().map(Slot::Running).collect();
    std::future::poll_fn(|cx| {
        let mut all_done = true;
        for slot in slots.iter_mut() {
            if let Slot::Running(fut) = slot {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(out) => *slot = Slot::Done(out),
                    Poll::Pending => all_done = false,
                }
            }
        }
        if all_done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    slots
        .into_iter()
        .filter_map(|slot| match slot {
            Slot::Done(out) => Some(out),
            Slot::Running(_) => None,
        })
        .collect()
}
