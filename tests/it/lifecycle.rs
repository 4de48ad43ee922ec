//! Start-up, overload, deadlines and shutdown, driven through the real binary. A GCS stand-in
//! holds back photos named `slow*` until the test releases them, so a request stays in flight for
//! exactly as long as a test needs.

use crate::common;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{HeldStore, ServerConfig, blocking_client, camera_photos, failed_start, gcs_env, item, setup_var};

/// A store with one real photo, `good.jpg`, and any number of held ones, `slow*.jpg`.
fn held_store() -> (tempfile::TempDir, HeldStore) {
    let dir = tempfile::tempdir().unwrap();
    // The smallest real photo, so that decoding it is never what runs out the clock.
    let smallest = camera_photos(usize::MAX).into_iter().min_by_key(|p| std::fs::metadata(p).unwrap().len()).unwrap();
    std::fs::copy(smallest, dir.path().join("good.jpg")).unwrap();
    let store = HeldStore::start(dir.path());
    (dir, store)
}

fn server_on(store: &HeldStore) -> ServerConfig {
    gcs_env(ServerConfig::local(Path::new("/")), store.port).env("CLIPFN_STORE", "gs://photos")
}

#[test]
fn overload_is_refused_with_retry_after_and_admitted_work_completes() {
    let (_dir, store) = held_store();
    let server = server_on(&store).env("CLIPFN_MAX_QUEUED_IMAGES", "2").env("CLIPFN_MAX_IMAGES", "2").start();
    std::thread::scope(|s| {
        let first = s.spawn(|| server.embed(&["slow.jpg", "good.jpg"]));
        server.wait_in_flight(2);

        let refused = blocking_client()
            .post(format!("{}/v1/embed", server.base))
            .body(r#"{"images": ["good.jpg"]}"#)
            .send()
            .unwrap();
        assert_eq!(refused.status(), 429);
        assert_eq!(refused.headers()["retry-after"], "1");
        let body: serde_json::Value = refused.json().unwrap();
        assert_eq!(body["error"]["code"], "overloaded");

        store.release();
        let (status, body) = first.join().unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(item(&body, 0).unwrap(), item(&body, 1).unwrap());
    });
    assert_eq!(server.embed(&["good.jpg"]).0, 200, "places are given back");
}

#[test]
fn photos_past_the_deadline_get_item_errors() {
    let (_dir, store) = held_store();
    let server = server_on(&store).env("CLIPFN_REQUEST_TIMEOUT_MS", "3000").start();
    let (status, body) = server.embed(&["good.jpg", "slow.jpg", "good.jpg"]);
    assert_eq!(status, 200, "{body}");
    assert!(item(&body, 0).is_ok() && item(&body, 2).is_ok(), "{body}");
    assert_eq!(item(&body, 1), Err("deadline_exceeded".into()));
}

/// An album whose request runs out of time is not computed, and says why; the photos that were
/// answered keep their answers and the one past the deadline gets its error, as at /v1/embed.
#[test]
fn past_the_deadline_the_photos_are_answered_and_the_album_says_it_was_not_computed() {
    let (_dir, store) = held_store();
    let server = server_on(&store).env("CLIPFN_REQUEST_TIMEOUT_MS", "3000").start();
    let (status, body) =
        server.post_json("/v1/analyze", &serde_json::json!({"images": ["good.jpg", "slow.jpg", "good.jpg"]}));
    assert_eq!(status, 200, "{body}");
    assert!(body["data"][0]["hash"].is_string() && body["data"][2]["hash"].is_string(), "{body}");
    assert_eq!(body["data"][1]["error"]["code"], "deadline_exceeded", "{body}");
    let album = &body["album"];
    assert_eq!(album["error"]["code"], "deadline_exceeded", "{album}");
    assert!(album["error"]["message"].as_str().unwrap().contains("CLIPFN_REQUEST_TIMEOUT_MS"), "{album}");
    assert!(album.get("duplicates").is_none() && body["timings_ms"].get("album").is_none(), "{body}");
    // In time, the same photos get their album, and its time.
    store.release();
    let (status, body) =
        server.post_json("/v1/analyze", &serde_json::json!({"images": ["good.jpg", "slow.jpg", "good.jpg"]}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["album"]["duplicates"][0]["photos"], serde_json::json!([0, 1, 2]), "{body}");
    assert!(body["timings_ms"]["album"].as_f64().is_some(), "{body}");
}

#[test]
fn sigterm_drains_the_request_in_flight_then_exits_zero() {
    let (_dir, store) = held_store();
    let mut server = server_on(&store).start();
    let pid = server.proc.0.id().to_string();
    std::thread::scope(|s| {
        let in_flight = s.spawn(|| server.embed(&["slow.jpg", "good.jpg"]));
        server.wait_in_flight(2);
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        std::thread::sleep(Duration::from_millis(300));
        store.release();
        let (status, body) = in_flight.join().unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(item(&body, 0).is_ok(), "{body}");
    });
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit status {status}");
}

#[test]
fn not_ready_while_the_model_loads_and_sigterm_still_exits() {
    let (_dir, store) = held_store();
    // The model comes from the held store and never arrives.
    let mut config = server_on(&store).env("CLIPFN_MODEL", "gs://models/slow-model.onnx");
    config.wait_ready = false;
    let mut server = config.start();
    assert_eq!(server.get("/healthz").0, 200);
    let (status, body) = server.get("/readyz");
    assert_eq!(status, 503, "{body}");
    let refused =
        blocking_client().post(format!("{}/v1/embed", server.base)).body(r#"{"images": ["good.jpg"]}"#).send().unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");

    let pid = server.proc.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "exit status {status}");
}

#[test]
fn sigterm_under_load_exits_zero_within_9_s_even_when_the_collector_never_answers() {
    let (_dir, store) = held_store();
    // Accepts connections (the kernel completes them) and never reads or answers.
    let collector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", collector.local_addr().unwrap());
    // Default shutdown settings; spans and metrics are buffered for the collector.
    let mut server = server_on(&store).env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint).start();
    assert_eq!(server.embed(&["good.jpg"]).0, 200);
    let pid = server.pid().to_string();
    let (status, body, signalled) = std::thread::scope(|s| {
        // Held by the store until after the exit: it can only be answered shutting_down.
        let in_flight = s.spawn(|| server.embed(&["slow.jpg", "good.jpg"]));
        server.wait_in_flight(2);
        let signalled = Instant::now();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let (status, body) = in_flight.join().unwrap();
        (status, body, signalled)
    });
    let exit = server.wait_exit(Duration::from_secs(20));
    let elapsed = signalled.elapsed();
    store.release();
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("shutting_down")), "{body}");
    assert!(exit.success(), "exit status {exit}");
    assert!(elapsed < Duration::from_secs(9), "exited {elapsed:?} after SIGTERM; Cloud Run kills at 10 s");
}

