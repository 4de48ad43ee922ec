//! The probes and the scrape: `GET /healthz` (can this process serve), `GET /readyz` (may it be
//! sent work now) and `GET /metrics` (Prometheus text). Untraced and not logged per request.

use axum::{
    Json,
    extract::State,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::json;

use super::{
    AppState,
    error::ApiError,
    schema::{Health, NotReady, Ready},
};
use crate::observe::gpu;

/// 200 while the process can serve: also while the model loads, but not once the model worker
/// has died or its model fails the warm-up input (the platform should then restart the instance).
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "probes",
    summary = "Whether the process can serve",
    responses(
        (status = 200, description = "The process can serve (also while the model loads)", body = Health),
        (status = 503, description = "Restart the instance: its model worker died or its model fails", body = Health),
    )
)]
pub(super) async fn healthz(State(state): State<AppState>) -> Response {
    match state.service.get().map(|service| service.health()) {
        Some(Err(why)) => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unhealthy", "reason": why.to_string()})))
                .into_response()
        }
        _ => Json(json!({"status": "ok"})).into_response(),
    }
}

/// 200 with what runs once the model is loaded and warmed up; 503 `{"status": code, "reason"}`
/// while loading, while draining and when unhealthy.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "probes",
    summary = "Whether to send work, and what runs",
    responses(
        (status = 200, description = "Send work: the model is loaded and warmed up", body = Ready),
        (status = 503, description = "Send no work: loading, draining or unhealthy", body = NotReady),
    )
)]
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    // Ready only while every worker is healthy: one lost device stops the load balancer sending.
    let ready = state.ready_service().and_then(|service| service.health().map(|()| service).map_err(ApiError::from));
    match ready {
        Ok(service) => {
            let model = service.pipeline.model();
            let text = service.text.as_ref();
            let mut body = json!({
                "status": "ready", "model": model, "in_flight_images": service.pipeline.in_flight(),
                "family": service.family, "text_model": text.map(|t| t.model()),
                "label_sets": text.map(|t| t.label_set_names()).unwrap_or_default(),
                "heads": service.pipeline.heads(),
                "faces": service.pipeline.faces().map(|(detector, recognizer)| {
                    let faces = &state.settings.faces;
                    let distance = recognizer.max_distance(faces);
                    json!({
                        "detector": detector, "recognizer": recognizer, "max_distance": distance.value,
                        "max_distance_from": distance.from, "min_faces": faces.face_min_faces,
                        "min_size": faces.face_min_size,
                    })
                }),
                "ocr": service.pipeline.ocr(),
                "objects": service.pipeline.objects(),
                "workers": service.workers(),
                "shapes": service.pipeline.shapes().iter()
                    .map(|(kind, counts)| (kind.as_str().to_string(), json!(counts))).collect::<serde_json::Map<_, _>>(),
            });
            if model.provider.is_cuda() {
                let settings = &state.settings.model;
                body["cuda"] = json!({
                    "conv_search": settings.cuda_conv_search, "conv_max_workspace": settings.cuda_conv_max_workspace,
                    "arena_extend": settings.cuda_arena_extend, "tf32": settings.cuda_tf32,
                });
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
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "probes",
    summary = "The metrics, as Prometheus text",
    responses((status = 200, description = "The `clipfn_*` metrics", content_type = "text/plain", body = String))
)]
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], state.scrape.render()).into_response()
}
