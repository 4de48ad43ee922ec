//! The OpenAPI 3.1 document of the HTTP API: generated from the request and response types
//! (`types`, `error`, `schema`) and the handlers' `#[utoipa::path]` attributes, with the rules
//! between fields (`exclusive`) and this server's limits (CLIPFN_MAX_IMAGES, CLIPFN_MAX_TEXTS,
//! CLIPFN_MAX_TEXT_CHARS, CLIPFN_MAX_KNOWN_PEOPLE, CLIPFN_MAX_EXEMPLARS) written in. Once the
//! model is loaded, the served document also states what only the model knows: the dim of stored
//! embeddings, of face embeddings and of `dimensions`, and the label sets. Served at
//! `GET /openapi.json`; docs/openapi.json is the document before a model is loaded, with the
//! default settings, which `clipfn openapi` prints (tests/it/openapi.rs keeps the two equal).

use std::collections::BTreeMap;

use axum::{
    body::Bytes,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use utoipa::{
    OpenApi,
    openapi::{Array, Object, RefOr, Schema, link::LinkBuilder, schema::ArrayItems},
};

use super::{
    AppState, analyze, classify, embed, embeddings,
    error::ErrorResponse,
    exclusive, immich, probes,
    schema::{
        BadRequest, BodyTooLarge, CannotClassify, NotFound, Overloaded, PhotoFetchFailed, PhotoForbidden, ServerError,
        TextDeadline, Unavailable, Unprocessable,
    },
};
use crate::settings::Settings;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "clipfn",
        description = "Photo references in, CLIP embeddings out: embeddings of photos and texts, zero-shot \
                       labels, and every signal of a photo from one decode. A photo that cannot be embedded gets \
                       an `error` in its item; the request still answers 200."
    ),
    paths(
        embed::embed,
        embeddings::embeddings,
        classify::classify,
        analyze::analyze,
        probes::healthz,
        probes::readyz,
        probes::metrics,
        openapi_json,
        immich::root,
        immich::ping,
        immich::predict
    ),
    components(
        schemas(ErrorResponse),
        responses(
            BadRequest,
            NotFound,
            PhotoForbidden,
            PhotoFetchFailed,
            BodyTooLarge,
            Overloaded,
            ServerError,
            CannotClassify,
            Unavailable,
            Unprocessable,
            TextDeadline
        )
    ),
    tags(
        (name = "clipfn", description = "Embeddings, labels and signals"),
        (name = "probes", description = "Health, readiness, metrics and this document"),
        (name = "immich", description = "Immich's machine-learning protocol (v2.5.6), for an Immich server's \
                                         IMMICH_MACHINE_LEARNING_URL")
    )
)]
struct Document;

/// What a loaded model adds to the document.
pub struct Loaded<'a> {
    /// The length of every stored embedding, and the only `dimensions` answered.
    pub dim: usize,
    /// The image model's id, the only `known_pets_model` a request may name.
    pub model: &'a str,
    /// The names `label_set` may take.
    pub label_sets: Vec<&'a str>,
    /// With face models: the length of a face embedding (`known_people`) and the recognizer's id,
    /// the only `recognizer` a request may name.
    pub faces: Option<(usize, &'a str)>,
    /// Whether OCR models are loaded: without them, `"ocr": true` is refused.
    pub ocr: bool,
    /// Whether an object model is loaded: without one, `"objects": true` is refused.
    pub objects: bool,
    /// Whether heads are loaded: without them, stored embeddings need labels.
    pub heads: bool,
}

