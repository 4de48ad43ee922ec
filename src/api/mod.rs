//! HTTP API: the router, its shared state and the handlers. The only module that knows HTTP.

pub mod error;
mod text;
mod types;

use std::{
    borrow::Cow,
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
    http::{HeaderValue, Method, Request, StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::{MethodRouter, get, post},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower_http::{
    catch_panic::CatchPanicLayer,
    trace::{DefaultOnFailure, TraceLayer},
};
use tracing::{Span, field::Empty};

use self::{
    error::{ApiError, ErrorBody},
    types::{EmbedRequest, EmbedResponse, Item, TimingsMs},
};
use crate::{
    observe::{
        gpu,
        metrics::{Metrics, Outcome},
        telemetry,
    },
    pipeline::{ItemError, Timings},
    service::Service,
    settings::Settings,
    source,
};

/// What every handler shares. The service appears once the model is loaded and warmed up.
#[derive(Clone)]
pub struct AppState {
    settings: Arc<Settings>,
    service: Arc<OnceLock<Arc<Service>>>,
    draining: Arc<AtomicBool>,
    /// Fired when a drain runs out of time: requests still in flight answer `shutting_down`.
    give_up: CancellationToken,
    metrics: Arc<Metrics>,
    scrape: telemetry::Scrape,
}

impl AppState {
    pub fn new(settings: Arc<Settings>, metrics: Arc<Metrics>, scrape: telemetry::Scrape) -> Self {
        AppState {
            settings,
            service: Arc::default(),
            draining: Arc::default(),
            give_up: CancellationToken::new(),
            metrics,
            scrape,
        }
    }

    /// Marks the service ready; called once, after warm-up.
    pub fn set_ready(&self, service: Arc<Service>) {
        let _ = self.service.set(service);
    }

    /// From now on /readyz says 503 so that load balancers stop sending; accepted work finishes.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// The drain is out of time: every request still in flight answers 503 `shutting_down` now,
    /// so that each accepted request gets an answer before the process exits.
    pub fn give_up_in_flight(&self) {
        self.give_up.cancel();
    }

    fn ready_service(&self) -> Result<&Arc<Service>, ApiError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::Draining);
        }
        let service = self.service.get().ok_or(ApiError::NotReady)?;
        service.health()?;
        Ok(service)
    }
}

pub fn router(state: AppState) -> Router {
    let body_limit = transport_body_limit(&state.settings);
    Router::new()
        .route("/healthz", only("GET", get(healthz)))
        .route("/readyz", only("GET", get(readyz)))
        .route("/metrics", only("GET", get(metrics)))
        .route("/v1/embed", only("POST", post(embed)))
        .route("/v1/embeddings", only("POST", post(text::embeddings)))
        .route("/v1/classify", only("POST", post(text::classify)))
        .fallback(|uri: Uri| async move { ApiError::NoRoute(uri.path().to_string()) })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(CatchPanicLayer::custom(|_: Box<dyn std::any::Any + Send>| ApiError::Internal.into_response()))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(record_status)
                // 503s while loading or draining are expected; they are not errors in the log.
                .on_failure(DefaultOnFailure::new().level(tracing::Level::WARN)),
        )
        .with_state(state)
}

