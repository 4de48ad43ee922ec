//! AWS Lambda: the same axum router behind `lambda_http`, and `clipfn replay`, which feeds saved
//! gateway events through exactly that path in-process and prints what the gateway would get.

use std::{path::Path, sync::Arc};

use anyhow::Context as _;
use axum::Router;
use axum_aws_lambda::LambdaLayer;
use lambda_http::{
    Adapter, LambdaEvent,
    lambda_runtime::Context,
    request::LambdaRequest,
    tower::{Layer, Service, ServiceExt},
};
use serde_json::{Value, json};

use crate::{api, config::Settings, pipeline::Pipeline, telemetry::Telemetry};

/// lambda_runtime panics when these are missing; say so plainly instead.
const RUNTIME_VARIABLES: [&str; 4] = [
    "AWS_LAMBDA_RUNTIME_API",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
];

pub fn is_lambda() -> bool {
    std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some()
}

/// Loads the model during the init phase (before the first invocation is taken), then serves
/// invocations until the runtime stops us. Each invocation flushes spans and metrics before its
/// response goes back: Lambda may freeze the sandbox as soon as it has the response.
pub async fn run(settings: Settings, telemetry: &Telemetry) -> anyhow::Result<()> {
    if let Some(missing) = RUNTIME_VARIABLES.iter().find(|v| std::env::var_os(v).is_none()) {
        anyhow::bail!("{missing} is not set; the Lambda runtime sets it, set it by hand to emulate one");
    }
    let router = ready_router(settings, telemetry).await?;
    let flusher = telemetry.flusher();
    let service = LambdaLayer::default().trim_stage().layer(router).then(move |result| {
        let flusher = flusher.clone();
        async move {
            flusher.flush().await;
            result
        }
    });
    lambda_http::run(service).await.map_err(|e| anyhow::anyhow!("Lambda runtime: {e}"))
}

/// Replays each file through the router as Lambda would, printing one JSON line per file:
/// `{"file", "response"}` with the gateway response (statusCode, headers, body).
pub async fn replay(settings: Settings, files: &[impl AsRef<Path>], telemetry: &Telemetry) -> anyhow::Result<()> {
    let router = ready_router(settings, telemetry).await?;
    for file in files {
        let file = file.as_ref();
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let event: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
        let response = replay_one(router.clone(), as_gateway_event(event))
            .await
            .with_context(|| format!("replaying {}", file.display()))?;
        println!("{}", json!({"file": file.display().to_string(), "response": response}));
    }
    Ok(())
}

async fn ready_router(settings: Settings, telemetry: &Telemetry) -> anyhow::Result<Router> {
    let settings = Arc::new(settings);
    let pipeline = Pipeline::load(&settings, telemetry.metrics()).await?;
    let state = api::AppState::new(settings, telemetry.metrics(), telemetry.scrape());
    state.set_ready(Arc::new(pipeline));
    Ok(api::router(state))
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
