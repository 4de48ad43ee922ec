//! `POST /v1/analyze`: every signal the album app derives from a photo, from one fetch and one
//! decode (the embedding, the labels, the sharpness, the perceptual hash and the heads' scores),
//! and the request's photos grouped into near-duplicates.

use std::time::Instant;

use axum::{extract::State, response::Response};

use super::{
    AppState,
    error::ApiError,
    labels,
    photos::{per_photo, photo_results, with_server_timing},
    request::{RequestBody, check_body_size, check_images, deadline, json_body},
    respond::{Answered, Counts, respond},
    types::{Album, AnalyzeItem, AnalyzeRequest, AnalyzeResponse, Quality, TimingsMs},
};
use crate::{album::duplicate_groups, pipeline::Wants};

pub(super) async fn analyze(State(state): State<AppState>, body: RequestBody) -> Response {
    respond(&state, "analyze", |started| analyze_request(&state, body, started)).await
}

async fn analyze_request(state: &AppState, body: RequestBody, started: Instant) -> Answered {
    let (request, size): (AnalyzeRequest, _) = json_body(
        body,
        &state.settings,
        r#"{"images": ["key", ...]}, optionally with "labels": [...] or "label_set": "NAME", "top_k", "embedding": false"#,
    )?;
    check_body_size(size, &request.images, &state.settings)?;
    let images = check_images(request.images, &state.settings)?;
    let asked = labels::asked(request.labels, &state.settings)?;
    let service = state.ready_service()?;
    let deadline = deadline(&state.settings);
    // Labels before photos, as /v1/classify: a bad set answers before any fetch.
    let scored = match &asked {
        // Here labels are one signal among several: asking for them where there is no text tower
        // is a bad request (/v1/classify, which is nothing but labels, is a 404 there).
        Some(_) if service.text.is_none() => {
            return Err(ApiError::BadRequest(
                "labels and label_set need a text tower, and this server has none (CLIPFN_TEXT_MODEL, or a model \
                 folder with one)"
                    .into(),
            ));
        }
        Some(asked) => Some(asked.embed(service, deadline).await?),
        None => None,
    };

    let heads = service.pipeline.heads();
    let wants = Wants { pixels: true, scores: heads.is_some() };
    let (results, timings) = photo_results(state, service, &images, deadline, wants).await?;
    let signals = &state.settings.signals;
    let hashes: Vec<Option<u64>> =
        results.iter().map(|r| r.as_ref().ok().and_then(|s| s.pixels).map(|p| p.hash)).collect();
    let album = Album { duplicates: duplicate_groups(&hashes, signals.duplicate_bits) };
    let errors = results.iter().filter(|r| r.is_err()).count();
    let with_embedding = request.embedding.unwrap_or(true);
    let data = per_photo(&images, results, |index, image, result| match result {
        Ok(photo) => {
            let pixels = photo.pixels.expect("the pipeline measures pixel signals when asked");
            AnalyzeItem {
                index,
                image,
                labels: scored.as_ref().map(|scored| scored.best(&photo.embedding)),
                embedding: with_embedding.then_some(photo.embedding),
                quality: Some(Quality {
                    sharpness: pixels.sharpness,
                    blurry: pixels.sharpness < signals.blur_threshold,
                }),
                hash: Some(format!("{:016x}", pixels.hash)),
                scores: heads
                    .zip(photo.scores)
                    .map(|(heads, scores)| heads.names.iter().map(String::as_str).zip(scores).collect()),
                error: None,
            }
        }
        Err(error) => {
            let (embedding, labels, quality, hash, scores) = (None, None, None, None, None);
            AnalyzeItem { index, image, embedding, labels, quality, hash, scores, error: Some(error) }
        }
    });
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    let model = service.pipeline.model();
    let response = with_server_timing(
        AnalyzeResponse { model: &model.id, dim: model.dim, data, album, timings_ms: &timings_ms },
        &timings_ms,
    );
    Ok((response, Counts { images: images.len(), errors, ..Counts::default() }))
}
