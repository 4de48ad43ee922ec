//! SCRFD (InsightFace's `det_10g`, `det_2.5g`, `det_500m`), decoded as its `scrfd.py` does: RGB
//! `(p - 127.5) / 128` on the top-left canvas; 9 outputs (scores, boxes, landmarks for strides
//! 8/16/32, two anchors a cell) or 15 (five strides to 128, one anchor). Each is a distance from
//! the anchor's centre `(x·s, y·s)`, in strides. Exports without landmarks (6 or 10 outputs) are
//! refused: faces are aligned by their landmarks for the recognizer.

use super::{
    Detection,
    detector::{PixelLayout, tensor},
};
use crate::model::ModelError;

pub(super) const PIXELS: PixelLayout = PixelLayout { order: [0, 1, 2], offset: 127.5, scale: 1.0 / 128.0 };
/// InsightFace's IoU, over boxes with the `+ 1` pixel convention.
pub(super) const IOU: f32 = 0.4;

/// The candidates scoring at least `min_score`, in canvas pixels.
pub(super) fn decode(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrfd_distances_are_in_strides_from_the_anchor_centre() {
        // A 32 x 32 canvas at stride 32 alone is one cell; anchor 1 of 2 scores.
        let (scores, boxes) = ([0.1, 0.9], [[0.0; 4], [0.25, 0.5, 1.0, 0.75]].concat());
        let points: Vec<f32> = (0..20).map(|i| i as f32 / 10.0).collect();
        let found = decode(&[&scores, &boxes, &points], &[32], 2, 32, 0.5).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].bbox, [-8.0, -16.0, 32.0, 24.0]);
        assert_eq!(found[0].landmarks[0], [1.0 * 32.0, 1.1 * 32.0]);
    }
}
