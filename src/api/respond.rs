//! How every endpoint answers, written once: the request's one log line and its
//! `clipfn_requests` count, whatever the outcome (answered, refused, or cancelled by the client).
//! An endpoint's handler is its work, run through [`respond`].

use std::{future::Future, time::Instant};

use axum::response::{IntoResponse, Response};
use tracing::Span;

use super::{AppState, error::ApiError, types::millis};
use crate::observe::metrics::{Metrics, Outcome};

/// What an answered request carried, for its log line.
#[derive(Default)]
pub(super) struct Counts {
    pub(super) images: usize,
    pub(super) texts: usize,
    /// Stored embeddings, in place of photos.
    pub(super) embeddings: usize,
    /// Photos that got an error.
    pub(super) errors: usize,
}

/// An endpoint's work: its 200 response and what it carried, or why the request is refused.
pub(super) type Answered = Result<(Response, Counts), ApiError>;

/// Runs an endpoint's `work`, given the instant the request started, and answers with what it
/// gives. One info line per request, whatever its outcome: counts and time, never keys, texts or
/// bodies. A request whose client goes away first is logged and counted as `cancelled`.
pub(super) async fn respond<F>(state: &AppState, endpoint: &'static str, work: impl FnOnce(Instant) -> F) -> Response
where
    F: Future<Output = Answered>,
{
    let started = Instant::now();
    let mut cancelled = Cancelled::new(&state.metrics, endpoint, started);
    let outcome = work(started).await;
    cancelled.armed = false;
    answer(&state.metrics, endpoint, started, outcome)
}

fn answer(metrics: &Metrics, endpoint: &'static str, started: Instant, outcome: Answered) -> Response {
    let elapsed = started.elapsed();
    let total_ms = millis(elapsed);
    match outcome {
        Ok((response, Counts { images, texts, embeddings, errors })) => {
            metrics.request(endpoint, Outcome::Ok, elapsed);
            tracing::info!(status = 200, images, texts, embeddings, errors, total_ms, "{endpoint} request");
            response
        }
        Err(e) => {
            let (status, code) = e.status_and_code();
            metrics.request(endpoint, Outcome::Refused(code), elapsed);
            tracing::info!(status = status.as_u16(), code, total_ms, "{endpoint} request refused");
            e.into_response()
        }
    }
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
    fn new(metrics: &'a Metrics, endpoint: &'static str, started: Instant) -> Self {
        Cancelled { metrics, endpoint, started, span: Span::current(), armed: true }
    }
}

impl Drop for Cancelled<'_> {
    fn drop(&mut self) {
        if self.armed {
            let elapsed = self.started.elapsed();
            self.metrics.request(self.endpoint, Outcome::Cancelled, elapsed);
            let total_ms = millis(elapsed);
            self.span.in_scope(|| {
                tracing::info!(code = "cancelled", total_ms, "{} request cancelled by the client", self.endpoint)
            });
        }
    }
}
