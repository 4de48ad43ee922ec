//! The text tower: CLIP's text encoder as a second session beside the image one, on the same ONNX
//! Runtime environment and execution provider, run by the same model worker.
//!
//! Input names and id type come from the graph: `input_ids` ([N, 77], int64 or int32), and
//! `attention_mask` when the export has one (1 up to and including the end token).

use std::borrow::Cow;

use ort::{
    session::{Session, SessionInputValue},
    value::{DynTensor, Tensor, TensorElementType},
};

use super::{Model, ModelData, ModelError, commit, embeddings, inference, session_builder};
use crate::{
    config::{Provider, Settings},
    tokenize::{CONTEXT, END, START},
};

/// What the rest of the service needs to know about the text model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TextModelInfo {
    pub id: String,
    /// `Cuda` or `Cpu`: the image tower's.
    pub provider: Provider,
    pub input_name: String,
    /// Present when the graph takes an attention mask.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask_name: Option<String>,
    /// `int64` or `int32`, as the graph declares its ids.
    pub ids_type: &'static str,
    pub output_name: String,
    pub context: usize,
    pub dim: usize,
    pub batch_size: usize,
}

pub struct TextModel {
    session: Session,
    pub info: TextModelInfo,
}

impl TextModel {
    /// Builds the session beside `image` (same environment, same provider) and runs warm-up
    /// batches of empty texts, which also reveal the embedding size.
    pub fn load(image: &Model, settings: &Settings, data: ModelData, id: String) -> Result<Self, ModelError> {
        let provider = image.info.provider;
        let session = commit(session_builder(&image._environment, settings, provider == Provider::Cuda)?, &data)?;
        // As for the image model: no copy of the weights beside the session's.
        drop(data);
        let inputs = session.inputs();
        let ids = inputs
            .iter()
            .find(|i| i.name() == "input_ids")
            .or_else(|| inputs.iter().find(|i| i.name() != "attention_mask"))
            .ok_or_else(|| ModelError::Load("the text graph has no token id input".into()))?;
        let mask_name = inputs.iter().find(|i| i.name() == "attention_mask").map(|i| i.name().to_string());
        if let Some(other) = inputs.iter().find(|i| i.name() != ids.name() && Some(i.name()) != mask_name.as_deref()) {
            return Err(ModelError::Load(format!("the text graph has an input '{}' clipfn cannot feed", other.name())));
        }
        let ids_type = match ids.dtype().tensor_type() {
            Some(TensorElementType::Int64) => "int64",
            Some(TensorElementType::Int32) => "int32",
            other => return Err(ModelError::Load(format!("text input ids must be int64 or int32, not {other:?}"))),
        };
        let output =
            session.outputs().first().ok_or_else(|| ModelError::Load("the text graph has no output".into()))?;
        let info = TextModelInfo {
            id,
            provider,
            input_name: ids.name().to_string(),
            mask_name,
            ids_type,
            output_name: output.name().to_string(),
            context: CONTEXT,
            dim: 0,
            batch_size: settings.batch_size,
        };
        let mut model = TextModel { session, info };
        // Start and end tokens only: the empty text. At 1 (a search query) and the full batch, as
        // the image tower, so that no request pays for a first run at a new shape.
        let mut empty = vec![0; CONTEXT];
        empty[..2].copy_from_slice(&[START, END]);
        let mut embeddings = Vec::new();
        for n in [1, settings.batch_size] {
            embeddings = model.run(&empty.repeat(n), n)?;
        }
        model.info.dim = embeddings.first().map_or(0, Vec::len);
        if model.info.dim == 0 {
            return Err(ModelError::Load("the text model returned empty embeddings".into()));
        }
        Ok(model)
    }

    /// Runs `n` texts' ids (`n * CONTEXT`, zero padded) laid end to end; returns one raw (not yet
    /// L2-normalised) embedding per text.
    pub fn run(&mut self, ids: &[i64], n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
        let shape = [n as i64, CONTEXT as i64];
        let mut feeds: Vec<(Cow<str>, SessionInputValue)> =
            vec![(Cow::Owned(self.info.input_name.clone()), self.tensor(shape, ids.to_vec())?.into())];
        if let Some(name) = &self.info.mask_name {
            // 1 up to and including each row's last end token (id 0 is a real token, "!").
            let mask = ids
                .chunks_exact(CONTEXT)
                .flat_map(|row| {
                    let end = row.iter().rposition(|&id| id == END).unwrap_or(CONTEXT - 1);
                    (0..CONTEXT).map(move |i| i64::from(i <= end))
                })
                .collect();
            feeds.push((Cow::Owned(name.clone()), self.tensor(shape, mask)?.into()));
        }
        let outputs = self.session.run(feeds).map_err(inference)?;
        embeddings(&outputs, &self.info.output_name, n)
    }

    /// An int64 tensor, or int32 for graphs that declare their ids so (every CLIP id fits).
    fn tensor(&self, shape: [i64; 2], values: Vec<i64>) -> Result<DynTensor, ModelError> {
        match self.info.ids_type {
            "int32" => Tensor::from_array((shape, values.into_iter().map(|v| v as i32).collect::<Vec<_>>()))
                .map(Tensor::upcast),
            _ => Tensor::from_array((shape, values)).map(Tensor::upcast),
        }
        .map_err(inference)
    }
}
