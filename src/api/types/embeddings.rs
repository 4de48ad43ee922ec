//! OpenAI's `/v1/embeddings` bodies.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::whole;
use crate::api::schema;

/// OpenAI's embeddings request (`POST /v1/embeddings`), texts or photos. Its `model` and `user`
/// are accepted and not used: the answer names the model that ran.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbeddingsRequest {
    /// A string or a list of strings (token arrays are refused).
    #[schema(schema_with = schema::embeddings_input)]
    pub input: Value,
    #[serde(default)]
    #[schema(value_type = Option<schema::EncodingFormat>)]
    pub encoding_format: Option<String>,
    /// Must be the model's own dim if given.
    #[serde(default, deserialize_with = "whole")]
    pub dimensions: Option<usize>,
    /// `text` (the default) or `image`: `input` then holds photo references, as Infinity takes them.
    #[serde(default)]
    #[schema(value_type = Option<schema::Modality>)]
    pub modality: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingsResponse<'a> {
    #[schema(schema_with = schema::list_object)]
    pub object: &'static str,
    pub data: Vec<EmbeddingObject>,
    pub model: &'a str,
    pub usage: Usage,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingObject {
    #[schema(schema_with = schema::embedding_object)]
    pub object: &'static str,
    pub index: usize,
    /// Floats, or base64 of their little-endian float32 bytes.
    #[schema(schema_with = schema::floats_or_base64)]
    pub embedding: Value,
}

#[derive(Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}
