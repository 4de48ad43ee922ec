//! Immich's machine-learning protocol (v2.5.6: its client `machine-learning.repository.ts`, its
//! service `immich_ml/main.py`), beside clipfn's own API on the same worker and limits, so that an
//! Immich server uses clipfn by its `IMMICH_MACHINE_LEARNING_URL` alone.
//!
//! - `GET /ping` answers `pong` while this instance can take work (503 with `Retry-After` while it
//!   loads or drains, so that Immich prefers another URL meanwhile);
//! - `GET /` answers `{"message": "Immich ML"}`;
//! - `POST /predict` takes a multipart form: `entries` (JSON: task -> model type -> `modelName` and
//!   `options`) and either `image` (the photo's bytes) or `text`. Its answer is keyed by task.
//!
//! clipfn holds one image tower, one text tower and one face pair, loaded at start-up: a request
//! naming another model is answered by the one held, with a warning in the log (docs/deploy.md,
//! "As Immich's machine-learning server", says why and what differs from Immich ML).

mod answer;

use std::{collections::BTreeMap, time::Instant};

use axum::{
    Json,
    body::Bytes,
    extract::{Multipart, State, multipart::MultipartRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use self::answer::{ImmichFace, ImmichOcr, NotFinite, Prediction, vector};
use super::{
    AppState,
    error::ApiError,
    request::{deadline, string_list},
    respond::{Answered, Counts, respond},
    schema::{NotFound, Refusals, Unavailable, Unprocessable},
};
use crate::{
    pipeline::{ItemCode, Signals, SquareFor, Wants},
    service::Service,
};

/// Immich ML's greeting, which Immich's tools look for.
#[utoipa::path(get, path = "/", tag = "immich", responses(
    (status = 200, description = "Immich ML's greeting", body = Object, example = json!({"message": "Immich ML"}))
))]
pub(super) async fn root() -> Json<Value> {
    Json(json!({"message": "Immich ML"}))
}

/// Immich's availability check: `pong` while this instance takes work.
#[utoipa::path(get, path = "/ping", tag = "immich", responses(
    (status = 200, description = "This instance takes work", body = String, content_type = "text/plain", example = "pong"),
    (status = 503, response = Unavailable),
))]
pub(super) async fn ping(State(state): State<AppState>) -> Response {
    match state.ready_service() {
        Ok(_) => "pong".into_response(),
        Err(e) => e.into_response(),
    }
}

/// One photo or one text, for the tasks `entries` names, answered as Immich's client reads it.
#[utoipa::path(
    post,
    path = "/predict",
    tag = "immich",
    request_body(content = PredictForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "The tasks asked, keyed by task", body = Prediction),
        (status = 404, response = NotFound),
        (status = 422, response = Unprocessable),
        Refusals,
    )
)]
pub(super) async fn predict(State(state): State<AppState>, form: Result<Multipart, MultipartRejection>) -> Response {
    respond(&state, "predict", |_started: Instant| predict_request(&state, form)).await
}

/// One entry of `entries`: the model Immich asks for and its options.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    model_name: String,
    #[serde(default)]
    options: Map<String, Value>,
}

/// What a request asks, from its `entries`.
#[derive(Debug, Default, PartialEq)]
struct Tasks {
    visual: bool,
    textual: bool,
    faces: bool,
    /// The faces' minimum detector score (`detection.options.minScore`); none: the detector's own.
    face_min_score: Option<f32>,
    ocr: bool,
    /// The lines' minimum box score (`ocr.detection.options.minScore`); none: DB's own.
    ocr_box_min_score: Option<f32>,
    /// The lines' minimum text score (`ocr.recognition.options.minScore`); none: CLIPFN_OCR_MIN_SCORE.
    ocr_min_score: Option<f32>,
}

