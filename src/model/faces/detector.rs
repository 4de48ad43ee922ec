//! The face detector tower: one canvas at a time (the packs' detectors take a batch of one), its
//! outputs decoded as their format says, then non-maximum suppression.
//!
//! - **SCRFD** (InsightFace's `det_10g`, `det_2.5g`, `det_500m`; decoded as its `scrfd.py` does):
//!   RGB `(p - 127.5) / 128`; 9 outputs (scores, boxes, landmarks for strides 8/16/32, two anchors a
//!   cell) or 15 (five strides to 128, one anchor). Each is a distance from the anchor's centre
//!   `(x·s, y·s)`, in strides. Exports without landmarks (6 or 10 outputs) are refused: faces are
//!   aligned by their landmarks for the recognizer.
//! - **YuNet** (OpenCV Zoo, decoded as OpenCV's `FaceDetectorYN`): BGR, raw 0-255; 12 outputs, `cls`,
//!   `obj`, `bbox` and `kps` for strides 8/16/32, one anchor a cell; the score is
//!   `sqrt(cls · obj)`, each clamped to [0, 1]; boxes from the cell offset and exp'd sizes.

use ort::{session::Session, value::TensorRef};

use super::{Detection, nms::suppress, refuse, square_side};
use crate::{
    model::{Canvases, ModelData, ModelError, Runtime, Tower, TowerInfo},
    preprocess::FaceCanvas,
    settings::ModelSettings,
};

/// The canvas side of detectors whose input size is dynamic (Immich's and InsightFace's default).
const DEFAULT_SIDE: u32 = 640;
/// InsightFace's IoU for SCRFD, OpenCV's default for YuNet.
const SCRFD_IOU: f32 = 0.4;
const YUNET_IOU: f32 = 0.3;
const YUNET_STRIDES: [u32; 3] = [8, 16, 32];
/// Candidates kept for suppression, best first (OpenCV's `top_k`): a noise photo can pass the score
/// threshold at every anchor, and suppression is quadratic.
const MAX_CANDIDATES: usize = 5000;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum DetectorFormat {
    Scrfd { strides: Vec<u32>, anchors: usize },
    Yunet,
}

/// What the rest of the service is told about the detector.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DetectorInfo {
    pub file: String,
    #[serde(flatten)]
    pub format: DetectorFormat,
    /// The canvas side it takes.
    pub side: u32,
    /// A request's minimum score when it names none (CLIPFN_FACE_MIN_SCORE).
    pub min_score: f32,
    /// The candidates it keeps, down to this score, for requests that ask a lower minimum
    /// (CLIPFN_FACE_SCORE_FLOOR).
    pub score_floor: f32,
    /// The most faces a photo answers, after its request's minimum (CLIPFN_MAX_FACES).
    pub max_faces: usize,
}

/// The faces found on one canvas at or above the floor, best first.
#[derive(Debug, Clone)]
pub struct Detections {
    pub faces: Vec<Detection>,
}

impl TowerInfo for DetectorInfo {
    fn batch_size(&self) -> usize {
        1
    }
}

pub struct FaceDetector {
    session: Session,
    input: String,
    /// In the order the format's decoder reads them.
    outputs: Vec<String>,
    pub info: DetectorInfo,
    /// The input tensor, kept from canvas to canvas.
    pixels: Vec<f32>,
    _environment: ort::environment::Environment,
}

