//! What the OpenAPI document says that no request or response type derives: the error codes (from
//! the lists `ItemCode` and `ApiError` keep), the responses of the whole-request errors, the bodies
//! the probes write with `json!`, and the shapes of the fields checked by hand
//! (`serde_json::Value`). The document itself is `openapi`'s.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde_json::Value;
use utoipa::{
    IntoResponses, PartialSchema, ToResponse, ToSchema,
    openapi::{
        ArrayBuilder, ContentBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Ref, RefOr, Response, ResponseBuilder,
        Schema, SchemaFormat, Type, extensions::Extensions, header::HeaderBuilder, schema::SchemaType,
    },
};

use super::{
    error::{ApiError, ErrorResponse, retry_after},
    types::{EmbedResponse, TextEmbedResponse},
};
use crate::{album::Reason, pipeline::ItemCode};

/// A string that is one of `values`.
fn one_of<'a>(values: impl IntoIterator<Item = &'a str>) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).enum_values(Some(values))
}

/// A named string enum of the document: a type for `value_type`, from a list the code keeps.
macro_rules! string_enum {
    ($(#[doc = $doc:literal])+ $name:ident = $values:expr;) => {
        $(#[doc = $doc])+
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                one_of($values).description(Some(concat!($($doc),+).trim())).into()
            }
        }

        impl ToSchema for $name {}
    };
}

string_enum! {
    /// Why one photo has no answer (README, "API"); the other photos are answered.
    PhotoErrorCode = ItemCode::ALL.map(ItemCode::as_str);
}

string_enum! {
    /// Why the request was refused: the same code for the same cause, whatever the message says.
    ErrorCode = ApiError::CODES.map(|(_, code)| code);
}

string_enum! {
    /// The criterion on which a group's best shot beat the runner-up, tried in this order (README,
    /// "The best shot and the cover"); `first`: every criterion tied.
    BestReason = Reason::ALL.map(Reason::code);
}

string_enum! {
    /// Where `taken_at`'s offset came from: `recorded` (`OffsetTimeOriginal`), or `gps` (the GPS
    /// clock's UTC against the local time).
    OffsetSource = ["recorded", "gps"];
}

string_enum! {
    /// `float` (the default), or `base64`: little-endian float32 bytes.
    EncodingFormat = ["float", "base64"];
}

string_enum! {
    /// `text` (the default), or `image`: `input` holds photo references.
    Modality = ["text", "image"];
}

/// One photo's error, in its item.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: photos.rs writes it as an ErrorBody")]
pub struct PhotoError {
    #[schema(value_type = PhotoErrorCode)]
    code: &'static str,
    /// A fixed message per code that names only the reference sent.
    message: String,
}

string_enum! {
    /// Why the album was not computed (`album.error`); the photos are answered.
    AlbumErrorCode = super::album::ALBUM_CODES;
}

/// Why the album was not computed.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: album.rs writes it as an ErrorBody")]
pub struct AlbumError {
    #[schema(value_type = AlbumErrorCode)]
    code: &'static str,
    message: String,
}

/// A face of the request: `[photo index, face index]`.
pub struct FaceRef;

impl PartialSchema for FaceRef {
    fn schema() -> RefOr<Schema> {
        ArrayBuilder::new().items(usize::schema()).min_items(Some(2)).max_items(Some(2)).into()
    }
}

impl ToSchema for FaceRef {}

/// An object of the request: `[photo index, object index]`.
pub struct ObjectRef;

impl PartialSchema for ObjectRef {
    fn schema() -> RefOr<Schema> {
        FaceRef::schema()
    }
}

impl ToSchema for ObjectRef {}

/// An embedding an earlier answer gave: the model's dim of finite float32 values, not all zero.
pub struct StoredEmbedding;

impl PartialSchema for StoredEmbedding {
    fn schema() -> RefOr<Schema> {
        embedding()
    }
}

/// A face embedding an earlier answer gave: the recognizer's dim of finite float32 values, not all
/// zero.
pub struct FaceEmbedding;

