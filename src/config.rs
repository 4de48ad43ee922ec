//! Settings: every knob comes from the environment (`CLIPFN_*` plus the standard `PORT`), read once
//! at start-up through `envy` and validated there, so a bad deployment fails before it takes traffic.

use std::time::Duration;

use serde::{Deserialize, Deserializer, de::Error as _};

const MIB: u64 = 1024 * 1024;

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line with the fields Cloud Logging reads (`severity`, `message`,
    /// `logging.googleapis.com/trace`).
    Json,
    /// Human-readable lines for a terminal.
    Text,
}

/// Which ONNX Runtime execution provider runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// CUDA when it can be used, else CPU; the log and /readyz say which.
    Auto,
    /// CUDA or a start-up error.
    Cuda,
    Cpu,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Auto => "auto",
            Provider::Cuda => "cuda",
            Provider::Cpu => "cpu",
        }
    }
}

/// Which weights of a model folder run (`CLIPFN_PRECISION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// fp16 on CUDA, int8 on CPU, fp32 where the folder lacks that variant.
    Auto,
    Fp32,
    Fp16,
    Int8,
}

/// Where CLIP's normalisation (scale, mean, std, NCHW) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalize {
    /// `model` on CUDA, `cpu` on CPU.
    Auto,
    /// On the host, into float32 NCHW: exactly CLIP's input contract.
    Cpu,
    /// As ONNX ops on the execution provider: uint8 NHWC goes in (a quarter of the bytes).
    Model,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    /// Path or object URI of the ONNX CLIP image encoder, or of a model folder (transformers.js layout).
    pub model: String,
    /// Path or object URI of the same CLIP's ONNX text encoder; unset, the text endpoints say 404.
    #[serde(default)]
    pub text_model: Option<String>,
    /// Path or object URI of the text model's Hugging Face `tokenizer.json`; unset, CLIP's BPE.
    #[serde(default)]
    pub text_tokenizer: Option<String>,
    /// Tokens per text with a tokenizer.json (special tokens included), at most the file's own cap.
    #[serde(default = "defaults::text_max_tokens")]
    pub text_max_tokens: usize,
    /// Texts (or labels) per request.
    #[serde(default = "defaults::max_texts")]
    pub max_texts: usize,
    /// Characters per text.
    #[serde(default = "defaults::max_text_chars")]
    pub max_text_chars: usize,
    /// Path or object URI of the label sets' JSON file, embedded during warm-up.
    #[serde(default)]
    pub labels: Option<String>,
    /// Prompt embeddings kept for ad-hoc labels (LRU); 0 keeps none.
    #[serde(default = "defaults::text_cache")]
    pub text_cache: usize,
    /// Root that bare keys resolve against: `gs://bucket[/prefix]`, `s3://bucket[/prefix]`, `file:///dir`.
    #[serde(default)]
    pub store: Option<String>,
    /// Extra URI prefixes that full URIs may point into.
    #[serde(default, deserialize_with = "comma_list")]
    pub allowed_sources: Vec<String>,
    #[serde(default = "defaults::provider", deserialize_with = "provider")]
    pub provider: Provider,
    #[serde(default = "defaults::precision", deserialize_with = "precision")]
    pub precision: Precision,
    #[serde(default = "defaults::normalize", deserialize_with = "normalize")]
    pub normalize: Normalize,
    /// Photos per inference run; unset, see [`Settings::batch_size`].
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// How long the batcher waits for a batch to fill once it holds one photo.
    #[serde(default = "defaults::batch_wait_ms")]
    pub batch_wait_ms: u64,
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
    /// Photos admitted at once across all requests; past this a request gets 503 + Retry-After.
    #[serde(default = "defaults::max_queued_images")]
    pub max_queued_images: usize,
    /// Fetched photo bytes held in memory until decoded, across requests; fetches wait past it.
    /// Unset, see [`Settings::max_fetched_bytes`].
    #[serde(default)]
    pub max_fetched_bytes: Option<u64>,
    /// Memory that decodes may hold at once across requests (decoded pixels, a progressive JPEG's
    /// coefficients, read from each photo's header); a decode waits past it, and one larger than
    /// all of it runs alone. Unset: not bounded, each decode thread takes what its photo needs.
    #[serde(default)]
    pub max_decode_bytes: Option<u64>,
    #[serde(default = "defaults::max_body_bytes")]
    pub max_body_bytes: usize,
    /// Body size allowed to a request that carries `data:` URI photos.
    #[serde(default = "defaults::max_inline_body_bytes")]
    pub max_inline_body_bytes: usize,
    /// Lets `http(s)://` sources resolve to loopback and private addresses: for tests and local
    /// stacks only (the terraform never sets it).
    #[serde(default)]
    pub allow_private_sources: bool,
    /// `http(s)://` fetches in flight per host.
    #[serde(default = "defaults::max_fetches_per_host")]
    pub max_fetches_per_host: usize,
    #[serde(default = "defaults::request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Concurrent object fetches per process.
    #[serde(default = "defaults::fetch_concurrency")]
    pub fetch_concurrency: usize,
    #[serde(default = "defaults::fetch_timeout_ms")]
    pub fetch_timeout_ms: u64,
    #[serde(default = "defaults::fetch_retries")]
    pub fetch_retries: usize,
    /// Threads decoding and resizing; 0 means one per core.
    #[serde(default)]
    pub decode_threads: usize,
    /// ONNX Runtime intra-op threads on CPU; 0 lets ONNX Runtime pick.
    #[serde(default)]
    pub intra_threads: usize,
    /// ONNX Runtime's CPU memory arena: it saves allocations per batch but keeps the largest
    /// batch's memory for good, so it is off unless asked for (docs/design.md, "Memory").
    #[serde(default)]
    pub cpu_arena: bool,
    /// Overrides for models whose names or input size cannot be read from the graph.
    #[serde(default)]
    pub input_name: Option<String>,
    #[serde(default)]
    pub output_name: Option<String>,
    #[serde(default)]
    pub image_size: Option<u32>,
    /// Seconds from SIGTERM to exit, everything included: the drain, the answers to requests still
    /// in flight then, and the telemetry flush.
    #[serde(default = "defaults::shutdown_grace_s")]
    pub shutdown_grace_s: u64,
    /// `clipfn backfill`: photos per Parquet file, the unit a retried task redoes.
    #[serde(default = "defaults::backfill_chunk")]
    pub backfill_chunk: usize,
    /// `json` or `text`; unset means text when stderr is a terminal, JSON otherwise.
    #[serde(default, deserialize_with = "log_format")]
    pub log_format: Option<LogFormat>,
}

