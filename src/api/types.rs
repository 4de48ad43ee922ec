//! Request and response bodies of the HTTP API.

use std::{borrow::Cow, time::Duration};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{error::ErrorBody, schema};
use crate::pipeline::Timings;

/// Photos or texts, never both.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbedRequest {
    /// Photo references: keys under CLIPFN_STORE, URIs and URLs under CLIPFN_ALLOWED_SOURCES, or
    /// `data:image/<type>;base64,<data>` URIs; 1 to CLIPFN_MAX_IMAGES.
    #[serde(default)]
    #[schema(min_items = 1)]
    pub images: Option<Vec<String>>,
    /// Texts to embed with the text tower: 1 to CLIPFN_MAX_TEXTS, of at most CLIPFN_MAX_TEXT_CHARS
    /// characters each.
    // Checked item by item (`request::string_list`), for errors that name the bad item.
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>, min_items = 1)]
    pub texts: Option<Value>,
}

#[derive(Serialize, ToSchema)]
pub struct EmbedResponse<'a> {
    /// The model id (its file or folder name).
    pub model: &'a str,
    /// The embeddings' length.
    pub dim: usize,
    pub data: Vec<Item<'a>>,
    pub timings_ms: &'a TimingsMs,
}

/// One photo's answer: exactly one of `embedding` and `error`.
#[derive(Serialize, ToSchema)]
pub struct Item<'a> {
    pub index: usize,
    /// The reference as sent, shortened for data URIs and without a URL's query; none for a
    /// stored embedding (`/v1/classify`, `/v1/analyze`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub image: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub embedding: Option<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub error: Option<ErrorBody>,
}

/// A duration in milliseconds to 0.1 ms, as every body and log line gives times.
pub(super) fn millis(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Per-stage wall-clock spans of one request, in milliseconds.
#[derive(Serialize, ToSchema)]
pub struct TimingsMs {
    pub fetch: f64,
    pub decode: f64,
    pub queue: f64,
    pub inference: f64,
    /// `/v1/analyze`: the album stage, after the photos (absent when the album was not computed).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub album: Option<f64>,
    pub total: f64,
}

impl TimingsMs {
    pub fn new(t: &Timings, total: Duration) -> Self {
        TimingsMs {
            fetch: millis(t.fetch.duration()),
            decode: millis(t.decode.duration()),
            queue: millis(t.queue.duration()),
            inference: millis(t.inference.duration()),
            album: None,
            total: millis(total),
        }
    }

    /// The same figures as a `Server-Timing` header, for browser and proxy tooling.
    pub fn server_timing(&self) -> String {
        let album = self.album.map(|album| format!(",album;dur={album}")).unwrap_or_default();
        format!(
            "fetch;dur={},decode;dur={},queue;dur={},inference;dur={}{album},total;dur={}",
            self.fetch, self.decode, self.queue, self.inference, self.total
        )
    }
}

#[derive(Serialize, ToSchema)]
pub struct TextEmbedResponse<'a> {
    pub model: &'a str,
    pub dim: usize,
    pub data: Vec<TextItem<'a>>,
}

#[derive(Serialize, ToSchema)]
pub struct TextItem<'a> {
    pub index: usize,
    pub text: &'a str,
    pub embedding: &'a [f32],
}

/// OpenAI's embeddings request (`POST /v1/embeddings`), texts or photos. Its `model` and `user`
/// are accepted and not used: the answer names the model that ran.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EmbeddingsRequest {
    /// A string or a list of strings (token arrays are refused).
    #[schema(schema_with = schema::embeddings_input)]
    pub input: Value,
    #[serde(default)]
    #[schema(value_type = Option<schema::EncodingFormat>)]
    pub encoding_format: Option<String>,
    /// Must be the model's own dim if given.
    #[serde(default, deserialize_with = "whole")]
    pub dimensions: Option<usize>,
    /// `text` (the default) or `image`: `input` then holds photo references, as Infinity takes them.
    #[serde(default)]
    #[schema(value_type = Option<schema::Modality>)]
    pub modality: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingsResponse<'a> {
    #[schema(schema_with = schema::list_object)]
    pub object: &'static str,
    pub data: Vec<EmbeddingObject>,
    pub model: &'a str,
    pub usage: Usage,
}

