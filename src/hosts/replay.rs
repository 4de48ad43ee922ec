//! `clipfn replay FILE...`: feeds saved API Gateway events (or plain `{"images": [...]}` bodies)
//! through the Lambda path in-process and prints what the gateway would get, one JSON line per
//! event. An event `NAME.json` with a `NAME.expect.json` beside it is checked against it, so that
//! `clipfn replay events/*.json` is a smoke test to run after a deploy: the glob also names the
//! expectation files, which are skipped as inputs.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use axum::Router;
use axum_aws_lambda::LambdaLayer;
use lambda_http::{
    Adapter, LambdaEvent,
    lambda_runtime::Context,
    request::LambdaRequest,
    tower::{Layer, Service, ServiceExt},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::lambda;
use crate::{observe::telemetry::Telemetry, settings::Settings};

const EXPECT_SUFFIX: &str = ".expect.json";

/// What an event's response must be: its status and, for embed responses, each photo's outcome
/// in order (`ok` or the error code).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    pub status: u16,
    #[serde(default)]
    pub items: Option<Vec<String>>,
}

impl Expectation {
    /// The expectation kept beside `event` (`NAME.json` -> `NAME.expect.json`), if there is one.
    pub fn for_event(event: &Path) -> anyhow::Result<Option<Self>> {
        let path = expectation_path(event);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not an expectation", path.display())).map(Some)
    }

    /// Checks a gateway response (`statusCode`, `body`); says what differs.
    pub fn check(&self, response: &Value) -> Result<(), String> {
        let status = response["statusCode"].as_u64();
        if status != Some(u64::from(self.status)) {
            return Err(format!("status {}, expected {}", response["statusCode"], self.status));
        }
        let body: Value = serde_json::from_str(response["body"].as_str().unwrap_or("null")).unwrap_or(Value::Null);
        if let Some(want) = &self.items {
            let got = item_outcomes(&body).ok_or("the body has no data items")?;
            if &got != want {
                return Err(format!("items {got:?}, expected {want:?}"));
            }
        }
        if self.status >= 400 && !body["error"]["message"].is_string() {
            return Err("the error body has no message".into());
        }
        Ok(())
    }
}

fn expectation_path(event: &Path) -> PathBuf {
    let name = event.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    event.with_file_name(format!("{}{EXPECT_SUFFIX}", name.strip_suffix(".json").unwrap_or(name)))
}

fn is_expectation(file: &Path) -> bool {
    file.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(EXPECT_SUFFIX))
}

/// `ok` or the error code of each item of an embed response.
fn item_outcomes(body: &Value) -> Option<Vec<String>> {
    body["data"]
        .as_array()?
        .iter()
        .map(|item| match item.get("error") {
            None => Some("ok".to_string()),
            Some(e) => e["code"].as_str().map(String::from),
        })
        .collect()
}

/// Replays each event file, printing `{"file", "response", "check"}` per event (`check` is `pass`,
/// `fail` with a `mismatch`, or `none` without an expectation). Fails when an event fails its
/// expectation, after all were replayed.
pub async fn run(settings: Settings, files: &[PathBuf], telemetry: &Telemetry) -> anyhow::Result<()> {
    let router = lambda::ready_router(settings, telemetry).await?;
    let events: Vec<&PathBuf> = files.iter().filter(|file| !is_expectation(file)).collect();
    let mut failed = 0;
    for file in &events {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let event: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
        let response = replay_one(router.clone(), as_gateway_event(event))
            .await
            .with_context(|| format!("replaying {}", file.display()))?;
        let mut line = json!({"file": file.display().to_string(), "response": response, "check": "none"});
        if let Some(expectation) = Expectation::for_event(file)? {
            match expectation.check(&response) {
                Ok(()) => line["check"] = "pass".into(),
                Err(mismatch) => {
                    failed += 1;
                    line["check"] = "fail".into();
                    line["mismatch"] = mismatch.into();
                }
            }
        }
        println!("{line}");
    }
    anyhow::ensure!(failed == 0, "{failed} of {} events failed their expectations", events.len());
    Ok(())
}

async fn replay_one(router: Router, event: Value) -> anyhow::Result<Value> {
    let request: LambdaRequest = serde_json::from_value(event).context("not an API Gateway REST or HTTP API event")?;
    let mut adapter = Adapter::from(LambdaLayer::default().trim_stage().layer(router));
    let response = adapter
        .ready()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .call(LambdaEvent::new(request, Context::default()))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(serde_json::to_value(response)?)
}

/// A plain `{"images": [...]}` body is wrapped in a minimal HTTP API (v2) event for POST /v1/embed;
/// anything else is taken to be a gateway event already.
fn as_gateway_event(event: Value) -> Value {
    if event.get("images").is_none() {
        return event;
    }
    json!({
        "version": "2.0",
        "routeKey": "POST /v1/embed",
        "rawPath": "/v1/embed",
        "rawQueryString": "",
        "headers": {"content-type": "application/json"},
        "requestContext": {
            "accountId": "replay", "apiId": "replay", "domainName": "localhost", "domainPrefix": "localhost",
            "http": {"method": "POST", "path": "/v1/embed", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "clipfn-replay"},
            "requestId": "replay", "routeKey": "POST /v1/embed", "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000", "timeEpoch": 0
        },
        "body": event.to_string(),
        "isBase64Encoded": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectation_files_pair_with_their_events() {
        assert_eq!(expectation_path(Path::new("events/a-b.json")), Path::new("events/a-b.expect.json"));
        assert!(is_expectation(Path::new("events/a-b.expect.json")));
        assert!(!is_expectation(Path::new("events/a-b.json")));
    }

    #[test]
    fn checks_status_items_and_error_messages() {
        let response = |status: u16, body: Value| json!({"statusCode": status, "body": body.to_string()});
        let embed = response(200, json!({"data": [{"index": 0}, {"index": 1, "error": {"code": "not_found"}}]}));
        let items = |codes: &[&str]| Some(codes.iter().map(|c| c.to_string()).collect());
        assert!(Expectation { status: 200, items: items(&["ok", "not_found"]) }.check(&embed).is_ok());
        assert!(Expectation { status: 200, items: items(&["ok", "ok"]) }.check(&embed).is_err());
        assert!(Expectation { status: 400, items: None }.check(&embed).is_err());
        let refused = response(400, json!({"error": {"code": "bad_request", "message": "not JSON"}}));
        assert!(Expectation { status: 400, items: None }.check(&refused).is_ok());
        let bare = response(400, json!({}));
        assert!(Expectation { status: 400, items: None }.check(&bare).is_err());
    }
}
