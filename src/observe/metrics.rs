//! The service's metric instruments, created once at start-up and handed to the stages that move
//! them (api, pipeline, worker). Where the numbers go (OTLP, Prometheus text on /metrics) is
//! decided in `telemetry`; this module only knows the instruments.
//!
//! Names carry the `clipfn_` prefix and their unit, and are the same over OTLP and on /metrics
//! (the Prometheus exporter is told not to add suffixes of its own). docs/observability.md says
//! what each one means.

use std::time::Duration;

use opentelemetry::{
    KeyValue,
    metrics::{Counter, Gauge, Histogram, Meter, ObservableCounter, ObservableGauge, UpDownCounter},
};

/// Seconds, from 1 ms to 1 min: a photo fetch, a decode and a batch all land well inside.
const SECONDS_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Photos per batch: powers of two up to past the largest sensible CLIPFN_BATCH_SIZE.
pub const BATCH_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// A pipeline stage, as the `stage` attribute of `clipfn_stage_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Fetch,
    Decode,
    Queue,
    Inference,
    /// A batch of texts on the text tower.
    TextInference,
    /// A batch of embeddings on the heads.
    Heads,
    /// A canvas on the face detector.
    FaceDetection,
    /// A photo's faces aligned to their chips on a decode thread, with the finer decode where one
    /// is needed.
    FaceChips,
    /// A batch of aligned faces on the face recognizer.
    FaceRecognition,
    /// A view on the text detector.
    TextDetection,
    /// A batch of lines on the line classifier.
    LineClassification,
    /// A batch of lines on the text recognizer.
    TextRecognition,
    /// A batch of views on the object detector.
    ObjectDetection,
    /// A `/v1/analyze` request's album (groupings, rankings, people), on the blocking pool.
    Album,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Fetch => "fetch",
            Stage::Decode => "decode",
            Stage::Queue => "queue",
            Stage::Inference => "inference",
            Stage::TextInference => "text_inference",
            Stage::Heads => "heads",
            Stage::FaceDetection => "face_detection",
            Stage::FaceChips => "face_chips",
            Stage::FaceRecognition => "face_recognition",
            Stage::TextDetection => "text_detection",
            Stage::LineClassification => "line_classification",
            Stage::TextRecognition => "text_recognition",
            Stage::ObjectDetection => "object_detection",
            Stage::Album => "album",
        }
    }
}

/// How a request ended, as the `code` attribute of `clipfn_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with 200 (some photos may still have failed; they are counted by `photo`).
    Ok,
    /// The client went away before its answer.
    Cancelled,
    /// Refused whole, with this whole-request error code.
    Refused(&'static str),
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Cancelled => "cancelled",
            Outcome::Refused(code) => code,
        }
    }
}

/// Why a model run failed, as the `cause` attribute of `clipfn_batch_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFailure {
    Error,
    Panic,
}

impl BatchFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchFailure::Error => "error",
            BatchFailure::Panic => "panic",
        }
    }
}

/// What `clipfn_model_load_duration_seconds` names as its attributes.
pub struct LoadedModel<'a> {
    pub id: &'a str,
    pub provider: &'a str,
    pub file: &'a str,
    pub precision: &'a str,
}

pub struct Metrics {
    meter: Meter,
    requests: Counter<u64>,
    photos: Counter<u64>,
    errors: Counter<u64>,
    request_duration: Histogram<f64>,
    stage_duration: Histogram<f64>,
    queue_depth: UpDownCounter<i64>,
    batch_size: Histogram<u64>,
    batch_failures: Counter<u64>,
    model_load: Gauge<f64>,
    text_cache: Counter<u64>,
    /// Observable instruments stay registered while their handle lives.
    watched: std::sync::Mutex<Vec<ObservableGauge<u64>>>,
    busy: std::sync::Mutex<Vec<ObservableCounter<f64>>>,
}

impl Metrics {
    pub fn new(meter: Meter) -> Self {
        Metrics {
            requests: meter
                .u64_counter("clipfn_requests_total")
                .with_description("Embed requests answered, by outcome code (ok or the whole-request error code)")
                .with_unit("{request}")
                .build(),
            photos: meter
                .u64_counter("clipfn_photos_total")
                .with_description("Photos answered in admitted embed requests, by outcome (embedded or failed)")
                .with_unit("{photo}")
                .build(),
            errors: meter
                .u64_counter("clipfn_errors_total")
                .with_description(
                    "Errors by code: whole-request codes (level=request) and per-photo codes (level=photo)",
                )
                .with_unit("{error}")
                .build(),
            request_duration: meter
                .f64_histogram("clipfn_request_duration_seconds")
                .with_description("Embed request time from body received to response ready")
                .with_unit("s")
                .with_boundaries(SECONDS_BUCKETS.to_vec())
                .build(),
            stage_duration: meter
                .f64_histogram("clipfn_stage_duration_seconds")
                .with_description(
                    "Time in a stage: per photo for fetch, decode and queue; per batch for inference and text_inference",
                )
                .with_unit("s")
                .with_boundaries(SECONDS_BUCKETS.to_vec())
                .build(),
            queue_depth: meter
                .i64_up_down_counter("clipfn_queue_depth_photos")
                .with_description("Preprocessed photos (and pet crops) waiting for the image tower")
                .with_unit("{photo}")
                .build(),
            batch_size: meter
                .u64_histogram("clipfn_batch_size_photos")
                .with_description("Photos per inference batch")
                .with_unit("{photo}")
                .with_boundaries(BATCH_SIZE_BUCKETS.to_vec())
                .build(),
            batch_failures: meter
                .u64_counter("clipfn_batch_failures_total")
                .with_description(
                    "Model runs that failed (cause=error) or panicked (cause=panic); the batch was then split \
                     to isolate its bad photos, or failed whole when the model failed its warm-up input too",
                )
                .with_unit("{batch}")
                .build(),
            model_load: meter
                .f64_gauge("clipfn_model_load_duration_seconds")
                .with_description("Time to read, load and warm up the model at start-up")
                .with_unit("s")
                .build(),
            text_cache: meter
                .u64_counter("clipfn_text_cache_lookups_total")
                .with_description("Prompt embeddings looked up in the text cache, by outcome (hit or miss)")
                .with_unit("{lookup}")
                .build(),
            watched: Default::default(),
            busy: Default::default(),
            meter,
        }
    }

