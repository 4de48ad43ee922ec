//! Text: search queries and zero-shot labels, embedded by the text tower through the same model
//! worker as photos. `encoder` tokenizes and caches, `labels` turns labels into prompts; [`Text`]
//! holds both with the label sets embedded at start-up.

mod encoder;
mod labels;

use std::{collections::BTreeMap, sync::Arc};

pub use self::{
    encoder::{TextEmbedding, TextEncoder},
    labels::{EmbeddedLabels, Labels, parse_sets},
};
use crate::{
    embedding::Scoring,
    model::TextModelInfo,
    tokenize::TokenizerError,
    worker::{BatchError, Worker},
};

#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("no text model is configured: set CLIPFN_TEXT_MODEL, or use a model folder with a text tower")]
    NotConfigured,
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("the tokenizer crashed")]
    TokenizerPanic,
    #[error(transparent)]
    Tokenize(#[from] TokenizerError),
    #[error("texts not embedded within the request deadline")]
    DeadlineExceeded,
    #[error("{0}")]
    NoScoring(String),
}

/// The text tower's side of the service.
pub struct Text {
    encoder: TextEncoder,
    worker: Arc<Worker>,
    /// CLIPFN_LABELS, embedded during warm-up.
    label_sets: BTreeMap<String, EmbeddedLabels>,
    /// How photos are scored against labels, or why this model cannot classify.
    scoring: Result<Scoring, String>,
}

impl Text {
    pub fn new(encoder: TextEncoder, worker: Arc<Worker>, scoring: Result<Scoring, String>) -> Self {
        Text { encoder, worker, label_sets: BTreeMap::new(), scoring }
    }

    /// The model family's scoring rule for classifying.
    pub fn scoring(&self) -> Result<Scoring, TextError> {
        self.scoring.clone().map_err(TextError::NoScoring)
    }

    /// The text tower.
    pub fn model(&self) -> &TextModelInfo {
        self.worker.text_info().expect("Text is built only beside a text tower")
    }

    /// Embeds every set, so that classifying over a set costs image inference only.
    pub async fn embed_label_sets(&mut self, sets: BTreeMap<String, Labels>) -> Result<(), (String, TextError)> {
        for (name, labels) in sets {
            match self.label_embeddings(&labels, None).await {
                Ok(embeddings) => self.label_sets.insert(name, EmbeddedLabels { labels, embeddings }),
                Err(e) => return Err((name, e)),
            };
        }
        Ok(())
    }

    pub fn label_set(&self, name: &str) -> Option<&EmbeddedLabels> {
        self.label_sets.get(name)
    }

    pub fn label_set_names(&self) -> Vec<&str> {
        self.label_sets.keys().map(String::as_str).collect()
    }

    /// Embeds texts (L2-normalised, in order) on the text tower, or none if `deadline` passes.
    pub async fn embed_texts(
        &self,
        texts: &[String],
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Vec<TextEmbedding>, TextError> {
        let work = self.encoder.embed(&self.worker, texts);
        match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, work).await.unwrap_or(Err(TextError::DeadlineExceeded)),
            None => work.await,
        }
    }

    /// Each label's embedding: the normalised mean of its prompts' embeddings.
    pub async fn label_embeddings(
        &self,
        labels: &Labels,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Vec<Vec<f32>>, TextError> {
        let prompts = self.embed_texts(&labels.prompts(), deadline).await?;
        let prompts: Vec<&[f32]> = prompts.iter().map(|p| &p.embedding[..]).collect();
        Ok(labels.embeddings(&prompts))
    }
}
