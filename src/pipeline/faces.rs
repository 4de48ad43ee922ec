//! A photo's faces, after its decode: its canvas on the face detector, each face found aligned on a
//! decode thread (from the canvas, or from the photo decoded again finer where the canvas holds the
//! face smaller than its chip), every aligned face on the recognizer (faces of many photos batch
//! together), and the boxes and landmarks mapped back to the upright full-size photo.

use super::{ItemError, Pipeline};
use crate::{
    decode,
    model::{Detection, Detections},
    observe::metrics::Stage,
    preprocess::{FaceCanvas, chips, finer_decode},
    sys::budget::{Budget, Held},
};

/// A photo's faces, best first, and how many more `CLIPFN_MAX_FACES` left out.
#[derive(Debug, Clone, Default)]
pub struct Faces {
    pub faces: Vec<Face>,
    pub left_out: usize,
}

/// One face of a photo, in pixels of the upright photo at its full size: its box clipped to the
/// photo (its crop keeps what lay outside, black).
#[derive(Debug, Clone)]
pub struct Face {
    /// `[x1, y1, x2, y2]`.
    pub bbox: [f32; 4],
    /// Whether the box, before clipping, left the photo: a face cut by its edge.
    pub cut: bool,
    pub score: f32,
    /// Left eye, right eye, nose, left and right mouth corners.
    pub landmarks: [[f32; 2]; 5],
    /// Of unit length.
    pub embedding: Vec<f32>,
    /// The face's short side in the pixels its chip was cut from (the canvas's or a finer decode's),
    /// at most the photo's own (CLIPFN_FACE_MIN_SIZE holds people to it).
    pub chip_pixels: f32,
}

impl Pipeline {
    /// The faces on `canvas` scoring at least `min_score` (the detector's floor at the lowest),
    /// best first, at most `max_faces` of them: only those are aligned and recognised.
    pub(super) async fn find_faces(
        &self,
        mut canvas: FaceCanvas,
        mut memory: Held,
        min_score: f32,
        max_faces: usize,
    ) -> Result<Faces, ItemError> {
        // The detector reads the pixels alone; the faces are cut from them, or from the photo's
        // bytes decoded again, afterwards.
        let photo = canvas.photo.take();
        let placed = canvas.clone();
        let Detections { faces: mut detections } = self.worker.detect(canvas).await?.output;
        detections.retain(|detection| detection.score >= min_score);
        let left_out = detections.len().saturating_sub(max_faces);
        detections.truncate(max_faces);
        if detections.is_empty() {
            return Ok(Faces { faces: Vec::new(), left_out });
        }
        let landmarks: Vec<[[f32; 2]; 5]> = detections.iter().map(|d| d.landmarks).collect();
        let (_, recognizer) = self.faces().expect("the detector answered, so the face towers are loaded");
        let chip = recognizer.format.chip();
        let finer = photo.zip(finer_decode(&placed, &landmarks, &chip, self.max_pixels));
        // Memory first, then a decode thread, as for the photo's first decode. The canvas's hold
        // is given back and taken again with the finer decode's, so that no holder waits on the
        // budget (sys::budget::Held); meanwhile only the canvas is uncounted.
        if let Some((bytes, options)) = &finer {
            let needs = || placed.kept_bytes() + decode::working_memory(bytes.as_ref(), options);
            drop(memory);
            memory = Budget::hold(self.decode_memory.as_ref(), needs).await;
        }
        let canvas = placed.clone();
        let (started, crops) = self
            .decoders
            .run(move || {
                let finer = finer.map(|(bytes, options)| decode::decode(bytes.as_ref(), &options)).transpose()?;
                let crops = chips(&canvas, &landmarks, &chip, finer.as_ref());
                // The chips wait for the recognizer beside the canvas (its boxes map back through
                // it); the finer decode goes.
                memory
                    .keep(canvas.kept_bytes() + crops.iter().map(|(crop, _)| crop.as_raw().len() as u64).sum::<u64>());
                Ok::<_, ItemError>((crops, memory))
            })
            .await;
        self.metrics.stage(Stage::FaceChips, started.elapsed());
        let (crops, _memory): (Vec<(image::RgbImage, f32)>, Held) = crops?;
        let (crops, cut_scales): (Vec<_>, Vec<_>) = crops.into_iter().unzip();
        let embeddings = futures::future::join_all(crops.into_iter().map(|crop| self.worker.recognize(crop))).await;
        let (width, height) = placed.full_size;
        let bounds = [width as f32, height as f32, width as f32, height as f32];
        let faces = detections
            .into_iter()
            .zip(embeddings)
            .zip(cut_scales)
            .map(|((Detection { bbox, score, landmarks }, embedded), cut_scale)| {
                let ([x1, y1], [x2, y2]) = (placed.to_photo([bbox[0], bbox[1]]), placed.to_photo([bbox[2], bbox[3]]));
                let bbox = [x1, y1, x2, y2];
                Ok(Face {
                    chip_pixels: (x2 - x1).min(y2 - y1) * cut_scale.min(1.0),
                    cut: bbox[0] < 0.0 || bbox[1] < 0.0 || bbox[2] > bounds[2] || bbox[3] > bounds[3],
                    bbox: std::array::from_fn(|i| bbox[i].clamp(0.0, bounds[i])),
                    score,
                    landmarks: landmarks.map(|point| placed.to_photo(point)),
                    embedding: embedded?.output,
                })
            })
            .collect::<Result<_, ItemError>>()?;
        Ok(Faces { faces, left_out })
    }
}
