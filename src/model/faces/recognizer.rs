//! The face recognizer tower (ArcFace format: InsightFace's `w600k_r50`, AuraFace): aligned 112 x 112
//! crops in, RGB `(p - 127.5) / 127.5`; one embedding each, L2-normalised as every tower's
//! (`outputs::unit_rows`). Crops from many photos and requests batch together.

use image::RgbImage;
use ort::{session::Session, value::TensorRef};

use super::{refuse, square_side};
use crate::{
    model::{FaceCrops, ModelData, ModelError, Runtime, Tower, TowerInfo, outputs::unit_rows},
    preprocess::CROP_SIDE,
    settings::ModelSettings,
};

/// What the rest of the service is told about the recognizer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecognizerInfo {
    pub file: String,
    pub dim: usize,
    pub batch_size: usize,
}

impl TowerInfo for RecognizerInfo {
    fn batch_size(&self) -> usize {
        self.batch_size
    }
}

pub struct FaceRecognizer {
    session: Session,
    input: String,
    output: String,
    pub info: RecognizerInfo,
    _environment: ort::environment::Environment,
}

impl FaceRecognizer {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        let session = runtime.session(settings, data).map_err(|e| refuse("recognizer", &file, e))?;
        let (input, output) = match (session.inputs(), session.outputs()) {
            ([input], [output]) => (input, output),
            (inputs, outputs) => {
                return Err(refuse(
                    "recognizer",
                    &file,
                    format!(
                        "has {} inputs and {} outputs, not [N, 3, 112, 112] -> [N, D]",
                        inputs.len(),
                        outputs.len()
                    ),
                ));
            }
        };
        let shape = input.dtype().tensor_shape().map(|s| s.to_vec());
        if square_side(shape.as_deref(), CROP_SIDE) != Some(CROP_SIDE) {
            return Err(refuse("recognizer", &file, format!("takes {shape:?}, not [N, 3, 112, 112] aligned faces")));
        }
        let dim = match output.dtype().tensor_shape().map(|s| s.to_vec()).as_deref() {
            Some([_, dim]) if *dim > 0 => *dim as usize,
            shape => return Err(refuse("recognizer", &file, format!("gives {shape:?}, not [N, D] embeddings"))),
        };
        let (input, output) = (input.name().to_string(), output.name().to_string());
        let info = RecognizerInfo { file, dim, batch_size };
        let mut recognizer = FaceRecognizer { session, input, output, info, _environment: runtime.environment() };
        for n in [1, batch_size] {
            let black = RgbImage::new(CROP_SIDE, CROP_SIDE);
            recognizer
                .run(&vec![&black; n])
                .map_err(|e| refuse("recognizer", &recognizer.info.file, format!("the warm-up failed: {e}")))?;
        }
        Ok(recognizer)
    }
}

impl Tower for FaceRecognizer {
    type Io = FaceCrops;

    fn info(&self) -> &RecognizerInfo {
        &self.info
    }

    fn run(&mut self, crops: &[&RgbImage]) -> Result<Vec<Vec<f32>>, ModelError> {
        let plane = (CROP_SIDE * CROP_SIDE) as usize;
        let mut batch = vec![0.0f32; crops.len() * 3 * plane];
        for (crop, laid) in crops.iter().zip(batch.chunks_exact_mut(3 * plane)) {
            for (i, px) in crop.as_raw().chunks_exact(3).enumerate() {
                for channel in 0..3 {
                    laid[channel * plane + i] = (f32::from(px[channel]) - 127.5) / 127.5;
                }
            }
        }
        let (n, side) = (crops.len() as i64, i64::from(CROP_SIDE));
        let input = TensorRef::from_array_view(([n, 3, side, side], &batch[..])).map_err(ModelError::inference)?;
        let outputs = self.session.run(ort::inputs![self.input.as_str() => input]).map_err(ModelError::inference)?;
        unit_rows(&outputs, &self.output, crops.len())
    }

    fn check(&mut self) -> Result<(), ModelError> {
        self.run(&[&RgbImage::new(CROP_SIDE, CROP_SIDE)]).map(drop)
    }
}
