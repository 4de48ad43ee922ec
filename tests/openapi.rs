//! The OpenAPI document (src/api/openapi.rs): docs/openapi.json is what the server serves with the
//! default settings, it is valid OpenAPI 3.1, and a client generated from it works.

mod common;

use std::{path::Path, process::Command};

use common::*;

const COMMITTED: &str = "docs/openapi.json";
const REGENERATE: &str = "UPDATE_OPENAPI=1 cargo test --test openapi docs_openapi_json";

/// With `UPDATE_OPENAPI=1` it writes the served document to docs/openapi.json instead.
#[test]
fn docs_openapi_json_is_the_served_document() {
    let store = tempfile::tempdir().unwrap();
    let server = ServerConfig::local(store.path()).start();
    let response = blocking_client().get(format!("{}/openapi.json", server.base)).send().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let served = response.text().unwrap();
    let path = repo().join(COMMITTED);
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &served).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if let Some((line, (was, is))) = committed.lines().zip(served.lines()).enumerate().find(|(_, (was, is))| was != is)
    {
        panic!(
            "{COMMITTED} differs from the served document at line {}: {was:?}, served {is:?}; {REGENERATE}",
            line + 1
        );
    }
    assert_eq!(
        committed.lines().count(),
        served.lines().count(),
        "{COMMITTED} is not the served document; {REGENERATE}"
    );
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
