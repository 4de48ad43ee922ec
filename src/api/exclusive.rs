//! The rules between a body's fields that no field's own schema can state: `images` or `texts`,
//! `images` or `embeddings`, `labels` or `label_set` (as `oneOf`); `"faces": true`, `"ocr": true`,
//! `"objects": true` and `known_people` only with `images`, `known_people` only with faces on, and `/v1/embeddings`'
//! limits on `input`, which depend on its `modality` (as `anyOf`). The handlers enforce them (a
//! 400 naming the fields); the document states them, so that a client, and Schemathesis, can tell
//! a valid body from the schema alone. A field counts as given when it is there and not null, as
//! serde reads it.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use utoipa::openapi::{
    AllOfBuilder, ArrayBuilder, ObjectBuilder, OneOfBuilder, RefOr, Schema,
    schema::{AnyOfBuilder, SchemaType, Type},
};

use crate::settings::{Limits, TextSettings};

/// How many of two fields a body must give.
enum Rule {
    ExactlyOne,
    AtMostOne,
}

/// A field, with the type it has when given.
type Field = (&'static str, Type);

/// Every body's rule: the schema, and its two fields.
const RULES: [(&str, Rule, [Field; 2]); 4] = [
    ("EmbedRequest", Rule::ExactlyOne, [("images", Type::Array), ("texts", Type::Array)]),
    ("SubjectsRequest", Rule::ExactlyOne, [("images", Type::Array), ("embeddings", Type::Array)]),
    ("ClassifyRequest", Rule::ExactlyOne, [("labels", Type::Array), ("label_set", Type::String)]),
    ("AnalyzeRequest", Rule::AtMostOne, [("labels", Type::Array), ("label_set", Type::String)]),
];

/// Writes each rule into its schema as a `oneOf`.
pub(super) fn state_rules(schemas: &mut BTreeMap<String, RefOr<Schema>>) {
    for (name, rule, fields) in RULES {
        let mut one_of = OneOfBuilder::new();
        for (field, given) in &fields {
            let field_given = ObjectBuilder::new().schema_type(given.clone());
            one_of = one_of.item(ObjectBuilder::new().required(*field).property(*field, field_given));
        }
        if let Rule::AtMostOne = rule {
            let neither = fields.iter().fold(ObjectBuilder::new(), |neither, (field, _)| {
                neither.property(*field, ObjectBuilder::new().schema_type(SchemaType::new(Type::Null)))
            });
            one_of = one_of.item(neither);
        }
        add(schemas, name, [one_of.into()]);
    }
    // `"faces": true`, `"ocr": true`, `"objects": true`, `known_people` and `known_pets` need the
    // photos (stored embeddings have no pixels); known people need the faces on, known pets the
    // objects.
    let no_faces_asked = ObjectBuilder::new()
        .property("faces", any_of_values([json!(false), Value::Null]))
        .property("ocr", any_of_values([json!(false), Value::Null]))
        .property("objects", any_of_values([json!(false), Value::Null]))
        .property("known_people", any_of_values([Value::Null]))
        .property("known_pets", any_of_values([Value::Null]));
    let photos =
        ObjectBuilder::new().required("images").property("images", ObjectBuilder::new().schema_type(Type::Array));
    let need_photos = AnyOfBuilder::new().item(no_faces_asked).item(photos);
    let known_only_with = |known: &str, on: &str| {
        let none_known = ObjectBuilder::new().property(known, any_of_values([Value::Null]));
        let on = ObjectBuilder::new().property(on, any_of_values([json!(true), Value::Null]));
        AnyOfBuilder::new().item(none_known).item(on).into()
    };
    let rules =
        [need_photos.into(), known_only_with("known_people", "faces"), known_only_with("known_pets", "objects")];
    add(schemas, "AnalyzeRequest", rules);
}

/// A server without the models of a detector (`"ocr"`, `"objects"`) refuses `true` for `field`: a
/// rule beside the field, as an `anyOf` like the others (openapi-python-client reads no `enum` on a
/// boolean, and no other rule beside a body's fields).
/// `needing` are fields that need the same models (`known_pets` the objects'), which are then
/// refused too.
pub(super) fn state_not_loaded(schemas: &mut BTreeMap<String, RefOr<Schema>>, field: &str, needing: &[&str]) {
    let mut off = ObjectBuilder::new().property(field, any_of_values([json!(false), Value::Null]));
    for other in needing {
        off = off.property(*other, any_of_values([Value::Null]));
    }
    add(schemas, "AnalyzeRequest", [AnyOfBuilder::new().item(off).into()]);
}

/// A server without heads (`CLIPFN_HEADS`) has nothing but labels to give stored embeddings, and
/// refuses them without `labels` or a `label_set`: no `embeddings`, or one of those two.
pub(super) fn state_no_heads(schemas: &mut BTreeMap<String, RefOr<Schema>>) {
    let photos = ObjectBuilder::new().property("embeddings", any_of_values([Value::Null]));
    let named = |field: &str, kind: Type| {
        ObjectBuilder::new().required(field).property(field, ObjectBuilder::new().schema_type(kind))
    };
    let rule =
        AnyOfBuilder::new().item(photos).item(named("labels", Type::Array)).item(named("label_set", Type::String));
    add(schemas, "AnalyzeRequest", [rule.into()]);
}

/// A schema that only `values` satisfy.
fn any_of_values<const N: usize>(values: [Value; N]) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(SchemaType::AnyValue).enum_values(Some(values))
}

/// `/v1/embeddings`' `input`: texts (no `modality`, or `text`) within the text limits, photo
/// references (`image`) within CLIPFN_MAX_IMAGES. Each limit is an `anyOf`: the other modality,
/// or `input` within it.
pub(super) fn state_input_limits(schemas: &mut BTreeMap<String, RefOr<Schema>>, text: &TextSettings, limits: &Limits) {
    let input = |max_items: usize, max_chars: Option<usize>| {
        let string = || ObjectBuilder::new().schema_type(Type::String).max_length(max_chars);
        let list = ArrayBuilder::new().items(string()).max_items(Some(max_items));
        ObjectBuilder::new().property("input", OneOfBuilder::new().item(string()).item(list))
    };
    let photos = ObjectBuilder::new().required("modality").property("modality", any_of_values([json!("image")]));
    let texts = ObjectBuilder::new().property("modality", any_of_values([json!("text"), Value::Null]));
    let text_limits = AnyOfBuilder::new().item(photos).item(input(text.max_texts, Some(text.max_text_chars)));
    let photo_limits = AnyOfBuilder::new().item(texts).item(input(limits.max_images, None));
    add(schemas, "EmbeddingsRequest", [text_limits.into(), photo_limits.into()]);
}

/// `name`'s schema becomes `allOf` its parts and `rules`, its description kept on top.
fn add<const N: usize>(schemas: &mut BTreeMap<String, RefOr<Schema>>, name: &str, rules: [Schema; N]) {
    let schema = schemas.remove(name).unwrap_or_else(|| panic!("no schema {name}"));
    let (description, parts) = match schema {
        RefOr::T(Schema::AllOf(all)) => (all.description, all.items),
        RefOr::T(Schema::Object(mut object)) => (object.description.take(), vec![object.into()]),
        _ => panic!("{name} is neither an object nor allOf"),
    };
    let all = parts.into_iter().chain(rules.map(RefOr::T)).fold(AllOfBuilder::new(), AllOfBuilder::item);
    schemas.insert(name.to_owned(), Schema::AllOf(all.description(description).build()).into());
}
