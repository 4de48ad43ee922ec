//! The text endpoints: texts on `/v1/embed`, OpenAI-compatible `/v1/embeddings`, and zero-shot
//! `/v1/classify` (photos scored against labels by the text tower's embeddings).

use std::time::Instant;

use axum::{
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    response::{IntoResponse, Response},
};
use base64::Engine;
use serde_json::Value;

use super::{
    Answered, AppState, Cancelled, Counts, answer, check_body_size, check_images,
    error::ApiError,
    json_body, per_photo, photo_results,
    types::{
        ClassifyItem, ClassifyRequest, ClassifyResponse, EmbeddingObject, EmbeddingsRequest, EmbeddingsResponse,
        LabelScore, TextEmbedResponse, TextItem, TimingsMs, Usage,
    },
    with_server_timing,
};
use crate::{
    settings::Settings,
    text::{Labels, Text, TextError},
};

/// Where a classify request's labels come from.
enum Asked {
    Labels(Labels),
    Set(String),
}

const DEFAULT_TOP_K: usize = 5;

/// `/v1/embed` with `texts`.
pub(super) async fn embed_texts(state: &AppState, texts: Value) -> Answered {
    let texts = string_list(texts, "texts", &state.settings)?;
    let text = ready_text(state)?;
    let model = text.model();
    let embedded = text.embed_texts(&texts, Some(deadline(&state.settings))).await?;
    let data = texts
        .iter()
        .zip(&embedded)
        .enumerate()
        .map(|(index, (text, e))| TextItem { index, text, embedding: &e.embedding })
        .collect();
    let response = axum::Json(TextEmbedResponse { model: &model.id, dim: model.dim, data }).into_response();
    Ok((response, Counts { texts: texts.len(), ..Counts::default() }))
}

/// `POST /v1/embeddings`, in OpenAI's shape, so OpenAI clients and vector-database tooling can
/// embed search queries here.
pub(super) async fn embeddings(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let started = Instant::now();
    let mut cancelled = Cancelled::new(&state, "embeddings", started);
    let outcome = embeddings_request(&state, body).await;
    cancelled.armed = false;
    answer(&state, "embeddings", started, outcome)
}

async fn embeddings_request(state: &AppState, body: Result<Bytes, BytesRejection>) -> Answered {
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
    let text = ready_text(state)?;
    let model = text.model();
    check_dimensions(request.dimensions, model.dim)?;
    let embedded = text.embed_texts(&texts, Some(deadline(&state.settings))).await?;
    let tokens = embedded.iter().map(|e| e.tokens).sum();
    let data = embedded.iter().enumerate().map(|(index, e)| embedding_object(index, &e.embedding, base64)).collect();
    let usage = Usage { prompt_tokens: tokens, total_tokens: tokens };
    let response = axum::Json(EmbeddingsResponse { object: "list", data, model: &model.id, usage }).into_response();
    Ok((response, Counts { texts: texts.len(), ..Counts::default() }))
}

/// `/v1/embeddings` with `"modality": "image"`, as Infinity takes it: photo references (keys, URLs,
/// data URIs) through the same pipeline, limits and source rules as `/v1/embed`. OpenAI's shape
/// has no per-item errors, so a photo that fails answers 400 naming its index.
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
    let (results, _) = photo_results(state, service, &images, deadline(&state.settings)).await?;
    let data = results
        .into_iter()
        .enumerate()
        .map(|(index, result)| match result {
            Ok(embedding) => Ok(embedding_object(index, &embedding, base64)),
            Err(e) => Err(ApiError::BadRequest(format!("input[{index}]: {} ({})", e.message, e.code))),
        })
        .collect::<Result<_, _>>()?;
    let usage = Usage { prompt_tokens: 0, total_tokens: 0 };
    let response = axum::Json(EmbeddingsResponse { object: "list", data, model: &model.id, usage }).into_response();
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

/// `POST /v1/classify`: each photo's best labels, from a label set or labels given here.
pub(super) async fn classify(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let started = Instant::now();
    let mut cancelled = Cancelled::new(&state, "classify", started);
    let outcome = classify_request(&state, body, started).await;
    cancelled.armed = false;
    answer(&state, "classify", started, outcome)
}

