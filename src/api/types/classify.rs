//! `/v1/classify`'s bodies and the label sets it and `/v1/analyze` take.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::embed::TimingsMs;
use super::whole;
use crate::api::{error::ErrorBody, schema};

/// Photos, or embeddings stored earlier (never both), and the labels to score them against.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ClassifyRequest {
    #[serde(flatten)]
    pub subjects: SubjectsRequest,
    #[serde(flatten)]
    pub labels: LabelsRequest,
}

/// What a request answers about (`/v1/classify`, `/v1/analyze`): photos, or embeddings stored
/// earlier, never both.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SubjectsRequest {
    /// As in `/v1/embed`: 1 to CLIPFN_MAX_IMAGES photo references.
    #[serde(default)]
    #[schema(min_items = 1)]
    pub images: Option<Vec<String>>,
    /// Embeddings an earlier answer gave, in place of `images`: 1 to CLIPFN_MAX_IMAGES vectors of
    /// the model's dim, finite float32, not all zero.
    #[serde(default)]
    #[schema(min_items = 1, value_type = Option<Vec<schema::StoredEmbedding>>)]
    pub embeddings: Option<Vec<Vec<f32>>>,
}

/// The labels a request scores its photos against (`/v1/classify`, `/v1/analyze`).
#[derive(Debug, Deserialize, ToSchema)]
pub struct LabelsRequest {
    #[serde(default)]
    #[schema(schema_with = schema::labels)]
    pub labels: Option<Value>,
    /// A set named in CLIPFN_LABELS, embedded at start-up; not with `labels`.
    #[serde(default)]
    pub label_set: Option<String>,
    /// How many of the best labels to keep per photo (default 5).
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1, maximum = 2147483647)] // MAX_TOP_K
    pub top_k: Option<i64>,
}

/// The most `top_k` may be: any count of labels a request can hold, stated so that a number past
/// 64 bits (which `whole` reads as the nearest in range) is outside the document as it is outside
/// what the server takes.
pub const MAX_TOP_K: i64 = i32::MAX as i64;

#[derive(Serialize, ToSchema)]
pub struct ClassifyResponse<'a> {
    pub model: &'a str,
    pub data: Vec<ClassifyItem<'a>>,
    pub timings_ms: &'a TimingsMs,
}

/// One photo's answer: exactly one of `labels` and `error`.
#[derive(Serialize, ToSchema)]
pub struct ClassifyItem<'a> {
    pub index: usize,
    /// As in `Item`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub image: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub labels: Option<Vec<LabelScore<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub error: Option<ErrorBody>,
}

#[derive(Serialize, ToSchema)]
pub struct LabelScore<'a> {
    pub label: &'a str,
    pub score: f32,
}
