//! Model stage: the ONNX Runtime environment, the session builder every session shares, and the
//! image tower. The towers all show the worker one trait (`tower`); the text tower is in `text`.
//!
//! ONNX Runtime is loaded from `ORT_DYLIB_PATH` (the PyPI wheel's library here, the CUDA build in
//! the image), so a missing library is a clear start-up error instead of a panic. The execution
//! provider is chosen once, before any model file is read (it decides which file of a model
//! folder to read): with `auto`, a CUDA registration failure falls back to CPU and the reason is
//! kept for the log and /readyz.

mod family;
mod files;
mod folder;
mod initializers;
mod layout;
mod normalizer;
mod outputs;
mod preprocessor;
mod text;
mod tower;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use image::RgbImage;
use ort::{
    environment::Environment,
    ep,
    session::{
        Session, SessionOutputs,
        builder::{GraphOptimizationLevel, SessionBuilder},
    },
    value::TensorRef,
};

pub use self::{
    family::{Family, read_family},
    files::{TextFiles, locate_text_model, read_image_model, read_weights},
    layout::PixelBatch,
    text::{IdType, TextModel, TextModelInfo},
    tower::{Info, Input, Modality, Photos, Texts, Tower, TowerInfo, TowerKind},
};
use self::{folder::weights_of_file, normalizer::Normalizer};
use crate::{
    preprocess::{Layout, Pixels, Transform},
    settings::{Device, ModelSettings, Normalize, Provider, Weights},
};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("ONNX Runtime library: {0}")]
    Runtime(String),
    #[error("CUDA was required (CLIPFN_PROVIDER=cuda) but cannot be used: {0}")]
    CudaUnavailable(String),
    #[error("model: {0}")]
    Load(String),
    #[error("model folder: {0}")]
    Folder(String),
    #[error("preprocessor_config.json: {0}")]
    Preprocessor(String),
    #[error("inference failed: {0}")]
    Inference(String),
}

/// What the rest of the service needs to know about the loaded model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    pub id: String,
    /// The ONNX file that runs (relative to its folder when the model is a folder).
    pub file: String,
    pub precision: Weights,
    /// The provider in use.
    pub provider: Device,
    /// Why `auto` fell back to CPU, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
    pub input_name: String,
    pub output_name: String,
    /// Side of the square input image.
    pub image_size: u32,
    /// How photos are resized, cropped and normalised for this model.
    pub preprocessing: Transform,
    /// What the batcher hands the model: normalised floats, or raw bytes normalised in the model.
    pub input_layout: Layout,
    /// Length of one embedding.
    pub dim: usize,
    pub batch_size: usize,
    /// The batch sizes run at start-up (1 and `batch_size`), so that no request pays for a first
    /// run at a new shape (on CUDA, kernel selection and memory planning take seconds).
    pub warm_up_batches: Vec<usize>,
}

impl TowerInfo for ModelInfo {
    fn batch_size(&self) -> usize {
        self.batch_size
    }
}

impl ModelInfo {
    /// Values in one preprocessed photo.
    pub fn slot_len(&self) -> usize {
        3 * (self.image_size as usize).pow(2)
    }
}

/// The process's ONNX Runtime and the execution provider chosen for it. ONNX Runtime allows one
/// environment per process; a clone shares it, for a process that loads several models (the bench).
#[derive(Clone)]
pub struct Runtime {
    environment: Environment,
    device: Device,
    /// Why `auto` fell back to CPU, when it did.
    fallback_reason: Option<String>,
}

impl Runtime {
    /// Loads ONNX Runtime and settles the provider: CUDA when asked and its provider registers.
    pub fn start(settings: &ModelSettings) -> Result<Self, ModelError> {
        let environment = init_runtime()?;
        let (device, fallback_reason) = match settings.provider {
            Provider::Cpu => (Device::Cpu, None),
            Provider::Cuda | Provider::Auto => match session_builder(&environment, settings, Device::Cuda) {
                Ok(_) => (Device::Cuda, None),
                Err(e) if settings.provider == Provider::Cuda => {
                    return Err(ModelError::CudaUnavailable(e.to_string()));
                }
                Err(e) => {
                    tracing::warn!(reason = %e, "CUDA execution provider unavailable; running on CPU");
                    (Device::Cpu, Some(e.to_string()))
                }
            },
        };
        Ok(Runtime { environment, device, fallback_reason })
    }

