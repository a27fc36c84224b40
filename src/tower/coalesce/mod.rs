//! [`CoalesceLayer`] / [`Coalesce`]: coalesce statements per SQL text into
//! batches for an inner service.
//!
//! `layer` builds the service, `service` queues each call's row and hands
//! back a `future`, which dispatches the queued rows of its SQL text as one
//! batch when the inner service is ready (`dispatch`); `queue` holds the rows
//! in between.

mod config;
mod dispatch;
pub(crate) mod future;
mod layer;
mod queue;
mod service;

use tower_service::Service;

pub use self::config::CoalesceConfig;
pub use self::layer::CoalesceLayer;
pub use self::service::Coalesce;
use super::{Batch, BoxError};

/// An inner service [`Coalesce`] can drive: it runs a [`Batch`] of rows and
/// answers one result per row, in order (for example
/// [`BatchExecutor`](crate::tower::BatchExecutor)). Implemented for every
/// such `tower::Service`.
pub trait BatchService<V>:
    Service<
        Batch<V>,
        Response = Vec<Result<Self::Row, Self::RowError>>,
        Future: Send + 'static,
        Error: Into<BoxError> + 'static,
    > + Clone
    + Send
    + 'static
{
    /// One row's result.
    type Row: Send + 'static;
    /// One row's error.
    type RowError: Into<BoxError> + 'static;
}

impl<S, V, O, E> BatchService<V> for S
where
    S: Service<Batch<V>, Response = Vec<Result<O, E>>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + 'static,
    O: Send + 'static,
    E: Into<BoxError> + 'static,
{
    type Row = O;
    type RowError = E;
}
