//! Telemetry through the real binary: spans and metrics exported over OTLP/HTTP to a receiver on
//! loopback that decodes the protobuf requests, Prometheus text on /metrics, and the JSON log
//! lines Cloud Logging reads. Photos come from a local store; nothing leaves 127.0.0.1.

use crate::common;

use std::{
    collections::HashMap,
    net::TcpListener,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Router, body::Bytes, extract::State, http::StatusCode, routing::post};
use common::{
    Object, RuntimeApi, Server, ServerConfig, blocking_client, camera_photos, item, scrape, series, serve_on_thread,
};
use opentelemetry_proto::tonic::{
    collector::{
        metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse},
        trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
    },
    common::v1::{AnyValue, KeyValue, any_value},
    metrics::v1::{Metric, metric, number_data_point},
    trace::v1::{Span, span::SpanKind, status::StatusCode as SpanStatus},
};
use prost::Message;
use serde_json::Value;

// ---- an OTLP/HTTP receiver ----------------------------------------------------------------

#[derive(Default)]
struct Received {
    /// Every span with its resource's `service.name`.
    spans: Vec<(String, Span)>,
    metrics: Vec<Metric>,
    /// Requests that did not decode as OTLP protobuf.
    garbage: Vec<String>,
}

type Shared = Arc<Mutex<Received>>;

struct Receiver {
    endpoint: String,
    received: Shared,
}

impl Receiver {
    fn start() -> Self {
        let received = Shared::default();
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(Arc::clone(&received));
        Receiver { endpoint: format!("http://{}", serve_on_thread(app)), received }
    }

    /// Polls until `ready` holds for what arrived, for at most 30 s.
    fn wait_for<T>(&self, what: &str, mut ready: impl FnMut(&Received) -> Option<T>) -> T {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            {
                let received = self.received.lock().unwrap();
                assert!(received.garbage.is_empty(), "undecodable OTLP requests: {:?}", received.garbage);
                if let Some(found) = ready(&received) {
                    return found;
                }
                if Instant::now() > until {
                    let names: Vec<_> = received.spans.iter().map(|(_, s)| &s.name).collect();
                    panic!("{what} did not arrive within 30 s; spans so far: {names:?}");
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn protobuf(body: Vec<u8>) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    ([("content-type", "application/x-protobuf")], body)
}

async fn traces(State(state): State<Shared>, body: Bytes) -> Result<impl axum::response::IntoResponse, StatusCode> {
    let mut received = state.lock().unwrap();
    let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref()) else {
        received.garbage.push(format!("/v1/traces: {} bytes", body.len()));
        return Err(StatusCode::BAD_REQUEST);
    };
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| string_attr(&r.attributes, "service.name"))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            received.spans.extend(scope_spans.spans.into_iter().map(|span| (service.clone(), span)));
        }
    }
    Ok(protobuf(ExportTraceServiceResponse::default().encode_to_vec()))
}

async fn metrics(State(state): State<Shared>, body: Bytes) -> Result<impl axum::response::IntoResponse, StatusCode> {
    let mut received = state.lock().unwrap();
    let Ok(request) = ExportMetricsServiceRequest::decode(body.as_ref()) else {
        received.garbage.push(format!("/v1/metrics: {} bytes", body.len()));
        return Err(StatusCode::BAD_REQUEST);
    };
    for resource_metrics in request.resource_metrics {
        for scope_metrics in resource_metrics.scope_metrics {
            received.metrics.extend(scope_metrics.metrics);
        }
    }
    Ok(protobuf(ExportMetricsServiceResponse::default().encode_to_vec()))
}

fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn string_attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    match attr(attributes, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn int_attr(span: &Span, key: &str) -> Option<i64> {
    match attr(&span.attributes, key)? {
        any_value::Value::IntValue(i) => Some(*i),
        _ => None,
    }
}

/// The trace as an indented tree, one span a line (run with --nocapture to see it; the example in
/// docs/observability.md was made this way).
fn render(spans: &[Span], remote_parent: &str) -> String {
    fn value(v: &any_value::Value) -> String {
        match v {
            any_value::Value::StringValue(s) => format!("{s:?}"),
            any_value::Value::IntValue(i) => i.to_string(),
            any_value::Value::BoolValue(b) => b.to_string(),
            any_value::Value::DoubleValue(d) => d.to_string(),
            other => format!("{other:?}"),
        }
    }
    fn walk(spans: &[Span], parent: &[u8], depth: usize, t0: u64, out: &mut String) {
        let mut children: Vec<&Span> = spans.iter().filter(|s| s.parent_span_id == parent).collect();
        children.sort_by_key(|s| (s.start_time_unix_nano, int_attr(s, "clipfn.photo.index")));
        for span in children {
            let ms = |ns: u64| ns as f64 / 1e6;
            let attributes: Vec<String> = span
                .attributes
                .iter()
                .filter(|kv| !matches!(kv.key.as_str(), "busy_ns" | "idle_ns" | "thread.id" | "target"))
                .filter_map(|kv| Some(format!("{}={}", kv.key, value(kv.value.as_ref()?.value.as_ref()?))))
                .collect();
            let status = match span.status.as_ref().map(|s| s.code) {
                Some(code) if code == SpanStatus::Error as i32 => " ERROR",
                _ => "",
            };
            let links: Vec<String> =
                span.links.iter().map(|l| format!(" link->{}/{}", hex(&l.trace_id), hex(&l.span_id))).collect();
            out.push_str(&format!(
                "{:indent$}{} [{}] +{:.1} ms {:.1} ms{status} {}{}\n",
                "",
                span.name,
                hex(&span.span_id),
                ms(span.start_time_unix_nano.saturating_sub(t0)),
                ms(span.end_time_unix_nano - span.start_time_unix_nano),
                attributes.join(" "),
                links.concat(),
                indent = 2 * depth + 2,
            ));
            walk(spans, &span.span_id, depth + 1, t0, out);
        }
    }
    let t0 = spans.iter().map(|s| s.start_time_unix_nano).min().unwrap_or(0);
    let mut out = format!("trace {}\n  (remote parent {remote_parent})\n", hex(&spans[0].trace_id));
    let parent: Vec<u8> = (0..remote_parent.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&remote_parent[i..i + 2], 16).unwrap())
        .collect();
    walk(spans, &parent, 1, t0, &mut out);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---- the server under test --------------------------------------------------------------

/// A store with two real photos; the key names let the tests check that keys never reach a log.
fn store() -> tempfile::TempDir {
    common::store(
        camera_photos(2)
            .into_iter()
            .zip(["private-a.jpg", "private-b.jpg"])
            .map(|(photo, name)| (name, Object::Copy(photo))),
    )
}

const KEYS: [&str; 3] = ["private-a.jpg", "private-missing.jpg", "private-b.jpg"];

/// Posts `images` with a W3C `traceparent` naming `trace_id` and `parent_id`.
fn embed_traced(server: &Server, images: &[&str], trace_id: &str, parent_id: &str) -> Value {
    let response = blocking_client()
        .post(format!("{}/v1/embed", server.base))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{trace_id}-{parent_id}-01"))
        .body(serde_json::to_vec(&serde_json::json!({ "images": images })).unwrap())
        .send()
        .expect("request to clipfn");
    assert_eq!(response.status(), 200);
    response.json().unwrap()
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const REMOTE_PARENT: &str = "00f067aa0ba902b7";

/// `config` exporting spans and metrics to `receiver` over OTLP/HTTP at once (a 100 ms span batch,
/// metrics every 300 ms), its log as JSON.
fn exporting_to(receiver: &Receiver, config: ServerConfig) -> ServerConfig {
    config
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .env("CLIPFN_LOG_FORMAT", "json")
}

#[test]
fn spans_metrics_and_json_logs_arrive_with_their_links() {
    let receiver = Receiver::start();
    let store = store();
    let log = store.path().join("server.log");
    let server = exporting_to(&receiver, ServerConfig::local(store.path()))
        .env("GOOGLE_CLOUD_PROJECT", "clipfn-test")
        // Two photos fill a batch; a lone photo waits long enough for a partner.
        .env("CLIPFN_BATCH_SIZE", "2")
        .env("CLIPFN_BATCH_WAIT_MS", "5000")
        .stderr_to(&log)
        .start();

    let body = embed_traced(&server, &KEYS, TRACE, REMOTE_PARENT);
    assert!(item(&body, 0).is_ok() && item(&body, 2).is_ok(), "{body}");
    assert_eq!(item(&body, 1), Err("not_found".into()));

    // --- spans: one request span under the caller's span, stage spans under it ---
    let spans = receiver.wait_for("the request's spans", |r| {
        let ours: Vec<Span> =
            r.spans.iter().filter(|(_, s)| hex(&s.trace_id) == TRACE).map(|(_, s)| s.clone()).collect();
        let count = |name: &str| ours.iter().filter(|s| s.name == name).count();
        let batched: i64 =
            ours.iter().filter(|s| s.name == "inference").filter_map(|s| int_attr(s, "clipfn.batch.size")).sum();
        (count("POST /v1/embed") == 1
            && count("fetch") == 3
            && count("decode") == 2
            && count("queue") == 2
            && batched == 2)
            .then_some(ours)
    });
    println!("{}", render(&spans, REMOTE_PARENT));
    let service =
        receiver.received.lock().unwrap().spans.iter().find(|(_, s)| hex(&s.trace_id) == TRACE).unwrap().0.clone();
    assert_eq!(service, "clipfn");

    let request = spans.iter().find(|s| s.name == "POST /v1/embed").unwrap();
    assert_eq!(hex(&request.parent_span_id), REMOTE_PARENT, "the request span continues the caller's trace");
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(int_attr(request, "clipfn.images"), Some(3));
    assert_eq!(int_attr(request, "clipfn.errors"), Some(1));
    assert_eq!(int_attr(request, "http.response.status_code"), Some(200));
    assert_eq!(string_attr(&request.attributes, "http.route").as_deref(), Some("/v1/embed"));

    let mut batch_ids = Vec::new();
    for span in spans.iter().filter(|s| s.name != request.name) {
        assert_eq!(span.parent_span_id, request.span_id, "{} is not a child of the request span", span.name);
        assert!(
            span.start_time_unix_nano >= request.start_time_unix_nano
                && span.end_time_unix_nano <= request.end_time_unix_nano,
            "{} lies outside its request",
            span.name
        );
        let index = int_attr(span, "clipfn.photo.index");
        let failed = span.status.as_ref().is_some_and(|s| s.code == SpanStatus::Error as i32);
        match span.name.as_str() {
            "fetch" => {
                assert_eq!(failed, index == Some(1), "only the missing photo's fetch fails (index {index:?})");
                if index != Some(1) {
                    assert!(int_attr(span, "clipfn.photo.bytes").unwrap() > 1000);
                }
            }
            "decode" => assert!(matches!(index, Some(0 | 2)) && !failed, "decode of photo {index:?}"),
            "queue" => {
                assert!(matches!(index, Some(0 | 2)));
                batch_ids.push(int_attr(span, "clipfn.batch.id").expect("queue span names its batch"));
            }
            "inference" => {
                assert_eq!(int_attr(span, "clipfn.batch.requests"), Some(1));
                assert!(span.links.is_empty(), "a one-request batch links nowhere");
            }
            other => panic!("unexpected span {other}"),
        }
    }
    let inference_ids: Vec<i64> =
        spans.iter().filter(|s| s.name == "inference").map(|s| int_attr(s, "clipfn.batch.id").unwrap()).collect();
    assert!(
        batch_ids.iter().all(|id| inference_ids.contains(id)),
        "queue spans {batch_ids:?} vs batches {inference_ids:?}"
    );

    // --- a batch shared by two requests: child of one, linked to the other ---
    let (trace_a, trace_b) = ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    std::thread::scope(|s| {
        let a = s.spawn(|| embed_traced(&server, &["private-a.jpg"], trace_a, REMOTE_PARENT));
        let b = s.spawn(|| embed_traced(&server, &["private-b.jpg"], trace_b, REMOTE_PARENT));
        for body in [a.join().unwrap(), b.join().unwrap()] {
            assert!(item(&body, 0).is_ok(), "{body}");
        }
    });
    let (shared, requests) = receiver.wait_for("the shared batch", |r| {
        let requests: HashMap<String, Span> = r
            .spans
            .iter()
            .filter(|(_, s)| s.name == "POST /v1/embed" && [trace_a, trace_b].contains(&hex(&s.trace_id).as_str()))
            .map(|(_, s)| (hex(&s.trace_id), s.clone()))
            .collect();
        let shared =
            r.spans.iter().find(|(_, s)| s.name == "inference" && int_attr(s, "clipfn.batch.requests") == Some(2));
        (requests.len() == 2).then_some(())?;
        Some((shared?.1.clone(), requests))
    });
    assert_eq!(int_attr(&shared, "clipfn.batch.size"), Some(2));
    for (trace, request) in &requests {
        let all = &receiver.received.lock().unwrap().spans;
        let spans: Vec<Span> = all.iter().filter(|(_, s)| hex(&s.trace_id) == *trace).map(|(_, s)| s.clone()).collect();
        println!("{}", render(&spans, &hex(&request.parent_span_id)));
    }
    let (parent, other) = if hex(&shared.trace_id) == trace_a { (trace_a, trace_b) } else { (trace_b, trace_a) };
    assert_eq!(shared.parent_span_id, requests[parent].span_id, "the batch is a child of its first request");
    assert_eq!(shared.links.len(), 1, "{:?}", shared.links);
    assert_eq!(hex(&shared.links[0].trace_id), other, "the batch links to the other request's trace");
    assert_eq!(shared.links[0].span_id, requests[other].span_id);
    let other_queue = receiver.wait_for("the other request's queue span", |r| {
        r.spans.iter().find(|(_, s)| s.name == "queue" && hex(&s.trace_id) == other).map(|(_, s)| s.clone())
    });
    assert_eq!(int_attr(&other_queue, "clipfn.batch.id"), int_attr(&shared, "clipfn.batch.id"));

    // --- metrics over OTLP ---
    receiver.wait_for("clipfn_requests_total{code=ok} >= 3 over OTLP", |r| {
        r.metrics.iter().filter(|m| m.name == "clipfn_requests_total").find_map(|m| match &m.data {
            Some(metric::Data::Sum(sum)) => sum
                .data_points
                .iter()
                .find(|p| {
                    string_attr(&p.attributes, "code").as_deref() == Some("ok")
                        && matches!(p.value, Some(number_data_point::Value::AsInt(n)) if n >= 3)
                })
                .map(|_| ()),
            _ => None,
        })
    });
    let bounds = receiver.wait_for("clipfn_batch_size_photos over OTLP", |r| {
        r.metrics.iter().find(|m| m.name == "clipfn_batch_size_photos").and_then(|m| match &m.data {
            Some(metric::Data::Histogram(h)) => h.data_points.first().map(|p| p.explicit_bounds.clone()),
            _ => None,
        })
    });
    assert_eq!(bounds, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]);

    // --- JSON log lines ---
    let text = std::fs::read_to_string(&log).unwrap();
    // The server is still running: leave out a line it may be half-way through writing.
    let text = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    for line in &lines {
        assert!(["DEBUG", "INFO", "WARNING", "ERROR"].contains(&line["severity"].as_str().unwrap_or("")), "{line}");
        assert!(line["message"].is_string(), "{line}");
    }
    let embed_line = lines
        .iter()
        .find(|l| l["message"] == "embed request" && l["images"] == 3)
        .unwrap_or_else(|| panic!("no request line in:\n{text}"));
    assert_eq!(embed_line["severity"], "INFO");
    assert_eq!(embed_line["logging.googleapis.com/trace"], format!("projects/clipfn-test/traces/{TRACE}"));
    assert_eq!(embed_line["logging.googleapis.com/spanId"], hex(&request.span_id));
    assert_eq!((embed_line["status"].as_u64(), embed_line["errors"].as_u64()), (Some(200), Some(1)));
    assert!(embed_line["total_ms"].as_f64().unwrap() > 0.0);
    assert!(!text.contains("private-"), "a photo key reached the log:\n{text}");
    // The start-up line splits its load time into phases, which lie inside it (the bench's
    // cold-start breakdown reads them).
    let loaded = lines
        .iter()
        .find(|l| l["message"] == "model loaded and warmed up")
        .unwrap_or_else(|| panic!("no start-up line in:\n{text}"));
    let ms = |field: &str| loaded[field].as_u64().unwrap_or_else(|| panic!("no {field} in {loaded}"));
    let phases = ms("read_ms") + ms("runtime_ms") + ms("session_ms") + ms("warm_up_ms");
    assert!(phases <= ms("load_ms"), "phases add up to more than load_ms: {loaded}");
}

// ---- Prometheus text --------------------------------------------------------------------

#[test]
fn metrics_counters_move_and_text_logs_without_an_otlp_endpoint() {
    let store = store();
    let log = store.path().join("server.log");
    let server = ServerConfig::local(store.path()).env("CLIPFN_LOG_FORMAT", "text").stderr_to(&log).start();

    let before = scrape(&server);
    assert!(
        series(&before, "clipfn_model_load_duration_seconds", &[("model", "clip-test"), ("provider", "cpu")]) > 0.0
    );
    let (status, body) = server.embed(&KEYS);
    assert_eq!(status, 200, "{body}");
    let (status, _) = server.post_raw("/v1/embed", b"{not json".to_vec());
    assert_eq!(status, 400);
    let after = scrape(&server);

    let moved = |name: &str, labels: &[(&str, &str)]| series(&after, name, labels) - series(&before, name, labels);
    assert_eq!(moved("clipfn_requests_total", &[("code", "ok"), ("endpoint", "embed")]), 1.0, "{after}");
    assert_eq!(moved("clipfn_requests_total", &[("code", "bad_request")]), 1.0);
    assert_eq!(moved("clipfn_photos_total", &[("outcome", "embedded")]), 2.0);
    assert_eq!(moved("clipfn_photos_total", &[("outcome", "failed")]), 1.0);
    assert_eq!(moved("clipfn_errors_total", &[("code", "not_found"), ("level", "photo")]), 1.0);
    assert_eq!(moved("clipfn_errors_total", &[("code", "bad_request"), ("level", "request")]), 1.0);
    assert_eq!(moved("clipfn_request_duration_seconds_count", &[]), 2.0);
    assert_eq!(moved("clipfn_stage_duration_seconds_count", &[("stage", "fetch")]), 3.0);
    assert_eq!(moved("clipfn_stage_duration_seconds_count", &[("stage", "decode")]), 2.0);
    assert_eq!(moved("clipfn_stage_duration_seconds_count", &[("stage", "queue")]), 2.0);
    assert!(moved("clipfn_stage_duration_seconds_count", &[("stage", "inference")]) >= 1.0);
    assert!(moved("clipfn_batch_size_photos_count", &[]) >= 1.0);
    assert_eq!(moved("clipfn_batch_size_photos_sum", &[]), 2.0, "two photos ran");
    assert!(after.contains("# TYPE clipfn_batch_size_photos histogram"), "{after}");
    assert!(series(&after, "clipfn_batch_size_photos_bucket", &[("le", "64")]) >= 1.0);
    assert_eq!(series(&after, "clipfn_queue_depth_photos", &[]), 0.0);
    assert_eq!(series(&after, "clipfn_admitted_photos", &[]), 0.0);
    assert!(after.contains("# TYPE clipfn_admitted_photos gauge"), "{after}");
    assert!(after.contains("# TYPE clipfn_requests_total counter"), "{after}");

    let text = wait_for_log(&log, "embed request");
    assert!(text.lines().all(|l| !l.starts_with('{')), "CLIPFN_LOG_FORMAT=text wrote JSON:\n{text}");
    assert!(!text.contains("private-"), "a photo key reached the log:\n{text}");
}

// ---- Lambda: each invocation flushes ----------------------------------------------------

/// The malformed embed request with a traceparent: traced and counted, no photos needed.
fn malformed_event() -> Value {
    let event_path = common::repo().join("events/apigw-v2-embed-malformed.json");
    serde_json::from_str(&std::fs::read_to_string(event_path).unwrap()).unwrap()
}

/// `clipfn serve` as a Lambda function of `runtime_api`, with `envs` added.
fn lambda_function(runtime_api: &RuntimeApi, envs: &[(&str, &str)]) -> common::Proc {
    // No photo is fetched: any folder will do as the store.
    let mut command =
        common::with_settings(std::process::Command::new(env!("CARGO_BIN_EXE_clipfn")), &std::env::temp_dir());
    let child = runtime_api
        .function_env(command.arg("serve"))
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::Proc(child)
}

#[test]
fn lambda_invocations_flush_spans_and_metrics_before_answering() {
    let receiver = Receiver::start();
    let event = malformed_event();
    let trace = event["headers"]["traceparent"].as_str().unwrap().split('-').nth(1).unwrap().to_string();
    let runtime_api = RuntimeApi::repeating(&event, 1);
    let _function = lambda_function(
        &runtime_api,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            // Far beyond the test: what arrives was flushed by the invocation itself.
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "600000"),
        ],
    );

    let answer = runtime_api.response(Duration::from_secs(60)).body;
    assert_eq!(answer["statusCode"], 400, "{answer}");
    let request = receiver.wait_for("the invocation's request span", |r| {
        r.spans.iter().find(|(_, s)| s.name == "POST /v1/embed" && hex(&s.trace_id) == trace).map(|(_, s)| s.clone())
    });
    assert_eq!(int_attr(&request, "http.response.status_code"), Some(400));
    receiver.wait_for("clipfn_requests_total{code=bad_request}", |r| {
        r.metrics.iter().filter(|m| m.name == "clipfn_requests_total").find_map(|m| match &m.data {
            Some(metric::Data::Sum(sum)) => sum
                .data_points
                .iter()
                .find(|p| string_attr(&p.attributes, "code").as_deref() == Some("bad_request"))
                .map(|_| ()),
            _ => None,
        })
    });
}