    pub fn device(&self) -> Device {
        self.device
    }
}

/// Where the session's weights come from. ONNX Runtime reads a local file by itself, so clipfn
/// never holds a second copy of the weights; a model fetched from a store arrives as bytes, which
/// are let go as soon as the session holds the weights.
pub enum ModelData {
    File(PathBuf),
    Bytes(bytes::Bytes),
}

/// Where the model's part of start-up went, for the "model loaded and warmed up" log line.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoadTimings {
    /// Building the session: parsing the graph, optimising it, placing and prepacking weights.
    pub session: Duration,
    /// The warm-up batches (batch 1 and the full batch size).
    pub warm_up: Duration,
}

/// A model file read for loading.
pub struct ModelFile {
    pub data: ModelData,
    /// The model's name as clients see it.
    pub id: String,
    /// Its file name (relative to its folder for a folder) and precision.
    pub file: String,
    pub precision: Weights,
    /// The folder's preprocessing, when it has a `preprocessor_config.json`.
    pub preprocessing: Option<Transform>,
}

impl ModelFile {
    /// A bare `.onnx` file: its precision read from its name, CLIP's preprocessing.
    pub fn bare(data: ModelData, name: &str) -> Self {
        ModelFile {
            data,
            id: name.strip_suffix(".onnx").unwrap_or(name).to_string(),
            file: name.to_string(),
            precision: weights_of_file(name),
            preprocessing: None,
        }
    }
}

pub struct Model {
    session: Session,
    /// Present when the model normalises (`input_layout` is raw).
    normalizer: Option<Normalizer>,
    /// Where the worker's batches are laid out (see [`Tower::run`]).
    batch: PixelBatch,
    pub info: ModelInfo,
    pub timings: LoadTimings,
    // The session borrows the process-wide environment; keep it alive as long as the session.
    _environment: Environment,
}

impl Model {
    /// Builds the session from `model`, refuses a fixed batch dimension, and warms it up at batch
    /// 1 and at the full batch size; the warm-up also reveals the embedding size.
    pub fn load(runtime: Runtime, settings: &ModelSettings, model: ModelFile) -> Result<Self, ModelError> {
        let Runtime { environment, device, fallback_reason } = runtime;
        let started = Instant::now();
        let (session, device, fallback_reason) =
            build_session(&environment, settings, &model.data, device, fallback_reason)?;
        // The session holds the weights now: fetched bytes must not stay beside them, nor sit
        // under the warm-up's peak.
        drop(model.data);
        let timings = LoadTimings { session: started.elapsed(), ..LoadTimings::default() };
        let input = session.inputs().first().ok_or_else(|| ModelError::Load("the graph has no input".into()))?;
        let output_name = match &settings.output_name {
            Some(name) => name.clone(),
            None => outputs::embedding_output(session.outputs(), "image_embeds")?,
        };
        let shape = input.dtype().tensor_shape().map(|s| &s[..]);
        require_dynamic_batch(input.name(), shape)?;
        let side = settings.image_size.or(square_side(shape));
        let preprocessing = match (model.preprocessing, side) {
            // The graph (or CLIPFN_IMAGE_SIZE) must take what the folder's config makes.
            (Some(transform), Some(side)) if side != transform.side() => {
                return Err(ModelError::Preprocessor(format!(
                    "it makes {0}x{0} input, but the model takes {side}x{side}",
                    transform.side()
                )));
            }
            (Some(transform), _) => transform,
            (None, Some(side)) => Transform::clip(side),
            (None, None) => {
                return Err(ModelError::Load(format!(
                    "input shape {:?} is not [N, 3, S, S] with a fixed S; set CLIPFN_IMAGE_SIZE",
                    input.dtype().tensor_shape()
                )));
            }
        };
        let image_size = preprocessing.side();
        let info = ModelInfo {
            id: model.id,
            file: model.file,
            precision: model.precision,
            provider: device,
            fallback_reason,
            input_name: settings.input_name.clone().unwrap_or_else(|| input.name().to_string()),
            output_name,
            image_size,
            preprocessing,
            input_layout: match (settings.normalize, device) {
                (Normalize::Model, _) | (Normalize::Auto, Device::Cuda) => Layout::RawNhwc,
                (Normalize::Cpu, _) | (Normalize::Auto, Device::Cpu) => Layout::NormalizedNchw,
            },
            dim: 0,
            batch_size: settings.batch_size(device),
            warm_up_batches: Vec::new(),
        };
        let normalizer = match info.input_layout {
            Layout::RawNhwc => {
                Some(Normalizer::new(&session_builder(&environment, settings, device)?, &info.preprocessing, device)?)
            }
            Layout::NormalizedNchw => None,
        };
        let started = Instant::now();
        let batch = PixelBatch::new(info.input_layout, info.batch_size, info.slot_len());
        let mut model = Model { session, normalizer, batch, info, timings, _environment: environment };
        let mut sizes = vec![1, model.info.batch_size];
        sizes.dedup();
        for n in sizes {
            let embeddings = model.warm_up(n)?;
            model.info.dim = embeddings.first().map_or(0, Vec::len);
            if model.info.dim == 0 {
                return Err(ModelError::Load("the model returned empty embeddings".into()));
            }
            model.info.warm_up_batches.push(n);
        }
        model.timings.warm_up = started.elapsed();
        Ok(model)
    }

