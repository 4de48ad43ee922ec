//! YuNet (OpenCV Zoo), decoded as OpenCV's `FaceDetectorYN`: BGR, raw 0-255, on the top-left
//! canvas; 12 outputs, `cls`, `obj`, `bbox` and `kps` for strides 8/16/32, one anchor a cell; the
//! score is `sqrt(cls · obj)`, each clamped to [0, 1]; boxes from the cell offset and exp'd sizes.

use super::{
    Detection,
    detector::{PixelLayout, tensor},
};
use crate::model::ModelError;

pub(super) const PIXELS: PixelLayout = PixelLayout { order: [2, 1, 0], offset: 0.0, scale: 1.0 };
/// OpenCV's default IoU, over plain boxes.
pub(super) const IOU: f32 = 0.3;
pub(super) const STRIDES: [u32; 3] = [8, 16, 32];

/// The candidates scoring at least `min_score`, in canvas pixels.
pub(super) fn decode(tensors: &[&[f32]], side: u32, min_score: f32) -> Result<Vec<Detection>, ModelError> {
    let mut found = Vec::new();
    for (level, stride) in STRIDES.into_iter().enumerate() {
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
    fn yunet_scores_are_the_clamped_geometric_mean() {
        // YuNet always has three strides: a 32 x 32 canvas has 16, 4 and 1 cells.
        let (n8, n16, n32) = (16, 4, 1);
        let mut cls = [vec![0.0; n8], vec![0.0; n16], vec![1.5; n32]];
        cls[0][5] = 0.81;
        let obj = [vec![1.0; n8], vec![1.0; n16], vec![-0.2; n32]];
        let boxes = [vec![0.0; n8 * 4], vec![0.0; n16 * 4], vec![0.0; n32 * 4]];
        let points = [vec![0.5; n8 * 10], vec![0.0; n16 * 10], vec![0.0; n32 * 10]];
        let tensors: Vec<&[f32]> = cls.iter().chain(&obj).chain(&boxes).chain(&points).map(|v| &v[..]).collect();
        let found = decode(&tensors, 32, 0.5).unwrap();
        assert_eq!(found.len(), 1, "the stride-32 cell's obj clamps to 0");
        let face = &found[0];
        assert!((face.score - 0.9).abs() < 1e-6);
        // Cell 5 of 4 x 4 is column 1, row 1: centre (8, 8), exp(0) * 8 = 8 wide.
        assert_eq!(face.bbox, [4.0, 4.0, 12.0, 12.0]);
        assert_eq!(face.landmarks[4], [12.0, 12.0]);
    }
}
