//! The model workers: the owners of the model sessions, fed by queues shared by every request.
//! This file is the handle the rest of the service holds, [`Worker`]; the threads it starts are
//! named `clipfn-worker-cuda` and `clipfn-worker-cpu`.
//!
//! One worker thread per device runs that device's towers (`seat`), so requests never fight over
//! the GPU (the seed team's lesson: more workers per GPU made p95 worse), and a CUDA batch never
//! waits for a CPU run (OCR's, by default) nor the other way round. Each tower has a lane
//! (`lane`): its queue of jobs from any request. A worker takes up to a batch of one lane's jobs,
//! runs them together and sends each result back to its waiting request (`run`). A job whose
//! request gave up (deadline, disconnect) is dropped from the batch before it runs.
//!
//! Preprocessed photos go to the image tower; a photo batch waits at most `batch_wait` to fill
//! once it holds one. The optional towers have lanes of their own: the heads (on the image
//! embeddings), the face detector (one canvas at a time) and the face recognizer (aligned crops),
//! and OCR's text detector (one view at a time), line classifier and text recognizer (lines of
//! many photos together), and the object detector (a batch of views). Tokenized texts (search
//! queries, labels) go to the text tower, in a lane the
//! worker looks at first: a query waits at most for the batch being formed or run, never behind
//! an image backlog. Text batches take what is queued without waiting to fill. The other lanes
//! take turns, a batch each, so that one request's backlog on the detectors never holds up
//! another's photos for more than a batch of each lane (`lane::Lanes`).
//!
//! A batch that fails is not failed whole (`run` says how), and each worker's health says when
//! its model or its device is broken (`health`). Each batch has one `inference` span (`span`).

mod health;
mod lane;
mod run;
mod seat;
mod span;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crossbeam_channel::Sender;
use tokio::sync::oneshot;
use tracing::Span;

#[cfg(test)]
pub(crate) use self::health::Broken;
pub use self::{health::Unhealthy, seat::SeatStatus};
use self::{
    lane::{Job, Lane},
    seat::{Placed, Seat},
};
use crate::{
    model::{
        Canvases, Detections, DetectorInfo, Embeddings, FaceCrops, FaceModels, Found, Heads, HeadsInfo, ImageModelInfo,
        LineOrientations, ModelError, ObjectDetector, ObjectInfo, ObjectViews, OcrInfo, OcrModels, OcrViews, Photos,
        ProbabilityMap, Recognized, RecognizerInfo, ShapeCounts, TextLines, TextModelInfo, Texts, Tower, TowerIo,
        TowerKind,
    },
    observe::metrics::Metrics,
    preprocess::{FaceCanvas, LineInput, ObjectView, OcrView},
    settings::Device,
};

/// One job's output from the worker.
#[derive(Debug)]
pub struct Served<O> {
    pub output: O,
    /// When the worker started and finished the batch this job ran in.
    pub started: Instant,
    pub finished: Instant,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("the model worker has stopped")]
    Stopped,
}

/// Where canvases for the face detector and crops for the recognizer are queued.
struct FaceLanes {
    canvases: Sender<Job<Canvases>>,
    crops: Sender<Job<FaceCrops>>,
}

/// Where views for the text detector and lines for the classifier and recognizer are queued.
struct OcrLanes {
    views: Sender<Job<OcrViews>>,
    /// Present when the OCR folder has a line classifier.
    orientations: Option<Sender<Job<LineOrientations>>>,
    lines: Sender<Job<TextLines>>,
}

/// The towers a service may have beside the image and text towers. The object detector's type is
/// open so that a unit test can seat a stand-in on another device (`fake::slow_objects`).
pub struct OptionalTowers<O = ObjectDetector> {
    pub heads: Option<Heads>,
    pub faces: Option<FaceModels>,
    pub ocr: Option<OcrModels>,
    pub objects: Option<O>,
}

impl Default for OptionalTowers {
    fn default() -> Self {
        OptionalTowers { heads: None, faces: None, ocr: None, objects: None }
    }
}

/// The handle on the model workers.
pub struct Worker {
    images: Sender<Job<Photos>>,
    /// Present when there is a text tower.
    texts: Option<Sender<Job<Texts>>>,
    /// Present when there are heads.
    embeddings: Option<Sender<Job<Embeddings>>>,
    /// Present when there are face models.
    faces: Option<FaceLanes>,
    info: ImageModelInfo,
    text_info: Option<TextModelInfo>,
    heads_info: Option<HeadsInfo>,
    faces_info: Option<(DetectorInfo, RecognizerInfo)>,
    /// Present when there are OCR models.
    ocr: Option<OcrLanes>,
    ocr_info: Option<OcrInfo>,
    /// Present when there is an object detector.
    objects: Option<Sender<Job<ObjectViews>>>,
    objects_info: Option<ObjectInfo>,
    /// Each tower's shape counts, in serving order.
    shapes: Vec<(TowerKind, Arc<ShapeCounts>)>,
    /// A worker thread per device (`seat`), CUDA's first.
    seats: Vec<Seat>,
    metrics: Arc<Metrics>,
}