impl PartialSchema for FaceEmbedding {
    fn schema() -> RefOr<Schema> {
        embedding()
    }
}

impl ToSchema for FaceEmbedding {}

/// Finite float32 values, not all zero; the document writes in the dim once a model is loaded.
fn embedding() -> RefOr<Schema> {
    // Past this a JSON number rounds to an infinite float32 (f32::MAX is 2^128 - 2^104).
    let limit = 2f64.powi(128) - 2f64.powi(103);
    let value = ObjectBuilder::new()
        .schema_type(Type::Number)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Float)))
        .exclusive_minimum(Some(-limit))
        .exclusive_maximum(Some(limit));
    // Not all zero: a value that is not 0. utoipa models no `contains`; it writes extensions
    // into the schema as they are, and only its builder would prefix them with `x-`.
    let not_all_zero = Extensions::from_iter([("contains", serde_json::json!({"not": {"const": 0}}))]);
    ArrayBuilder::new().items(value).min_items(Some(1)).extensions(Some(not_all_zero)).into()
}

impl ToSchema for StoredEmbedding {}

/// `/v1/embed`'s answer: for photos or for texts.
pub struct EmbedAnswer;

impl PartialSchema for EmbedAnswer {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(Ref::from_schema_name(EmbedResponse::name()))
            .item(Ref::from_schema_name(TextEmbedResponse::name()))
            .into()
    }
}

impl ToSchema for EmbedAnswer {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((EmbedResponse::name().into(), EmbedResponse::schema()));
        schemas.push((TextEmbedResponse::name().into(), TextEmbedResponse::schema()));
        EmbedResponse::schemas(schemas);
        TextEmbedResponse::schemas(schemas);
    }
}

/// `/v1/embeddings`' `input`.
pub(super) fn embeddings_input() -> Schema {
    let texts = ArrayBuilder::new().items(String::schema()).min_items(Some(1));
    let description = "A text, or a list of texts (1 to CLIPFN_MAX_TEXTS, of at most CLIPFN_MAX_TEXT_CHARS \
                       characters each); with \"modality\": \"image\", a photo reference or a list of 1 to \
                       CLIPFN_MAX_IMAGES. Token arrays are refused.";
    OneOfBuilder::new().item(String::schema()).item(texts).description(Some(description)).into()
}

/// `labels`: distinct, non-blank strings (null reads as absent).
pub(super) fn labels() -> Schema {
    // Non-blank: a character outside Rust's `char::is_whitespace`, which the handler trims with,
    // spelt out because JSON Schema's `\s` (ECMA-262's) and Python's differ from it.
    let not_blank = r"[^\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";
    let label = ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).pattern(Some(not_blank));
    let description = "Labels embedded now (prompt \"a photo of a {}.\"): 1 to CLIPFN_MAX_TEXTS distinct, \
                       non-blank labels of at most CLIPFN_MAX_TEXT_CHARS characters; not with `label_set`.";
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(label)
        .min_items(Some(1))
        .unique_items(true)
        .description(Some(description))
        .into()
}

pub(super) fn list_object() -> Schema {
    one_of(["list"]).into()
}

pub(super) fn embedding_object() -> Schema {
    one_of(["embedding"]).into()
}

/// An embedding as floats, or as base64 of its little-endian float32 bytes.
pub(super) fn floats_or_base64() -> Schema {
    let floats = ArrayBuilder::new().items(f32::schema());
    let base64 = ObjectBuilder::new().schema_type(Type::String).content_encoding("base64");
    OneOfBuilder::new().item(floats).item(base64).into()
}

/// `GET /healthz`'s body.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: probes.rs writes it with json!")]
pub struct Health {
    /// `ok` while the process can serve (also while the model loads); `unhealthy` once the model
    /// worker has died or its model fails the warm-up input.
    #[schema(schema_with = health_status)]
    status: String,
    /// Why it is unhealthy.
    #[schema(nullable = false)]
    reason: Option<String>,
}

fn health_status() -> Schema {
    one_of(["ok", "unhealthy"]).into()
}

