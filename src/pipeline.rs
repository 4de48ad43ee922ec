//! The per-request flow through the stages: source -> decode -> preprocess -> batcher.
//!
//! Every photo moves on its own, so one slow or broken photo never holds up or fails the others,
//! and fetching/decoding of later photos overlaps inference of earlier ones. Decoding and resizing
//! run on the blocking pool, at most `decode_threads` photos at a time; the resized square waits
//! for its batch as bytes and is normalised when the batcher lays the batch out.
//!
//! Each photo's stages are `fetch`, `decode` and `queue` spans under the request's span (with
//! `clipfn.photo.index`), and their durations go to `clipfn_stage_duration_seconds`.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use futures::{Stream, StreamExt};
use image::RgbImage;
use tokio::sync::Semaphore;
use tracing::{Instrument, field::Empty, info_span};

use crate::{
    batcher::{BatchError, Batcher, Overloaded, Unhealthy},
    budget::Budget,
    config::{Provider, Settings},
    decode::{self, DecodeError, DecodeOptions, decode},
    labels::{EmbeddedLabels, Labels, parse_sets},
    metrics::{Metrics, Stage},
    model::{
        Model, ModelInfo, Runtime, TextFiles, TextModel, TextModelInfo, locate_text_model, read_image_model,
        read_weights,
    },
    panics,
    preprocess::{PreprocessError, preprocess},
    source::{Source, SourceError},
    text::{TextEmbedding, TextEncoder, TextError},
    tokenize::{JsonTokenizer, Tokenizer},
};

/// Why one photo has no embedding.
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Preprocess(#[from] PreprocessError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("not finished within the request deadline")]
    DeadlineExceeded,
}

/// When each stage ran: for one photo, from entering the stage to leaving it; for a request, from
/// the first photo entering the stage to the last one leaving it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Timings {
    pub fetch: Interval,
    pub decode: Interval,
    pub queue: Interval,
    pub inference: Interval,
}

impl Timings {
    /// Widens each stage's interval to also cover `other`'s.
    fn cover(&mut self, other: &Timings) {
        self.fetch.cover(other.fetch);
        self.decode.cover(other.decode);
        self.queue.cover(other.queue);
        self.inference.cover(other.inference);
    }
}

/// A stretch of wall-clock time; empty until a stage records one.
#[derive(Debug, Default, Clone, Copy)]
pub struct Interval(Option<(Instant, Instant)>);

impl Interval {
    fn new(start: Instant, end: Instant) -> Self {
        Interval(Some((start, end)))
    }

    fn cover(&mut self, other: Interval) {
        let Some((start, end)) = other.0 else { return };
        self.0 = Some(match self.0 {
            None => (start, end),
            Some((s, e)) => (s.min(start), e.max(end)),
        });
    }

    pub fn duration(&self) -> Duration {
        self.0.map_or(Duration::ZERO, |(s, e)| e - s)
    }
}

pub type ItemResult = Result<Vec<f32>, ItemError>;

/// One photo of a long run: its reference, its result and, once fetched, its size.
pub struct Embedding {
    pub image: String,
    pub result: ItemResult,
    pub bytes: Option<u64>,
}

pub struct Pipeline {
    source: Source,
    batcher: Batcher,
    /// Present when CLIPFN_TEXT_MODEL is set.
    text: Option<TextEncoder>,
    /// CLIPFN_LABELS, embedded during warm-up.
    label_sets: BTreeMap<String, EmbeddedLabels>,
    cpu_slots: Arc<Semaphore>,
    /// CLIPFN_MAX_DECODE_BYTES, when set.
    decode_memory: Option<Budget>,
    max_pixels: u64,
    metrics: Arc<Metrics>,
    decode_timeout: Duration,
}

impl Pipeline {
    /// `tokenizer` is the text tower's, when the batcher has one.
    pub fn new(
        settings: &Settings,
        source: Source,
        batcher: Batcher,
        tokenizer: Option<Tokenizer>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let text = batcher.text_info().zip(tokenizer).map(|(t, tokenizer)| {
            TextEncoder::new(Arc::new(tokenizer), t.id.clone(), settings.text_cache, Arc::clone(&metrics))
        });
        Pipeline {
            source,
            batcher,
            text,
            label_sets: BTreeMap::new(),
            cpu_slots: Arc::new(Semaphore::new(settings.decode_threads())),
            decode_memory: settings.max_decode_bytes.map(Budget::new),
            max_pixels: settings.max_image_pixels,
            metrics,
            decode_timeout: settings.decode_timeout(),
        }
    }

