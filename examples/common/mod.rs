//! What the two example services share, whatever the web framework: the
//! `events` table, the JSON shapes, the two database calls behind the
//! routes, and how a batchpool error becomes an HTTP status. Each example
//! includes it (`#[path = "common/mod.rs"] mod common;`) and adds only its
//! framework's glue: routes, extractors, and turning [`ApiError`] into a
//! response.

use batchpool::postgres::Pool;
use serde::{Deserialize, Serialize};

/// The table the service writes.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS events (
    id bigserial PRIMARY KEY,
    key text NOT NULL UNIQUE,
    data text NOT NULL
)";

/// What a service's `main` starts from: a pool of 8 on `PG_URL` (default:
/// the local server as `postgres`) with the table created, and the address
/// to listen on, `BIND` (default `127.0.0.1:3000`).
pub async fn start() -> Result<(Pool, String), Box<dyn std::error::Error>> {
    let url = std::env::var("PG_URL")
        .unwrap_or_else(|_| "postgresql://postgres@127.0.0.1:5432/postgres".into());
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let pool = Pool::builder(&url).max_size(8).build()?;
    pool.execute(SCHEMA, &[]).await?;
    Ok((pool, bind))
}

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

/// `POST /events`: inserts one row and returns its id. Concurrent calls are
/// coalesced into one multi-row INSERT; each still gets its own id (from
/// its own `RETURNING` row) or its own error.
pub async fn create_event(pool: &Pool, event: &NewEvent) -> Result<Created, ApiError> {
    let out = pool
        .execute(
            "INSERT INTO events (key, data) VALUES ($1, $2) RETURNING id",
            &[&event.key, &event.data],
        )
        .await?;
    let row = out
        .returned()
        .ok_or(ApiError::Internal("the insert returned no row"))?;
    Ok(Created { id: row.get(0) })
}

/// `GET /events/{id}`: reads one row back.
pub async fn read_event(pool: &Pool, id: i64) -> Result<Event, ApiError> {
    let row = pool
        .query_opt("SELECT id, key, data FROM events WHERE id = $1", &[&id])
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Event {
        id: row.get(0),
        key: row.get(1),
        data: row.get(2),
    })
}

/// A handler error, rendered as a status and a JSON `{"error": ...}` body
/// (see [`ApiError::parts`]).
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

impl ApiError {
    /// The HTTP status code and the message of the `{"error": ...}` body.
    pub fn parts(&self) -> (u16, String) {
        match self {
            ApiError::Db(e) => status_of(e),
            ApiError::NotFound => (404, "no such event".into()),
            ApiError::Internal(m) => (500, (*m).into()),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.parts().1)
    }
}

/// The HTTP status code and message for a batchpool error: a duplicate key
/// (unique violation) → 409 Conflict, a full queue or an unavailable pool →
/// 503 Service Unavailable, a write whose outcome is unknown (connection
/// lost after sending) → 500 saying so, bad input (wrong parameters, a
/// value the server rejects: SQLSTATE class 22, or another integrity rule of
/// class 23) → 400 / 422 with the server's message, anything else → 500 with
/// the server's message (its `Display` carries the SQLSTATE, message and
/// detail).
pub fn status_of(e: &batchpool::Error) -> (u16, String) {
    if e.code() == Some("23505") {
        (409, "an event with this key already exists".into())
    } else if e.is_overloaded() || e.is_timeout() || e.is_closed() {
        (
            503,
            format!("the database is busy or unavailable, retry later: {e}"),
        )
    } else if e.is_outcome_unknown() {
        (
            500,
            "outcome unknown: the connection was lost after the write was sent; \
             it may or may not have been stored, check before retrying"
                .into(),
        )
    } else if e.is_params() || e.code().is_some_and(|c| c.starts_with("22")) {
        // The server's own message ("invalid byte sequence...") is the useful part.
        let detail = e
            .as_db_error()
            .map_or_else(|| e.to_string(), |db| db.message().to_string());
        (400, format!("invalid input: {detail}"))
    } else if e.code().is_some_and(|c| c.starts_with("23")) {
        // A check, not-null or foreign-key rule: the request's data broke it.
        (422, format!("rejected by the database: {e}"))
    } else {
        (500, format!("database error: {e}"))
    }
}
