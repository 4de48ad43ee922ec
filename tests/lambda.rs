//! The Lambda path: every sample event in events/ replayed through `clipfn replay`, and the real
//! binary serving invocations from a Lambda Runtime API peer on loopback.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use clipfn::hosts::replay::Expectation;
use common::{Object, Proc, RuntimeApi, camera_photos, with_settings};
use serde_json::Value;

/// The local store the sample events refer to: sample/photo-{1,2,3}.jpg.
fn sample_store() -> tempfile::TempDir {
    common::store(
        camera_photos(3)
            .into_iter()
            .enumerate()
            .map(|(i, photo)| (format!("sample/photo-{}.jpg", i + 1), Object::Copy(photo))),
    )
}

fn clipfn(store: &Path) -> Command {
    with_settings(Command::new(env!("CARGO_BIN_EXE_clipfn")), store)
}

/// Checks a gateway response against the expectation kept next to the event, as `clipfn replay`
/// does.
fn check(event: &Path, response: &Value) {
    let expectation = Expectation::for_event(event).unwrap().expect("every sample event has an expectation");
    if let Err(mismatch) = expectation.check(response) {
        panic!("{}: {mismatch}: {response}", event.display());
    }
}

fn sample_events() -> Vec<PathBuf> {
    let mut events: Vec<PathBuf> = std::fs::read_dir(common::repo().join("events"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.to_str().unwrap().ends_with(".expect.json"))
        .collect();
    events.sort();
    assert!(events.len() >= 10, "events/ lost its samples");
    events
}

/// The replay lines printed on stdout.
fn lines(stdout: Vec<u8>) -> Vec<Value> {
    String::from_utf8(stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_readme_replay_command_checks_every_sample_event() {
    let store = sample_store();
    // Exactly as README gives it, from the repository root: the shell's glob also names the
    // NAME.expect.json files.
    let bin = Path::new(env!("CARGO_BIN_EXE_clipfn")).parent().unwrap();
    let output = with_settings(Command::new("sh"), store.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .current_dir(common::repo())
        .args(["-c", "clipfn replay events/*.json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "replay failed: {}", String::from_utf8_lossy(&output.stderr));
    let mut replayed: Vec<String> = lines(output.stdout)
        .iter()
        .map(|line| {
            assert_eq!(line["check"], "pass", "{line}");
            line["file"].as_str().unwrap().to_string()
        })
        .collect();
    replayed.sort();
    let events: Vec<String> =
        sample_events().iter().map(|e| e.strip_prefix(common::repo()).unwrap().display().to_string()).collect();
    assert_eq!(replayed, events, "one line per event, none for expectation files");
}

#[test]
fn replay_fails_when_an_event_misses_its_expectation() {
    let store = sample_store();
    let dir = tempfile::tempdir().unwrap();
    let events = common::repo().join("events");
    std::fs::copy(events.join("body-embed-one-bad.json"), dir.path().join("one-bad.json")).unwrap();
    std::fs::write(dir.path().join("one-bad.expect.json"), r#"{"status": 200, "items": ["ok", "ok", "ok"]}"#).unwrap();
    std::fs::copy(events.join("body-embed-good.json"), dir.path().join("good.json")).unwrap();
    let output = clipfn(store.path())
        .arg("replay")
        .args([dir.path().join("good.json"), dir.path().join("one-bad.json")])
        .output()
        .unwrap();
    assert!(!output.status.success(), "a failed expectation must fail the replay");
    let lines = lines(output.stdout);
    assert_eq!(lines[0]["check"], "none", "good.json has no expectation: {}", lines[0]);
    assert_eq!(lines[1]["check"], "fail", "{}", lines[1]);
    assert!(lines[1]["mismatch"].as_str().unwrap().contains("not_found"), "{}", lines[1]);
}

#[test]
fn serves_invocations_from_a_lambda_runtime_api_peer() {
    let store = sample_store();
    let events_dir = common::repo().join("events");
    let invocations = ["apigw-v1-embed-good", "apigw-v2-embed-one-bad", "apigw-v1-embed-malformed", "apigw-v2-readyz"];
    let runtime_api = RuntimeApi::start(invocations.iter().map(|name| {
        let text = std::fs::read_to_string(events_dir.join(format!("{name}.json"))).unwrap();
        (name.to_string(), serde_json::from_str::<Value>(&text).unwrap())
    }));

    let child = runtime_api.function_env(clipfn(store.path()).arg("serve")).stdout(Stdio::null()).spawn().unwrap();
    let _function = Proc(child);

    for name in invocations {
        let answer = runtime_api.answer(Duration::from_secs(60));
        assert_eq!((answer.id.as_str(), answer.kind), (name, "response"), "{}", answer.body);
        check(&events_dir.join(format!("{name}.json")), &answer.body);
    }
}

/// The sample `/v1/analyze` event replayed with `setting` (a model folder) set: its answer's body.
fn analyze_by_replay(setting: (&str, &str)) -> Value {
    let store = sample_store();
    let output = clipfn(store.path())
        .env(setting.0, common::setup_var(setting.1))
        .arg("replay")
        .arg(common::repo().join("events/apigw-v2-analyze-one-bad.json"))
        .output()
        .unwrap();
    assert!(output.status.success(), "replay failed: {}", String::from_utf8_lossy(&output.stderr));
    let line = &lines(output.stdout)[0];
    serde_json::from_str(line["response"]["body"].as_str().unwrap()).unwrap()
}

/// `/v1/analyze` with faces through the Lambda path: the same router, so the same faces and people.
#[test]
fn faces_come_through_replay() {
    let body = analyze_by_replay(("CLIPFN_FACE_MODEL", "CLIPFN_TEST_FACES_SCRFD"));
    assert!(body["data"][0]["faces"].is_array() && body["data"][2]["faces"].is_array(), "{body}");
    assert!(body["data"][1].get("faces").is_none() && body["data"][1]["error"].is_object(), "{body}");
    assert!(body["album"]["people"].is_array(), "{body}");
}

/// `/v1/analyze` with OCR through the Lambda path: each photo's lines (the sample camera photos
/// hold none readable), none for the missing one.
#[test]
fn ocr_comes_through_replay() {
    let body = analyze_by_replay(("CLIPFN_OCR_MODEL", "CLIPFN_TEST_OCR"));
    assert!(body["data"][0]["ocr"].is_array() && body["data"][2]["ocr"].is_array(), "{body}");
    assert!(body["data"][1].get("ocr").is_none() && body["data"][1]["error"].is_object(), "{body}");
}