/// The document with `settings`' limits, and with what the model knows once it is `loaded`, as
/// JSON.
pub fn document(settings: &Settings, loaded: Option<&Loaded>) -> Bytes {
    let mut document = Document::openapi();
    let limits = &settings.limits;
    let text = &settings.text;
    let schemas = &mut document.components.as_mut().expect("the document has components").schemas;
    for (request, field) in
        [("EmbedRequest", "images"), ("SubjectsRequest", "images"), ("SubjectsRequest", "embeddings")]
    {
        array(schemas, request, field).max_items = Some(limits.max_images);
    }
    for (request, texts) in [("EmbedRequest", "texts"), ("LabelsRequest", "labels")] {
        let texts = array(schemas, request, texts);
        texts.max_items = Some(text.max_texts);
        let ArrayItems::RefOrSchema(each) = &mut texts.items else { panic!("{request}: no texts") };
        let RefOr::T(Schema::Object(each)) = each.as_mut() else { panic!("{request}: texts are not strings") };
        each.max_length = Some(text.max_text_chars);
    }
    let faces = &settings.faces;
    array(schemas, "AnalyzeRequest", "known_people").max_items = Some(faces.max_known_people);
    array(schemas, "AnalyzeRequest", "known_pets").max_items = Some(faces.max_known_people);
    array(schemas, "KnownPerson", "embeddings").max_items = Some(faces.max_exemplars);
    // Texts, or photos with "modality": "image": their limits differ, the larger holds.
    let input = property(schemas, "EmbeddingsRequest", "input");
    let Schema::OneOf(input) = input else { panic!("EmbeddingsRequest.input: not a oneOf") };
    let RefOr::T(Schema::Array(list)) = &mut input.items[1] else { panic!("EmbeddingsRequest.input: no list") };
    list.max_items = Some(text.max_texts.max(limits.max_images));
    if let Some(loaded) = loaded {
        state_loaded(schemas, loaded);
    }
    exclusive::state_rules(schemas);
    exclusive::state_input_limits(schemas, text, limits);
    if loaded.is_some_and(|loaded| !loaded.ocr) {
        exclusive::state_not_loaded(schemas, "ocr", &[]);
    }
    if loaded.is_some_and(|loaded| loaded.faces.is_none()) {
        exclusive::state_not_loaded(schemas, "faces", &["known_people"]);
    }
    if loaded.is_some_and(|loaded| !loaded.objects) {
        exclusive::state_not_loaded(schemas, "objects", &["known_pets"]);
    }
    if loaded.is_some_and(|loaded| !loaded.heads) {
        exclusive::state_no_heads(schemas);
    }
    add_stored_links(&mut document);
    document.to_pretty_json().expect("the document serialises").into()
}

/// The loaded model's dim and label sets, where a body names them.
fn state_loaded(schemas: &mut BTreeMap<String, RefOr<Schema>>, loaded: &Loaded) {
    let Some(RefOr::T(Schema::Array(stored))) = schemas.get_mut("StoredEmbedding") else {
        panic!("StoredEmbedding is not an array")
    };
    (stored.min_items, stored.max_items) = (Some(loaded.dim), Some(loaded.dim));
    only_id(schemas, "known_pets_model", loaded.model);
    if let Some((face_dim, recognizer)) = loaded.faces {
        let Some(RefOr::T(Schema::Array(face))) = schemas.get_mut("FaceEmbedding") else {
            panic!("FaceEmbedding is not an array")
        };
        (face.min_items, face.max_items) = (Some(face_dim), Some(face_dim));
        only_id(schemas, "recognizer", recognizer);
    }
    let Schema::Object(dimensions) = property(schemas, "EmbeddingsRequest", "dimensions") else {
        panic!("EmbeddingsRequest.dimensions is not a number")
    };
    (dimensions.minimum, dimensions.maximum) = (Some(loaded.dim.into()), Some(loaded.dim.into()));
    let Schema::Object(label_set) = property(schemas, "LabelsRequest", "label_set") else {
        panic!("LabelsRequest.label_set is not a string")
    };
    // Null stays allowed: serde reads it as no set.
    let names = loaded.label_sets.iter().map(|name| serde_json::json!(name)).chain([serde_json::Value::Null]);
    label_set.enum_values = Some(names.collect());
}

/// `AnalyzeRequest`'s `field` takes only `id` (or null): the model whose embeddings it names.
fn only_id(schemas: &mut BTreeMap<String, RefOr<Schema>>, field: &str, id: &str) {
    let Schema::Object(named) = property(schemas, "AnalyzeRequest", field) else {
        panic!("AnalyzeRequest.{field} is not a string")
    };
    named.enum_values = Some(vec![serde_json::json!(id), serde_json::Value::Null]);
}

/// The document `GET /openapi.json` serves: the loaded one once the model is, built once.
pub(super) struct Documents {
    unloaded: Bytes,
    loaded: std::sync::OnceLock<Bytes>,
}

impl Documents {
    pub(super) fn new(settings: &Settings) -> Self {
        Documents { unloaded: document(settings, None), loaded: std::sync::OnceLock::new() }
    }

    pub(super) fn current(&self, state: &AppState) -> Bytes {
        let Some(service) = state.service.get() else { return self.unloaded.clone() };
        let build = || {
            let text = service.text.as_ref();
            let label_sets = text.map(|text| text.label_set_names()).unwrap_or_default();
            let faces = service.pipeline.faces().map(|(_, recognizer)| (recognizer.dim, recognizer.id.as_str()));
            let (model, ocr) = (service.pipeline.model(), service.pipeline.ocr().is_some());
            let (heads, objects) = (service.pipeline.heads().is_some(), service.pipeline.objects().is_some());
            let (dim, model) = (model.dim, model.id.as_str());
            document(&state.settings, Some(&Loaded { dim, model, label_sets, faces, ocr, objects, heads }))
        };
        self.loaded.get_or_init(build).clone()
    }
}

