//! [`CoalesceLayer`]: the layer of [`Coalesce`].

use tower_layer::Layer;

use super::{Coalesce, CoalesceConfig};

/// Puts statement coalescing in front of a service that executes batches:
/// layer of [`Coalesce`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::time::Duration;
/// use batchpool::postgres::Pool;
/// use batchpool::tower::{BatchExecutor, CoalesceConfig, CoalesceLayer, Statement};
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// let pool = Pool::builder("host=127.0.0.1 user=postgres dbname=app").build()?;
/// let mut svc = ServiceBuilder::new()
///     .timeout(Duration::from_secs(5)) // per row
///     .layer(CoalesceLayer::new(CoalesceConfig::default().max_rows(500)))
///     .concurrency_limit(8) // batches in flight
///     .timeout(Duration::from_secs(2)) // per batch
///     .service(BatchExecutor::new(pool));
/// let stmt = Statement::new("INSERT INTO events (body) VALUES ($1)").bind("hi");
/// let outcome = svc.ready().await?.call(stmt).await?;
/// assert_eq!(outcome.rows_affected(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct CoalesceLayer {
    config: CoalesceConfig,
}

impl CoalesceLayer {
    /// Coalescing configured by `config`; see [`Coalesce`].
    pub fn new(config: CoalesceConfig) -> Self {
        CoalesceLayer { config }
    }
}

impl<S> Layer<S> for CoalesceLayer {
    type Service = Coalesce<S>;

    fn layer(&self, inner: S) -> Coalesce<S> {
        Coalesce::new(inner, self.config.clone())
    }
}
