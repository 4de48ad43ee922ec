//! `POST /v1/classify`: zero-shot categories, each photo's best labels, scored against a label set
//! or labels given here by the text tower's embeddings.

use std::time::Instant;

use axum::{extract::State, response::Response};

use super::{
    AppState,
    error::ApiError,
    photos::{per_photo, photo_results, with_server_timing},
    request::{RequestBody, check_body_size, check_images, deadline, json_body, string_list},
    respond::{Answered, Counts, respond},
    types::{ClassifyItem, ClassifyRequest, ClassifyResponse, LabelScore, TimingsMs},
};
use crate::text::{Labels, TextError};

/// Where a classify request's labels come from.
enum Asked {
    Labels(Labels),
    Set(String),
}

const DEFAULT_TOP_K: usize = 5;

pub(super) async fn classify(State(state): State<AppState>, body: RequestBody) -> Response {
    respond(&state, "classify", |started| classify_request(&state, body, started)).await
}

async fn classify_request(state: &AppState, body: RequestBody, started: Instant) -> Answered {
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
