//! Request and response bodies of the HTTP API.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::error::ErrorBody;
use crate::pipeline::Timings;

#[derive(Debug, Deserialize)]
pub struct EmbedRequest {
    pub images: Vec<String>,
}

#[derive(Serialize)]
pub struct EmbedResponse<'a> {
    pub model: &'a str,
    pub dim: usize,
    pub data: Vec<Item<'a>>,
    pub timings_ms: TimingsMs,
}

/// One photo's answer: exactly one of `embedding` and `error`.
#[derive(Serialize)]
pub struct Item<'a> {
    pub index: usize,
    /// The reference as sent, shortened for data URIs and without a URL's query.
    pub image: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// Per-stage wall-clock spans of one request, in milliseconds.
#[derive(Serialize)]
pub struct TimingsMs {
    pub fetch: f64,
    pub decode: f64,
    pub queue: f64,
    pub inference: f64,
    pub total: f64,
}

impl TimingsMs {
    pub fn new(t: &Timings, total: std::time::Duration) -> Self {
        let ms = |d: std::time::Duration| (d.as_secs_f64() * 10_000.0).round() / 10.0;
        TimingsMs {
            fetch: ms(t.fetch.duration()),
            decode: ms(t.decode.duration()),
            queue: ms(t.queue.duration()),
            inference: ms(t.inference.duration()),
            total: ms(total),
        }
    }

    /// The same figures as a `Server-Timing` header, for browser and proxy tooling.
    pub fn server_timing(&self) -> String {
        format!(
            "fetch;dur={},decode;dur={},queue;dur={},inference;dur={},total;dur={}",
            self.fetch, self.decode, self.queue, self.inference, self.total
        )
    }
}
