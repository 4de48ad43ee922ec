//! The per-request flow through the stages: source -> decode and preprocess -> worker.
//!
//! Every photo moves on its own, so one slow or broken photo never holds up or fails the others,
//! and fetching/decoding of later photos overlaps inference of earlier ones. Decoding and resizing
//! run on the decode threads (`decode_pool`), which bound how many photos decode at once; the
//! resized square waits for its batch as bytes and is normalised when the image tower lays it out.
//!
//! Each photo's stages are `fetch`, `decode` and `queue` spans under the request's span (with
//! `clipfn.photo.index`), and their durations go to `clipfn_stage_duration_seconds`.

mod admission;
mod decode_pool;
mod detectors;
mod faces;
mod item;
mod objects;
mod ocr;
mod stored;
mod timings;

use std::time::Instant;

use futures::{Stream, StreamExt};
use image::RgbImage;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{Instrument, field::Empty, info_span};

pub use self::{
    admission::{Admission, Overloaded},
    faces::{Face, Faces},
    item::{ItemCode, ItemError, ItemResult, Signals},
    objects::Object,
    ocr::{Ocr, OcrLine},
    timings::{Interval, Timings},
};
use self::{decode_pool::DecodePool, detectors::Detectors};
pub use crate::preprocess::SquareFor;
use crate::{
    decode::{self, Metadata},
    model::{DetectorInfo, HeadsInfo, ImageModelInfo, ObjectInfo, OcrInfo, RecognizerInfo, ShapeCounts, TowerKind},
    observe::metrics::{Metrics, Stage},
    preprocess::{KeptBytes, Transform, Views, decode_options, decode_views},
    settings::Limits,
    signals::PixelSignals,
    source::{Fetched, Source},
    sys::budget::Budget,
    worker::Worker,
};

/// What a request wants of its photos.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wants {
    /// Which photos the image tower embeds (by default every one): a photo left out gets no
    /// square and never queues for the tower. The heads' scores need every photo's.
    pub embedding: SquareFor,
    /// The pixel signals (`signals`), measured on the decode threads.
    pub pixels: bool,
    /// The heads' scores, run on the embedding after the image tower.
    pub scores: bool,
    /// The faces, found on the face detector's canvas beside the embedding.
    pub faces: bool,
    /// The faces' minimum detector score, when not the detector's default (CLIPFN_FACE_MIN_SCORE).
    pub face_min_score: Option<f32>,
    /// The text lines, found on the text detector's view beside the embedding.
    pub ocr: bool,
    /// The lines' minimum recognizer score, when not the default (CLIPFN_OCR_MIN_SCORE).
    pub ocr_min_score: Option<f32>,
    /// The lines' minimum detector (box) score, when not DB's default.
    pub ocr_box_min_score: Option<f32>,
    /// The objects, found on the object detector's view beside the embedding.
    pub objects: bool,
    /// The pets among them embedded by the image tower, each from its crop.
    pub pets: bool,
}