#[test]
fn a_model_without_a_dynamic_batch_dimension_is_refused_naming_it() {
    let model = common::model("clip-fixed-batch.onnx");
    let stderr = failed_start(&[("CLIPFN_MODEL", model.as_str())]);
    assert!(stderr.contains("batch dimension") && stderr.contains("pixel_values"), "{stderr}");
}

#[test]
fn relative_paths_mean_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(setup_var("CLIPFN_TEST_MODEL"), dir.path().join("clip.onnx")).unwrap();
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    std::fs::copy(&camera_photos(1)[0], dir.path().join("photos/a.jpg")).unwrap();
    let mut config = ServerConfig::local(dir.path()).env("CLIPFN_MODEL", "clip.onnx").env("CLIPFN_STORE", "./photos");
    config.cwd = Some(dir.path().to_path_buf());
    let server = config.start();
    let real = std::fs::canonicalize(dir.path().join("photos/a.jpg")).unwrap();
    let (status, body) = server.embed(&["a.jpg", &format!("file://{}", real.display())]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(item(&body, 0).unwrap(), item(&body, 1).unwrap(), "{body}");
    assert_eq!(body["model"], "clip");
}

#[test]
fn serve_help_points_to_the_settings() {
    let output = Command::new(env!("CARGO_BIN_EXE_clipfn")).args(["serve", "--help"]).env_clear().output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for needle in ["CLIPFN_MODEL", "ORT_DYLIB_PATH", "CLIPFN_STORE", "README.md"] {
        assert!(help.contains(needle), "no {needle} in:\n{help}");
    }
}

#[test]
fn bad_settings_stop_start_up_naming_the_variable() {
    assert!(failed_start(&[("CLIPFN_BATCH_SIZE", "many")]).contains("CLIPFN_BATCH_SIZE"));
    assert!(failed_start(&[("CLIPFN_PROVIDER", "tpu")]).contains("CLIPFN_PROVIDER"));
    assert!(failed_start(&[("PORT", "http")]).contains("PORT"));
    assert!(failed_start(&[("CLIPFN_MODEL", "/nonexistent/model.onnx")]).contains("CLIPFN_MODEL"));
    assert!(failed_start(&[("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")]).contains("ORT_DYLIB_PATH"));
    // No GPU here: insisting on CUDA must fail loudly rather than fall back.
    let cuda = failed_start(&[("CLIPFN_PROVIDER", "cuda")]);
    assert!(cuda.contains("CUDA"), "{cuda}");
}