impl Worker {
    /// Moves the image tower (and the text tower and the optional towers, when there are) onto a
    /// worker thread per device they run on.
    pub fn start<I, T, O>(
        image: I,
        text: Option<T>,
        OptionalTowers { heads, faces, ocr, objects }: OptionalTowers<O>,
        batch_wait: Duration,
        metrics: Arc<Metrics>,
    ) -> Self
    where
        I: Tower<Io = Photos>,
        T: Tower<Io = Texts>,
        O: Tower<Io = ObjectViews>,
    {
        let info = image.info().clone();
        let text_info = text.as_ref().map(|t| t.info().clone());
        let heads_info = heads.as_ref().map(|h| h.info().clone());
        let faces_info = faces.as_ref().map(|f| (f.detector.info().clone(), f.recognizer.info().clone()));
        let ocr_info = ocr.as_ref().map(OcrModels::info);
        let objects_info = objects.as_ref().map(|detector| detector.info().clone());
        // Each tower runs where its session runs: the text tower and the heads beside the image
        // tower, each detector's towers where CLIPFN_*_PROVIDER put them.
        let on = |device: Device| move |lane: Box<dyn Lane>| Placed { device, ahead: false, lane };
        let image_device = info.provider;
        let (images, image_lane) = lane::open(image);
        let (texts, text_lane) = text.map(lane::open).unzip();
        let (embeddings, heads_lane) = heads.map(lane::open).unzip();
        let (faces, face_lanes) = faces
            .map(|FaceModels { detector, recognizer }| {
                let device = detector.info().provider;
                let ((canvases, detector_lane), (crops, recognizer_lane)) =
                    (lane::open(detector), lane::open(recognizer));
                (FaceLanes { canvases, crops }, [recognizer_lane, detector_lane].map(on(device)))
            })
            .unzip();
        let (ocr, ocr_lanes) = ocr
            .map(|models| {
                let device = models.info().provider;
                let OcrModels { detector, classifier, recognizer, .. } = models;
                let (views, detector_lane) = lane::open(detector);
                let (orientations, classifier_lane) = classifier.map(lane::open).unzip();
                let (lines, recognizer_lane) = lane::open(recognizer);
                let lanes: Vec<Placed> = [recognizer_lane]
                    .into_iter()
                    .chain(classifier_lane)
                    .chain([detector_lane])
                    .map(on(device))
                    .collect();
                (OcrLanes { views, orientations, lines }, lanes)
            })
            .unzip();
        let objects_device = objects.as_ref().map(|detector| detector.info().provider);
        let (objects, objects_lane) = objects.map(lane::open).unzip();
        // The serving order on each worker: texts ahead of everything (someone waits on a query);
        // the other lanes take turns, a batch each (`Lanes` says why turns), from what finishes
        // photos already embedded or detected (the heads, the face recognizer; the text
        // recognizer, then the line classifier) to the detectors and photos.
        let placed: Vec<Placed> = text_lane
            .map(|lane| Placed { device: image_device, ahead: true, lane })
            .into_iter()
            .chain(heads_lane.map(on(image_device)))
            .chain(face_lanes.into_iter().flatten())
            .chain(ocr_lanes.into_iter().flatten())
            .chain(objects_lane.zip(objects_device).map(|(lane, device)| on(device)(lane)))
            .chain([on(image_device)(image_lane)])
            .collect();
        let shapes = placed.iter().map(|p| p.lane.shapes()).collect();
        let seats = seat::seat(placed, batch_wait, &metrics);
        Worker {
            images,
            texts,
            embeddings,
            faces,
            info,
            text_info,
            heads_info,
            faces_info,
            ocr,
            ocr_info,
            objects,
            objects_info,
            shapes,
            seats,
            metrics,
        }
    }

    pub fn info(&self) -> &ImageModelInfo {
        &self.info
    }

    /// The text tower, when there is one.
    pub fn text_info(&self) -> Option<&TextModelInfo> {
        self.text_info.as_ref()
    }

    /// The heads, when there are.
    pub fn heads_info(&self) -> Option<&HeadsInfo> {
        self.heads_info.as_ref()
    }

    /// The face detector and recognizer, when there are.
    pub fn faces_info(&self) -> Option<&(DetectorInfo, RecognizerInfo)> {
        self.faces_info.as_ref()
    }

    /// The OCR models, when there are.
    pub fn ocr_info(&self) -> Option<&OcrInfo> {
        self.ocr_info.as_ref()
    }

    /// The object detector, when there is one.
    pub fn objects_info(&self) -> Option<&ObjectInfo> {
        self.objects_info.as_ref()
    }

    /// Each tower's shape counts (model/shapes.rs).
    pub fn shapes(&self) -> &[(TowerKind, Arc<ShapeCounts>)] {
        &self.shapes
    }

    /// Whether every worker can still serve: the first that cannot, else `Ok`.
    pub fn health(&self) -> Result<(), Unhealthy> {
        self.seats.iter().try_for_each(Seat::check)
    }

