//! [`CoalesceConfig`]: how [`Coalesce`](super::Coalesce) batches rows.

use crate::config::{QueueFull, setters};

/// How [`Coalesce`](super::Coalesce) batches rows: the size of a batch and
/// the bound on rows waiting. (A pool's own coalescing is configured by
/// [`BatchConfig`](crate::BatchConfig); this layer batches for any inner
/// service and only by row count, so it has its own, smaller config.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CoalesceConfig {
    /// Most rows in one batch. Default 1000.
    pub max_rows: usize,
    /// Most rows waiting in the layer's queues (all SQL texts together)
    /// before callers wait (`poll_ready` is `Pending`) or are rejected.
    /// Default 65536.
    pub queue_capacity: usize,
    /// Behaviour when the queue is full. Default [`QueueFull::Wait`].
    pub queue_full: QueueFull,
}

impl Default for CoalesceConfig {
    fn default() -> Self {
        CoalesceConfig {
            max_rows: 1000,
            queue_capacity: 65536,
            queue_full: QueueFull::Wait,
        }
    }
}

impl CoalesceConfig {
    setters! {
        /// Sets [`max_rows`](CoalesceConfig::max_rows) (0 counts as 1).
        max_rows: (usize),
        /// Sets [`queue_capacity`](CoalesceConfig::queue_capacity) (0 counts as 1).
        queue_capacity: (usize),
        /// Sets [`queue_full`](CoalesceConfig::queue_full).
        queue_full: (QueueFull),
    }
}
