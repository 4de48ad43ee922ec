//! The text detector tower (PP-OCR's DB): one view at a time (views differ in size), BGR
//! `(p / 255 - 0.5) / 0.5`, its output the probability of text at each pixel of the view.

use super::{Graph, OcrTower, ProbabilityMap, lay_out_lines, warmed};
use crate::{
    model::{ModelData, ModelError, OcrViews, Runtime, Tower},
    preprocess::OcrView,
    settings::ModelSettings,
};

pub struct OcrDetector {
    graph: Graph,
    pub info: OcrTower,
}

impl OcrDetector {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
    ) -> Result<Self, ModelError> {
        let graph = Graph::open(runtime, settings, data, ("detector", &file), "[N, 3, H, W] -> [N, 1, H, W]")?;
        warmed(OcrDetector { graph, info: OcrTower { file, batch_size: 1 } }, "detector")
    }

    fn detect(&mut self, view: &image::RgbImage) -> Result<ProbabilityMap, ModelError> {
        let (width, height) = view.dimensions();
        let pixels = lay_out_lines(std::iter::once(view), height, width);
        let (_, values) = self.graph.run([1, 3, i64::from(height), i64::from(width)], &pixels)?;
        if values.len() != (width * height) as usize {
            return Err(ModelError::Inference(format!(
                "the text detector gave {} values for a {width} x {height} view",
                values.len()
            )));
        }
        Ok(ProbabilityMap { width, height, values })
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
