//! Model folders as transformers.js and Optimum ship them (`Xenova/clip-vit-base-patch32`):
//! `onnx/vision_model.onnx` (fp32), `onnx/vision_model_fp16.onnx`, `onnx/vision_model_quantized.onnx`
//! (int8; some folders say `_int8` or `_uint8`), the same for `text_model`, and
//! `preprocessor_config.json`, `tokenizer.json` and `config.json` beside them.
//!
//! One rule picks a tower's file for the precision asked and the provider in use, so every tower
//! of a folder follows `CLIPFN_PRECISION` alike.

use super::ModelError;
use crate::settings::{Device, Precision, Weights};

/// Towers, named as the folder names their files (`onnx/{tower}[_suffix].onnx`).
pub const VISION: &str = "vision_model";
pub const TEXT: &str = "text_model";
/// Files beside the towers.
pub const PREPROCESSOR_CONFIG: &str = "preprocessor_config.json";
pub const TOKENIZER: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
/// transformers' `config.json`: the model's family, and SigLIP's logit scale and bias.
pub const CONFIG: &str = "config.json";
/// The whole model (both towers and the scoring), read only for SigLIP's logit scale and bias.
pub const FULL_MODEL: &str = "onnx/model.onnx";

/// The precision a file's name says by the folders' convention; fp32 when it says none.
pub fn weights_of_file(name: &str) -> Weights {
    let stem = name.rsplit('/').next().unwrap_or(name).trim_end_matches(".onnx");
    [Weights::Fp16, Weights::Int8]
        .into_iter()
        .find(|w| suffixes(*w).iter().any(|suffix| stem.ends_with(suffix)))
        .unwrap_or(Weights::Fp32)
}

/// File-name suffixes under `onnx/`, preferred first.
fn suffixes(weights: Weights) -> &'static [&'static str] {
    match weights {
        Weights::Fp32 => &[""],
        Weights::Fp16 => &["_fp16"],
        Weights::Int8 => &["_quantized", "_int8", "_uint8"],
    }
}

/// The file of a tower that runs, relative to its folder, and its precision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub file: String,
    pub precision: Weights,
}

/// A listed model folder.
#[derive(Debug, Clone)]
pub struct ModelFolder {
    /// Path or URI, ending in '/'.
    location: String,
    /// Paths relative to `location`, sorted.
    files: Vec<String>,
}

impl ModelFolder {
    pub fn new(location: &str, mut files: Vec<String>) -> Self {
        files.sort();
        let location = format!("{}/", location.trim_end_matches('/'));
        ModelFolder { location, files }
    }

    /// Where `file` (relative to the folder) lives.
    pub fn locate(&self, file: &str) -> String {
        format!("{}{file}", self.location)
    }

    pub fn has(&self, file: &str) -> bool {
        self.files.iter().any(|f| f == file)
    }

    /// The folder's name: the model id clients see.
    pub fn name(&self) -> &str {
        self.location.trim_end_matches('/').rsplit('/').next().unwrap_or(&self.location)
    }

    /// The file of `tower` to run. `auto` takes fp16 on CUDA and int8 on CPU, and fp32 when the
    /// folder lacks that variant; an explicit precision that the folder lacks is an error that
    /// lists what is there.
    pub fn pick(&self, tower: &str, wanted: Precision, device: Device) -> Result<Variant, ModelError> {
        let (first, fallback) = match wanted {
            Precision::Auto if device.is_cuda() => (Weights::Fp16, Some(Weights::Fp32)),
            Precision::Auto => (Weights::Int8, Some(Weights::Fp32)),
            Precision::Exactly(weights) => (weights, None),
        };
        [Some(first), fallback].into_iter().flatten().find_map(|precision| self.find(tower, precision)).ok_or_else(
            || {
                let asked = match wanted {
                    Precision::Auto => format!("no {tower} (looked for onnx/{tower}.onnx and its variants)"),
                    _ => format!("CLIPFN_PRECISION={}: no {} {tower}", first.as_str(), first.as_str()),
                };
                let found = if self.files.is_empty() { "nothing".to_string() } else { self.files.join(", ") };
                ModelError::Folder(format!("{asked} in {}; found {found}", self.location))
            },
        )
    }

    /// Whether the folder has any variant of `tower`.
    pub fn has_tower(&self, tower: &str) -> bool {
        [Weights::Fp32, Weights::Fp16, Weights::Int8].into_iter().any(|w| self.find(tower, w).is_some())
    }