impl FaceDetector {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
        (min_score, score_floor, max_faces): (f32, f32, usize),
    ) -> Result<Self, ModelError> {
        let session = runtime.session(settings, data).map_err(|e| refuse("detector", &file, e))?;
        let [input] = session.inputs() else {
            return Err(refuse("detector", &file, format!("has {} inputs, not one image", session.inputs().len())));
        };
        let shape = input.dtype().tensor_shape().map(|s| s.to_vec());
        let side = square_side(shape.as_deref(), DEFAULT_SIDE)
            .ok_or_else(|| refuse("detector", &file, format!("takes {shape:?}, not a square [1, 3, S, S] image")))?;
        let names: Vec<String> = session.outputs().iter().map(|o| o.name().to_string()).collect();
        let (format, outputs) = recognise(names).map_err(|why| refuse("detector", &file, why))?;
        let input = input.name().to_string();
        let info = DetectorInfo { file, format, side, min_score, score_floor, max_faces };
        let pixels = vec![0.0; 3 * (side * side) as usize];
        let mut detector = FaceDetector { session, input, outputs, info, pixels, _environment: runtime.environment() };
        detector.check().map_err(|e| refuse("detector", &detector.info.file, format!("the warm-up failed: {e}")))?;
        Ok(detector)
    }

    /// The canvas as the format takes it: NCHW floats, RGB normalised (SCRFD) or BGR raw (YuNet).
    fn lay_out(&mut self, canvas: &FaceCanvas) {
        let plane = (self.info.side * self.info.side) as usize;
        let (order, offset, scale) = match self.info.format {
            DetectorFormat::Scrfd { .. } => ([0, 1, 2], 127.5, 1.0 / 128.0),
            DetectorFormat::Yunet => ([2, 1, 0], 0.0, 1.0),
        };
        for (i, px) in canvas.image.as_raw().chunks_exact(3).enumerate() {
            for (plane_index, &channel) in order.iter().enumerate() {
                self.pixels[plane_index * plane + i] = (f32::from(px[channel]) - offset) * scale;
            }
        }
    }

    fn detect(&mut self, canvas: &FaceCanvas) -> Result<Detections, ModelError> {
        self.lay_out(canvas);
        let side = i64::from(self.info.side);
        let input =
            TensorRef::from_array_view(([1, 3, side, side], &self.pixels[..])).map_err(ModelError::inference)?;
        let outputs = self.session.run(ort::inputs![self.input.as_str() => input]).map_err(ModelError::inference)?;
        let mut tensors = Vec::with_capacity(self.outputs.len());
        for name in &self.outputs {
            let (_, values) = outputs[name.as_str()].try_extract_tensor::<f32>().map_err(ModelError::inference)?;
            tensors.push(values);
        }
        let (mut found, iou, plus_one) = match &self.info.format {
            DetectorFormat::Scrfd { strides, anchors } => {
                (decode_scrfd(&tensors, strides, *anchors, self.info.side, self.info.score_floor)?, SCRFD_IOU, true)
            }
            DetectorFormat::Yunet => (decode_yunet(&tensors, self.info.side, self.info.score_floor)?, YUNET_IOU, false),
        };
        if found.len() > MAX_CANDIDATES {
            found.select_nth_unstable_by(MAX_CANDIDATES, |a, b| b.score.total_cmp(&a.score));
            found.truncate(MAX_CANDIDATES);
        }
        // Greedy suppression goes best first, so a box at or above a request's minimum is suppressed
        // only by better ones: filtering these by that minimum is suppressing at it.
        Ok(Detections { faces: suppress(found, iou, plus_one, canvas.scale) })
    }
}

/// One canvas in, its faces out, best first.
impl Tower for FaceDetector {
    type Io = Canvases;

    fn info(&self) -> &DetectorInfo {
        &self.info
    }

    fn run(&mut self, canvases: &[&FaceCanvas]) -> Result<Vec<Detections>, ModelError> {
        canvases.iter().map(|canvas| self.detect(canvas)).collect()
    }

    fn check(&mut self) -> Result<(), ModelError> {
        let side = self.info.side;
        let canvas = FaceCanvas { image: image::RgbImage::new(side, side).into(), scale: 1.0, full_size: (side, side) };
        self.detect(&canvas).map(drop)
    }
}

/// The format of a detector with these outputs, and its outputs in the decoder's order.
fn recognise(names: Vec<String>) -> Result<(DetectorFormat, Vec<String>), String> {
    match names.len() {
        9 => Ok((DetectorFormat::Scrfd { strides: vec![8, 16, 32], anchors: 2 }, names)),
        15 => Ok((DetectorFormat::Scrfd { strides: vec![8, 16, 32, 64, 128], anchors: 1 }, names)),
        12 => {
            // By name where the export kept OpenCV Zoo's (cls_8 ... kps_32), else in that order.
            let wanted = ["cls", "obj", "bbox", "kps"]
                .iter()
                .flat_map(|kind| YUNET_STRIDES.map(|stride| format!("{kind}_{stride}")));
            let by_name: Option<Vec<String>> = wanted.map(|name| names.contains(&name).then_some(name)).collect();
            Ok((DetectorFormat::Yunet, by_name.unwrap_or(names)))
        }
        6 | 10 => Err(format!(
            "is an SCRFD export without landmarks ({} outputs); faces are aligned by their five landmarks, so \
             use an export with them (9 or 15 outputs, as InsightFace's packs have)",
            names.len()
        )),
        n => Err(format!(
            "has {n} outputs, which matches neither detector format: SCRFD has 9 (three strides, two anchors) or 15 \
             (five strides, one anchor), YuNet has 12"
        )),
    }
}

/// The tensor `index`, which must hold `len` values for the canvas.
fn tensor<'a>(tensors: &[&'a [f32]], index: usize, len: usize) -> Result<&'a [f32], ModelError> {
    let values = tensors[index];
    if values.len() != len {
        return Err(ModelError::Inference(format!(
            "detector output {index} has {} values, and its stride's cells need {len}",
            values.len()
        )));
    }
    Ok(values)
}

fn decode_scrfd(
    tensors: &[&[f32]],
    strides: &[u32],
    anchors: usize,
    side: u32,
    min_score: f32,
) -> Result<Vec<Detection>, ModelError> {
    let levels = strides.len();
    let mut found = Vec::new();
    for (level, &stride) in strides.iter().enumerate() {
        let columns = (side / stride) as usize;
        let n = columns * columns * anchors;
        let scores = tensor(tensors, level, n)?;
        let boxes = tensor(tensors, level + levels, n * 4)?;
        let points = tensor(tensors, level + 2 * levels, n * 10)?;
        let s = stride as f32;
        for (i, &score) in scores.iter().enumerate().filter(|(_, score)| **score >= min_score) {
            let cell = i / anchors;
            let (cx, cy) = ((cell % columns) as f32 * s, (cell / columns) as f32 * s);
            let d = &boxes[i * 4..i * 4 + 4];
            let k = &points[i * 10..i * 10 + 10];
            found.push(Detection {
                bbox: [cx - d[0] * s, cy - d[1] * s, cx + d[2] * s, cy + d[3] * s],
                score,
                landmarks: std::array::from_fn(|j| [cx + k[2 * j] * s, cy + k[2 * j + 1] * s]),
            });
        }
    }
    Ok(found)
}

