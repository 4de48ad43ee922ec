//! Settings: every knob comes from the environment (`CLIPFN_*` plus the standard `PORT`), read once
//! at start-up through `envy` and validated there, so a bad deployment fails before it takes traffic.
//!
//! The variables are one flat namespace, as a deployment sets them; in the code they are grouped
//! by who needs them, and each part gets only its group. Each group checks its own values; the
//! checks that span groups are here. Each group's file lists its variables by their full names
//! (`VARIABLES`, beside the struct); `variables` holds the lists to the structs' fields, and
//! `unknown` names the `CLIPFN_*` variables that nothing reads (a misspelt setting, most likely).

mod choices;
mod faces;
mod limits;
mod location;
mod model;
mod objects;
mod ocr;
mod server;
mod signals;
mod sources;
mod text;
mod unknown;
mod variables;

use serde::de::DeserializeOwned;

pub use self::{
    choices::{
        ArenaExtend, BatchPadding, ConvSearch, Device, LogFormat, Normalize, OcrSizes, Placement, Precision, Provider,
        Weights,
    },
    faces::FaceSettings,
    limits::Limits,
    location::is_folder,
    model::ModelSettings,
    objects::ObjectSettings,
    ocr::OcrSettings,
    server::ServerSettings,
    signals::SignalSettings,
    sources::SourceSettings,
    text::TextSettings,
    unknown::{TOOLING, TOOLING_FAMILIES, UnknownVariable, unknown_variables},
    variables::variables,
};

const MIB: u64 = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub limits: Limits,
    pub model: ModelSettings,
    pub sources: SourceSettings,
    pub text: TextSettings,
    pub signals: SignalSettings,
    pub faces: FaceSettings,
    pub ocr: OcrSettings,
    pub objects: ObjectSettings,
}

/// A start-up configuration problem, worded to name the variable to fix.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(String);