#[derive(Serialize, ToSchema)]
pub struct EmbeddingObject {
    #[schema(schema_with = schema::embedding_object)]
    pub object: &'static str,
    pub index: usize,
    /// Floats, or base64 of their little-endian float32 bytes.
    #[schema(schema_with = schema::floats_or_base64)]
    pub embedding: Value,
}

#[derive(Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

/// Photos, or embeddings stored earlier (never both), and the labels to score them against.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ClassifyRequest {
    #[serde(flatten)]
    pub subjects: SubjectsRequest,
    #[serde(flatten)]
    pub labels: LabelsRequest,
}

/// What a request answers about (`/v1/classify`, `/v1/analyze`): photos, or embeddings stored
/// earlier, never both.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SubjectsRequest {
    /// As in `/v1/embed`: 1 to CLIPFN_MAX_IMAGES photo references.
    #[serde(default)]
    #[schema(min_items = 1)]
    pub images: Option<Vec<String>>,
    /// Embeddings an earlier answer gave, in place of `images`: 1 to CLIPFN_MAX_IMAGES vectors of
    /// the model's dim, finite float32, not all zero.
    #[serde(default)]
    #[schema(min_items = 1, value_type = Option<Vec<schema::StoredEmbedding>>)]
    pub embeddings: Option<Vec<Vec<f32>>>,
}

/// The labels a request scores its photos against (`/v1/classify`, `/v1/analyze`).
#[derive(Debug, Deserialize, ToSchema)]
pub struct LabelsRequest {
    #[serde(default)]
    #[schema(schema_with = schema::labels)]
    pub labels: Option<Value>,
    /// A set named in CLIPFN_LABELS, embedded at start-up; not with `labels`.
    #[serde(default)]
    pub label_set: Option<String>,
    /// How many of the best labels to keep per photo (default 5).
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1, maximum = 2147483647)] // MAX_TOP_K
    pub top_k: Option<i64>,
}

/// The most `top_k` may be: any count of labels a request can hold, stated so that a number past
/// 64 bits (which `whole` reads as the nearest in range) is outside the document as it is outside
/// what the server takes.
pub const MAX_TOP_K: i64 = i32::MAX as i64;

#[derive(Serialize, ToSchema)]
pub struct ClassifyResponse<'a> {
    pub model: &'a str,
    pub data: Vec<ClassifyItem<'a>>,
    pub timings_ms: &'a TimingsMs,
}

/// One photo's answer: exactly one of `labels` and `error`.
#[derive(Serialize, ToSchema)]
pub struct ClassifyItem<'a> {
    pub index: usize,
    /// As in `Item`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub image: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub labels: Option<Vec<LabelScore<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub error: Option<ErrorBody>,
}

#[derive(Serialize, ToSchema)]
pub struct LabelScore<'a> {
    pub label: &'a str,
    pub score: f32,
}

/// `/v1/analyze`'s body: the photos (or embeddings stored earlier, never both), and what to
/// derive beside the embedding.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AnalyzeRequest {
    /// Stored embeddings get labels and scores only: what needs pixels needs the photo.
    #[serde(flatten)]
    pub subjects: SubjectsRequest,
    /// `false` leaves the embeddings out of the answer. They are still computed where labels or
    /// heads read them, and otherwise for the photos with a capture time only, for the bursts.
    #[serde(default)]
    pub embedding: Option<bool>,
    /// `false` skips the faces where face models are loaded; `true` where none are is a 400.
    #[serde(default)]
    pub faces: Option<bool>,
    /// `false` skips the text (OCR) where OCR models are loaded; `true` where none are is a 400.
    #[serde(default)]
    pub ocr: Option<bool>,
    /// `false` leaves each photo's `location` out of the answer.
    #[serde(default)]
    pub location: Option<bool>,
    #[serde(flatten)]
    pub labels: LabelsRequest,
    /// The people the app already knows, each with exemplar face embeddings from earlier answers
    /// (a person's `exemplars`): faces near one take its `id` in `album.people`. Up to
    /// CLIPFN_MAX_KNOWN_PEOPLE, each with 1 to CLIPFN_MAX_EXEMPLARS.
    #[serde(default)]
    #[schema(value_type = Option<Vec<KnownPerson>>)]
    pub known_people: Option<Vec<KnownPerson>>,
    /// The recognizer id the `known_people` embeddings came with (every face answer carries one);
    /// another than this server's is refused, so that embeddings of two recognizers never meet.
    #[serde(default)]
    pub recognizer: Option<String>,
}

