//! What an embedding is to its users: a unit vector, compared by cosine, and a photo's scores
//! against labels. A leaf: it knows nothing of where embeddings come from.

/// CLIP compares embeddings by cosine; unit length makes that a dot product for callers.
/// The norm is taken in f64: in f32 the squares of a caller's stored vector can overflow (values
/// near f32::MAX) or underflow (subnormal values), which left it all zeros or not unit length.
pub fn l2_normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
    v
}

/// CLIP's learned logit scale, at its clamp (exp(4.6052)).
pub const LOGIT_SCALE: f32 = 100.0;

/// How a photo's cosine to each label becomes the label's score: the model family's own rule.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Scoring {
    /// CLIP's: the softmax over the labels of `scale` times their cosine; the scores sum to 1.
    Softmax { scale: f32 },
    /// SigLIP's: each label on its own, `sigmoid(scale * cos + bias)`; the scores do not sum to 1.
    Sigmoid { scale: f32, bias: f32 },
}

impl Scoring {
    pub const CLIP: Scoring = Scoring::Softmax { scale: LOGIT_SCALE };

    /// SigLIP's rule from its raw learned parameters: `scale` is `exp(logit_scale)`.
    pub fn siglip(logit_scale: f32, logit_bias: f32) -> Self {
        Scoring::Sigmoid { scale: logit_scale.exp(), bias: logit_bias }
    }

    /// The `top_k` best labels for one photo's (unit) embedding against the labels' (unit)
    /// embeddings, best first: (label index, score).
    pub fn top_labels(&self, image: &[f32], labels: &[Vec<f32>], top_k: usize) -> Vec<(usize, f32)> {
        let cosines = labels.iter().map(|label| label.iter().zip(image).map(|(a, b)| a * b).sum::<f32>());
        let scores: Vec<f32> = match *self {
            Scoring::Softmax { scale } => {
                let logits: Vec<f32> = cosines.map(|c| scale * c).collect();
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let exps: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
                let total: f32 = exps.iter().sum();
                exps.iter().map(|e| e / total).collect()
            }
            Scoring::Sigmoid { scale, bias } => cosines.map(|c| 1.0 / (1.0 + (-(scale * c + bias)).exp())).collect(),
        };
        let mut scored: Vec<(usize, f32)> = scores.into_iter().enumerate().collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(top_k);
        scored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_to_unit_length() {
        let v = l2_normalized(vec![3.0, 4.0]);
        assert_eq!(v, vec![0.6, 0.8]);
        assert_eq!(l2_normalized(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }

    /// Finite float32 vectors whose squares leave f32's range still come out unit length.
    #[test]
    fn normalizes_the_extremes_of_float32() {
        for v in [vec![f32::MAX; 512], vec![1e-40; 512], [vec![0.0; 511], vec![f32::from_bits(1)]].concat()] {
            let length: f32 = l2_normalized(v.clone()).iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((length - 1.0).abs() < 1e-5, "{} x {}: length {length}", v.len(), v[0]);
        }
    }

    #[test]
    fn scores_are_a_sorted_softmax() {
        let labels = [vec![1.0, 0.0], vec![0.0, 1.0], vec![0.6, 0.8]];
        let top = Scoring::CLIP.top_labels(&[0.0, 1.0], &labels, 2);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2]);
        let all: f32 = Scoring::CLIP.top_labels(&[0.0, 1.0], &labels, 3).iter().map(|t| t.1).sum();
        assert!((all - 1.0).abs() < 1e-6);
        let expected = 1.0 / (1.0 + (-20.0f32).exp() + (-100.0f32).exp());
        assert!((top[0].1 - expected).abs() < 1e-6, "{top:?}");
    }

    #[test]
    fn sigmoid_scores_each_label_on_its_own() {
        let labels = [vec![1.0, 0.0], vec![0.0, 1.0], vec![0.6, 0.8]];
        let scoring = Scoring::siglip(2.0, -1.25);
        let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
        let top = scoring.top_labels(&[0.0, 1.0], &labels, 3);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 0]);
        let scale = 2.0f32.exp();
        for (i, score) in top {
            let cos = labels[i][1];
            assert!((score - sigmoid(scale * cos - 1.25)).abs() < 1e-6, "label {i}: {score}");
        }
        // Alone or among others, a label scores the same.
        assert_eq!(
            scoring.top_labels(&[0.0, 1.0], &labels[2..], 1)[0].1,
            scoring.top_labels(&[0.0, 1.0], &labels, 2)[1].1
        );
    }
}
