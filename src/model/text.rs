//! The text tower: CLIP's text encoder as a second session beside the image one, on the same ONNX
//! Runtime environment and execution provider, run by the same model worker.
//!
//! Input names and id type come from the graph: `input_ids` (int64 or int32), and `attention_mask`
//! when the export has one (1 for each text's tokens, 0 for padding). A batch is padded to the
//! graph's fixed length, else to the tokenizer's fixed length (CLIP's 77, SigLIP's 64), else to the
//! length bucket ([`LENGTHS`]) that holds the batch's longest text, which only a graph with a mask
//! may take: one without (SigLIP pools the last position) would give a text another vector beside a
//! longer one.
//! The graph gives the final [N, dim] embedding (`text_embeds`, or SigLIP's `pooler_output`).

use std::borrow::Cow;

use ort::{
    session::{Session, SessionInputValue, SessionOutputs},
    value::{DynTensor, Tensor, TensorElementType},
};

use super::{
    Buckets, Graph, ImageModelInfo, ModelData, ModelError, Runtime, Shapes, Texts, Tower, TowerInfo, outputs::unit_rows,
};
use crate::{
    settings::{Device, ModelSettings},
    tokenize::{Padding, Tokenizer, Tokens},
};

/// The lengths a masked batch is padded to (model/shapes.rs): four, so that with seven batch sizes
/// the tower declares 28 shapes. A text longer than the last runs at its own length, outside them.
const LENGTHS: [usize; 4] = [16, 64, 256, 1024];

/// The element type the graph declares for its token ids (any real vocabulary fits either).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdType {
    Int64,
    Int32,
}

/// What the rest of the service needs to know about the text model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TextModelInfo {
    pub id: String,
    /// The image tower's.
    pub provider: Device,
    pub input_name: String,
    /// Present when the graph takes an attention mask.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask_name: Option<String>,
    pub ids_type: IdType,
    pub output_name: String,
    /// The token count every row is padded to: the graph's, else the tokenizer's fixed length;
    /// `None`: padded per batch (masked).
    pub context: Option<usize>,
    /// The tokenizer's padding.
    pub padding: Padding,
    /// `clip-bpe` or `tokenizer.json`.
    pub tokenizer: &'static str,
    pub dim: usize,
    pub batch_size: usize,
}

impl TowerInfo for TextModelInfo {
    fn batch_size(&self) -> usize {
        self.batch_size
    }
}

pub struct TextModel {
    graph: Graph,
    pad_id: i64,
    /// The empty text: the known-good warm-up input.
    empty: Tokens,
    buckets: Buckets,
    pub info: TextModelInfo,
}

/// What the text graph takes: its token ids' input (by name and type), its attention mask if any,
/// and the one length every text is padded to, where there is one (the graph's, else the
/// tokenizer's padding).
struct TextInputs {
    ids: String,
    mask_name: Option<String>,
    ids_type: IdType,
    context: Option<usize>,
}

impl TextInputs {
    /// The inputs of `session`, or why clipfn cannot feed them.
    fn of(session: &Session, padding: &Padding) -> Result<TextInputs, ModelError> {
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
            Some(TensorElementType::Int64) => IdType::Int64,
            Some(TensorElementType::Int32) => IdType::Int32,
            other => return Err(ModelError::Load(format!("text input ids must be int64 or int32, not {other:?}"))),
        };
        let context = match ids.dtype().tensor_shape().map(|s| &s[..]) {
            Some(&[_, fixed]) if fixed > 0 => Some(fixed as usize),
            _ => padding.length,
        };
        if context.is_none() && mask_name.is_none() {
            return Err(ModelError::Load(format!(
                "the text graph takes no attention_mask, so every text must be padded to one fixed length (or its \
                     vector would depend on the texts batched with it), but the tokenizer's padding is {}: give \
                     tokenizer.json a Fixed padding strategy, or tokenizer_config.json a pad_token and model_max_length",
                padding.from
            )));
        }
        Ok(TextInputs { ids: ids.name().to_string(), mask_name, ids_type, context })
    }
}