/// The median time of five invocations, exporting to `collector` if given.
fn median_invocation(collector: Option<&str>) -> Duration {
    let runtime_api = RuntimeApi::repeating(&malformed_event(), 5);
    let envs: Vec<(&str, &str)> = collector.map(|c| ("OTEL_EXPORTER_OTLP_ENDPOINT", c)).into_iter().collect();
    let _function = lambda_function(&runtime_api, &envs);
    let mut times: Vec<Duration> = (0..5).map(|_| runtime_api.response(Duration::from_secs(60)).took).collect();
    times.sort();
    times[2]
}

#[test]
fn a_collector_that_never_answers_adds_at_most_250_ms_to_an_invocation() {
    // Accepts connections (the kernel completes them) and never reads or answers.
    let collector = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", collector.local_addr().unwrap());
    let without = median_invocation(None);
    let stuck = median_invocation(Some(&endpoint));
    println!("median invocation: {without:?} without a collector, {stuck:?} with one that never answers");
    assert!(stuck < without + Duration::from_millis(250), "{stuck:?} against {without:?} without a collector");
}

/// The log once it holds `needle` (stderr is written as events happen), for at most 10 s.
fn wait_for_log(path: &Path, needle: &str) -> String {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(Instant::now() < until, "no '{needle}' in the log:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---- the place a photo was taken stays out of logs, spans and metrics --------------------

/// Every number in a JSON value, nested ones too.
fn numbers(value: &Value, out: &mut Vec<f64>) {
    match value {
        Value::Number(n) => out.extend(n.as_f64()),
        Value::Array(items) => items.iter().for_each(|v| numbers(v, out)),
        Value::Object(fields) => fields.values().for_each(|v| numbers(v, out)),
        _ => {}
    }
}

/// Photos located in four hemispheres (tools/exif_reference.py's corpus) through `/v1/analyze`,
/// logged at debug in JSON and traced over OTLP: the answer carries each place, and none of its
/// latitudes or longitudes is in a log line, a span (name, attribute, event) or a metric, neither
/// as its digits (to 4 decimals, in any format a log or span would write) nor as a number.
#[test]
fn locations_never_reach_logs_spans_or_metrics() {
    let receiver = Receiver::start();
    let corpus = tempfile::tempdir().unwrap();
    common::exif_photos("write", corpus.path());
    let located =
        ["offset_subsec_paris.jpg", "gps_clock_tokyo.jpg", "south_west_below_sea.jpg", "south_east.jpg", "paris.png"];
    let store = common::store(located.iter().map(|name| (*name, Object::Copy(corpus.path().join(name)))));
    let log = store.path().join("server.log");
    let server =
        exporting_to(&receiver, ServerConfig::local(store.path())).env("RUST_LOG", "debug").stderr_to(&log).start();
    let trace = "5ce0e9a56015fec5aadfa328ae398115";
    let response = blocking_client()
        .post(format!("{}/v1/analyze", server.base))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{trace}-{REMOTE_PARENT}-01"))
        .body(serde_json::to_vec(&serde_json::json!({ "images": located })).unwrap())
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().unwrap();

    // The places the answer gives (so that a corpus that lost its GPS fails here), as numbers and
    // as the digits a log would write: the shortest form, and 4 decimals, truncated and rounded,
    // of the value and of its magnitude. Values of 3 decimals or fewer (22.9) are too short to
    // search text for; the numbers check holds them.
    let mut places = Vec::new();
    for (i, name) in located.iter().enumerate() {
        let location = &body["data"][i]["location"];
        assert!(location["lat"].is_f64() && location["lon"].is_f64(), "{name}: {}", body["data"][i]);
        places.extend([location["lat"].as_f64().unwrap(), location["lon"].as_f64().unwrap()]);
    }
    let mut needles: Vec<String> = Vec::new();
    for &v in &places {
        for v in [v, v.abs()] {
            needles.extend([v.to_string(), (v as f32).to_string(), format!("{v:.4}")]);
            needles.push(format!("{:.4}", (v * 1e4).trunc() / 1e4));
        }
    }
    needles.retain(|n| n.split_once('.').is_some_and(|(_, decimals)| decimals.len() >= 4));
    needles.sort();
    needles.dedup();
    assert!(needles.len() >= 20, "{needles:?}");
    let leaked = |text: &str| needles.iter().find(|n| text.contains(n.as_str())).cloned();
    // The search finds a place written as a log line or a span attribute would write it.
    for written in [format!("lat={}", places[0]), format!("lon={:.5}", places[3] as f32), format!("{:.4}", -places[1])]
    {
        assert!(leaked(&written).is_some(), "{written}: {needles:?}");
    }
    let is_a_place = |x: f64| places.iter().any(|p| (x.abs() - p.abs()).abs() <= 1e-6 * p.abs());

    // --- spans: the request's, every stage's, with their attributes and events ---
    receiver.wait_for("the analyze request's spans", |r| {
        let ours: Vec<&Span> = r.spans.iter().filter(|(_, s)| hex(&s.trace_id) == trace).map(|(_, s)| s).collect();
        let count = |name: &str| ours.iter().filter(|s| s.name == name).count();
        (count("POST /v1/analyze") == 1 && count("decode") == located.len()).then_some(())
    });
    // Every span that arrived, the request's and any other.
    let spans: Vec<Span> = receiver.received.lock().unwrap().spans.iter().map(|(_, s)| s.clone()).collect();
    for span in &spans {
        let dump = format!("{span:?}");
        assert_eq!(leaked(&dump), None, "a place reached a span: {dump}");
        let attributes = span.attributes.iter().chain(span.events.iter().flat_map(|e| &e.attributes));
        for kv in attributes {
            if let Some(any_value::Value::DoubleValue(x)) = kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                assert!(!is_a_place(*x), "a place reached span {}'s {}: {x}", span.name, kv.key);
            }
        }
    }

    // --- metrics: Prometheus text and OTLP ---
    let text = scrape(&server);
    assert_eq!(leaked(&text), None, "a place reached /metrics:\n{text}");
    receiver.wait_for("the analyze request's metrics", |r| {
        r.metrics.iter().any(|m| m.name == "clipfn_requests_total").then_some(())
    });
    let metrics = format!("{:?}", receiver.received.lock().unwrap().metrics);
    assert_eq!(leaked(&metrics), None, "a place reached an OTLP metric");

    // --- the JSON log, at debug ---
    let text = wait_for_log(&log, "analyze request");
    let text = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    assert_eq!(leaked(text), None, "a place reached the log:\n{text}");
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let line: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        let mut found = Vec::new();
        numbers(&line, &mut found);
        assert!(!found.into_iter().any(is_a_place), "a place reached the log: {line}");
    }
    assert!(text.lines().any(|l| l.contains("\"debug\"") || l.contains("\"DEBUG\"")), "no debug line:\n{text}");
}
