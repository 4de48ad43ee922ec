//! `POST /v1/analyze`: every signal the album app derives from a photo, from one fetch and one
//! decode (the embedding, the labels, the sharpness, the perceptual hash, the heads' scores and the
//! faces), and the request's photos grouped into near-duplicates and people. Stored embeddings in place of photos get
//! the labels and the scores.

use std::time::Instant;

use axum::{extract::State, response::Response};

use super::{
    AppState,
    error::ApiError,
    labels,
    people::{KnownPeople, album_people, known_people},
    photos::{PhotoResult, photo_error, with_server_timing},
    request::{RequestBody, deadline, json_body},
    respond::{Answered, respond},
    schema::{CannotClassify, NotFound, Refusals},
    subjects::Subjects,
    types::{
        Album, AnalyzeItem, AnalyzeRequest, AnalyzeResponse, EventItem, FaceItem, LocationItem, Quality, TimingsMs,
    },
};
use crate::{
    album::{Timed, duplicate_groups, events},
    decode::{Location, TakenAt},
    model::RecognizerInfo,
    pipeline::Wants,
    text::TextError,
};

/// Every signal of a photo from one fetch and one decode
///
/// The embedding, labels (with `labels` or `label_set`), sharpness and blur, the perceptual hash,
/// the capture time and place (EXIF) and the upright size, the heads' scores, and the request's
/// near-duplicate groups. Stored `embeddings` in place of
/// `images` get the labels and scores only.
#[utoipa::path(
    post,
    path = "/v1/analyze",
    tag = "clipfn",
    request_body(content = AnalyzeRequest, examples(
        ("photos" = (value = json!({
            "images": ["album/7/a.jpg", "album/7/b.jpg", "album/7/c.jpg"], "label_set": "categories", "top_k": 3
        }))),
        ("no embeddings" = (value = json!({"images": ["album/7/a.jpg"], "embedding": false})))
    )),
    responses(
        (status = 200, description = "An item per photo or stored embedding, in order, and the album's groups",
            body = AnalyzeResponse, headers(("Server-Timing" = String, description = "The photos' stage timings"))),
        (status = 404, response = NotFound),
        (status = 501, response = CannotClassify),
        Refusals,
    )
)]
pub(super) async fn analyze(State(state): State<AppState>, body: RequestBody) -> Response {
    respond(&state, "analyze", |started| analyze_request(&state, body, started)).await
}

async fn analyze_request(state: &AppState, body: RequestBody, started: Instant) -> Answered {
    let (request, size): (AnalyzeRequest, _) = json_body(
        body,
        &state.settings,
        r#"{"images": ["key", ...]} (or "embeddings": [[...], ...]), optionally with "labels": [...] or "label_set": "NAME", "top_k", "embedding": false"#,
    )?;
    let subjects = Subjects::new(request.subjects, size, request.known_people.is_some(), &state.settings)?;
    let asked = labels::asked(request.labels, &state.settings)?;
    let service = state.ready_service()?;
    subjects.check_dim(service.pipeline.model().dim)?;
    let heads = service.pipeline.heads();
    // Labels need the text tower, as at /v1/classify: without one they are a named resource this
    // server lacks (404). Stored embeddings have only labels and scores to give, so asking
    // nothing of them is a bad request.
    if asked.is_some() && service.text.is_none() {
        return Err(ApiError::Text(TextError::NotConfigured));
    }
    let face_models = service.pipeline.faces().is_some();
    if request.faces == Some(true) && (!face_models || subjects.are_stored()) {
        return Err(ApiError::BadRequest(
            if face_models {
                "faces need the photos, not stored embeddings"
            } else {
                "faces need face models (CLIPFN_FACE_MODEL), and this server has none"
            }
            .into(),
        ));
    }
    let faces_info = service.pipeline.faces();
    let known = match (request.known_people, faces_info) {
        (None, _) => KnownPeople::none(),
        (Some(_), _) if subjects.are_stored() || request.faces == Some(false) => {
            return Err(ApiError::BadRequest("known_people need the photos' faces".into()));
        }
        (Some(_), None) => {
            return Err(ApiError::BadRequest(
                "known_people need face models (CLIPFN_FACE_MODEL), and this server has none".into(),
            ));
        }
        (Some(given), Some((_, recognizer))) => {
            known_people(given, request.recognizer.as_deref(), recognizer, &state.settings.faces)?
        }
    };
    if subjects.are_stored() && asked.is_none() && heads.is_none() {
        return Err(ApiError::BadRequest(
            "stored embeddings get labels and head scores only: name labels or a label_set (this server has no \
             heads, CLIPFN_HEADS)"
                .into(),
        ));
    }
    let deadline = deadline(&state.settings);
    // Labels before photos, as /v1/classify: a bad set answers before any fetch.
    let scored = match &asked {
        Some(asked) => Some(asked.embed(service, deadline).await?),
        None => None,
    };

    let photos = !subjects.are_stored();
    let wants = Wants {
        pixels: photos,
        scores: heads.is_some(),
        faces: photos && face_models && request.faces != Some(false),
        face_min_score: None,
    };
    let (results, timings) = subjects.results(state, service, deadline, wants).await?;
    let signals = &state.settings.signals;
    let with_location = request.location != Some(false);
    let recognizer = faces_info.filter(|_| wants.faces).map(|(_, recognizer)| recognizer);
    let album = photos.then(|| album(&results, state, recognizer.map(|r| (r, &known)), with_location));
    let counts = subjects.counts(&results);
    // A stored embedding is the caller's own: it is not sent back.
    let with_embedding = request.embedding.unwrap_or(true) && !subjects.are_stored();
    let data = subjects.answers(results, |index, image, result| match result {
        Ok(photo) => {
            let (faces, faces_left_out, faces_error) = match photo.faces {
                Some(Ok(found)) => {
                    let left_out = Some(found.left_out).filter(|&n| n > 0);
                    let recognizer = recognizer.map_or("", |r| r.id.as_str());
                    (
                        Some(found.faces.into_iter().map(|face| FaceItem::new(face, recognizer)).collect()),
                        left_out,
                        None,
                    )
                }
                Some(Err(e)) => (None, None, Some(photo_error(index, image.as_deref().unwrap_or_default(), &e))),
                None => (None, None, None),
            };
            let metadata = photo.metadata.unwrap_or_default();
            let (width, height) = photo.size.unzip();
            AnalyzeItem {
                index,
                labels: scored.as_ref().map(|scored| scored.best(&photo.embedding)),
                embedding: with_embedding.then_some(photo.embedding),
                quality: photo.pixels.map(|pixels| Quality {
                    sharpness: pixels.sharpness,
                    blurry: pixels.sharpness < signals.blur_threshold,
                }),
                hash: photo.pixels.map(|pixels| format!("{:016x}", pixels.hash)),
                taken_at: metadata.taken_at.as_ref().map(TakenAt::iso8601),
                location: metadata.location.filter(|_| with_location).map(LocationItem::from),
                width,
                height,
                scores: heads
                    .zip(photo.scores)
                    .map(|(heads, scores)| heads.names.iter().map(String::as_str).zip(scores).collect()),
                faces,
                faces_left_out,
                faces_error,
                image,
                error: None,
            }
        }
        Err(error) => {
            let (embedding, labels, quality, hash, scores) = (None, None, None, None, None);
            let (taken_at, location, width, height) = (None, None, None, None);
            let (faces, faces_left_out, faces_error) = (None, None, None);
            AnalyzeItem {
                index,
                image,
                embedding,
                labels,
                quality,
                hash,
                taken_at,
                location,
                width,
                height,
                scores,
                faces,
                faces_left_out,
                faces_error,
                error: Some(error),
            }
        }
    });
    let timings_ms = TimingsMs::new(&timings, started.elapsed());
    let model = service.pipeline.model();
    let response = with_server_timing(
        AnalyzeResponse { model: &model.id, dim: model.dim, data, album, timings_ms: &timings_ms },
        &timings_ms,
    );
    Ok((response, counts))
}

