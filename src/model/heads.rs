//! Heads: small graphs on the image embedding, each giving one number per photo (the album app's
//! aesthetic score, a two-prompt quality test as a linear head: infra/make_head.py), configured by
//! `CLIPFN_HEADS`. Together they are one tower on the model worker, run after the image tower on
//! its unit-length embeddings, so they share its device and batch across photos and requests.
//!
//! A head is float32 `[N, dim]` in, `[N]` or `[N, 1]` out, one input and one output whatever
//! their names; anything else, or an input width that is not the image tower's `dim`, stops
//! start-up with the head's name and file.

use super::{Buckets, Embeddings, Graph, ModelData, ModelError, Runtime, Shapes, Tower, TowerInfo};
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

pub struct Heads {
    /// One graph a head, in `info.names`' order. Every batch runs on each, so each counts the same
    /// shapes: the first's counts are the tower's.
    graphs: Vec<Graph>,
    buckets: Buckets,
    pub info: HeadsInfo,
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
        let device = runtime.device();
        let buckets = Buckets::powers_of_two(batch_size, settings.fill(device));
        let mut graphs = Vec::with_capacity(files.len());
        let (mut names, mut locations) = (Vec::new(), Vec::new());
        for HeadFile { name, location, data } in files {
            let refuse = |why: String| ModelError::Load(format!("head '{name}' ({location}): {why}"));
            let shapes = Shapes::batches(&buckets, &[dim as i64]);
            let graph = Graph::load(runtime, settings, &data, shapes).map_err(|e| refuse(e.to_string()))?;
            let (input, output) = match (&graph.inputs[..], &graph.outputs[..]) {
                ([(_, input)], [(_, output)]) => (input.as_deref(), output.as_deref()),
                (inputs, outputs) => {
                    return Err(refuse(format!(
                        "has {} inputs and {} outputs; a head takes one [N, {dim}] input and gives one [N] or [N, 1] output",
                        inputs.len(),
                        outputs.len()
                    )));
                }
            };
            match input {
                Some([_, width]) if *width == dim as i64 || *width < 0 => {}
                shape => {
                    return Err(refuse(format!(
                        "takes {shape:?}, not the image tower's embeddings [N, {dim}]: a head is made for one model's dim"
                    )));
                }
            }
            match output {
                Some([_]) | Some([_, 1]) | Some([_, -1]) => {}
                shape => return Err(refuse(format!("gives {shape:?}, not [N] or [N, 1]"))),
            }
            graphs.push(graph);
            names.push(name);
            locations.push(location);
        }
        if graphs.is_empty() {
            return Err(ModelError::Load("heads: none were given".into()));
        }
        let info = HeadsInfo { names, files: locations, dim, batch_size };
        let mut loaded = Heads { graphs, buckets, info };
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
        let mut scores = vec![Vec::with_capacity(self.graphs.len()); n];
        for (graph, name) in self.graphs.iter_mut().zip(&self.info.names) {
            let (_, values) = graph.run([n as i64, dim as i64], &batch, 0)?;
            if values.len() != n {
                return Err(ModelError::Inference(format!(
                    "head '{name}' gave {} values for {n} photos",
                    values.len()
                )));
            }
            scores.iter_mut().zip(values).for_each(|(photo, value)| photo.push(value));
        }
        Ok(scores)
    }

    fn check(&mut self) -> Result<(), ModelError> {
        let zeros = vec![0.0; self.info.dim];
        self.run(&[&zeros]).map(drop)
    }

    fn shapes(&self) -> &Shapes {
        &self.graphs[0].shapes
    }

    fn batching(&self) -> Option<(&Buckets, Vec<f32>)> {
        Some((&self.buckets, vec![0.0; self.info.dim]))
    }
}
