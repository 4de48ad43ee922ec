//! Model folders in the two layouts users have:
//! - as transformers.js and Optimum ship them (`Xenova/clip-vit-base-patch32`):
//!   `onnx/vision_model.onnx` (fp32), `onnx/vision_model_fp16.onnx`, `onnx/vision_model_quantized.onnx`
//!   (int8; some folders say `_int8` or `_uint8`), the same for `text_model`, and
//!   `preprocessor_config.json`, `tokenizer.json` and `config.json` beside them;
//! - as Immich's model cache holds them (`<cache>/clip/ViT-B-32__openai`, read by Immich ML's
//!   `models/clip/`): `visual/model.onnx` with `visual/preprocess_cfg.json`, `textual/model.onnx`
//!   with `textual/tokenizer.json` and `textual/tokenizer_config.json`, and open_clip's
//!   `config.json` at the top. Immich's ONNX exports are fp32 only.
//!
//! One rule picks a tower's file for the precision asked and the provider in use, so every tower
//! of a folder follows `CLIPFN_PRECISION` alike.

use super::ModelError;
use crate::settings::{Device, Precision, Weights};

/// A tower, as each layout names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TowerName {
    /// transformers.js / Optimum: `onnx/{name}[_suffix].onnx`.
    optimum: &'static str,
    /// Immich: `{name}/model.onnx`, with the tower's own files beside it.
    immich: &'static str,
}

impl std::fmt::Display for TowerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.optimum)
    }
}

pub const VISION: TowerName = TowerName { optimum: "vision_model", immich: "visual" };
pub const TEXT: TowerName = TowerName { optimum: "text_model", immich: "textual" };
/// A tower's own files (see [`ModelFolder::beside`]).
pub const PREPROCESSOR_CONFIG: &str = "preprocessor_config.json";
/// open_clip's preprocessing, which Immich's exports keep beside the image tower.
pub const PREPROCESS_CFG: &str = "preprocess_cfg.json";
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

/// How a folder lays out its towers and their files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    Transformers,
    Immich,
}

/// A listed model folder.
#[derive(Debug, Clone)]
pub struct ModelFolder {
    /// Path or URI, ending in '/'.
    location: String,
    /// Paths relative to `location`, sorted.
    files: Vec<String>,
    export: Export,
}

impl ModelFolder {
    pub fn new(location: &str, mut files: Vec<String>) -> Self {
        files.sort();
        let location = format!("{}/", location.trim_end_matches('/'));
        let immich = |f: &String| [VISION, TEXT].iter().any(|t| *f == format!("{}/model.onnx", t.immich));
        let export = match files.iter().any(immich) && !files.iter().any(|f| f.starts_with("onnx/")) {
            true => Export::Immich,
            false => Export::Transformers,
        };
        ModelFolder { location, files, export }
    }

    pub fn export(&self) -> Export {
        self.export
    }

    /// Where a file of `tower` lives: beside the towers (transformers), or in the tower's own
    /// folder (Immich).
    pub fn beside(&self, tower: TowerName, file: &str) -> String {
        match self.export {
            Export::Transformers => file.to_string(),
            Export::Immich => format!("{}/{file}", tower.immich),
        }
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
    pub fn pick(&self, tower: TowerName, wanted: Precision, device: Device) -> Result<Variant, ModelError> {
        let (first, fallback) = match wanted {
            Precision::Auto if device.is_cuda() => (Weights::Fp16, Some(Weights::Fp32)),
            Precision::Auto => (Weights::Int8, Some(Weights::Fp32)),
            Precision::Exactly(weights) => (weights, None),
        };
        [Some(first), fallback].into_iter().flatten().find_map(|precision| self.find(tower, precision)).ok_or_else(
            || {
                let asked = match wanted {
                    Precision::Auto => format!("no {tower} (looked for {})", self.looked_for(tower)),
                    _ => {
                        let only = if self.export == Export::Immich { " (Immich's exports are fp32 only)" } else { "" };
                        format!("CLIPFN_PRECISION={}: no {} {tower}{only}", first.as_str(), first.as_str())
                    }
                };
                let found = if self.files.is_empty() { "nothing".to_string() } else { self.files.join(", ") };
                ModelError::Folder(format!("{asked} in {}; found {found}", self.location))
            },
        )
    }

    /// Whether the folder has any variant of `tower`.
    pub fn has_tower(&self, tower: TowerName) -> bool {
        [Weights::Fp32, Weights::Fp16, Weights::Int8].into_iter().any(|w| self.find(tower, w).is_some())
    }

    fn find(&self, tower: TowerName, precision: Weights) -> Option<Variant> {
        let files = match (self.export, precision) {
            (Export::Transformers, _) => {
                suffixes(precision).iter().map(|suffix| format!("onnx/{}{suffix}.onnx", tower.optimum)).collect()
            }
            (Export::Immich, Weights::Fp32) => vec![format!("{}/model.onnx", tower.immich)],
            (Export::Immich, _) => vec![],
        };
        files.into_iter().find(|file| self.has(file)).map(|file| Variant { file, precision })
    }

    fn looked_for(&self, tower: TowerName) -> String {
        match self.export {
            Export::Transformers => format!("onnx/{}.onnx and its variants", tower.optimum),
            Export::Immich => format!("{}/model.onnx", tower.immich),
        }
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

    /// Immich's `<cache>/clip/ViT-B-32__openai`.
    const IMMICH: &[&str] = &[
        "config.json",
        "textual/model.onnx",
        "textual/tokenizer.json",
        "textual/tokenizer_config.json",
        "visual/model.onnx",
        "visual/preprocess_cfg.json",
    ];

    #[test]
    fn immich_folders_are_read_in_their_own_layout() {
        let immich = ModelFolder::new("/cache/clip/ViT-B-32__openai", IMMICH.iter().map(|f| f.to_string()).collect());
        assert_eq!((immich.export(), immich.name()), (Export::Immich, "ViT-B-32__openai"));
        assert_eq!(immich.pick(VISION, Precision::Auto, device(false)).unwrap().file, "visual/model.onnx");
        assert_eq!(immich.pick(TEXT, Precision::Auto, device(true)).unwrap().precision, Weights::Fp32);
        assert_eq!(immich.beside(VISION, PREPROCESS_CFG), "visual/preprocess_cfg.json");
        assert_eq!(immich.beside(TEXT, TOKENIZER), "textual/tokenizer.json");
        assert_eq!(folder(ALL).beside(TEXT, TOKENIZER), "tokenizer.json");
        let int8 = immich.pick(VISION, INT8, device(false)).unwrap_err().to_string();
        assert!(int8.contains("fp32 only") && int8.contains("visual/model.onnx"), "{int8}");
        let visual_only = folder(&["visual/model.onnx", "visual/preprocess_cfg.json"]);
        assert!(visual_only.has_tower(VISION) && !visual_only.has_tower(TEXT));
        let none = visual_only.pick(TEXT, Precision::Auto, device(false)).unwrap_err().to_string();
        assert!(none.contains("looked for textual/model.onnx"), "{none}");
        // A transformers folder that also holds a visual/ folder is still read as transformers'.
        assert_eq!(folder(&["onnx/vision_model.onnx", "visual/model.onnx"]).export(), Export::Transformers);
    }

    #[test]
    fn single_files_are_named_alike() {
        assert_eq!(weights_of_file("gs://m/vision_model_quantized.onnx"), Weights::Int8);
        assert_eq!(weights_of_file("/m/clip_fp16.onnx"), Weights::Fp16);
        assert_eq!(weights_of_file("/m/clip-test.onnx"), Weights::Fp32);
    }
}
