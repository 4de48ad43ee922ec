//! Objects and pets in photos in `/v1/analyze`: where the object detector is, and which of its
//! detections count.

use serde::Deserialize;

use super::{
    ConfigError,
    choices::{self, Placement},
};

/// The variables of [`ObjectSettings`], one per field and in the fields' order (see `variables`).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_OBJECT_MODEL",
    "CLIPFN_OBJECT_MIN_SCORE",
    "CLIPFN_MAX_OBJECTS",
    "CLIPFN_OBJECT_PROVIDER",
    "CLIPFN_PET_LABELS",
    "CLIPFN_PET_MIN_SIZE",
    "CLIPFN_PET_MAX_DISTANCE",
];

#[derive(Debug, Clone, Deserialize)]
pub struct ObjectSettings {
    /// A folder or URI prefix holding `model.onnx` (a CenterNet as Human ships it, or a YOLO as
    /// ultralytics exports it) and optionally `classes.txt`, one class name a line. Unset: no objects.
    #[serde(default)]
    pub object_model: Option<String>,
    /// Detections scoring under this are dropped (Human's `minConfidence`, 0.2).
    #[serde(default = "defaults::object_min_score")]
    pub object_min_score: f32,
    /// The most objects a photo answers, the best kept: 50, where Human keeps 10, since a group
    /// photo holds more (docs/objects.md, "How many").
    #[serde(default = "defaults::max_objects")]
    pub max_objects: usize,
    /// Where the object detector runs: `auto` (where the image tower runs: its one fixed canvas
    /// costs the CUDA provider one search) or `cpu`.
    #[serde(default = "defaults::object_provider", deserialize_with = "choices::object_provider")]
    pub object_provider: Placement,
    /// The classes that are pets, comma-separated: their crops are embedded and grouped into
    /// `album.pets`. Unset: `cat` and `dog`, where the model has them; set, every name must be one
    /// of the model's classes.
    #[serde(default)]
    pub pet_labels: Option<String>,
    /// Pets whose box is smaller than this on its short side, in the photo's pixels, are answered
    /// as objects and join no pet: a crop that small is mostly the image tower's upscaling.
    #[serde(default = "defaults::pet_min_size")]
    pub pet_min_size: u32,
    /// `album.pets`: the cosine distance between two crops' image embeddings within which they are
    /// one pet (DBSCAN's eps, one crop a core), and the reach of a known pet's exemplars.
    #[serde(default = "defaults::pet_max_distance")]
    pub pet_max_distance: f32,
}

mod defaults {
    use super::Placement;
    pub fn object_min_score() -> f32 {
        0.2
    }
    pub fn max_objects() -> usize {
        50
    }
    pub fn object_provider() -> Placement {
        Placement::Auto
    }
    pub fn pet_min_size() -> u32 {
        64
    }
    pub fn pet_max_distance() -> f32 {
        0.15
    }
}

impl ObjectSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.object_min_score) {
            return Err(ConfigError(format!("CLIPFN_OBJECT_MIN_SCORE must be 0 to 1, got {}", self.object_min_score)));
        }
        if !(1..=1000).contains(&self.max_objects) {
            return Err(ConfigError(format!(
                "CLIPFN_MAX_OBJECTS must be 1 to 1000 (unset CLIPFN_OBJECT_MODEL for none), got {}",
                self.max_objects
            )));
        }
        if !(0.0..=2.0).contains(&self.pet_max_distance) {
            return Err(ConfigError(format!(
                "CLIPFN_PET_MAX_DISTANCE must be 0 to 2 (a cosine distance), got {}",
                self.pet_max_distance
            )));
        }
        Ok(())
    }

    /// The pet classes' names: CLIPFN_PET_LABELS', else cat and dog; and whether they were named.
    pub fn pet_labels(&self) -> (Vec<&str>, bool) {
        match &self.pet_labels {
            Some(named) => (named.split(',').map(str::trim).filter(|name| !name.is_empty()).collect(), true),
            None => (vec!["cat", "dog"], false),
        }
    }
}