/// A person the app already knows.
#[derive(Debug, Deserialize, ToSchema)]
pub struct KnownPerson {
    /// The app's own id for them, given back on their faces' person; an id given twice is one
    /// person, with the embeddings of both.
    #[schema(min_length = 1, max_length = 256)]
    pub id: String,
    /// Their exemplar face embeddings, from earlier answers: the recognizer's dim, finite, not
    /// all zero.
    #[schema(min_items = 1, value_type = Vec<schema::FaceEmbedding>)]
    pub embeddings: Vec<Vec<f32>>,
}

#[derive(Serialize, ToSchema)]
pub struct AnalyzeResponse<'a> {
    pub model: &'a str,
    pub dim: usize,
    pub data: Vec<AnalyzeItem<'a>>,
    /// Absent for stored embeddings: the groups need the photos' hashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub album: Option<AlbumAnswer>,
    pub timings_ms: &'a TimingsMs,
}

/// One photo's signals, or its error alone.
#[derive(Serialize, ToSchema)]
pub struct AnalyzeItem<'a> {
    pub index: usize,
    /// As in `Item`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub image: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub embedding: Option<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub labels: Option<Vec<LabelScore<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub quality: Option<Quality>,
    /// The perceptual hash, 16 hex digits.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^[0-9a-f]{16}$")]
    pub hash: Option<String>,
    /// When the photo was taken (EXIF `DateTimeOriginal`, with `SubSecTimeOriginal`), ISO 8601:
    /// with its offset from UTC when the photo records one (`OffsetTimeOriginal`) or its GPS clock
    /// gives one (rounded to 15 minutes, the GPS time within 2 minutes of the capture time at that
    /// offset); without an offset, a local time of an unknown zone.
    /// Absent when the photo has no readable capture time.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, example = "2024-05-04T13:02:01.045+09:00")]
    pub taken_at: Option<String>,
    /// Where `taken_at`'s offset came from: `recorded` (`OffsetTimeOriginal`) or `gps` (the GPS
    /// clock, within 2 minutes of the capture time at that offset); absent without an offset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::OffsetSource>)]
    pub taken_at_offset: Option<&'static str>,
    /// Where the photo was taken (EXIF GPS); absent without a usable fix, or with `"location": false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub location: Option<LocationItem>,
    /// The upright photo's width in pixels at its full size (after the EXIF orientation).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub width: Option<u32>,
    /// The upright photo's height in pixels at its full size.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub height: Option<u32>,
    /// One score per head (`CLIPFN_HEADS`), by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub scores: Option<std::collections::BTreeMap<&'a str, f32>>,
    /// The photo's faces, best first (with face models, unless the request said `"faces": false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub faces: Option<Vec<FaceItem>>,
    /// Faces found beyond CLIPFN_MAX_FACES and left out (the lowest scores); absent when none were.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub faces_left_out: Option<usize>,
    /// Why the photo has no `faces` when a face model tripped on it; its other signals stand.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub faces_error: Option<ErrorBody>,
    /// The photo's lines of text in reading order, top to bottom and left to right (with OCR
    /// models, unless the request said `"ocr": false`); empty when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub ocr: Option<Vec<OcrItem>>,
    /// Lines found beyond CLIPFN_OCR_MAX_LINES and left out (the detector's lowest box scores);
    /// absent when none were.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub ocr_left_out: Option<usize>,
    /// Why the photo has no `ocr` when an OCR model tripped on it; its other signals stand.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub ocr_error: Option<ErrorBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub error: Option<ErrorBody>,
}