/// The form's parts that Immich sends: `entries`, and `image` or `text`.
#[derive(Default, utoipa::ToSchema)]
struct PredictForm {
    /// JSON: task -> model type -> `{"modelName", "options"}`, e.g.
    /// `{"clip": {"visual": {"modelName": "ViT-B-32__openai"}}}`. Text that is not such JSON is
    /// refused with 422, as Immich ML refuses it.
    #[schema(required = true, value_type = String, min_length = 2, pattern = r"^\s*\{", content_media_type = "application/json")]
    entries: Option<String>,
    /// The photo's bytes, within CLIPFN_MAX_IMAGE_BYTES.
    #[schema(value_type = Option<String>, format = Binary)]
    image: Option<Bytes>,
    /// A text to embed (`clip.textual`).
    text: Option<String>,
}

async fn predict_request(state: &AppState, form: Result<Multipart, MultipartRejection>) -> Answered {
    let limit = super::request::transport_body_limit(&state.settings);
    let form = read_form(form?).await.map_err(|e| form_error(e, limit))?;
    let entries = form.entries.ok_or_else(|| ApiError::BadEntries("the form has no 'entries' field".into()))?;
    let service = state.ready_service()?;
    let tasks = tasks(&entries, service)?;
    let deadline = deadline(&state.settings);
    match (form.image, form.text) {
        (Some(image), _) => {
            if tasks.textual {
                return Err(ApiError::BadRequest("clip.textual takes a 'text' field, not an image".into()));
            }
            // A face-only or OCR-only job never runs the image tower.
            let wants = Wants {
                embedding: if tasks.visual { SquareFor::Every } else { SquareFor::NoPhoto },
                faces: tasks.faces,
                face_min_score: tasks.face_min_score,
                ocr: tasks.ocr,
                ocr_min_score: tasks.ocr_min_score,
                ocr_box_min_score: tasks.ocr_box_min_score,
                ..Wants::default()
            };
            let (result, _) = service.pipeline.embed_carried(&image, deadline, wants).await?;
            let signals = result.map_err(|e| ApiError::Photo(e.code_and_message("the image part")))?;
            let counts = Counts { images: 1, ..Counts::default() };
            Ok((Json(photo_answer(signals, &tasks)?).into_response(), counts))
        }
        (None, Some(text)) => {
            if tasks.visual || tasks.faces || tasks.ocr {
                return Err(ApiError::BadRequest(
                    "clip.visual, facial-recognition and ocr take an 'image' field".into(),
                ));
            }
            let texts = string_list(Value::Array(vec![Value::String(text)]), "text", &state.settings)?;
            let text = state.ready_text()?;
            let embedded = text.embed_texts(&texts, Some(deadline)).await?;
            let clip = vector(&embedded[0].embedding).map_err(|e| not_finite(e, "the text"))?;
            let answer = Prediction { clip: Some(clip), ..Prediction::default() };
            Ok((Json(answer).into_response(), Counts { texts: 1, ..Counts::default() }))
        }
        (None, None) => Err(ApiError::BadRequest("either image or text must be provided".into())),
    }
}

/// The form's fields; others are passed over, and a repeated field keeps its last value.
async fn read_form(mut form: Multipart) -> Result<PredictForm, FormError> {
    let mut read = PredictForm::default();
    while let Some(field) = form.next_field().await? {
        let name = field.name().unwrap_or_default().to_string();
        let target = match name.as_str() {
            "entries" => &mut read.entries,
            "text" => &mut read.text,
            "image" => {
                read.image = Some(field.bytes().await?);
                continue;
            }
            _ => continue,
        };
        let bytes = field.bytes().await?;
        *target = Some(String::from_utf8(bytes.to_vec()).map_err(|_| FormError::NotUtf8(name))?);
    }
    Ok(read)
}

