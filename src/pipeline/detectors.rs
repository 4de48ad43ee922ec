//! A photo's detectors after its decode, beside its embedding: the faces on the face canvas, the
//! text on the OCR view, the objects on the object view. A detector that trips on the photo fails
//! its own signal alone, and the photo keeps its others.

use super::{Faces, ItemError, Objects, Ocr, Pipeline, Wants};
use crate::{
    preprocess::{FaceCanvas, ObjectView, OcrView},
    sys::budget::Held,
};

/// A photo's views that wait for a detector, each with its share of the decode's hold.
pub(super) struct Detectors {
    pub canvas: Option<(Held, FaceCanvas)>,
    pub ocr: Option<(Held, OcrView)>,
    pub objects: Option<(Held, ObjectView)>,
}

impl Detectors {
    /// The views that wait for a detector, each holding its share of `memory`, split off it.
    pub fn hold(
        memory: &mut Held,
        canvas: Option<FaceCanvas>,
        ocr: Option<OcrView>,
        objects: Option<ObjectView>,
    ) -> Self {
        Detectors {
            canvas: canvas.map(|canvas| (memory.split_off(canvas.kept_bytes()), canvas)),
            ocr: ocr.map(|view| (memory.split_off(view.kept_bytes()), view)),
            objects: objects.map(|view| (memory.split_off(view.kept_bytes()), view)),
        }
    }
}

/// What each detector found, where it was asked.
type Detected = (Option<Result<Faces, ItemError>>, Option<Result<Ocr, ItemError>>, Option<Result<Objects, ItemError>>);

impl Pipeline {
    /// Runs every detector `views` holds a view for, together, with `wants`' minimum scores.
    pub(super) async fn detect(&self, views: Detectors, wants: Wants) -> Detected {
        let faces = async {
            let (memory, canvas) = views.canvas?;
            let (detector, _) = self.faces().expect("a canvas only for a detector");
            let min_score = wants.face_min_score.unwrap_or(detector.min_score);
            Some(self.find_faces(canvas, memory, min_score, detector.max_faces).await)
        };
        let text = async {
            let (memory, view) = views.ocr?;
            let reader = self.ocr().expect("a view only for OCR models");
            let box_min_score = wants.ocr_box_min_score.unwrap_or(reader.box_min_score);
            let min_score = wants.ocr_min_score.unwrap_or(reader.min_score);
            Some(self.read_text(view, memory, (box_min_score, min_score), reader.max_lines).await)
        };
        let things = async {
            let (memory, view) = views.objects?;
            Some(self.find_objects(view, memory).await)
        };
        futures::join!(faces, text, things)
    }
}
