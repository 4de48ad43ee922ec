//! A photo's objects, after its decode: its view on the object detector, then each box mapped back
//! to the upright full-size photo's pixels and named by the model folder's classes.

use super::{ItemError, Pipeline};
use crate::{preprocess::ObjectView, sys::budget::Held};

/// One object, its box `[x1, y1, x2, y2]` in pixels of the upright photo at its full size.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub label: String,
    /// The class's index in the model's classes.
    pub class: usize,
    pub score: f32,
    pub bbox: [f32; 4],
}

impl Pipeline {
    /// The objects on `view`, best first; `memory` holds the view's share of the decode budget
    /// until the detector has answered.
    pub(super) async fn find_objects(&self, view: ObjectView, memory: Held) -> Result<Vec<Object>, ItemError> {
        let placed = view.placed;
        let found = self.worker.find_objects(view).await?.output;
        drop(memory);
        let labels = &self.worker.objects_info().expect("a view only for a detector").labels;
        Ok(found
            .into_iter()
            .map(|found| {
                let [x1, y1] = placed.to_photo([found.bbox[0], found.bbox[1]]);
                let [x2, y2] = placed.to_photo([found.bbox[2], found.bbox[3]]);
                let label = labels.get(found.class).map_or_else(|| format!("class {}", found.class), String::clone);
                Object { label, class: found.class, score: found.score, bbox: [x1, y1, x2, y2] }
            })
            .collect())
    }
}