/// Other methods get 405 with the JSON error body, like every other error.
fn only(allowed: &'static str, route: MethodRouter<AppState>) -> MethodRouter<AppState> {
    route.fallback(move |method: Method| async move { ApiError::MethodNotAllowed(method.to_string(), allowed) })
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

/// 200 while the process can serve: also while the model loads, but not once the model worker
/// has died or its model fails the warm-up input (the platform should then restart the instance).
async fn healthz(State(state): State<AppState>) -> Response {
    match state.service.get().map(|service| service.health()) {
        Some(Err(why)) => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unhealthy", "reason": why.to_string()})))
                .into_response()
        }
        _ => Json(json!({"status": "ok"})).into_response(),
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.ready_service() {
        Ok(service) => {
            let model = service.pipeline.model();
            let text = service.text.as_ref();
            let mut body = json!({
                "status": "ready", "model": model, "in_flight_images": service.pipeline.in_flight(),
                "family": service.family, "text_model": text.map(|t| t.model()),
                "label_sets": text.map(|t| t.label_set_names()).unwrap_or_default(),
            });
            if model.provider.is_cuda() {
                // CUDA device 0 is the one the session uses (ort's default device id).
                body["gpu"] = match gpu::status(0) {
                    Ok(status) => json!(status),
                    Err(reason) => json!({ "error": reason }),
                };
            }
            Json(body).into_response()
        }
        Err(e) => {
            let (status, code) = e.status_and_code();
            (status, Json(json!({"status": code, "reason": e.to_string()}))).into_response()
        }
    }
}

/// Prometheus text exposition of every `clipfn_*` metric.
async fn metrics(State(state): State<AppState>) -> Response {
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], state.scrape.render()).into_response()
}

/// `/v1/embed`: photos or texts.
async fn embed(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let started = Instant::now();
    let mut cancelled = Cancelled::new(&state, "embed", started);
    let outcome = embed_request(&state, body, started).await;
    cancelled.armed = false;
    answer(&state, "embed", started, outcome)
}

/// What an answered request carried, for its log line.
#[derive(Default)]
struct Counts {
    images: usize,
    texts: usize,
    /// Photos that got an error.
    errors: usize,
}

type Answered = Result<(Response, Counts), ApiError>;

/// One info line per request, whatever its outcome: counts and time, never keys, texts or bodies.
fn answer(state: &AppState, endpoint: &'static str, started: Instant, outcome: Answered) -> Response {
    let elapsed = started.elapsed();
    let total_ms = millis(elapsed);
    match outcome {
        Ok((response, Counts { images, texts, errors })) => {
            state.metrics.request(Outcome::Ok, elapsed);
            tracing::info!(status = 200, images, texts, errors, total_ms, "{endpoint} request");
            response
        }
        Err(e) => {
            let (status, code) = e.status_and_code();
            state.metrics.request(Outcome::Refused(code), elapsed);
            tracing::info!(status = status.as_u16(), code, total_ms, "{endpoint} request refused");
            e.into_response()
        }
    }
}