/// `GET /readyz`'s body once the model is loaded and warmed up: what runs.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: probes.rs writes it with json!")]
pub struct Ready {
    #[schema(schema_with = ready_status)]
    status: String,
    /// The image model: `id`, `file`, `precision`, `provider` (and `fallback_reason` when `auto`
    /// fell back to CPU), `input_name`, `output_name`, `image_size`, `preprocessing`,
    /// `input_layout`, `dim`, `batch_size`, `warm_up_batches`.
    #[schema(value_type = Object)]
    model: Value,
    /// Photos admitted and not yet answered.
    in_flight_images: usize,
    /// The model family: `name`, `scoring` (how `/v1/classify` scores; null when it cannot),
    /// `scoring_from`.
    #[schema(value_type = Object)]
    family: Value,
    /// The text tower (`id`, `tokenizer`, `padding`, `output_name`, `dim`, ...); null without one.
    #[schema(value_type = Option<Object>, required = true)]
    text_model: Value,
    /// The label sets `CLIPFN_LABELS` names.
    label_sets: Vec<String>,
    /// The heads of `CLIPFN_HEADS` (`names`, `files`, `dim`); null without them.
    #[schema(value_type = Option<Object>, required = true)]
    heads: Value,
    /// The face models (`detector`, `recognizer`, `max_distance` with `max_distance_from`, `min_faces`,
    /// `min_size`); null without them.
    #[schema(value_type = Option<Object>, required = true)]
    faces: Value,
    /// The OCR models (`detector`, `classifier`, `recognizer`, `characters`) and their thresholds
    /// (`resolution`, `sizes`, `min_score`, `box_min_score`, `max_lines`, `upside_down`); null without them.
    #[schema(value_type = Option<Object>, required = true)]
    ocr: Value,
    /// The object detector (`file`, `format`, `layout`, `classes`, `provider`, `min_score`,
    /// `max_objects`, `pet_labels`, ...); null without one.
    #[schema(value_type = Option<Object>, required = true)]
    objects: Value,
    /// A model worker per device its towers run on, CUDA's first (docs/design.md, "The worker").
    workers: Vec<WorkerStatus>,
    /// Per tower (`image`, `text`, `heads`, `face_detector`, ...): its input shapes `allowed` (the
    /// declared set; null for OCR's towers with exact sizes, which run any), `run` so far, and run
    /// `outside` the set (none, unless something is wrong).
    #[schema(value_type = Object)]
    shapes: Value,
    /// On CUDA only: the provider's settings (`conv_search`, `conv_max_workspace`, `arena_extend`, `tf32`).
    #[schema(value_type = Object, required = false)]
    cuda: Value,
    /// On CUDA only: the GPU's name and memory, or the `error` reading them.
    #[schema(value_type = Object, required = false)]
    gpu: Value,
}

/// One model worker: a thread that runs the towers of one device, a batch at a time.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: worker::SeatStatus is what /readyz writes")]
pub struct WorkerStatus {
    /// `cuda` or `cpu`.
    device: String,
    /// Its towers (`image`, `text`, `face_detector`, ...), in serving order.
    towers: Vec<String>,
    /// Seconds spent running batches since start (also `clipfn_worker_busy_seconds_total`).
    busy_seconds: f64,
    /// That time's share of the time since start, 0 to 1: the busiest worker is the bottleneck.
    busy_share: f64,
    /// False once its device or model is lost (then /healthz answers 503).
    healthy: bool,
}

fn ready_status() -> Schema {
    one_of(["ready"]).into()
}

/// `GET /readyz`'s body while the instance may not take work.
#[derive(ToSchema)]
#[expect(dead_code, reason = "schema only: probes.rs writes it with json!")]
pub struct NotReady {
    /// `not_ready` while the model loads, `shutting_down` while draining, `unhealthy`.
    #[schema(schema_with = not_ready_status)]
    status: String,
    reason: String,
}

fn not_ready_status() -> Schema {
    one_of(codes(StatusCode::SERVICE_UNAVAILABLE)).into()
}

