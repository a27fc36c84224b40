//! The requests: one [`Statement`] with owned parameters, and a [`Batch`]
//! of rows of one SQL text.

use std::sync::Arc;

#[cfg(feature = "postgres")]
pub use crate::postgres::PgValue;

/// One statement with owned parameters: the request of [`PoolService`](crate::tower::PoolService) and
/// [`Coalesce`](crate::tower::Coalesce).
///
/// `V` is the pool's bind value type ([`PgValue`] for PostgreSQL).
///
/// ```
/// # #[cfg(feature = "postgres")] {
/// use batchpool::tower::{PgValue, Statement};
///
/// let stmt: Statement<PgValue> = Statement::new("INSERT INTO t (a, b) VALUES ($1, $2)")
///     .bind(7i32)
///     .bind("seven".to_string());
/// assert_eq!(stmt.params().len(), 2);
/// # }
/// ```
#[derive(Debug)]
pub struct Statement<V> {
    sql: Arc<str>,
    params: Vec<V>,
}

impl<V> Statement<V> {
    /// A statement without parameters yet; add them with
    /// [`bind`](Statement::bind).
    pub fn new(sql: impl Into<Arc<str>>) -> Self {
        Statement {
            sql: sql.into(),
            params: Vec::new(),
        }
    }

    /// A statement with its parameters.
    pub fn with_params(sql: impl Into<Arc<str>>, params: Vec<V>) -> Self {
        Statement {
            sql: sql.into(),
            params,
        }
    }

    /// Appends one parameter (`$1`, `$2`... in order).
    pub fn bind<T: IntoValue<V>>(mut self, value: T) -> Self {
        self.params.push(value.into_value());
        self
    }

    /// The SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[V] {
        &self.params
    }

    /// The SQL text and the parameters.
    pub fn into_parts(self) -> (Arc<str>, Vec<V>) {
        (self.sql, self.params)
    }
}

/// A value [`Statement::bind`] accepts for bind value type `V`: for
/// PostgreSQL ([`PgValue`]) any `ToSql + Send + Sync + 'static` value.
pub trait IntoValue<V> {
    /// Converts into the pool's bind value type.
    fn into_value(self) -> V;
}

#[cfg(feature = "postgres")]
impl<T> IntoValue<PgValue> for T
where
    T: tokio_postgres::types::ToSql + Send + Sync + 'static,
{
    fn into_value(self) -> PgValue {
        PgValue::new(self)
    }
}

/// Rows of one SQL text coalesced by [`Coalesce`](crate::tower::Coalesce): the request of its inner
/// service, which answers one result per row, in order.
///
/// The inner service must run a batch so that each row's result is its own
/// (for example [`BatchExecutor`](crate::tower::BatchExecutor), which uses the pool's `execute_many`).
#[derive(Debug)]
pub struct Batch<V> {
    sql: Arc<str>,
    rows: Vec<Vec<V>>,
}

impl<V> Batch<V> {
    /// A batch of rows (each row's parameters) for one SQL text.
    pub fn new(sql: impl Into<Arc<str>>, rows: Vec<Vec<V>>) -> Self {
        Batch {
            sql: sql.into(),
            rows,
        }
    }

    /// The SQL text every row runs with.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Each row's parameters, in order.
    pub fn rows(&self) -> &[Vec<V>] {
        &self.rows
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The SQL text and the rows.
    pub fn into_parts(self) -> (Arc<str>, Vec<Vec<V>>) {
        (self.sql, self.rows)
    }
}

#[cfg(feature = "mysql")]
impl<T: Into<mysql_async::Value>> IntoValue<mysql_async::Value> for T {
    fn into_value(self) -> mysql_async::Value {
        self.into()
    }
}