    /// Whether the worker of the image tower (and so of the text tower and the heads) can still
    /// serve: every request needs it. Another worker lost fails only its own towers' parts of
    /// the answers, until the platform replaces the instance (/healthz says so).
    pub fn image_health(&self) -> Result<(), Unhealthy> {
        self.seats.iter().filter(|seat| seat.runs(TowerKind::Image)).try_for_each(Seat::check)
    }

    /// Each worker: its device, towers, time busy and health (/readyz).
    pub fn workers(&self) -> Vec<SeatStatus> {
        self.seats.iter().map(Seat::status).collect()
    }

    /// Queues one preprocessed photo and waits for its embedding. Dropping the future withdraws
    /// the photo: the worker skips jobs nobody waits for. `queue_span` times the wait and is
    /// closed when the batch starts; the current span is taken as the photo's request span.
    pub async fn embed(&self, square: image::RgbImage, queue_span: Span) -> Result<Served<Vec<f32>>, BatchError> {
        let result = queue(&self.images, square, queue_span)?;
        self.metrics.queued(1);
        result.await.map_err(|_| BatchError::Stopped)?
    }

    /// Queues one tokenized text for the text tower and waits for its embedding; dropping the
    /// future withdraws it, as for photos.
    pub async fn embed_text(&self, tokens: crate::tokenize::Tokens) -> Result<Served<Vec<f32>>, BatchError> {
        // Texts have no queue span of their own: their wait is a batch at most.
        ask(loaded(self.texts.as_ref(), "no text model is loaded")?, tokens).await
    }

    /// Queues one photo's embedding for the heads and waits for its scores, one per head in
    /// [`HeadsInfo::names`]' order; dropping the future withdraws it, as for photos.
    pub async fn score(&self, embedding: Vec<f32>) -> Result<Served<Vec<f32>>, BatchError> {
        ask(loaded(self.embeddings.as_ref(), "no heads are loaded")?, embedding).await
    }

    /// Queues one photo's canvas for the face detector and waits for its faces, best first.
    pub async fn detect(&self, canvas: FaceCanvas) -> Result<Served<Detections>, BatchError> {
        ask(&self.face_lanes()?.canvases, canvas).await
    }

    /// Queues one aligned face for the recognizer and waits for its embedding.
    pub async fn recognize(&self, crop: image::RgbImage) -> Result<Served<Vec<f32>>, BatchError> {
        ask(&self.face_lanes()?.crops, crop).await
    }

    fn face_lanes(&self) -> Result<&FaceLanes, ModelError> {
        loaded(self.faces.as_ref(), "no face models are loaded")
    }

    /// Queues one photo's view for the text detector and waits for its probability map.
    pub async fn find_text(&self, view: OcrView) -> Result<Served<ProbabilityMap>, BatchError> {
        ask(&self.ocr_lanes()?.views, view).await
    }

    /// Queues one line (at the classifier's size) and waits for the probability that it is upside
    /// down; none without a line classifier.
    pub async fn orient(&self, line: image::RgbImage) -> Option<Result<Served<f32>, BatchError>> {
        let orientations = self.ocr.as_ref()?.orientations.as_ref()?;
        Some(ask(orientations, line).await)
    }

    /// Queues one line (at the recognizer's height) and waits for its text and score.
    pub async fn read(&self, line: LineInput) -> Result<Served<Recognized>, BatchError> {
        ask(&self.ocr_lanes()?.lines, line).await
    }

    /// Queues one photo's view for the object detector and waits for its objects, best first.
    pub async fn find_objects(&self, view: ObjectView) -> Result<Served<Vec<Found>>, BatchError> {
        ask(loaded(self.objects.as_ref(), "no object model is loaded")?, view).await
    }

    fn ocr_lanes(&self) -> Result<&OcrLanes, ModelError> {
        loaded(self.ocr.as_ref(), "no OCR models are loaded")
    }
}

/// Queues `input` on a lane and waits for its output; dropping the future withdraws it.
async fn ask<Io: TowerIo>(lane: &Sender<Job<Io>>, input: Io::Input) -> Result<Served<Io::Output>, BatchError> {
    queue(lane, input, Span::none())?.await.map_err(|_| BatchError::Stopped)?
}

/// A tower's lane, or the error a job for a tower that is not loaded gets.
fn loaded<'a, T>(lane: Option<&'a T>, missing: &str) -> Result<&'a T, ModelError> {
    lane.ok_or_else(|| ModelError::Inference(missing.into()))
}

type Reply<Io> = oneshot::Receiver<Result<Served<<Io as TowerIo>::Output>, BatchError>>;

/// Puts `input` on a lane's queue, with the current span as its request's.
fn queue<Io: TowerIo>(lane: &Sender<Job<Io>>, input: Io::Input, queue_span: Span) -> Result<Reply<Io>, BatchError> {
    let (reply, result) = oneshot::channel();
    let job = Job { input, reply, queue_span, request_span: Span::current() };
    lane.send(job).map_err(|_| BatchError::Stopped)?;
    Ok(result)
}
