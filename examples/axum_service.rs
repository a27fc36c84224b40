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
//! Errors map to statuses: a duplicate `key` (unique violation) → 409, a
//! full queue or an unavailable pool → 503, a write whose outcome is unknown
//! (connection lost after sending) → 500 saying so, bad parameters → 400,
//! anything else → 500.

use axum::Router;
use axum::extract::{Json, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use batchpool::postgres::Pool;
use serde::{Deserialize, Serialize};

/// The table the service writes.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS events (
    id bigserial PRIMARY KEY,
    key text NOT NULL UNIQUE,
    data text NOT NULL
)";

/// `POST /events` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewEvent {
    /// Unique per event (an idempotency key): a second POST with the same
    /// key is a 409.
    pub key: String,
    /// Free text.
    pub data: String,
}

/// `POST /events` answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct Created {
    /// The new row's id.
    pub id: i64,
}

/// `GET /events/{id}` answer.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Event {
    /// Row id.
    pub id: i64,
    /// Its key.
    pub key: String,
    /// Its data.
    pub data: String,
}

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
    let out = pool
        .execute(
            "INSERT INTO events (key, data) VALUES ($1, $2) RETURNING id",
            &[&event.key, &event.data],
        )
        .await?;
    let row = out
        .returned()
        .ok_or(ApiError::Internal("the insert returned no row"))?;
    Ok((StatusCode::CREATED, Json(Created { id: row.get(0) })))
}

async fn read_event(
    State(pool): State<Pool>,
    Path(id): Path<i64>,
) -> Result<Json<Event>, ApiError> {
    let row = pool
        .query_opt("SELECT id, key, data FROM events WHERE id = $1", &[&id])
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(Event {
        id: row.get(0),
        key: row.get(1),
        data: row.get(2),
    }))
}

/// A handler error, rendered as a status and a JSON `{"error": ...}` body.
#[derive(Debug)]
pub enum ApiError {
    /// A batchpool error, mapped by [`status_of`].
    Db(batchpool::Error),
    /// No such event.
    NotFound,
    /// A bug or an unexpected database answer.
    Internal(&'static str),
}

impl From<batchpool::Error> for ApiError {
    fn from(e: batchpool::Error) -> Self {
        ApiError::Db(e)
    }
}

/// The HTTP status and message for a batchpool error.
pub fn status_of(e: &batchpool::Error) -> (StatusCode, String) {
    if e.code() == Some("23505") {
        (
            StatusCode::CONFLICT,
            "an event with this key already exists".into(),
        )
    } else if e.is_overloaded() || e.is_timeout() || e.is_closed() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the database is busy or unavailable, retry later: {e}"),
        )
    } else if e.is_outcome_unknown() {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "outcome unknown: the connection was lost after the write was sent; \
             it may or may not have been stored, check before retrying"
                .into(),
        )
    } else if e.is_params() || e.code().is_some_and(|c| c.starts_with("22")) {
        // The server's own message ("invalid byte sequence...") is the useful part.
        let detail = e
            .as_db_error()
            .map_or_else(|| e.to_string(), |db| db.message().to_string());
        (StatusCode::BAD_REQUEST, format!("invalid input: {detail}"))
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("database error: {e}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            ApiError::Db(e) => status_of(&e),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "no such event".into()),
            ApiError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, m.into()),
        };
        (status, Json(serde_json::json!({ "error": message }))).into_response()
    }
}

#[allow(dead_code)] // unused where tests include this file for `app`
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("PG_URL")
        .unwrap_or_else(|_| "postgresql://postgres@127.0.0.1:5432/postgres".into());
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let pool = Pool::builder(&url).max_size(8).build()?;
    pool.execute(SCHEMA, &[]).await?;
    let listener = tokio::net::TcpListener::bind(&bind).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app(pool.clone()))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    pool.close().await; // flushes queued rows before exiting
    Ok(())
}
