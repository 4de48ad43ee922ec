//! `POST /v1/embed`: photos (`images`) or texts (`texts`), never both.

use std::time::Instant;

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use serde_json::Value;

use crate::pipeline::Wants;

use super::{
    AppState,
    error::ApiError,
    photos::with_server_timing,
    request::{RequestBody, check_body_size, check_images, deadline, json_body, string_list},
    respond::{Answered, Counts, respond},
    schema::{EmbedAnswer, NotFound, Refusals},
    subjects::Subjects,
    types::{EmbedRequest, EmbedResponse, Item, TextEmbedResponse, TextItem, TimingsMs},
};

/// Embeds photos or texts
///
/// One L2-normalised embedding per photo or text, in input order. A photo that cannot be embedded
/// gets an `error` in its item instead; the others are embedded.
#[utoipa::path(
    post,
    path = "/v1/embed",
    tag = "clipfn",
    request_body(content = EmbedRequest, examples(
        ("photos" = (value = json!({"images": ["user/7/IMG_0001.jpg", "gs://photos/user/7/IMG_0002.heic"]}))),
        ("texts" = (value = json!({"texts": ["beach at sunset", "my dog in the snow"]})))
    )),
    responses(
        (status = 200, description = "An item per photo (`EmbedResponse`) or per text (`TextEmbedResponse`)",
            body = EmbedAnswer, headers(("Server-Timing" = String, description = "The photos' stage timings"))),
        (status = 404, response = NotFound),
        Refusals,
    )
)]
pub(super) async fn embed(State(state): State<AppState>, body: RequestBody) -> Response {
    respond(&state, "embed", |started| embed_request(&state, body, started)).await
}

async fn embed_request(state: &AppState, body: RequestBody, started: Instant) -> Answered {
    let (request, size): (EmbedRequest, _) =
        json_body(body, &state.settings, r#"{"images": ["key", ...]} or {"texts": ["...", ...]}"#)?;
    check_body_size(size, request.images.as_deref().unwrap_or_default(), &state.settings)?;
    match (request.images, request.texts) {
        (Some(images), None) => embed_images(state, images, started).await,
        (None, Some(texts)) => embed_texts(state, texts).await,
        (Some(_), Some(_)) => Err(ApiError::BadRequest("give either images or texts, not both".into())),
        (None, None) => Err(ApiError::BadRequest(r#"body must hold "images" or "texts""#.into())),
    }
}

/// The embed response for photos.
async fn embed_images(state: &AppState, images: Vec<String>, started: Instant) -> Answered {
    let photos = Subjects::Photos(check_images(images, &state.settings)?);
    let service = state.ready_service()?;
    let (results, timings) = photos.results(state, service, deadline(&state.settings), Wants::default()).await?;
    let counts = photos.counts(&results);
    let data = photos.answers(results, |index, image, result| match result {
        Ok(signals) => Item { index, image, embedding: signals.embedding, error: None },
        Err(error) => Item { index, image, embedding: None, error: Some(error) },
    });
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    let model = service.pipeline.model();
    let response = with_server_timing(
        EmbedResponse { model: &model.id, dim: model.dim, data, timings_ms: &timings_ms },
        &timings_ms,
    );
    Ok((response, counts))
}

/// The embed response for texts.
async fn embed_texts(state: &AppState, texts: Value) -> Answered {
    let texts = string_list(texts, "texts", &state.settings)?;
    let text = state.ready_text()?;
    let model = text.model();
    let embedded = text.embed_texts(&texts, Some(deadline(&state.settings))).await?;
    let data = texts
        .iter()
        .zip(&embedded)
        .enumerate()
        .map(|(index, (text, e))| TextItem { index, text, embedding: &e.embedding })
        .collect();
    let response = Json(TextEmbedResponse { model: &model.id, dim: model.dim, data }).into_response();
    Ok((response, Counts { texts: texts.len(), ..Counts::default() }))
}
