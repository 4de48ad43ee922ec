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
//! RUST_LOG names it.

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
use tracing::{Event, Level, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::Targets,
    fmt::{
        FmtContext, FormatEvent, FormatFields,
        format::Writer,
        time::{FormatTime, SystemTime},
    },
    layer::SubscriberExt,
    registry::LookupSpan,
    util::SubscriberInitExt,
};

use crate::{config::LogFormat, metrics::Metrics};

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

    /// Flushes and stops the exporters. Call outside the async runtime, at exit.
    pub fn shutdown(self) {
        flush_providers(&self.tracer_provider, &self.meter_provider);
        let _ = self.tracer_provider.shutdown_with_timeout(Duration::from_secs(5));
        let _ = self.meter_provider.shutdown_with_timeout(Duration::from_secs(5));
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

impl Flusher {
    /// Exports what is buffered and waits for it (bounded by the exporters' timeouts).
    pub async fn flush(&self) {
        let (traces, meters) = (self.traces.clone(), self.meters.clone());
        // The SDK's flush blocks on its export threads; keep that off the async workers.
        let _ = tokio::task::spawn_blocking(move || flush_providers(&traces, &meters)).await;
    }
}

/// Renders the metrics registry as Prometheus text exposition format.
#[derive(Clone)]
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

/// One JSON object per line in the shape Cloud Logging's agent parses: `severity`, `message`,
/// `time`, and, inside a traced span, `logging.googleapis.com/trace` (as
/// `projects/P/traces/T` when the project is known, else the bare trace id), `spanId` and
/// `trace_sampled`. The event's own fields follow at the top level.
struct CloudLoggingJson {
    gcp_project: Option<String>,
}

impl<S, N> FormatEvent<S, N> for CloudLoggingJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let meta = event.metadata();
        let mut fields = serde_json::Map::new();
        event.record(&mut JsonFields(&mut fields));

        let mut line = serde_json::Map::new();
        line.insert("severity".into(), severity(*meta.level()).into());
        line.insert("message".into(), fields.remove("message").unwrap_or_else(|| "".into()));
        let mut time = String::new();
        SystemTime.format_time(&mut Writer::new(&mut time))?;
        line.insert("time".into(), time.into());
        line.insert("target".into(), meta.target().into());
        if let Some(span) = ctx.lookup_current() {
            line.insert("span".into(), span.name().into());
        }
        // The OpenTelemetry layer makes the entered span's context current on this thread.
        let cx = opentelemetry::Context::current();
        let span = cx.span();
        let span_context = span.span_context();
        if span_context.is_valid() {
            let trace_id = span_context.trace_id().to_string();
            let trace = match &self.gcp_project {
                Some(project) => format!("projects/{project}/traces/{trace_id}"),
                None => trace_id,
            };
            line.insert("logging.googleapis.com/trace".into(), trace.into());
            line.insert("logging.googleapis.com/spanId".into(), span_context.span_id().to_string().into());
            line.insert("logging.googleapis.com/trace_sampled".into(), span_context.is_sampled().into());
        }
        for (key, value) in fields {
            line.entry(key).or_insert(value);
        }
        writeln!(writer, "{}", serde_json::Value::Object(line))
    }
}

fn severity(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "INFO",
        Level::DEBUG | Level::TRACE => "DEBUG",
    }
}

struct JsonFields<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl tracing::field::Visit for JsonFields<'_> {
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}").into());
    }
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

    #[test]
    fn severities_are_cloud_logging_names() {
        assert_eq!(severity(Level::WARN), "WARNING");
        assert_eq!(severity(Level::TRACE), "DEBUG");
        assert_eq!(severity(Level::ERROR), "ERROR");
    }
}