fn decode_yunet(tensors: &[&[f32]], side: u32, min_score: f32) -> Result<Vec<Detection>, ModelError> {
    let mut found = Vec::new();
    for (level, stride) in YUNET_STRIDES.into_iter().enumerate() {
        let columns = (side / stride) as usize;
        let n = columns * columns;
        let cls = tensor(tensors, level, n)?;
        let obj = tensor(tensors, level + 3, n)?;
        let boxes = tensor(tensors, level + 6, n * 4)?;
        let points = tensor(tensors, level + 9, n * 10)?;
        let s = stride as f32;
        for i in 0..n {
            let score = (cls[i].clamp(0.0, 1.0) * obj[i].clamp(0.0, 1.0)).sqrt();
            if score < min_score {
                continue;
            }
            let (column, row) = ((i % columns) as f32, (i / columns) as f32);
            let b = &boxes[i * 4..i * 4 + 4];
            let k = &points[i * 10..i * 10 + 10];
            let (cx, cy) = ((column + b[0]) * s, (row + b[1]) * s);
            let (w, h) = (b[2].exp() * s, b[3].exp() * s);
            found.push(Detection {
                bbox: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0],
                score,
                landmarks: std::array::from_fn(|j| [(k[2 * j] + column) * s, (k[2 * j + 1] + row) * s]),
            });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_apart_by_their_outputs() {
        let names = |n: usize| (0..n).map(|i| format!("out{i}")).collect::<Vec<_>>();
        assert_eq!(recognise(names(9)).unwrap().0, DetectorFormat::Scrfd { strides: vec![8, 16, 32], anchors: 2 });
        assert!(matches!(recognise(names(15)).unwrap().0, DetectorFormat::Scrfd { anchors: 1, .. }));
        assert!(recognise(names(6)).unwrap_err().contains("without landmarks"));
        assert!(recognise(names(7)).unwrap_err().contains("neither detector format"));
        // YuNet's outputs by name, whatever order the graph lists them in.
        let mut yunet: Vec<String> =
            ["kps", "bbox", "obj", "cls"].iter().flat_map(|kind| [8, 16, 32].map(|s| format!("{kind}_{s}"))).collect();
        yunet.reverse();
        let (format, order) = recognise(yunet).unwrap();
        assert_eq!(format, DetectorFormat::Yunet);
        assert_eq!(order[..4], ["cls_8", "cls_16", "cls_32", "obj_8"]);
    }

    #[test]
    fn scrfd_distances_are_in_strides_from_the_anchor_centre() {
        // A 32 x 32 canvas at stride 32 alone is one cell; anchor 1 of 2 scores.
        let (scores, boxes) = ([0.1, 0.9], [[0.0; 4], [0.25, 0.5, 1.0, 0.75]].concat());
        let points: Vec<f32> = (0..20).map(|i| i as f32 / 10.0).collect();
        let found = decode_scrfd(&[&scores, &boxes, &points], &[32], 2, 32, 0.5).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].bbox, [-8.0, -16.0, 32.0, 24.0]);
        assert_eq!(found[0].landmarks[0], [1.0 * 32.0, 1.1 * 32.0]);
    }

    #[test]
    fn yunet_scores_are_the_clamped_geometric_mean() {
        // One cell at stride 8 on an 8 x 8 canvas... YuNet always has three strides: 32 x 32 has
        // 16, 4 and 1 cells.
        let (n8, n16, n32) = (16, 4, 1);
        let mut cls = [vec![0.0; n8], vec![0.0; n16], vec![1.5; n32]];
        cls[0][5] = 0.81;
        let obj = [vec![1.0; n8], vec![1.0; n16], vec![-0.2; n32]];
        let boxes = [vec![0.0; n8 * 4], vec![0.0; n16 * 4], vec![0.0; n32 * 4]];
        let points = [vec![0.5; n8 * 10], vec![0.0; n16 * 10], vec![0.0; n32 * 10]];
        let tensors: Vec<&[f32]> = cls.iter().chain(&obj).chain(&boxes).chain(&points).map(|v| &v[..]).collect();
        let found = decode_yunet(&tensors, 32, 0.5).unwrap();
        assert_eq!(found.len(), 1, "the stride-32 cell's obj clamps to 0");
        let face = &found[0];
        assert!((face.score - 0.9).abs() < 1e-6);
        // Cell 5 of 4 x 4 is column 1, row 1: centre (8, 8), exp(0) * 8 = 8 wide.
        assert_eq!(face.bbox, [4.0, 4.0, 12.0, 12.0]);
        assert_eq!(face.landmarks[4], [12.0, 12.0]);
    }
}
