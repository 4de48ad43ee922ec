//! Which output of a tower's graph is the embedding. CLIP's exports name it `image_embeds` /
//! `text_embeds`; the transformers.js / Optimum SigLIP exports put `last_hidden_state`
//! (`[batch, tokens, width]`) first and the embedding, `pooler_output` (`[batch, dim]`), second.
//! Taking the first output would feed per-token states to the checks and fail start-up, or
//! worse, pass them off as embeddings.

use ort::value::Outlet;

use super::ModelError;

/// The name the pooled embedding goes by in the SigLIP exports (and Hugging Face models generally).
const POOLED: &str = "pooler_output";

/// The embedding among `outputs`: the one named `preferred` (`image_embeds` / `text_embeds`),
/// else `pooler_output`, else the only output, else the first two-dimensional (`[batch, dim]`) one.
pub fn embedding_output(outputs: &[Outlet], preferred: &str) -> Result<String, ModelError> {
    let named = |name: &str| outputs.iter().find(|o| o.name() == name);
    let two_dimensional = || outputs.iter().find(|o| o.dtype().tensor_shape().is_some_and(|s| s.len() == 2));
    let only = || if let [only] = outputs { Some(only) } else { None };
    named(preferred)
        .or_else(|| named(POOLED))
        .or_else(only)
        .or_else(two_dimensional)
        .map(|o| o.name().to_string())
        .ok_or_else(|| {
            let names: Vec<&str> = outputs.iter().map(Outlet::name).collect();
            ModelError::Load(format!(
                "no embedding output: none is named {preferred} or {POOLED}, and none of [{}] is [batch, dim]; \
                 name one with CLIPFN_OUTPUT_NAME",
                names.join(", ")
            ))
        })
}

#[cfg(test)]
mod tests {
    use ort::value::{Shape, SymbolicDimensions, TensorElementType, ValueType};

    use super::*;

    fn outlet(name: &str, dims: &[i64]) -> Outlet {
        let dtype = ValueType::Tensor {
            ty: TensorElementType::Float32,
            shape: Shape::new(dims.iter().copied()),
            dimension_symbols: SymbolicDimensions::empty(dims.len()),
        };
        Outlet::new(name, dtype)
    }

    #[test]
    fn the_embedding_is_found_by_name_then_by_shape() {
        let siglip = [outlet("last_hidden_state", &[-1, 196, 128]), outlet("pooler_output", &[-1, 128])];
        assert_eq!(embedding_output(&siglip, "image_embeds").unwrap(), "pooler_output");
        let clip = [
            outlet("last_hidden_state", &[-1, 50, 768]),
            outlet("pooler_output", &[-1, 768]),
            outlet("image_embeds", &[-1, 512]),
        ];
        assert_eq!(embedding_output(&clip, "image_embeds").unwrap(), "image_embeds");
        let unnamed = [outlet("hidden", &[-1, 7, 64]), outlet("output_1", &[-1, 64])];
        assert_eq!(embedding_output(&unnamed, "text_embeds").unwrap(), "output_1");
        assert_eq!(embedding_output(&[outlet("features", &[-1, 3, 4])], "image_embeds").unwrap(), "features");
        let message = embedding_output(&[outlet("a", &[-1, 7, 64]), outlet("b", &[-1])], "image_embeds").unwrap_err();
        assert!(message.to_string().contains("[a, b]") && message.to_string().contains("CLIPFN_OUTPUT_NAME"));
    }
}
