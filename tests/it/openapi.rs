//! The OpenAPI document (src/api/openapi.rs): docs/openapi.json is what `clipfn openapi` prints
//! and a server serves before its model is loaded, with the default settings; once loaded it adds
//! the model's dim and label sets and nothing else; it is valid OpenAPI 3.1; a body is valid by it
//! exactly when the server takes it; and a client generated from it works.

use crate::common;

use std::{path::Path, process::Command};

use common::*;
use serde_json::{Value, json};

const COMMITTED: &str = "docs/openapi.json";
const REGENERATE: &str = "UPDATE_OPENAPI=1 cargo test --test it openapi::docs_openapi_json";

/// With `UPDATE_OPENAPI=1` it writes the printed document to docs/openapi.json instead.
#[test]
fn docs_openapi_json_is_the_printed_document() {
    let output = Command::new(env!("CARGO_BIN_EXE_clipfn"))
        .arg("openapi")
        .env_clear()
        .env("CLIPFN_MODEL", "unused")
        .output()
        .expect("running clipfn openapi");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let printed = String::from_utf8(output.stdout).unwrap();
    let path = repo().join(COMMITTED);
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &printed).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if let Some((line, (was, is))) = committed.lines().zip(printed.lines()).enumerate().find(|(_, (was, is))| was != is)
    {
        panic!("{COMMITTED} differs from `clipfn openapi` at line {}: {was:?}, printed {is:?}; {REGENERATE}", line + 1);
    }
    assert_eq!(committed.lines().count(), printed.lines().count(), "{COMMITTED} is not `clipfn openapi`; {REGENERATE}");
}

/// A ready server serves docs/openapi.json with its model's id, dim and label sets written in, and the
/// OCR, faces, objects and heads it lacks, and nothing else changed.
#[test]
fn a_ready_server_adds_its_dim_and_label_sets() {
    let store = tempfile::tempdir().unwrap();
    let labels = store.path().join("labels.json");
    std::fs::write(&labels, r#"{"sets": {"places": {"labels": ["beach", "city"]}}}"#).unwrap();
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_TEXT_MODEL", &setup_var("CLIPFN_TEST_TEXT_MODEL"))
        .env("CLIPFN_LABELS", labels.to_str().unwrap())
        .start();
    let response = blocking_client().get(format!("{}/openapi.json", server.base)).send().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let served: Value = response.json().unwrap();
    let mut expected: Value = serde_json::from_str(&std::fs::read_to_string(repo().join(COMMITTED)).unwrap()).unwrap();
    let schemas = &mut expected["components"]["schemas"];
    let stored = &mut schemas["StoredEmbedding"];
    (stored["minItems"], stored["maxItems"]) = (json!(512), json!(512));
    let dimensions = &mut schemas["EmbeddingsRequest"]["allOf"][0]["properties"]["dimensions"];
    (dimensions["minimum"], dimensions["maximum"]) = (json!(512), json!(512));
    schemas["LabelsRequest"]["properties"]["label_set"]["enum"] = json!(["places", null]);
    // The only image model `known_pets` may come from: this one.
    schemas["AnalyzeRequest"]["allOf"][2]["properties"]["known_pets_model"]["enum"] = json!(["clip-test", null]);
    // No OCR models: `"ocr": true` is refused, as a rule of its own.
    let rules = schemas["AnalyzeRequest"]["allOf"].as_array_mut().unwrap();
    rules.push(json!({"anyOf": [{"type": "object", "properties": {"ocr": {"enum": [false, null]}}}]}));
    // No face models: `"faces": true` and `known_people` are refused, the same way.
    let no_faces = json!({"faces": {"enum": [false, null]}, "known_people": {"enum": [null]}});
    rules.push(json!({"anyOf": [{"type": "object", "properties": no_faces}]}));
    // No object model: `"objects": true` and `known_pets` are refused, the same way.
    let no_objects = json!({"objects": {"enum": [false, null]}, "known_pets": {"enum": [null]}});
    rules.push(json!({"anyOf": [{"type": "object", "properties": no_objects}]}));
    // No heads: stored embeddings need labels or a label set, as a rule of its own.
    rules.push(json!({"anyOf": [
        {"type": "object", "properties": {"embeddings": {"enum": [null]}}},
        {"type": "object", "required": ["labels"], "properties": {"labels": {"type": "array"}}},
        {"type": "object", "required": ["label_set"], "properties": {"label_set": {"type": "string"}}}
    ]}));
    assert_eq!(first_difference(&served, &expected, String::new()), None, "served, then expected");
}

/// Where `a` and `b` first differ, as a JSON pointer with both values there.
fn first_difference(a: &Value, b: &Value, at: String) -> Option<(String, Value, Value)> {
    let child = |key: &str| format!("{at}/{key}");
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => a.keys().chain(b.keys()).find_map(|key| {
            first_difference(a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null), child(key))
        }),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            a.iter().zip(b).enumerate().find_map(|(i, (a, b))| first_difference(a, b, child(&i.to_string())))
        }
        _ => (a != b).then(|| (at, a.clone(), b.clone())),
    }
}

/// tests/clients/document_rules.py posts bodies that break and keep the rules between fields
/// (`images` or `texts`, `labels` or `label_set`, ...) and the model's dim and label sets, and
/// checks that the served document calls a body valid exactly when the server does not refuse it
/// as a bad request.
#[test]
fn a_body_is_valid_by_the_document_exactly_when_the_server_takes_it() {
    let photos = camera_photos(1);
    let store = store_named(&photos);
    let labels = store.path().join("labels.json");
    std::fs::write(&labels, r#"{"sets": {"places": {"labels": ["beach", "city"]}}}"#).unwrap();
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_TEXT_MODEL", &setup_var("CLIPFN_TEST_TEXT_MODEL"))
        .env("CLIPFN_LABELS", labels.to_str().unwrap())
        .start();
    let output = Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(repo().join("tests/clients/document_rules.py"))
        .args([server.base.as_str(), file_name(&photos[0])])
        .output()
        .expect("running tests/clients/document_rules.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert!(summary["valid"].as_u64().unwrap() >= 8 && summary["invalid"].as_u64().unwrap() >= 12, "{summary}");
}

#[test]
fn the_document_is_valid_openapi() {
    let validator = Path::new(&setup_var("CLIPFN_PYTHON")).with_file_name("openapi-spec-validator");
    let output = Command::new(&validator).arg(repo().join(COMMITTED)).output().expect("running openapi-spec-validator");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}{}", String::from_utf8_lossy(&output.stderr));
    assert!(said.trim_end().ends_with(": OK"), "{said}");
}

/// tests/clients/openapi_client.py generates a client from /openapi.json (openapi-python-client)
/// and embeds and analyzes the camera photos with it.
#[test]
fn a_client_generated_from_the_document_embeds_and_analyzes() {
    let photos = camera_photos(3);
    let store = store_named(&photos);
    let labels = store.path().join("labels.json");
    std::fs::write(&labels, r#"{"sets": {"places": {"labels": ["beach", "city", "mountain", "forest"]}}}"#).unwrap();
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_TEXT_MODEL", &setup_var("CLIPFN_TEST_TEXT_MODEL"))
        .env("CLIPFN_LABELS", labels.to_str().unwrap())
        .start();
    let output = Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(repo().join("tests/clients/openapi_client.py"))
        .args([&server.base, "places", "missing.jpg"])
        .args(photos.iter().map(|photo| file_name(photo)))
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .output()
        .expect("running tests/clients/openapi_client.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((&summary["dim"], &summary["embedded"]), (&512.into(), &3.into()), "{summary}");
}
