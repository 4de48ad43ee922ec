//! The object detector (`CLIPFN_OBJECT_MODEL`): one more tower on the model worker, from a folder
//! holding `model.onnx` and optionally `classes.txt` (one class name a line; COCO's 80, in
//! `coco.txt`, when there is none). Two formats, told apart by the graph's input and outputs
//! (`format`):
//!
//! - `centernet`: Human's MobileNetV3 CenterNet as tools/centernet_onnx.py converts it: rows
//!   (NHWC) `[1, S, S, 3]` of 0-255, the photo stretched to the square; an output `[1, K, 6]` of
//!   `x1, y1, x2, y2, score, class` in input pixels. Human's end: greedy suppression over every
//!   class at IoU 0.4 (`centernet`).
//! - `yolo`: ultralytics' YOLOv8 / YOLO11 export: planes (NCHW) `[N, 3, S, S]` of RGB / 255, the
//!   photo letterboxed on grey; one output `[N, 4 + classes, anchors]` of `cx, cy, w, h` in input
//!   pixels, then each class's score. ultralytics' end: each anchor's best class, suppression per
//!   class at IoU 0.7 (`yolo`).
//!
//! Both then drop what scores under CLIPFN_OBJECT_MIN_SCORE and keep the best CLIPFN_MAX_OBJECTS.
//! The view is made on the decode threads (`preprocess::objects`); the tower lays out its batch,
//! runs the graph and reads the boxes, in view pixels.

mod centernet;
mod format;
mod yolo;

use std::sync::Arc;

pub use self::format::ObjectFormat;
use super::{Buckets, Graph, ModelData, ModelError, ObjectViews, Runtime, Shapes, Tower, TowerInfo};
use crate::{
    preprocess::{ObjectLayout, ObjectView, Placed},
    settings::{Device, ModelSettings, ObjectSettings},
};

/// COCO's 80 class names, as Human's `labels.ts` and ultralytics name them.
const COCO: &str = include_str!("coco.txt");

/// One object found on a view: its class, its score and its box `[x1, y1, x2, y2]` in view pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub class: usize,
    pub score: f32,
    pub bbox: [f32; 4],
}

/// What the rest of the service is told about the object detector (/readyz).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ObjectInfo {
    pub file: String,
    pub format: ObjectFormat,
    /// How the photo is placed on the detector's square input.
    pub layout: ObjectLayout,
    /// The class names, class index `i` at `i`.
    #[serde(skip)]
    pub labels: Arc<[String]>,
    pub classes: usize,
    /// Where its class names came from: the folder's `classes.txt`, or COCO's.
    pub labels_from: String,
    /// Where it runs (CLIPFN_OBJECT_PROVIDER).
    pub provider: Device,
    /// The score an object needs (CLIPFN_OBJECT_MIN_SCORE).
    pub min_score: f32,
    /// The most objects a photo answers (CLIPFN_MAX_OBJECTS).
    pub max_objects: usize,
    /// The classes that are pets (CLIPFN_PET_LABELS), by index.
    #[serde(skip)]
    pub pets: Vec<usize>,
    /// Their names.
    pub pet_labels: Vec<String>,
    /// A pet's box's short side at least, in the photo's pixels (CLIPFN_PET_MIN_SIZE).
    pub pet_min_size: u32,
    pub batch_size: usize,
}

impl TowerInfo for ObjectInfo {
    fn batch_size(&self) -> usize {
        self.batch_size
    }
}

/// The files of an object model folder, read for loading: each with where it came from.
pub struct ObjectFiles {
    pub model: (String, ModelData),
    /// `classes.txt`, when the folder has one.
    pub classes: Option<(String, String)>,
}

pub struct ObjectDetector {
    graph: Graph,
    buckets: Buckets,
    /// The output the boxes are read from.
    output: usize,
    pub info: ObjectInfo,
}

/// A model file's refusal, naming it.
fn refuse(file: &str, why: impl std::fmt::Display) -> ModelError {
    ModelError::Load(format!("object model {file}: {why}"))
}

