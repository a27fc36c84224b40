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

pub use self::config::CoalesceConfig;
pub use self::layer::CoalesceLayer;
pub use self::service::Coalesce;
