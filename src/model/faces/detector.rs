//! The face detector tower: one canvas at a time (the packs' detectors take a batch of one), its
//! outputs decoded as their format says, then non-maximum suppression. A format is how it takes the
//! canvas and how its outputs decode, one file each; formats are told apart by their outputs:
//!
//! - `scrfd`: InsightFace's SCRFD, 9 or 15 outputs;
//! - `yunet`: OpenCV Zoo's YuNet, 12;
//! - `yolov5_face`: deepcam-cn's YOLOv5-face, one `[1, N, 16]`, the one on a centred grey canvas.

use super::{Detection, nms::suppress, refuse, scrfd, square_side, yolov5_face, yunet};
use crate::{
    model::{Canvases, Graph, ModelData, ModelError, Runtime, Shapes, Tower, TowerInfo},
    preprocess::{CanvasLayout, FaceCanvas, Letterbox},
    settings::{Device, FaceSettings, ModelSettings},
};

/// The canvas side of detectors whose input size is dynamic where CLIPFN_FACE_DET_SIZE is unset
/// (Immich's and InsightFace's default).
const DEFAULT_SIDE: u32 = 640;
/// The default minimum score of SCRFD and YuNet: Immich's.
const IMMICH_MIN_SCORE: f32 = 0.7;
/// Candidates kept for suppression, best first (OpenCV's `top_k`): a noise photo can pass the score
/// threshold at every anchor, and suppression is quadratic.
const MAX_CANDIDATES: usize = 5000;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum DetectorFormat {
    Scrfd { strides: Vec<u32>, anchors: usize },
    Yunet,
    Yolov5Face,
}

/// How a format takes the canvas's bytes: its channels in this order, each `(p - offset) * scale`.
pub(super) struct PixelLayout {
    pub order: [usize; 3],
    pub offset: f32,
    pub scale: f32,
}

impl DetectorFormat {
    fn name(&self) -> &'static str {
        match self {
            DetectorFormat::Scrfd { .. } => "SCRFD",
            DetectorFormat::Yunet => "YuNet",
            DetectorFormat::Yolov5Face => "YOLOv5-face",
        }
    }

    fn letterbox(&self) -> Letterbox {
        match self {
            DetectorFormat::Scrfd { .. } | DetectorFormat::Yunet => Letterbox::TopLeft,
            DetectorFormat::Yolov5Face => Letterbox::Centred,
        }
    }

    fn pixels(&self) -> PixelLayout {
        match self {
            DetectorFormat::Scrfd { .. } => scrfd::PIXELS,
            DetectorFormat::Yunet => yunet::PIXELS,
            DetectorFormat::Yolov5Face => yolov5_face::PIXELS,
        }
    }

    /// The minimum score where CLIPFN_FACE_MIN_SCORE is unset: the one its authors' code uses.
    pub fn default_min_score(&self) -> f32 {
        match self {
            DetectorFormat::Scrfd { .. } | DetectorFormat::Yunet => IMMICH_MIN_SCORE,
            DetectorFormat::Yolov5Face => yolov5_face::DEFAULT_MIN_SCORE,
        }
    }

    /// The faces on a `side` canvas scoring at least `min_score` in the outputs `tensors`, and the
    /// IoU and pixel convention (`+ 1`) their suppression takes.
    fn decode(&self, tensors: &[&[f32]], side: u32, min_score: f32) -> Result<(Vec<Detection>, f32, bool), ModelError> {
        Ok(match self {
            DetectorFormat::Scrfd { strides, anchors } => {
                (scrfd::decode(tensors, strides, *anchors, side, min_score)?, scrfd::IOU, true)
            }
            DetectorFormat::Yunet => (yunet::decode(tensors, side, min_score)?, yunet::IOU, false),
            DetectorFormat::Yolov5Face => (yolov5_face::decode(tensors[0], min_score)?, yolov5_face::IOU, false),
        })
    }
}

/// What the rest of the service is told about the detector.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DetectorInfo {
    /// Where the face towers run (CLIPFN_FACE_PROVIDER).
    pub provider: Device,
    pub file: String,
    #[serde(flatten)]
    pub format: DetectorFormat,
    /// The canvas side it takes.
    pub side: u32,
    /// The detector's graph, or CLIPFN_FACE_DET_SIZE (or its default) where the graph's is dynamic.
    pub side_from: &'static str,
    /// A request's minimum score when it names none.
    pub min_score: f32,
    /// CLIPFN_FACE_MIN_SCORE, or the format's default.
    pub min_score_from: &'static str,
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