impl TextModel {
    /// Builds the session beside the `image` tower's (same runtime, so the same provider) and runs
    /// warm-up batches of empty texts, which also reveal the embedding size; the full batch's last
    /// row carries the tokenizer's largest id, so a vocabulary larger than the model's embedding
    /// table fails here.
    pub fn load(
        runtime: &mut Runtime,
        image: &ImageModelInfo,
        settings: &ModelSettings,
        data: ModelData,
        id: String,
        tokenizer: &Tokenizer,
    ) -> Result<Self, ModelError> {
        let provider = runtime.device();
        // The shapes are known once the graph is read: declared below.
        let mut graph = Graph::load(runtime, settings, &data, Shapes::any())?;
        // As for the image model: no copy of the weights beside the session's.
        drop(data);
        let padding = tokenizer.padding();
        let TextInputs { ids, mask_name, ids_type, context } = TextInputs::of(&graph.session, &padding)?;
        let output_name = super::outputs::embedding_output(&graph.outputs, "text_embeds")?;
        let info = TextModelInfo {
            id,
            provider,
            input_name: ids,
            mask_name,
            ids_type,
            output_name,
            context,
            padding,
            tokenizer: tokenizer.kind(),
            dim: 0,
            batch_size: image.batch_size,
        };
        let empty = tokenizer.tokenize("").map_err(ModelError::load)?;
        let mut largest = empty.clone();
        largest.ids.insert(largest.ids.len().min(1), tokenizer.max_id());
        let mut full = vec![&empty; image.batch_size - 1];
        full.push(&largest);
        let pad_id = info.padding.pad_id;
        let buckets = Buckets::powers_of_two(image.batch_size, settings.fill(provider));
        let lengths = info.context.map_or(LENGTHS.to_vec(), |fixed| vec![fixed]);
        graph.shapes = Shapes::new(
            buckets.sizes().iter().flat_map(|&n| lengths.iter().map(move |&length| vec![n as i64, length as i64])),
        );
        let mut model = TextModel { graph, pad_id, empty: empty.clone(), buckets, info };
        // At 1 (a search query) and the full batch, and on CUDA every shape, as the image tower, so
        // that no request pays for a first run at a new shape.
        model.check()?;
        let embeddings = model.run(&full).map_err(|e| {
            ModelError::Load(format!(
                "the tokenizer's vocabulary ({} tokens) does not fit the text model's embedding table, or the \
                 model cannot run: {e}",
                tokenizer.max_id() + 1
            ))
        })?;
        model.info.dim = embeddings.first().map_or(0, Vec::len);
        if model.info.dim == 0 {
            return Err(ModelError::Load("the text model returned empty embeddings".into()));
        }
        if model.info.dim != image.dim {
            return Err(ModelError::Load(format!(
                "the text model's embeddings have {} dimensions but the image model's have {}: both towers must \
                 embed into the same space",
                model.info.dim, image.dim
            )));
        }
        if provider.is_cuda() {
            Tower::warm_up(&mut model, true)?;
        }
        Ok(model)
    }

    /// An int64 tensor, or int32 for graphs that declare their ids so (the ids of any real vocabulary fit).
    fn tensor(&self, shape: [i64; 2], values: Vec<i64>) -> Result<DynTensor, ModelError> {
        match self.info.ids_type {
            IdType::Int32 => Tensor::from_array((shape, values.into_iter().map(|v| v as i32).collect::<Vec<_>>()))
                .map(Tensor::upcast),
            IdType::Int64 => Tensor::from_array((shape, values)).map(Tensor::upcast),
        }
        .map_err(ModelError::inference)
    }
}

/// The text tower takes the tokenized texts the text side queues; the model pads each batch.
impl Tower for TextModel {
    type Io = Texts;

    fn info(&self) -> &TextModelInfo {
        &self.info
    }

    /// Pads the texts' ids into one batch (see the module) and runs it.
    fn run(&mut self, texts: &[&Tokens]) -> Result<Vec<Vec<f32>>, ModelError> {
        let longest = texts.iter().map(|t| t.ids.len()).max().unwrap_or(0).max(1);
        let width = self
            .info
            .context
            .unwrap_or_else(|| LENGTHS.into_iter().find(|&length| length >= longest).unwrap_or(longest));
        let (mut ids, mut mask) = (Vec::with_capacity(texts.len() * width), Vec::with_capacity(texts.len() * width));
        for text in texts {
            // Tokenizers already cut to the model's length; a longer row is cut, never wrapped.
            let row = &text.ids[..text.ids.len().min(width)];
            ids.extend_from_slice(row);
            ids.resize(ids.len() + width - row.len(), self.pad_id);
            mask.extend((0..width).map(|i| i64::from(i < row.len())));
        }
        let shape = [texts.len() as i64, width as i64];
        let mut feeds: Vec<(Cow<str>, SessionInputValue)> =
            vec![(Cow::Owned(self.info.input_name.clone()), self.tensor(shape, ids)?.into())];
        if let Some(name) = &self.info.mask_name {
            feeds.push((Cow::Owned(name.clone()), self.tensor(shape, mask)?.into()));
        }
        let output = self.info.output_name.as_str();
        self.graph.run_inputs(&shape, feeds, |outputs: &SessionOutputs| unit_rows(outputs, output, texts.len()))
    }

    /// Runs the empty text again: after a failed batch, this tells a broken model or device from
    /// texts that trip the model.
    fn check(&mut self) -> Result<(), ModelError> {
        let empty = self.empty.clone();
        self.run(&[&empty]).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.graph.shapes
    }

    fn batching(&self) -> Option<(&Buckets, Tokens)> {
        Some((&self.buckets, self.empty.clone()))
    }
}
