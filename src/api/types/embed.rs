//! `/v1/embed`'s bodies, and the timings every photo answer carries.

use std::{borrow::Cow, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::{error::ErrorBody, schema};
use crate::pipeline::Timings;

/// Photos or texts, never both.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbedRequest {
    /// Photo references: keys under CLIPFN_STORE, URIs and URLs under CLIPFN_ALLOWED_SOURCES, or
    /// `data:image/<type>;base64,<data>` URIs; 1 to CLIPFN_MAX_IMAGES.
    #[serde(default)]
    #[schema(min_items = 1)]
    pub images: Option<Vec<String>>,
    /// Texts to embed with the text tower: 1 to CLIPFN_MAX_TEXTS, of at most CLIPFN_MAX_TEXT_CHARS
    /// characters each.
    // Checked item by item (`request::string_list`), for errors that name the bad item.
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>, min_items = 1)]
    pub texts: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct EmbedResponse<'a> {
    /// The model id (its file or folder name).
    pub model: &'a str,
    /// The embeddings' length.
    pub dim: usize,
    pub data: Vec<Item<'a>>,
    pub timings_ms: &'a TimingsMs,
}

/// One photo's answer: exactly one of `embedding` and `error`.
#[derive(Serialize, ToSchema)]
pub struct Item<'a> {
    pub index: usize,
    /// The reference as sent, shortened for data URIs and without a URL's query; none for a
    /// stored embedding (`/v1/classify`, `/v1/analyze`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub image: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub embedding: Option<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub error: Option<ErrorBody>,
}

/// A duration in milliseconds to 0.1 ms, as every body and log line gives times.
pub(in crate::api) fn millis(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Per-stage wall-clock spans of one request, in milliseconds.
#[derive(Serialize, ToSchema)]
pub struct TimingsMs {
    pub fetch: f64,
    pub decode: f64,
    pub queue: f64,
    pub inference: f64,
    /// `/v1/analyze`: the album stage, after the photos (absent when the album was not computed).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub album: Option<f64>,
    pub total: f64,
}

impl TimingsMs {
    pub fn new(t: &Timings, total: Duration) -> Self {
        TimingsMs {
            fetch: millis(t.fetch.duration()),
            decode: millis(t.decode.duration()),
            queue: millis(t.queue.duration()),
            inference: millis(t.inference.duration()),
            album: None,
            total: millis(total),
        }
    }

    /// The same figures as a `Server-Timing` header, for browser and proxy tooling.
    pub fn server_timing(&self) -> String {
        let album = self.album.map(|album| format!(",album;dur={album}")).unwrap_or_default();
        format!(
            "fetch;dur={},decode;dur={},queue;dur={},inference;dur={}{album},total;dur={}",
            self.fetch, self.decode, self.queue, self.inference, self.total
        )
    }
}

#[derive(Serialize, ToSchema)]
pub struct TextEmbedResponse<'a> {
    pub model: &'a str,
    pub dim: usize,
    pub data: Vec<TextItem<'a>>,
}

#[derive(Serialize, ToSchema)]
pub struct TextItem<'a> {
    pub index: usize,
    pub text: &'a str,
    pub embedding: &'a [f32],
}