    /// Runs the known-good warm-up input again: after a failed batch, this tells a broken model or
    /// device (every input fails) from photos that trip the model (only they fail).
    pub fn check(&mut self) -> Result<(), ModelError> {
        self.warm_up(1).map(drop)
    }

    /// Runs `n` black photos.
    fn warm_up(&mut self, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
        let len = n * self.info.slot_len();
        let zeros = match self.info.input_layout {
            Layout::NormalizedNchw => Pixels::NormalizedNchw(vec![0.0; len]),
            Layout::RawNhwc => Pixels::RawNhwc(vec![0; len]),
        };
        self.run(&zeros, n)
    }

    /// Runs one batch of `n` preprocessed photos laid end to end in `pixels`; returns one raw
    /// (not yet L2-normalised) embedding per photo.
    pub fn run(&mut self, pixels: &Pixels, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
        run_image(&mut self.session, self.normalizer.as_mut(), &self.info, pixels, n)
    }
}

/// The image tower takes the resized squares the pipeline queues, and lays each batch out itself.
impl Tower for Model {
    type Embeds = Photos;

    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn run(&mut self, squares: &[&RgbImage]) -> Result<Vec<Vec<f32>>, ModelError> {
        let pixels = self.batch.lay_out(squares, &self.info.preprocessing);
        run_image(&mut self.session, self.normalizer.as_mut(), &self.info, pixels, squares.len())
    }

    fn check(&mut self) -> Result<(), ModelError> {
        Model::check(self)
    }
}

/// [`Model::run`], on the parts of the model it needs, so that the batch buffer can be read
/// beside them.
fn run_image(
    session: &mut Session,
    normalizer: Option<&mut Normalizer>,
    info: &ModelInfo,
    pixels: &Pixels,
    n: usize,
) -> Result<Vec<Vec<f32>>, ModelError> {
    let side = i64::from(info.image_size);
    let name = info.input_name.as_str();
    let outputs = match (pixels, normalizer) {
        (Pixels::NormalizedNchw(floats), None) => {
            let input = TensorRef::from_array_view(([n as i64, 3, side, side], &floats[..])).map_err(inference)?;
            session.run(ort::inputs![name => input])
        }
        (Pixels::RawNhwc(bytes), Some(normalizer)) => {
            let input = normalizer.run(bytes, n)?;
            session.run(ort::inputs![name => input])
        }
        _ => return Err(ModelError::Inference("photos were preprocessed for another layout".into())),
    }
    .map_err(inference)?;
    embeddings(&outputs, &info.output_name, n)
}

/// The `[n, dim]` output named `name`, one embedding per row.
fn embeddings(outputs: &SessionOutputs, name: &str, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
    let output = outputs.get(name).ok_or_else(|| ModelError::Inference(format!("no output named '{name}'")))?;
    let (shape, values) = output.try_extract_tensor::<f32>().map_err(inference)?;
    if shape.len() != 2 || shape[0] != n as i64 {
        return Err(ModelError::Inference(format!("expected output [{n}, dim], got {shape}")));
    }
    Ok(values.chunks_exact(shape[1] as usize).map(<[f32]>::to_vec).collect())
}