/// Why the form could not be read.
#[derive(Debug, thiserror::Error)]
enum FormError {
    #[error(transparent)]
    Multipart(#[from] axum::extract::multipart::MultipartError),
    #[error("the form's '{0}' field is not UTF-8")]
    NotUtf8(String),
}

fn form_error(e: FormError, limit: usize) -> ApiError {
    match e {
        FormError::Multipart(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::BodyTooLarge(limit),
        FormError::Multipart(e) => ApiError::BadRequest(format!("the form could not be read: {}", e.body_text())),
        e @ FormError::NotUtf8(_) => ApiError::BadRequest(e.to_string()),
    }
}

/// The tasks `entries` names. A malformed `entries` is a 422, as Immich ML answers it; a task this
/// server has no model for is a 400 (or 404 for text, as `/v1/embed` answers). A model name that
/// is not the one held is answered by the one held, and said in the log.
fn tasks(entries: &str, service: &Service) -> Result<Tasks, ApiError> {
    let parsed: BTreeMap<String, BTreeMap<String, Entry>> =
        serde_json::from_str(entries).map_err(|e| bad_entries(e.to_string()))?;
    let mut asked = Asked::default();
    for (task, types) in &parsed {
        for (kind, entry) in types {
            match asked.add(task, kind, entry, service)? {
                Some(held) if clean_name(&entry.model_name) != held => tracing::warn!(
                    asked = %entry.model_name, held = %held,
                    "{task}.{kind} names a model this server does not hold; the one it holds answers"
                ),
                Some(_) => {}
                None => return Err(not_held(task)),
            }
        }
    }
    let Asked { tasks, recognition, reading } = asked;
    if tasks.faces != recognition {
        return Err(ApiError::BadRequest("facial-recognition takes both its detection and its recognition".into()));
    }
    if tasks.ocr != reading {
        return Err(ApiError::BadRequest("ocr takes both its detection and its recognition".into()));
    }
    if tasks == Tasks::default() {
        return Err(bad_entries("it names no task".into()));
    }
    Ok(tasks)
}

/// The tasks read so far, and the halves of the two-part tasks that `Tasks` does not keep.
#[derive(Default)]
struct Asked {
    tasks: Tasks,
    recognition: bool,
    reading: bool,
}

impl Asked {
    /// Takes in one entry; the name of the model this server holds for it, if any.
    fn add(&mut self, task: &str, kind: &str, entry: &Entry, service: &Service) -> Result<Option<String>, ApiError> {
        let tasks = &mut self.tasks;
        Ok(match (task, kind) {
            ("clip", "visual") => {
                tasks.visual = true;
                Some(service.pipeline.model().id.clone())
            }
            ("clip", "textual") => {
                tasks.textual = true;
                service.text.as_ref().map(|text| text.model().id.clone())
            }
            ("facial-recognition", "detection") => {
                tasks.face_min_score = min_score(entry)?;
                tasks.faces = true;
                service.pipeline.faces().map(|(detector, _)| folder_of(&detector.file))
            }
            ("facial-recognition", "recognition") => {
                self.recognition = true;
                service.pipeline.faces().map(|(_, recognizer)| folder_of(&recognizer.file))
            }
            ("ocr", "detection") => {
                tasks.ocr_box_min_score = min_score(entry)?;
                tasks.ocr = true;
                let ocr = service.pipeline.ocr();
                let asked = entry.options.get("maxResolution").and_then(Value::as_u64);
                if let Some((asked, held)) = asked.zip(ocr.map(|ocr| ocr.resolution))
                    && asked != u64::from(held)
                {
                    tracing::warn!(
                        asked,
                        held,
                        "ocr.detection asks another maxResolution; CLIPFN_OCR_RESOLUTION's answers"
                    );
                }
                ocr.map(|ocr| folder_of(&ocr.detector))
            }
            ("ocr", "recognition") => {
                tasks.ocr_min_score = min_score(entry)?;
                self.reading = true;
                service.pipeline.ocr().map(|ocr| folder_of(&ocr.recognizer))
            }
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "this server answers clip (visual, textual), facial-recognition (detection, recognition) and \
                     ocr (detection, recognition), not {task}.{kind}"
                )));
            }
        })
    }
}

/// An entry's `minScore` option, where it gives one.
fn min_score(entry: &Entry) -> Result<Option<f32>, ApiError> {
    match entry.options.get("minScore") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(Some(n.as_f64().unwrap_or_default() as f32)),
        Some(other) => Err(bad_entries(format!("minScore must be a number, not {other}"))),
    }
}

