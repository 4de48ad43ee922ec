//! A model folder's `preprocessor_config.json` (Hugging Face's CLIP and SigLIP image processors),
//! or the `preprocess_cfg.json` (open_clip's) of Immich's exports, read into the preprocess
//! stage's [`Transform`], so CLIP-family models other than ViT-B/32 (B/16, L/14-336, fashion
//! CLIPs, SigLIP's mean and std) preprocess as they were trained.
//!
//! Every field that changes pixels is honoured or refused at start-up: a model fed photos
//! prepared another way answers with plausible but wrong embeddings, which nobody would notice.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{
    ModelError,
    folder::{PREPROCESS_CFG, PREPROCESSOR_CONFIG},
};
use crate::preprocess::{Filter, Resize, Transform};

/// Fields that describe the file, not the pixels.
const INFORMATIONAL: &[&str] =
    &["image_processor_type", "feature_extractor_type", "processor_class", "_processor_class"];

#[derive(Deserialize)]
struct Config {
    do_resize: Option<bool>,
    // Read as values first, so that a malformed one is refused by its name (see [`size`]).
    size: Option<Value>,
    do_center_crop: Option<bool>,
    crop_size: Option<Value>,
    resample: Option<u32>,
    do_rescale: Option<bool>,
    rescale_factor: Option<f32>,
    do_normalize: Option<bool>,
    image_mean: Option<Channels>,
    image_std: Option<Channels>,
    do_convert_rgb: Option<bool>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

/// `224`, `{"shortest_edge": 224}` or `{"height": 224, "width": 224}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Size {
    Side(u32),
    Edges { shortest_edge: Option<u32>, height: Option<u32>, width: Option<u32>, longest_edge: Option<u32> },
}

/// One value per channel, or one for all.
#[derive(Deserialize)]
#[serde(untagged)]
enum Channels {
    Each([f32; 3]),
    All(f32),
}

impl Channels {
    fn values(&self) -> [f32; 3] {
        match self {
            Channels::Each(values) => *values,
            Channels::All(value) => [*value; 3],
        }
    }
}

/// A preprocessing file's reader: [`parse`] or [`parse_open_clip`].
pub type Reader = fn(&[u8]) -> Result<Transform, ModelError>;

/// Reads `preprocessor_config.json`, or says which option clipfn cannot honour.
pub fn parse(bytes: &[u8]) -> Result<Transform, ModelError> {
    let config: Config = serde_json::from_slice(bytes).map_err(|e| refuse(format!("not a valid config: {e}")))?;
    for (key, value) in &config.other {
        // An option of another processor is harmless only when it is off.
        let harmless =
            INFORMATIONAL.contains(&key.as_str()) || (key.starts_with("do_") && *value == Value::Bool(false));
        if !harmless {
            return Err(refuse(format!("'{key}': {value} is an option clipfn cannot honour")));
        }
    }
    if config.do_resize == Some(false) {
        return Err(refuse("do_resize=false: photos of any size cannot go into a fixed-size model".into()));
    }
    if config.do_convert_rgb == Some(false) {
        return Err(refuse("do_convert_rgb=false: clipfn always feeds RGB".into()));
    }
    let crop_size = config.crop_size.as_ref().map(|v| size("crop_size", v)).transpose()?;
    let resize = match size("size", config.size.as_ref().ok_or_else(|| refuse("'size' is missing".into()))?)? {
        Size::Side(side) | Size::Edges { shortest_edge: Some(side), height: None, width: None, longest_edge: None } => {
            Resize::ShortestEdge(side)
        }
        Size::Edges { shortest_edge: None, height: Some(h), width: Some(w), longest_edge: None } if h == w => {
            Resize::Square(h)
        }
        _ => {
            return Err(refuse(
                "'size' must be a number, {shortest_edge} or a square {height, width}: the model's input is square"
                    .into(),
            ));
        }
    };
    let crop = match (config.do_center_crop.unwrap_or(crop_size.is_some()), crop_size) {
        (false, _) => None,
        (true, Some(Size::Side(side))) => Some(side),
        (true, Some(Size::Edges { height: Some(h), width: Some(w), shortest_edge: None, longest_edge: None }))
            if h == w =>
        {
            Some(h)
        }
        (true, _) => return Err(refuse("'crop_size' must be a number or a square {height, width}".into())),
    };
    let resize_side = match resize {
        Resize::ShortestEdge(side) | Resize::Square(side) => side,
    };
    match crop {
        None if matches!(resize, Resize::ShortestEdge(_)) => {
            return Err(refuse("a shortest_edge resize without a center crop gives non-square input".into()));
        }
        Some(side) if side > resize_side => {
            return Err(refuse(format!("crop_size {side} is larger than the resized photo ({resize_side})")));
        }
        Some(0) => return Err(refuse("crop_size must be greater than 0".into())),
        _ if resize_side == 0 => return Err(refuse("'size' must be greater than 0".into())),
        _ => {}
    }
    let filter = match config.resample {
        Some(3) | None => Filter::Bicubic,
        Some(2) => Filter::Bilinear,
        Some(other) => {
            return Err(refuse(format!("resample={other}: clipfn resizes with 2 (bilinear) or 3 (bicubic) only")));
        }
    };
    let rescale = if config.do_rescale == Some(false) { 1.0 } else { config.rescale_factor.unwrap_or(1.0 / 255.0) };
    let (mean, std) = if config.do_normalize == Some(false) {
        ([0.0; 3], [1.0; 3])
    } else {
        let mean = config.image_mean.ok_or_else(|| refuse("'image_mean' is missing".into()))?;
        let std = config.image_std.ok_or_else(|| refuse("'image_std' is missing".into()))?;
        statistics(mean, std).map_err(refuse)?
    };
    Ok(Transform { resize, crop, filter, rescale, mean, std })
}

