//! AWS Lambda: the same axum router behind `lambda_http` (`clipfn replay`, in `replay`, feeds
//! saved gateway events through exactly this path in-process).

use std::sync::Arc;

use axum::Router;
use axum_aws_lambda::LambdaLayer;
use lambda_http::tower::{Layer, ServiceExt};

use crate::{api, observe::telemetry::Telemetry, service::Service, settings::Settings};

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

/// The router with the model loaded and warmed up, as an invocation finds it.
pub(crate) async fn ready_router(settings: Settings, telemetry: &Telemetry) -> anyhow::Result<Router> {
    let settings = Arc::new(settings);
    let service = Service::load(&settings, telemetry.metrics()).await?;
    let state = api::AppState::new(settings, telemetry.metrics(), telemetry.scrape());
    state.set_ready(Arc::new(service));
    Ok(api::router(state))
}
