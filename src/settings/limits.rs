//! Limits of the photo flow: what one photo and one request may be, and how much of the process
//! photos may hold at once (queue places, fetched bytes, decode memory, decode threads).

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, MIB, require_positive};

/// The variables of [`Limits`], one per field and in the fields' order (envy reads each
/// field from `CLIPFN_` + its name upper-cased; a unit test holds the two together).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_MAX_IMAGES",
    "CLIPFN_MAX_IMAGE_BYTES",
    "CLIPFN_MAX_IMAGE_PIXELS",
    "CLIPFN_DECODE_TIMEOUT_MS",
    "CLIPFN_MAX_QUEUED_IMAGES",
    "CLIPFN_MAX_FETCHED_BYTES",
    "CLIPFN_MAX_DECODE_BYTES",
    "CLIPFN_DECODE_THREADS",
];

#[derive(Debug, Clone, Deserialize)]
pub struct Limits {
    /// Photos per request.
    #[serde(default = "defaults::max_images")]
    pub max_images: usize,
    #[serde(default = "defaults::max_image_bytes")]
    pub max_image_bytes: u64,
    /// Decoded pixels allowed per photo, checked from the header before decoding (bombs).
    #[serde(default = "defaults::max_image_pixels")]
    pub max_image_pixels: u64,
    /// Time budget for decoding and resizing one photo; past it the photo gets `decode_failed`.
    #[serde(default = "defaults::decode_timeout_ms")]
    pub decode_timeout_ms: u64,
    /// Photos admitted at once across all requests; past this a request gets 429 + Retry-After.
    #[serde(default = "defaults::max_queued_images")]
    pub max_queued_images: usize,
    /// Fetched photo bytes held in memory until decoded, across requests; fetches wait past it.
    /// Unset, see [`Limits::max_fetched_bytes`].
    #[serde(default)]
    pub max_fetched_bytes: Option<u64>,
    /// Memory that decodes may hold at once across requests (decoded pixels, a progressive JPEG's
    /// coefficients, read from each photo's header); a decode waits past it, and one larger than
    /// all of it runs alone. Unset: not bounded, each decode thread takes what its photo needs.
    #[serde(default)]
    pub max_decode_bytes: Option<u64>,
    /// Threads decoding and resizing; 0 means one per CPU this process may use (a cgroup quota
    /// included).
    #[serde(default)]
    pub decode_threads: usize,
}

mod defaults {
    use super::MIB;
    pub fn max_images() -> usize {
        100
    }
    pub fn max_image_bytes() -> u64 {
        25 * MIB
    }
    pub fn max_image_pixels() -> u64 {
        100_000_000
    }
    pub fn decode_timeout_ms() -> u64 {
        30_000
    }
    pub fn max_queued_images() -> usize {
        512
    }
}

impl Limits {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("CLIPFN_MAX_IMAGES", self.max_images as u64),
            ("CLIPFN_MAX_IMAGE_BYTES", self.max_image_bytes),
            ("CLIPFN_MAX_IMAGE_PIXELS", self.max_image_pixels),
            ("CLIPFN_DECODE_TIMEOUT_MS", self.decode_timeout_ms),
            ("CLIPFN_MAX_QUEUED_IMAGES", self.max_queued_images as u64),
            // A budget of 0 would bound nothing (every reservation is capped at the budget).
            ("CLIPFN_MAX_DECODE_BYTES", self.max_decode_bytes.unwrap_or(1)),
        ])?;
        if self.max_images > self.max_queued_images {
            return Err(ConfigError(format!(
                "CLIPFN_MAX_IMAGES ({}) must not exceed CLIPFN_MAX_QUEUED_IMAGES ({}), or a full request could never be admitted",
                self.max_images, self.max_queued_images
            )));
        }
        if self.max_fetched_bytes() < self.max_image_bytes {
            return Err(ConfigError(format!(
                "CLIPFN_MAX_FETCHED_BYTES ({}) must be at least CLIPFN_MAX_IMAGE_BYTES ({}): below it, a photo of the largest size would have to be fetched alone",
                self.max_fetched_bytes(),
                self.max_image_bytes
            )));
        }
        Ok(())
    }

    /// As set, else 16 MiB per decode thread (and at least one photo of the largest size): enough
    /// to keep the decoders fed across a fetch's latency, without holding a whole backlog of
    /// photos that can only be decoded a few at a time.
    pub fn max_fetched_bytes(&self) -> u64 {
        self.max_fetched_bytes.unwrap_or_else(|| (16 * MIB * self.decode_threads() as u64).max(self.max_image_bytes))
    }

    pub fn decode_threads(&self) -> usize {
        match self.decode_threads {
            0 => super::available_cpus(),
            n => n,
        }
    }

    pub fn decode_timeout(&self) -> Duration {
        Duration::from_millis(self.decode_timeout_ms)
    }
}
