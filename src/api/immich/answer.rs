//! `/predict`'s answer, in the shapes Immich's client reads (its `machine-learning.repository.ts`
//! types): keyed by task, with the photo's upright size; vectors as JSON arrays in strings.

use serde::Serialize;
use utoipa::ToSchema;

use crate::pipeline::{Face, Ocr};

/// An answer to one `/predict` form: the tasks asked, and the photo's size when it was a photo.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Prediction {
    /// The CLIP embedding (of the photo, or of the text): a JSON array of numbers in a string,
    /// which Immich's server stores without parsing. Unit length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip: Option<String>,
    /// The faces at or above the request's `minScore`, at most CLIPFN_MAX_FACES.
    #[serde(rename = "facial-recognition", skip_serializing_if = "Option::is_none")]
    pub faces: Option<Vec<ImmichFace>>,
    /// The lines of text at or above the request's minimum scores, in reading order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ocr: Option<ImmichOcr>,
    /// The upright photo's height in pixels (photos only).
    #[serde(rename = "imageHeight", skip_serializing_if = "Option::is_none")]
    pub image_height: Option<u32>,
    #[serde(rename = "imageWidth", skip_serializing_if = "Option::is_none")]
    pub image_width: Option<u32>,
}

/// A face as Immich reads it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImmichFace {
    pub bounding_box: BoundingBox,
    /// The face embedding: a JSON array of numbers in a string.
    pub embedding: String,
    /// The detector's score.
    pub score: f32,
}

/// A face's box in whole pixels of the upright photo, rounded as Immich ML rounds it.
#[derive(Debug, Serialize, ToSchema)]
pub struct BoundingBox {
    pub x1: i64,
    pub y1: i64,
    pub x2: i64,
    pub y2: i64,
}

impl From<&Face> for ImmichFace {
    fn from(face: &Face) -> Self {
        let [x1, y1, x2, y2] = face.bbox.map(|v| v.round() as i64);
        ImmichFace {
            bounding_box: BoundingBox { x1, y1, x2, y2 },
            embedding: vector(&face.embedding),
            score: face.score,
        }
    }
}

/// A photo's lines of text as Immich reads them: four lists, one entry per line (`box` eight per
/// line: its corners' x and y, as fractions of the upright photo's width and height, as Immich ML
/// gives them).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImmichOcr {
    pub text: Vec<String>,
    #[serde(rename = "box")]
    pub corners: Vec<f32>,
    pub box_score: Vec<f32>,
    pub text_score: Vec<f32>,
}

impl ImmichOcr {
    /// `ocr`'s lines, their corners divided by the photo's `(width, height)`.
    pub fn new(ocr: &Ocr, (width, height): (u32, u32)) -> Self {
        let size = [width.max(1) as f32, height.max(1) as f32];
        ImmichOcr {
            text: ocr.lines.iter().map(|line| line.text.clone()).collect(),
            corners: ocr
                .lines
                .iter()
                .flat_map(|line| line.corners.as_flattened().iter().enumerate())
                .map(|(i, v)| v / size[i % 2])
                .collect(),
            box_score: ocr.lines.iter().map(|line| line.box_score).collect(),
            text_score: ocr.lines.iter().map(|line| line.score).collect(),
        }
    }
}

/// A vector as Immich ML sends it: a JSON array written into a string.
pub fn vector(values: &[f32]) -> String {
    serde_json::to_string(values).expect("floats from the models are finite")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_json_arrays_in_a_string() {
        assert_eq!(vector(&[0.5, -1.0, 0.25]), "[0.5,-1.0,0.25]");
    }

    #[test]
    fn lines_go_as_four_lists_with_boxes_in_fractions_of_the_photo() {
        let line = crate::pipeline::OcrLine {
            text: "EXIT".into(),
            score: 0.98,
            box_score: 0.75,
            corners: [[10.0, 5.0], [30.0, 5.0], [30.0, 15.0], [10.0, 15.0]],
        };
        let ocr = ImmichOcr::new(&Ocr { lines: vec![line], left_out: 0 }, (40, 20));
        assert_eq!(
            serde_json::to_value(ocr).unwrap(),
            serde_json::json!({
                "text": ["EXIT"], "box": [0.25, 0.25, 0.75, 0.25, 0.75, 0.75, 0.25, 0.75],
                "boxScore": [0.75], "textScore": [0.98f32]
            })
        );
    }

    #[test]
    fn only_the_tasks_asked_are_answered() {
        let text = Prediction { clip: Some(vector(&[1.0])), ..Prediction::default() };
        assert_eq!(serde_json::to_value(text).unwrap(), serde_json::json!({"clip": "[1.0]"}));
    }
}
