//! The one place where errors become HTTP: whole-request errors map to a status with a JSON body;
//! a per-photo error travels in its item with the code and message that
//! [`ItemError::code_and_message`](crate::pipeline::ItemError::code_and_message) gives it.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;
use utoipa::ToSchema;

use super::schema::ErrorCode;
use crate::{
    pipeline::{ItemCode, Overloaded},
    text::TextError,
    worker::Unhealthy,
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
    Overloaded(#[from] Overloaded),
    #[error("{0}")]
    Text(#[from] TextError),
    /// Immich's `entries` that are not what its protocol sends (its service answers 422 too).
    #[error("{0}")]
    BadEntries(String),
    /// A photo that a request without per-item errors named (Immich's `/predict`, OpenAI's
    /// `/v1/embeddings`) could not be answered for.
    #[error("{}", .0.1)]
    Photo((ItemCode, String)),
}

/// A whole-request error's body.
#[derive(Serialize, ToSchema)]
pub struct ErrorResponse {
    error: ErrorBody,
}

/// What went wrong: a stable code to switch on and a message for people.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    #[schema(value_type = ErrorCode)]
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    /// Every status and code [`ApiError::status_and_code`] gives (a test holds the two together),
    /// for the OpenAPI document.
    pub const CODES: [(StatusCode, &str); 21] = [
        (StatusCode::BAD_REQUEST, "bad_request"),
        (StatusCode::BAD_REQUEST, "bad_text"),
        (StatusCode::FORBIDDEN, "forbidden"),
        (StatusCode::NOT_FOUND, "no_route"),
        (StatusCode::NOT_FOUND, "not_found"),
        (StatusCode::NOT_FOUND, "text_model_not_configured"),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
        (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        (StatusCode::UNPROCESSABLE_ENTITY, "bad_entries"),
        (StatusCode::UNPROCESSABLE_ENTITY, "unsupported_format"),
        (StatusCode::UNPROCESSABLE_ENTITY, "decode_failed"),
        (StatusCode::TOO_MANY_REQUESTS, "overloaded"),
        (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        (StatusCode::INTERNAL_SERVER_ERROR, "inference_failed"),
        (StatusCode::NOT_IMPLEMENTED, "cannot_classify"),
        (StatusCode::BAD_GATEWAY, "fetch_failed"),
        (StatusCode::SERVICE_UNAVAILABLE, "not_ready"),
        (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
        (StatusCode::SERVICE_UNAVAILABLE, "unhealthy"),
        (StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded"),
    ];

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
            ApiError::BadEntries(_) => (StatusCode::UNPROCESSABLE_ENTITY, "bad_entries"),
            ApiError::Photo((code, _)) => (photo_status(*code), code.as_str()),
        }
    }
}

/// The status for a photo that failed a request without per-item errors: what is wrong with its
/// bytes is the request's (422, or 413); a reference that names nothing, or nothing allowed, is
/// 404 or 403; a store that failed is 502; the model and the deadline are 500 and 504.
fn photo_status(code: ItemCode) -> StatusCode {
    match code {
        ItemCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ItemCode::UnsupportedFormat | ItemCode::DecodeFailed => StatusCode::UNPROCESSABLE_ENTITY,
        ItemCode::NotFound => StatusCode::NOT_FOUND,
        ItemCode::Forbidden => StatusCode::FORBIDDEN,
        ItemCode::FetchFailed => StatusCode::BAD_GATEWAY,
        ItemCode::InferenceFailed => StatusCode::INTERNAL_SERVER_ERROR,
        ItemCode::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
    }
}

/// Whether an answer with `status` says when to try again (`Retry-After`): the instance is busy
/// or not serving yet.
pub(super) fn retry_after(status: StatusCode) -> bool {
    matches!(status, StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let mut response =
            (status, Json(ErrorResponse { error: ErrorBody { code, message: self.to_string() } })).into_response();
        if retry_after(status) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let ApiError::MethodNotAllowed(_, allowed) = self {
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allowed));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        tokenize::TokenizerError,
        worker::{BatchError, Broken},
    };

    /// One error of every kind. The match does not compile once a kind is added, so that it is
    /// listed here (and so in the document's codes) too.
    fn every_kind() -> Vec<ApiError> {
        let overloaded = Overloaded { requested: 1, available: 0, capacity: 1 };
        let errors = vec![
            ApiError::BadRequest(String::new()),
            ApiError::BodyTooLarge(0),
            ApiError::NoRoute(String::new()),
            ApiError::MethodNotAllowed(String::new(), "GET"),
            ApiError::NotReady,
            ApiError::Draining,
            ApiError::Unhealthy(Unhealthy { device: "cpu", towers: "image".into(), why: Broken::ModelBroken }),
            ApiError::Internal,
            ApiError::Overloaded(overloaded),
            ApiError::Text(TextError::NotConfigured),
            ApiError::Text(TextError::DeadlineExceeded),
            ApiError::Text(TextError::Tokenize(TokenizerError::EmptyVocabulary)),
            ApiError::Text(TextError::NoScoring(String::new())),
            ApiError::Text(TextError::Batch(BatchError::Stopped)),
            ApiError::Text(TextError::TokenizerPanic),
            ApiError::BadEntries(String::new()),
        ];
        let errors = errors
            .into_iter()
            .chain(ItemCode::ALL.map(|code| ApiError::Photo((code, String::new()))))
            .collect::<Vec<_>>();
        for error in &errors {
            match error {
                ApiError::BadRequest(_)
                | ApiError::BodyTooLarge(_)
                | ApiError::NoRoute(_)
                | ApiError::MethodNotAllowed(..)
                | ApiError::NotReady
                | ApiError::Draining
                | ApiError::Unhealthy(_)
                | ApiError::Internal
                | ApiError::Overloaded(_)
                | ApiError::Text(
                    TextError::NotConfigured
                    | TextError::DeadlineExceeded
                    | TextError::Tokenize(_)
                    | TextError::NoScoring(_)
                    | TextError::Batch(_)
                    | TextError::TokenizerPanic,
                )
                | ApiError::BadEntries(_)
                | ApiError::Photo(_) => {}
            }
        }
        errors
    }

    #[test]
    fn the_documented_codes_are_the_codes_given() {
        let given: Vec<_> = every_kind().iter().map(ApiError::status_and_code).collect();
        for code in &given {
            assert!(ApiError::CODES.contains(code), "{code:?} is missing from ApiError::CODES");
        }
        for code in &ApiError::CODES {
            assert!(given.contains(code), "{code:?} in ApiError::CODES is given by no error");
        }
    }
}
