//! Faces in `/v1/analyze`: where the face models are, which detections count, and how faces are
//! grouped into people.

use serde::Deserialize;

use super::{
    ConfigError,
    choices::{self, Placement},
};

/// The variables of [`FaceSettings`], one per field and in the fields' order (see `variables`).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_FACE_MODEL",
    "CLIPFN_FACE_DET_SIZE",
    "CLIPFN_FACE_MIN_SCORE",
    "CLIPFN_FACE_SCORE_FLOOR",
    "CLIPFN_MAX_FACES",
    "CLIPFN_FACE_MAX_DISTANCE",
    "CLIPFN_FACE_MIN_FACES",
    "CLIPFN_FACE_MIN_SIZE",
    "CLIPFN_FACE_SUGGEST_DISTANCE",
    "CLIPFN_PERSON_EXEMPLARS",
    "CLIPFN_MAX_KNOWN_PEOPLE",
    "CLIPFN_MAX_EXEMPLARS",
    "CLIPFN_FACE_PROVIDER",
];

#[derive(Debug, Clone, Deserialize)]
pub struct FaceSettings {
    /// A folder or URI prefix holding `detection/model.onnx` and `recognition/model.onnx` (the
    /// layout Immich stores InsightFace's packs in). Unset: no faces.
    #[serde(default)]
    pub face_model: Option<String>,
    /// The detector's canvas side where its graph leaves the input size dynamic (InsightFace's
    /// `det_size`). Unset: 640. A graph that fixes its side keeps it, and a setting it contradicts
    /// stops start-up.
    #[serde(default)]
    pub face_det_size: Option<u32>,
    /// Detections scoring under this are dropped, unless a request asks for another minimum
    /// (Immich's `minScore`). Unset: the detector format's own (`DetectorFormat::default_min_score`).
    #[serde(default)]
    pub face_min_score: Option<f32>,
    /// The lowest minimum a request may ask: the detector keeps its candidates down to it, and
    /// each request's minimum filters them. Unset: the minimum score in force.
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
    /// Faces under this many pixels on their short side, in the pixels their chip is cut from (at
    /// most the photo's: `preprocess::chips`), are answered but join no person: their chips stray
    /// from their own person (measured: docs/faces-real-weights.md, "Small faces").
    #[serde(default = "defaults::face_min_size")]
    pub face_min_size: u32,
    /// How near a new person's centre must be to a known person's exemplars to be answered as
    /// `maybe` that person. Unset: 1.5 times the max distance in force.
    #[serde(default)]
    pub face_suggest_distance: Option<f32>,
    /// The most exemplar faces a person answers, for the app to send back as `known_people`.
    #[serde(default = "defaults::person_exemplars")]
    pub person_exemplars: usize,
    /// The most `known_people` a request may carry.
    #[serde(default = "defaults::max_known_people")]
    pub max_known_people: usize,
    /// The most exemplar embeddings a known person may carry.
    #[serde(default = "defaults::max_exemplars")]
    pub max_exemplars: usize,
    /// Where the face towers run: `auto`, where the image tower runs; `cpu`.
    #[serde(default = "defaults::face_provider", deserialize_with = "choices::face_provider")]
    pub face_provider: Placement,
}

mod defaults {
    use super::Placement;
    pub fn face_provider() -> Placement {
        Placement::Auto
    }
    pub fn max_faces() -> usize {
        50
    }
    pub fn min_faces() -> usize {
        2
    }
    pub fn face_min_size() -> u32 {
        20
    }
    pub fn person_exemplars() -> usize {
        5
    }
    pub fn max_known_people() -> usize {
        1000
    }
    pub fn max_exemplars() -> usize {
        20
    }
}

impl FaceSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (name, score) in
            [("CLIPFN_FACE_MIN_SCORE", self.face_min_score), ("CLIPFN_FACE_SCORE_FLOOR", self.face_score_floor)]
        {
            if let Some(score) = score.filter(|s| !(0.0..=1.0).contains(s)) {
                return Err(ConfigError(format!("{name} must be 0 to 1, got {score}")));
            }
        }
        // Against a format's default minimum, the floor is checked when the detector is loaded.
        if let (Some(min_score), Some(floor)) = (self.face_min_score, self.face_score_floor)
            && floor > min_score
        {
            return Err(ConfigError(format!(
                "CLIPFN_FACE_SCORE_FLOOR must be 0 to CLIPFN_FACE_MIN_SCORE ({min_score}), got {floor}"
            )));
        }
        if let Some(distance) = self.face_max_distance.filter(|d| !(*d > 0.0 && *d <= 2.0)) {
            return Err(ConfigError(format!(
                "CLIPFN_FACE_MAX_DISTANCE is a cosine distance: over 0, at most 2, got {distance}"
            )));
        }
        if let Some(side) = self.face_det_size.filter(|side| !(96..=2048).contains(side) || side % 32 != 0) {
            return Err(ConfigError(format!(
                "CLIPFN_FACE_DET_SIZE must be a multiple of 32 from 96 to 2048 (the detectors' largest stride is 32), \
                 got {side}"
            )));
        }
        if self.max_faces == 0 {
            return Err(ConfigError("CLIPFN_MAX_FACES must be at least 1 (unset CLIPFN_FACE_MODEL for none)".into()));
        }
        if self.face_min_faces == 0 {
            return Err(ConfigError("CLIPFN_FACE_MIN_FACES must be at least 1".into()));
        }
        if let Some(distance) = self.face_suggest_distance.filter(|d| !(*d > 0.0 && *d <= 2.0)) {
            return Err(ConfigError(format!(
                "CLIPFN_FACE_SUGGEST_DISTANCE is a cosine distance: over 0, at most 2, got {distance}"
            )));
        }
        for (name, value) in [
            ("CLIPFN_PERSON_EXEMPLARS", self.person_exemplars),
            ("CLIPFN_MAX_KNOWN_PEOPLE", self.max_known_people),
            ("CLIPFN_MAX_EXEMPLARS", self.max_exemplars),
        ] {
            if value == 0 {
                return Err(ConfigError(format!("{name} must be at least 1")));
            }
        }
        Ok(())
    }
}
