//! A fake Lambda Runtime API on loopback: the peer `clipfn serve` polls when it runs as a Lambda
//! function. It hands out invocations in turn and reports every answer the function posts, with
//! the time from handing the invocation out to the answer.

use std::{
    collections::{HashMap, VecDeque},
    process::Command,
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use axum::{
    Router,
    extract::{Path as UrlPath, State},
    http::HeaderMap,
    routing::{get, post},
};
use serde_json::Value;

use super::serve_on_thread;

/// One answer the function posted.
#[derive(Debug)]
pub struct Answer {
    /// The invocation's request id; `init` for an init error.
    pub id: String,
    /// `response` or `error`.
    pub kind: &'static str,
    /// The body: its JSON when it parses, else the text as a JSON string.
    pub body: Value,
    /// From handing the invocation out to this answer (zero for an init error).
    pub took: Duration,
}

/// A running fake Runtime API, serving for the life of the test process.
pub struct RuntimeApi {
    /// `host:port`, what AWS_LAMBDA_RUNTIME_API holds.
    pub address: String,
    answers: mpsc::Receiver<Answer>,
}

#[derive(Clone)]
struct Peer {
    /// Invocations not handed out yet: (request id, event).
    events: Arc<Mutex<VecDeque<(String, Value)>>>,
    /// When each invocation was handed out, by request id.
    handed_out: Arc<Mutex<HashMap<String, Instant>>>,
    answers: mpsc::Sender<Answer>,
}

impl RuntimeApi {
    /// Hands out `events` (request id, event) in order, one per poll; once they run out it holds
    /// the long poll, as the real service does.
    pub fn start(events: impl IntoIterator<Item = (String, Value)>) -> RuntimeApi {
        let (sender, answers) = mpsc::channel();
        let peer = Peer {
            events: Arc::new(Mutex::new(events.into_iter().collect())),
            handed_out: Arc::default(),
            answers: sender,
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(|State(peer): State<Peer>, UrlPath(id): UrlPath<String>, body: String| async move {
                    peer.record(id, "response", body);
                }),
            )
            .route(
                "/2018-06-01/runtime/invocation/{id}/error",
                post(|State(peer): State<Peer>, UrlPath(id): UrlPath<String>, body: String| async move {
                    peer.record(id, "error", body);
                }),
            )
            .route(
                "/2018-06-01/runtime/init/error",
                post(|State(peer): State<Peer>, body: String| async move {
                    peer.record("init".into(), "error", body);
                }),
            )
            .with_state(peer);
        RuntimeApi { address: serve_on_thread(app), answers }
    }

    /// Hands out `event` `count` times, as `invocation-1`, `invocation-2`, ...
    pub fn repeating(event: &Value, count: usize) -> RuntimeApi {
        RuntimeApi::start((1..=count).map(|n| (format!("invocation-{n}"), event.clone())))
    }

    /// Adds the variables the Lambda service sets for a function of this Runtime API.
    pub fn function_env<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command
            .env("AWS_LAMBDA_RUNTIME_API", &self.address)
            .env("AWS_LAMBDA_FUNCTION_NAME", "clipfn")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "3008")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
    }

    /// The next answer, of either kind; panics if none comes `within`.
    pub fn answer(&self, within: Duration) -> Answer {
        self.answers.recv_timeout(within).unwrap_or_else(|e| panic!("the function answered within {within:?}: {e}"))
    }

    /// The next answer, which must be a response (not an error); panics if none comes `within`.
    pub fn response(&self, within: Duration) -> Answer {
        let answer = self.answer(within);
        assert_eq!(answer.kind, "response", "the function reported an error: {answer:?}");
        answer
    }
}

impl Peer {
    fn record(&self, id: String, kind: &'static str, body: String) {
        let took = self.handed_out.lock().unwrap().remove(&id).map_or(Duration::ZERO, |at| at.elapsed());
        let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
        let _ = self.answers.send(Answer { id, kind, body, took });
    }
}

async fn next_invocation(State(peer): State<Peer>) -> (HeaderMap, String) {
    let next = peer.events.lock().unwrap().pop_front();
    let Some((id, event)) = next else {
        // Nothing more to hand out: hold the long poll, as the real service does.
        std::future::pending::<()>().await;
        unreachable!()
    };
    peer.handed_out.lock().unwrap().insert(id.clone(), Instant::now());
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
