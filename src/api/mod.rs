//! HTTP API: the router, its shared state and the handlers. The only module that knows HTTP.

pub mod error;
mod types;

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State, rejection::BytesRejection},
    http::{HeaderValue, StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::json;
use tower_http::{catch_panic::CatchPanicLayer, trace::TraceLayer};

use self::{
    error::{ApiError, item_error},
    types::{EmbedRequest, EmbedResponse, Item, TimingsMs},
};
use crate::{config::Settings, pipeline::Pipeline};

/// What every handler shares. The pipeline appears once the model is loaded and warmed up.
#[derive(Clone)]
pub struct AppState {
    settings: Arc<Settings>,
    pipeline: Arc<OnceLock<Arc<Pipeline>>>,
    draining: Arc<AtomicBool>,
}

impl AppState {
    pub fn new(settings: Arc<Settings>) -> Self {
        AppState { settings, pipeline: Arc::default(), draining: Arc::default() }
    }

    /// Marks the service ready; called once, after warm-up.
    pub fn set_ready(&self, pipeline: Arc<Pipeline>) {
        let _ = self.pipeline.set(pipeline);
    }

    /// From now on /readyz says 503 so that load balancers stop sending; accepted work finishes.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    fn ready_pipeline(&self) -> Result<&Arc<Pipeline>, ApiError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::Draining);
        }
        self.pipeline.get().ok_or(ApiError::NotReady)
    }
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.settings.max_body_bytes;
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/embed", post(embed))
        .fallback(|uri: Uri| async move { ApiError::NoRoute(uri.path().to_string()) })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(CatchPanicLayer::new())
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.ready_pipeline() {
        Ok(pipeline) => {
            Json(json!({"status": "ready", "model": pipeline.model(), "in_flight_images": pipeline.in_flight()}))
                .into_response()
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": e.to_string()}))).into_response(),
    }
}

async fn embed(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let started = Instant::now();
    let images = parse_embed_request(body, &state.settings)?;
    let pipeline = state.ready_pipeline()?;
    let deadline = tokio::time::Instant::now() + state.settings.request_timeout();
    let (results, timings) = pipeline.embed(&images, deadline).await?;

    let mut errors = 0;
    let data = images
        .iter()
        .zip(results)
        .enumerate()
        .map(|(index, (image, result))| match result {
            Ok(embedding) => Item { index, image, embedding: Some(embedding), error: None },
            Err(e) => {
                errors += 1;
                Item { index, image, embedding: None, error: Some(item_error(&e)) }
            }
        })
        .collect();
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    tracing::info!(images = images.len(), errors, total_ms = timings_ms.total, "embedded");
    let server_timing = timings_ms.server_timing();
    let model = pipeline.model();
    let mut response = Json(EmbedResponse { model: &model.id, dim: model.dim, data, timings_ms }).into_response();
    if let Ok(value) = HeaderValue::from_str(&server_timing) {
        response.headers_mut().insert("server-timing", value);
    }
    Ok(response)
}

fn parse_embed_request(body: Result<Bytes, BytesRejection>, settings: &Settings) -> Result<Vec<String>, ApiError> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::BodyTooLarge(settings.max_body_bytes),
        _ => ApiError::BadRequest(rejection.body_text()),
    })?;
    let request: EmbedRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("body must be JSON like {{\"images\": [\"key\", ...]}}: {e}")))?;
    let count = request.images.len();
    if count == 0 || count > settings.max_images {
        return Err(ApiError::BadRequest(format!(
            "images must hold 1 to {} references, got {count}",
            settings.max_images
        )));
    }
    Ok(request.images)
}
