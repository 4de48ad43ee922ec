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
mod stages;
mod stored;
mod timings;

use futures::{Stream, StreamExt};

use self::decode_pool::DecodePool;
pub use self::{
    admission::{Admission, Overloaded},
    faces::{Face, Faces},
    item::{ItemCode, ItemError, ItemResult, Signals},
    objects::{Object, Objects},
    ocr::{Ocr, OcrLine},
    timings::{Interval, Timings},
};
pub use crate::preprocess::SquareFor;
use crate::{
    model::{DetectorInfo, HeadsInfo, ImageModelInfo, ObjectInfo, OcrInfo, RecognizerInfo, ShapeCounts, TowerKind},
    observe::metrics::Metrics,
    preprocess::Transform,
    settings::Limits,
    source::Source,
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

    /// Every signal the loaded models give, with `embedding`'s squares: the pixel signals, the
    /// heads' scores and each detector there is (pets' crops not embedded).
    pub fn wants_all(&self, embedding: SquareFor) -> Wants {
        Wants {
            embedding,
            pixels: true,
            scores: self.heads().is_some(),
            faces: self.faces().is_some(),
            ocr: self.ocr().is_some(),
            objects: self.objects().is_some(),
            ..Wants::default()
        }
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
}