/// The request's groupings: near-duplicates by hash and, with faces (by `recognizer`, with the
/// request's known people), people. Photos that failed (and faces a model tripped on) take part
/// in neither.
fn album(
    results: &[PhotoResult],
    state: &AppState,
    recognizer: Option<(&RecognizerInfo, &KnownPeople)>,
    with_location: bool,
) -> Album {
    let hashes: Vec<Option<u64>> =
        results.iter().map(|r| r.as_ref().ok().and_then(|s| s.pixels).map(|p| p.hash)).collect();
    let duplicates = duplicate_groups(&hashes, state.settings.signals.duplicate_bits);
    let events = album_events(results, state, with_location);
    let grouped = recognizer.map(|(recognizer, known)| album_people(results, known, recognizer, &state.settings.faces));
    let (people, unsure) = grouped.unzip();
    Album { duplicates, events, people, unsure }
}

/// The request's events. Their clock: the instants in UTC when every photo with a time has an
/// offset; otherwise every photo's wall-clock time, offset or not, since a local time has no
/// instant and a camera without a zone is set to the clock where it is (docs/design.md, "Events").
fn album_events(results: &[PhotoResult], state: &AppState, with_location: bool) -> Vec<EventItem> {
    let timed: Vec<(usize, &TakenAt, Option<Location>)> = results
        .iter()
        .enumerate()
        .filter_map(|(index, r)| {
            let metadata = r.as_ref().ok()?.metadata.as_ref()?;
            Some((index, metadata.taken_at.as_ref()?, metadata.location))
        })
        .collect();
    let instants = timed.iter().all(|(_, taken, _)| taken.offset_minutes.is_some());
    let photos: Vec<Timed> = timed
        .iter()
        .map(|&(index, taken, place)| Timed {
            index,
            at_ms: match taken.utc_millis() {
                Some(utc) if instants => utc,
                _ => taken.local.and_utc().timestamp_millis(),
            },
            place: place.map(|place| (place.lat, place.lon)),
        })
        .collect();
    let signals = &state.settings.signals;
    let by_index = |index: usize| timed.iter().find(|(i, _, _)| *i == index).expect("an event holds timed photos").1;
    events(&photos, (signals.event_gap_s * 1000) as i64, signals.event_distance_m)
        .into_iter()
        .map(|event| EventItem {
            start: by_index(event.photos[0]).iso8601(),
            end: by_index(*event.photos.last().expect("an event has photos")).iso8601(),
            centre: event.centre.filter(|_| with_location).map(|(lat, lon)| LocationItem { lat, lon, alt: None }),
            photos: event.photos,
        })
        .collect()
}