impl DetectorInfo {
    /// The canvas the decode threads make for it.
    pub fn canvas(&self) -> CanvasLayout {
        CanvasLayout { side: self.side, letterbox: self.format.letterbox() }
    }
}

impl TowerInfo for DetectorInfo {
    fn batch_size(&self) -> usize {
        1
    }
}

pub struct FaceDetector {
    /// Its shapes: one, a canvas at a time, of one side.
    graph: Graph,
    /// In the order the format's decoder reads them.
    outputs: Vec<String>,
    pub info: DetectorInfo,
    /// The input tensor, kept from canvas to canvas.
    pixels: Vec<f32>,
}

impl FaceDetector {
    pub(super) fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        file: String,
        faces: &FaceSettings,
    ) -> Result<Self, ModelError> {
        // The shape is known once the graph is read: declared below.
        let mut graph = Graph::open(runtime, &settings.with_cpu_arena(), data, Shapes::new([]))
            .map_err(|why| refuse("detector", &file, why))?;
        let (side, side_from) =
            canvas_side(graph.input_shape(), faces.face_det_size).map_err(|why| refuse("detector", &file, why))?;
        let (format, outputs) = recognise(graph.outputs.clone()).map_err(|why| refuse("detector", &file, why))?;
        let (min_score, min_score_from, score_floor) =
            scores(&format, faces).map_err(|why| refuse("detector", &file, why))?;
        let info = DetectorInfo {
            provider: runtime.device(),
            file,
            format,
            side,
            side_from,
            min_score,
            min_score_from,
            score_floor,
            max_faces: faces.max_faces,
        };
        let pixels = vec![0.0; 3 * (side * side) as usize];
        graph.shapes = Shapes::new([vec![1, 3, i64::from(side), i64::from(side)]]);
        let mut detector = FaceDetector { graph, outputs, info, pixels };
        detector.check().map_err(|e| refuse("detector", &detector.info.file, format!("the warm-up failed: {e}")))?;
        Ok(detector)
    }

    /// The canvas as the format takes it: NCHW floats.
    fn lay_out(&mut self, canvas: &FaceCanvas) {
        let plane = (self.info.side * self.info.side) as usize;
        let PixelLayout { order, offset, scale } = self.info.format.pixels();
        for (i, px) in canvas.image.as_raw().chunks_exact(3).enumerate() {
            for (plane_index, &channel) in order.iter().enumerate() {
                self.pixels[plane_index * plane + i] = (f32::from(px[channel]) - offset) * scale;
            }
        }
    }

    fn detect(&mut self, canvas: &FaceCanvas) -> Result<Detections, ModelError> {
        self.lay_out(canvas);
        let (side, info, names) = (i64::from(self.info.side), &self.info, &self.outputs);
        let (mut found, iou, plus_one) = self.graph.run_with([1, 3, side, side], &self.pixels, |outputs| {
            let mut tensors = Vec::with_capacity(names.len());
            for name in names {
                let (_, values) = outputs[name.as_str()].try_extract_tensor::<f32>().map_err(ModelError::inference)?;
                tensors.push(values);
            }
            info.format.decode(&tensors, info.side, info.score_floor)
        })?;
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
        let image = image::RgbImage::new(side, side).into();
        let canvas = FaceCanvas { image, scale: 1.0, offset: [0.0; 2], full_size: (side, side), photo: None };
        self.detect(&canvas).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.graph.shapes
    }
}

