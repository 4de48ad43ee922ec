//! A Hugging Face `tokenizer.json` through the `tokenizers` crate: normalisation, pre-tokenizer,
//! model (WordPiece, BPE, Unigram), special tokens and truncation all come from the file;
//! `CLIPFN_TEXT_MAX_TOKENS` caps the length. Padding is the text model's job (per batch).

use tokenizers::{PaddingParams, TruncationParams};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("not a usable tokenizer.json: {0}")]
    Parse(String),
    #[error("tokenizer.json has an empty vocabulary")]
    EmptyVocabulary,
    #[error("tokenizer.json could not encode the text: {0}")]
    Encode(String),
}

pub struct JsonTokenizer {
    inner: tokenizers::Tokenizer,
    pad_id: i64,
}

impl JsonTokenizer {
    pub fn from_bytes(bytes: &[u8], max_tokens: usize) -> Result<Self, TokenizerError> {
        let mut inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| TokenizerError::Parse(e.to_string()))?;
        if inner.get_vocab_size(true) == 0 {
            return Err(TokenizerError::EmptyVocabulary);
        }
        let pad_id = inner.get_padding().map_or(0, |p: &PaddingParams| i64::from(p.pad_id));
        // The file's own truncation, capped at max_tokens; a batch is padded later, to its longest.
        let file_max = inner.get_truncation().map_or(usize::MAX, |t| t.max_length);
        let truncation = TruncationParams {
            max_length: file_max.min(max_tokens),
            ..inner.get_truncation().cloned().unwrap_or_default()
        };
        inner.with_truncation(Some(truncation)).map_err(|e| TokenizerError::Parse(e.to_string()))?;
        inner.with_padding(None);
        Ok(JsonTokenizer { inner, pad_id })
    }

    pub fn tokenize(&self, text: &str) -> Result<super::Tokens, TokenizerError> {
        let encoding = self.inner.encode(text, true).map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(super::Tokens { ids: encoding.get_ids().iter().map(|&id| i64::from(id)).collect() })
    }

    /// The largest id in the vocabulary, added tokens included (ids need not be contiguous).
    pub fn max_id(&self) -> i64 {
        self.inner.get_vocab(true).values().max().map_or(0, |&id| i64::from(id))
    }

    pub fn pad_id(&self) -> i64 {
        self.pad_id
    }
}