impl Settings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(std::env::vars())
    }

    /// Reads settings from any set of variables (tests pass their own).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        let settings = Settings {
            server: group(&vars)?,
            limits: group(&vars)?,
            model: group(&vars)?,
            sources: group(&vars)?,
            text: group(&vars)?,
            signals: group(&vars)?,
            faces: group(&vars)?,
            ocr: group(&vars)?,
            objects: group(&vars)?,
        };
        settings.server.validate()?;
        settings.limits.validate()?;
        settings.model.validate()?;
        settings.sources.validate()?;
        settings.text.validate()?;
        settings.signals.validate()?;
        settings.faces.validate()?;
        settings.ocr.validate()?;
        settings.objects.validate()?;
        settings.validate()?;
        Ok(settings)
    }

    /// The checks between groups: label sets and a tokenizer need a text tower; the ranking's head
    /// is one of the heads.
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(head) = &self.signals.rank_head {
            let heads: Vec<String> = self.model.heads()?.into_iter().map(|(name, _)| name).collect();
            if !heads.contains(head) {
                return Err(ConfigError(format!(
                    "CLIPFN_RANK_HEAD names head '{head}', but CLIPFN_HEADS has {}",
                    if heads.is_empty() { "none".to_string() } else { format!("only {}", heads.join(", ")) }
                )));
            }
        }
        // A model folder may hold the text tower too; whether it does is known once it is listed.
        let text_tower = self.text.text_model.is_some() || is_folder(&self.model.model);
        if self.text.labels.is_some() && !text_tower {
            return Err(ConfigError(
                "CLIPFN_LABELS needs CLIPFN_TEXT_MODEL (or a model folder with a text tower): label sets are embedded by \
                 the text model"
                    .into(),
            ));
        }
        if self.text.text_tokenizer.is_some() && !text_tower {
            return Err(ConfigError(
                "CLIPFN_TEXT_TOKENIZER needs CLIPFN_TEXT_MODEL (or a model folder with a text tower), the model it \
                 tokenizes for"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// One group, read from every `CLIPFN_*` variable (each group takes the fields it knows).
fn group<T: DeserializeOwned>(vars: &[(String, String)]) -> Result<T, ConfigError> {
    envy::prefixed("CLIPFN_").from_iter(vars.iter().cloned()).map_err(|e| ConfigError(explain(e)))
}

/// The CPUs this process may use: its affinity mask and its cgroup's CPU quota (v1 or v2, as
/// std reads them), rounded up; 2 when neither can be read.
fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The first variable of `values` that is 0, as an error: none of these may be.
fn require_positive(values: &[(&str, u64)]) -> Result<(), ConfigError> {
    match values.iter().find(|(_, value)| *value == 0) {
        Some((name, _)) => Err(ConfigError(format!("{name} must be greater than 0"))),
        None => Ok(()),
    }
}

/// envy names fields, not variables; say the variable a user has to fix.
fn explain(e: envy::Error) -> String {
    match e {
        envy::Error::MissingValue(field) => format!("CLIPFN_{} is required", field.to_ascii_uppercase()),
        envy::Error::Custom(msg) => match msg.rsplit_once(" provided by ") {
            Some((what, field)) => format!("CLIPFN_{}: {what}", field.to_ascii_uppercase()),
            None => msg,
        },
    }
}

/// The Google Cloud project that JSON log lines name in `logging.googleapis.com/trace`
/// (`projects/P/traces/T`, the form Cloud Logging links to Cloud Trace). `GOOGLE_CLOUD_PROJECT` is
/// the variable Google's own libraries read; Cloud Run does not set it by itself.
pub fn gcp_project() -> Option<String> {
    std::env::var("GOOGLE_CLOUD_PROJECT").ok().map(|p| p.trim().to_string()).filter(|p| !p.is_empty())
}

/// `PORT` is Cloud Run's contract, so it stays unprefixed.
pub fn port() -> Result<u16, ConfigError> {
    match std::env::var("PORT") {
        Err(_) => Ok(8080),
        Ok(v) => v.trim().parse().map_err(|_| ConfigError(format!("PORT must be a port number, not '{v}'"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_apply_and_lists_split() {
        let s =
            Settings::from_vars(vars(&[("CLIPFN_MODEL", "/m.onnx"), ("CLIPFN_ALLOWED_SOURCES", "gs://a/x, s3://b ,")]))
                .unwrap();
        assert_eq!((s.model.batch_size(Device::Cuda), s.model.batch_size(Device::Cpu)), (64, 8));
        let budget = s.limits.max_fetched_bytes();
        assert!(
            budget >= s.limits.max_image_bytes && budget == (16 * MIB * s.limits.decode_threads() as u64).max(25 * MIB)
        );
        assert_eq!(s.limits.max_images, 100);
        assert_eq!(s.limits.max_image_bytes, 25 * MIB);
        assert_eq!(s.model.provider, Provider::Auto);
        assert_eq!(s.model.precision, Precision::Auto);
        assert_eq!(s.sources.allowed_sources, vec!["gs://a/x", "s3://b"]);
        assert_eq!(s.server.max_inline_body_bytes, 32 * MIB as usize);
        assert!(!s.sources.allow_private_sources);
        assert!(!s.model.cpu_arena, "the CPU arena holds the largest batch's memory for good");
        let text = s.text;
        assert_eq!((text.text_model, text.max_texts, text.max_text_chars, text.text_cache), (None, 256, 2000, 4096));
        assert_eq!((text.text_tokenizer, text.text_max_tokens), (None, 128));
    }

    #[test]
    fn errors_name_the_variable() {
        let missing = Settings::from_vars(vars(&[])).unwrap_err().to_string();
        assert!(missing.contains("CLIPFN_MODEL"), "{missing}");
        let bad_number =
            Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_BATCH_SIZE", "lots")])).unwrap_err().to_string();
        assert!(bad_number.contains("CLIPFN_BATCH_SIZE"), "{bad_number}");
        let bad_provider =
            Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_PROVIDER", "gpu")])).unwrap_err().to_string();
        assert!(bad_provider.contains("CLIPFN_PROVIDER") && bad_provider.contains("gpu"), "{bad_provider}");
        let zero =
            Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_BATCH_SIZE", "0")])).unwrap_err().to_string();
        assert!(zero.contains("CLIPFN_BATCH_SIZE"), "{zero}");
        // A budget of 0 would bound nothing (every reservation is capped at the budget).
        let no_budget = Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_MAX_DECODE_BYTES", "0")]))
            .unwrap_err()
            .to_string();
        assert!(no_budget.contains("CLIPFN_MAX_DECODE_BYTES"), "{no_budget}");
        let bad_precision =
            Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_PRECISION", "bf16")])).unwrap_err().to_string();
        assert!(bad_precision.contains("CLIPFN_PRECISION") && bad_precision.contains("bf16"), "{bad_precision}");
        let bad_format =
            Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_LOG_FORMAT", "xml")])).unwrap_err().to_string();
        assert!(bad_format.contains("CLIPFN_LOG_FORMAT") && bad_format.contains("xml"), "{bad_format}");
        let labels_alone =
            Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_LABELS", "l.json")])).unwrap_err().to_string();
        assert!(labels_alone.contains("CLIPFN_TEXT_MODEL"), "{labels_alone}");
        let tokenizer_alone = Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_TEXT_TOKENIZER", "t.json")]))
            .unwrap_err()
            .to_string();
        assert!(tokenizer_alone.contains("CLIPFN_TEXT_MODEL"), "{tokenizer_alone}");
        let rank = |heads: &str| {
            Settings::from_vars(vars(&[
                ("CLIPFN_MODEL", "m"),
                ("CLIPFN_HEADS", heads),
                ("CLIPFN_RANK_HEAD", "aesthetic"),
            ]))
            .map(|s| s.signals.rank_head)
            .map_err(|e| e.to_string())
        };
        assert_eq!(rank("aesthetic=/h.onnx,nsfw=/n.onnx"), Ok(Some("aesthetic".into())));
        let unknown = rank("nsfw=/n.onnx").unwrap_err();
        assert!(unknown.contains("CLIPFN_RANK_HEAD") && unknown.contains("only nsfw"), "{unknown}");
        assert!(rank("").unwrap_err().contains("has none"));
        let similarity = Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_BURST_SIMILARITY", "1.5")]))
            .unwrap_err()
            .to_string();
        assert!(similarity.contains("CLIPFN_BURST_SIMILARITY"), "{similarity}");
    }

    #[test]
    fn log_format_is_read_in_either_case() {
        let json = Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_LOG_FORMAT", "JSON")])).unwrap();
        assert_eq!(json.server.log_format(), LogFormat::Json);
        let text = Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_LOG_FORMAT", "text")])).unwrap();
        assert_eq!(text.server.log_format(), LogFormat::Text);
    }
}