/// Where a photo's bytes come from.
#[derive(Clone, Copy)]
enum Input<'a> {
    /// A reference the source fetches (a key, a URI, a URL, a data URI).
    Reference(&'a str),
    /// Bytes the request carried (a multipart part, as Immich sends them).
    Carried(&'a bytes::Bytes),
}

/// One photo through the stages: its result and what was measured on the way.
pub struct Photo {
    pub result: ItemResult,
    pub timings: Timings,
    /// The photo's size, once fetched.
    pub bytes: Option<u64>,
}

/// One photo of a long run (backfill), with its reference.
pub struct EmbeddedPhoto {
    pub image: String,
    pub photo: Photo,
}

pub struct Pipeline {
    source: Source,
    worker: std::sync::Arc<Worker>,
    admission: Admission,
    decoders: DecodePool,
    /// How a photo becomes the image tower's square: asked of the tower once, here.
    square: Transform,
    /// CLIPFN_MAX_DECODE_BYTES, when set.
    decode_memory: Option<Budget>,
    /// Places for photos whose views are for a detector (a face canvas, an OCR view), from their
    /// decode until the detectors have answered: twice the decode threads, so that decoding runs
    /// that far ahead of the detectors and no further (docs/design.md, "Finer pixels").
    detector_places: std::sync::Arc<tokio::sync::Semaphore>,
    max_pixels: u64,
    metrics: std::sync::Arc<Metrics>,
}

impl Pipeline {
    pub fn new(
        limits: &Limits,
        source: Source,
        worker: std::sync::Arc<Worker>,
        metrics: std::sync::Arc<Metrics>,
    ) -> Self {
        Pipeline {
            source,
            square: worker.info().preprocessing.clone(),
            worker,
            admission: Admission::new(limits.max_queued_images, &metrics),
            decoders: DecodePool::new(limits.decode_threads(), limits.decode_timeout()),
            decode_memory: limits.max_decode_bytes.map(Budget::new),
            detector_places: std::sync::Arc::new(tokio::sync::Semaphore::new(2 * limits.decode_threads())),
            max_pixels: limits.max_image_pixels,
            metrics,
        }
    }

    pub fn model(&self) -> &ImageModelInfo {
        self.worker.info()
    }

    /// The heads on the embedding, when there are.
    pub fn heads(&self) -> Option<&HeadsInfo> {
        self.worker.heads_info()
    }

    /// The face detector and recognizer, when there are.
    pub fn faces(&self) -> Option<&(DetectorInfo, RecognizerInfo)> {
        self.worker.faces_info()
    }

    /// The OCR models, when there are.
    pub fn ocr(&self) -> Option<&OcrInfo> {
        self.worker.ocr_info()
    }

    /// The object detector, when there is one.
    pub fn objects(&self) -> Option<&ObjectInfo> {
        self.worker.objects_info()
    }

    /// Each tower's input shapes: declared, run, and run outside the declared set.
    pub fn shapes(&self) -> &[(TowerKind, std::sync::Arc<ShapeCounts>)] {
        self.worker.shapes()
    }

    /// Photos currently admitted (queued, decoding or fetching).
    pub fn in_flight(&self) -> usize {
        self.admission.in_flight()
    }

    /// Embeds every photo, with what else `wants` asks for (all from the one fetch and decode),
    /// answering each index exactly once and in order. Photos not done by `deadline` get
    /// `DeadlineExceeded`, and their queued work is withdrawn.
    pub async fn embed(
        &self,
        images: &[String],
        deadline: tokio::time::Instant,
        wants: Wants,
    ) -> Result<(Vec<ItemResult>, Timings), Overloaded> {
        let _places = self.admission.admit(images.len())?;
        let photos = images
            .iter()
            .enumerate()
            .map(|(index, image)| self.embed_one(index, Input::Reference(image), wants, Some(deadline)));
        let mut timings = Timings::default();
        let results = futures::future::join_all(photos)
            .await
            .into_iter()
            .map(|photo| {
                timings.cover(&photo.timings);
                photo.result
            })
            .collect();
        Ok((results, timings))
    }

    /// Embeds a long run of photos (backfill) through the same stages, with what else `wants` asks
    /// for and no deadline: at most `window` photos in flight, results in input order. The window's
    /// queue places are taken once, up front, and held while the stream lives.
    pub fn embed_all(
        &self,
        images: Vec<String>,
        window: usize,
        wants: Wants,
    ) -> Result<impl Stream<Item = EmbeddedPhoto> + '_, Overloaded> {
        let places = self.admission.admit(window)?;
        let photos =
            images.into_iter().enumerate().map(move |(index, image)| {
                let _held_while_the_stream_lives = &places;
                async move {
                    EmbeddedPhoto { photo: self.embed_one(index, Input::Reference(&image), wants, None).await, image }
                }
            });
        Ok(futures::stream::iter(photos).buffered(window))
    }

    /// One photo whose bytes the request carried, through the same stages from the decode on,
    /// with what else `wants` asks for, by `deadline`.
    pub async fn embed_carried(
        &self,
        bytes: &bytes::Bytes,
        deadline: tokio::time::Instant,
        wants: Wants,
    ) -> Result<(ItemResult, Timings), Overloaded> {
        let _place = self.admission.admit(1)?;
        let photo = self.embed_one(0, Input::Carried(bytes), wants, Some(deadline)).await;
        Ok((photo.result, photo.timings))
    }

    /// One photo through the stages, by `deadline` when there is one. A photo cut off by it keeps
    /// what was measured until then.
    async fn embed_one(
        &self,
        index: usize,
        image: Input<'_>,
        wants: Wants,
        deadline: Option<tokio::time::Instant>,
    ) -> Photo {
        let mut photo = Photo { result: Err(ItemError::DeadlineExceeded), timings: Timings::default(), bytes: None };
        let stages = self.stages(index, image, wants, &mut photo.timings, &mut photo.bytes);
        let result = match deadline {
            Some(deadline) => {
                tokio::time::timeout_at(deadline, stages).await.unwrap_or(Err(ItemError::DeadlineExceeded))
            }
            None => stages.await,
        };
        photo.result = result;
        photo
    }

    /// [`Pipeline::embed_one`]'s stages, recording into `timings` and `size` as they go.
    async fn stages(
        &self,
        index: usize,
        image: Input<'_>,
        wants: Wants,
        timings: &mut Timings,
        size: &mut Option<u64>,
    ) -> ItemResult {
        // A detector's place first (when a detector is asked for), then the fetched bytes'
        // budget, then memory, then a decode thread (in that order always, so that none waits on
        // another). The place comes before the fetch, so that a photo waiting for one holds no
        // bytes: a request of 100 photos with faces would otherwise fill CLIPFN_MAX_FETCHED_BYTES
        // with photos waiting for places, and every other request's fetches would queue behind
        // them. The memory reservation moves into the job with the bytes, and both are let go as
        // the job goes on (the bytes once decoded, or with faces once the detector has answered),
        // even if the photo stopped waiting for it; the place once the detectors have answered.
        let views = self.views(wants);
        let place = if views.canvas.is_some() || views.ocr.is_some() || views.objects.is_some() {
            Some(std::sync::Arc::clone(&self.detector_places).acquire_owned().await.expect("never closed"))
        } else {
            None
        };
        let fetched = self.fetch(index, image, timings).await?;
        *size = Some(fetched.bytes.len() as u64);
        let decoded = self.decode(index, fetched, views, timings).await?;
        self.infer(index, decoded, place, wants, timings).await
    }

    /// The views of its decode that a photo needs for what `wants` asks of it.
    fn views(&self, wants: Wants) -> Views {
        let objects = self.worker.objects_info();
        Views {
            square: self.square.clone(),
            square_for: if wants.scores { SquareFor::Every } else { wants.embedding },
            luma: wants.pixels,
            canvas: self.worker.faces_info().filter(|_| wants.faces).map(|(detector, _)| detector.canvas()),
            ocr: self.worker.ocr_info().filter(|_| wants.ocr).map(|reader| reader.resolution),
            objects: objects.filter(|_| wants.objects).map(|detector| detector.layout),
            pet_crops: wants.pets && objects.is_some_and(|detector| !detector.pets.is_empty()),
        }
    }

    /// The photo's bytes, from its store or from the request.
    async fn fetch(&self, index: usize, image: Input<'_>, timings: &mut Timings) -> Result<Fetched, ItemError> {
        // Spans name the photo by its index in the request, never by its key. Numbers go in as
        // i64: tracing-opentelemetry turns u64 fields into strings.
        let span = info_span!(
            "fetch",
            clipfn.photo.index = index as i64,
            clipfn.photo.bytes = Empty,
            otel.status_code = Empty
        );
        let start = Instant::now();
        let fetched = match image {
            Input::Reference(reference) => self.source.fetch(reference).instrument(span.clone()).await,
            Input::Carried(bytes) => self.source.carried(bytes.clone()),
        };
        timings.fetch = Interval::new(start, Instant::now());
        self.metrics.stage(Stage::Fetch, start.elapsed());
        let fetched = fetched.inspect_err(|_| failed(&span))?;
        span.record("clipfn.photo.bytes", fetched.bytes.len() as i64);
        Ok(fetched)
    }

    /// The views, and the signals measured on them, on a decode thread under the decode budget:
    /// what the pipeline keeps of a photo until its embedding comes is its square (if it gets
    /// one), a few numbers and, for faces, the detector's canvas and the photo's bytes, for OCR the
    /// text detector's view and the decoded pixels, for objects their view.
    async fn decode(
        &self,
        index: usize,
        fetched: Fetched,
        views: Views,
        timings: &mut Timings,
    ) -> Result<Decoded, ItemError> {
        let working_memory = || decode::working_memory(&fetched.bytes, &decode_options(&views, self.max_pixels));
        let memory = Budget::hold(self.decode_memory.as_ref(), working_memory).await;
        let span = info_span!("decode", clipfn.photo.index = index as i64, otel.status_code = Empty);
        let (in_job, max_pixels) = (span.clone(), self.max_pixels);
        let (decode_start, decoded) = self
            .decoders
            .run(move || {
                let (mut memory, _entered) = (memory, in_job.enter());
                // The bytes stay with the face canvas until the detector has answered (faces
                // smaller on it than their chip are cut from a finer decode of them); otherwise
                // they go once decoded.
                let fetched = KeptBytes::new(fetched);
                let kept = views.canvas.is_some().then(|| fetched.clone());
                let mut viewed = decode_views(fetched, &views, max_pixels).map_err(ItemError::from)?;
                if let Some(canvas) = viewed.canvas.as_mut() {
                    canvas.photo = kept;
                }
                let pixels = viewed.luma.as_ref().map(PixelSignals::of);
                // What waits for the detectors keeps its share of the decode's hold; the rest
                // goes back now (docs/design.md, "One budget for what a photo keeps").
                let canvas = viewed.canvas.map(|canvas| (memory.split_off(canvas.kept_bytes()), canvas));
                let ocr = viewed.ocr.map(|view| (memory.split_off(view.kept_bytes()), view));
                let objects = viewed.objects.map(|view| (memory.split_off(view.kept_bytes()), view));
                let detectors = Detectors { canvas, ocr, objects };
                let (square, size, metadata) = (viewed.square, viewed.full_size, viewed.metadata);
                Ok::<_, ItemError>(Decoded { square, pixels, detectors, size, metadata })
            })
            .await;
        let queued = Instant::now();
        timings.decode = Interval::new(decode_start, queued);
        self.metrics.stage(Stage::Decode, queued - decode_start);
        decoded.inspect_err(|_| failed(&span))
    }

    /// The worker's part: the embedding (then the heads' scores on it) beside the detectors,
    /// whose place goes back once they have answered.
    async fn infer(
        &self,
        index: usize,
        decoded: Decoded,
        place: Option<OwnedSemaphorePermit>,
        wants: Wants,
        timings: &mut Timings,
    ) -> ItemResult {
        let Decoded { square, pixels, detectors, size, metadata } = decoded;
        let queued = Instant::now();
        let span = info_span!("queue", clipfn.photo.index = index as i64, clipfn.batch.id = Empty);
        let detected = async {
            let detected = self.detect(detectors, wants).await;
            drop(place);
            detected
        };
        // A photo without a square needs no embedding: the image tower never sees it.
        let embedded = async {
            match square {
                Some(square) => Some(self.worker.embed(square, span).await),
                None => None,
            }
        };
        let (embedded, (faces, ocr, objects)) = futures::join!(embedded, detected);
        let (mut embedding, mut scores) = (None, None);
        if let Some(embedded) = embedded {
            let embedded = embedded?;
            timings.queue = Interval::new(queued, embedded.started);
            self.metrics.stage(Stage::Queue, embedded.started.saturating_duration_since(queued));
            // The heads run on the embedding once the image tower has given it.
            let finished = if wants.scores {
                let scored = self.worker.score(embedded.output.clone()).await?;
                scores = Some(scored.output);
                scored.finished
            } else {
                embedded.finished
            };
            timings.inference = Interval::new(embedded.started, finished);
            embedding = Some(embedded.output);
        }
        let (size, metadata) = (Some(size), Some(metadata));
        Ok(Signals { embedding, pixels, scores, faces, ocr, objects, size, metadata })
    }
}

/// What a photo's decode leaves for the worker.
struct Decoded {
    square: Option<RgbImage>,
    pixels: Option<PixelSignals>,
    detectors: Detectors,
    /// The upright photo's width and height at its full size.
    size: (u32, u32),
    metadata: Metadata,
}

/// Marks a stage span as the one where its photo failed.
fn failed(span: &tracing::Span) {
    span.record("otel.status_code", "ERROR");
}