async fn classify_request(state: &AppState, body: Result<Bytes, BytesRejection>, started: Instant) -> Answered {
    let (request, size): (ClassifyRequest, _) = json_body(
        body,
        &state.settings,
        r#"{"images": ["key", ...], "labels": ["beach", ...]} or {"images": [...], "label_set": "NAME"}"#,
    )?;
    check_body_size(size, &request.images, &state.settings)?;
    let images = check_images(request.images, &state.settings)?;
    let top_k = match request.top_k {
        None => DEFAULT_TOP_K,
        Some(k) if k >= 1 => k as usize,
        Some(k) => return Err(ApiError::BadRequest(format!("top_k must be at least 1, got {k}"))),
    };
    let asked = match (request.labels, request.label_set) {
        (Some(_), Some(_)) => return Err(ApiError::BadRequest("give either labels or label_set, not both".into())),
        (None, None) => return Err(ApiError::BadRequest(r#"body must hold "labels" or "label_set""#.into())),
        (Some(labels), None) => {
            let names = string_list(labels, "labels", &state.settings)?;
            Asked::Labels(Labels::new(names, None).map_err(|e| ApiError::BadRequest(e.to_string()))?)
        }
        (None, Some(name)) => Asked::Set(name),
    };
    let service = state.ready_service()?;
    let text = service.text.as_ref().ok_or(TextError::NotConfigured)?;
    let scoring = text.scoring()?;
    let deadline = deadline(&state.settings);
    // Labels before photos: a bad set answers before any fetch.
    let embedded;
    let (names, label_embeddings) = match &asked {
        Asked::Labels(labels) => {
            embedded = text.label_embeddings(labels, Some(deadline)).await?;
            (&labels.names, &embedded)
        }
        Asked::Set(name) => {
            let set = text.label_set(name).ok_or_else(|| {
                let known = text.label_set_names();
                ApiError::BadRequest(format!(
                    "unknown label_set '{name}'; known sets: {}",
                    if known.is_empty() { "none (CLIPFN_LABELS is unset)".to_string() } else { known.join(", ") }
                ))
            })?;
            (&set.labels.names, &set.embeddings)
        }
    };

    let (results, timings) = photo_results(state, service, &images, deadline).await?;
    let errors = results.iter().filter(|r| r.is_err()).count();
    let data = per_photo(&images, results, |index, image, result| match result {
        Ok(embedding) => {
            let best = scoring.top_labels(&embedding, label_embeddings, top_k);
            let labels = best.into_iter().map(|(i, score)| LabelScore { label: &names[i], score }).collect();
            ClassifyItem { index, image, labels: Some(labels), error: None }
        }
        Err(error) => ClassifyItem { index, image, labels: None, error: Some(error) },
    });
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    let response = with_server_timing(
        ClassifyResponse { model: &service.pipeline.model().id, data, timings_ms: &timings_ms },
        &timings_ms,
    );
    Ok((response, Counts { images: images.len(), errors, ..Counts::default() }))
}

fn deadline(settings: &Settings) -> tokio::time::Instant {
    tokio::time::Instant::now() + settings.server.request_timeout()
}

/// The text side of a ready service, or 404 when there is no text tower.
fn ready_text(state: &AppState) -> Result<&Text, ApiError> {
    Ok(state.ready_service()?.text.as_ref().ok_or(TextError::NotConfigured)?)
}

/// A JSON list of 1 to CLIPFN_MAX_TEXTS strings of at most CLIPFN_MAX_TEXT_CHARS characters.
fn string_list(value: Value, field: &str, settings: &Settings) -> Result<Vec<String>, ApiError> {
    let bad = |message: String| ApiError::BadRequest(message);
    let Value::Array(items) = value else {
        return Err(bad(format!("{field} must be a list of strings")));
    };
    if items.is_empty() || items.len() > settings.text.max_texts {
        return Err(bad(format!(
            "{field} must hold 1 to {} strings (CLIPFN_MAX_TEXTS), got {}",
            settings.text.max_texts,
            items.len()
        )));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(text) if text.chars().count() > settings.text.max_text_chars => Err(bad(format!(
                "{field}[{i}] is {} characters long, over the limit of {} (CLIPFN_MAX_TEXT_CHARS)",
                text.chars().count(),
                settings.text.max_text_chars
            ))),
            Value::String(text) => Ok(text),
            other => Err(bad(format!("{field}[{i}] must be a string, not {}", json_kind(&other)))),
        })
        .collect()
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
