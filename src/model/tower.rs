//! The one face every tower shows the model worker: what goes in and what comes out, how large its
//! batches get, how it runs one, and how it tells a broken tower from inputs that trip it. The
//! worker serves a tower through this trait alone, so a new tower is an impl of it and a lane in
//! the worker.
//!
//! A tower's [`TowerIo`] ([`Photos`] or [`Texts`]) fixes its input, its output, its description
//! and its [`TowerKind`], which says once what the worker does differently per tower (its span
//! name, its metrics stage, whether a batch waits to fill) rather than asking each tower. Most
//! towers give one vector per input; the face detector gives a list of faces per canvas.

use image::RgbImage;

use super::{
    Buckets, Detections, DetectorInfo, Found, HeadsInfo, ImageModelInfo, ModelError, ObjectInfo, OcrTower,
    ProbabilityMap, Recognized, RecognizerInfo, Shapes, TextModelInfo,
};
use crate::{
    observe::metrics::Stage,
    preprocess::{FaceCanvas, LineInput, ObjectView, OcrView},
    tokenize::Tokens,
};

/// Which tower a batch runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TowerKind {
    Image,
    Text,
    Heads,
    FaceDetector,
    FaceRecognizer,
    TextDetector,
    LineClassifier,
    TextRecognizer,
    ObjectDetector,
}

impl TowerKind {
    /// As the `clipfn.batch.tower` attribute of a batch's `inference` span.
    pub fn as_str(self) -> &'static str {
        match self {
            TowerKind::Image => "image",
            TowerKind::Text => "text",
            TowerKind::Heads => "heads",
            TowerKind::FaceDetector => "face_detector",
            TowerKind::FaceRecognizer => "face_recognizer",
            TowerKind::TextDetector => "text_detector",
            TowerKind::LineClassifier => "line_classifier",
            TowerKind::TextRecognizer => "text_recognizer",
            TowerKind::ObjectDetector => "object_detector",
        }
    }

    /// The stage a batch's run is timed as, in `clipfn_stage_duration_seconds`.
    pub fn stage(self) -> Stage {
        match self {
            TowerKind::Image => Stage::Inference,
            TowerKind::Text => Stage::TextInference,
            TowerKind::Heads => Stage::Heads,
            TowerKind::FaceDetector => Stage::FaceDetection,
            TowerKind::FaceRecognizer => Stage::FaceRecognition,
            TowerKind::TextDetector => Stage::TextDetection,
            TowerKind::LineClassifier => Stage::LineClassification,
            TowerKind::TextRecognizer => Stage::TextRecognition,
            TowerKind::ObjectDetector => Stage::ObjectDetection,
        }
    }

    /// Whether a batch waits up to `batch_wait` to fill. A request's photos reach the queue one by
    /// one as their fetches and decodes end, so a short wait fills the batch; a request's texts are
    /// queued together and someone waits on them, so their batch takes what is queued.
    /// A photo's embedding reaches the heads as its image batch ends, with its batch-mates': they
    /// are queued together, so their batch takes what is queued too; so are a photo's face crops.
    /// The detector takes one canvas at a time.
    pub fn waits_to_fill(self) -> bool {
        matches!(self, TowerKind::Image)
    }

    /// Whether its inputs count in the queue-depth gauge and the batch-size histogram, which are
    /// about photos: what the admission limit and CLIPFN_BATCH_SIZE are set for.
    pub fn counts_as_photos(self) -> bool {
        matches!(self, TowerKind::Image)
    }
}

/// What the worker reads in a tower's description.
pub trait TowerInfo {
    /// The most inputs one batch takes.
    fn batch_size(&self) -> usize;
}

/// What goes into a kind of tower and what comes out, as types: every image tower (the model, a
/// test's stand-in) is [`Photos`], every text tower [`Texts`].
pub trait TowerIo: 'static {
    /// One input, as it waits in the worker's queue.
    type Input: Send + 'static;
    /// What the tower gives for one input.
    type Output: Send + 'static;
    /// What the rest of the service is told about a tower.
    type Info: TowerInfo + Clone + Send + Sync + 'static;
    const KIND: TowerKind;
}

/// Resized squares (see `preprocess`), laid out into a batch by the tower; one unit-length
/// embedding each.
pub enum Photos {}

impl TowerIo for Photos {
    type Input = RgbImage;
    type Output = Vec<f32>;
    type Info = ImageModelInfo;
    const KIND: TowerKind = TowerKind::Image;
}

/// Tokenized texts, padded into a batch by the tower; one unit-length embedding each.
pub enum Texts {}

impl TowerIo for Texts {
    type Input = Tokens;
    type Output = Vec<f32>;
    type Info = TextModelInfo;
    const KIND: TowerKind = TowerKind::Text;
}

