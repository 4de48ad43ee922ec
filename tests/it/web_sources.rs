//! Photos by http(s) URL and by inline data URI, against a real HTTP server on loopback that
//! records every connection and request it receives. The SSRF guard is proven by that record:
//! a refused reference must leave no trace on the server at all.

use crate::common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{Path as UrlPath, State},
    http::{StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::get,
    serve::ListenerExt,
};
use base64::Engine;
use common::{Server, ServerConfig, camera_photos, cosine, item};
use serde_json::{Value, json};

/// What the photo server saw.
#[derive(Default)]
struct Record {
    connections: AtomicUsize,
    requests: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Record {
    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    fn count(&self, path: &str) -> usize {
        self.requests().iter().filter(|r| r.split('?').next() == Some(path)).count()
    }
}

struct PhotoServer {
    port: u16,
    record: Arc<Record>,
    _runtime: tokio::runtime::Runtime,
}

#[derive(Clone)]
struct Served {
    photo: Arc<Vec<u8>>,
    record: Arc<Record>,
}

/// Serves `/photos/NAME` (a photo, redirects, error statuses, stalls, an endless body) and
/// `/private/NAME` (a photo that must never be asked for).
fn start_photo_server(photo: Vec<u8>) -> PhotoServer {
    let record = Arc::new(Record::default());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::clone(&record);
    let listener = listener.tap_io(move |_| {
        seen.connections.fetch_add(1, Ordering::SeqCst);
    });
    let state = Served { photo: Arc::new(photo), record: Arc::clone(&record) };
    let app = Router::new()
        .route("/photos/{name}", get(photos))
        .route("/private/{name}", get(|State(s): State<Served>| async move { s.photo.to_vec() }))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&record), recorded))
        .with_state(state);
    runtime.spawn(async move { axum::serve(listener, app).await });
    PhotoServer { port, record, _runtime: runtime }
}

async fn recorded(
    State(record): State<Arc<Record>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let uri: &Uri = request.uri();
    record.requests.lock().unwrap().push(uri.path_and_query().map_or(String::new(), |p| p.to_string()));
    next.run(request).await
}

