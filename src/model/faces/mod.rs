//! Faces: a detector and a recognizer, two more towers on the model worker (`CLIPFN_FACE_MODEL`, a
//! folder laid out as Immich stores InsightFace's packs: `detection/model.onnx`,
//! `recognition/model.onnx`).
//!
//! - `detector`: the detector tower, whose three formats (`scrfd`: InsightFace's SCRFD, `yunet`:
//!   OpenCV Zoo's YuNet, `yolov5_face`: deepcam-cn's YOLOv5-face) are told apart by their outputs,
//!   each decoded to boxes, scores and five landmarks on the detector's canvas;
//! - `nms`: the greedy non-maximum suppression every format ends with;
//! - `recognizer`: ArcFace- and dlib-format recognizers, one unit-length embedding per aligned chip
//!   (112 x 112 or 150 x 150: the input's side tells them apart).
//!
//! The canvas and the aligned crops are made on the decode threads (`preprocess::faces`); the towers
//! only run graphs and read their outputs.

mod detector;
mod nms;
mod recognizer;
mod scrfd;
mod yolov5_face;
mod yunet;

pub use self::{
    detector::{Detections, DetectorFormat, DetectorInfo, FaceDetector},
    recognizer::{FaceRecognizer, MaxDistance, RecognizerFormat, RecognizerInfo},
};
use super::{ModelData, ModelError, Runtime};
use crate::settings::{FaceSettings, ModelSettings};

/// One face as the detector found it, in canvas pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    /// `[x1, y1, x2, y2]`.
    pub bbox: [f32; 4],
    pub score: f32,
    /// Left eye, right eye, nose, left and right mouth corners, as `[x, y]`.
    pub landmarks: [[f32; 2]; 5],
}

/// The two face towers, loaded and warmed up together.
pub struct FaceModels {
    pub detector: FaceDetector,
    pub recognizer: FaceRecognizer,
}

/// The files of a face model folder, read for loading.
pub struct FaceFiles {
    pub detector: (String, ModelData),
    pub recognizer: (String, ModelData),
}

impl FaceModels {
    /// Builds both sessions on the image tower's runtime; a detector of no format, or a recognizer
    /// of neither (112 x 112 or 150 x 150 faces), stops start-up naming its file.
    pub fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        files: FaceFiles,
        faces: &FaceSettings,
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        let (location, data) = files.detector;
        let detector = FaceDetector::load(runtime, settings, &data, location, faces)?;
        let (location, data) = files.recognizer;
        let recognizer = FaceRecognizer::load(runtime, settings, &data, location, batch_size)?;
        Ok(FaceModels { detector, recognizer })
    }
}

/// A model file's refusal, naming it.
fn refuse(what: &str, location: &str, why: impl std::fmt::Display) -> ModelError {
    ModelError::Load(format!("face {what} {location}: {why}"))
}

/// The fixed side of a square `[1, 3, S, S]` input, or `default` where it is dynamic.
fn square_side(shape: Option<&[i64]>, default: u32) -> Option<u32> {
    match shape? {
        [_, 3, h, w] if h == w && *h > 0 => Some(*h as u32),
        [_, 3, h, w] if *h <= 0 && *w <= 0 => Some(default),
        _ => None,
    }
}
