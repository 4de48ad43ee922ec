//! Tokenize stage, the text twin of `preprocess`: text -> the token ids the text model takes.
//!
//! Two kinds: CLIP's own BPE, built in (`clip`), and a Hugging Face `tokenizer.json` for other
//! text towers, e.g. a multilingual student (`json`). Ids are not padded here: the text model pads
//! a batch to its graph's fixed length, or to the batch's longest text.

mod clean;
mod clip;
mod html;
mod json;

pub use self::clip::{CONTEXT, ClipBpe};
pub use self::json::{JsonTokenizer, TokenizerError};

/// One text as the model takes it: special tokens included, no padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    pub ids: Vec<i64>,
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

    /// The id padding rows carry (masked out, or after CLIP's end token).
    pub fn pad_id(&self) -> i64 {
        match self {
            Tokenizer::Clip(_) => 0,
            Tokenizer::Json(json) => json.pad_id(),
        }
    }
}
