//! The one place where errors become HTTP: whole-request errors map to a status with a JSON body,
//! per-photo errors map to the stable codes clients switch on.
//!
//! A per-photo message is fixed per code and names only the reference the client sent: the
//! underlying error can carry store URLs, endpoints, bucket prefixes or ONNX Runtime's source
//! paths, so it goes to the log (with the request's trace id) and never to the client.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::{
    batcher::{BatchError, Unhealthy},
    pipeline::ItemError,
    source::SourceError,
    text::TextError,
};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("request body is over the {0}-byte limit")]
    BodyTooLarge(usize),
    #[error("no route for {0}")]
    NoRoute(String),
    #[error("{0} is not allowed here; use {1}")]
    MethodNotAllowed(String, &'static str),
    #[error("the model is still loading")]
    NotReady,
    #[error("the server is shutting down")]
    Draining,
    #[error("this instance cannot embed: {0}")]
    Unhealthy(#[from] Unhealthy),
    #[error("internal error")]
    Internal,
    #[error("queue full: {0}")]
    Overloaded(#[from] crate::batcher::Overloaded),
    #[error("{0}")]
    Text(#[from] TextError),
}

#[derive(Serialize)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::BodyTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::NoRoute(_) => (StatusCode::NOT_FOUND, "no_route"),
            ApiError::MethodNotAllowed(..) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::NotReady => (StatusCode::SERVICE_UNAVAILABLE, "not_ready"),
            ApiError::Draining => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            ApiError::Unhealthy(_) => (StatusCode::SERVICE_UNAVAILABLE, "unhealthy"),
            ApiError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ApiError::Overloaded(_) => (StatusCode::TOO_MANY_REQUESTS, "overloaded"),
            ApiError::Text(TextError::NotConfigured) => (StatusCode::NOT_FOUND, "text_model_not_configured"),
            ApiError::Text(TextError::DeadlineExceeded) => (StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded"),
            ApiError::Text(TextError::Tokenize(_)) => (StatusCode::BAD_REQUEST, "bad_text"),
            ApiError::Text(TextError::Batch(_) | TextError::TokenizerPanic) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "inference_failed")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Envelope {
            error: ErrorBody,
        }
        let (status, code) = self.status_and_code();
        let mut response =
            (status, Json(Envelope { error: ErrorBody { code, message: self.to_string() } })).into_response();
        if matches!(status, StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let ApiError::MethodNotAllowed(_, allowed) = self {
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allowed));
        }
        response
    }
}

/// The stable per-photo error code, with its fixed message naming the photo's reference as the
/// response shows it.
pub fn item_error(e: &ItemError, image: &str) -> ErrorBody {
    use crate::decode::DecodeError;
    let (code, message) = match e {
        ItemError::Source(SourceError::NotFound(_)) => ("not_found", format!("no object at '{image}'")),
        ItemError::Source(SourceError::Forbidden(_)) => {
            ("forbidden", format!("'{image}' is outside the allowed sources, or the store refused access"))
        }
        // The one refusal a client can fix by itself: sign the URL again.
        ItemError::Source(SourceError::Expired(_)) => ("forbidden", format!("the signature of '{image}' has expired")),
        ItemError::Source(SourceError::TooLarge { .. }) | ItemError::Decode(DecodeError::TooManyPixels { .. }) => {
            ("too_large", format!("'{image}' is over the byte or pixel limit"))
        }
        ItemError::Source(SourceError::Fetch(_) | SourceError::Config(_)) => {
            ("fetch_failed", format!("'{image}' could not be read from its source"))
        }
        ItemError::Decode(DecodeError::Unsupported(_)) | ItemError::Source(SourceError::NotAnImage(_)) => {
            ("unsupported_format", format!("'{image}' is not a supported image format"))
        }
        ItemError::Decode(DecodeError::Failed(_) | DecodeError::Timeout(_) | DecodeError::Crashed(_))
        | ItemError::Source(SourceError::BadInline(_))
        | ItemError::Preprocess(_) => {
            ("decode_failed", format!("'{image}' could not be decoded: corrupt, truncated or too slow to decode"))
        }
        ItemError::Batch(BatchError::Model(_) | BatchError::Stopped) => {
            ("inference_failed", format!("the model failed on '{image}'"))
        }
        ItemError::DeadlineExceeded => {
            ("deadline_exceeded", format!("'{image}' was not finished within the request deadline"))
        }
    };
    ErrorBody { code, message }
}
