//! The pixel signals of `/v1/analyze` and the album groupings over them: where blurry begins, how
//! close two hashes must be to make duplicates, how far apart in time or space two photos may be
//! and stay one event, what makes a burst, and which head ranks the best shot.

use serde::Deserialize;

use super::ConfigError;

/// The variables of [`SignalSettings`], one per field and in the fields' order (see `variables`).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_BLUR_THRESHOLD",
    "CLIPFN_DUPLICATE_BITS",
    "CLIPFN_EVENT_GAP_S",
    "CLIPFN_EVENT_DISTANCE_M",
    "CLIPFN_BURST_GAP_MS",
    "CLIPFN_BURST_SIMILARITY",
    "CLIPFN_RANK_HEAD",
];

#[derive(Debug, Clone, Deserialize)]
pub struct SignalSettings {
    /// A photo is blurry when its sharpness is under this. The default answers as the album app's
    /// test (its measure under 80) does, calibrated in docs/design.md ("Sharpness and blur").
    #[serde(default = "defaults::blur_threshold")]
    pub blur_threshold: f64,
    /// Two photos are duplicates when their perceptual hashes are at most this many bits apart
    /// (the album app's DBSCAN eps).
    #[serde(default = "defaults::duplicate_bits")]
    pub duplicate_bits: u32,
    /// A new event starts where the time since the previous photo exceeds this many seconds (3 h:
    /// docs/design.md, "Events").
    #[serde(default = "defaults::event_gap_s")]
    pub event_gap_s: u64,
    /// A new event starts where a located photo is further than this many metres (great-circle)
    /// from the previous located photo (25 km: docs/design.md, "Events").
    #[serde(default = "defaults::event_distance_m")]
    pub event_distance_m: f64,
    /// A burst joins a photo taken at most this many milliseconds after the previous one...
    #[serde(default = "defaults::burst_gap_ms")]
    pub burst_gap_ms: u64,
    /// ...whose image embedding's cosine with the previous one's is at least this. Not
    /// calibrated on real CLIP weights, which do not reach the test machine (docs/design.md,
    /// "Bursts").
    #[serde(default = "defaults::burst_similarity")]
    pub burst_similarity: f32,
    /// The head (a name in CLIPFN_HEADS) whose score ranks the best shot after blur and faces cut
    /// by the edge: the album app's aesthetic head. None: the ranking skips that step.
    pub rank_head: Option<String>,
}

mod defaults {
    pub fn blur_threshold() -> f64 {
        88.0
    }
    pub fn duplicate_bits() -> u32 {
        10
    }
    pub fn event_gap_s() -> u64 {
        3 * 3600
    }
    pub fn event_distance_m() -> f64 {
        25_000.0
    }
    pub fn burst_gap_ms() -> u64 {
        2_000
    }
    pub fn burst_similarity() -> f32 {
        0.9
    }
}

impl SignalSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(self.blur_threshold.is_finite() && self.blur_threshold >= 0.0) {
            return Err(ConfigError(format!(
                "CLIPFN_BLUR_THRESHOLD must be a number of at least 0, got {}",
                self.blur_threshold
            )));
        }
        if self.duplicate_bits > 64 {
            return Err(ConfigError(format!(
                "CLIPFN_DUPLICATE_BITS is a number of bits of a 64-bit hash: 0 to 64, got {}",
                self.duplicate_bits
            )));
        }
        if !(self.event_distance_m.is_finite() && self.event_distance_m >= 0.0) {
            return Err(ConfigError(format!(
                "CLIPFN_EVENT_DISTANCE_M must be a number of metres of at least 0, got {}",
                self.event_distance_m
            )));
        }
        if !(self.burst_similarity.is_finite() && (-1.0..=1.0).contains(&self.burst_similarity)) {
            return Err(ConfigError(format!(
                "CLIPFN_BURST_SIMILARITY is a cosine: -1 to 1, got {}",
                self.burst_similarity
            )));
        }
        if self.burst_gap_ms > i64::MAX as u64 {
            return Err(ConfigError(format!("CLIPFN_BURST_GAP_MS is too large: {}", self.burst_gap_ms)));
        }
        if self.event_gap_s > i64::MAX as u64 / 1000 {
            return Err(ConfigError(format!("CLIPFN_EVENT_GAP_S is too large: {}", self.event_gap_s)));
        }
        Ok(())
    }
}
