//! A tower's ONNX graph that takes one float tensor: its session, its input and outputs as
//! declared, and a run. The face, OCR and object towers share it; each checks the outputs its
//! format needs and names its own file in a refusal.

use ort::{
    environment::Environment,
    session::{Session, SessionOutputs},
    value::TensorRef,
};

use super::{ModelData, ModelError, Runtime, Shapes};
use crate::settings::ModelSettings;

pub struct Graph {
    pub(in crate::model) session: Session,
    input: String,
    /// The input's shape as the graph declares it (-1 where dynamic).
    pub input_shape: Option<Vec<i64>>,
    /// Each output's name and its shape as declared, in the graph's order.
    pub outputs: Vec<(String, Option<Vec<i64>>)>,
    /// The input shapes it runs (model/shapes.rs).
    pub shapes: Shapes,
    /// Whether every declared shape is run at start-up (CUDA).
    pub warms_every_shape: bool,
    _environment: Environment,
}

impl Graph {
    /// The graph in `data`, which runs the `shapes` declared; refused, with the reason, unless it
    /// has one input.
    pub fn open(
        runtime: &mut Runtime,
        settings: &ModelSettings,
        data: &ModelData,
        shapes: Shapes,
    ) -> Result<Self, String> {
        let session = runtime.session(settings, data).map_err(|e| e.to_string())?;
        let [input] = session.inputs() else {
            return Err(format!("has {} inputs, not one", session.inputs().len()));
        };
        let shape = |dtype: &ort::value::ValueType| dtype.tensor_shape().map(|s| s.to_vec());
        let (input, input_shape) = (input.name().to_string(), shape(input.dtype()));
        let outputs = session.outputs().iter().map(|o| (o.name().to_string(), shape(o.dtype()))).collect();
        let (warms_every_shape, _environment) = (runtime.device().is_cuda(), runtime.environment());
        Ok(Graph { session, input, input_shape, outputs, shapes, warms_every_shape, _environment })
    }

    /// Runs `pixels`, laid out as `shape`: output `output`'s shape and values.
    pub fn run(&mut self, shape: [i64; 4], pixels: &[f32], output: usize) -> Result<(Vec<i64>, Vec<f32>), ModelError> {
        self.run_with(shape, pixels, |outputs| {
            let (shape, values) = outputs[output].try_extract_tensor::<f32>().map_err(ModelError::inference)?;
            Ok((shape.to_vec(), values.to_vec()))
        })
    }

    /// Runs `pixels`, laid out as `shape`, and reads the outputs with `read` where they lie.
    pub fn run_with<T>(
        &mut self,
        shape: [i64; 4],
        pixels: &[f32],
        read: impl FnOnce(&SessionOutputs) -> Result<T, ModelError>,
    ) -> Result<T, ModelError> {
        self.shapes.ran(&shape);
        let input = TensorRef::from_array_view((shape, pixels)).map_err(ModelError::inference)?;
        let outputs = self.session.run(ort::inputs![self.input.as_str() => input]).map_err(ModelError::inference)?;
        read(&outputs)
    }
}
