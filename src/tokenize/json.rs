//! A Hugging Face `tokenizer.json` through the `tokenizers` crate: normalisation, pre-tokenizer,
//! model (WordPiece, BPE, Unigram), special tokens and truncation all come from the file;
//! `CLIPFN_TEXT_MAX_TOKENS` caps the length. Its padding (length and pad id) is handed to the text
//! model, which pads the rows of a batch and masks the padding when the graph takes a mask; the ids
//! stay unpadded, so token counts are the text's own.
//!
//! A folder's `tokenizer_config.json` adds what transformers does around the file: lower-casing
//! (`do_lower_case`), and, when the file has no padding of its own (SigLIP 1), a fixed padding of
//! `model_max_length` ids of `pad_token`, truncating to the same length.

use tokenizers::{PaddingDirection, PaddingStrategy, TruncationParams};

use super::{Padding, config::TokenizerConfig};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("not a usable tokenizer.json: {0}")]
    Parse(String),
    #[error("tokenizer.json has an empty vocabulary")]
    EmptyVocabulary,
    #[error("tokenizer.json: {0}")]
    Setting(String),
    #[error("tokenizer_config.json: {0}")]
    Config(String),
    #[error("tokenizer.json could not encode the text: {0}")]
    Encode(String),
}

pub struct JsonTokenizer {
    inner: tokenizers::Tokenizer,
    padding: Padding,
    lower_case: bool,
}

impl JsonTokenizer {
    /// `config`: the `tokenizer_config.json` beside the file, when there is one.
    pub fn from_bytes(bytes: &[u8], config: Option<&[u8]>, max_tokens: usize) -> Result<Self, TokenizerError> {
        let mut inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| TokenizerError::Parse(e.to_string()))?;
        if inner.get_vocab_size(true) == 0 {
            return Err(TokenizerError::EmptyVocabulary);
        }
        let config = config.map(TokenizerConfig::parse).transpose()?.unwrap_or_default();
        let padding = padding(&inner, &config)?;
        // The file's own truncation, else the fixed padding's length, capped at max_tokens.
        let file_max = inner.get_truncation().map(|t| t.max_length).or(padding.length).unwrap_or(usize::MAX);
        let truncation = TruncationParams {
            max_length: file_max.min(max_tokens),
            ..inner.get_truncation().cloned().unwrap_or_default()
        };
        inner.with_truncation(Some(truncation)).map_err(|e| TokenizerError::Parse(e.to_string()))?;
        inner.with_padding(None);
        Ok(JsonTokenizer { inner, padding, lower_case: config.do_lower_case })
    }

    pub fn tokenize(&self, text: &str) -> Result<super::Tokens, TokenizerError> {
        let lowered;
        let text = if self.lower_case {
            lowered = text.to_lowercase();
            &lowered
        } else {
            text
        };
        let encoding = self.inner.encode(text, true).map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(super::Tokens { ids: encoding.get_ids().iter().map(|&id| i64::from(id)).collect() })
    }

    /// The largest id in the vocabulary, added tokens included (ids need not be contiguous).
    pub fn max_id(&self) -> i64 {
        self.inner.get_vocab(true).values().max().map_or(0, |&id| i64::from(id))
    }

    pub fn padding(&self) -> &Padding {
        &self.padding
    }
}

/// The file's own padding; else, with none there, `tokenizer_config.json`'s pad token and length;
/// else each batch to its longest text with id 0. Only padding on the right is honoured.
fn padding(inner: &tokenizers::Tokenizer, config: &TokenizerConfig) -> Result<Padding, TokenizerError> {
    if let Some(file) = inner.get_padding() {
        if matches!(file.direction, PaddingDirection::Left) {
            return Err(TokenizerError::Setting("padding direction Left: clipfn pads on the right only".into()));
        }
        let pad_id = i64::from(file.pad_id);
        return Ok(match file.strategy {
            PaddingStrategy::Fixed(length) => {
                Padding { pad_id, length: Some(length), from: format!("tokenizer.json padding Fixed({length})") }
            }
            PaddingStrategy::BatchLongest => {
                Padding { pad_id, length: None, from: "tokenizer.json padding BatchLongest".into() }
            }
        });
    }
    match (&config.pad_token, config.model_max_length) {
        (Some(token), Some(length)) => {
            if config.pads_left {
                return Err(TokenizerError::Config("padding_side left: clipfn pads on the right only".into()));
            }
            let pad_id = inner.token_to_id(token).ok_or_else(|| {
                TokenizerError::Config(format!("pad_token '{token}' is not in tokenizer.json's vocabulary"))
            })?;
            Ok(Padding {
                pad_id: i64::from(pad_id),
                length: Some(length),
                from: format!("tokenizer_config.json pad_token '{token}', model_max_length {length}"),
            })
        }
        _ => Ok(Padding {
            pad_id: 0,
            length: None,
            from: "none (tokenizer.json has no padding, tokenizer_config.json no pad_token with a model_max_length)"
                .into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A word-level tokenizer.json with `padding`.
    fn file(padding: Value) -> Vec<u8> {
        let vocab = json!({"<pad>": 0, "</s>": 1, "a": 2, "photo": 3});
        json!({
            "version": "1.0", "truncation": null, "padding": padding, "added_tokens": [], "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<pad>"}
        })
        .to_string()
        .into_bytes()
    }

    fn padding(direction: &str, strategy: Value) -> Value {
        json!({"strategy": strategy, "direction": direction, "pad_to_multiple_of": null, "pad_id": 1,
               "pad_type_id": 0, "pad_token": "</s>"})
    }

    #[test]
    fn padding_comes_from_the_file_then_from_tokenizer_config() {
        let fixed = JsonTokenizer::from_bytes(&file(padding("Right", json!({"Fixed": 3}))), None, 128).unwrap();
        assert_eq!((fixed.padding().length, fixed.padding().pad_id), (Some(3), 1));
        // Truncated to the fixed length, never padded here.
        assert_eq!(fixed.tokenize("a photo a photo").unwrap().ids, [2, 3, 2]);
        assert_eq!(fixed.tokenize("a").unwrap().ids, [2]);
        let longest = JsonTokenizer::from_bytes(&file(padding("Right", json!("BatchLongest"))), None, 128).unwrap();
        assert_eq!(longest.padding().length, None);

        let config = br#"{"pad_token": "</s>", "model_max_length": 2, "do_lower_case": true}"#;
        let siglip = JsonTokenizer::from_bytes(&file(Value::Null), Some(config), 128).unwrap();
        assert_eq!((siglip.padding().length, siglip.padding().pad_id), (Some(2), 1));
        assert!(siglip.padding().from.contains("tokenizer_config.json"), "{:?}", siglip.padding());
        assert_eq!(siglip.tokenize("A PHOTO a").unwrap().ids, [2, 3], "lower-cased, then cut to 2");
        let plain = JsonTokenizer::from_bytes(&file(Value::Null), None, 128).unwrap();
        assert_eq!((plain.padding().length, plain.tokenize("A").unwrap().ids), (None, vec![0]));
    }

    #[test]
    fn padding_clipfn_cannot_honour_is_refused() {
        let left = JsonTokenizer::from_bytes(&file(padding("Left", json!({"Fixed": 3}))), None, 128);
        assert!(left.err().unwrap().to_string().contains("tokenizer.json: padding direction Left"));
        let config = br#"{"pad_token": "</s>", "model_max_length": 2, "padding_side": "left"}"#;
        let left = JsonTokenizer::from_bytes(&file(Value::Null), Some(config), 128);
        assert!(left.err().unwrap().to_string().contains("tokenizer_config.json: padding_side left"));
    }
}
