//! The one place where errors become HTTP: whole-request errors map to a status with a JSON body;
//! a per-photo error travels in its item with the code and message that
//! [`ItemError::code_and_message`](crate::pipeline::ItemError::code_and_message) gives it.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::{pipeline::Overloaded, text::TextError, worker::Unhealthy};

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
    Overloaded(#[from] Overloaded),
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
            ApiError::Text(TextError::NoScoring(_)) => (StatusCode::NOT_IMPLEMENTED, "cannot_classify"),
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
