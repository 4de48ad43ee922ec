//! YOLOv5-face (deepcam-cn/yolov5-face exported by its `export.py`, whose `Detect` layer then
//! decodes in the graph: `export_cat`), read as its `detect_face.py` and `torch2trt/main.py` do:
//! RGB `p / 255` on the centred grey letterbox (`letterbox(..., auto=False)`: the fixed input);
//! one output `[1, N, 16]`, a row per anchor of every stride: box centre x, y, width, height,
//! objectness, five landmarks (x, y), the face class's score, all in canvas pixels and
//! probabilities already. The score is objectness × class score (`non_max_suppression_face`).

use super::{Detection, detector::PixelLayout};
use crate::model::ModelError;

pub(super) const PIXELS: PixelLayout = PixelLayout { order: [0, 1, 2], offset: 0.0, scale: 1.0 / 255.0 };
/// `detect_face.py`'s `iou_thres`, over plain boxes (torchvision's `nms`).
pub(super) const IOU: f32 = 0.5;
/// `detect_face.py`'s `conf_thres`.
pub(super) const DEFAULT_MIN_SCORE: f32 = 0.6;
/// The values of one row: the last dimension that tells the format.
pub(super) const ROW: usize = 16;

/// The candidates scoring at least `min_score`, in canvas pixels.
pub(super) fn decode(rows: &[f32], min_score: f32) -> Result<Vec<Detection>, ModelError> {
    if !rows.len().is_multiple_of(ROW) {
        return Err(ModelError::Inference(format!("detector output has {} values, not rows of {ROW}", rows.len())));
    }
    let found = rows.chunks_exact(ROW).filter_map(|row| {
        let score = row[4] * row[15];
        (score >= min_score).then(|| {
            let (cx, cy, half_width, half_height) = (row[0], row[1], row[2] / 2.0, row[3] / 2.0);
            Detection {
                bbox: [cx - half_width, cy - half_height, cx + half_width, cy + half_height],
                score,
                landmarks: std::array::from_fn(|j| [row[5 + 2 * j], row[6 + 2 * j]]),
            }
        })
    });
    Ok(found.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_centre_and_size_and_the_score_is_objectness_times_class() {
        let face: Vec<f32> =
            [100.0, 50.0, 40.0, 60.0, 0.8].into_iter().chain((0..10).map(|i| 90.0 + i as f32)).chain([0.9]).collect();
        // Objectness 0.95 alone would pass; times its class score 0.5 it does not.
        let weak: Vec<f32> = [&[0.0; 4][..], &[0.95], &[0.0; 10], &[0.5]].concat();
        let found = decode(&[face, weak].concat(), 0.6).unwrap();
        assert_eq!(found.len(), 1);
        assert!((found[0].score - 0.72).abs() < 1e-6);
        assert_eq!(found[0].bbox, [80.0, 20.0, 120.0, 80.0]);
        assert_eq!((found[0].landmarks[0], found[0].landmarks[4]), ([90.0, 91.0], [98.0, 99.0]));
        assert!(decode(&[0.0; 17], 0.6).is_err());
    }
}
