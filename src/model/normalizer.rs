//! The model's normalisation (CLIP's, or its folder's `preprocessor_config.json`) as ONNX ops,
//! for `CLIPFN_NORMALIZE=model`.
//!
//! A second, tiny session takes the photos as they leave the resizer (uint8, `[N, S, S, 3]`) and
//! does cast, scale, per-channel shift and the NHWC -> NCHW transpose on the execution provider.
//! On CUDA its output stays in device memory (IoBinding) and goes straight into the CLIP session,
//! so only a quarter of the bytes cross PCIe and the GPU does the arithmetic. The graph is built
//! at load time with ONNX Runtime's model editor API, so any CLIP export works unchanged.

use ort::{
    editor::{Graph, Model as GraphModel, Node, Opset},
    memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType},
    operator::Attribute,
    session::{Session, builder::SessionBuilder},
    value::{DynValue, Outlet, Shape, SymbolicDimensions, Tensor, TensorElementType, ValueType},
};

use super::{ModelError, image::scale_and_offset};
use crate::{preprocess::Transform, settings::Device};

const INPUT: &str = "pixels_u8";
const OUTPUT: &str = "pixel_values";

pub struct Normalizer {
    session: Session,
    output_memory: MemoryInfo<'static>,
    side: i64,
}

impl Normalizer {
    /// `builder` carries the same execution provider as the CLIP session; `device` says where
    /// its output should live.
    pub fn new(builder: &SessionBuilder, transform: &Transform, device: Device) -> Result<Self, ModelError> {
        let side = i64::from(transform.side());
        let (scale, offset) = scale_and_offset(transform);
        let mut graph = Graph::new().map_err(load)?;
        graph.set_inputs([Outlet::new(INPUT, tensor(TensorElementType::Uint8, [-1, side, side, 3]))]).map_err(load)?;
        graph
            .set_outputs([Outlet::new(OUTPUT, tensor(TensorElementType::Float32, [-1, 3, side, side]))])
            .map_err(load)?;
        // x * (rescale / std) - mean / std, per channel on the last (NHWC) axis.
        graph.add_initializer("clip_scale", constant(scale)?, false).map_err(load)?;
        graph.add_initializer("clip_shift", constant(offset)?, false).map_err(load)?;
        let nodes = [
            Node::new("Cast", "", "to_float", [INPUT], ["as_float"], [Attribute::new("to", 1_i64).map_err(load)?]),
            Node::new("Mul", "", "scale", ["as_float", "clip_scale"], ["scaled"], []),
            Node::new("Add", "", "shift", ["scaled", "clip_shift"], ["normalized_nhwc"], []),
            Node::new(
                "Transpose",
                "",
                "to_nchw",
                ["normalized_nhwc"],
                [OUTPUT],
                [Attribute::new("perm", vec![0_i64, 3, 1, 2]).map_err(load)?],
            ),
        ];
        for node in nodes {
            graph.add_node(node.map_err(load)?).map_err(load)?;
        }
        let mut model = GraphModel::new([Opset::new("", 17).map_err(load)?]).map_err(load)?;
        model.set_graph(graph).map_err(load)?;
        let session = model.into_session(builder).map_err(load)?;
        let device = if device.is_cuda() { AllocationDevice::CUDA } else { AllocationDevice::CPU };
        let output_memory = MemoryInfo::new(device, 0, AllocatorType::Device, MemoryType::Default).map_err(load)?;
        Ok(Normalizer { session, output_memory, side })
    }

    /// Normalises `n` photos laid end to end as `[S, S, 3]` bytes; the result lives where the CLIP
    /// session will read it.
    pub fn run(&mut self, raw: &[u8], n: usize) -> Result<DynValue, ModelError> {
        // An owned copy (a few MB per batch): binding a borrowed TensorRef makes ort clone it under
        // a lock it already holds, which deadlocks in 2.0.0-rc.15.
        let input = Tensor::from_array(([n as i64, self.side, self.side, 3], raw.to_vec())).map_err(inference)?;
        let mut binding = self.session.create_binding().map_err(inference)?;
        binding.bind_input(INPUT, &input).map_err(inference)?;
        binding.bind_output_to_device(OUTPUT, &self.output_memory).map_err(inference)?;
        let mut outputs = self.session.run_binding(&binding).map_err(inference)?;
        outputs.remove(OUTPUT).ok_or_else(|| ModelError::Inference("the normaliser produced no output".into()))
    }
}

fn tensor(ty: TensorElementType, dims: [i64; 4]) -> ValueType {
    ValueType::Tensor { ty, shape: Shape::new(dims), dimension_symbols: SymbolicDimensions::empty(4) }
}

fn constant(values: [f32; 3]) -> Result<Tensor<f32>, ModelError> {
    let mut tensor = Tensor::<f32>::new(&Allocator::default(), [3_usize]).map_err(load)?;
    tensor.extract_tensor_mut().1.copy_from_slice(&values);
    Ok(tensor)
}

fn load(e: impl std::fmt::Display) -> ModelError {
    ModelError::Load(format!("building the normalisation graph: {e}"))
}

fn inference(e: impl std::fmt::Display) -> ModelError {
    ModelError::Inference(format!("normalising: {e}"))
}
