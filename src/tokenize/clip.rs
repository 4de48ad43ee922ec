//! CLIP's own tokenizer: text -> at most 77 token ids.
//!
//! OpenAI's BPE (`bpe_simple_vocab_16e6`, 49,408 tokens) ships inside the binary through the
//! `instant-clip-tokenizer` crate. Around its BPE we do what the reference `simple_tokenizer.py`
//! does and the crate does not: its clean-up (`clean`), and its word split, whose special words
//! are `<|startoftext|>` and `<|endoftext|>` (the crate's are spelt differently). Over-long text is
//! cut as `clip.tokenize(truncate=True)` does: 77 ids, the last one the end token.

use std::sync::LazyLock;

use instant_clip_tokenizer::Token;
use regex::Regex;

use super::{Tokens, clean};

/// CLIP's context length.
pub const CONTEXT: usize = 77;

/// The reference's word pattern (`SimpleTokenizer.pat`).
static WORDS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+")
        .expect("valid regex")
});

pub struct ClipBpe {
    bpe: instant_clip_tokenizer::Tokenizer,
}

impl Default for ClipBpe {
    /// Builds the merge table from the embedded vocabulary (tens of milliseconds: build once).
    fn default() -> Self {
        ClipBpe { bpe: instant_clip_tokenizer::Tokenizer::new() }
    }
}

impl ClipBpe {
    pub fn tokenize(&self, text: &str) -> Tokens {
        let (start, end) = (self.bpe.start_of_text(), self.bpe.end_of_text());
        let text = clean::clean(text);
        let room = CONTEXT - 2;
        let mut tokens: Vec<Token> = Vec::with_capacity(CONTEXT);
        // Words are encoded independently, so once the text is known to run over, the rest can
        // not change the ids that are kept.
        for word in WORDS.find_iter(&text) {
            if tokens.len() > room {
                break;
            }
            match word.as_str() {
                "<|startoftext|>" => tokens.push(start),
                "<|endoftext|>" => tokens.push(end),
                word => self.bpe.encode(word, &mut tokens),
            }
        }
        tokens.truncate(room);
        let mut ids = Vec::with_capacity(CONTEXT);
        ids.push(i64::from(start.to_u16()));
        ids.extend(tokens.iter().map(|t| i64::from(t.to_u16())));
        ids.push(i64::from(end.to_u16()));
        Tokens { ids }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_truncates() {
        let tokenizer = ClipBpe::default();
        assert_eq!(tokenizer.tokenize("Hi there").ids, [49406, 1883, 997, 49407]);
        assert_eq!(tokenizer.tokenize("").ids, [49406, 49407]);
        let long = tokenizer.tokenize(&"cat ".repeat(200));
        assert_eq!((long.ids.len(), long.ids[75], long.ids[76]), (CONTEXT, 2368, 49407));
        // The reference's special words, not the crate's.
        assert_eq!(tokenizer.tokenize("a<|endoftext|>").ids[..4], [49406, 320, 49407, 49407]);
        assert_ne!(tokenizer.tokenize("<start_of_text>").ids[1], 49406);
    }
}
