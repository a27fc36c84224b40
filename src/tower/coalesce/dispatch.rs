//! Running one batch: the inner service is called with the rows taken from
//! the queue, in its own task, and each row's result goes back to its
//! caller.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::BatchService;
use super::queue::{Entry, RowReply};
use crate::error::{Error, Kind};
use crate::tower::{Batch, BoxError};

/// Calls the ready inner service with `entries` as one batch and runs it in
/// its own task, which sends each row its result.
pub(crate) fn dispatch<S: BatchService<V>, V: Send + 'static>(
    svc: &mut S,
    sql: &Arc<str>,
    entries: Vec<Entry>,
) {
    let mut rows = Vec::with_capacity(entries.len());
    let mut replies = Vec::with_capacity(entries.len());
    for entry in entries {
        match entry.row.downcast::<Vec<V>>() {
            Ok(row) => {
                rows.push(*row);
                replies.push(entry.reply);
            }
            Err(_) => {
                let e = Error::internal("row of another type");
                let _ = entry.reply.send(Err(e.into()));
            }
        }
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        let e = Error::new(
            Kind::Config,
            "batchpool::tower::Coalesce needs a tokio runtime to run batches",
        );
        for reply in replies {
            let _ = reply.send(Err(e.clone().into()));
        }
        return;
    };
    let fut = svc.call(Batch::new(sql.clone(), rows));
    runtime.spawn(fan_out(fut, replies));
}

/// Awaits one batch and sends each row its own result.
async fn fan_out<F, O, E, SE>(fut: F, replies: Vec<oneshot::Sender<RowReply>>)
where
    F: Future<Output = Result<Vec<Result<O, E>>, SE>>,
    O: Send + 'static,
    E: Into<BoxError>,
    SE: Into<BoxError>,
{
    let n = replies.len();
    let failed = |replies: Vec<oneshot::Sender<RowReply>>, e: Error| {
        for reply in replies {
            let _ = reply.send(Err(e.clone().into()));
        }
    };
    match fut.await {
        Ok(results) if results.len() == n => {
            for (reply, result) in replies.into_iter().zip(results) {
                let result = match result {
                    Ok(o) => Ok(Box::new(o) as Box<dyn std::any::Any + Send>),
                    Err(e) => Err(e.into()),
                };
                let _ = reply.send(result);
            }
        }
        Ok(results) => failed(
            replies,
            Error::new(
                Kind::OutcomeUnknown,
                format!(
                    "the inner service answered {} results for a batch of {n} rows",
                    results.len()
                ),
            ),
        ),
        Err(e) => failed(
            replies,
            match e.into().downcast::<Error>() {
                Ok(e) => *e,
                Err(e) => Error::with_source(
                    Kind::OutcomeUnknown,
                    format!(
                        "the inner service failed for a batch of {n} rows; whether they were written is not known"
                    ),
                    e,
                ),
            },
        ),
    }
}
