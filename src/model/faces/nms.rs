//! Greedy non-maximum suppression, as both detector formats end: the best face first, then each
//! next face that overlaps none kept by more than the IoU threshold.
//!
//! InsightFace's SCRFD compares boxes in full-photo pixels with the `+ 1` pixel convention (a box
//! from 0 to 9 is 10 wide); OpenCV's YuNet without it. The overlap is measured as theirs, on the
//! boxes scaled back by `scale` (canvas pixels per photo pixel), so that the same faces survive.

use super::Detection;

/// `found`'s faces that survive, best first.
pub fn suppress(mut found: Vec<Detection>, iou: f32, plus_one: bool, scale: f32) -> Vec<Detection> {
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    let pad = if plus_one { 1.0 } else { 0.0 };
    let area = |b: &[f32; 4]| (b[2] - b[0] + pad).max(0.0) * (b[3] - b[1] + pad).max(0.0);
    let mut kept: Vec<(Detection, [f32; 4])> = Vec::new();
    for face in found {
        let scaled = face.bbox.map(|v| v / scale);
        let overlaps = kept.iter().any(|(_, other)| {
            let w = (scaled[2].min(other[2]) - scaled[0].max(other[0]) + pad).max(0.0);
            let h = (scaled[3].min(other[3]) - scaled[1].max(other[1]) + pad).max(0.0);
            let inter = w * h;
            inter / (area(&scaled) + area(other) - inter) > iou
        });
        if !overlaps {
            kept.push((face, scaled));
        }
    }
    kept.into_iter().map(|(face, _)| face).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn face(bbox: [f32; 4], score: f32) -> Detection {
        Detection { bbox, score, landmarks: [[0.0; 2]; 5] }
    }

    #[test]
    fn keeps_the_best_of_overlapping_faces_and_every_apart_one() {
        let found = vec![face([0.0, 0.0, 10.0, 10.0], 0.8), face([1.0, 1.0, 11.0, 11.0], 0.9), face([50.0; 4], 0.7)];
        let kept = suppress(found, 0.4, false, 1.0);
        assert_eq!(kept.iter().map(|f| f.score).collect::<Vec<_>>(), [0.9, 0.7]);
    }

    #[test]
    fn the_plus_one_convention_and_the_scale_change_the_overlap() {
        // Two 2 x 2 boxes sharing one column: IoU 2/6 = 0.33 plain, 6/12 = 0.5 with + 1.
        let pair = || vec![face([0.0, 0.0, 2.0, 2.0], 0.9), face([1.0, 0.0, 3.0, 2.0], 0.8)];
        assert_eq!(suppress(pair(), 0.4, false, 1.0).len(), 2);
        assert_eq!(suppress(pair(), 0.4, true, 1.0).len(), 1);
        // Scaled back from a quarter, they are 8 wide: IoU 45/117 = 0.38 with + 1.
        assert_eq!(suppress(pair(), 0.4, true, 0.25).len(), 2);
    }
}