/// The format of a detector with these outputs (names and shapes), and its outputs in the
/// decoder's order.
fn recognise(outputs: Vec<(String, Option<Vec<i64>>)>) -> Result<(DetectorFormat, Vec<String>), String> {
    if let [(name, shape)] = &outputs[..] {
        return match shape.as_deref() {
            Some([.., last]) if *last == yolov5_face::ROW as i64 => {
                Ok((DetectorFormat::Yolov5Face, vec![name.clone()]))
            }
            _ => Err(format!(
                "has one output, shaped {shape:?}, which matches no detector format: YOLOv5-face's is [1, N, 16] \
                 (an export with its decoding in the graph, export.py's export_cat)"
            )),
        };
    }
    let names: Vec<String> = outputs.into_iter().map(|(name, _)| name).collect();
    match names.len() {
        9 => Ok((DetectorFormat::Scrfd { strides: vec![8, 16, 32], anchors: 2 }, names)),
        15 => Ok((DetectorFormat::Scrfd { strides: vec![8, 16, 32, 64, 128], anchors: 1 }, names)),
        12 => {
            // By name where the export kept OpenCV Zoo's (cls_8 ... kps_32), else in that order.
            let wanted = ["cls", "obj", "bbox", "kps"]
                .iter()
                .flat_map(|kind| yunet::STRIDES.map(|stride| format!("{kind}_{stride}")));
            let by_name: Option<Vec<String>> = wanted.map(|name| names.contains(&name).then_some(name)).collect();
            Ok((DetectorFormat::Yunet, by_name.unwrap_or(names)))
        }
        6 | 10 => Err(format!(
            "is an SCRFD export without landmarks ({} outputs); faces are aligned by their five landmarks, so \
             use an export with them (9 or 15 outputs, as InsightFace's packs have)",
            names.len()
        )),
        n => Err(format!(
            "has {n} outputs, which matches no detector format: SCRFD has 9 (three strides, two anchors) or 15 \
             (five strides, one anchor), YuNet has 12, YOLOv5-face one [1, N, 16]"
        )),
    }
}

/// The canvas side and where it came from: the graph's where it fixes one, else `asked`
/// (CLIPFN_FACE_DET_SIZE) or 640; a side asked of a graph that fixes another is refused.
fn canvas_side(shape: Option<&[i64]>, asked: Option<u32>) -> Result<(u32, &'static str), String> {
    let not_square = || format!("takes {shape:?}, not a square [1, 3, S, S] image");
    // 0 stands for dynamic: a fixed side is positive.
    match (square_side(shape, 0).ok_or_else(not_square)?, asked) {
        (0, Some(asked)) => Ok((asked, "CLIPFN_FACE_DET_SIZE")),
        (0, None) => Ok((DEFAULT_SIDE, "the default for a dynamic input")),
        (fixed, Some(asked)) if asked != fixed => Err(format!(
            "its graph fixes a {fixed} x {fixed} input, and CLIPFN_FACE_DET_SIZE asks {asked}: unset it, or export \
             the detector with a dynamic input size"
        )),
        (fixed, _) => Ok((fixed, "the detector's graph")),
    }
}

/// The minimum score in force, where it came from, and the floor: CLIPFN_FACE_MIN_SCORE or the
/// format's default; CLIPFN_FACE_SCORE_FLOOR or that minimum. A floor above the minimum is refused
/// here where the minimum is the format's (settings check it against CLIPFN_FACE_MIN_SCORE).
fn scores(format: &DetectorFormat, faces: &FaceSettings) -> Result<(f32, &'static str, f32), String> {
    let (min_score, from) = match faces.face_min_score {
        Some(score) => (score, "CLIPFN_FACE_MIN_SCORE"),
        None => (format.default_min_score(), "the detector format's default"),
    };
    let floor = faces.face_score_floor.unwrap_or(min_score);
    if floor > min_score {
        return Err(format!(
            "CLIPFN_FACE_SCORE_FLOOR {floor} is above {}'s default minimum score {min_score}: set \
             CLIPFN_FACE_MIN_SCORE too",
            format.name()
        ));
    }
    Ok((min_score, from, floor))
}

