//! Log lines in the shape Cloud Logging's agent parses, one JSON object per line, naming the trace
//! of the span they were written in.

use opentelemetry::trace::TraceContextExt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::{
    fmt::{
        FmtContext, FormatEvent, FormatFields,
        format::Writer,
        time::{FormatTime, SystemTime},
    },
    registry::LookupSpan,
};

/// One JSON object per line in the shape Cloud Logging's agent parses: `severity`, `message`,
/// `time`, and, inside a traced span, `logging.googleapis.com/trace` (as
/// `projects/P/traces/T` when the project is known, else the bare trace id), `spanId` and
/// `trace_sampled`. The event's own fields follow at the top level.
pub struct CloudLoggingJson {
    pub gcp_project: Option<String>,
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

    #[test]
    fn severities_are_cloud_logging_names() {
        assert_eq!(severity(Level::WARN), "WARNING");
        assert_eq!(severity(Level::TRACE), "DEBUG");
        assert_eq!(severity(Level::ERROR), "ERROR");
    }
}
