//! HTTP API: the only module that knows HTTP. This file holds the router and the state every
//! handler shares; each endpoint has its own file, and they share the rest:
//!
//! - `embed` (`/v1/embed`, photos or texts), `embeddings` (`/v1/embeddings`, OpenAI's shape),
//!   `classify` (`/v1/classify`) and `probes` (`/healthz`, `/readyz`, `/metrics`): a handler each;
//! - `respond`: how every endpoint answers, written once: the request's log line and metrics,
//!   and `cancelled` when the client goes away first;
//! - `request`: the body, its limits and the request's deadline; `photos`: answering for photos;
//!   `album`: `/v1/analyze`'s groupings and best shots; `people`: its known and album people;
//! - `error`: every error to its status, in one place; `types`: the request and response bodies.
//! - `immich` (`/`, `/ping`, `/predict`): Immich's machine-learning protocol on the same service;
//! - `openapi` (`/openapi.json`): the OpenAPI document, from `types` and the handlers'
//!   `#[utoipa::path]`; `schema`: what it says that no type derives; `exclusive`: the rules
//!   between fields (`images` or `texts`, ...) it states as `oneOf`.
//!
//! Adding an endpoint is a file here with its handler (its work run through `respond::respond`,
//! its `#[utoipa::path]` listed in `openapi`), its bodies in `types`, and one `.route` line below.

mod album;
mod analyze;
mod classify;
mod embed;
mod embeddings;
mod error;
mod exclusive;
mod immich;
mod labels;
mod openapi;
mod people;
mod pets;
mod photos;
mod probes;
mod request;
mod respond;
mod schema;
mod subjects;
mod types;

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{DefaultBodyLimit, MatchedPath, State},
    http::{Method, Request, Uri},
    response::{IntoResponse, Response},
    routing::{MethodRouter, get, post},
};
use tokio_util::sync::CancellationToken;
use tower_http::{
    catch_panic::CatchPanicLayer,
    trace::{DefaultOnFailure, TraceLayer},
};
use tracing::{Span, field::Empty};

use self::error::ApiError;
pub use self::openapi::document as openapi_document;
use crate::{
    observe::{metrics::Metrics, telemetry},
    service::Service,
    settings::Settings,
    text::{Text, TextError},
};

/// What every handler shares. The service appears once the model is loaded and warmed up. What
/// the handlers read is visible in `api` only; the hosts build it, mark it ready and drain it.
#[derive(Clone)]
pub struct AppState {
    pub(in crate::api) settings: Arc<Settings>,
    pub(in crate::api) service: Arc<OnceLock<Arc<Service>>>,
    draining: Arc<AtomicBool>,
    /// Fired when a drain runs out of time: requests still in flight answer `shutting_down`.
    pub(in crate::api) give_up: CancellationToken,
    pub(in crate::api) metrics: Arc<Metrics>,
    pub(in crate::api) scrape: telemetry::Scrape,
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

    /// The service, while it may take work: loaded, its image tower's worker healthy and not
    /// draining. Another worker lost fails only its towers' parts of the answers meanwhile.
    pub(in crate::api) fn ready_service(&self) -> Result<&Arc<Service>, ApiError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::Draining);
        }
        let service = self.service.get().ok_or(ApiError::NotReady)?;
        service.image_health()?;
        Ok(service)
    }

    /// The text side of a ready service, or 404 when there is no text tower.
    pub(in crate::api) fn ready_text(&self) -> Result<&Text, ApiError> {
        Ok(self.ready_service()?.text.as_ref().ok_or(TextError::NotConfigured)?)
    }
}

