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

/// What a service's `main` starts from: logging to stderr, a pool of 8 on
/// `PG_URL` (default: the local server as `postgres`) with the table
/// created, and the address to listen on, `BIND` (default
/// `127.0.0.1:3000`).
pub async fn start() -> Result<(Pool, String), Box<dyn std::error::Error>> {
    // Where database errors are told in full (see `From<batchpool::Error>`).
    let _ = tracing_subscriber::fmt().try_init();
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
    /// Logs the error in full (the server's message, SQLSTATE, detail): the
    /// HTTP answer carries only what [`status_of`] lets through.
    fn from(e: batchpool::Error) -> Self {
        if status_of(&e).0 >= 500 {
            tracing::error!(error = %e, outcome_unknown = e.is_outcome_unknown(), "database call failed");
        } else {
            tracing::info!(error = %e, "database call refused the request");
        }
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

/// The HTTP status code and message for a batchpool error. The order
/// matters: whether the write may have happened is decided before anything
/// else, so an answer never invites a retry of a write that may have been
/// stored.
///
/// * A write whose outcome is unknown (its answer did not come within the
///   statement deadline, or the connection was lost after it was sent: it
///   may have committed) → 500, saying the outcome is unknown and must be
///   checked (`GET` it, or POST the same key again: the unique key turns a
///   stored one into a 409) before anything is retried. Never 503: that
///   says "retry later", which for a table without an idempotency key
///   would store the row twice.
/// * A duplicate key (unique violation) → 409 Conflict.
/// * Nothing was done and sending it again is safe ([`is_retryable`]: a
///   full queue, no connection in time, the server cancelling it, a
///   deadlock) or the pool is shutting down → 503 Service Unavailable.
/// * Bad input (wrong parameters, a value the server rejects: SQLSTATE
///   class 22) → 400; another integrity rule (class 23) → 422.
/// * Anything else → 500.
///
/// The body names the class of failure and, for 400 / 422, the SQLSTATE:
/// never the server's message, which can hold table and constraint names
/// or values (it goes to the log instead, see `From<batchpool::Error>`).
///
/// [`is_retryable`]: batchpool::Error::is_retryable
pub fn status_of(e: &batchpool::Error) -> (u16, String) {
    if e.is_outcome_unknown() {
        (
            500,
            "outcome unknown: the write was sent and its answer did not arrive (deadline \
             passed or connection lost); it may or may not have been stored: check before \
             retrying"
                .into(),
        )
    } else if e.code() == Some("23505") {
        (409, "an event with this key already exists".into())
    } else if e.is_retryable() || e.is_closed() {
        // Certainly not stored (nothing sent, or the server rolled it back).
        (
            503,
            "the database is busy or unavailable; nothing was stored, retry later".into(),
        )
    } else if e.is_params() {
        (400, "invalid input".into())
    } else if let Some(code) = e.code().filter(|c| c.starts_with("22")) {
        (400, format!("invalid input (SQLSTATE {code})"))
    } else if let Some(code) = e.code().filter(|c| c.starts_with("23")) {
        // A check, not-null or foreign-key rule: the request's data broke it.
        (422, format!("rejected by the database (SQLSTATE {code})"))
    } else {
        (500, "internal error".into())
    }
}
