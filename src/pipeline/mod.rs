//! The per-request flow through the stages: source -> decode -> preprocess -> worker.
//!
//! Every photo moves on its own, so one slow or broken photo never holds up or fails the others,
//! and fetching/decoding of later photos overlaps inference of earlier ones. Decoding and resizing
//! run on the decode threads (`decode_pool`), at most `decode_threads` photos at a time; the
//! resized square waits for its batch as bytes and is normalised when the worker lays it out.
//!
//! Each photo's stages are `fetch`, `decode` and `queue` spans under the request's span (with
//! `clipfn.photo.index`), and their durations go to `clipfn_stage_duration_seconds`.

mod admission;
mod decode_pool;
mod item;
mod timings;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt};
use image::RgbImage;
use tokio::sync::Semaphore;
use tracing::{Instrument, field::Empty, info_span};

use self::decode_pool::DecodePool;
pub use self::{
    admission::{Admission, Overloaded},
    item::{ItemError, ItemResult},
    timings::{Interval, Timings},
};
use crate::{
    decode::{self, DecodeError, DecodeOptions, decode},
    embedding::l2_normalized,
    model::ModelInfo,
    observe::metrics::{Metrics, Stage},
    preprocess::preprocess,
    settings::Limits,
    source::Source,
    sys::budget::Budget,
    worker::Batcher,
};

/// One photo of a long run (backfill): its reference, its result and, once fetched, its size.
pub struct EmbeddedPhoto {
    pub image: String,
    pub result: ItemResult,
    pub bytes: Option<u64>,
}

pub struct Pipeline {
    source: Source,
    batcher: Arc<Batcher>,
    admission: Admission,
    cpu_slots: Arc<Semaphore>,
    decoders: DecodePool,
    /// CLIPFN_MAX_DECODE_BYTES, when set.
    decode_memory: Option<Budget>,
    max_pixels: u64,
    metrics: Arc<Metrics>,
    decode_timeout: Duration,
}

impl Pipeline {
    pub fn new(limits: &Limits, source: Source, batcher: Arc<Batcher>, metrics: Arc<Metrics>) -> Self {
        Pipeline {
            source,
            batcher,
            admission: Admission::new(limits.max_queued_images, &metrics),
            cpu_slots: Arc::new(Semaphore::new(limits.decode_threads())),
            decoders: DecodePool::new(limits.decode_threads()),
            decode_memory: limits.max_decode_bytes.map(Budget::new),
            max_pixels: limits.max_image_pixels,
            metrics,
            decode_timeout: limits.decode_timeout(),
        }
    }

    pub fn model(&self) -> &ModelInfo {
        self.batcher.info()
    }

    /// Photos currently admitted (queued, decoding or fetching).
    pub fn in_flight(&self) -> usize {
        self.admission.in_flight()
    }

    /// Embeds every photo, answering each index exactly once and in order. Photos not done by
    /// `deadline` get `DeadlineExceeded`, and their queued work is withdrawn.
    pub async fn embed(
        &self,
        images: &[String],
        deadline: tokio::time::Instant,
    ) -> Result<(Vec<ItemResult>, Timings), Overloaded> {
        let _places = self.admission.admit(images.len())?;
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
    ) -> Result<impl Stream<Item = EmbeddedPhoto> + '_, Overloaded> {
        let places = self.admission.admit(window)?;
        let photos = images.into_iter().enumerate().map(move |(index, image)| {
            let _held_while_the_stream_lives = &places;
            async move {
                let mut bytes = None;
                let result = self.embed_one(index, &image, &mut Timings::default(), &mut bytes).await;
                EmbeddedPhoto { image, result: result.map(l2_normalized), bytes }
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
        // A panic in a decoder on a hostile file ends this job only: it becomes this photo's
        // error and the process and the other photos carry on. The fetched bytes (and their share
        // of the byte budget) are let go when the decode ends.
        let in_task = span.clone();
        let work = self.decoders.run(move || -> Result<RgbImage, ItemError> {
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
            Ok(Err(panic)) => Err(ItemError::Decode(DecodeError::Crashed(panic))),
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

/// Marks a stage span as the one where its photo failed.
fn failed(span: &tracing::Span) {
    span.record("otel.status_code", "ERROR");
}
