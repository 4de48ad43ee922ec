//! `POST /v1/embeddings`, in OpenAI's shape, so OpenAI clients and vector-database tooling can
//! embed search queries here.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use base64::Engine;
use serde_json::Value;

use super::{
    AppState,
    error::ApiError,
    request::{RequestBody, check_body_size, deadline, json_body, string_list},
    respond::{Answered, Counts, respond},
    types::{EmbeddingObject, EmbeddingsRequest, EmbeddingsResponse, Usage},
};

pub(super) async fn embeddings(State(state): State<AppState>, body: RequestBody) -> Response {
    respond(&state, "embeddings", |_started| embeddings_request(&state, body)).await
}

async fn embeddings_request(state: &AppState, body: RequestBody) -> Answered {
    let (request, size): (EmbeddingsRequest, _) =
        json_body(body, &state.settings, r#"{"input": "text" | ["text", ...], "model": "..."}"#)?;
    check_body_size(size, &[], &state.settings)?;
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!("encoding_format must be float or base64, not '{other}'")));
        }
    };
    let texts = match request.input {
        Value::String(text) => string_list(Value::Array(vec![Value::String(text)]), "input", &state.settings)?,
        list => string_list(list, "input", &state.settings)?,
    };
    let text = state.ready_text()?;
    let model = text.model();
    if let Some(dimensions) = request.dimensions.filter(|d| *d != model.dim) {
        return Err(ApiError::BadRequest(format!("dimensions: this model answers {}, not {dimensions}", model.dim)));
    }
    let embedded = text.embed_texts(&texts, Some(deadline(&state.settings))).await?;
    let tokens = embedded.iter().map(|e| e.tokens).sum();
    let data = embedded
        .iter()
        .enumerate()
        .map(|(index, e)| EmbeddingObject {
            object: "embedding",
            index,
            embedding: if base64 {
                let bytes: Vec<u8> = e.embedding.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                serde_json::json!(&e.embedding[..])
            },
        })
        .collect();
    let usage = Usage { prompt_tokens: tokens, total_tokens: tokens };
    let response = Json(EmbeddingsResponse { object: "list", data, model: &model.id, usage }).into_response();
    Ok((response, Counts { texts: texts.len(), ..Counts::default() }))
}
