//! `POST /v1/classify`: zero-shot categories, each photo's best labels, scored against a label set
//! or labels given here by the text tower's embeddings. Stored embeddings in place of photos make
//! it a text-only call.

use std::time::Instant;

use axum::{extract::State, response::Response};

use crate::pipeline::Wants;

use super::{
    AppState,
    error::ApiError,
    labels,
    photos::with_server_timing,
    request::{RequestBody, deadline, json_body},
    respond::{Answered, respond},
    schema::{CannotClassify, NotFound, Refusals},
    subjects::Subjects,
    types::{ClassifyItem, ClassifyRequest, ClassifyResponse, TimingsMs},
};

/// Scores photos against labels (zero-shot)
///
/// Each photo's best `top_k` labels, from ad-hoc `labels` or a `label_set`, scored by the model
/// family's rule. Stored `embeddings` in place of `images` cost no fetch and no image inference.
#[utoipa::path(
    post,
    path = "/v1/classify",
    tag = "clipfn",
    request_body(content = ClassifyRequest, examples(
        ("labels" = (value = json!({
            "images": ["user/7/IMG_0001.jpg"], "labels": ["beach", "food", "city"], "top_k": 2
        }))),
        ("label set" = (value = json!({"images": ["user/7/IMG_0001.jpg"], "label_set": "places"})))
    )),
    responses(
        (status = 200, description = "An item per photo or stored embedding, in order", body = ClassifyResponse,
            headers(("Server-Timing" = String, description = "The photos' stage timings"))),
        (status = 404, response = NotFound),
        (status = 501, response = CannotClassify),
        Refusals,
    )
)]
pub(super) async fn classify(State(state): State<AppState>, body: RequestBody) -> Response {
    respond(&state, "classify", |started| classify_request(&state, body, started)).await
}

async fn classify_request(state: &AppState, body: RequestBody, started: Instant) -> Answered {
    let (request, size): (ClassifyRequest, _) = json_body(
        body,
        &state.settings,
        r#"{"images": ["key", ...], "labels": ["beach", ...]} or {"embeddings": [[...], ...], "label_set": "NAME"}"#,
    )?;
    let subjects = Subjects::new(request.subjects, size, false, &state.settings)?;
    let asked = labels::asked(request.labels, &state.settings)?
        .ok_or_else(|| ApiError::BadRequest(r#"body must hold "labels" or "label_set""#.into()))?;
    let service = state.ready_service()?;
    subjects.check_dim(service.pipeline.model().dim)?;
    let deadline = deadline(&state.settings);
    // Labels before photos: a bad set answers before any fetch.
    let scored = asked.embed(service, deadline).await?;

    let (results, timings) = subjects.results(state, service, deadline, Wants::default()).await?;
    let counts = subjects.counts(&results);
    let data = subjects.answers(results, |index, image, result| match result {
        Ok(signals) => ClassifyItem { index, image, labels: Some(scored.best(signals.embedded())), error: None },
        Err(error) => ClassifyItem { index, image, labels: None, error: Some(error) },
    });
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    let response = with_server_timing(
        ClassifyResponse { model: &service.pipeline.model().id, data, timings_ms: &timings_ms },
        &timings_ms,
    );
    Ok((response, counts))
}
