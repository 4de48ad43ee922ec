//! Telemetry set-up: the `tracing` subscriber (log lines and spans), the OpenTelemetry tracer and
//! meter providers, and the exporters behind them. Stage modules only make `tracing` spans and move
//! the instruments in `metrics`; what leaves the process is decided here.
//!
//! - Logs go to stderr, filtered by RUST_LOG: JSON lines that Cloud Logging reads, or plain text
//!   (`CLIPFN_LOG_FORMAT`). A JSON line written inside a traced request names its trace.
//! - Spans at info and above from this crate become OpenTelemetry spans whatever RUST_LOG says.
//!   They are exported over OTLP/HTTP (protobuf) only when an `OTEL_EXPORTER_OTLP_*ENDPOINT` is
//!   set; without one they still carry the trace id into log lines and are then dropped.
//! - Metrics are always readable as Prometheus text (`GET /metrics`) and are also pushed over
//!   OTLP when an endpoint is set.
//!
//! ONNX Runtime logs through `tracing` too and is chatty at info, so it is held to warn unless
//! RUST_LOG names it. The JSON line format is in `cloud_logging`.

mod cloud_logging;

use std::{env, sync::Arc, time::Duration};

use anyhow::Context as _;
use axum::http::HeaderMap;
use opentelemetry::{
    KeyValue,
    metrics::MeterProvider as _,
    propagation::{Extractor, TextMapPropagator},
    trace::{TraceContextExt, TracerProvider as _},
};
use opentelemetry_sdk::{
    Resource, metrics::SdkMeterProvider, propagation::TraceContextPropagator, trace::SdkTracerProvider,
};
use tracing::Level;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{EnvFilter, Layer, filter::Targets, layer::SubscriberExt, util::SubscriberInitExt};

use self::cloud_logging::CloudLoggingJson;
use super::metrics::Metrics;

/// How log lines are written to stderr (`CLIPFN_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line with the fields Cloud Logging reads (`severity`, `message`,
    /// `logging.googleapis.com/trace`).
    Json,
    /// Human-readable lines for a terminal.
    Text,
}

/// The running telemetry: keep it for the life of the process and call [`Telemetry::shutdown`]
/// on the way out so that buffered spans and metrics are sent.
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    registry: prometheus::Registry,
    metrics: Arc<Metrics>,
}

/// Where OTLP data goes, from the standard `OTEL_*` variables.
#[derive(Debug, Default, PartialEq, Eq)]
struct Export {
    traces: bool,
    metrics: bool,
}

impl Telemetry {
    /// Installs the global `tracing` subscriber and builds the providers. Call once, before any
    /// other work, outside an async runtime.
    pub fn init(format: LogFormat, gcp_project: Option<String>) -> anyhow::Result<Self> {
        let export = export_from_env(|name| env::var(name).ok())?;
        let resource = resource();

        let mut traces = SdkTracerProvider::builder().with_resource(resource.clone());
        if export.traces {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()
                .context("building the OTLP span exporter (OTEL_EXPORTER_OTLP_*)")?;
            traces = traces.with_batch_exporter(exporter);
        }
        let tracer_provider = traces.build();

        let registry = prometheus::Registry::new();
        let prometheus = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            // Names already carry their unit and `_total`; keep them identical to the OTLP names.
            .without_units()
            .without_counter_suffixes()
            .scope_info_enabled(false)
            .build()
            .context("building the Prometheus exporter")?;
        let mut meters = SdkMeterProvider::builder().with_resource(resource).with_reader(prometheus);
        if export.metrics {
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .build()
                .context("building the OTLP metric exporter (OTEL_EXPORTER_OTLP_*)")?;
            meters = meters.with_periodic_exporter(exporter);
        }
        let meter_provider = meters.build();
        let metrics = Arc::new(Metrics::new(meter_provider.meter("clipfn")));

        let spans = tracing_opentelemetry::layer()
            .with_tracer(tracer_provider.tracer("clipfn"))
            .with_location(false)
            .with_filter(Targets::new().with_target("clipfn", Level::INFO));
        let (json, text) = match format {
            LogFormat::Json => (
                Some(
                    tracing_subscriber::fmt::layer()
                        .event_format(CloudLoggingJson { gcp_project })
                        .with_writer(std::io::stderr)
                        .with_filter(log_filter()),
                ),
                None,
            ),
            LogFormat::Text => (
                None,
                Some(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::io::stderr)
                        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                        .with_filter(log_filter()),
                ),
            ),
        };
        tracing_subscriber::registry()
            .with(spans)
            .with(json)
            .with(text)
            .try_init()
            .context("installing the tracing subscriber")?;
        tracing::info!(
            traces = export.traces,
            metrics = export.metrics,
            endpoint = endpoint_for_log().as_deref(),
            "telemetry: OTLP export {}",
            if export.traces || export.metrics { "on" } else { "off (no OTEL_EXPORTER_OTLP_ENDPOINT)" }
        );
        Ok(Telemetry { tracer_provider, meter_provider, registry, metrics })
    }

    /// The instruments, to hand to the stages.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// A handle that renders the current metrics as Prometheus text.
    pub fn scrape(&self) -> Scrape {
        Scrape(self.registry.clone())
    }

    /// A handle that sends every finished span and the current metrics on demand: a Lambda
    /// invocation flushes before it returns, since the sandbox may be frozen right after.
    pub fn flusher(&self) -> Flusher {
        Flusher { traces: self.tracer_provider.clone(), meters: self.meter_provider.clone() }
    }

    /// Flushes and stops the exporters, giving up after `within`: the exit must not wait on a
    /// collector that does not answer. Call outside the async runtime, at exit.
    pub fn shutdown(self, within: Duration) {
        let (traces, meters) = (self.tracer_provider, self.meter_provider);
        let (done, finished) = std::sync::mpsc::channel();
        let flushing = std::thread::Builder::new().name("clipfn-flush".into()).spawn(move || {
            flush_providers(&traces, &meters);
            let _ = traces.shutdown_with_timeout(within);
            let _ = meters.shutdown_with_timeout(within);
            let _ = done.send(());
        });
        if flushing.is_ok() && finished.recv_timeout(within).is_err() {
            tracing::warn!(within_ms = within.as_millis() as u64, "telemetry not flushed in time; exiting without it");
        }
    }
}

