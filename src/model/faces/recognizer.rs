//! The face recognizer tower, in two formats told apart by the input's side: ArcFace's
//! (InsightFace's `w600k_r50`, AuraFace: 112 x 112 chips, RGB `(p - 127.5) / 127.5`) and dlib's
//! ResNet as tools/models/dlib_recognizer.py rebuilds it from face-api's weights (150 x 150 chips,
//! raw RGB 0..255: its mean and scale are in the graph). One embedding per chip, L2-normalised as
//! every tower's (`outputs::unit_rows`). Chips from many photos and requests batch together.

use image::RgbImage;

use super::{refuse, square_side};
use crate::{
    model::{Buckets, FaceCrops, Graph, ModelData, ModelError, Runtime, Shapes, Tower, TowerInfo, outputs::unit_rows},
    preprocess::{ARCFACE_CHIP, CHIP_RULE, Chip, DLIB_CHIP},
    settings::{FaceSettings, ModelSettings},
};

/// A recognizer's format: its chip and its input's normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecognizerFormat {
    Arcface,
    Dlib,
}

impl RecognizerFormat {
    /// The format of a recognizer taking `side` x `side` chips.
    fn of_side(side: u32) -> Option<Self> {
        [RecognizerFormat::Arcface, RecognizerFormat::Dlib].into_iter().find(|format| format.chip().side == side)
    }

    pub fn name(self) -> &'static str {
        match self {
            RecognizerFormat::Arcface => "arcface",
            RecognizerFormat::Dlib => "dlib",
        }
    }

    pub fn chip(self) -> Chip {
        match self {
            RecognizerFormat::Arcface => ARCFACE_CHIP,
            RecognizerFormat::Dlib => DLIB_CHIP,
        }
    }

    /// The cosine distance within which two faces are one person's where CLIPFN_FACE_MAX_DISTANCE
    /// is unset. ArcFace's is Immich's for buffalo_l. dlib's was measured with the real weights
    /// on real faces (docs/faces-real-weights.md, "Distance"): its faces sit far closer together.
    pub fn default_max_distance(self) -> f32 {
        match self {
            RecognizerFormat::Arcface => 0.5,
            RecognizerFormat::Dlib => 0.075,
        }
    }

    fn normalized(self, channel: u8) -> f32 {
        match self {
            RecognizerFormat::Arcface => (f32::from(channel) - 127.5) / 127.5,
            RecognizerFormat::Dlib => f32::from(channel),
        }
    }
}

/// What the rest of the service is told about the recognizer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecognizerInfo {
    /// `FORMAT:HASH:chips-RULE`: the format, an xxHash64 of the file and the chip rule's version
    /// (`CHIP_RULE`). Embeddings of two ids never compare; every face answer carries it.
    pub id: String,
    pub file: String,
    pub format: RecognizerFormat,
    pub dim: usize,
    pub batch_size: usize,
}

/// The distance that joins two faces into one person, and where it came from.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct MaxDistance {
    pub value: f32,
    /// `CLIPFN_FACE_MAX_DISTANCE`, or the recognizer format's default.
    pub from: &'static str,
}

impl RecognizerInfo {
    /// The setting's distance, or this recognizer's format's default.
    pub fn max_distance(&self, faces: &FaceSettings) -> MaxDistance {
        match faces.face_max_distance {
            Some(value) => MaxDistance { value, from: "CLIPFN_FACE_MAX_DISTANCE" },
            None => MaxDistance { value: self.format.default_max_distance(), from: "the recognizer format's default" },
        }
    }
}

impl TowerInfo for RecognizerInfo {
    fn batch_size(&self) -> usize {
        self.batch_size
    }
}

pub struct FaceRecognizer {
    graph: Graph,
    output: String,
    buckets: Buckets,
    pub info: RecognizerInfo,
}

