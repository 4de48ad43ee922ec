//! The line classifier tower (PP-OCR's 0°/180° classifier): lines at 48 x 192, BGR
//! `(p / 255 - 0.5) / 0.5`, padded; its output the probability that each is upside down.

use image::RgbImage;
use ort::{session::Session, value::TensorRef};

use super::{OcrTower, lay_out_lines, refuse};
use crate::{
    model::{LineOrientations, ModelData, ModelError, Runtime, Tower},
    preprocess::{CLASSIFIER_WIDTH, LINE_HEIGHT},
    settings::ModelSettings,
};

/// A line the classifier scores 180° at or above this is turned (RapidOCR's `cls_thresh`).
pub const UPSIDE_DOWN: f32 = 0.9;

pub struct LineClassifier {
    session: Session,
    input: String,
    output: String,
    pub info: OcrTower,
    _environment: ort::environment::Environment,
}

impl LineClassifier {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        let session = runtime.session(settings, data).map_err(|e| refuse("classifier", &file, e))?;
        let ([input], [output]) = (session.inputs(), session.outputs()) else {
            return Err(refuse("classifier", &file, "has not one input and one output, [N, 3, 48, 192] -> [N, 2]"));
        };
        let (input, output) = (input.name().to_string(), output.name().to_string());
        let info = OcrTower { file, batch_size };
        let mut classifier = LineClassifier { session, input, output, info, _environment: runtime.environment() };
        classifier
            .check()
            .map_err(|e| refuse("classifier", &classifier.info.file, format!("the warm-up failed: {e}")))?;
        Ok(classifier)
    }
}

/// Lines in, the probability that each is upside down out.
impl Tower for LineClassifier {
    type Io = LineOrientations;

    fn info(&self) -> &OcrTower {
        &self.info
    }

    fn run(&mut self, lines: &[&RgbImage]) -> Result<Vec<f32>, ModelError> {
        let batch = lay_out_lines(lines.iter().copied(), LINE_HEIGHT, CLASSIFIER_WIDTH);
        let shape = [lines.len() as i64, 3, i64::from(LINE_HEIGHT), i64::from(CLASSIFIER_WIDTH)];
        let input = TensorRef::from_array_view((shape, &batch[..])).map_err(ModelError::inference)?;
        let outputs = self.session.run(ort::inputs![self.input.as_str() => input]).map_err(ModelError::inference)?;
        let (_, values) = outputs[self.output.as_str()].try_extract_tensor::<f32>().map_err(ModelError::inference)?;
        if values.len() != 2 * lines.len() {
            return Err(ModelError::Inference(format!(
                "the classifier gave {} values for {} lines",
                values.len(),
                lines.len()
            )));
        }
        Ok(values.chunks_exact(2).map(|pair| pair[1]).collect())
    }

    fn check(&mut self) -> Result<(), ModelError> {
        self.run(&[&RgbImage::new(CLASSIFIER_WIDTH, LINE_HEIGHT)]).map(drop)
    }
}