    /// One embed request ended with `outcome`.
    /// One request answered or cancelled, by its endpoint (`embed`, ..., `predict` for Immich's).
    pub fn request(&self, endpoint: &'static str, outcome: Outcome, duration: Duration) {
        let code = outcome.as_str();
        self.requests.add(1, &[KeyValue::new("code", code), KeyValue::new("endpoint", endpoint)]);
        self.request_duration.record(duration.as_secs_f64(), &[]);
        if outcome != Outcome::Ok {
            self.errors.add(1, &[KeyValue::new("code", code), KeyValue::new("level", "request")]);
        }
    }

    /// One photo answered: `None` when embedded, else its per-photo error code.
    pub fn photo(&self, error: Option<&'static str>) {
        match error {
            None => self.photos.add(1, &[KeyValue::new("outcome", "embedded")]),
            Some(code) => {
                self.photos.add(1, &[KeyValue::new("outcome", "failed")]);
                self.errors.add(1, &[KeyValue::new("code", code), KeyValue::new("level", "photo")]);
            }
        }
    }

    pub fn stage(&self, stage: Stage, duration: Duration) {
        self.stage_duration.record(duration.as_secs_f64(), &[KeyValue::new("stage", stage.as_str())]);
    }

    /// `delta` photos (or pet crops) entered (positive) or left (negative) the image lane.
    pub fn queued(&self, delta: i64) {
        self.queue_depth.add(delta, &[]);
    }

    pub fn batch(&self, size: usize) {
        self.batch_size.record(size as u64, &[]);
    }

    /// One prompt looked up in the text embedding cache.
    pub fn text_cache(&self, hit: bool) {
        self.text_cache.add(1, &[KeyValue::new("outcome", if hit { "hit" } else { "miss" })]);
    }

    pub fn batch_failed(&self, cause: BatchFailure) {
        self.batch_failures.add(1, &[KeyValue::new("cause", cause.as_str())]);
    }

    /// The model is loaded; the gauge's attributes name what runs (file and precision too).
    pub fn model_loaded(&self, duration: Duration, model: LoadedModel<'_>) {
        self.model_load.record(
            duration.as_secs_f64(),
            &[
                KeyValue::new("model", model.id.to_string()),
                KeyValue::new("provider", model.provider.to_string()),
                KeyValue::new("file", model.file.to_string()),
                KeyValue::new("precision", model.precision.to_string()),
            ],
        );
    }

    /// Reports `read()` as `clipfn_admitted_photos` whenever metrics are collected.
    pub fn watch_admitted(&self, read: impl Fn() -> u64 + Send + Sync + 'static) {
        self.watch(
            "clipfn_admitted_photos",
            "Photos holding an admission place (fetching, decoding, queued or running)",
            "{photo}",
            read,
        );
    }

    /// Reports `healthy()` as `clipfn_model_healthy` (1 or 0) whenever metrics are collected.
    pub fn watch_healthy(&self, healthy: impl Fn() -> bool + Send + Sync + 'static) {
        let description = "1 while the model worker runs and its model works; 0 once /healthz reports it broken";
        self.watch("clipfn_model_healthy", description, "1", move || u64::from(healthy()));
    }

    /// Reports `seconds()` as `clipfn_worker_busy_seconds_total{worker}` whenever metrics are
    /// collected: the time the worker of that device spent running batches.
    pub fn watch_busy(&self, worker: &'static str, seconds: impl Fn() -> f64 + Send + Sync + 'static) {
        let counter = self
            .meter
            .f64_observable_counter("clipfn_worker_busy_seconds_total")
            .with_description(
                "Seconds a model worker spent running batches, by worker (its device: cuda or cpu); its rate is the \
                 share of time the device's worker is busy",
            )
            .with_unit("s")
            .with_callback(move |observer| observer.observe(seconds(), &[KeyValue::new("worker", worker)]))
            .build();
        self.busy.lock().unwrap_or_else(|e| e.into_inner()).push(counter);
    }

    fn watch(
        &self,
        name: &'static str,
        description: &'static str,
        unit: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        let gauge = self
            .meter
            .u64_observable_gauge(name)
            .with_description(description)
            .with_unit(unit)
            .with_callback(move |observer| observer.observe(read(), &[]))
            .build();
        self.watched.lock().unwrap_or_else(|e| e.into_inner()).push(gauge);
    }
}