/// The whole-request error codes answered with `status`.
fn codes(status: StatusCode) -> impl Iterator<Item = &'static str> {
    ApiError::CODES.into_iter().filter(move |(s, _)| *s == status).map(|(_, code)| code)
}

/// The response of the whole-request errors of `status`: an `ErrorResponse` with one of their
/// codes, and `Retry-After` where the answer sets it.
fn error_response(status: StatusCode, why: &str) -> Response {
    let codes: Vec<String> = codes(status).map(|code| format!("`{code}`")).collect();
    let plural = if codes.len() > 1 { "s" } else { "" };
    let body = ContentBuilder::new().schema(Some(Ref::from_schema_name(ErrorResponse::name()))).build();
    let mut response = ResponseBuilder::new()
        .description(format!("{why} Code{plural}: {}.", codes.join(", ")))
        .content("application/json", body);
    if retry_after(status) {
        let seconds = HeaderBuilder::new().schema(Some(u32::schema())).description(Some("Seconds to wait: 1"));
        response = response.header("Retry-After", seconds.build());
    }
    response.build()
}

/// A reusable response per whole-request error status, named for what it says.
macro_rules! error_responses {
    ($($name:ident = $status:ident: $why:literal)*) => {$(
        #[doc = $why]
        pub struct $name;

        impl $name {
            const STATUS: StatusCode = StatusCode::$status;
        }

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<Response>) {
                (stringify!($name), error_response(Self::STATUS, $why).into())
            }
        }
    )*};
}

/// The whole-request errors every POST endpoint answers, whatever it does; an endpoint lists
/// its own beside them (404 without a text tower, 501 without a scoring rule).
pub struct Refusals;

impl IntoResponses for Refusals {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        macro_rules! refs {
            ($($name:ident),*) => {
                [$((<$name>::STATUS, stringify!($name))),*]
            };
        }
        refs!(BadRequest, BodyTooLarge, Overloaded, ServerError, Unavailable, TextDeadline)
            .into_iter()
            .map(|(status, name)| (status.as_str().to_owned(), Ref::from_response_name(name).into()))
            .collect()
    }
}

error_responses! {
    BadRequest = BAD_REQUEST: "The body is not JSON of this operation's shape, or breaks a limit or a rule of it; \
        the message names the problem."
    NotFound = NOT_FOUND: "This server has no text tower (CLIPFN_TEXT_MODEL, or a model folder with one), the \
        path is none of these, or (/v1/embeddings) a photo names no object."
    PhotoForbidden = FORBIDDEN: "/v1/embeddings: a photo is outside the allowed sources, the store refused access, \
        or its signed URL has expired; the message names its index."
    PhotoFetchFailed = BAD_GATEWAY: "/v1/embeddings: a photo's store failed; the message names its index."
    BodyTooLarge = PAYLOAD_TOO_LARGE: "The body is over CLIPFN_MAX_BODY_BYTES, or over \
        CLIPFN_MAX_INLINE_BODY_BYTES with data URIs or stored embeddings."
    Overloaded = TOO_MANY_REQUESTS: "All CLIPFN_MAX_QUEUED_IMAGES queue places are taken; nothing was done."
    ServerError = INTERNAL_SERVER_ERROR: "The text tower failed, or a handler panicked."
    CannotClassify = NOT_IMPLEMENTED: "This model has no scoring rule (a SigLIP folder without its logit scale and \
        bias); it still embeds."
    Unavailable = SERVICE_UNAVAILABLE: "The model is loading, the instance is draining, or it is unhealthy; try \
        another instance or later."
    Unprocessable = UNPROCESSABLE_ENTITY: "A photo that cannot be read where the answer has no per-photo errors \
        (Immich's /predict, /v1/embeddings), or Immich's `entries` that are not JSON of its protocol's shape, as \
        Immich ML answers them."
    TextDeadline = GATEWAY_TIMEOUT: "The texts (or, at /v1/embeddings, the photos) were not answered within \
        CLIPFN_REQUEST_TIMEOUT_MS."
}