async fn photos(State(s): State<Served>, UrlPath(name): UrlPath<String>) -> Response {
    let redirect = |to: &str| (StatusCode::FOUND, [(header::LOCATION, to.to_string())]).into_response();
    let xml = |status, code: &str, message: &str| {
        let body = format!("<Error><Code>{code}</Code><Message>{message}</Message></Error>");
        (status, [(header::CONTENT_TYPE, "application/xml")], body).into_response()
    };
    match name.as_str() {
        "a.jpg" => s.photo.to_vec().into_response(),
        "redirect-in.jpg" => redirect("/photos/a.jpg"),
        "redirect-out.jpg" => redirect("/private/a.jpg"),
        "expired.jpg" => xml(StatusCode::FORBIDDEN, "AccessDenied", "Request has expired"),
        "gcs-expired.jpg" => xml(StatusCode::BAD_REQUEST, "ExpiredToken", "The provided token has expired."),
        "denied.jpg" => xml(StatusCode::FORBIDDEN, "SignatureDoesNotMatch", "The signature does not match."),
        // 503 the first time, the photo after.
        "flaky.jpg" if s.record.count("/photos/flaky.jpg") == 1 => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        "flaky.jpg" => s.photo.to_vec().into_response(),
        "broken.jpg" => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        "stalled.jpg" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            s.photo.to_vec().into_response()
        }
        // No Content-Length: the cap must hold while streaming.
        "endless.jpg" => {
            let chunks = (0..64).map(|_| Ok::<_, std::io::Error>(vec![0xffu8; 64 * 1024]));
            Body::from_stream(futures::stream::iter(chunks)).into_response()
        }
        slow if slow.starts_with("slow-") => {
            let now = s.record.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            s.record.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(150)).await;
            s.record.in_flight.fetch_sub(1, Ordering::SeqCst);
            s.photo.to_vec().into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

fn data_uri(bytes: &[u8]) -> String {
    format!("data:image/jpeg;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn code_and_message(body: &Value, i: usize) -> (String, String) {
    let error = &body["data"][i]["error"];
    (error["code"].as_str().unwrap_or("none").to_string(), error["message"].as_str().unwrap_or("").to_string())
}

#[test]
fn ssrf_forms_are_forbidden_and_never_connect() {
    let server = start_photo_server(std::fs::read(&camera_photos(1)[0]).unwrap());
    let port = server.port;
    let store = tempfile::tempdir().unwrap();
    let log = store.path().join("server.log");
    let clipfn = ServerConfig::local(store.path())
        .env("CLIPFN_ALLOWED_SOURCES", &format!("http://localhost:{port}/photos/"))
        .stderr_to(&log)
        .start();

    let forms = [
        format!("http://localhost:{port}/photos/a.jpg"), // resolves to loopback
        format!("http://127.0.0.1:{port}/photos/a.jpg"),
        format!("http://2130706433:{port}/photos/a.jpg"),
        format!("http://127.1:{port}/photos/a.jpg"),
        format!("http://0x7f.1:{port}/photos/a.jpg"),
        format!("http://0177.0.0.1:{port}/photos/a.jpg"),
        format!("http://[::ffff:127.0.0.1]:{port}/photos/a.jpg"),
        format!("http://[::1]:{port}/photos/a.jpg"),
        "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token".to_string(),
        format!("http://localhost:{port}@127.0.0.1:{port}/photos/a.jpg"),
        format!("http://%6c%6fcalhost:{port}/photos/a.jpg"),
        format!("http://localhost.:{port}/photos/a.jpg"),
        format!("https://localhost:{port}/photos/a.jpg"),
        format!("http://localhost:{port}/private/a.jpg"),
        format!("http://localhost:{port}/photos/../private/a.jpg"),
        format!("http://localhost:{port}/photos/%2e%2e/private/a.jpg"),
    ];
    let images: Vec<&str> = forms.iter().map(String::as_str).collect();
    let (status, body) = clipfn.embed(&images);
    assert_eq!(status, 200, "{body}");
    for (i, form) in forms.iter().enumerate() {
        assert_eq!(item(&body, i), Err("forbidden".into()), "{form}: {}", body["data"][i]["error"]);
    }
    // The client gets the code's fixed message; the log has the cause.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("non-public address"), "refused by the resolver, not by chance: {text}");
    assert_eq!(server.record.connections.load(Ordering::SeqCst), 0, "requests seen: {:?}", server.record.requests());
}

#[test]
fn urls_and_data_uris_embed_like_keys() {
    let photo = std::fs::read(&camera_photos(1)[0]).unwrap();
    assert!(photo.len() < 1 << 20, "the test photo must fit the 1 MiB limit below");
    let server = start_photo_server(photo.clone());
    let base = format!("http://localhost:{}/photos", server.port);
    let store = tempfile::tempdir().unwrap();
    std::fs::write(store.path().join("a.jpg"), &photo).unwrap();
    let log = store.path().join("server.log");
    let clipfn = ServerConfig::local(store.path())
        .stderr_to(&log)
        .env("CLIPFN_ALLOWED_SOURCES", &format!("{base}/"))
        .env("CLIPFN_ALLOW_PRIVATE_SOURCES", "true")
        .env("CLIPFN_MAX_IMAGE_BYTES", &(1 << 20).to_string())
        .env("CLIPFN_MAX_FETCHES_PER_HOST", "2")
        .env("CLIPFN_FETCH_RETRIES", "1")
        .env("CLIPFN_FETCH_TIMEOUT_MS", "2000")
        .start();

    let url = |name: &str| format!("{base}/{name}");
    let references = [
        "a.jpg".to_string(),
        url("a.jpg?X-Amz-Signature=sEcReT&X-Amz-Expires=60"),
        data_uri(&photo),
        url("redirect-in.jpg"),
        url("flaky.jpg"),
        url("redirect-out.jpg"),
        url("missing.jpg"),
        url("expired.jpg?X-Amz-Signature=sEcReT"),
        url("gcs-expired.jpg"),
        url("denied.jpg"),
        url("broken.jpg"),
        url("stalled.jpg"),
        url("endless.jpg"),
        "data:image/jpeg;base64,not*base64!".to_string(),
        "data:text/plain;base64,aGVsbG8=".to_string(),
        format!("http://127.0.0.1:{}/photos/a.jpg", server.port),
    ];
    let slow: Vec<String> = (0..6).map(|i| url(&format!("slow-{i}.jpg"))).collect();
    let images: Vec<&str> = references.iter().chain(&slow).map(String::as_str).collect();
    let (status, body) = clipfn.embed(&images);
    assert_eq!(status, 200, "{body}");

    let by_key = item(&body, 0).expect("the photo by key");
    for (i, what) in [(1, "signed URL"), (2, "data URI"), (3, "redirect inside the prefix"), (4, "retried 503")] {
        let embedding = item(&body, i).unwrap_or_else(|e| panic!("{what}: {e}: {}", body["data"][i]));
        assert!(cosine(&embedding, &by_key) >= 0.9999, "{what} differs from the photo by key");
    }
    let expected = [
        (5, "forbidden"),
        (6, "not_found"),
        (7, "forbidden"),
        (8, "forbidden"),
        (9, "forbidden"),
        (10, "fetch_failed"),
        (11, "fetch_failed"),
        (12, "too_large"),
        (13, "decode_failed"),
        (14, "unsupported_format"),
        (15, "forbidden"),
    ];
    for (i, code) in expected {
        assert_eq!(code_and_message(&body, i).0, code, "{}: {}", images[i], body["data"][i]);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("redirected outside"), "the log has the cause: {text}");
    assert!(code_and_message(&body, 7).1.contains("expired"), "{}", body["data"][7]);
    assert!(code_and_message(&body, 8).1.contains("expired"), "{}", body["data"][8]);
    assert!(!code_and_message(&body, 9).1.contains("expired"), "{}", body["data"][9]);
    for i in 0..slow.len() {
        item(&body, references.len() + i).expect("slow photo");
    }

    // Signatures reach the server, but never the response.
    let seen = server.record.requests();
    assert!(seen.contains(&"/photos/a.jpg?X-Amz-Signature=sEcReT&X-Amz-Expires=60".to_string()), "{seen:?}");
    assert!(!body.to_string().contains("sEcReT"), "a signature leaked into the response");
    assert_eq!(body["data"][1]["image"], url("a.jpg"));
    assert_eq!(body["data"][2]["image"], format!("data:image/jpeg;base64,…({} bytes)", photo.len()));
    // Redirects out of the prefix are not followed; retries are bounded; hosts are capped.
    assert_eq!(server.record.count("/private/a.jpg"), 0, "{seen:?}");
    assert_eq!(server.record.count("/photos/broken.jpg"), 2, "one try and one retry: {seen:?}");
    assert_eq!(server.record.count("/photos/flaky.jpg"), 2, "{seen:?}");
    let peak = server.record.max_in_flight.load(Ordering::SeqCst);
    assert!((1..=2).contains(&peak), "{peak} fetches in flight at once on one host, over its cap of 2");
}

#[test]
fn inline_bodies_get_the_larger_limit_only() {
    let store = tempfile::tempdir().unwrap();
    let clipfn = ServerConfig::local(store.path()).start();

    let huge = json!({ "images": [data_uri(&vec![0u8; 30 << 20])] });
    let (status, body) = post_oversized(&clipfn, &huge);
    assert_eq!((status, body["error"]["code"].as_str()), (413, Some("body_too_large")), "40 MB of inline photo");

    let long_key = "k".repeat(2 << 20);
    let (status, body) = clipfn.embed(&[long_key.as_str()]);
    assert_eq!((status, body["error"]["code"].as_str()), (413, Some("body_too_large")), "2 MB of keys");

    // 2 MB with a data URI is under the inline limit: its photo fails alone.
    let inline = data_uri(&vec![0u8; 3 << 19]);
    let (status, body) = clipfn.embed(&[inline.as_str(), "missing.jpg"]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(item(&body, 0), Err("unsupported_format".into()));
    assert_eq!(item(&body, 1), Err("not_found".into()));
}

/// The server refuses a body far over its limit from the Content-Length, before reading it, and
/// may close while the client is still writing: the client then sees a broken pipe, not the 413.
/// Up to three tries, so the 413 itself is still required.
fn post_oversized(server: &Server, body: &Value) -> (u16, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    for _ in 0..3 {
        let sent = common::blocking_client()
            .post(format!("{}/v1/embed", server.base))
            .header("content-type", "application/json")
            .body(bytes.clone())
            .send();
        if let Ok(response) = sent {
            let status = response.status().as_u16();
            return (status, response.json().unwrap_or(Value::Null));
        }
    }
    panic!("three tries at an oversized body all broke off before an answer");
}