async fn embed_request(state: &AppState, body: Result<Bytes, BytesRejection>, started: Instant) -> Answered {
    let (request, size): (EmbedRequest, _) =
        json_body(body, &state.settings, r#"{"images": ["key", ...]} or {"texts": ["...", ...]}"#)?;
    check_body_size(size, request.images.as_deref().unwrap_or_default(), &state.settings)?;
    match (request.images, request.texts) {
        (Some(images), None) => embed_images(state, images, started).await,
        (None, Some(texts)) => text::embed_texts(state, texts).await,
        (Some(_), Some(_)) => Err(ApiError::BadRequest("give either images or texts, not both".into())),
        (None, None) => Err(ApiError::BadRequest(r#"body must hold "images" or "texts""#.into())),
    }
}

/// The embed response for photos.
async fn embed_images(state: &AppState, images: Vec<String>, started: Instant) -> Answered {
    let images = check_images(images, &state.settings)?;
    let service = state.ready_service()?;
    let deadline = tokio::time::Instant::now() + state.settings.server.request_timeout();
    let (results, timings) = photo_results(state, service, &images, deadline).await?;
    let errors = results.iter().filter(|r| r.is_err()).count();
    let data = per_photo(&images, results, |index, image, result| match result {
        Ok(embedding) => Item { index, image, embedding: Some(embedding), error: None },
        Err(error) => Item { index, image, embedding: None, error: Some(error) },
    });
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    let model = service.pipeline.model();
    let response = with_server_timing(
        EmbedResponse { model: &model.id, dim: model.dim, data, timings_ms: &timings_ms },
        &timings_ms,
    );
    Ok((response, Counts { images: images.len(), errors, ..Counts::default() }))
}

fn millis(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Logs and counts (`cancelled`) a request whose client went away before its answer: axum then
/// drops the handler's future, and with it the photos' and texts' futures, which withdraws their
/// fetches and their places in the model's queues.
struct Cancelled<'a> {
    metrics: &'a Metrics,
    endpoint: &'static str,
    started: Instant,
    span: Span,
    armed: bool,
}

impl<'a> Cancelled<'a> {
    fn new(state: &'a AppState, endpoint: &'static str, started: Instant) -> Self {
        Cancelled { metrics: &state.metrics, endpoint, started, span: Span::current(), armed: true }
    }
}

impl Drop for Cancelled<'_> {
    fn drop(&mut self) {
        if self.armed {
            let elapsed = self.started.elapsed();
            self.metrics.request(Outcome::Cancelled, elapsed);
            let total_ms = millis(elapsed);
            self.span.in_scope(|| {
                tracing::info!(code = "cancelled", total_ms, "{} request cancelled by the client", self.endpoint)
            });
        }
    }
}

/// Every photo's embedding or its error (each counted in the metrics), and the stage timings.
async fn photo_results(
    state: &AppState,
    service: &Service,
    images: &[String],
    deadline: tokio::time::Instant,
) -> Result<(Vec<Result<Vec<f32>, ErrorBody>>, Timings), ApiError> {
    let span = Span::current();
    span.record("clipfn.images", images.len() as i64);
    let (results, timings) = tokio::select! {
        done = service.pipeline.embed(images, deadline) => done?,
        () = state.give_up.cancelled() => return Err(ApiError::Draining),
    };
    let results: Vec<_> = results
        .into_iter()
        .zip(images)
        .enumerate()
        .map(|(index, (result, image))| {
            let result = result.map_err(|e| photo_error(index, image, &e));
            state.metrics.photo(result.as_ref().err().map(|e| e.code));
            result
        })
        .collect();
    span.record("clipfn.errors", results.iter().filter(|r| r.is_err()).count() as i64);
    Ok((results, timings))
}

/// A photo's error for the client. The detail goes to the log line (with the trace id), not to
/// the client; the reference itself stays out of the log. `not_found` and `deadline_exceeded` have
/// no detail beyond their code.
fn photo_error(index: usize, image: &str, e: &ItemError) -> ErrorBody {
    let shown = source::shown(image);
    let (code, message) = e.code_and_message(&shown);
    if !code.is_self_explanatory() {
        let mut detail = e.to_string();
        for reference in [image, &*shown].into_iter().filter(|r| !r.is_empty()) {
            detail = detail.replace(reference, "<reference>");
        }
        tracing::warn!(index, code = code.as_str(), error = %detail, "photo failed");
    }
    ErrorBody { code: code.as_str(), message }
}

/// One answer per photo, in order, from its index, its reference as shown and its result.
fn per_photo<'a, T>(
    images: &'a [String],
    results: Vec<Result<Vec<f32>, ErrorBody>>,
    answer: impl Fn(usize, Cow<'a, str>, Result<Vec<f32>, ErrorBody>) -> T,
) -> Vec<T> {
    images
        .iter()
        .zip(results)
        .enumerate()
        .map(|(index, (image, result))| answer(index, source::shown(image), result))
        .collect()
}

/// `body` with its stage timings also in a `Server-Timing` header, for browser and proxy tooling.
fn with_server_timing(body: impl serde::Serialize, timings_ms: &TimingsMs) -> Response {
    let mut response = Json(body).into_response();
    if let Ok(value) = HeaderValue::from_str(&timings_ms.server_timing()) {
        response.headers_mut().insert("server-timing", value);
    }
    response
}

/// The most any request body may be: requests with inline photos get the larger limit, and the
/// smaller one for the rest is checked once the body is parsed (`check_body_size`).
fn transport_body_limit(settings: &Settings) -> usize {
    settings.server.max_body_bytes.max(settings.server.max_inline_body_bytes)
}

/// The body as JSON of type `T`, and its size; `example` shows the expected shape in the error.
fn json_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    settings: &Settings,
    example: &str,
) -> Result<(T, usize), ApiError> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::BodyTooLarge(transport_body_limit(settings)),
        _ => ApiError::BadRequest(rejection.body_text()),
    })?;
    let parsed = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("body must be JSON like {example}: {e}")))?;
    Ok((parsed, body.len()))
}

