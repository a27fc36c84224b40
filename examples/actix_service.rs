//! The events service of `axum_service.rs` on actix-web, with
//! `web::Data<Pool>`: `POST /events` inserts one row and returns its id,
//! `GET /events/{id}` reads it back.
//!
//! ```text
//! PG_URL=postgresql://postgres@127.0.0.1:5432/postgres BIND=127.0.0.1:3000 \
//!     cargo run --example actix_service
//! ```
//!
//! Errors map to statuses as in the axum example: outcome unknown → 500
//! saying so (never 503), duplicate key → 409, nothing done and safe to
//! retry → 503, bad input → 400 / 422, anything else → 500; the server's
//! message is logged, not sent. The table, the JSON shapes, the
//! database calls and that mapping are `common/mod.rs`, shared with
//! `axum_service.rs`.

#[path = "common/mod.rs"]
#[allow(clippy::duplicate_mod)] // tests/it/http_service.rs includes both examples
mod common;

use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, HttpServer, ResponseError, web};
use batchpool::postgres::Pool;

use common::{ApiError, NewEvent};

/// Registers the routes; the app provides `web::Data<Pool>`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/events", web::post().to(create_event))
        .route("/events/{id}", web::get().to(read_event));
}

async fn create_event(
    pool: web::Data<Pool>,
    event: web::Json<NewEvent>,
) -> Result<HttpResponse, ApiError> {
    let created = common::create_event(&pool, &event).await?;
    Ok(HttpResponse::Created().json(created))
}

async fn read_event(pool: web::Data<Pool>, id: web::Path<i64>) -> Result<HttpResponse, ApiError> {
    let event = common::read_event(&pool, id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(event))
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.parts().0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let message = self.parts().1;
        HttpResponse::build(self.status_code()).json(serde_json::json!({ "error": message }))
    }
}

#[allow(dead_code)] // unused where tests include this file for `configure`
#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (pool, bind) = common::start().await?;
    let data = web::Data::new(pool.clone());
    println!("listening on http://{bind}");
    HttpServer::new(move || App::new().app_data(data.clone()).configure(configure))
        .bind(&bind)?
        .run()
        .await?;
    pool.close().await; // flushes queued rows before exiting
    Ok(())
}