    /// Reads the model named by CLIPFN_MODEL, loads and warms it up, and starts its batcher.
    pub async fn load(settings: &Settings, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let source = Source::new(settings)?;
        let started = Instant::now();
        let span = info_span!("model_load", clipfn.model = Empty, clipfn.provider = Empty);
        let (runtime_took, read_took, model) = async {
            // The provider decides which file of a model folder to read, so it is settled first
            // (a short blocking call; the other runtime threads keep /healthz answering).
            let runtime = Runtime::start(settings)?;
            let runtime_took = started.elapsed();
            let file = read_image_model(&source, settings, runtime.on_cuda()).await.context("CLIPFN_MODEL")?;
            let read_took = started.elapsed() - runtime_took;
            let settings = settings.clone();
            let span = tracing::Span::current();
            let model =
                tokio::task::spawn_blocking(move || span.in_scope(|| Model::load(runtime, &settings, file))).await??;
            anyhow::Ok((runtime_took, read_took, model))
        }
        .instrument(span.clone())
        .await?;
        let (info, timings) = (&model.info, model.timings);
        span.record("clipfn.model", info.id.as_str()).record("clipfn.provider", info.provider.as_str());
        metrics.model_loaded(started.elapsed(), info);
        tracing::info!(
            model = %info.id, file = %info.file, precision = info.precision.as_str(), provider = info.provider.as_str(),
            fallback_reason = info.fallback_reason.as_deref(),
            image_size = info.image_size, dim = info.dim, batch_size = info.batch_size,
            runtime_ms = runtime_took.as_millis() as u64, read_ms = read_took.as_millis() as u64,
            session_ms = timings.session.as_millis() as u64, warm_up_ms = timings.warm_up.as_millis() as u64,
            load_ms = started.elapsed().as_millis() as u64, "model loaded and warmed up"
        );
        let (model, text) = load_text_model(&source, settings, model).await?;
        let (text_model, tokenizer) = text.unzip();
        let batch_wait = Duration::from_millis(settings.batch_wait_ms);
        let batcher = Batcher::start(model, text_model, batch_wait, settings.max_queued_images, Arc::clone(&metrics));
        let mut pipeline = Pipeline::new(settings, source, batcher, tokenizer, metrics);
        if let Some(location) = &settings.labels {
            pipeline.label_sets = pipeline.embed_label_sets(location).await?;
        }
        Ok(pipeline)
    }

    /// Reads CLIPFN_LABELS and embeds every set, so that classifying over a set costs image
    /// inference only.
    async fn embed_label_sets(&self, location: &str) -> anyhow::Result<BTreeMap<String, EmbeddedLabels>> {
        let started = Instant::now();
        let bytes = self.source.fetch_config_object(location).await.context("reading CLIPFN_LABELS")?;
        let sets = parse_sets(&bytes).context("CLIPFN_LABELS")?;
        let mut embedded = BTreeMap::new();
        for (name, labels) in sets {
            let embeddings =
                self.label_embeddings(&labels, None).await.with_context(|| format!("label set '{name}'"))?;
            embedded.insert(name, EmbeddedLabels { labels, embeddings });
        }
        tracing::info!(sets = embedded.len(), ms = started.elapsed().as_millis() as u64, "label sets embedded");
        Ok(embedded)
    }

    /// The text tower, when there is one.
    pub fn text_model(&self) -> Option<&TextModelInfo> {
        self.batcher.text_info()
    }

    pub fn label_set(&self, name: &str) -> Option<&EmbeddedLabels> {
        self.label_sets.get(name)
    }

    pub fn label_set_names(&self) -> Vec<&str> {
        self.label_sets.keys().map(String::as_str).collect()
    }

