//! The labels a request scores its photos against, shared by `/v1/classify` and `/v1/analyze`:
//! ad-hoc `labels` (embedded now by the text tower, through its prompt cache) or a `label_set`
//! embedded at start-up, the `top_k` best kept, scored by the model family's rule.

use std::borrow::Cow;

use super::{
    error::ApiError,
    request::string_list,
    types::{LabelScore, LabelsRequest, MAX_TOP_K},
};
use crate::{
    embedding::Scoring,
    service::Service,
    settings::Settings,
    text::{Labels, TextError},
};

const DEFAULT_TOP_K: usize = 5;

/// What a request asked to be labelled with, checked but not yet embedded.
pub(super) struct Asked {
    labels: AskedLabels,
    top_k: usize,
}

enum AskedLabels {
    Labels(Labels),
    Set(String),
}

/// The labels embedded, ready to score photos.
pub(super) struct Scored<'a> {
    names: &'a [String],
    embeddings: Cow<'a, [Vec<f32>]>,
    scoring: Scoring,
    top_k: usize,
}

/// The request's `labels` / `label_set` / `top_k`; `None` when it names neither.
pub(super) fn asked(request: LabelsRequest, settings: &Settings) -> Result<Option<Asked>, ApiError> {
    let LabelsRequest { labels, label_set, top_k } = request;
    let top_k = match top_k {
        None => DEFAULT_TOP_K,
        Some(k) if (1..=MAX_TOP_K).contains(&k) => k as usize,
        Some(k) => return Err(ApiError::BadRequest(format!("top_k must be from 1 to {MAX_TOP_K}, got {k}"))),
    };
    let labels = match (labels, label_set) {
        (Some(_), Some(_)) => return Err(ApiError::BadRequest("give either labels or label_set, not both".into())),
        (None, None) => return Ok(None),
        (Some(labels), None) => {
            let names = string_list(labels, "labels", settings)?;
            AskedLabels::Labels(Labels::new(names, None).map_err(|e| ApiError::BadRequest(e.to_string()))?)
        }
        (None, Some(name)) => AskedLabels::Set(name),
    };
    Ok(Some(Asked { labels, top_k }))
}

impl Asked {
    /// Embeds the labels (a set's are already), or says why this server cannot.
    pub(super) async fn embed<'a>(
        &'a self,
        service: &'a Service,
        deadline: tokio::time::Instant,
    ) -> Result<Scored<'a>, ApiError> {
        let text = service.text.as_ref().ok_or(TextError::NotConfigured)?;
        let scoring = text.scoring()?;
        let (names, embeddings) = match &self.labels {
            AskedLabels::Labels(labels) => {
                (&labels.names[..], Cow::Owned(text.label_embeddings(labels, Some(deadline)).await?))
            }
            AskedLabels::Set(name) => {
                let set = text.label_set(name).ok_or_else(|| {
                    let known = text.label_set_names();
                    ApiError::BadRequest(format!(
                        "unknown label_set '{name}'; known sets: {}",
                        if known.is_empty() { "none (CLIPFN_LABELS is unset)".to_string() } else { known.join(", ") }
                    ))
                })?;
                (&set.labels.names[..], Cow::Borrowed(&set.embeddings[..]))
            }
        };
        Ok(Scored { names, embeddings, scoring, top_k: self.top_k })
    }
}

impl Scored<'_> {
    /// The best labels for one photo's embedding, best first.
    pub(super) fn best(&self, embedding: &[f32]) -> Vec<LabelScore<'_>> {
        let best = self.scoring.top_labels(embedding, &self.embeddings, self.top_k);
        best.into_iter().map(|(i, score)| LabelScore { label: &self.names[i], score }).collect()
    }
}
