//! A tower's ONNX graph: its session, its inputs and outputs as declared, the input shapes it runs,
//! and a run. Every tower holds its graphs this way (the image and text towers, the heads, the
//! face, OCR and object towers); each checks the inputs and outputs its format needs and names its
//! own file in a refusal.

use ort::{
    environment::Environment,
    session::{Session, SessionInputs, SessionOutputs},
    value::TensorRef,
};

use super::{ModelData, ModelError, Runtime, Shapes};
use crate::settings::ModelSettings;

/// An input's or output's name, and its shape as the graph declares it (-1 where dynamic).
pub type Port = (String, Option<Vec<i64>>);

pub struct Graph {
    pub(in crate::model) session: Session,
    /// The inputs, in the graph's order.
    pub inputs: Vec<Port>,
    /// The outputs, in the graph's order.
    pub outputs: Vec<Port>,
    /// The input shapes it runs (model/shapes.rs).
    pub shapes: Shapes,
    /// Whether every declared shape is run at start-up (CUDA).
    pub warms_every_shape: bool,
    // The session borrows the process-wide environment: it lives as long as the session.
    _environment: Environment,
}

impl Graph {
    /// The graph in `data`, which runs the `shapes` declared.
    pub fn load(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        shapes: Shapes,
    ) -> Result<Self, ModelError> {
        let session = runtime.session(settings, data)?;
        let shape = |dtype: &ort::value::ValueType| dtype.tensor_shape().map(|s| s.to_vec());
        let inputs = session.inputs().iter().map(|i| (i.name().to_string(), shape(i.dtype()))).collect();
        let outputs = session.outputs().iter().map(|o| (o.name().to_string(), shape(o.dtype()))).collect();
        let (warms_every_shape, _environment) = (runtime.device().is_cuda(), runtime.environment());
        Ok(Graph { session, inputs, outputs, shapes, warms_every_shape, _environment })
    }

    /// As [`Graph::load`], refused, with the reason, unless the graph has one input.
    pub fn open(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        shapes: Shapes,
    ) -> Result<Self, String> {
        let graph = Graph::load(runtime, settings, data, shapes).map_err(|e| e.to_string())?;
        match graph.inputs.len() {
            1 => Ok(graph),
            n => Err(format!("has {n} inputs, not one")),
        }
    }

    /// The first input's shape as declared.
    pub fn input_shape(&self) -> Option<&[i64]> {
        self.inputs.first()?.1.as_deref()
    }

    /// Runs `values`, laid out as `shape`, on the first input: output `output`'s shape and values.
    pub fn run<const N: usize>(
        &mut self,
        shape: [i64; N],
        values: &[f32],
        output: usize,
    ) -> Result<(Vec<i64>, Vec<f32>), ModelError> {
        self.run_with(shape, values, |outputs| {
            let (shape, values) = outputs[output].try_extract_tensor::<f32>().map_err(ModelError::inference)?;
            Ok((shape.to_vec(), values.to_vec()))
        })
    }

    /// Runs `values`, laid out as `shape`, on the first input, and reads the outputs with `read`
    /// where they lie.
    pub fn run_with<const N: usize, T>(
        &mut self,
        shape: [i64; N],
        values: &[f32],
        read: impl FnOnce(&SessionOutputs) -> Result<T, ModelError>,
    ) -> Result<T, ModelError> {
        let input = TensorRef::from_array_view((shape, values)).map_err(ModelError::inference)?;
        let name = self.inputs[0].0.clone();
        self.run_inputs(&shape, ort::inputs![name => input], read)
    }

    /// Runs `inputs`, a batch of input shape `shape`, and reads the outputs with `read` where they
    /// lie.
    pub fn run_inputs<'i, 'v: 'i, const M: usize, T>(
        &mut self,
        shape: &[i64],
        inputs: impl Into<SessionInputs<'i, 'v, M>>,
        read: impl FnOnce(&SessionOutputs) -> Result<T, ModelError>,
    ) -> Result<T, ModelError> {
        self.shapes.ran(shape);
        let outputs = self.session.run(inputs).map_err(ModelError::inference)?;
        read(&outputs)
    }
}
