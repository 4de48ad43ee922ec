//! Which output of a tower's graph is the embedding, and the embeddings read from it: of unit
//! length, normalised here once for every tower, so that no caller has to.
//!
//! CLIP's exports name the embedding `image_embeds` / `text_embeds`; the transformers.js / Optimum
//! SigLIP exports put `last_hidden_state` (`[batch, tokens, width]`) first and the embedding,
//! `pooler_output` (`[batch, dim]`), second. Taking the first output would feed per-token states
//! to the checks and fail start-up, or worse, pass them off as embeddings.

use ort::session::SessionOutputs;

use super::{ModelError, graph::Port};
use crate::embedding::l2_normalized;

/// The name the pooled embedding goes by in the SigLIP exports (and Hugging Face models generally).
const POOLED: &str = "pooler_output";

/// The embedding among `outputs`: the one named `preferred` (`image_embeds` / `text_embeds`),
/// else `pooler_output`, else the only output, else the first two-dimensional (`[batch, dim]`) one.
pub fn embedding_output(outputs: &[Port], preferred: &str) -> Result<String, ModelError> {
    let ranks: Vec<(&str, Option<usize>)> =
        outputs.iter().map(|(name, shape)| (name.as_str(), shape.as_ref().map(Vec::len))).collect();
    pick(&ranks, preferred).map(String::from)
}

/// The `[n, dim]` output named `name`, one L2-normalised embedding per row: CLIP and SigLIP compare
/// by cosine, which unit length makes a dot product for every caller.
pub fn unit_rows(outputs: &SessionOutputs, name: &str, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
    let output = outputs.get(name).ok_or_else(|| ModelError::Inference(format!("no output named '{name}'")))?;
    let (shape, values) = output.try_extract_tensor::<f32>().map_err(ModelError::inference)?;
    if shape.len() != 2 || shape[0] != n as i64 {
        return Err(ModelError::Inference(format!("expected output [{n}, dim], got {shape}")));
    }
    Ok(values.chunks_exact(shape[1] as usize).map(|row| l2_normalized(row.to_vec())).collect())
}

/// [`embedding_output`] over each output's name and rank.
fn pick<'a>(outputs: &[(&'a str, Option<usize>)], preferred: &str) -> Result<&'a str, ModelError> {
    let named = |name: &str| outputs.iter().find(|o| o.0 == name);
    let only = || if let [only] = outputs { Some(only) } else { None };
    let two_dimensional = || outputs.iter().find(|o| o.1 == Some(2));
    named(preferred).or_else(|| named(POOLED)).or_else(only).or_else(two_dimensional).map(|o| o.0).ok_or_else(|| {
        let names: Vec<&str> = outputs.iter().map(|o| o.0).collect();
        ModelError::Load(format!(
            "no embedding output: none is named {preferred} or {POOLED}, and none of [{}] is [batch, dim]; name \
             one with CLIPFN_OUTPUT_NAME",
            names.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedding_is_found_by_name_then_by_shape() {
        let siglip = [("last_hidden_state", Some(3)), ("pooler_output", Some(2))];
        assert_eq!(pick(&siglip, "image_embeds").unwrap(), "pooler_output");
        let clip = [("last_hidden_state", Some(3)), ("pooler_output", Some(2)), ("image_embeds", Some(2))];
        assert_eq!(pick(&clip, "image_embeds").unwrap(), "image_embeds");
        let unnamed = [("hidden", Some(3)), ("output_1", Some(2))];
        assert_eq!(pick(&unnamed, "text_embeds").unwrap(), "output_1");
        assert_eq!(pick(&[("features", None)], "image_embeds").unwrap(), "features");
        let message = pick(&[("a", Some(3)), ("b", Some(1))], "image_embeds").unwrap_err().to_string();
        assert!(message.contains("[a, b]") && message.contains("CLIPFN_OUTPUT_NAME"), "{message}");
    }
}
