//! A photo's objects, after its decode: its view on the object detector, then each box mapped back
//! to the upright full-size photo's pixels and named by the model folder's classes; and, where the
//! request wants pets, each pet cut from the decoded photo on a decode thread and embedded by the
//! image tower (a photo embedding of a crop: what `album.pets` groups).

use std::sync::Arc;

use futures::future::join_all;
use image::RgbImage;
use tracing::Span;

use super::{ItemError, Pipeline};
use crate::{
    preprocess::{ObjectView, pet_crop},
    sys::budget::Held,
};

/// One object, its box `[x1, y1, x2, y2]` in pixels of the upright photo at its full size.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub label: String,
    /// The class's index in the model's classes.
    pub class: usize,
    pub score: f32,
    pub bbox: [f32; 4],
    /// For a pet (CLIPFN_PET_LABELS, at least CLIPFN_PET_MIN_SIZE), where the request wants pets:
    /// the image tower's embedding of its crop.
    pub embedding: Option<Vec<f32>>,
}

/// A photo's objects, best first: at most CLIPFN_MAX_OBJECTS, and how many more were found.
#[derive(Debug, Clone, PartialEq)]
pub struct Objects {
    pub objects: Vec<Object>,
    pub left_out: usize,
}

impl Pipeline {
    /// The objects on `view`, best first; `memory` holds the view's share of the decode budget
    /// until the detector has answered and the pets are cut.
    pub(super) async fn find_objects(&self, view: ObjectView, memory: Held) -> Result<Objects, ItemError> {
        let (placed, photo) = (view.placed, view.photo.clone());
        let mut found = self.worker.find_objects(view).await?.output;
        let info = self.worker.objects_info().expect("a view only for a detector");
        let left_out = found.len().saturating_sub(info.max_objects);
        found.truncate(info.max_objects);
        let mut objects: Vec<Object> = found
            .into_iter()
            .map(|found| {
                let [x1, y1] = placed.to_photo([found.bbox[0], found.bbox[1]]);
                let [x2, y2] = placed.to_photo([found.bbox[2], found.bbox[3]]);
                let label =
                    info.labels.get(found.class).map_or_else(|| format!("class {}", found.class), String::clone);
                Object { label, class: found.class, score: found.score, bbox: [x1, y1, x2, y2], embedding: None }
            })
            .collect();
        if let Some(photo) = photo {
            self.embed_pets(&mut objects, &photo, placed.full_size, memory).await?;
        }
        Ok(Objects { objects, left_out })
    }

    /// Each pet among `objects` (CLIPFN_PET_LABELS, at least CLIPFN_PET_MIN_SIZE) cut from `photo`
    /// (the decode of an upright `full_size` photo) on a decode thread and embedded by the image
    /// tower; `memory` holds the crops until then.
    async fn embed_pets(
        &self,
        objects: &mut [Object],
        photo: &Arc<RgbImage>,
        full_size: (u32, u32),
        mut memory: Held,
    ) -> Result<(), ItemError> {
        let info = self.worker.objects_info().expect("a view only for a detector");
        let min_side = info.pet_min_size as f32;
        let pets: Vec<usize> = (0..objects.len())
            .filter(|&i| info.pets.contains(&objects[i].class))
            .filter(|&i| {
                (objects[i].bbox[2] - objects[i].bbox[0]).min(objects[i].bbox[3] - objects[i].bbox[1]) >= min_side
            })
            .collect();
        if pets.is_empty() {
            return Ok(());
        }
        let boxes: Vec<[f32; 4]> = pets.iter().map(|&i| objects[i].bbox).collect();
        let (square, photo) = (self.square.clone(), Arc::clone(photo));
        let (_, crops) = self
            .decoders
            .run(move || {
                let crops: Result<Vec<_>, _> =
                    boxes.iter().map(|&bbox| pet_crop(&photo, full_size, bbox, &square)).collect();
                crops.map_err(ItemError::from)
            })
            .await;
        // The crops wait for the image tower holding their own pixels; the decode goes.
        let crops = crops?;
        memory.keep(crops.iter().map(|crop| crop.as_raw().len() as u64).sum());
        let embedded = join_all(crops.into_iter().map(|crop| self.worker.embed(crop, Span::none()))).await;
        drop(memory);
        for (i, embedded) in pets.into_iter().zip(embedded) {
            objects[i].embedding = Some(embedded?.output);
        }
        Ok(())
    }
}
