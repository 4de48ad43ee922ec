//! `/v1/analyze`'s request and each photo's answer.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::album::AlbumAnswer;
use super::classify::{LabelScore, LabelsRequest, SubjectsRequest};
use super::embed::TimingsMs;
use crate::api::{error::ErrorBody, schema};

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
    /// `false` skips the objects where an object model is loaded; `true` where none is is a 400.
    #[serde(default)]
    pub objects: Option<bool>,
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
    /// The pets the app already knows, each with exemplar embeddings of their crops from earlier
    /// answers (`"pet_embeddings": true`): pets near one take its `id` in `album.pets`. Limits as
    /// `known_people`'s.
    #[serde(default)]
    #[schema(value_type = Option<Vec<KnownPet>>)]
    pub known_pets: Option<Vec<KnownPet>>,
    /// `true` gives each pet its `embedding`: the image model's embedding of its crop (a photo
    /// embedding of the crop, which `known_pets` takes back).
    #[serde(default)]
    pub pet_embeddings: Option<bool>,
    /// The image model id the `known_pets` embeddings came with (every answer's `model`); another
    /// than this server's is refused, so that crops embedded by two models never meet.
    #[serde(default)]
    pub known_pets_model: Option<String>,
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

/// A pet the app already knows.
#[derive(Debug, Deserialize, ToSchema)]
pub struct KnownPet {
    /// The app's own id for it, given back on its pet; an id given twice is one pet.
    #[schema(min_length = 1, max_length = 256)]
    pub id: String,
    /// Its exemplar crop embeddings, from earlier answers' pets: the image model's dim, finite,
    /// not all zero.
    #[schema(min_items = 1, value_type = Vec<schema::StoredEmbedding>)]
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
#[derive(Default, Serialize, ToSchema)]
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
    /// The photo's objects, best first (with an object model, unless the request said
    /// `"objects": false`); empty when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub objects: Option<Vec<ObjectItem>>,
    /// Objects found beyond CLIPFN_MAX_OBJECTS and left out (the lowest scores); absent when none
    /// were.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub objects_left_out: Option<usize>,
    /// Why the photo has no `objects` when the object model tripped on it; its other signals stand.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub objects_error: Option<ErrorBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<schema::PhotoError>)]
    pub error: Option<ErrorBody>,
}

impl<'a> AnalyzeItem<'a> {
    /// A photo that failed as a whole: its error and nothing else.
    pub fn failed(index: usize, image: Option<Cow<'a, str>>, error: ErrorBody) -> Self {
        AnalyzeItem { index, image, error: Some(error), ..AnalyzeItem::default() }
    }
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

/// One object, in pixels of the upright photo at its full size.
#[derive(Serialize, ToSchema)]
pub struct ObjectItem {
    /// Its class, named by the object model's `classes.txt` (COCO's names by default).
    pub label: String,
    /// The detector's.
    pub score: f32,
    /// `[x1, y1, x2, y2]`.
    #[serde(rename = "box")]
    #[schema(min_items = 4, max_items = 4)]
    pub bbox: [f32; 4],
    /// A pet's, with `"pet_embeddings": true`: the image model's embedding of its crop, of unit
    /// length (a photo embedding of the crop; the pet's identity, as far as the image model tells).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub embedding: Option<Vec<f32>>,
}

impl ObjectItem {
    pub fn new(object: crate::pipeline::Object, with_embedding: bool) -> Self {
        let crate::pipeline::Object { label, score, bbox, embedding, .. } = object;
        ObjectItem { label, score, bbox, embedding: embedding.filter(|_| with_embedding) }
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
