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

impl TryFrom<&Face> for ImmichFace {
    type Error = NotFinite;

    fn try_from(face: &Face) -> Result<Self, NotFinite> {
        let [x1, y1, x2, y2] = finite(&face.bbox)?.map(|v| v.round() as i64);
        Ok(ImmichFace {
            bounding_box: BoundingBox { x1, y1, x2, y2 },
            embedding: vector(&face.embedding)?,
            score: finite(&[face.score])?[0],
        })
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
    pub fn new(ocr: &Ocr, (width, height): (u32, u32)) -> Result<Self, NotFinite> {
        let size = [width.max(1) as f32, height.max(1) as f32];
        let answer = ImmichOcr {
            text: ocr.lines.iter().map(|line| line.text.clone()).collect(),
            corners: ocr
                .lines
                .iter()
                .flat_map(|line| line.corners.as_flattened().iter().enumerate())
                .map(|(i, v)| v / size[i % 2])
                .collect(),
            box_score: ocr.lines.iter().map(|line| line.box_score).collect(),
            text_score: ocr.lines.iter().map(|line| line.score).collect(),
        };
        finite_all(&answer.corners)?;
        finite_all(&answer.box_score)?;
        finite_all(&answer.text_score)?;
        Ok(answer)
    }
}

/// A value the models gave that is not a finite number: JSON has none (serde writes NaN and the
/// infinities as `null`, which Immich's server would store inside a vector), so the photo or text
/// is answered as failed instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the models gave a value that is not a finite number")]
pub struct NotFinite;

fn finite<const N: usize>(values: &[f32; N]) -> Result<[f32; N], NotFinite> {
    finite_all(values).map(|()| *values)
}

fn finite_all(values: &[f32]) -> Result<(), NotFinite> {
    if values.iter().all(|v| v.is_finite()) { Ok(()) } else { Err(NotFinite) }
}

/// A vector as Immich ML sends it: a JSON array written into a string; `Err` when a value is not
/// finite.
pub fn vector(values: &[f32]) -> Result<String, NotFinite> {
    finite_all(values)?;
    Ok(serde_json::to_string(values).expect("finite floats serialize"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_json_arrays_in_a_string() {
        assert_eq!(vector(&[0.5, -1.0, 0.25]).unwrap(), "[0.5,-1.0,0.25]");
    }

    /// serde writes NaN as `null`: `[0.5,null]` would reach Immich's server as a vector. A value
    /// that is not finite anywhere in an answer fails it instead.
    #[test]
    fn a_value_that_is_not_finite_fails_the_answer_instead_of_going_as_null() {
        assert_eq!(serde_json::to_string(&[0.5f32, f32::NAN]).unwrap(), "[0.5,null]", "what serde does");
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(vector(&[0.5, bad]), Err(NotFinite));
            let face = Face {
                bbox: [1.0, 2.0, 3.0, 4.0],
                cut: false,
                score: 0.9,
                landmarks: [[0.0; 2]; 5],
                embedding: vec![0.6, 0.8],
                chip_pixels: 2.0,
            };
            assert!(ImmichFace::try_from(&face).is_ok());
            for broken in [
                Face { embedding: vec![0.6, bad], ..face.clone() },
                Face { score: bad, ..face.clone() },
                Face { bbox: [1.0, bad, 3.0, 4.0], ..face.clone() },
            ] {
                assert_eq!(ImmichFace::try_from(&broken).err(), Some(NotFinite), "{broken:?}");
            }
            let line = |score: f32, x: f32| crate::pipeline::OcrLine {
                text: "EXIT".into(),
                score,
                box_score: 0.75,
                corners: [[x, 5.0], [30.0, 5.0], [30.0, 15.0], [10.0, 15.0]],
            };
            let ocr = |line| Ocr { lines: vec![line], left_out: 0 };
            assert!(ImmichOcr::new(&ocr(line(0.9, 10.0)), (40, 20)).is_ok());
            assert!(ImmichOcr::new(&ocr(line(bad, 10.0)), (40, 20)).is_err());
            assert!(ImmichOcr::new(&ocr(line(0.9, bad)), (40, 20)).is_err());
        }
    }

    #[test]
    fn lines_go_as_four_lists_with_boxes_in_fractions_of_the_photo() {
        let line = crate::pipeline::OcrLine {
            text: "EXIT".into(),
            score: 0.98,
            box_score: 0.75,
            corners: [[10.0, 5.0], [30.0, 5.0], [30.0, 15.0], [10.0, 15.0]],
        };
        let ocr = ImmichOcr::new(&Ocr { lines: vec![line], left_out: 0 }, (40, 20)).unwrap();
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
        let text = Prediction { clip: Some(vector(&[1.0]).unwrap()), ..Prediction::default() };
        assert_eq!(serde_json::to_value(text).unwrap(), serde_json::json!({"clip": "[1.0]"}));
    }
}
