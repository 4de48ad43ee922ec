//! `POST /v1/analyze`: every signal the album app derives from a photo, from one fetch and one
//! decode (the embedding, the labels, the sharpness, the perceptual hash, the heads' scores, the
//! faces, the text and the objects), and the request's album (`album`). Stored embeddings in place of photos get the labels
//! and the scores.

use std::{borrow::Cow, time::Instant};

use axum::{extract::State, response::Response};

use super::{
    AppState,
    album::{AlbumInput, album_stage},
    error::{ApiError, ErrorBody},
    labels::{self, Scored},
    people::{AlbumFaces, KnownPeople, known_people, same_model},
    pets::{AlbumPets, known_pets},
    photos::{photo_error, with_server_timing},
    request::{RequestBody, deadline, json_body},
    respond::{Answered, respond},
    schema::{CannotClassify, NotFound, Refusals},
    subjects::Subjects,
    types::{
        AnalyzeItem, AnalyzeRequest, AnalyzeResponse, FaceItem, KnownPerson, KnownPet, LocationItem, ObjectItem,
        OcrItem, Quality, TimingsMs, millis,
    },
};
use crate::{
    decode::TakenAt,
    model::HeadsInfo,
    pipeline::{ItemError, Pipeline, Signals, SquareFor, Wants},
    service::Service,
    settings::Settings,
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
    let asked_of = DetectorsAsked {
        faces: request.faces,
        ocr: request.ocr,
        objects: request.objects,
        recognizer: request.recognizer,
        known_people: request.known_people,
        known_pets: request.known_pets,
        known_pets_model: request.known_pets_model,
    };
    let (known, known_pets) = checked(asked_of, (stored, asked.is_some()), service, &state.settings)?;
    let faces_info = service.pipeline.faces();
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
    let wants = photo_wants(&service.pipeline, (photos, embedding), [request.faces, request.ocr, request.objects]);
    let (results, timings) = subjects.results(state, service, deadline, wants).await?;
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
    let answering = Answering {
        scored: scored.as_ref(),
        with_embedding,
        blur_threshold: state.settings.signals.blur_threshold,
        heads,
        recognizer: recognizer.map_or("", |r| r.id.as_str()),
        with_location,
        with_pet_embeddings: request.pet_embeddings == Some(true),
    };
    let data = subjects.answers(results, |index, image, result| match result {
        Ok(photo) => answering.item(index, image, photo),
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

/// How a request's photos are answered: what it asked for, and what the server has.
struct Answering<'a> {
    scored: Option<&'a Scored<'a>>,
    with_embedding: bool,
    blur_threshold: f64,
    heads: Option<&'a HeadsInfo>,
    /// The recognizer's id, where faces were found.
    recognizer: &'a str,
    with_location: bool,
    with_pet_embeddings: bool,
}

impl<'a> Answering<'a> {
    /// One answered photo's item: its signals, and each detector's findings or its error.
    fn item(&self, index: usize, image: Option<Cow<'a, str>>, photo: Signals) -> AnalyzeItem<'a> {
        let failed = |e: &ItemError| photo_error(index, image.as_deref().unwrap_or_default(), e);
        let (faces, faces_left_out, faces_error) = answered(photo.faces, failed, |found| {
            (found.faces.into_iter().map(|face| FaceItem::new(face, self.recognizer)).collect(), found.left_out)
        });
        let (ocr, ocr_left_out, ocr_error) =
            answered(photo.ocr, failed, |found| (found.lines.into_iter().map(OcrItem::from).collect(), found.left_out));
        let (objects, objects_left_out, objects_error) = answered(photo.objects, failed, |found| {
            let items = found.objects.into_iter().map(|object| ObjectItem::new(object, self.with_pet_embeddings));
            (items.collect(), found.left_out)
        });
        let metadata = photo.metadata.unwrap_or_default();
        let (width, height) = photo.size.unzip();
        AnalyzeItem {
            index,
            labels: self.scored.zip(photo.embedding.as_deref()).map(|(scored, e)| scored.best(e)),
            embedding: photo.embedding.filter(|_| self.with_embedding),
            quality: photo
                .pixels
                .map(|pixels| Quality { sharpness: pixels.sharpness, blurry: pixels.sharpness < self.blur_threshold }),
            hash: photo.pixels.map(|pixels| format!("{:016x}", pixels.hash)),
            taken_at: metadata.taken_at.as_ref().map(TakenAt::iso8601),
            taken_at_offset: metadata.taken_at.as_ref().and_then(TakenAt::offset_source),
            location: metadata.location.filter(|_| self.with_location).map(LocationItem::from),
            width,
            height,
            scores: self
                .heads
                .zip(photo.scores)
                .map(|(heads, scores)| heads.names.iter().map(String::as_str).zip(scores).collect()),
            faces,
            faces_left_out,
            faces_error,
            ocr,
            ocr_left_out,
            ocr_error,
            objects,
            objects_left_out,
            objects_error,
            image,
            error: None,
        }
    }
}

/// A detector's part of a photo's answer, where the request asked for it: its findings as `items`
/// makes them (with how many it left out, absent when none), or its error.
fn answered<T, I>(
    found: Option<Result<T, ItemError>>,
    failed: impl Fn(&ItemError) -> ErrorBody,
    items: impl FnOnce(T) -> (Vec<I>, usize),
) -> (Option<Vec<I>>, Option<usize>, Option<ErrorBody>) {
    match found {
        Some(Ok(found)) => {
            let (items, left_out) = items(found);
            (Some(items), Some(left_out).filter(|&n| n > 0), None)
        }
        Some(Err(e)) => (None, None, Some(failed(&e))),
        None => (None, None, None),
    }
}

/// What a request asks of the detectors, and whom it knows.
struct DetectorsAsked {
    faces: Option<bool>,
    ocr: Option<bool>,
    objects: Option<bool>,
    recognizer: Option<String>,
    known_people: Option<Vec<KnownPerson>>,
    known_pets: Option<Vec<KnownPet>>,
    known_pets_model: Option<String>,
}

/// `asked` held to what the server has (`stored`: the request's subjects are stored embeddings,
/// which have no pixels, and have only labels, where `labels` are asked, and the heads' scores to
/// give): its known people and pets, checked.
fn checked(
    asked: DetectorsAsked,
    (stored, labels): (bool, bool),
    service: &Service,
    settings: &Settings,
) -> Result<(KnownPeople, KnownPeople), ApiError> {
    let pipeline = &service.pipeline;
    let objects = pipeline.objects().is_some();
    detector_asked(asked.faces, pipeline.faces().is_some(), stored, "faces", "face models (CLIPFN_FACE_MODEL)")?;
    detector_asked(asked.ocr, pipeline.ocr().is_some(), stored, "ocr", "OCR models (CLIPFN_OCR_MODEL)")?;
    detector_asked(asked.objects, objects, stored, "objects", "an object model (CLIPFN_OBJECT_MODEL)")?;
    let faces_info = pipeline.faces();
    if let Some((_, recognizer)) = faces_info {
        same_model("recognizer", asked.recognizer.as_deref(), ("recognizer", &recognizer.id))?;
    }
    let people = match (asked.known_people, faces_info) {
        (None, _) => KnownPeople::none(),
        (Some(_), _) if stored || asked.faces == Some(false) => {
            return Err(ApiError::BadRequest("known_people need the photos' faces".into()));
        }
        (Some(_), None) => {
            return Err(ApiError::BadRequest(
                "known_people need face models (CLIPFN_FACE_MODEL), and this server has none".into(),
            ));
        }
        (Some(given), Some((_, recognizer))) => known_people(given, recognizer, &settings.faces)?,
    };
    let model = pipeline.model();
    same_model("known_pets_model", asked.known_pets_model.as_deref(), ("image model", &model.id))?;
    let pets = match asked.known_pets {
        None => KnownPeople::none(),
        Some(_) if stored || asked.objects == Some(false) || !objects => {
            return Err(ApiError::BadRequest(
                "known_pets need the photos' objects, and an object model (CLIPFN_OBJECT_MODEL)".into(),
            ));
        }
        Some(given) => known_pets(given, model.dim, &settings.faces)?,
    };
    if stored && !labels && pipeline.heads().is_none() {
        return Err(ApiError::BadRequest(
            "stored embeddings get labels and head scores only: name labels or a label_set (this server has no \
             heads, CLIPFN_HEADS)"
                .into(),
        ));
    }
    Ok((people, pets))
}

/// What `/v1/analyze` wants of its photos (when it has `photos`, not stored embeddings): `embedding`'s
/// squares, the pixel signals, the heads' scores where there are heads, and each detector the
/// server has unless the request said `false` (`[faces, ocr, objects]`).
fn photo_wants(pipeline: &Pipeline, (photos, embedding): (bool, SquareFor), asked: [Option<bool>; 3]) -> Wants {
    let [faces, ocr, objects] = asked.map(|asked| photos && asked != Some(false));
    let all = pipeline.wants_all(embedding);
    let objects = objects && all.objects;
    Wants { pixels: photos, faces: faces && all.faces, ocr: ocr && all.ocr, objects, pets: objects, ..all }
}
