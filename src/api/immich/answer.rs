//! `/predict`'s answer, in the shapes Immich's client reads (its `machine-learning.repository.ts`
//! types): keyed by task, with the photo's upright size; vectors as JSON arrays in strings.

use serde::Serialize;
use utoipa::ToSchema;

use crate::pipeline::Face;

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
    fn only_the_tasks_asked_are_answered() {
        let text = Prediction { clip: Some(vector(&[1.0])), ..Prediction::default() };
        assert_eq!(serde_json::to_value(text).unwrap(), serde_json::json!({"clip": "[1.0]"}));
    }
}
