//! CenterNet's end, as Human's `@vladmandic/human/src/object/centernet.ts` ends: the graph's own detections
//! `[1, K, 6]` (`x1, y1, x2, y2, score, class`, in input pixels), suppressed over every class at
//! IoU 0.4 (`iouThreshold`).

use super::{Found, suppress};
use crate::model::ModelError;

/// Human's `iouThreshold`: two boxes of any classes overlapping this much are one object.
const IOU: f32 = 0.4;

/// Each view's objects from the detections of `views` views.
pub(super) fn objects(
    (shape, values): (Vec<i64>, Vec<f32>),
    views: usize,
    min_score: f32,
) -> Result<Vec<Vec<Found>>, ModelError> {
    if shape.last() != Some(&6) || values.len() % (6 * views.max(1)) != 0 || shape.first() != Some(&(views as i64)) {
        return Err(ModelError::Inference(format!("the object detector gave {shape:?} for {views} views")));
    }
    let per_view = values.len() / views.max(1);
    Ok(values
        .chunks_exact(per_view.max(6))
        .take(views)
        .map(|rows| {
            let found = rows
                .chunks_exact(6)
                .filter(|row| row[4] >= min_score && row[5].is_finite() && row[5] >= 0.0)
                .map(|row| Found { class: row[5] as usize, score: row[4], bbox: [row[0], row[1], row[2], row[3]] })
                .collect();
            suppress(found, IOU, false)
        })
        .collect())
}
