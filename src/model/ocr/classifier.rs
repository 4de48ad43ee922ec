//! The line classifier tower (PP-OCR's 0°/180° classifier): lines at 48 x 192, BGR
//! `(p / 255 - 0.5) / 0.5`, padded; its output the probability that each is upside down.

use image::RgbImage;

use super::{Graph, OcrTower, lay_out_lines, open_graph, warmed};
use crate::{
    model::{Buckets, LineOrientations, ModelData, ModelError, Runtime, Shapes, Tower},
    preprocess::{CLASSIFIER_WIDTH, LINE_HEIGHT},
    settings::ModelSettings,
};

/// A line the classifier scores 180° at or above this is turned (RapidOCR's `cls_thresh`).
pub const UPSIDE_DOWN: f32 = 0.9;

pub struct LineClassifier {
    graph: Graph,
    buckets: Buckets,
    pub info: OcrTower,
}

impl LineClassifier {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        let buckets = Buckets::powers_of_two(batch_size, settings.fill(runtime.device()));
        let shapes = Shapes::batches(&buckets, &[3, i64::from(LINE_HEIGHT), i64::from(CLASSIFIER_WIDTH)]);
        let graph = open_graph(runtime, settings, data, ("classifier", &file), "[N, 3, 48, 192] -> [N, 2]", shapes)?;
        let every = graph.warms_every_shape;
        warmed(LineClassifier { graph, buckets, info: OcrTower { file, batch_size } }, "classifier", every)
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
        let (_, values) = self.graph.run(shape, &batch, 0)?;
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

    fn shapes(&self) -> &Shapes {
        &self.graph.shapes
    }

    fn batching(&self) -> Option<(&Buckets, RgbImage)> {
        Some((&self.buckets, RgbImage::new(CLASSIFIER_WIDTH, LINE_HEIGHT)))
    }
}