fn bad_entries(why: String) -> ApiError {
    ApiError::BadEntries(format!("entries must be JSON like {EXAMPLE}: {why}"))
}

/// A task this server holds no model for.
fn not_held(task: &str) -> ApiError {
    match task {
        "clip" => ApiError::Text(crate::text::TextError::NotConfigured),
        "ocr" => ApiError::BadRequest("ocr needs OCR models (CLIPFN_OCR_MODEL), and this server has none".into()),
        _ => ApiError::BadRequest(
            "facial-recognition needs face models (CLIPFN_FACE_MODEL), and this server has none".into(),
        ),
    }
}

const EXAMPLE: &str = r#"{"clip": {"visual": {"modelName": "ViT-B-32__openai"}}}"#;

/// A model name as Immich ML turns it into a folder name: the last `/` part, with `:` and `\`
/// made `_` and `.` dropped.
fn clean_name(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    last.chars().filter(|&c| c != '.').map(|c| if c == ':' || c == '\\' { '_' } else { c }).collect()
}

/// The model folder a face or OCR model's file lies in (`<folder>/detection/model.onnx`): the name
/// Immich knows it by.
fn folder_of(file: &str) -> String {
    let parts: Vec<&str> = file.trim_end_matches('/').rsplit('/').collect();
    parts.get(2).or(parts.first()).map_or_else(String::new, |name| (*name).to_string())
}

/// A value Immich's answer cannot carry, as the error the request gets (500 `inference_failed`:
/// the models misbehaved on `what`).
fn not_finite(e: NotFinite, what: &str) -> ApiError {
    tracing::warn!(error = %e, "{what}: an answer Immich cannot read");
    ApiError::Photo((ItemCode::InferenceFailed, format!("{e} for {what}; the answer cannot carry it")))
}

/// A photo's answer, keyed by task, with the upright photo's size.
fn photo_answer(signals: Signals, tasks: &Tasks) -> Result<Prediction, ApiError> {
    let (width, height) = signals.size.unwrap_or_default();
    let faces = match signals.faces {
        Some(faces) => {
            let faces = faces.map_err(|e| ApiError::Photo(e.code_and_message("the image part")))?;
            let faces: Result<Vec<ImmichFace>, _> = faces.faces.iter().map(ImmichFace::try_from).collect();
            Some(faces.map_err(|e| not_finite(e, "the image part"))?)
        }
        None => None,
    };
    let ocr = match signals.ocr {
        Some(ocr) => {
            let ocr = ocr.map_err(|e| ApiError::Photo(e.code_and_message("the image part")))?;
            Some(ImmichOcr::new(&ocr, (width, height)).map_err(|e| not_finite(e, "the image part"))?)
        }
        None => None,
    };
    // Computed only where clip.visual asked for it.
    let clip = signals
        .embedding
        .as_deref()
        .filter(|_| tasks.visual)
        .map(vector)
        .transpose()
        .map_err(|e| not_finite(e, "the image part"))?;
    Ok(Prediction { clip, faces, ocr, image_height: Some(height), image_width: Some(width) })
}

impl From<MultipartRejection> for ApiError {
    fn from(e: MultipartRejection) -> Self {
        ApiError::BadEntries(format!("the body must be a multipart form with 'entries': {}", e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cleaned_as_immich_ml_cleans_them() {
        assert_eq!(clean_name("immich-app/ViT-B-32__openai"), "ViT-B-32__openai");
        assert_eq!(clean_name("XLM-Roberta-Large-Vit-B-16Plus"), "XLM-Roberta-Large-Vit-B-16Plus");
        assert_eq!(clean_name("nllb-clip-base-siglip__v1.0:x"), "nllb-clip-base-siglip__v10_x");
    }

    #[test]
    fn a_face_model_is_known_by_its_folder() {
        assert_eq!(folder_of("/cache/facial-recognition/buffalo_l/detection/model.onnx"), "buffalo_l");
        assert_eq!(folder_of("gs://m/faces/recognition/model.onnx"), "faces");
    }
}