/// open_clip's `PreprocessCfg`, as Immich's exports write it (`visual/preprocess_cfg.json`); the
/// defaults are open_clip's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenClipConfig {
    size: Value,
    mean: Channels,
    std: Channels,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    interpolation: Option<String>,
    #[serde(default)]
    resize_mode: Option<String>,
    /// Only the `longest` resize pads, and that one is refused.
    #[serde(default, rename = "fill_color")]
    _fill_color: Option<Value>,
}

/// Reads open_clip's `preprocess_cfg.json` as open_clip's eval transform applies it: `shortest`
/// resizes the short side and center-crops, `squash` resizes to the square; then /255, mean, std.
/// Immich ML v2.5.6 itself always resizes the short side with bicubic whatever the file says;
/// clipfn follows the file, as the model was trained (docs/deploy.md).
pub fn parse_open_clip(bytes: &[u8]) -> Result<Transform, ModelError> {
    let refuse = |reason: String| ModelError::Preprocessor { file: PREPROCESS_CFG, reason };
    let config: OpenClipConfig =
        serde_json::from_slice(bytes).map_err(|e| refuse(format!("not open_clip's preprocessing: {e}")))?;
    let side = match &config.size {
        Value::Number(n) => n.as_u64(),
        Value::Array(sides) => match sides.as_slice() {
            [h, w] if h == w => h.as_u64(),
            _ => None,
        },
        _ => None,
    }
    .and_then(|side| u32::try_from(side).ok())
    .filter(|side| *side > 0)
    .ok_or_else(|| refuse(format!("'size': {} is not a side or a square [h, w] in pixels", config.size)))?;
    if let Some(mode) = config.mode.as_deref().filter(|mode| *mode != "RGB") {
        return Err(refuse(format!("mode {mode}: clipfn always feeds RGB")));
    }
    let filter = match config.interpolation.as_deref().unwrap_or("bicubic") {
        "bicubic" => Filter::Bicubic,
        "bilinear" => Filter::Bilinear,
        other => return Err(refuse(format!("interpolation {other}: clipfn resizes with bicubic or bilinear only"))),
    };
    let (resize, crop) = match config.resize_mode.as_deref().unwrap_or("shortest") {
        "shortest" => (Resize::ShortestEdge(side), Some(side)),
        "squash" => (Resize::Square(side), None),
        other => return Err(refuse(format!("resize_mode {other}: clipfn resizes by the shortest side or squashes"))),
    };
    let (mean, std) = statistics(config.mean, config.std).map_err(refuse)?;
    Ok(Transform { resize, crop, filter, rescale: 1.0 / 255.0, mean, std })
}

/// The normalisation's mean and std, if they can be used.
fn statistics(mean: Channels, std: Channels) -> Result<([f32; 3], [f32; 3]), String> {
    let (mean, std) = (mean.values(), std.values());
    if std.iter().any(|s| !s.is_normal() || *s < 0.0) || mean.iter().any(|m| !m.is_finite()) {
        return Err(format!("mean {mean:?} / std {std:?} are not usable statistics"));
    }
    Ok((mean, std))
}

/// A `size` or `crop_size` value: a number, or an object of numbers.
fn size(key: &str, value: &Value) -> Result<Size, ModelError> {
    Size::deserialize(value).map_err(|_| {
        refuse(format!(
            "'{key}': {value} is not a number of pixels, nor {{shortest_edge}} or {{height, width}} in numbers"
        ))
    })
}

