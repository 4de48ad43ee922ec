//! Heads: small graphs on the image embedding, each giving one number per photo (the album app's
//! aesthetic score, a two-prompt quality test as a linear head: infra/make_head.py), configured by
//! `CLIPFN_HEADS`. Together they are one tower on the model worker, run after the image tower on
//! its unit-length embeddings, so they share its device and batch across photos and requests.
//!
//! A head is float32 `[N, dim]` in, `[N]` or `[N, 1]` out, one input and one output whatever
//! their names; anything else, or an input width that is not the image tower's `dim`, stops
//! start-up with the head's name and file.

use ort::{session::Session, value::TensorRef};

use super::{Buckets, Embeddings, ModelData, ModelError, Runtime, Shapes, Tower, TowerInfo};
use crate::settings::ModelSettings;

/// What the rest of the service is told about the heads.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeadsInfo {
    /// The heads' names, in `CLIPFN_HEADS`'s order: a photo's scores come in this order.
    pub names: Vec<String>,
    /// Where each was read from.
    pub files: Vec<String>,
    /// The width of the embeddings they take.
    pub dim: usize,
    pub batch_size: usize,
}

impl TowerInfo for HeadsInfo {
    fn batch_size(&self) -> usize {
        self.batch_size
    }
}

/// One head read for loading: its name, where it was read from, and its bytes or file.
pub struct HeadFile {
    pub name: String,
    pub location: String,
    pub data: ModelData,
}

struct Head {
    session: Session,
    input: String,
    output: String,
}

pub struct Heads {
    heads: Vec<Head>,
    buckets: Buckets,
    shapes: Shapes,
    pub info: HeadsInfo,
    _environment: ort::environment::Environment,
}

impl Heads {
    /// Builds each head's session on the image tower's runtime, refuses one of the wrong shape,
    /// and warms them all up (model/shapes.rs).
    pub fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        files: Vec<HeadFile>,
        dim: usize,
        batch_size: usize,
    ) -> Result<Self, ModelError> {
        let mut heads = Vec::with_capacity(files.len());
        let (mut names, mut locations) = (Vec::new(), Vec::new());
        for HeadFile { name, location, data } in files {
            let refuse = |why: String| ModelError::Load(format!("head '{name}' ({location}): {why}"));
            let session = runtime.session(settings, &data).map_err(|e| refuse(e.to_string()))?;
            let (input, output) = match (session.inputs(), session.outputs()) {
                ([input], [output]) => (input, output),
                (inputs, outputs) => {
                    return Err(refuse(format!(
                        "has {} inputs and {} outputs; a head takes one [N, {dim}] input and gives one [N] or [N, 1] output",
                        inputs.len(),
                        outputs.len()
                    )));
                }
            };
            match input.dtype().tensor_shape().map(|s| s.to_vec()).as_deref() {
                Some([_, width]) if *width == dim as i64 || *width < 0 => {}
                shape => {
                    return Err(refuse(format!(
                        "takes {shape:?}, not the image tower's embeddings [N, {dim}]: a head is made for one model's dim"
                    )));
                }
            }
            match output.dtype().tensor_shape().map(|s| s.to_vec()).as_deref() {
                Some([_]) | Some([_, 1]) | Some([_, -1]) => {}
                shape => return Err(refuse(format!("gives {shape:?}, not [N] or [N, 1]"))),
            }
            let head = Head { input: input.name().to_string(), output: output.name().to_string(), session };
            heads.push(head);
            names.push(name);
            locations.push(location);
        }
        let info = HeadsInfo { names, files: locations, dim, batch_size };
        let device = runtime.device();
        let buckets = Buckets::powers_of_two(batch_size, settings.pads(device));
        let shapes = Shapes::batches(&buckets, &[dim as i64]);
        let mut loaded = Heads { heads, buckets, shapes, info, _environment: runtime.environment() };
        Tower::warm_up(&mut loaded, device.is_cuda())
            .map_err(|e| ModelError::Load(format!("heads: the warm-up failed: {e}")))?;
        Ok(loaded)
    }
}

/// The heads take the image tower's embeddings; each embedding gets one score per head.
impl Tower for Heads {
    type Io = Embeddings;

    fn info(&self) -> &HeadsInfo {
        &self.info
    }

    fn run(&mut self, embeddings: &[&Vec<f32>]) -> Result<Vec<Vec<f32>>, ModelError> {
        let (n, dim) = (embeddings.len(), self.info.dim);
        let mut batch = Vec::with_capacity(n * dim);
        embeddings.iter().for_each(|e| batch.extend_from_slice(e));
        self.shapes.ran(&[n as i64, dim as i64]);
        let mut scores = vec![Vec::with_capacity(self.heads.len()); n];
        for (head, name) in self.heads.iter_mut().zip(&self.info.names) {
            let input =
                TensorRef::from_array_view(([n as i64, dim as i64], &batch[..])).map_err(ModelError::inference)?;
            let outputs =
                head.session.run(ort::inputs![head.input.as_str() => input]).map_err(ModelError::inference)?;
            let (_, values) =
                outputs[head.output.as_str()].try_extract_tensor::<f32>().map_err(ModelError::inference)?;
            if values.len() != n {
                return Err(ModelError::Inference(format!(
                    "head '{name}' gave {} values for {n} photos",
                    values.len()
                )));
            }
            scores.iter_mut().zip(values).for_each(|(photo, &value)| photo.push(value));
        }
        Ok(scores)
    }

    fn check(&mut self) -> Result<(), ModelError> {
        let zeros = vec![0.0; self.info.dim];
        self.run(&[&zeros]).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.shapes
    }

    fn batching(&self) -> Option<(&Buckets, Vec<f32>)> {
        Some((&self.buckets, vec![0.0; self.info.dim]))
    }
}
