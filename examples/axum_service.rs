//! A small axum service on batchpool: `POST /events` inserts one row and
//! returns its id, `GET /events/{id}` reads it back. Concurrent POSTs are
//! coalesced into multi-row INSERTs; each request still gets its own id or
//! its own error.
//!
//! ```text
//! PG_URL=postgresql://postgres@127.0.0.1:5432/postgres BIND=127.0.0.1:3000 \
//!     cargo run --example axum_service
//! curl -s -XPOST localhost:3000/events -H 'content-type: application/json' \
//!     -d '{"key":"order-1","data":"hello"}'          # 201 {"id":1}
//! curl -s localhost:3000/events/1                     # 200 {"id":1,"key":"order-1","data":"hello"}
//! ```
//!
//! Built with the `metrics` feature (`cargo run --features metrics --example
//! axum_service`), it also serves the pool's metrics at `GET /metrics` in
//! Prometheus' text format (`batchpool_rows_total`, ...; see
//! `batchpool::metrics`).
//!
//! Errors map to statuses: a write whose outcome is unknown (its answer
//! missed the deadline or the connection was lost after sending; it may be
//! stored) → 500 saying so and never 503, a duplicate `key` (unique
//! violation) → 409, nothing done and safe to retry (full queue, no
//! connection in time, server cancelled it) → 503, bad input → 400 / 422,
//! anything else → 500. Bodies never carry the server's message: it is
//! logged. The table, the JSON shapes, the database calls and
//! that mapping are `common/mod.rs`, shared with `actix_service.rs`.

#[path = "common/mod.rs"]
#[allow(clippy::duplicate_mod)] // tests/it/http_service.rs includes both examples
mod common;

use axum::Router;
use axum::extract::{Json, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use batchpool::postgres::Pool;

pub use common::SCHEMA; // for tests/it/http_service.rs
use common::{ApiError, Created, Event, NewEvent};

/// The router: `State<Pool>` is the batchpool pool as it is (cheap clone).
pub fn app(pool: Pool) -> Router {
    Router::new()
        .route("/events", post(create_event))
        .route("/events/{id}", get(read_event))
        .with_state(pool)
}

async fn create_event(
    State(pool): State<Pool>,
    Json(event): Json<NewEvent>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let created = common::create_event(&pool, &event).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn read_event(
    State(pool): State<Pool>,
    Path(id): Path<i64>,
) -> Result<Json<Event>, ApiError> {
    Ok(Json(common::read_event(&pool, id).await?))
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = self.parts();
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(serde_json::json!({ "error": message }))).into_response()
    }
}

#[allow(dead_code)] // unused where tests include this file for `app`
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder goes in before the pool is built: a pool registers its
    // metrics when it is built.
    #[cfg(feature = "metrics")]
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let (pool, bind) = common::start().await?;
    let listener = tokio::net::TcpListener::bind(&bind).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let router = app(pool.clone());
    #[cfg(feature = "metrics")]
    let router = router.route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { metrics.render() }
        }),
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    pool.close().await; // flushes queued rows before exiting
    Ok(())
}