fn flush_providers(traces: &SdkTracerProvider, meters: &SdkMeterProvider) {
    if let Err(e) = traces.force_flush() {
        tracing::warn!(error = %e, "flushing spans failed");
    }
    if let Err(e) = meters.force_flush() {
        tracing::warn!(error = %e, "flushing metrics failed");
    }
}

#[derive(Clone)]
pub struct Flusher {
    traces: SdkTracerProvider,
    meters: SdkMeterProvider,
}

/// The most a Lambda invocation waits for its telemetry to leave: a collector that does not answer
/// must not hold every response up by the exporter's timeout (10 s).
const INVOCATION_FLUSH: Duration = Duration::from_millis(150);

impl Flusher {
    /// Exports what is buffered and waits for it, at most `INVOCATION_FLUSH`; what is not sent by
    /// then goes with a later flush.
    pub async fn flush(&self) {
        let (traces, meters) = (self.traces.clone(), self.meters.clone());
        // The SDK's flush blocks on its export threads; keep that off the async workers.
        let flush = tokio::task::spawn_blocking(move || flush_providers(&traces, &meters));
        if tokio::time::timeout(INVOCATION_FLUSH, flush).await.is_err() {
            tracing::warn!(within_ms = INVOCATION_FLUSH.as_millis() as u64, "telemetry not flushed in time");
        }
    }
}

/// Renders the metrics registry as Prometheus text exposition format.
#[derive(Clone, Default)]
pub struct Scrape(prometheus::Registry);

impl Scrape {
    pub fn render(&self) -> String {
        let mut text = String::new();
        if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&self.0.gather(), &mut text) {
            tracing::warn!(error = %e, "rendering /metrics failed");
        }
        text
    }
}

/// Continues the caller's trace: makes `span` (not yet entered) a child of the W3C `traceparent`
/// in `headers`, when there is a valid one.
pub fn continue_trace(span: &tracing::Span, headers: &HeaderMap) {
    struct Headers<'a>(&'a HeaderMap);
    impl Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(|k| k.as_str()).collect()
        }
    }
    let cx = TraceContextPropagator::new().extract(&Headers(headers));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// RUST_LOG for log lines (default `info`), with ONNX Runtime at warn unless named.
fn log_filter() -> EnvFilter {
    let mut spec = env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    if !spec.contains("ort") {
        spec.push_str(",ort=warn");
    }
    EnvFilter::try_new(&spec).unwrap_or_else(|_| EnvFilter::new("info,ort=warn"))
}

/// `service.name` is `clipfn` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise;
/// the SDK reads both.
fn resource() -> Resource {
    let named = env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let builder = Resource::builder().with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named { builder.build() } else { builder.with_service_name("clipfn").build() }
}

/// Reads which signals go out over OTLP. Only HTTP/protobuf is built in, so any other protocol
/// is refused at start-up rather than sent to a port that speaks something else.
fn export_from_env(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Export> {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let is = |name: &str, value: &str| var(name).is_some_and(|v| v.trim().eq_ignore_ascii_case(value));
    if is("OTEL_SDK_DISABLED", "true") {
        return Ok(Export::default());
    }
    for name in
        ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"]
    {
        if let Some(protocol) = var(name).filter(|v| !v.trim().is_empty())
            && !protocol.trim().eq_ignore_ascii_case("http/protobuf")
        {
            anyhow::bail!("{name}={protocol}: clipfn exports OTLP over HTTP only; use http/protobuf");
        }
    }
    let any = set("OTEL_EXPORTER_OTLP_ENDPOINT");
    Ok(Export {
        traces: (any || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) && !is("OTEL_TRACES_EXPORTER", "none"),
        metrics: (any || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")) && !is("OTEL_METRICS_EXPORTER", "none"),
    })
}

/// The OTLP endpoint for the start-up line: scheme, host and port only, so that credentials in
/// the URL never reach a log.
fn endpoint_for_log() -> Option<String> {
    let raw =
        ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"]
            .iter()
            .find_map(|name| env::var(name).ok().filter(|v| !v.trim().is_empty()))?;
    let url = url::Url::parse(raw.trim()).ok()?;
    Some(format!("{}://{}{}", url.scheme(), url.host_str()?, url.port().map(|p| format!(":{p}")).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn otlp_export_follows_the_standard_variables() {
        assert_eq!(export_from_env(vars(&[])).unwrap(), Export { traces: false, metrics: false });
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(export_from_env(vars(&[endpoint])).unwrap(), Export { traces: true, metrics: true });
        assert_eq!(
            export_from_env(vars(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")])).unwrap(),
            Export { traces: true, metrics: false }
        );
        assert_eq!(
            export_from_env(vars(&[endpoint, ("OTEL_METRICS_EXPORTER", "none")])).unwrap(),
            Export { traces: true, metrics: false }
        );
        assert_eq!(export_from_env(vars(&[endpoint, ("OTEL_SDK_DISABLED", "true")])).unwrap(), Export::default());
        assert!(export_from_env(vars(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])).is_ok());
        let grpc = export_from_env(vars(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])).unwrap_err().to_string();
        assert!(grpc.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && grpc.contains("http/protobuf"), "{grpc}");
    }
}