    /// Embeds texts (L2-normalised, in order) on the text tower, or none if `deadline` passes.
    pub async fn embed_texts(
        &self,
        texts: &[String],
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Vec<TextEmbedding>, TextError> {
        let encoder = self.text.as_ref().ok_or(TextError::NotConfigured)?;
        let work = encoder.embed(&self.batcher, texts);
        match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, work).await.unwrap_or(Err(TextError::DeadlineExceeded)),
            None => work.await,
        }
    }

    /// Each label's embedding: the normalised mean of its prompts' embeddings.
    pub async fn label_embeddings(
        &self,
        labels: &Labels,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Vec<Vec<f32>>, TextError> {
        let prompts = self.embed_texts(&labels.prompts(), deadline).await?;
        let prompts: Vec<&[f32]> = prompts.iter().map(|p| &p.embedding[..]).collect();
        Ok(labels.embeddings(&prompts))
    }

    pub fn model(&self) -> &ModelInfo {
        self.batcher.info()
    }

    pub fn in_flight(&self) -> usize {
        self.batcher.in_flight()
    }

    /// Whether the model worker can still serve (see `batcher`).
    pub fn health(&self) -> Result<(), Unhealthy> {
        self.batcher.health().check()
    }

    /// Embeds every photo, answering each index exactly once and in order. Photos not done by
    /// `deadline` get `DeadlineExceeded`, and their queued work is withdrawn.
    pub async fn embed(
        self: &Arc<Self>,
        images: &[String],
        deadline: tokio::time::Instant,
    ) -> Result<(Vec<ItemResult>, Timings), Overloaded> {
        let _places = self.batcher.admit(images.len())?;
        let mut timings = Timings::default();
        let photos = images.iter().enumerate().map(|(index, image)| async move {
            let mut photo = Timings::default();
            let result = tokio::time::timeout_at(deadline, self.embed_one(index, image, &mut photo, &mut None))
                .await
                .unwrap_or(Err(ItemError::DeadlineExceeded));
            (result, photo)
        });
        let done = futures::future::join_all(photos).await;
        let results = done
            .into_iter()
            .map(|(result, photo)| {
                timings.cover(&photo);
                result.map(l2_normalized)
            })
            .collect();
        Ok((results, timings))
    }

    /// Embeds a long run of photos (backfill) through the same stages, with no deadline: at most
    /// `window` photos in flight, results in input order. The window's queue places are taken once,
    /// up front, and held while the stream lives.
    pub fn embed_all(
        &self,
        images: Vec<String>,
        window: usize,
    ) -> Result<impl Stream<Item = Embedding> + '_, Overloaded> {
        let places = self.batcher.admit(window)?;
        let photos = images.into_iter().enumerate().map(move |(index, image)| {
            let _held_while_the_stream_lives = &places;
            async move {
                let mut bytes = None;
                let result = self.embed_one(index, &image, &mut Timings::default(), &mut bytes).await;
                Embedding { image, result: result.map(l2_normalized), bytes }
            }
        });
        Ok(futures::stream::iter(photos).buffered(window))
    }

    /// One photo through the stages; `size` gets its byte count once fetched.
    async fn embed_one(&self, index: usize, image: &str, timings: &mut Timings, size: &mut Option<u64>) -> ItemResult {
        // Spans name the photo by its index in the request, never by its key. Numbers go in as
        // i64: tracing-opentelemetry turns u64 fields into strings.
        let span = info_span!(
            "fetch",
            clipfn.photo.index = index as i64,
            clipfn.photo.bytes = Empty,
            otel.status_code = Empty
        );
        let start = Instant::now();
        let fetched = self.source.fetch(image).instrument(span.clone()).await;
        timings.fetch = Interval::new(start, Instant::now());
        self.metrics.stage(Stage::Fetch, start.elapsed());
        let fetched = fetched.inspect_err(|_| failed(&span))?;
        span.record("clipfn.photo.bytes", fetched.bytes.len() as i64);
        *size = Some(fetched.bytes.len() as u64);

        let transform = self.model().preprocessing.clone();
        // JPEGs decode at the smallest DCT scale that still covers the resized photo.
        let options = DecodeOptions::for_input(transform.resize_side(), self.max_pixels);
        // Memory first, then a core (in that order always, so that neither waits on the other):
        // both move into the blocking task, so that a photo that times out stops waiting but its
        // decode keeps them until it really ends and the pool never runs over its bounds.
        let memory = match &self.decode_memory {
            Some(budget) => Some(budget.reserve(decode::working_memory(&fetched.bytes, &options)).await),
            None => None,
        };
        let slot = Arc::clone(&self.cpu_slots).acquire_owned().await.expect("semaphore is never closed");
        let decode_start = Instant::now();
        let span = info_span!("decode", clipfn.photo.index = index as i64, otel.status_code = Empty);
        // A panic in a decoder on a hostile file ends this blocking task only; the join error
        // turns it into this photo's error and the process and the other photos carry on. The
        // fetched bytes (and their share of the byte budget) are let go when the decode ends.
        let in_task = span.clone();
        let work = tokio::task::spawn_blocking(move || -> Result<RgbImage, ItemError> {
            let _held = (slot, memory);
            let _entered = in_task.enter();
            let decoded = decode(&fetched.bytes, &options)?;
            drop(fetched);
            Ok(preprocess(&decoded, &transform)?)
        });
        // Past its time budget (CLIPFN_DECODE_TIMEOUT_MS) the photo stops waiting: decode_failed.
        let square = tokio::time::timeout(self.decode_timeout, work).await;
        let queued = Instant::now();
        timings.decode = Interval::new(decode_start, queued);
        self.metrics.stage(Stage::Decode, queued - decode_start);
        let square = match square {
            Ok(Ok(result)) => result,
            Ok(Err(join_error)) => {
                let message = join_error.try_into_panic().map(|p| panics::message(p.as_ref())).unwrap_or_default();
                Err(ItemError::Decode(DecodeError::Crashed(message)))
            }
            Err(_elapsed) => Err(ItemError::Decode(DecodeError::Timeout(self.decode_timeout))),
        };
        let square = square.inspect_err(|_| failed(&span))?;

        let span = info_span!("queue", clipfn.photo.index = index as i64, clipfn.batch.id = Empty);
        let embedded = self.batcher.embed(square, span).await?;
        timings.queue = Interval::new(queued, embedded.started);
        timings.inference = Interval::new(embedded.started, embedded.finished);
        self.metrics.stage(Stage::Queue, embedded.started.saturating_duration_since(queued));
        Ok(embedded.embedding)
    }
}

