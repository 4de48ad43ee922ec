//! Objects and pets in photos in `/v1/analyze`: where the object detector is, and which of its
//! detections count.

use serde::Deserialize;

use super::{
    ConfigError,
    choices::{self, Placement},
};

/// The variables of [`ObjectSettings`], one per field and in the fields' order (see `variables`).
pub(super) const VARIABLES: &[&str] =
    &["CLIPFN_OBJECT_MODEL", "CLIPFN_OBJECT_MIN_SCORE", "CLIPFN_MAX_OBJECTS", "CLIPFN_OBJECT_PROVIDER"];

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
        Ok(())
    }
}
