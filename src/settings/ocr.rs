//! Text in photos (OCR) in `/v1/analyze`: where the OCR models are, the detector's view, and which
//! lines count.

use serde::Deserialize;

use super::{
    ConfigError,
    choices::{self, Device, OcrSizes, Placement},
};

/// The variables of [`OcrSettings`], one per field and in the fields' order (see `variables`).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_OCR_MODEL",
    "CLIPFN_OCR_RESOLUTION",
    "CLIPFN_OCR_MIN_SCORE",
    "CLIPFN_OCR_MAX_LINES",
    "CLIPFN_OCR_PROVIDER",
    "CLIPFN_OCR_SIZES",
];

#[derive(Debug, Clone, Deserialize)]
pub struct OcrSettings {
    /// A folder or URI prefix holding `detection/model.onnx`, `recognition/model.onnx` and
    /// optionally `classification/model.onnx` and `recognition/characters.txt` (the layout Immich
    /// stores its OCR models in). Unset: no OCR.
    #[serde(default)]
    pub ocr_model: Option<String>,
    /// The detector's view: the photo's short side scaled down to this (never up), each side a
    /// multiple of 32 (Immich's `maxResolution`, 736).
    #[serde(default = "defaults::ocr_resolution")]
    pub ocr_resolution: u32,
    /// Lines the recognizer scores under this are dropped, unless a request asks for another
    /// minimum (Immich's recognition `minScore`). RapidOCR's `text_score`, 0.5: docs/ocr.md says why.
    #[serde(default = "defaults::ocr_min_score")]
    pub ocr_min_score: f32,
    /// The most lines a photo answers, the detector's best kept; a photo of noise can make
    /// hundreds.
    #[serde(default = "defaults::ocr_max_lines")]
    pub ocr_max_lines: usize,
    /// Where the OCR towers run: on the CPU by default, where they ran faster than on an H200's
    /// CUDA (docs/bench/gpu.md), as Immich keeps its OCR; `auto`: where the image tower runs.
    #[serde(default = "defaults::ocr_provider", deserialize_with = "choices::ocr_provider")]
    pub ocr_provider: Placement,
    /// The sizes the detector's views and the recognizer's lines run at: declared (a few shapes,
    /// which CUDA needs) or exact (RapidOCR's reading, and no padding to pay for on the CPU).
    #[serde(default = "defaults::ocr_sizes", deserialize_with = "choices::ocr_sizes")]
    pub ocr_sizes: OcrSizes,
}

mod defaults {
    use super::{OcrSizes, Placement};
    pub fn ocr_sizes() -> OcrSizes {
        OcrSizes::Auto
    }
    pub fn ocr_provider() -> Placement {
        Placement::Cpu
    }
    pub fn ocr_resolution() -> u32 {
        736
    }
    pub fn ocr_min_score() -> f32 {
        0.5
    }
    pub fn ocr_max_lines() -> usize {
        200
    }
}

impl OcrSettings {
    /// The sizes the OCR towers run at on `device`: `Declared` or `Exact`, never `Auto`. Declared
    /// where a new shape costs a cuDNN search; on the CPU a new shape costs nothing and padding is
    /// work (10 to 21% more CPU a photo with OCR, docs/bench/ocr.md).
    pub fn sizes(&self, device: Device) -> OcrSizes {
        match self.ocr_sizes {
            OcrSizes::Auto if device.is_cuda() => OcrSizes::Declared,
            OcrSizes::Auto => OcrSizes::Exact,
            sizes => sizes,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(32..=2048).contains(&self.ocr_resolution) {
            return Err(ConfigError(format!(
                "CLIPFN_OCR_RESOLUTION must be 32 to 2048 (the detector's short side), got {}",
                self.ocr_resolution
            )));
        }
        if !(0.0..=1.0).contains(&self.ocr_min_score) {
            return Err(ConfigError(format!("CLIPFN_OCR_MIN_SCORE must be 0 to 1, got {}", self.ocr_min_score)));
        }
        if self.ocr_max_lines == 0 {
            return Err(ConfigError(
                "CLIPFN_OCR_MAX_LINES must be at least 1 (unset CLIPFN_OCR_MODEL for none)".into(),
            ));
        }
        Ok(())
    }
}
