//! Tokenize stage, the text twin of `preprocess`: text -> the token ids the text model takes.
//!
//! Two kinds: CLIP's own BPE, built in (`clip`), and a Hugging Face `tokenizer.json` for other
//! text towers, e.g. a multilingual student or SigLIP (`json`, with `config` for the folder's
//! `tokenizer_config.json`). Ids are not padded here: each tokenizer says how rows are to be
//! padded ([`Padding`]), and the text model pads a batch that way.

mod clean;
mod clip;
mod config;
mod html;
mod json;

pub use self::clip::{CONTEXT, ClipBpe};
pub use self::json::{JsonTokenizer, TokenizerError};

/// One text as the model takes it: special tokens included, no padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    pub ids: Vec<i64>,
}

/// How the rows of a batch of texts are padded for the model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Padding {
    pub pad_id: i64,
    /// Every row this many ids; `None`: a batch is padded to its longest text, which only a
    /// model that masks the padding (an `attention_mask`) can take without its vectors depending
    /// on their batch-mates.
    pub length: Option<usize>,
    /// The setting it comes from, for /readyz and start-up errors.
    pub from: String,
}

pub enum Tokenizer {
    Clip(ClipBpe),
    Json(Box<JsonTokenizer>),
}

impl Tokenizer {
    /// CLIP's BPE.
    pub fn clip() -> Self {
        Tokenizer::Clip(ClipBpe::default())
    }

    pub fn tokenize(&self, text: &str) -> Result<Tokens, TokenizerError> {
        match self {
            Tokenizer::Clip(bpe) => Ok(bpe.tokenize(text)),
            Tokenizer::Json(json) => json.tokenize(text),
        }
    }

    /// How `/readyz` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Tokenizer::Clip(_) => "clip-bpe",
            Tokenizer::Json(_) => "tokenizer.json",
        }
    }

    /// The largest id it can produce (the start-up check feeds it to the model).
    pub fn max_id(&self) -> i64 {
        match self {
            Tokenizer::Clip(_) => 49407,
            Tokenizer::Json(json) => json.max_id(),
        }
    }

    /// How its rows are padded; CLIP's as `clip.tokenize` pads them: to 77 ids, with 0.
    pub fn padding(&self) -> Padding {
        match self {
            Tokenizer::Clip(_) => {
                Padding { pad_id: 0, length: Some(CONTEXT), from: format!("CLIP's context of {CONTEXT}") }
            }
            Tokenizer::Json(json) => json.padding().clone(),
        }
    }
}