/// One line of text, its box in pixels of the upright photo at its full size.
#[derive(Serialize, ToSchema)]
pub struct OcrItem {
    pub text: String,
    /// The recognizer's: the mean probability of the line's characters.
    pub score: f32,
    /// The detector's: the mean text probability inside the box.
    pub box_score: f32,
    /// Top-left, top-right, bottom-right, bottom-left, as `[x, y]` (a quadrilateral: lines may
    /// be tilted).
    #[serde(rename = "box")]
    #[schema(min_items = 4, max_items = 4)]
    pub corners: [[f32; 2]; 4],
}

impl From<crate::pipeline::OcrLine> for OcrItem {
    fn from(crate::pipeline::OcrLine { text, score, box_score, corners }: crate::pipeline::OcrLine) -> Self {
        OcrItem { text, score, box_score, corners }
    }
}

impl FaceItem {
    pub fn new(
        crate::pipeline::Face { bbox, cut, score, landmarks, embedding, .. }: crate::pipeline::Face,
        recognizer: &str,
    ) -> Self {
        FaceItem { bbox, cut, score, landmarks, embedding, recognizer: recognizer.to_owned() }
    }
}

/// One face, in pixels of the upright photo at its full size.
#[derive(Serialize, ToSchema)]
pub struct FaceItem {
    /// `[x1, y1, x2, y2]`.
    #[serde(rename = "box")]
    #[schema(min_items = 4, max_items = 4)]
    pub bbox: [f32; 4],
    /// Whether the detector's box left the photo before it was clipped: a face cut by the edge
    /// (the best-shot ranking counts them).
    pub cut: bool,
    pub score: f32,
    /// Left eye, right eye, nose, left and right mouth corners, as `[x, y]`.
    #[schema(min_items = 5, max_items = 5)]
    pub landmarks: [[f32; 2]; 5],
    /// The recognizer's, of unit length.
    pub embedding: Vec<f32>,
    /// The recognizer's id (`FORMAT:HASH:chips-RULE`): embeddings of two ids never compare.
    pub recognizer: String,
}

/// A place: WGS 84 degrees (north and east positive), metres above sea level.
#[derive(Serialize, ToSchema)]
pub struct LocationItem {
    #[schema(minimum = -90, maximum = 90)]
    pub lat: f64,
    #[schema(minimum = -180, maximum = 180)]
    pub lon: f64,
    /// Negative below sea level; absent when the photo records none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub alt: Option<f64>,
}

impl From<crate::decode::Location> for LocationItem {
    fn from(crate::decode::Location { lat, lon, alt }: crate::decode::Location) -> Self {
        LocationItem { lat, lon, alt }
    }
}

#[derive(Serialize, ToSchema)]
pub struct Quality {
    pub sharpness: f64,
    pub blurry: bool,
}

/// The request's album: its groupings, or why it was not computed (the photos' answers stand
/// either way).
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum AlbumAnswer {
    Computed(Album),
    NotComputed(AlbumNotComputed),
}

/// An album that was not computed.
#[derive(Serialize, ToSchema)]
pub struct AlbumNotComputed {
    /// Why: `deadline_exceeded` when the request's deadline (CLIPFN_REQUEST_TIMEOUT_MS) passed
    /// before the album stage finished (or before it could start, when photos ran out the clock),
    /// `album_failed` when the stage failed (the server's log says why).
    #[schema(value_type = schema::AlbumError)]
    pub error: ErrorBody,
}