    fn find(&self, tower: &str, precision: Weights) -> Option<Variant> {
        suffixes(precision)
            .iter()
            .map(|suffix| format!("onnx/{tower}{suffix}.onnx"))
            .find(|file| self.has(file))
            .map(|file| Variant { file, precision })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(on_cuda: bool) -> Device {
        if on_cuda { Device::Cuda } else { Device::Cpu }
    }

    const FP32: Precision = Precision::Exactly(Weights::Fp32);
    const FP16: Precision = Precision::Exactly(Weights::Fp16);
    const INT8: Precision = Precision::Exactly(Weights::Int8);

    fn folder(files: &[&str]) -> ModelFolder {
        ModelFolder::new("gs://models/clip-vit-b32", files.iter().map(|f| f.to_string()).collect())
    }

    const ALL: &[&str] = &[
        "config.json",
        "onnx/text_model.onnx",
        "onnx/vision_model.onnx",
        "onnx/vision_model_fp16.onnx",
        "onnx/vision_model_quantized.onnx",
        "preprocessor_config.json",
    ];

    fn picked(folder: &ModelFolder, wanted: Precision, on_cuda: bool) -> String {
        folder.pick(VISION, wanted, device(on_cuda)).unwrap().file
    }

    // The provider is an input here: CUDA cannot run on the test machines, so its choice is tested
    // as the rule it is.
    #[test]
    fn auto_follows_the_provider() {
        let all = folder(ALL);
        assert_eq!(all.pick(VISION, Precision::Auto, device(false)).unwrap().precision, Weights::Int8);
        assert_eq!(picked(&all, Precision::Auto, false), "onnx/vision_model_quantized.onnx");
        assert_eq!(picked(&all, Precision::Auto, true), "onnx/vision_model_fp16.onnx");
        let fp32_only = folder(&["onnx/vision_model.onnx"]);
        assert_eq!(fp32_only.pick(VISION, Precision::Auto, device(true)).unwrap().precision, Weights::Fp32);
        assert_eq!(picked(&fp32_only, Precision::Auto, false), "onnx/vision_model.onnx");
    }

    #[test]
    fn an_explicit_precision_wins_over_the_provider() {
        let all = folder(ALL);
        assert_eq!(picked(&all, FP32, true), "onnx/vision_model.onnx");
        assert_eq!(picked(&all, FP16, false), "onnx/vision_model_fp16.onnx");
        assert_eq!(picked(&all, INT8, true), "onnx/vision_model_quantized.onnx");
    }

    #[test]
    fn int8_takes_the_names_folders_use() {
        let uint8 = folder(&["onnx/vision_model.onnx", "onnx/vision_model_uint8.onnx", "onnx/vision_model_int8.onnx"]);
        assert_eq!(picked(&uint8, INT8, false), "onnx/vision_model_int8.onnx");
        assert_eq!(
            picked(&folder(&["onnx/vision_model_uint8.onnx"]), Precision::Auto, false),
            "onnx/vision_model_uint8.onnx"
        );
    }

    #[test]
    fn a_missing_variant_names_what_is_there() {
        let message = folder(&["onnx/vision_model.onnx", "preprocessor_config.json"])
            .pick(VISION, FP16, device(true))
            .unwrap_err()
            .to_string();
        assert!(message.contains("CLIPFN_PRECISION=fp16"), "{message}");
        assert!(message.contains("gs://models/clip-vit-b32/"), "{message}");
        assert!(message.contains("onnx/vision_model.onnx, preprocessor_config.json"), "{message}");
        let none = folder(&["README.md"]).pick(TEXT, Precision::Auto, device(false)).unwrap_err().to_string();
        assert!(none.contains("no text_model") && none.contains("README.md"), "{none}");
    }

    #[test]
    fn towers_pick_alike() {
        let all = folder(ALL);
        assert_eq!(all.pick(TEXT, Precision::Auto, device(false)).unwrap().file, "onnx/text_model.onnx");
        assert!(all.has_tower(TEXT) && !folder(&["onnx/vision_model.onnx"]).has_tower(TEXT));
        assert_eq!(all.name(), "clip-vit-b32");
        assert_eq!(all.locate(PREPROCESSOR_CONFIG), "gs://models/clip-vit-b32/preprocessor_config.json");
    }

    #[test]
    fn single_files_are_named_alike() {
        assert_eq!(weights_of_file("gs://m/vision_model_quantized.onnx"), Weights::Int8);
        assert_eq!(weights_of_file("/m/clip_fp16.onnx"), Weights::Fp16);
        assert_eq!(weights_of_file("/m/clip-test.onnx"), Weights::Fp32);
    }
}
