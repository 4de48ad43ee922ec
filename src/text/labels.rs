//! Zero-shot categories, as in CLIP's recipe: each label becomes one prompt per template, its
//! embedding is the L2-normalised mean of its prompts' embeddings; a photo is scored against them
//! by the model's [`Scoring`](crate::embedding::Scoring).
//!
//! Label sets come from the CLIPFN_LABELS file and are embedded once during warm-up; labels given
//! in a request are checked by the same rules.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::embedding::l2_normalized;

pub const DEFAULT_TEMPLATE: &str = "a photo of a {}.";

#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("labels must hold at least one label")]
    Empty,
    #[error("labels[{0}] is empty")]
    EmptyLabel(usize),
    #[error("labels[{index}] repeats '{label}'")]
    Duplicate { index: usize, label: String },
    #[error("template '{0}' has no '{{}}' for the label")]
    Template(String),
    #[error("label file: {0}")]
    File(String),
    #[error("label set '{name}': {error}")]
    Set { name: String, error: Box<LabelError> },
}

/// Labels and the templates that turn each into prompts.
#[derive(Debug, Clone)]
pub struct Labels {
    pub names: Vec<String>,
    templates: Vec<String>,
}

impl Labels {
    pub fn new(names: Vec<String>, templates: Option<Vec<String>>) -> Result<Self, LabelError> {
        if names.is_empty() {
            return Err(LabelError::Empty);
        }
        for (index, label) in names.iter().enumerate() {
            if label.trim().is_empty() {
                return Err(LabelError::EmptyLabel(index));
            }
            if names[..index].contains(label) {
                return Err(LabelError::Duplicate { index, label: label.clone() });
            }
        }
        let templates = templates.filter(|t| !t.is_empty()).unwrap_or_else(|| vec![DEFAULT_TEMPLATE.to_string()]);
        if let Some(bad) = templates.iter().find(|t| !t.contains("{}")) {
            return Err(LabelError::Template(bad.clone()));
        }
        Ok(Labels { names, templates })
    }

    /// Every label's prompts, label by label: `templates.len()` prompts each.
    pub fn prompts(&self) -> Vec<String> {
        self.names.iter().flat_map(|label| self.templates.iter().map(move |t| t.replace("{}", label))).collect()
    }

    /// Each label's embedding from its prompts' (unit) embeddings, in `prompts()` order.
    pub fn embeddings<E: AsRef<[f32]>>(&self, prompts: &[E]) -> Vec<Vec<f32>> {
        prompts
            .chunks(self.templates.len())
            .map(|group| {
                let mut mean = vec![0.0; group[0].as_ref().len()];
                for embedding in group {
                    mean.iter_mut().zip(embedding.as_ref()).for_each(|(m, x)| *m += x);
                }
                l2_normalized(mean)
            })
            .collect()
    }
}

/// A label set with each label's embedding.
pub struct EmbeddedLabels {
    pub labels: Labels,
    pub embeddings: Vec<Vec<f32>>,
}

/// Reads the CLIPFN_LABELS file: `{"sets": {"NAME": {"labels": [...], "templates": [...]}}}`.
pub fn parse_sets(json: &[u8]) -> Result<BTreeMap<String, Labels>, LabelError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        sets: BTreeMap<String, Set>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Set {
        labels: Vec<String>,
        #[serde(default)]
        templates: Option<Vec<String>>,
    }
    let file: File = serde_json::from_slice(json).map_err(|e| LabelError::File(e.to_string()))?;
    file.sets
        .into_iter()
        .map(|(name, set)| match Labels::new(set.labels, set.templates) {
            Ok(labels) => Ok((name, labels)),
            Err(error) => Err(LabelError::Set { name, error: Box::new(error) }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_and_means_follow_the_recipe() {
        let labels =
            Labels::new(vec!["cat".into(), "dog".into()], Some(vec!["a {}.".into(), "the {}!".into()])).unwrap();
        assert_eq!(labels.prompts(), ["a cat.", "the cat!", "a dog.", "the dog!"]);
        let prompts = [vec![1.0, 0.0], vec![0.0, 1.0], vec![1.0, 0.0], vec![1.0, 0.0]];
        let embedded = labels.embeddings(&prompts);
        assert!((embedded[0][0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(embedded[1], vec![1.0, 0.0]);
        assert_eq!(Labels::new(vec!["x".into()], None).unwrap().prompts(), ["a photo of a x."]);
    }

    #[test]
    fn bad_labels_are_named() {
        let err = |names: &[&str], templates: Option<Vec<String>>| {
            Labels::new(names.iter().map(|s| s.to_string()).collect(), templates).unwrap_err().to_string()
        };
        assert_eq!(err(&[], None), "labels must hold at least one label");
        assert_eq!(err(&["a", " "], None), "labels[1] is empty");
        assert_eq!(err(&["a", "b", "a"], None), "labels[2] repeats 'a'");
        assert!(err(&["a"], Some(vec!["no slot".into()])).contains("no slot"));
        let file = parse_sets(br#"{"sets": {"food": {"labels": ["pizza", "pizza"]}}}"#).unwrap_err().to_string();
        assert_eq!(file, "label set 'food': labels[1] repeats 'pizza'");
    }
}