/// Groupings over the request's photos.
#[derive(Serialize, ToSchema)]
pub struct Album {
    /// The near-duplicates: photos whose hashes are at most CLIPFN_DUPLICATE_BITS apart, linked
    /// through each other; groups by their first photo.
    pub duplicates: Vec<GroupItem>,
    /// Runs of photos each taken within CLIPFN_BURST_GAP_MS of the previous one and alike by
    /// embedding (cosine >= CLIPFN_BURST_SIMILARITY), in time order: a moving subject, whose
    /// hashes differ. A photo may be in a burst and a duplicate group.
    pub bursts: Vec<GroupItem>,
    /// The photos that have a `taken_at`, in time order, in runs cut where the gap exceeds
    /// CLIPFN_EVENT_GAP_S or consecutive located photos are further apart than
    /// CLIPFN_EVENT_DISTANCE_M; photos without a time are in none.
    pub events: Vec<EventItem>,
    /// The album's best photo by the best-shot ranking, among the photos that are the best of
    /// every group they are in; absent when no photo was answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub cover: Option<usize>,
    /// The faces grouped into people, largest first (when faces were found for the request).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub people: Option<Vec<PersonItem>>,
    /// Faces about equally near two known people (within a tenth of the max distance of each
    /// other), given to neither (when faces were found for the request).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub unsure: Option<Vec<UnsureFace>>,
}

/// A group of photos and its best shot (README, "The best shot and the cover").
#[derive(Serialize, ToSchema)]
pub struct GroupItem {
    /// Input indices, ascending (a burst's in time order).
    pub photos: Vec<usize>,
    /// The input index of the group's best shot.
    pub best: usize,
    /// The criterion on which the best beat the runner-up.
    #[schema(value_type = schema::BestReason)]
    pub why: &'static str,
}

impl From<crate::album::Ranked> for GroupItem {
    fn from(crate::album::Ranked { photos, best, why }: crate::album::Ranked) -> Self {
        GroupItem { photos, best, why: why.code() }
    }
}

/// A face that two known people are about equally near.
#[derive(Serialize, ToSchema)]
pub struct UnsureFace {
    #[schema(value_type = schema::FaceRef)]
    pub face: [usize; 2],
    /// The two known people's ids, nearer first.
    pub between: [String; 2],
}

/// A suggestion: a known person a new person may be.
#[derive(Serialize, ToSchema)]
pub struct Maybe {
    pub id: String,
    /// The cosine distance from the new person's centre to the known person's nearest exemplar.
    pub distance: f32,
}

/// One event: its photos' indices in time order, the first's and last's `taken_at`.
#[derive(Serialize, ToSchema)]
pub struct EventItem {
    /// The first photo's `taken_at`.
    pub start: String,
    /// The last photo's `taken_at`.
    pub end: String,
    pub photos: Vec<usize>,
    /// The mean place of its located photos (no `alt`); absent when none is located, or with
    /// `"location": false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub centre: Option<LocationItem>,
}

/// One person: faces as `[photo index, face index]`.
#[derive(Serialize, ToSchema)]
pub struct PersonItem {
    /// The known person's id (`known_people`) these faces are; absent for a new person.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub id: Option<String>,
    #[schema(value_type = Vec<schema::FaceRef>)]
    pub faces: Vec<[usize; 2]>,
    /// The face closest to the person's centre.
    #[schema(value_type = schema::FaceRef)]
    pub representative: [usize; 2],
    /// Up to CLIPFN_PERSON_EXEMPLARS faces spread across the person, the representative first:
    /// their embeddings are what the app keeps as this person's for the next album.
    #[schema(value_type = Vec<schema::FaceRef>)]
    pub exemplars: Vec<[usize; 2]>,
    /// A new person whose centre is within CLIPFN_FACE_SUGGEST_DISTANCE of a known person: a
    /// question for the app's user ("same person?"), never a merge.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub maybe: Option<Maybe>,
}

/// A whole number as JSON Schema's `integer` reads it: `5.0` is 5 (JSON has one number type),
/// and one past the type's range is the nearest in it; a fraction or a negative count is refused.
fn whole<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else { return Ok(None) };
    let value = match (number.as_i64(), number.as_f64()) {
        (Some(value), _) => value,
        // `as` saturates: 1e30 reads as i64::MAX.
        (None, Some(value)) if value.fract() == 0.0 => value as i64,
        _ => return Err(D::Error::custom(format!("expected a whole number, got {number}"))),
    };
    T::try_from(value).map(Some).map_err(|_| D::Error::custom(format!("expected a count, got {number}")))
}
