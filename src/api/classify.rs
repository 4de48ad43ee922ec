//! `POST /v1/classify`: zero-shot categories, each photo's best labels, scored against a label set
//! or labels given here by the text tower's embeddings.

use std::time::Instant;

use axum::{extract::State, response::Response};

use crate::pipeline::Wants;

use super::{
    AppState,
    error::ApiError,
    labels,
    photos::{per_photo, photo_results, with_server_timing},
    request::{RequestBody, check_body_size, check_images, deadline, json_body},
    respond::{Answered, Counts, respond},
    types::{ClassifyItem, ClassifyRequest, ClassifyResponse, TimingsMs},
};

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
    let asked = labels::asked(request.labels, &state.settings)?
        .ok_or_else(|| ApiError::BadRequest(r#"body must hold "labels" or "label_set""#.into()))?;
    let service = state.ready_service()?;
    let deadline = deadline(&state.settings);
    // Labels before photos: a bad set answers before any fetch.
    let scored = asked.embed(service, deadline).await?;

    let (results, timings) = photo_results(state, service, &images, deadline, Wants::default()).await?;
    let errors = results.iter().filter(|r| r.is_err()).count();
    let data = per_photo(&images, results, |index, image, result| match result {
        Ok(signals) => ClassifyItem { index, image, labels: Some(scored.best(&signals.embedding)), error: None },
        Err(error) => ClassifyItem { index, image, labels: None, error: Some(error) },
    });
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    let response = with_server_timing(
        ClassifyResponse { model: &service.pipeline.model().id, data, timings_ms: &timings_ms },
        &timings_ms,
    );
    Ok((response, Counts { images: images.len(), errors, ..Counts::default() }))
}