/// The links from an answer with embeddings (`/v1/embed`, `/v1/analyze`) to the operations that
/// take them back as stored `embeddings`. No requestBody: openapi-generator refuses one that is
/// not a string (an expression); tools/image_check.py adds one for Schemathesis's stateful phase.
fn add_stored_links(document: &mut utoipa::openapi::OpenApi) {
    let links = [
        (
            "classify_stored",
            "classify",
            "Labels for an item's `embedding`, kept by the caller and sent back as \
            `embeddings`: no fetch, no image inference",
        ),
        (
            "analyze_stored",
            "analyze",
            "Labels and head scores for an item's `embedding`, kept by the caller and \
            sent back as `embeddings`",
        ),
    ];
    for path in ["/v1/embed", "/v1/analyze"] {
        let operation = document.paths.paths.get_mut(path).and_then(|item| item.post.as_mut());
        let responses = &mut operation.unwrap_or_else(|| panic!("no POST {path}")).responses.responses;
        let Some(RefOr::T(ok)) = responses.get_mut("200") else { panic!("POST {path}: no 200") };
        for (name, operation_id, description) in links {
            let link = LinkBuilder::new().operation_id(operation_id).description(description).build();
            ok.links.insert(name.to_owned(), link.into());
        }
    }
}

/// The schema of `request`'s `field`, in its own properties or a flattened part's.
fn property<'a>(schemas: &'a mut BTreeMap<String, RefOr<Schema>>, request: &str, field: &str) -> &'a mut Schema {
    let parts = match schemas.get_mut(request) {
        Some(RefOr::T(Schema::Object(object))) => vec![object],
        Some(RefOr::T(Schema::AllOf(all))) => all
            .items
            .iter_mut()
            .filter_map(|part| match part {
                RefOr::T(Schema::Object(object)) => Some(object),
                _ => None,
            })
            .collect(),
        _ => panic!("no schema {request}"),
    };
    let field_of = |object: &'a mut Object| match object.properties.get_mut(field) {
        Some(RefOr::T(schema)) => Some(schema),
        _ => None,
    };
    parts.into_iter().find_map(field_of).unwrap_or_else(|| panic!("{request} has no field {field}"))
}

/// The array schema of `request`'s `field`.
fn array<'a>(schemas: &'a mut BTreeMap<String, RefOr<Schema>>, request: &str, field: &str) -> &'a mut Array {
    match property(schemas, request, field) {
        Schema::Array(array) => array,
        _ => panic!("{request}.{field} is not an array"),
    }
}

/// The OpenAPI document of this API
///
/// With this server's limits: `maxItems` of `images` is its CLIPFN_MAX_IMAGES, and so on; once
/// the model is loaded, with its dim (stored embeddings, `dimensions`) and label sets too.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "probes",
    responses((status = 200, description = "OpenAPI 3.1", content_type = "application/json", body = Object))
)]
pub(super) async fn openapi_json(document: Bytes) -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], document).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> serde_json::Value {
        let vars = [("CLIPFN_MODEL", "unused")].iter().chain(vars).map(|(k, v)| (k.to_string(), v.to_string()));
        serde_json::from_slice(&document(&Settings::from_vars(vars).unwrap(), None)).unwrap()
    }

    /// `request`'s `field`, in its own properties or a flattened part's.
    fn field<'a>(document: &'a serde_json::Value, request: &str, field: &str) -> &'a serde_json::Value {
        let schema = &document["components"]["schemas"][request];
        let parts = schema["allOf"].as_array().map_or(std::slice::from_ref(schema), Vec::as_slice);
        parts.iter().map(|part| &part["properties"][field]).find(|f| !f.is_null()).expect(field)
    }

    #[test]
    fn the_limits_are_the_servers() {
        let document = with(&[("CLIPFN_MAX_IMAGES", "7"), ("CLIPFN_MAX_TEXTS", "9"), ("CLIPFN_MAX_TEXT_CHARS", "11")]);
        for (request, name) in
            [("EmbedRequest", "images"), ("SubjectsRequest", "images"), ("SubjectsRequest", "embeddings")]
        {
            assert_eq!(field(&document, request, name)["maxItems"], 7, "{request}.{name}");
        }
        assert_eq!(field(&document, "EmbedRequest", "texts")["maxItems"], 9);
        assert_eq!(field(&document, "LabelsRequest", "labels")["items"]["maxLength"], 11);
        assert_eq!(field(&document, "EmbeddingsRequest", "input")["oneOf"][1]["maxItems"], 9);
        // The attribute needs a literal: held to the constant the server checks.
        assert_eq!(field(&document, "LabelsRequest", "top_k")["maximum"], crate::api::types::MAX_TOP_K);
    }
}
