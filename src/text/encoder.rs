//! The text flow, the twin of a photo's: tokenize -> worker (text tower) -> embedding (of unit
//! length, as the tower gives it). Prompt embeddings are kept in a bounded LRU keyed by (model,
//! prompt), so labels asked for again cost nothing; hits and misses are counted.

use std::{
    num::NonZeroUsize,
    sync::{Arc, Mutex},
};

use lru::LruCache;

use super::TextError;
use crate::{
    observe::metrics::Metrics,
    tokenize::{Tokenizer, TokenizerError},
    worker::Worker,
};

/// One text's answer.
#[derive(Debug, Clone)]
pub struct TextEmbedding {
    pub embedding: Arc<[f32]>,
    /// Tokens the model saw, special tokens included (after truncation).
    pub tokens: usize,
}

pub struct TextEncoder {
    tokenizer: Arc<Tokenizer>,
    model_id: String,
    cache: Option<Mutex<LruCache<(String, String), TextEmbedding>>>,
    metrics: Arc<Metrics>,
}

impl TextEncoder {
    pub fn new(tokenizer: Arc<Tokenizer>, model_id: String, cache_size: usize, metrics: Arc<Metrics>) -> Self {
        let cache = NonZeroUsize::new(cache_size).map(|size| Mutex::new(LruCache::new(size)));
        TextEncoder { tokenizer, model_id, cache, metrics }
    }

    /// Embeds every text, in order; texts already in the cache skip the model.
    pub async fn embed(&self, worker: &Worker, texts: &[String]) -> Result<Vec<TextEmbedding>, TextError> {
        let mut found: Vec<Option<TextEmbedding>> = texts.iter().map(|t| self.cached(t)).collect();
        let missing: Vec<String> =
            texts.iter().zip(&found).filter(|(_, f)| f.is_none()).map(|(t, _)| t.clone()).collect();
        if !missing.is_empty() {
            // Tokenizing is CPU work: off the async threads, all of a request's texts in one task.
            let tokenizer = Arc::clone(&self.tokenizer);
            let tokenized = tokio::task::spawn_blocking(move || {
                missing
                    .into_iter()
                    .map(|text| Ok((tokenizer.tokenize(&text)?, text)))
                    .collect::<Result<Vec<_>, TokenizerError>>()
            })
            .await
            .map_err(|_| TextError::TokenizerPanic)??;
            let runs = tokenized.into_iter().map(|(tokens, text)| async move {
                let count = tokens.ids.len();
                let embedded = worker.embed_text(tokens).await?;
                let answer = TextEmbedding { embedding: embedded.output.into(), tokens: count };
                self.remember(text, answer.clone());
                Ok::<_, TextError>(answer)
            });
            let mut fresh = futures::future::try_join_all(runs).await?.into_iter();
            found.iter_mut().filter(|f| f.is_none()).for_each(|f| *f = fresh.next());
        }
        Ok(found.into_iter().map(|f| f.expect("every text answered")).collect())
    }

    fn cached(&self, text: &str) -> Option<TextEmbedding> {
        let cache = self.cache.as_ref()?;
        let hit =
            cache.lock().unwrap_or_else(|e| e.into_inner()).get(&(self.model_id.clone(), text.to_string())).cloned();
        self.metrics.text_cache(hit.is_some());
        hit
    }

    fn remember(&self, text: String, embedding: TextEmbedding) {
        if let Some(cache) = &self.cache {
            cache.lock().unwrap_or_else(|e| e.into_inner()).put((self.model_id.clone(), text), embedding);
        }
    }
}