/// Loads the text tower, when there is one (see `locate_text_model`), beside the image model (same
/// environment and provider), with its tokenizer: a tokenizer.json, else CLIP's BPE.
async fn load_text_model(
    source: &Source,
    settings: &Settings,
    model: Model,
) -> anyhow::Result<(Model, Option<(TextModel, Tokenizer)>)> {
    let on_cuda = model.info.provider == Provider::Cuda;
    let Some(TextFiles { model: location, id, tokenizer }) =
        locate_text_model(source, settings, on_cuda).await.context("the text model")?
    else {
        return Ok((model, None));
    };
    let started = Instant::now();
    let tokenizer = match &tokenizer {
        Some(file) => {
            let bytes =
                source.fetch_config_object(file).await.with_context(|| format!("reading the tokenizer.json {file}"))?;
            let json = JsonTokenizer::from_bytes(&bytes, settings.text_max_tokens)
                .with_context(|| format!("the tokenizer.json {file}"))?;
            Tokenizer::Json(Box::new(json))
        }
        None => Tokenizer::clip(),
    };
    let data = read_weights(source, &location).await.context("the text model")?;
    let settings = settings.clone();
    let span = tracing::Span::current();
    let (model, text) = tokio::task::spawn_blocking(move || {
        let text = span.in_scope(|| TextModel::load(&model, &settings, data, id, &tokenizer));
        (model, text.map(|text| (text, tokenizer)))
    })
    .await?;
    let (text, tokenizer) = text.with_context(|| format!("loading text model {location}"))?;
    tracing::info!(
        model = %text.info.id, dim = text.info.dim, tokenizer = text.info.tokenizer,
        attention_mask = text.info.mask_name.is_some(), load_ms = started.elapsed().as_millis() as u64,
        "text model loaded and warmed up"
    );
    Ok((model, Some((text, tokenizer))))
}

/// Marks a stage span as the one where its photo failed.
fn failed(span: &tracing::Span) {
    span.record("otel.status_code", "ERROR");
}

/// CLIP compares embeddings by cosine; unit length makes that a dot product for callers.
pub fn l2_normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_to_unit_length() {
        let v = l2_normalized(vec![3.0, 4.0]);
        assert_eq!(v, vec![0.6, 0.8]);
        assert_eq!(l2_normalized(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }

    #[test]
    fn request_timings_cover_all_photos() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut request = Timings::default();
        let photo = |start, end| Timings { fetch: Interval::new(t0 + ms(start), t0 + ms(end)), ..Timings::default() };
        request.cover(&photo(5, 10));
        request.cover(&photo(0, 7));
        assert_eq!(request.fetch.duration(), ms(10));
        assert_eq!(request.decode.duration(), Duration::ZERO);
    }
}
