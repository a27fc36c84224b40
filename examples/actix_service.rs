//! The events service of `axum_service.rs` on actix-web, with
//! `web::Data<Pool>`: `POST /events` inserts one row and returns its id,
//! `GET /events/{id}` reads it back.
//!
//! ```text
//! PG_URL=postgresql://postgres@127.0.0.1:5432/postgres BIND=127.0.0.1:3000 \
//!     cargo run --example actix_service
//! ```
//!
//! Errors map to statuses as in the axum example: duplicate key → 409,
//! overloaded/unavailable → 503, outcome unknown → 500 saying so, bad
//! parameters → 400, anything else → 500.

use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, HttpServer, ResponseError, web};
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
    /// Unique per event: a second POST with the same key is a 409.
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

/// Registers the routes; the app provides `web::Data<Pool>`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/events", web::post().to(create_event))
        .route("/events/{id}", web::get().to(read_event));
}

async fn create_event(
    pool: web::Data<Pool>,
    event: web::Json<NewEvent>,
) -> Result<HttpResponse, ApiError> {
    let out = pool
        .execute(
            "INSERT INTO events (key, data) VALUES ($1, $2) RETURNING id",
            &[&event.key, &event.data],
        )
        .await?;
    let row = out
        .returned()
        .ok_or(ApiError::Internal("the insert returned no row"))?;
    Ok(HttpResponse::Created().json(Created { id: row.get(0) }))
}

async fn read_event(pool: web::Data<Pool>, id: web::Path<i64>) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner();
    let row = pool
        .query_opt("SELECT id, key, data FROM events WHERE id = $1", &[&id])
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(Event {
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

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.parts().1)
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

impl ApiError {
    fn parts(&self) -> (StatusCode, String) {
        match self {
            ApiError::Db(e) => status_of(e),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "no such event".into()),
            ApiError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, (*m).into()),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.parts().0
    }

    fn error_response(&self) -> HttpResponse {
        let (status, message) = self.parts();
        HttpResponse::build(status).json(serde_json::json!({ "error": message }))
    }
}

#[allow(dead_code)] // unused where tests include this file for `configure`
#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("PG_URL")
        .unwrap_or_else(|_| "postgresql://postgres@127.0.0.1:5432/postgres".into());
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let pool = Pool::builder(&url).max_size(8).build()?;
    pool.execute(SCHEMA, &[]).await?;
    let data = web::Data::new(pool.clone());
    println!("listening on http://{bind}");
    HttpServer::new(move || App::new().app_data(data.clone()).configure(configure))
        .bind(&bind)?
        .run()
        .await?;
    pool.close().await; // flushes queued rows before exiting
    Ok(())
}