/// The tensor `index`, which must hold `len` values for the canvas.
pub(super) fn tensor<'a>(tensors: &[&'a [f32]], index: usize, len: usize) -> Result<&'a [f32], ModelError> {
    let values = tensors[index];
    if values.len() != len {
        return Err(ModelError::Inference(format!(
            "detector output {index} has {} values, and its stride's cells need {len}",
            values.len()
        )));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_apart_by_their_outputs() {
        let names = |n: usize| (0..n).map(|i| (format!("out{i}"), Some(vec![1, 100, 4]))).collect::<Vec<_>>();
        assert_eq!(recognise(names(9)).unwrap().0, DetectorFormat::Scrfd { strides: vec![8, 16, 32], anchors: 2 });
        assert!(matches!(recognise(names(15)).unwrap().0, DetectorFormat::Scrfd { anchors: 1, .. }));
        assert!(recognise(names(6)).unwrap_err().contains("without landmarks"));
        assert!(recognise(names(7)).unwrap_err().contains("no detector format"));
        // YuNet's outputs by name, whatever order the graph lists them in.
        let mut yunet: Vec<(String, Option<Vec<i64>>)> = ["kps", "bbox", "obj", "cls"]
            .iter()
            .flat_map(|kind| [8, 16, 32].map(|s| (format!("{kind}_{s}"), None)))
            .collect();
        yunet.reverse();
        let (format, order) = recognise(yunet).unwrap();
        assert_eq!(format, DetectorFormat::Yunet);
        assert_eq!(order[..4], ["cls_8", "cls_16", "cls_32", "obj_8"]);
        // YOLOv5-face: one output, rows of 16, however many (a dynamic export's are unknown).
        let one = |shape: Option<Vec<i64>>| recognise(vec![("output".to_string(), shape)]);
        assert_eq!(one(Some(vec![1, 25200, 16])).unwrap(), (DetectorFormat::Yolov5Face, vec!["output".to_string()]));
        assert_eq!(one(Some(vec![-1, -1, 16])).unwrap().0, DetectorFormat::Yolov5Face);
        assert!(one(Some(vec![1, 25200, 85])).unwrap_err().contains("[1, N, 16]"));
        assert!(one(None).is_err());
    }

    #[test]
    fn the_canvas_side_is_a_fixed_graphs_else_the_settings_else_640() {
        let (fixed, dynamic) = (Some(&[1, 3, 640, 640][..]), Some(&[1, 3, -1, -1][..]));
        assert_eq!(canvas_side(fixed, None), Ok((640, "the detector's graph")));
        assert_eq!(canvas_side(fixed, Some(640)), Ok((640, "the detector's graph")));
        assert!(
            canvas_side(fixed, Some(320))
                .unwrap_err()
                .contains("fixes a 640 x 640 input, and CLIPFN_FACE_DET_SIZE asks 320")
        );
        assert_eq!(canvas_side(dynamic, Some(320)), Ok((320, "CLIPFN_FACE_DET_SIZE")));
        assert_eq!(canvas_side(dynamic, None), Ok((640, "the default for a dynamic input")));
        assert!(canvas_side(Some(&[1, 3, 480, 640]), None).unwrap_err().contains("not a square"));
    }

    #[test]
    fn the_minimum_score_is_the_settings_or_the_formats_and_the_floor_not_above_it() {
        let faces = |min: Option<f32>, floor: Option<f32>| FaceSettings {
            face_min_score: min,
            face_score_floor: floor,
            ..serde_json::from_str("{}").unwrap()
        };
        let yolo = DetectorFormat::Yolov5Face;
        assert_eq!(scores(&yolo, &faces(None, None)).unwrap(), (0.6, "the detector format's default", 0.6));
        assert_eq!(scores(&yolo, &faces(None, Some(0.3))).unwrap().2, 0.3);
        assert_eq!(scores(&yolo, &faces(Some(0.8), None)).unwrap(), (0.8, "CLIPFN_FACE_MIN_SCORE", 0.8));
        // 0.65 suits SCRFD's 0.7, not YOLOv5-face's 0.6.
        assert_eq!(scores(&DetectorFormat::Yunet, &faces(None, Some(0.65))).unwrap().0, 0.7);
        assert!(
            scores(&yolo, &faces(None, Some(0.65))).unwrap_err().contains("YOLOv5-face's default minimum score 0.6")
        );
    }

    #[test]
    fn only_yolov5_face_takes_the_centred_canvas_and_its_own_minimum() {
        let scrfd = DetectorFormat::Scrfd { strides: vec![8, 16, 32], anchors: 2 };
        assert_eq!((scrfd.letterbox(), scrfd.default_min_score()), (Letterbox::TopLeft, 0.7));
        assert_eq!(
            (DetectorFormat::Yunet.letterbox(), DetectorFormat::Yunet.default_min_score()),
            (Letterbox::TopLeft, 0.7)
        );
        let yolo = DetectorFormat::Yolov5Face;
        assert_eq!((yolo.letterbox(), yolo.default_min_score()), (Letterbox::Centred, 0.6));
    }
}