fn refuse(reason: String) -> ModelError {
    ModelError::Preprocessor { file: PREPROCESSOR_CONFIG, reason }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::preprocess::{CLIP_MEAN, CLIP_STD};

    fn read(config: Value) -> Result<Transform, String> {
        parse(&serde_json::to_vec(&config).unwrap()).map_err(|e| e.to_string())
    }

    /// `Xenova/clip-vit-base-patch32`'s file.
    fn clip_b32() -> Value {
        json!({
            "crop_size": 224, "do_center_crop": true, "do_normalize": true, "do_resize": true,
            "feature_extractor_type": "CLIPFeatureExtractor",
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
            "resample": 3, "size": 224
        })
    }

    #[test]
    fn clip_files_read_as_clip() {
        assert_eq!(read(clip_b32()).unwrap(), Transform::clip(224));
        let mut newer = clip_b32();
        newer["size"] = json!({"shortest_edge": 336});
        newer["crop_size"] = json!({"height": 336, "width": 336});
        newer["do_convert_rgb"] = json!(true);
        newer["do_rescale"] = json!(true);
        newer["rescale_factor"] = json!(0.00392156862745098);
        newer["image_processor_type"] = json!("CLIPImageProcessor");
        let l14 = read(newer).unwrap();
        assert_eq!((l14.resize, l14.crop, l14.side()), (Resize::ShortestEdge(336), Some(336), 336));
        assert_eq!((l14.mean, l14.std), (CLIP_MEAN, CLIP_STD));
    }

    #[test]
    fn siglip_files_squash_to_a_square() {
        let siglip = read(json!({
            "do_normalize": true, "do_rescale": true, "do_resize": true,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "image_processor_type": "SiglipImageProcessor", "processor_class": "SiglipProcessor",
            "resample": 2, "rescale_factor": 0.00392156862745098, "size": {"height": 256, "width": 256}
        }))
        .unwrap();
        assert_eq!((siglip.resize, siglip.crop, siglip.filter), (Resize::Square(256), None, Filter::Bilinear));
        assert_eq!((siglip.mean, siglip.std), ([0.5; 3], [0.5; 3]));
    }

    #[test]
    fn options_that_cannot_be_honoured_are_refused() {
        let cases = [
            ("resample", json!(0), "resample=0"),
            ("resample", json!(1), "resample=1"),
            ("do_resize", json!(false), "do_resize=false"),
            ("do_convert_rgb", json!(false), "do_convert_rgb"),
            ("do_pad", json!(true), "'do_pad'"),
            ("crop_pct", json!(0.9), "'crop_pct'"),
            ("size", json!({"height": 224, "width": 320}), "'size'"),
            ("size", json!({"longest_edge": 224}), "'size'"),
            ("size", json!({"height": "224", "width": 224}), "'size': {\"height\":\"224\""),
            ("size", json!("224"), "is not a number"),
            ("crop_size", json!(224.5), "'crop_size': 224.5"),
            ("crop_size", json!({"height": 200, "width": 224}), "'crop_size'"),
            ("crop_size", json!(256), "larger"),
            ("do_center_crop", json!(false), "non-square"),
            ("image_std", json!([0.5, 0.0, 0.5]), "not usable"),
        ];
        for (key, value, expected) in cases {
            let mut config = clip_b32();
            config[key] = value.clone();
            let message = read(config).expect_err(&format!("{key}={value} was accepted"));
            assert!(message.contains("preprocessor_config.json") && message.contains(expected), "{key}: {message}");
        }
        let mut no_mean = clip_b32();
        no_mean.as_object_mut().unwrap().remove("image_mean");
        assert!(read(no_mean).unwrap_err().contains("image_mean"));
        assert!(parse(b"{not json").is_err());
    }

    /// Immich's `visual/preprocess_cfg.json` of ViT-B-32__openai (its conftest's fixture).
    fn immich_b32() -> Value {
        json!({
            "size": [224, 224], "mode": "RGB", "mean": [0.48145466, 0.4578275, 0.40821073],
            "std": [0.26862954, 0.26130258, 0.27577711], "interpolation": "bicubic", "resize_mode": "shortest",
            "fill_color": 0
        })
    }

    fn read_open_clip(config: Value) -> Result<Transform, String> {
        parse_open_clip(&serde_json::to_vec(&config).unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn open_clip_files_read_as_open_clip_applies_them() {
        assert_eq!(read_open_clip(immich_b32()).unwrap(), Transform::clip(224));
        let siglip = read_open_clip(json!({
            "size": 256, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bilinear",
            "resize_mode": "squash"
        }))
        .unwrap();
        assert_eq!((siglip.resize, siglip.crop, siglip.filter), (Resize::Square(256), None, Filter::Bilinear));
        assert_eq!((siglip.mean, siglip.std, siglip.rescale), ([0.5; 3], [0.5; 3], 1.0 / 255.0));
        let cases = [
            ("size", json!([224, 256]), "'size'"),
            ("size", json!(0), "'size'"),
            ("size", json!("224"), "'size'"),
            ("mode", json!("L"), "mode L"),
            ("interpolation", json!("nearest"), "interpolation nearest"),
            ("resize_mode", json!("longest"), "resize_mode longest"),
            ("std", json!([0.5, 0.0, 0.5]), "not usable"),
            ("crop_pct", json!(0.9), "crop_pct"),
        ];
        for (key, value, expected) in cases {
            let mut config = immich_b32();
            config[key] = value.clone();
            let message = read_open_clip(config).expect_err(&format!("{key}={value} was accepted"));
            assert!(message.contains("preprocess_cfg.json") && message.contains(expected), "{key}: {message}");
        }
    }

    #[test]
    fn switched_off_options_are_harmless() {
        let mut config = clip_b32();
        config["do_pad"] = json!(false);
        config["do_normalize"] = json!(false);
        let plain = read(config).unwrap();
        assert_eq!((plain.mean, plain.std), ([0.0; 3], [1.0; 3]));
    }
}
