//! The text tower, its tokenizer, label sets and the limits on texts.

use serde::Deserialize;

use super::{ConfigError, require_positive};

/// The variables of [`TextSettings`], one per field and in the fields' order (envy reads each
/// field from `CLIPFN_` + its name upper-cased; a unit test holds the two together).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_TEXT_MODEL",
    "CLIPFN_TEXT_TOKENIZER",
    "CLIPFN_TEXT_MAX_TOKENS",
    "CLIPFN_MAX_TEXTS",
    "CLIPFN_MAX_TEXT_CHARS",
    "CLIPFN_LABELS",
    "CLIPFN_TEXT_CACHE",
];

#[derive(Debug, Clone, Deserialize)]
pub struct TextSettings {
    /// Path or object URI of the same CLIP's ONNX text encoder. Unset, a model folder's own text
    /// tower is used when it has one; with neither, the text endpoints say 404.
    #[serde(default)]
    pub text_model: Option<String>,
    /// Path or object URI of the text model's Hugging Face `tokenizer.json`; unset, the model
    /// folder's own, else CLIP's BPE.
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
}

mod defaults {
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
}

impl TextSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[
            ("CLIPFN_MAX_TEXTS", self.max_texts as u64),
            ("CLIPFN_MAX_TEXT_CHARS", self.max_text_chars as u64),
            ("CLIPFN_TEXT_MAX_TOKENS", self.text_max_tokens as u64),
        ])
    }
}
