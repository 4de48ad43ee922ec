//! `POST /v1/analyze`: every signal the album app derives from a photo, from one fetch and one
//! decode (the embedding, the labels, the sharpness, the perceptual hash, the heads' scores, the
//! faces, the text and the objects), and the request's album (`album`). Stored embeddings in place of photos get the labels
//! and the scores.

use std::time::Instant;

use axum::{extract::State, response::Response};

use super::{
    AppState,
    album::{AlbumInput, album_stage},
    error::ApiError,
    labels,
    people::{AlbumFaces, KnownPeople, known_people, same_recognizer},
    pets::{AlbumPets, known_pets},
    photos::{photo_error, with_server_timing},
    request::{RequestBody, deadline, json_body},
    respond::{Answered, respond},
    schema::{CannotClassify, NotFound, Refusals},
    subjects::Subjects,
    types::{
        AnalyzeItem, AnalyzeRequest, AnalyzeResponse, FaceItem, LocationItem, ObjectItem, OcrItem, Quality, TimingsMs,
        millis,
    },
};
use crate::{
    decode::TakenAt,
    pipeline::{SquareFor, Wants},
    text::TextError,
};

/// Every signal of a photo from one fetch and one decode
///
/// The embedding, labels (with `labels` or `label_set`), sharpness and blur, the perceptual hash,
/// the capture time and place (EXIF) and the upright size, the heads' scores, faces, text (OCR),
/// and the request's album: duplicates and bursts with their best shots, events, the cover, people.
/// Stored `embeddings` in place of `images` get the labels and scores only.
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
    let stored = subjects.are_stored();
    let face_models = service.pipeline.faces().is_some();
    detector_asked(request.faces, face_models, stored, "faces", "face models (CLIPFN_FACE_MODEL)")?;
    detector_asked(request.ocr, service.pipeline.ocr().is_some(), stored, "ocr", "OCR models (CLIPFN_OCR_MODEL)")?;
    let objects = service.pipeline.objects().is_some();
    detector_asked(request.objects, objects, stored, "objects", "an object model (CLIPFN_OBJECT_MODEL)")?;
    let faces_info = service.pipeline.faces();
    if let Some((_, recognizer)) = faces_info {
        same_recognizer(request.recognizer.as_deref(), recognizer)?;
    }
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
        (Some(given), Some((_, recognizer))) => known_people(given, recognizer, &state.settings.faces)?,
    };
    let known_pets = match request.known_pets {
        None => KnownPeople::none(),
        Some(_) if stored || request.objects == Some(false) || !objects => {
            return Err(ApiError::BadRequest(
                "known_pets need the photos' objects, and an object model (CLIPFN_OBJECT_MODEL)".into(),
            ));
        }
        Some(given) => known_pets(given, service.pipeline.model().dim, &state.settings.faces)?,
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
    // A stored embedding is the caller's own: it is not sent back.
    let with_embedding = request.embedding.unwrap_or(true) && !subjects.are_stored();
    // Every photo's embedding when the answer carries it or labels or the heads read it; else
    // only a photo with a capture time needs one, for the album's bursts (a photo without one is
    // in no burst). Duplicates, events, people, the best shots and the cover read no embedding
    // (the best shot reads the heads' scores only where there are heads).
    let embedding =
        if with_embedding || asked.is_some() || heads.is_some() { SquareFor::Every } else { SquareFor::Timed };
    let wants = Wants {
        embedding,
        pixels: photos,
        scores: heads.is_some(),
        faces: photos && face_models && request.faces != Some(false),
        face_min_score: None,
        ocr: photos && service.pipeline.ocr().is_some() && request.ocr != Some(false),
        ocr_min_score: None,
        ocr_box_min_score: None,
        objects: photos && objects && request.objects != Some(false),
        pets: photos && objects && request.objects != Some(false),
    };
    let with_pet_embeddings = request.pet_embeddings == Some(true);
    let (results, timings) = subjects.results(state, service, deadline, wants).await?;
    let signals = &state.settings.signals;
    let with_location = request.location != Some(false);
    let recognizer = faces_info.filter(|_| wants.faces).map(|(_, recognizer)| recognizer);
    let (album, album_ms) = if photos {
        let faces = recognizer.map(|r| AlbumFaces::new(&results, known, r, &state.settings.faces));
        let pets =
            wants.pets.then(|| AlbumPets::new(&results, known_pets, &state.settings.objects, &state.settings.faces));
        let input = AlbumInput::new(&results, state, heads, (faces, pets), with_location);
        let (album, wall) = album_stage(state, input, deadline).await;
        (Some(album), wall)
    } else {
        (None, None)
    };
    let counts = subjects.counts(&results);
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
            let (ocr, ocr_left_out, ocr_error) = match photo.ocr {
                Some(Ok(found)) => (
                    Some(found.lines.into_iter().map(OcrItem::from).collect()),
                    Some(found.left_out).filter(|&n| n > 0),
                    None,
                ),
                Some(Err(e)) => (None, None, Some(photo_error(index, image.as_deref().unwrap_or_default(), &e))),
                None => (None, None, None),
            };
            let (objects, objects_error) = match photo.objects {
                Some(Ok(found)) => {
                    (Some(found.into_iter().map(|object| ObjectItem::new(object, with_pet_embeddings)).collect()), None)
                }
                Some(Err(e)) => (None, Some(photo_error(index, image.as_deref().unwrap_or_default(), &e))),
                None => (None, None),
            };
            let metadata = photo.metadata.unwrap_or_default();
            let (width, height) = photo.size.unzip();
            AnalyzeItem {
                index,
                labels: scored.as_ref().zip(photo.embedding.as_deref()).map(|(scored, e)| scored.best(e)),
                embedding: photo.embedding.filter(|_| with_embedding),
                quality: photo.pixels.map(|pixels| Quality {
                    sharpness: pixels.sharpness,
                    blurry: pixels.sharpness < signals.blur_threshold,
                }),
                hash: photo.pixels.map(|pixels| format!("{:016x}", pixels.hash)),
                taken_at: metadata.taken_at.as_ref().map(TakenAt::iso8601),
                taken_at_offset: metadata.taken_at.as_ref().and_then(TakenAt::offset_source),
                location: metadata.location.filter(|_| with_location).map(LocationItem::from),
                width,
                height,
                scores: heads
                    .zip(photo.scores)
                    .map(|(heads, scores)| heads.names.iter().map(String::as_str).zip(scores).collect()),
                faces,
                faces_left_out,
                faces_error,
                ocr,
                ocr_left_out,
                ocr_error,
                objects,
                objects_error,
                image,
                error: None,
            }
        }
        Err(error) => AnalyzeItem::failed(index, image, error),
    });
    let timings_ms = TimingsMs { album: album_ms.map(millis), ..TimingsMs::new(&timings, started.elapsed()) };
    let model = service.pipeline.model();
    let response = with_server_timing(
        AnalyzeResponse { model: &model.id, dim: model.dim, data, album, timings_ms: &timings_ms },
        &timings_ms,
    );
    Ok((response, counts))
}

/// A detector's field (`what`) set to `true` needs its models (`needs`) loaded and the photos:
/// stored embeddings have no pixels.
fn detector_asked(asked: Option<bool>, loaded: bool, stored: bool, what: &str, needs: &str) -> Result<(), ApiError> {
    match (asked, loaded) {
        (Some(true), false) => {
            Err(ApiError::BadRequest(format!("\"{what}\": true needs {needs}, and this server has none")))
        }
        (Some(true), true) if stored => {
            Err(ApiError::BadRequest(format!("\"{what}\": true needs the photos, not stored embeddings")))
        }
        _ => Ok(()),
    }
}