impl ObjectDetector {
    /// The detector in `files`, its format read from its graph; refused, naming the file, when it
    /// fits neither format or its class names do not match its classes. A graph with a batch
    /// dimension runs up to `batch_size` views together.
    pub fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        files: ObjectFiles,
        objects: &ObjectSettings,
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        let (file, data) = files.model;
        // The shapes are known once the graph is read: declared below.
        let graph =
            Graph::open(runtime, &settings.with_cpu_arena(), &data, Shapes::new([])).map_err(|e| refuse(&file, e))?;
        let read = format::read(&graph).map_err(|e| refuse(&file, e))?;
        let (labels, labels_from) = match files.classes {
            Some((location, text)) => (text.lines().map(str::trim).map(String::from).collect::<Vec<_>>(), location),
            None => (COCO.lines().map(String::from).collect(), "COCO's 80 (no classes.txt)".to_string()),
        };
        let labels: Vec<String> = labels.into_iter().filter(|name| !name.is_empty()).collect();
        if let Some(classes) = read.classes.filter(|&classes| classes != labels.len()) {
            return Err(refuse(
                &file,
                format!("{labels_from} names {} classes, the model has {classes}", labels.len()),
            ));
        }
        let (named, explicit) = objects.pet_labels();
        let mut pets = Vec::new();
        for name in named {
            match labels.iter().position(|label| label == name) {
                Some(class) => pets.push(class),
                None if explicit => {
                    return Err(refuse(
                        &file,
                        format!("CLIPFN_PET_LABELS names '{name}', which is none of its classes"),
                    ));
                }
                None => {}
            }
        }
        let pet_labels = pets.iter().map(|&class| labels[class].clone()).collect();
        let max_batch = read.batch.unwrap_or(batch_size);
        let buckets = Buckets::powers_of_two(max_batch, settings.fill(runtime.device()));
        let side = i64::from(read.layout.side());
        let dims = if read.format.channels_last() { [side, side, 3] } else { [3, side, side] };
        let mut graph = graph;
        graph.shapes = Shapes::batches(&buckets, &dims);
        let mut detector = ObjectDetector {
            graph,
            buckets,
            output: read.output,
            info: ObjectInfo {
                file,
                format: read.format,
                layout: read.layout,
                classes: labels.len(),
                labels: labels.into(),
                labels_from,
                provider: runtime.device(),
                min_score: objects.object_min_score,
                max_objects: objects.max_objects,
                pets,
                pet_labels,
                pet_min_size: objects.pet_min_size,
                batch_size: max_batch,
            },
        };
        let every = detector.graph.warms_every_shape;
        detector.warm_up(every).map_err(|e| refuse(&detector.info.file, format!("the warm-up failed: {e}")))?;
        Ok(detector)
    }

    /// `views` laid out as the graph takes them: rows of 0-255 (CenterNet), or planes of 0-1 (YOLO).
    fn lay_out(&self, views: &[&ObjectView]) -> Vec<f32> {
        if self.info.format.channels_last() {
            return views.iter().flat_map(|view| view.pixels.iter().copied()).collect();
        }
        let mut batch = Vec::with_capacity(views.iter().map(|view| view.pixels.len()).sum());
        for view in views {
            for channel in 0..3 {
                batch.extend(view.pixels.iter().skip(channel).step_by(3).map(|value| value / 255.0));
            }
        }
        batch
    }
}

/// Views in, each one's objects out, best first.
impl Tower for ObjectDetector {
    type Io = ObjectViews;

    fn info(&self) -> &ObjectInfo {
        &self.info
    }

    fn run(&mut self, views: &[&ObjectView]) -> Result<Vec<Vec<Found>>, ModelError> {
        let side = i64::from(self.info.layout.side());
        let n = views.len() as i64;
        let shape = if self.info.format.channels_last() { [n, side, side, 3] } else { [n, 3, side, side] };
        let batch = self.lay_out(views);
        let output = self.graph.run(shape, &batch, self.output)?;
        let min_score = self.info.min_score;
        match self.info.format {
            ObjectFormat::CenterNet => centernet::objects(output, views.len(), min_score),
            ObjectFormat::Yolo => yolo::objects(output, views.len(), self.info.classes, min_score),
        }
    }

    fn check(&mut self) -> Result<(), ModelError> {
        let filler = self.filler();
        self.run(&[&filler]).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.graph.shapes
    }

    fn batching(&self) -> Option<(&Buckets, ObjectView)> {
        Some((&self.buckets, self.filler()))
    }
}

impl ObjectDetector {
    /// A grey view: the warm-up input, and the padding of a batch.
    fn filler(&self) -> ObjectView {
        let side = self.info.layout.side();
        let placed = Placed { scale: [1.0; 2], offset: [0.0; 2], full_size: (side, side) };
        ObjectView { pixels: vec![114.0; (side * side * 3) as usize], placed, photo: None }
    }
}

/// The best of `found` by score, each next one kept unless its IoU with one kept already is at
/// least `iou` (with `per_class`, only boxes of one class compete). Every one: the pipeline keeps
/// CLIPFN_MAX_OBJECTS of them and says how many it left out.
fn suppress(mut found: Vec<Found>, iou: f32, per_class: bool) -> Vec<Found> {
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    let area = |b: &[f32; 4]| (b[2] - b[0]).max(0.0) * (b[3] - b[1]).max(0.0);
    let overlap = |a: &[f32; 4], b: &[f32; 4]| {
        let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
        let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
        let inter = w * h;
        let union = area(a) + area(b) - inter;
        if union > 0.0 { inter / union } else { 0.0 }
    };
    let mut kept: Vec<Found> = Vec::new();
    for candidate in found {
        let beaten =
            kept.iter().any(|k| (!per_class || k.class == candidate.class) && overlap(&k.bbox, &candidate.bbox) >= iou);
        if !beaten {
            kept.push(candidate);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(class: usize, score: f32, bbox: [f32; 4]) -> Found {
        Found { class, score, bbox }
    }

    #[test]
    fn suppression_keeps_the_best_of_overlapping_boxes() {
        let boxes = vec![
            found(0, 0.5, [0.0, 0.0, 10.0, 10.0]),
            found(1, 0.9, [1.0, 1.0, 10.0, 10.0]),
            found(0, 0.7, [50.0, 50.0, 60.0, 60.0]),
        ];
        let across = suppress(boxes.clone(), 0.4, false);
        assert_eq!(across.iter().map(|f| f.score).collect::<Vec<_>>(), [0.9, 0.7]);
        let per_class = suppress(boxes.clone(), 0.4, true);
        assert_eq!(per_class.iter().map(|f| f.score).collect::<Vec<_>>(), [0.9, 0.7, 0.5], "a cat does not hide a dog");
    }

    #[test]
    fn coco_has_80_classes_with_cats_and_dogs_where_coco_puts_them() {
        let names: Vec<&str> = COCO.lines().collect();
        assert_eq!(names.len(), 80);
        assert_eq!((names[0], names[15], names[16]), ("person", "cat", "dog"));
    }
}
