//! The one place where errors become HTTP: whole-request errors map to a status with a JSON body,
//! per-photo errors map to the stable codes clients switch on.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::{batcher::BatchError, pipeline::ItemError, source::SourceError, text::TextError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("request body is over the {0}-byte limit")]
    BodyTooLarge(usize),
    #[error("no route for {0}")]
    NoRoute(String),
    #[error("the model is still loading")]
    NotReady,
    #[error("the server is shutting down")]
    Draining,
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
            ApiError::NotReady => (StatusCode::SERVICE_UNAVAILABLE, "not_ready"),
            ApiError::Draining => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
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
        response
    }
}

/// The stable per-photo error code; the message carries the detail.
pub fn item_error(e: &ItemError) -> ErrorBody {
    use crate::decode::DecodeError;
    let code = match e {
        ItemError::Source(SourceError::NotFound(_)) => "not_found",
        ItemError::Source(SourceError::Forbidden(_) | SourceError::Expired(_)) => "forbidden",
        ItemError::Source(SourceError::TooLarge { .. }) => "too_large",
        ItemError::Source(SourceError::Fetch(_) | SourceError::Config(_)) => "fetch_failed",
        ItemError::Decode(DecodeError::Unsupported(_)) | ItemError::Source(SourceError::NotAnImage(_)) => {
            "unsupported_format"
        }
        ItemError::Decode(DecodeError::TooManyPixels { .. }) => "too_large",
        ItemError::Decode(DecodeError::Failed(_) | DecodeError::Timeout(_))
        | ItemError::Source(SourceError::BadInline(_))
        | ItemError::DecoderPanic
        | ItemError::Preprocess(_) => "decode_failed",
        ItemError::Batch(BatchError::Model(_) | BatchError::Stopped) => "inference_failed",
        ItemError::DeadlineExceeded => "deadline_exceeded",
    };
    ErrorBody { code, message: e.to_string() }
}