/// Loads the library named by ORT_DYLIB_PATH (once per process) and creates the environment.
fn init_runtime() -> Result<Environment, ModelError> {
    let path = std::env::var("ORT_DYLIB_PATH").map_err(|_| {
        ModelError::Runtime(
            "ORT_DYLIB_PATH is not set: point it at libonnxruntime.so (tools/setup.sh installs one)".into(),
        )
    })?;
    if !Path::new(&path).is_file() {
        return Err(ModelError::Runtime(format!("ORT_DYLIB_PATH={path} is not a file")));
    }
    ort::init_from(&path)
        .map_err(|e| ModelError::Runtime(format!("cannot load {path}: {e}")))?
        .with_name("clipfn")
        .build()
        .map_err(|e| ModelError::Runtime(e.to_string()))
}

type Built = (Session, Device, Option<String>);

/// Builds the session on the provider the runtime chose. Should CUDA registration pass but the
/// session still fail on it under `auto`, CPU takes over.
fn build_session(
    environment: &Environment,
    settings: &ModelSettings,
    data: &ModelData,
    device: Device,
    fallback_reason: Option<String>,
) -> Result<Built, ModelError> {
    let cpu = || commit(session_builder(environment, settings, Device::Cpu)?, data);
    if device == Device::Cpu {
        return Ok((cpu()?, Device::Cpu, fallback_reason));
    }
    match session_builder(environment, settings, Device::Cuda).and_then(|b| commit(b, data)) {
        Ok(session) => Ok((session, Device::Cuda, None)),
        Err(e) if settings.provider == Provider::Cuda => Err(ModelError::CudaUnavailable(e.to_string())),
        Err(e) => {
            tracing::warn!(reason = %e, "the model cannot run on CUDA; running on CPU");
            Ok((cpu()?, Device::Cpu, Some(e.to_string())))
        }
    }
}

fn commit(mut builder: SessionBuilder, data: &ModelData) -> Result<Session, ModelError> {
    match data {
        ModelData::File(path) => builder.commit_from_file(path),
        ModelData::Bytes(bytes) => builder.commit_from_memory(bytes),
    }
    .map_err(load)
}

/// Session options shared by every session (towers and the normaliser); on CUDA, registering the
/// CUDA provider must succeed.
fn session_builder(
    environment: &Environment,
    settings: &ModelSettings,
    device: Device,
) -> Result<SessionBuilder, ModelError> {
    let mut builder = Session::builder(environment)
        .and_then(|b| Ok(b.with_optimization_level(GraphOptimizationLevel::Level3)?))
        .map_err(load)?;
    builder = builder.with_intra_threads(settings.intra_threads()).map_err(load)?;
    if device.is_cuda() {
        builder = builder.with_execution_providers([ep::CUDA::default().build().error_on_failure()]).map_err(load)?;
    } else {
        // On CPU the decoders share the cores with inference: idle ONNX Runtime threads must
        // sleep, not spin, or they burn the time decoding needs. Batches come in every size up
        // to the limit, so no memory pattern is planned and kept per size: each run allocates
        // as it goes.
        builder = builder
            .with_intra_op_spinning(false)
            .map_err(load)?
            .with_memory_pattern(false)
            .map_err(load)?
            .with_execution_providers([ep::CPU::default().with_arena_allocator(settings.cpu_arena).build()])
            .map_err(load)?;
    }
    Ok(builder)
}

/// Photos from several requests share a batch of any size up to CLIPFN_BATCH_SIZE, so the input's
/// first dimension must be dynamic (ONNX Runtime reports it as -1).
fn require_dynamic_batch(name: &str, shape: Option<&[i64]>) -> Result<(), ModelError> {
    match shape {
        Some([n, ..]) if *n >= 0 => Err(ModelError::Load(format!(
            "input '{name}' has a fixed batch dimension of {n}; clipfn needs a dynamic batch dimension \
             (export with dynamic axis 0, e.g. torch.onnx.export(..., dynamic_axes={{'{name}': {{0: 'batch'}}}}))"
        ))),
        _ => Ok(()),
    }
}

/// S of an `[N, 3, S, S]` input with a fixed S.
fn square_side(shape: Option<&[i64]>) -> Option<u32> {
    match shape {
        Some([_, 3, h, w]) if h == w && *h > 0 => Some(*h as u32),
        _ => None,
    }
}

fn load(e: impl std::fmt::Display) -> ModelError {
    ModelError::Load(e.to_string())
}

fn inference(e: impl std::fmt::Display) -> ModelError {
    ModelError::Inference(e.to_string())
}
