//! Model stage: the towers the model worker runs, and what they share.
//!
//! - `runtime`: ONNX Runtime, the execution provider (decided once) and the session builder every
//!   session uses, through [`Runtime::session`].
//! - `graph`: a tower's graph (its session, inputs and outputs as declared, the shapes it runs, a
//!   run), which every tower holds its graphs as.
//! - `tower`: the one trait the worker serves every tower through.
//! - `image`: the image tower and its batch layout; `text`: the text tower; `heads`: the heads on
//!   the image embedding; `faces`: the face detector and recognizer; `ocr`: the text detector, line
//!   classifier and recognizer; `objects`: the object detector; `normalizer`: the image tower's
//!   normalisation as a graph, for `CLIPFN_NORMALIZE=model`.
//! - `files`, `folder`, `preprocessor`, `family`, `initializers`: reading a model (one file or a
//!   folder, over storage), its preprocessing and its family's scoring.
//! - `outputs`: which output is the embedding, read as unit vectors for every tower.

mod faces;
mod family;
mod files;
mod folder;
mod graph;
mod heads;
mod image;
mod initializers;
mod normalizer;
mod objects;
mod ocr;
mod outputs;
mod preprocessor;
mod runtime;
mod shapes;
mod text;
mod tower;

pub use self::{
    faces::{
        Detection, Detections, DetectorFormat, DetectorInfo, FaceDetector, FaceFiles, FaceModels, FaceRecognizer,
        MaxDistance, RecognizerFormat, RecognizerInfo,
    },
    family::{Family, read_family},
    files::{ModelFile, TextFiles, locate_text_model, read_image_model, read_weights},
    graph::Graph,
    heads::{HeadFile, Heads, HeadsInfo},
    image::{ImageModel, ImageModelInfo, Layout, LoadTimings, PixelBatch, Pixels},
    objects::{Found, ObjectDetector, ObjectFiles, ObjectFormat, ObjectInfo},
    ocr::{
        Charset, CharsetMismatch, LineClassifier, OcrDetector, OcrFiles, OcrInfo, OcrModels, OcrTower, ProbabilityMap,
        Recognized, TextBox, TextRecognizer, UPSIDE_DOWN, reading_order, text_boxes,
    },
    runtime::{ModelData, Runtime},
    shapes::{Buckets, ShapeCounts, Shapes},
    text::{IdType, TextModel, TextModelInfo},
    tower::{
        Canvases, Embeddings, FaceCrops, Info, Input, LineOrientations, ObjectViews, OcrViews, Output, Photos,
        TextLines, Texts, Tower, TowerInfo, TowerIo, TowerKind, run_in_buckets,
    },
};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("ONNX Runtime library: {0}")]
    Runtime(String),
    #[error("CUDA was required (CLIPFN_PROVIDER=cuda) but cannot be used: {0}")]
    CudaUnavailable(String),
    #[error("model: {0}")]
    Load(String),
    #[error("model folder: {0}")]
    Folder(String),
    /// The folder's preprocessing file (`preprocessor_config.json`, Immich's `preprocess_cfg.json`).
    #[error("{file}: {reason}")]
    Preprocessor { file: &'static str, reason: String },
    #[error("inference failed: {0}")]
    Inference(String),
}

impl ModelError {
    fn load(e: impl std::fmt::Display) -> Self {
        ModelError::Load(e.to_string())
    }

    fn inference(e: impl std::fmt::Display) -> Self {
        ModelError::Inference(e.to_string())
    }
}
