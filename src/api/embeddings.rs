//! `POST /v1/embeddings`, in OpenAI's shape, so OpenAI clients and vector-database tooling can
//! embed search queries here, and photos with `"modality": "image"`.

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use base64::Engine;
use serde_json::Value;

use crate::pipeline::{ItemCode, Wants};

use super::{
    AppState,
    error::ApiError,
    photos::photo_results,
    request::{RequestBody, check_body_size, check_images, deadline, json_body, json_kind, string_list},
    respond::{Answered, Counts, respond},
    schema::{NotFound, PhotoFetchFailed, PhotoForbidden, Refusals, Unprocessable},
    types::{EmbeddingObject, EmbeddingsRequest, EmbeddingsResponse, Usage},
};

/// Embeds texts or photos in OpenAI's shape
///
/// For OpenAI client libraries and vector-database tooling. Photos (`"modality": "image"`) go
/// through the same sources, limits and pipeline as `/v1/embed`; OpenAI's shape has no per-item
/// errors, so a photo that fails fails the request, with the photo's own status (404, 403, 413,
/// 422, 502, 504) and a message naming its index.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "clipfn",
    request_body(content = EmbeddingsRequest, examples(
        ("texts" = (value = json!({"input": "beach at sunset", "model": "clip", "encoding_format": "float"}))),
        ("photos" = (value = json!({"input": ["user/7/IMG_0001.jpg"], "model": "clip", "modality": "image"})))
    )),
    responses(
        (status = 200, description = "An embedding per input, in order", body = EmbeddingsResponse),
        (status = 403, response = PhotoForbidden),
        (status = 404, response = NotFound),
        (status = 422, response = Unprocessable),
        (status = 502, response = PhotoFetchFailed),
        Refusals,
    )
)]
pub(super) async fn embeddings(State(state): State<AppState>, body: RequestBody) -> Response {
    respond(&state, "embeddings", |_started| embeddings_request(&state, body)).await
}

async fn embeddings_request(state: &AppState, body: RequestBody) -> Answered {
    let (request, size): (EmbeddingsRequest, _) = json_body(
        body,
        &state.settings,
        r#"{"input": "text" | ["text", ...], "model": "..."} or {"input": ["key", ...], "modality": "image"}"#,
    )?;
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!("encoding_format must be float or base64, not '{other}'")));
        }
    };
    match request.modality.as_deref() {
        None | Some("text") => {}
        Some("image") => return image_embeddings(state, request, size, base64).await,
        Some(other) => return Err(ApiError::BadRequest(format!("modality must be text or image, not '{other}'"))),
    }
    check_body_size(size, &[], &state.settings)?;
    let texts = match request.input {
        Value::String(text) => string_list(Value::Array(vec![Value::String(text)]), "input", &state.settings)?,
        list => string_list(list, "input", &state.settings)?,
    };
    let text = state.ready_text()?;
    let model = text.model();
    check_dimensions(request.dimensions, model.dim)?;
    let embedded = text.embed_texts(&texts, Some(deadline(&state.settings))).await?;
    let tokens = embedded.iter().map(|e| e.tokens).sum();
    let data = embedded.iter().enumerate().map(|(index, e)| embedding_object(index, &e.embedding, base64)).collect();
    let usage = Usage { prompt_tokens: tokens, total_tokens: tokens };
    let response = Json(EmbeddingsResponse { object: "list", data, model: &model.id, usage }).into_response();
    Ok((response, Counts { texts: texts.len(), ..Counts::default() }))
}

/// `/v1/embeddings` with `"modality": "image"`, as Infinity takes it: photo references (keys, URLs,
/// data URIs) through the same pipeline, limits and source rules as `/v1/embed`; the first photo
/// that fails is the request's error (OpenAI's shape has no per-item errors).
async fn image_embeddings(state: &AppState, request: EmbeddingsRequest, size: usize, base64: bool) -> Answered {
    let images = match request.input {
        Value::String(image) => vec![image],
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(image) => Ok(image),
                other => Err(ApiError::BadRequest(format!(
                    "input[{i}] must be a photo reference, not {}",
                    json_kind(&other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(ApiError::BadRequest(format!(
                "input must be a list of photo references, not {}",
                json_kind(&other)
            )));
        }
    };
    check_body_size(size, &images, &state.settings)?;
    let images = check_images(images, &state.settings)?;
    let service = state.ready_service()?;
    let model = service.pipeline.model();
    check_dimensions(request.dimensions, model.dim)?;
    let (results, _) = photo_results(state, service, &images, deadline(&state.settings), Wants::default()).await?;
    let data = results
        .into_iter()
        .enumerate()
        .map(|(index, result)| match result {
            Ok(signals) => Ok(embedding_object(index, signals.embedded(), base64)),
            Err(e) => {
                let code = ItemCode::named(e.code).expect("a photo's error has a photo's code");
                Err(ApiError::Photo((code, format!("input[{index}]: {}", e.message))))
            }
        })
        .collect::<Result<_, _>>()?;
    let usage = Usage { prompt_tokens: 0, total_tokens: 0 };
    let response = Json(EmbeddingsResponse { object: "list", data, model: &model.id, usage }).into_response();
    Ok((response, Counts { images: images.len(), ..Counts::default() }))
}

/// OpenAI's `dimensions`, which only the model's own size satisfies.
fn check_dimensions(dimensions: Option<usize>, dim: usize) -> Result<(), ApiError> {
    match dimensions {
        Some(dimensions) if dimensions != dim => {
            Err(ApiError::BadRequest(format!("dimensions: this model answers {dim}, not {dimensions}")))
        }
        _ => Ok(()),
    }
}

/// One embedding in OpenAI's shape: floats, or base64 of their little-endian float32 bytes.
fn embedding_object(index: usize, embedding: &[f32], base64: bool) -> EmbeddingObject {
    let embedding = if base64 {
        let bytes: Vec<u8> = embedding.iter().flat_map(|x| x.to_le_bytes()).collect();
        Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        serde_json::json!(embedding)
    };
    EmbeddingObject { object: "embedding", index, embedding }
}