mod defaults {
    use super::*;
    pub fn provider() -> Provider {
        Provider::Auto
    }
    pub fn precision() -> Precision {
        Precision::Auto
    }
    pub fn normalize() -> Normalize {
        Normalize::Auto
    }
    pub fn batch_wait_ms() -> u64 {
        5
    }
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
    pub fn max_body_bytes() -> usize {
        MIB as usize
    }
    pub fn max_inline_body_bytes() -> usize {
        32 * MIB as usize
    }
    pub fn max_fetches_per_host() -> usize {
        8
    }
    pub fn request_timeout_ms() -> u64 {
        60_000
    }
    pub fn fetch_concurrency() -> usize {
        32
    }
    pub fn fetch_timeout_ms() -> u64 {
        30_000
    }
    pub fn fetch_retries() -> usize {
        3
    }
    pub fn shutdown_grace_s() -> u64 {
        8
    }
    pub fn max_texts() -> usize {
        256
    }
    pub fn max_text_chars() -> usize {
        2000
    }
    pub fn text_cache() -> usize {
        4096
    }
    pub fn text_max_tokens() -> usize {
        128
    }
    pub fn backfill_chunk() -> usize {
        5000
    }
}

fn comma_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let raw = String::deserialize(d)?;
    Ok(raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
}

/// One of a fixed set of words, any case; an error names the variable and the choices.
fn one_of<'de, D: Deserializer<'de>, T: Copy>(d: D, variable: &str, choices: &[(&str, T)]) -> Result<T, D::Error> {
    let raw = String::deserialize(d)?;
    choices.iter().find(|(word, _)| word.eq_ignore_ascii_case(&raw)).map(|(_, value)| *value).ok_or_else(|| {
        let words: Vec<&str> = choices.iter().map(|(word, _)| *word).collect();
        D::Error::custom(format!("{variable} must be one of {}, not '{raw}'", words.join(", ")))
    })
}

fn provider<'de, D: Deserializer<'de>>(d: D) -> Result<Provider, D::Error> {
    one_of(d, "CLIPFN_PROVIDER", &[("auto", Provider::Auto), ("cuda", Provider::Cuda), ("cpu", Provider::Cpu)])
}

fn precision<'de, D: Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
    let choices =
        [("auto", Precision::Auto), ("fp32", Precision::Fp32), ("fp16", Precision::Fp16), ("int8", Precision::Int8)];
    one_of(d, "CLIPFN_PRECISION", &choices)
}

fn normalize<'de, D: Deserializer<'de>>(d: D) -> Result<Normalize, D::Error> {
    one_of(d, "CLIPFN_NORMALIZE", &[("auto", Normalize::Auto), ("cpu", Normalize::Cpu), ("model", Normalize::Model)])
}

