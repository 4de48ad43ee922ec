//! The Lambda path: every sample event in events/ replayed through `clipfn replay`, and the real
//! binary serving invocations from a Lambda Runtime API peer on loopback.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::{Path as UrlPath, State},
    http::HeaderMap,
    routing::{get, post},
};
use clipfn::replay::Expectation;
use common::{Proc, camera_photos, setup_var};
use serde_json::Value;
use tokio::sync::mpsc;

/// The local store the sample events refer to: sample/photo-{1,2,3}.jpg.
fn sample_store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sample")).unwrap();
    for (i, photo) in camera_photos(3).iter().enumerate() {
        std::fs::copy(photo, dir.path().join(format!("sample/photo-{}.jpg", i + 1))).unwrap();
    }
    dir
}

fn clipfn(store: &Path) -> Command {
    with_settings(Command::new(env!("CARGO_BIN_EXE_clipfn")), store)
}

/// `command` with nothing but the settings clipfn needs to serve the sample store.
fn with_settings(mut command: Command, store: &Path) -> Command {
    command
        .env_clear()
        .env("ORT_DYLIB_PATH", setup_var("ORT_DYLIB_PATH"))
        .env("CLIPFN_MODEL", setup_var("CLIPFN_TEST_MODEL"))
        .env("CLIPFN_STORE", format!("file://{}", store.display()))
        .env("CLIPFN_BATCH_SIZE", "4")
        .env("RUST_LOG", "warn");
    command
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

/// A minimal Lambda Runtime API: hands out `events` in turn, collects what the function returns.
#[derive(Clone)]
struct RuntimeApi {
    events: Arc<Mutex<Vec<(String, Value)>>>,
    results: mpsc::UnboundedSender<(String, String, Value)>,
}

async fn next_invocation(State(api): State<RuntimeApi>) -> (HeaderMap, String) {
    let next = api.events.lock().unwrap().pop();
    let Some((id, event)) = next else {
        // Nothing more to hand out: hold the long poll, as the real service does.
        std::future::pending::<()>().await;
        unreachable!()
    };
    let deadline_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() + 60_000;
    let mut headers = HeaderMap::new();
    headers.insert("lambda-runtime-aws-request-id", id.parse().unwrap());
    headers.insert("lambda-runtime-deadline-ms", deadline_ms.to_string().parse().unwrap());
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:us-east-1:123456789012:function:clipfn".parse().unwrap(),
    );
    headers.insert("lambda-runtime-trace-id", "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1".parse().unwrap());
    (headers, event.to_string())
}

async fn record(api: &RuntimeApi, id: String, kind: &str, body: String) {
    let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    let _ = api.results.send((id, kind.to_string(), value));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_invocations_from_a_lambda_runtime_api_peer() {
    let store = sample_store();
    let events_dir = common::repo().join("events");
    let invocations = ["apigw-v1-embed-good", "apigw-v2-embed-one-bad", "apigw-v1-embed-malformed", "apigw-v2-readyz"];
    let queue: Vec<(String, Value)> = invocations
        .iter()
        .rev()
        .map(|name| {
            let text = std::fs::read_to_string(events_dir.join(format!("{name}.json"))).unwrap();
            (name.to_string(), serde_json::from_str(&text).unwrap())
        })
        .collect();
    let (results, mut received) = mpsc::unbounded_channel();
    let api = RuntimeApi { events: Arc::new(Mutex::new(queue)), results };
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(|State(api): State<RuntimeApi>, UrlPath(id): UrlPath<String>, body: String| async move {
                record(&api, id, "response", body).await;
            }),
        )
        .route(
            "/2018-06-01/runtime/invocation/{id}/error",
            post(|State(api): State<RuntimeApi>, UrlPath(id): UrlPath<String>, body: String| async move {
                record(&api, id, "error", body).await;
            }),
        )
        .route(
            "/2018-06-01/runtime/init/error",
            post(|State(api): State<RuntimeApi>, body: String| async move {
                record(&api, "init".into(), "error", body).await;
            }),
        )
        .with_state(api);
    // Bound at once on a port the system picks, so no other test can take it in between.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let child = clipfn(store.path())
        .arg("serve")
        .env("AWS_LAMBDA_RUNTIME_API", format!("127.0.0.1:{port}"))
        .env("AWS_LAMBDA_FUNCTION_NAME", "clipfn")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "3008")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _function = Proc(child);

    for name in invocations {
        let (id, kind, response) = tokio::time::timeout(Duration::from_secs(60), received.recv())
            .await
            .expect("the function answered within 60 s")
            .unwrap();
        assert_eq!((id.as_str(), kind.as_str()), (name, "response"), "{response}");
        check(&events_dir.join(format!("{name}.json")), &response);
    }
}
