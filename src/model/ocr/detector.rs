//! The text detector tower (PP-OCR's DB): one view at a time (views differ in size), BGR
//! `(p / 255 - 0.5) / 0.5`, its output the probability of text at each pixel of the view.

use ort::{session::Session, value::TensorRef};

use super::{OcrTower, ProbabilityMap, lay_out_lines, refuse};
use crate::{
    model::{ModelData, ModelError, OcrViews, Runtime, Tower},
    preprocess::OcrView,
    settings::ModelSettings,
};

pub struct OcrDetector {
    session: Session,
    input: String,
    output: String,
    pub info: OcrTower,
    _environment: ort::environment::Environment,
}

impl OcrDetector {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
    ) -> Result<Self, ModelError> {
        let session = runtime.session(settings, data).map_err(|e| refuse("detector", &file, e))?;
        let ([input], [output]) = (session.inputs(), session.outputs()) else {
            return Err(refuse("detector", &file, "has not one input and one output, [N, 3, H, W] -> [N, 1, H, W]"));
        };
        let (input, output) = (input.name().to_string(), output.name().to_string());
        let info = OcrTower { file, batch_size: 1 };
        let mut detector = OcrDetector { session, input, output, info, _environment: runtime.environment() };
        detector.check().map_err(|e| refuse("detector", &detector.info.file, format!("the warm-up failed: {e}")))?;
        Ok(detector)
    }

    fn detect(&mut self, view: &image::RgbImage) -> Result<ProbabilityMap, ModelError> {
        let (width, height) = view.dimensions();
        let pixels = lay_out_lines(std::iter::once(view), height, width);
        let shape = [1, 3, i64::from(height), i64::from(width)];
        let input = TensorRef::from_array_view((shape, &pixels[..])).map_err(ModelError::inference)?;
        let outputs = self.session.run(ort::inputs![self.input.as_str() => input]).map_err(ModelError::inference)?;
        let (_, values) = outputs[self.output.as_str()].try_extract_tensor::<f32>().map_err(ModelError::inference)?;
        if values.len() != (width * height) as usize {
            return Err(ModelError::Inference(format!(
                "the text detector gave {} values for a {width} x {height} view",
                values.len()
            )));
        }
        Ok(ProbabilityMap { width, height, values: values.to_vec() })
    }
}

/// One view in, its probability map out.
impl Tower for OcrDetector {
    type Io = OcrViews;

    fn info(&self) -> &OcrTower {
        &self.info
    }

    fn run(&mut self, views: &[&OcrView]) -> Result<Vec<ProbabilityMap>, ModelError> {
        views.iter().map(|view| self.detect(&view.view)).collect()
    }

    fn check(&mut self) -> Result<(), ModelError> {
        self.detect(&image::RgbImage::new(64, 32)).map(drop)
    }
}