/// Bodies over CLIPFN_MAX_BODY_BYTES are for requests with inline photos only.
fn check_body_size(size: usize, images: &[String], settings: &Settings) -> Result<(), ApiError> {
    if size > settings.server.max_body_bytes && !images.iter().any(|image| source::is_inline(image)) {
        return Err(ApiError::BodyTooLarge(settings.server.max_body_bytes));
    }
    Ok(())
}

fn check_images(images: Vec<String>, settings: &Settings) -> Result<Vec<String>, ApiError> {
    let count = images.len();
    if count == 0 || count > settings.limits.max_images {
        return Err(ApiError::BadRequest(format!(
            "images must hold 1 to {} references, got {count}",
            settings.limits.max_images
        )));
    }
    Ok(images)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use opentelemetry::metrics::MeterProvider as _;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;
    use crate::{
        pipeline::Pipeline,
        source::Source,
        worker::{Batcher, fake::*},
    };

    async fn call(app: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
        let request = Request::builder().method(method).uri(uri).body(Body::from(body.to_string())).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// The whole router over a real store, decoder and batcher, with a stand-in model whose
    /// device can be lost (which cannot happen here for real).
    #[tokio::test]
    async fn the_probes_report_what_the_model_worker_knows() {
        let store = tempfile::tempdir().unwrap();
        image::RgbImage::from_pixel(16, 16, image::Rgb([90, 120, 30])).save(store.path().join("a.png")).unwrap();
        let vars =
            [("CLIPFN_MODEL", "unused".to_string()), ("CLIPFN_STORE", format!("file://{}", store.path().display()))];
        let settings = Arc::new(Settings::from_vars(vars.map(|(k, v)| (k.to_string(), v))).unwrap());
        let meters = opentelemetry_sdk::metrics::SdkMeterProvider::builder().build();
        let metrics = Arc::new(Metrics::new(meters.meter("test")));
        let (model, device) = FakeModel::new(4, 8);
        let batcher = Arc::new(Batcher::start(model, None, Duration::from_millis(1), Arc::clone(&metrics)));
        let source = Source::new(&settings.sources, &settings.limits).unwrap();
        let pipeline = Pipeline::new(&settings.limits, source, Arc::clone(&batcher), Arc::clone(&metrics));
        let state = AppState::new(settings, metrics, telemetry::Scrape::default());
        state.set_ready(Arc::new(Service::assemble(pipeline, None, batcher)));
        let app = router(state);
        let embed = r#"{"images": ["a.png"]}"#;

        let (status, body) = call(&app, "POST", "/v1/embed", embed).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body["data"][0]["embedding"].is_array(), "{body}");
        assert_eq!(call(&app, "GET", "/healthz", "").await.0, StatusCode::OK);

        device.store(DEVICE_LOST, Ordering::SeqCst);
        let (status, body) = call(&app, "POST", "/v1/embed", embed).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["data"][0]["error"]["code"], "inference_failed", "{body}");
        let (status, health) = call(&app, "GET", "/healthz", "").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(health["reason"].as_str().unwrap().contains("warm-up input"), "{health}");
        let (status, ready) = call(&app, "GET", "/readyz", "").await;
        assert_eq!((status, ready["status"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("unhealthy")));
        let (status, refused) = call(&app, "POST", "/v1/embed", embed).await;
        assert_eq!((status, refused["error"]["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("unhealthy")));
    }
}
