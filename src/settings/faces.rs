//! Faces in `/v1/analyze`: where the face models are, which detections count, and how faces are
//! grouped into people.

use serde::Deserialize;

use super::ConfigError;

/// The variables of [`FaceSettings`], one per field and in the fields' order (see `variables`).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_FACE_MODEL",
    "CLIPFN_FACE_MIN_SCORE",
    "CLIPFN_FACE_SCORE_FLOOR",
    "CLIPFN_MAX_FACES",
    "CLIPFN_FACE_MAX_DISTANCE",
    "CLIPFN_FACE_MIN_FACES",
];

#[derive(Debug, Clone, Deserialize)]
pub struct FaceSettings {
    /// A folder or URI prefix holding `detection/model.onnx` and `recognition/model.onnx` (the
    /// layout Immich stores InsightFace's packs in). Unset: no faces.
    #[serde(default)]
    pub face_model: Option<String>,
    /// Detections scoring under this are dropped (Immich's 0.7), unless a request asks for another
    /// minimum (Immich's `minScore`).
    #[serde(default = "defaults::min_score")]
    pub face_min_score: f32,
    /// The lowest minimum a request may ask: the detector keeps its candidates down to it, and
    /// each request's minimum filters them. Unset: `face_min_score`.
    #[serde(default)]
    pub face_score_floor: Option<f32>,
    /// The most faces a photo answers, best first; a noise photo can make thousands of detections.
    #[serde(default = "defaults::max_faces")]
    pub max_faces: usize,
    /// DBSCAN's eps over the faces' cosine distances. Unset: the recognizer format's own
    /// (`RecognizerFormat::default_max_distance`).
    #[serde(default)]
    pub face_max_distance: Option<f32>,
    /// DBSCAN's min_samples: the faces, itself included, within the distance that make a face a
    /// person's core (the album app's 2).
    #[serde(default = "defaults::min_faces")]
    pub face_min_faces: usize,
}

mod defaults {
    pub fn min_score() -> f32 {
        0.7
    }
    pub fn max_faces() -> usize {
        50
    }
    pub fn min_faces() -> usize {
        2
    }
}

impl FaceSettings {
    /// The score the detector keeps its candidates down to (CLIPFN_FACE_SCORE_FLOOR).
    pub fn score_floor(&self) -> f32 {
        self.face_score_floor.unwrap_or(self.face_min_score)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.face_min_score) {
            return Err(ConfigError(format!("CLIPFN_FACE_MIN_SCORE must be 0 to 1, got {}", self.face_min_score)));
        }
        if !(0.0..=self.face_min_score).contains(&self.score_floor()) {
            return Err(ConfigError(format!(
                "CLIPFN_FACE_SCORE_FLOOR must be 0 to CLIPFN_FACE_MIN_SCORE ({}), got {}",
                self.face_min_score,
                self.score_floor()
            )));
        }
        if let Some(distance) = self.face_max_distance.filter(|d| !(*d > 0.0 && *d <= 2.0)) {
            return Err(ConfigError(format!(
                "CLIPFN_FACE_MAX_DISTANCE is a cosine distance: over 0, at most 2, got {distance}"
            )));
        }
        if self.max_faces == 0 {
            return Err(ConfigError("CLIPFN_MAX_FACES must be at least 1 (unset CLIPFN_FACE_MODEL for none)".into()));
        }
        if self.face_min_faces == 0 {
            return Err(ConfigError("CLIPFN_FACE_MIN_FACES must be at least 1".into()));
        }
        Ok(())
    }
}
