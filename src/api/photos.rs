//! Answering for photos, shared by the endpoints that take them (`/v1/embed`, `/v1/classify`,
//! `/v1/analyze`, `/v1/embeddings`): every photo through the pipeline, each photo's error as the
//! client sees it and as the log records it, and the stage timings in a header. One answer per
//! photo, in input order, is `subjects`' job.

use axum::{
    Json,
    http::HeaderValue,
    response::{IntoResponse, Response},
};
use tracing::Span;

use super::{AppState, error::ApiError, error::ErrorBody, types::TimingsMs};
use crate::{
    pipeline::{ItemError, Signals, Timings, Wants},
    service::Service,
    source,
};

/// A photo's embedding (and pixel signals, when asked for), or its error as the client sees it.
pub(super) type PhotoResult = Result<Signals, ErrorBody>;

/// Every photo's embedding (and what else `wants` asks for) or its error (each counted in the
/// metrics), and the stage timings.
pub(super) async fn photo_results(
    state: &AppState,
    service: &Service,
    images: &[String],
    deadline: tokio::time::Instant,
    wants: Wants,
) -> Result<(Vec<PhotoResult>, Timings), ApiError> {
    let span = Span::current();
    span.record("clipfn.images", images.len() as i64);
    let (results, timings) = tokio::select! {
        done = service.pipeline.embed(images, deadline, wants) => done?,
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
pub(super) fn photo_error(index: usize, image: &str, e: &ItemError) -> ErrorBody {
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

/// `body` with its stage timings also in a `Server-Timing` header, for browser and proxy tooling.
pub(super) fn with_server_timing(body: impl serde::Serialize, timings_ms: &TimingsMs) -> Response {
    let mut response = Json(body).into_response();
    if let Ok(value) = HeaderValue::from_str(&timings_ms.server_timing()) {
        response.headers_mut().insert("server-timing", value);
    }
    response
}