fn log_format<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LogFormat>, D::Error> {
    one_of(d, "CLIPFN_LOG_FORMAT", &[("json", LogFormat::Json), ("text", LogFormat::Text)]).map(Some)
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
        let settings: Settings = envy::prefixed("CLIPFN_").from_iter(vars).map_err(|e| ConfigError(explain(e)))?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("CLIPFN_BATCH_SIZE", self.batch_size.unwrap_or(1) as u64),
            ("CLIPFN_MAX_IMAGES", self.max_images as u64),
            ("CLIPFN_MAX_IMAGE_BYTES", self.max_image_bytes),
            ("CLIPFN_MAX_IMAGE_PIXELS", self.max_image_pixels),
            ("CLIPFN_DECODE_TIMEOUT_MS", self.decode_timeout_ms),
            ("CLIPFN_MAX_QUEUED_IMAGES", self.max_queued_images as u64),
            ("CLIPFN_MAX_DECODE_BYTES", self.max_decode_bytes.unwrap_or(1)),
            ("CLIPFN_MAX_BODY_BYTES", self.max_body_bytes as u64),
            ("CLIPFN_MAX_INLINE_BODY_BYTES", self.max_inline_body_bytes as u64),
            ("CLIPFN_MAX_FETCHES_PER_HOST", self.max_fetches_per_host as u64),
            ("CLIPFN_REQUEST_TIMEOUT_MS", self.request_timeout_ms),
            ("CLIPFN_FETCH_CONCURRENCY", self.fetch_concurrency as u64),
            ("CLIPFN_FETCH_TIMEOUT_MS", self.fetch_timeout_ms),
            ("CLIPFN_MAX_TEXTS", self.max_texts as u64),
            ("CLIPFN_MAX_TEXT_CHARS", self.max_text_chars as u64),
            ("CLIPFN_TEXT_MAX_TOKENS", self.text_max_tokens as u64),
            ("CLIPFN_BACKFILL_CHUNK", self.backfill_chunk as u64),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError(format!("{name} must be greater than 0")));
        }
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
        if self.model.trim().is_empty() {
            return Err(ConfigError("CLIPFN_MODEL must name an ONNX file, a model folder or an object URI".into()));
        }
        // A model folder may hold the text tower too; whether it does is known once it is listed.
        let text_tower = self.text_model.is_some() || crate::model::is_folder(&self.model);
        if self.labels.is_some() && !text_tower {
            return Err(ConfigError(
                "CLIPFN_LABELS needs CLIPFN_TEXT_MODEL (or a model folder with a text tower): label sets are embedded by \
                 the text model"
                    .into(),
            ));
        }
        if self.text_tokenizer.is_some() && !text_tower {
            return Err(ConfigError(
                "CLIPFN_TEXT_TOKENIZER needs CLIPFN_TEXT_MODEL (or a model folder with a text tower), the model it \
                 tokenizes for"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Photos per inference run: as set, else 64 on CUDA (the seed's finding: batches of 64 beat
    /// 16 and 32 on a GPU) and 8 on CPU, where images/s is no higher at 16 to 64 while the
    /// activations' memory, the warm-up and the wait behind a running batch grow with the batch
    /// (docs/design.md, "Batch size per provider").
    pub fn batch_size(&self, on_cuda: bool) -> usize {
        self.batch_size.unwrap_or(if on_cuda { 64 } else { 8 })
    }

    /// As set, else 16 MiB per decode thread (and at least one photo of the largest size): enough
    /// to keep the decoders fed across a fetch's latency, without holding a whole backlog of
    /// photos that can only be decoded a few at a time.
    pub fn max_fetched_bytes(&self) -> u64 {
        self.max_fetched_bytes.unwrap_or_else(|| (16 * MIB * self.decode_threads() as u64).max(self.max_image_bytes))
    }

    pub fn decode_threads(&self) -> usize {
        match self.decode_threads {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        }
    }

    pub fn decode_timeout(&self) -> Duration {
        Duration::from_millis(self.decode_timeout_ms)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// The log format in effect: as set, else text for a terminal and JSON for everything else
    /// (Cloud Run, Lambda, a pipe).
    pub fn log_format(&self) -> LogFormat {
        use std::io::IsTerminal;
        self.log_format.unwrap_or(if std::io::stderr().is_terminal() { LogFormat::Text } else { LogFormat::Json })
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
        assert_eq!((s.batch_size(true), s.batch_size(false)), (64, 8));
        let budget = s.max_fetched_bytes();
        assert!(budget >= s.max_image_bytes && budget == (16 * MIB * s.decode_threads() as u64).max(25 * MIB));
        assert_eq!(s.max_images, 100);
        assert_eq!(s.max_image_bytes, 25 * MIB);
        assert_eq!(s.provider, Provider::Auto);
        assert_eq!(s.precision, Precision::Auto);
        assert_eq!(s.allowed_sources, vec!["gs://a/x", "s3://b"]);
        assert_eq!(s.max_inline_body_bytes, 32 * MIB as usize);
        assert!(!s.allow_private_sources);
        assert!(!s.cpu_arena, "the CPU arena holds the largest batch's memory for good");
        assert_eq!((s.text_model, s.max_texts, s.max_text_chars, s.text_cache), (None, 256, 2000, 4096));
        assert_eq!((s.text_tokenizer, s.text_max_tokens), (None, 128));
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
    }

    #[test]
    fn log_format_is_read_in_either_case() {
        let json = Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_LOG_FORMAT", "JSON")])).unwrap();
        assert_eq!(json.log_format(), LogFormat::Json);
        let text = Settings::from_vars(vars(&[("CLIPFN_MODEL", "m"), ("CLIPFN_LOG_FORMAT", "text")])).unwrap();
        assert_eq!(text.log_format(), LogFormat::Text);
    }
}
