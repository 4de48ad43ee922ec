//! OCR: PP-OCR's text detector, line classifier and recognizer, three more towers on the model
//! worker (`CLIPFN_OCR_MODEL`, a folder laid out as Immich lays out its OCR models:
//! `detection/model.onnx`, `recognition/model.onnx`, optionally `classification/model.onnx`, and
//! `recognition/characters.txt` for a recognizer that carries no `character` metadata).
//!
//! - `detector`: the DB detector, a probability map per view; `db` turns the map into boxes (pure
//!   geometry, on the decode threads) with `rect`'s rectangles, and `order` sorts them as RapidOCR
//!   reads them;
//! - `classifier`: whether a line is upside down;
//! - `recognizer`: a line's text and score, by `ctc`'s greedy decoding.
//!
//! The views and the lines are made on the decode threads (`preprocess::ocr`); the towers only lay
//! out their batch, run the graph and read the output.

mod classifier;
mod ctc;
mod db;
mod detector;
mod offset;
mod order;
mod recognizer;
mod rect;

pub use self::{
    classifier::{LineClassifier, UPSIDE_DOWN},
    ctc::{Charset, CharsetMismatch},
    db::{BOX_THRESHOLD, ProbabilityMap, TextBox, text_boxes},
    detector::OcrDetector,
    order::reading_order,
    recognizer::{Recognized, TextRecognizer},
};
use super::{Graph, ModelData, ModelError, Runtime, Shapes, Tower, TowerInfo, TowerIo};
use crate::settings::{Device, ModelSettings, OcrSettings, OcrSizes};

/// One OCR tower, as the worker sees it: its file and its batch size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OcrTower {
    pub file: String,
    pub batch_size: usize,
}

impl TowerInfo for OcrTower {
    fn batch_size(&self) -> usize {
        self.batch_size
    }
}

/// What the rest of the service is told about the OCR models and the settings they run with
/// (/readyz).
#[derive(Debug, Clone, serde::Serialize)]
pub struct OcrInfo {
    /// Where the OCR towers run (CLIPFN_OCR_PROVIDER).
    pub provider: Device,
    pub detector: String,
    pub classifier: Option<String>,
    pub recognizer: String,
    /// The recognizer's characters (the space RapidOCR appends not counted).
    pub characters: usize,
    /// The detector view's short side at most (CLIPFN_OCR_RESOLUTION).
    pub resolution: u32,
    /// The sizes the views and lines run at, `declared` or `exact` (CLIPFN_OCR_SIZES).
    pub sizes: OcrSizes,
    /// The recognizer's score a line needs unless a request asks another (CLIPFN_OCR_MIN_SCORE).
    pub min_score: f32,
    /// The detector's box score a line needs (DB's `box_thresh`).
    pub box_min_score: f32,
    /// The most lines a photo answers (CLIPFN_OCR_MAX_LINES).
    pub max_lines: usize,
    /// A line the classifier scores upside down at or above this is turned.
    pub upside_down: f32,
}

/// The OCR towers, loaded and warmed up together.
pub struct OcrModels {
    pub detector: OcrDetector,
    pub classifier: Option<LineClassifier>,
    pub recognizer: TextRecognizer,
    settings: OcrSettings,
    provider: Device,
}

/// The files of an OCR model folder, read for loading: each with where it came from.
pub struct OcrFiles {
    pub detector: (String, ModelData),
    pub classifier: Option<(String, ModelData)>,
    pub recognizer: (String, ModelData),
    /// `recognition/characters.txt`, when the folder has one.
    pub characters: Option<(String, String)>,
}

impl OcrModels {
    /// Builds the sessions on the image tower's runtime; a recognizer whose classes do not match
    /// its characters stops start-up, naming both numbers.
    pub fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        files: OcrFiles,
        ocr: &OcrSettings,
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        let sizes = ocr.sizes(runtime.device());
        let (location, data) = files.detector;
        let detector = OcrDetector::load(runtime, settings, &data, location, (ocr.ocr_resolution, sizes))?;
        let classifier = files
            .classifier
            .map(|(location, data)| LineClassifier::load(runtime, settings, &data, location, batch_size))
            .transpose()?;
        let (location, data) = files.recognizer;
        let recognizer =
            TextRecognizer::load(runtime, settings, &data, location, files.characters, (batch_size, sizes))?;
        Ok(OcrModels { detector, classifier, recognizer, settings: ocr.clone(), provider: runtime.device() })
    }

    pub fn info(&self) -> OcrInfo {
        OcrInfo {
            provider: self.provider,
            detector: self.detector.info.file.clone(),
            classifier: self.classifier.as_ref().map(|c| c.info.file.clone()),
            recognizer: self.recognizer.info.file.clone(),
            characters: self.recognizer.characters(),
            resolution: self.settings.ocr_resolution,
            sizes: self.settings.sizes(self.provider),
            min_score: self.settings.ocr_min_score,
            box_min_score: BOX_THRESHOLD,
            max_lines: self.settings.ocr_max_lines,
            upside_down: UPSIDE_DOWN,
        }
    }
}

/// A model file's refusal, naming it.
fn refuse(what: &str, location: &str, why: impl std::fmt::Display) -> ModelError {
    ModelError::Load(format!("OCR {what} {location}: {why}"))
}

/// The OCR `what` in `file`, refused unless it has one input and one output (`shape` says what
/// they should be); it runs the `shapes` declared.
fn open_graph(
    runtime: &mut Runtime,
    settings: &ModelSettings,
    data: &ModelData,
    (what, file): (&str, &str),
    shape: &str,
    shapes: Shapes,
) -> Result<Graph, ModelError> {
    let graph = Graph::open(runtime, &settings.with_cpu_arena(), data, shapes).map_err(|e| refuse(what, file, e))?;
    if graph.outputs.len() != 1 {
        return Err(refuse(what, file, format!("has not one input and one output, {shape}")));
    }
    Ok(graph)
}

/// `tower` once warmed up (every declared shape on CUDA, its warm-up input on CPU), or the refusal
/// naming its file.
fn warmed<T: Tower<Io: TowerIo<Info = OcrTower>>>(mut tower: T, what: &str, every: bool) -> Result<T, ModelError> {
    match tower.warm_up(every) {
        Ok(()) => Ok(tower),
        Err(e) => Err(refuse(what, &tower.info().file, format!("the warm-up failed: {e}"))),
    }
}

/// `lines` laid out as one NCHW batch of `width`-wide BGR planes, `(p / 255 - 0.5) / 0.5`, each
/// line at the left and zeros (the normalised mid-grey) to its right, as PP-OCR pads.
fn lay_out_lines<'a>(lines: impl ExactSizeIterator<Item = &'a image::RgbImage>, height: u32, width: u32) -> Vec<f32> {
    let plane = (height * width) as usize;
    let mut batch = vec![0.0f32; lines.len() * 3 * plane];
    for (line, laid) in lines.zip(batch.chunks_exact_mut(3 * plane)) {
        for (x, y, pixel) in line.enumerate_pixels().filter(|(x, y, _)| *x < width && *y < height) {
            let at = (y * width + x) as usize;
            for (channel, value) in pixel.0.iter().rev().enumerate() {
                laid[channel * plane + at] = normalized(*value);
            }
        }
    }
    batch
}

/// PP-OCR's pixel normalisation, `(p / 255 - 0.5) / 0.5`.
fn normalized(value: u8) -> f32 {
    (f32::from(value) / 255.0 - 0.5) / 0.5
}