pub fn router(state: AppState) -> Router {
    let body_limit = request::transport_body_limit(&state.settings);
    let documents = Arc::new(openapi::Documents::new(&state.settings));
    Router::new()
        .route("/healthz", only("GET", get(probes::healthz)))
        .route("/readyz", only("GET", get(probes::readyz)))
        .route("/metrics", only("GET", get(probes::metrics)))
        .route("/v1/embed", only("POST", post(embed::embed)))
        .route("/v1/embeddings", only("POST", post(embeddings::embeddings)))
        .route("/v1/classify", only("POST", post(classify::classify)))
        .route("/v1/analyze", only("POST", post(analyze::analyze)))
        // Immich's machine-learning protocol (src/api/immich/).
        .route("/", only("GET", get(immich::root)))
        .route("/ping", only("GET", get(immich::ping)))
        .route("/predict", only("POST", post(immich::predict)))
        .route(
            "/openapi.json",
            only("GET", get(move |State(state): State<AppState>| openapi::openapi_json(documents.current(&state)))),
        )
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
const UNTRACED: &[&str] = &["/healthz", "/readyz", "/metrics", "/ping"];

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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use opentelemetry::metrics::MeterProvider as _;
    use serde_json::Value;
    use tower::ServiceExt;

    use axum::http::StatusCode;

    use super::*;
    use crate::{
        pipeline::Pipeline,
        source::Source,
        worker::{OptionalTowers, Worker, fake::*},
    };

    async fn call(app: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
        let request = Request::builder().method(method).uri(uri).body(Body::from(body.to_string())).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// The whole router over a real store (holding `a.png`), decoder and workers, around
    /// stand-in towers.
    fn app<O: crate::model::Tower<Io = crate::model::ObjectViews>>(
        store: &std::path::Path,
        model: FakeModel,
        towers: OptionalTowers<O>,
    ) -> Router {
        image::RgbImage::from_pixel(16, 16, image::Rgb([90, 120, 30])).save(store.join("a.png")).unwrap();
        let vars = [("CLIPFN_MODEL", "unused".to_string()), ("CLIPFN_STORE", format!("file://{}", store.display()))];
        let settings = Arc::new(Settings::from_vars(vars.map(|(k, v)| (k.to_string(), v))).unwrap());
        let meters = opentelemetry_sdk::metrics::SdkMeterProvider::builder().build();
        let metrics = Arc::new(Metrics::new(meters.meter("test")));
        let worker = Arc::new(Worker::start(model, NO_TEXT, towers, Duration::from_millis(1), Arc::clone(&metrics)));
        let source = Source::new(&settings.sources, &settings.limits).unwrap();
        let pipeline = Pipeline::new(&settings.limits, source, Arc::clone(&worker), Arc::clone(&metrics));
        let state = AppState::new(settings, metrics, telemetry::Scrape::default());
        state.set_ready(Arc::new(Service::assemble(pipeline, None, worker)));
        router(state)
    }

    const EMBED: &str = r#"{"images": ["a.png"]}"#;

    /// A stand-in model whose device can be lost (which cannot happen here for real).
    #[tokio::test]
    async fn the_probes_report_what_the_model_worker_knows() {
        let store = tempfile::tempdir().unwrap();
        let (model, device) = FakeModel::new(4, 8);
        let app = app(store.path(), model, OptionalTowers::default());
        let embed = EMBED;

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

    /// Two workers: the image tower on the CPU, a stand-in object detector on "CUDA" whose every
    /// run holds its worker for seconds, as a long GPU run would (no GPU here). With one worker,
    /// every photo would wait behind that run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embeds_answer_while_another_devices_worker_runs_a_long_job() {
        const HOLD: Duration = Duration::from_secs(3);
        let store = tempfile::tempdir().unwrap();
        let (objects, device) = slow_object_detector(HOLD);
        let towers = OptionalTowers { heads: None, faces: None, ocr: None, objects: Some(objects) };
        let app = app(store.path(), FakeModel::new(4, 8).0, towers);
        let (status, ready) = call(&app, "GET", "/readyz", "").await;
        assert_eq!(status, StatusCode::OK);
        let workers: Vec<(&str, &str)> = ready["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| (w["device"].as_str().unwrap(), w["towers"][0].as_str().unwrap()))
            .collect();
        assert_eq!(workers, [("cuda", "object_detector"), ("cpu", "image")], "{ready}");

        let started = std::time::Instant::now();
        let analyze = {
            let app = app.clone();
            tokio::spawn(
                async move { call(&app, "POST", "/v1/analyze", r#"{"images": ["a.png"], "objects": true}"#).await },
            )
        };
        // Time for the photo's fetch and decode (milliseconds): its view is then on the detector.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut answered = 0;
        for _ in 0..5 {
            let (status, body) = call(&app, "POST", "/v1/embed", EMBED).await;
            assert_eq!(status, StatusCode::OK);
            assert!(body["data"][0]["embedding"].is_array(), "{body}");
            answered += 1;
        }
        let embeds_took = started.elapsed();
        assert_eq!(answered, 5);
        assert!(!analyze.is_finished(), "the long job ended before the embeds did ({embeds_took:?})");
        let (status, body) = analyze.await.unwrap();
        assert!(started.elapsed() >= HOLD, "the long job held its worker for {HOLD:?}");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["data"][0]["objects"], serde_json::json!([]), "{body}");

        // The "CUDA" device is lost: its towers fail, /healthz asks for a new instance and /readyz
        // says which worker; the CPU worker keeps answering meanwhile.
        device.store(DEVICE_LOST, Ordering::SeqCst);
        let (status, body) = call(&app, "POST", "/v1/analyze", r#"{"images": ["a.png"], "objects": true}"#).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body["data"][0]["objects_error"].is_object(), "{body}");
        let (status, health) = call(&app, "GET", "/healthz", "").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let (status, ready) = call(&app, "GET", "/readyz", "").await;
        assert_eq!((status, ready["status"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("unhealthy")));
        for reason in [&health["reason"], &ready["reason"]] {
            assert!(
                reason.as_str().unwrap().contains("the cuda worker (object_detector) can no longer serve"),
                "{reason}"
            );
        }
        let (status, body) = call(&app, "POST", "/v1/embed", EMBED).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body["data"][0]["embedding"].is_array(), "{body}");
    }
}