impl FaceRecognizer {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        // The shapes are known once the graph is read: declared below.
        let mut graph =
            Graph::open(runtime, settings, data, Shapes::new([])).map_err(|why| refuse("recognizer", &file, why))?;
        let [(output, output_shape)] = &graph.outputs[..] else {
            let outputs = graph.outputs.len();
            return Err(refuse("recognizer", &file, format!("has {outputs} outputs, not [N, 3, S, S] -> [N, D]")));
        };
        let shape = graph.input_shape();
        let side = square_side(shape, ARCFACE_CHIP.side);
        let Some(format) = side.and_then(RecognizerFormat::of_side) else {
            return Err(refuse(
                "recognizer",
                &file,
                format!("takes {shape:?}, not [N, 3, 112, 112] (ArcFace) or [N, 3, 150, 150] (dlib) aligned faces"),
            ));
        };
        let dim = match output_shape.as_deref() {
            Some([_, dim]) if *dim > 0 => *dim as usize,
            shape => return Err(refuse("recognizer", &file, format!("gives {shape:?}, not [N, D] embeddings"))),
        };
        let output = output.clone();
        let hash = data.hash().map_err(|e| refuse("recognizer", &file, format!("cannot be read: {e}")))?;
        let id = format!("{}:{hash:016x}:chips-{CHIP_RULE}", format.name());
        let info = RecognizerInfo { id, file, format, dim, batch_size };
        let device = runtime.device();
        let buckets = Buckets::powers_of_two(batch_size, settings.fill(device));
        let side = i64::from(format.chip().side);
        graph.shapes = Shapes::batches(&buckets, &[3, side, side]);
        let mut recognizer = FaceRecognizer { graph, output, buckets, info };
        Tower::warm_up(&mut recognizer, device.is_cuda())
            .map_err(|e| refuse("recognizer", &recognizer.info.file, format!("the warm-up failed: {e}")))?;
        Ok(recognizer)
    }

    fn black_chip(&self) -> RgbImage {
        let side = self.info.format.chip().side;
        RgbImage::new(side, side)
    }
}

impl Tower for FaceRecognizer {
    type Io = FaceCrops;

    fn info(&self) -> &RecognizerInfo {
        &self.info
    }

    fn run(&mut self, crops: &[&RgbImage]) -> Result<Vec<Vec<f32>>, ModelError> {
        let format = self.info.format;
        let side = format.chip().side;
        let plane = (side * side) as usize;
        let mut batch = vec![0.0f32; crops.len() * 3 * plane];
        for (crop, laid) in crops.iter().zip(batch.chunks_exact_mut(3 * plane)) {
            if crop.dimensions() != (side, side) {
                return Err(ModelError::Inference(format!("a {:?} chip, not {side} x {side}", crop.dimensions())));
            }
            for (i, px) in crop.as_raw().chunks_exact(3).enumerate() {
                for channel in 0..3 {
                    laid[channel * plane + i] = format.normalized(px[channel]);
                }
            }
        }
        let (n, side) = (crops.len() as i64, i64::from(side));
        let output = &self.output;
        self.graph.run_with([n, 3, side, side], &batch, |outputs| unit_rows(outputs, output, crops.len()))
    }

    fn check(&mut self) -> Result<(), ModelError> {
        self.run(&[&self.black_chip()]).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.graph.shapes
    }

    fn batching(&self) -> Option<(&Buckets, RgbImage)> {
        Some((&self.buckets, self.black_chip()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

    fn faces(vars: &[(&str, &str)]) -> FaceSettings {
        let vars = [("CLIPFN_MODEL", "unused")].iter().chain(vars).map(|(k, v)| (k.to_string(), v.to_string()));
        Settings::from_vars(vars).unwrap().faces
    }

    #[test]
    fn the_max_distance_is_the_settings_else_the_formats() {
        for format in [RecognizerFormat::Arcface, RecognizerFormat::Dlib] {
            let info = RecognizerInfo { id: "x".into(), file: "r.onnx".into(), format, dim: 128, batch_size: 8 };
            let default = info.max_distance(&faces(&[]));
            assert_eq!(
                (default.value, default.from),
                (format.default_max_distance(), "the recognizer format's default")
            );
            let set = info.max_distance(&faces(&[("CLIPFN_FACE_MAX_DISTANCE", "0.3")]));
            assert_eq!((set.value, set.from), (0.3, "CLIPFN_FACE_MAX_DISTANCE"));
        }
        assert!(RecognizerFormat::Dlib.default_max_distance() < RecognizerFormat::Arcface.default_max_distance());
    }
}
