//! HTTP API: the router, its shared state and the handlers. The only module that knows HTTP.

pub mod error;
mod types;

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::{DefaultBodyLimit, MatchedPath, State, rejection::BytesRejection},
    http::{HeaderValue, Request, StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::json;
use tower_http::{
    catch_panic::CatchPanicLayer,
    trace::{DefaultOnFailure, TraceLayer},
};
use tracing::{Span, field::Empty};

use self::{
    error::{ApiError, item_error},
    types::{EmbedRequest, EmbedResponse, Item, TimingsMs},
};
use crate::{config::Settings, gpu, metrics::Metrics, pipeline::Pipeline, source, telemetry};

/// What every handler shares. The pipeline appears once the model is loaded and warmed up.
#[derive(Clone)]
pub struct AppState {
    settings: Arc<Settings>,
    pipeline: Arc<OnceLock<Arc<Pipeline>>>,
    draining: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    scrape: telemetry::Scrape,
}

impl AppState {
    pub fn new(settings: Arc<Settings>, metrics: Arc<Metrics>, scrape: telemetry::Scrape) -> Self {
        AppState { settings, pipeline: Arc::default(), draining: Arc::default(), metrics, scrape }
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
    let body_limit = transport_body_limit(&state.settings);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/embed", post(embed))
        .fallback(|uri: Uri| async move { ApiError::NoRoute(uri.path().to_string()) })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(CatchPanicLayer::new())
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(record_status)
                // 503s while loading or draining are expected; they are not errors in the log.
                .on_failure(DefaultOnFailure::new().level(tracing::Level::WARN)),
        )
        .with_state(state)
}

/// Probes and scrapes are not traced.
const UNTRACED: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// The request's span: a server span that continues the caller's W3C trace (`traceparent`).
/// Everything the request does happens inside it.
fn request_span(request: &Request<Body>) -> Span {
    let path = request.uri().path();
    if UNTRACED.contains(&path) {
        return Span::none();
    }
    let method = request.method().as_str();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str);
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        http.route = route,
        http.response.status_code = Empty,
        clipfn.images = Empty,
        clipfn.errors = Empty,
    );
    telemetry::continue_trace(&span, request.headers());
    span
}

fn record_status(response: &Response<Body>, _latency: Duration, span: &Span) {
    span.record("http.response.status_code", i64::from(response.status().as_u16()));
    if response.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}

async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.ready_pipeline() {
        Ok(pipeline) => {
            let model = pipeline.model();
            let mut body = json!({"status": "ready", "model": model, "in_flight_images": pipeline.in_flight()});
            if model.provider == "cuda" {
                // CUDA device 0 is the one the session uses (ort's default device id).
                body["gpu"] = match gpu::status(0) {
                    Ok(status) => json!(status),
                    Err(reason) => json!({ "error": reason }),
                };
            }
            Json(body).into_response()
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": e.to_string()}))).into_response(),
    }
}

/// Prometheus text exposition of every `clipfn_*` metric.
async fn metrics(State(state): State<AppState>) -> Response {
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], state.scrape.render()).into_response()
}

/// One info line per embed request, whatever its outcome: counts and time, never keys or bodies.
async fn embed(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let started = Instant::now();
    let outcome = embed_request(&state, body, started).await;
    let elapsed = started.elapsed();
    let total_ms = (elapsed.as_secs_f64() * 10_000.0).round() / 10.0;
    match outcome {
        Ok((response, images, errors)) => {
            state.metrics.request("ok", elapsed);
            tracing::info!(status = 200, images, errors, total_ms, "embed request");
            response
        }
        Err(e) => {
            let (status, code) = e.status_and_code();
            state.metrics.request(code, elapsed);
            tracing::info!(status = status.as_u16(), code, total_ms, "embed request refused");
            e.into_response()
        }
    }
}

/// The embed response, the number of photos and the number that failed.
async fn embed_request(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    started: Instant,
) -> Result<(Response, usize, usize), ApiError> {
    let images = parse_embed_request(body, &state.settings)?;
    let span = Span::current();
    span.record("clipfn.images", images.len() as i64);
    let pipeline = state.ready_pipeline()?;
    let deadline = tokio::time::Instant::now() + state.settings.request_timeout();
    let (results, timings) = pipeline.embed(&images, deadline).await?;

    let mut errors = 0;
    let data = images
        .iter()
        .zip(results)
        .enumerate()
        .map(|(index, (image, result))| match result {
            Ok(embedding) => {
                state.metrics.photo(None);
                Item { index, image: source::shown(image), embedding: Some(embedding), error: None }
            }
            Err(e) => {
                errors += 1;
                let error = item_error(&e);
                state.metrics.photo(Some(error.code));
                Item { index, image: source::shown(image), embedding: None, error: Some(error) }
            }
        })
        .collect();
    span.record("clipfn.errors", errors as i64);
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    let server_timing = timings_ms.server_timing();
    let model = pipeline.model();
    let mut response = Json(EmbedResponse { model: &model.id, dim: model.dim, data, timings_ms }).into_response();
    if let Ok(value) = HeaderValue::from_str(&server_timing) {
        response.headers_mut().insert("server-timing", value);
    }
    Ok((response, images.len(), errors))
}

/// The most any request body may be: requests with inline photos get the larger limit, and the
/// smaller one for keys-only requests is checked once the body is parsed.
fn transport_body_limit(settings: &Settings) -> usize {
    settings.max_body_bytes.max(settings.max_inline_body_bytes)
}

fn parse_embed_request(body: Result<Bytes, BytesRejection>, settings: &Settings) -> Result<Vec<String>, ApiError> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::BodyTooLarge(transport_body_limit(settings)),
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
    if body.len() > settings.max_body_bytes && !request.images.iter().any(|image| source::is_inline(image)) {
        return Err(ApiError::BodyTooLarge(settings.max_body_bytes));
    }
    Ok(request.images)
}