/// The image tower's embeddings, for the heads; one score per head each.
pub enum Embeddings {}

impl TowerIo for Embeddings {
    type Input = Vec<f32>;
    type Output = Vec<f32>;
    type Info = HeadsInfo;
    const KIND: TowerKind = TowerKind::Heads;
}

/// Photos letterboxed onto the face detector's canvas; the faces found on each, best first.
pub enum Canvases {}

impl TowerIo for Canvases {
    type Input = FaceCanvas;
    type Output = Detections;
    type Info = DetectorInfo;
    const KIND: TowerKind = TowerKind::FaceDetector;
}

/// Faces aligned to the recognizer's 112 x 112 template; one unit-length embedding each.
pub enum FaceCrops {}

impl TowerIo for FaceCrops {
    type Input = RgbImage;
    type Output = Vec<f32>;
    type Info = RecognizerInfo;
    const KIND: TowerKind = TowerKind::FaceRecognizer;
}

/// Photos' views for the text detector; a probability map each.
pub enum OcrViews {}

impl TowerIo for OcrViews {
    type Input = OcrView;
    type Output = ProbabilityMap;
    type Info = OcrTower;
    const KIND: TowerKind = TowerKind::TextDetector;
}

/// Text lines at the classifier's 48 x 192; the probability that each is upside down.
pub enum LineOrientations {}

impl TowerIo for LineOrientations {
    type Input = RgbImage;
    type Output = f32;
    type Info = OcrTower;
    const KIND: TowerKind = TowerKind::LineClassifier;
}

/// Text lines at the recognizer's height 48, each with its width; their text and score.
pub enum TextLines {}

impl TowerIo for TextLines {
    type Input = LineInput;
    type Output = Recognized;
    type Info = OcrTower;
    const KIND: TowerKind = TowerKind::TextRecognizer;
}

/// Photos on the object detector's square; the objects found on each, best first.
pub enum ObjectViews {}

impl TowerIo for ObjectViews {
    type Input = ObjectView;
    type Output = Vec<Found>;
    type Info = ObjectInfo;
    const KIND: TowerKind = TowerKind::ObjectDetector;
}

/// What tower `T` takes, gives and is described by.
pub type Input<T> = <<T as Tower>::Io as TowerIo>::Input;
pub type Output<T> = <<T as Tower>::Io as TowerIo>::Output;
pub type Info<T> = <<T as Tower>::Io as TowerIo>::Info;

/// A model session the worker runs batches on: the image model and the text model in production,
/// stand-ins in unit tests.
pub trait Tower: Sized + Send + 'static {
    type Io: TowerIo;
    const KIND: TowerKind = <Self::Io as TowerIo>::KIND;

    fn info(&self) -> &Info<Self>;
    /// Runs one batch of a declared size (see [`run_in_buckets`]); returns one output per input,
    /// in order.
    fn run(&mut self, inputs: &[&Input<Self>]) -> Result<Vec<Output<Self>>, ModelError>;
    /// Runs the tower's known-good warm-up input again: after a failed batch, this tells a broken
    /// tower or device (this fails too) from inputs that trip the model (only they fail).
    fn check(&mut self) -> Result<(), ModelError>;
    /// Its input shapes: declared at load, counted as they run (model/shapes.rs).
    fn shapes(&self) -> &Shapes;
    /// The batch sizes its runs take, and the input that pads a run up to one (its warm-up input).
    /// `None` for a tower whose inputs differ in shape: it sizes its own runs.
    fn batching(&self) -> Option<(&Buckets, Input<Self>)> {
        None
    }
    /// Runs its declared shapes once each where a first run of a shape costs a search (`every`:
    /// on CUDA), else its smallest and largest batch, so that no request pays for either.
    fn warm_up(&mut self, every: bool) -> Result<(), ModelError> {
        let Some((buckets, filler)) = self.batching() else { return self.check() };
        buckets.warm_up_sizes(every).into_iter().try_for_each(|n| self.run(&vec![&filler; n]).map(drop))
    }
}

/// Runs `inputs` on `tower` in runs of its declared batch sizes (padded up on CUDA, split on CPU:
/// model/shapes.rs); one output per input, in order.
pub fn run_in_buckets<T: Tower>(tower: &mut T, inputs: &[&Input<T>]) -> Result<Vec<Output<T>>, ModelError> {
    let Some((buckets, filler)) = tower.batching() else { return tower.run(inputs) };
    let plan = buckets.plan(inputs.len());
    let mut outputs = Vec::with_capacity(inputs.len());
    let mut rest = inputs;
    for (len, size) in plan {
        let (run, after) = rest.split_at(len);
        rest = after;
        let mut padded = run.to_vec();
        padded.resize(size, &filler);
        outputs.extend(tower.run(&padded)?.into_iter().take(len));
    }
    Ok(outputs)
}
