//! YOLO's end, as ultralytics' `non_max_suppression` ends an export's output `[N, 4 + classes,
//! anchors]`: each anchor's best class and its score, its box from `cx, cy, w, h` in input pixels,
//! suppressed per class at IoU 0.7 (ultralytics' `iou` default).

use super::{Found, suppress};
use crate::model::ModelError;

/// ultralytics' default `iou`.
const IOU: f32 = 0.7;

/// Each view's objects from the output of `views` views of a `classes`-class model.
pub(super) fn objects(
    (shape, values): (Vec<i64>, Vec<f32>),
    views: usize,
    classes: usize,
    min_score: f32,
) -> Result<Vec<Vec<Found>>, ModelError> {
    let [n, rows, anchors] = shape[..] else {
        return Err(ModelError::Inference(format!("the object detector gave {shape:?}")));
    };
    if n as usize != views || rows as usize != 4 + classes || values.len() != (n * rows * anchors) as usize {
        return Err(ModelError::Inference(format!("the object detector gave {shape:?} for {views} views")));
    }
    let anchors = anchors as usize;
    Ok(values
        .chunks_exact((rows as usize * anchors).max(1))
        .map(|output| {
            let row = |r: usize| &output[r * anchors..(r + 1) * anchors];
            let found = (0..anchors)
                .filter_map(|a| {
                    let (class, score) = (0..classes).map(|c| (c, row(4 + c)[a])).max_by(|x, y| x.1.total_cmp(&y.1))?;
                    (score >= min_score).then(|| {
                        let (cx, cy, w, h) = (row(0)[a], row(1)[a], row(2)[a], row(3)[a]);
                        Found { class, score, bbox: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0] }
                    })
                })
                .collect();
            suppress(found, IOU, true)
        })
        .collect())
}
