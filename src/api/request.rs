//! What every endpoint checks of its request before any work: the body as JSON within its size
//! limit, the photo and text lists within theirs, and the deadline the work runs under.

use axum::{body::Bytes, extract::rejection::BytesRejection, http::StatusCode};
use serde_json::Value;

use super::error::ApiError;
use crate::{settings::Settings, source};

/// A request's body as axum gives it: the bytes, or why they could not be read (too large).
pub(super) type RequestBody = Result<Bytes, BytesRejection>;

/// The most any request body may be: requests with inline photos get the larger limit, and the
/// smaller one for the rest is checked once the body is parsed (`check_body_size`).
pub(super) fn transport_body_limit(settings: &Settings) -> usize {
    settings.server.max_body_bytes.max(settings.server.max_inline_body_bytes)
}

/// The body as JSON of type `T`, and its size; `example` shows the expected shape in the error.
pub(super) fn json_body<T: serde::de::DeserializeOwned>(
    body: RequestBody,
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
pub(super) fn check_body_size(size: usize, images: &[String], settings: &Settings) -> Result<(), ApiError> {
    if size > settings.server.max_body_bytes && !images.iter().any(|image| source::is_inline(image)) {
        return Err(ApiError::BodyTooLarge(settings.server.max_body_bytes));
    }
    Ok(())
}

/// 1 to CLIPFN_MAX_IMAGES photo references.
pub(super) fn check_images(images: Vec<String>, settings: &Settings) -> Result<Vec<String>, ApiError> {
    let count = images.len();
    if count == 0 || count > settings.limits.max_images {
        return Err(ApiError::BadRequest(format!(
            "images must hold 1 to {} references, got {count}",
            settings.limits.max_images
        )));
    }
    Ok(images)
}

/// A JSON list of 1 to CLIPFN_MAX_TEXTS strings of at most CLIPFN_MAX_TEXT_CHARS characters.
pub(super) fn string_list(value: Value, field: &str, settings: &Settings) -> Result<Vec<String>, ApiError> {
    let bad = |message: String| ApiError::BadRequest(message);
    let Value::Array(items) = value else {
        return Err(bad(format!("{field} must be a list of strings")));
    };
    if items.is_empty() || items.len() > settings.text.max_texts {
        return Err(bad(format!(
            "{field} must hold 1 to {} strings (CLIPFN_MAX_TEXTS), got {}",
            settings.text.max_texts,
            items.len()
        )));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(text) if text.chars().count() > settings.text.max_text_chars => Err(bad(format!(
                "{field}[{i}] is {} characters long, over the limit of {} (CLIPFN_MAX_TEXT_CHARS)",
                text.chars().count(),
                settings.text.max_text_chars
            ))),
            Value::String(text) => Ok(text),
            other => Err(bad(format!("{field}[{i}] must be a string, not {}", json_kind(&other)))),
        })
        .collect()
}

pub(super) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// When the request's work must be done by (CLIPFN_REQUEST_TIMEOUT_MS from now).
pub(super) fn deadline(settings: &Settings) -> tokio::time::Instant {
    tokio::time::Instant::now() + settings.server.request_timeout()
}
