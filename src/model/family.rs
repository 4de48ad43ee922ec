//! The model's family, and with it the rule `/v1/classify` scores by: CLIP's softmax, or SigLIP's
//! sigmoid with the model's own learned `logit_scale` and `logit_bias`.
//!
//! A folder's `config.json` names the family (`model_type`, or `clipfn.family` where an export
//! writes one); a SigLIP family's two numbers come from `config.json` (as
//! `infra/export_clip_onnx.py --family` writes them), else from the initialisers of a full
//! `onnx/model.onnx` (a local file is read by seeking past the weights; one in an object store is
//! fetched whole, once, at start-up). A SigLIP folder that has neither still embeds, but cannot
//! classify: scoring it by CLIP's rule would give confident, meaningless numbers.

use std::io::Cursor;

use anyhow::Context;
use serde_json::Value;

use super::{
    ModelData,
    files::{open_folder, read_weights},
    folder::{CONFIG, FULL_MODEL},
    initializers,
};
use crate::{embedding::Scoring, settings::is_folder, storage::Storage};

/// What the folder says about the model's family.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Family {
    /// `config.json`'s `model_type` (`clip`, `siglip`, `siglip2`, ...); `clip` without one.
    pub name: String,
    /// How `/v1/classify` scores; `None` for a SigLIP folder without its logit scale and bias.
    pub scoring: Option<Scoring>,
    /// Where the scoring comes from, or why there is none.
    pub scoring_from: String,
}

impl Family {
    /// CLIP, scored as CLIP is.
    pub fn clip(name: String) -> Self {
        Family { name, scoring: Some(Scoring::CLIP), scoring_from: "CLIP's logit scale (100)".into() }
    }

    /// The scoring rule, or why this model cannot classify.
    pub fn scoring(&self) -> Result<Scoring, String> {
        self.scoring.ok_or_else(|| {
            format!("this {} model cannot classify: {}; it still embeds photos and texts", self.name, self.scoring_from)
        })
    }
}

/// Reads the family of the model `CLIPFN_MODEL` names: CLIP for a single file or a folder without
/// `config.json`.
pub async fn read_family(storage: &Storage, model: &str) -> anyhow::Result<Family> {
    if !is_folder(model) {
        return Ok(Family::clip("clip".into()));
    }
    let folder = open_folder(storage, model).await?;
    if !folder.has(CONFIG) {
        return Ok(Family::clip("clip".into()));
    }
    let location = folder.locate(CONFIG);
    let bytes = storage.read(&location).await.with_context(|| format!("reading {location}"))?;
    let config: Value = serde_json::from_slice(&bytes).with_context(|| format!("{location}: not JSON"))?;
    let name = family_name(&config).with_context(|| location.clone())?;
    if !name.starts_with("siglip") {
        return Ok(Family::clip(name));
    }
    if let Some(scoring) = config_logits(&config).with_context(|| location.clone())? {
        return Ok(Family { name, scoring: Some(scoring), scoring_from: CONFIG.into() });
    }
    let missing = format!("{CONFIG} has no logit_scale and logit_bias");
    if !folder.has(FULL_MODEL) {
        return Ok(Family { name, scoring: None, scoring_from: format!("{missing}, and there is no {FULL_MODEL}") });
    }
    let full = read_weights(storage, &folder.locate(FULL_MODEL)).await?;
    let found = tokio::task::spawn_blocking(move || {
        let names = ["logit_scale", "logit_bias"];
        match full {
            ModelData::File(path) => initializers::scalars(std::fs::File::open(path)?, &names),
            ModelData::Bytes(bytes) => initializers::scalars(Cursor::new(bytes), &names),
        }
    })
    .await?;
    Ok(match found {
        Ok(found) => match (found.get("logit_scale"), found.get("logit_bias")) {
            (Some(&scale), Some(&bias)) => {
                Family { name, scoring: Some(Scoring::siglip(scale, bias)), scoring_from: FULL_MODEL.into() }
            }
            _ => Family {
                name,
                scoring: None,
                scoring_from: format!("{missing}, nor has {FULL_MODEL} float initialisers of those names"),
            },
        },
        Err(e) => Family { name, scoring: None, scoring_from: format!("{missing}, and {FULL_MODEL}: {e}") },
    })
}

/// `clipfn.family`, else `model_type`, else `siglip` for open_clip's SigLIP configs (Immich's
/// exports: `init_logit_bias` is there, and only its initial value), else `clip`.
fn family_name(config: &Value) -> anyhow::Result<String> {
    match config.get("clipfn.family").or_else(|| config.get("model_type")) {
        None | Some(Value::Null) if config.get("init_logit_bias").is_some() => Ok("siglip".into()),
        None | Some(Value::Null) => Ok("clip".into()),
        Some(Value::String(name)) => Ok(name.clone()),
        Some(other) => anyhow::bail!("model_type {other} is not a name"),
    }
}

/// SigLIP's rule from `config.json`'s raw `logit_scale` and `logit_bias`, when it has both.
fn config_logits(config: &Value) -> anyhow::Result<Option<Scoring>> {
    let number = |key: &str| match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64().map(|v| v as f32)),
        Some(other) => Err(anyhow::anyhow!("'{key}': {other} is not a number")),
    };
    Ok(match (number("logit_scale")?, number("logit_bias")?) {
        (Some(scale), Some(bias)) => Some(Scoring::siglip(scale, bias)),
        (None, None) => None,
        (Some(_), None) => anyhow::bail!("'logit_scale' without 'logit_bias': SigLIP's scores need both"),
        (None, Some(_)) => anyhow::bail!("'logit_bias' without 'logit_scale': SigLIP's scores need both"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn config_names_the_family_and_its_numbers() {
        let siglip2 = json!({"model_type": "siglip2", "logit_scale": 2.0, "logit_bias": -1.25});
        assert_eq!(family_name(&siglip2).unwrap(), "siglip2");
        assert_eq!(config_logits(&siglip2).unwrap(), Some(Scoring::siglip(2.0, -1.25)));
        assert_eq!(family_name(&json!({"clipfn.family": "siglip", "model_type": "x"})).unwrap(), "siglip");
        assert_eq!(family_name(&json!({})).unwrap(), "clip");
        let open_clip_siglip = json!({"embed_dim": 768, "init_logit_bias": -10, "vision_cfg": {}});
        assert_eq!(family_name(&open_clip_siglip).unwrap(), "siglip");
        assert_eq!(config_logits(&open_clip_siglip).unwrap(), None);
        assert_eq!(config_logits(&json!({"model_type": "siglip"})).unwrap(), None);
        let bad = config_logits(&json!({"logit_scale": "2.0", "logit_bias": 1})).unwrap_err().to_string();
        assert!(bad.contains("'logit_scale'"), "{bad}");
        assert!(config_logits(&json!({"logit_scale": 2.0})).unwrap_err().to_string().contains("'logit_bias'"));
        let none = Family { name: "siglip".into(), scoring: None, scoring_from: "config.json has none".into() };
        assert!(none.scoring().unwrap_err().contains("siglip model cannot classify: config.json has none"));
    }
}
