//! The process's ONNX Runtime, the execution provider it runs on, and the session builder every
//! session shares (the towers and the normaliser).
//!
//! ONNX Runtime is loaded from `ORT_DYLIB_PATH` (the PyPI wheel's library here, the CUDA build in
//! the image), so a missing library is a clear start-up error instead of a panic. The provider is
//! decided in one place, [`Provision::settle`]: CUDA is tried first when asked for, at
//! registration (before any model file is read, since the provider decides which file of a model
//! folder to read) and again at the first tower's session; under `auto` a failure at either falls
//! back to CPU, once, with the reason kept for the log and /readyz. Every later session runs where
//! the first one does.

use std::path::{Path, PathBuf};

use ort::{
    environment::Environment,
    ep,
    session::{
        Session,
        builder::{GraphOptimizationLevel, SessionBuilder},
    },
};

use super::ModelError;
use crate::settings::{ArenaExtend, ConvSearch, Device, ModelSettings, Provider};

/// Where a session's weights come from. ONNX Runtime reads a local file by itself, so clipfn
/// never holds a second copy of the weights; a model fetched from a store arrives as bytes, which
/// are let go as soon as the session holds the weights.
pub enum ModelData {
    File(PathBuf),
    Bytes(bytes::Bytes),
}

impl ModelData {
    /// xxHash64 of the model's bytes, read in pieces: what tells two files apart in an id.
    pub fn hash(&self) -> std::io::Result<u64> {
        use std::{hash::Hasher, io::Read};
        let mut hasher = twox_hash::XxHash64::with_seed(0);
        match self {
            ModelData::Bytes(bytes) => hasher.write(bytes),
            ModelData::File(path) => {
                let (mut file, mut piece) = (std::fs::File::open(path)?, vec![0u8; 1 << 20]);
                loop {
                    match file.read(&mut piece)? {
                        0 => break,
                        n => hasher.write(&piece[..n]),
                    }
                }
            }
        }
        Ok(hasher.finish())
    }
}

/// The process's ONNX Runtime and the provider its sessions run on. ONNX Runtime allows one
/// environment per process; a clone shares it (each tower keeps one, so that the environment
/// lives as long as its sessions).
#[derive(Clone)]
pub struct Runtime {
    environment: Environment,
    provision: Provision,
}

/// The provider asked for, and the one in use.
#[derive(Clone)]
struct Provision {
    asked: Provider,
    device: Device,
    /// Why `auto` fell back to CPU, when it did.
    fallback_reason: Option<String>,
    /// A session runs on `device`: it no longer changes.
    settled: bool,
}

impl Runtime {
    /// Loads ONNX Runtime and tries the provider asked for: CUDA, when its provider registers.
    pub fn start(settings: &ModelSettings) -> Result<Self, ModelError> {
        let environment = init_runtime()?;
        let device = if settings.provider == Provider::Cpu { Device::Cpu } else { Device::Cuda };
        let mut provision = Provision { asked: settings.provider, device, fallback_reason: None, settled: false };
        provision.settle(|device| builder(&environment, settings, device).map(drop), false)?;
        Ok(Runtime { environment, provision })
    }

    pub fn device(&self) -> Device {
        self.provision.device
    }

    /// This runtime with its later sessions on the CPU, whatever the first one settled (a
    /// detector's towers may run there: CLIPFN_FACE_PROVIDER, CLIPFN_OCR_PROVIDER).
    pub fn on_cpu(&self) -> Self {
        let provision = Provision { device: Device::Cpu, settled: true, ..self.provision.clone() };
        Runtime { environment: self.environment.clone(), provision }
    }

    /// Why `auto` fell back to CPU, when it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.provision.fallback_reason.as_deref()
    }

    /// A session of the model in `data`. The first one settles the provider (see the module).
    pub fn session(&mut self, settings: &ModelSettings, data: &ModelData) -> Result<Session, ModelError> {
        let environment = &self.environment;
        self.provision.settle(|device| commit(builder(environment, settings, device)?, data), true)
    }

    /// The environment, for a tower to keep alive beside its sessions.
    pub(super) fn environment(&self) -> Environment {
        self.environment.clone()
    }

    /// The options every session shares, on the provider in use (for a session built from a graph
    /// made in memory, as the normaliser's is).
    pub(super) fn builder(&self, settings: &ModelSettings) -> Result<SessionBuilder, ModelError> {
        builder(&self.environment, settings, self.provision.device)
    }
}

impl Provision {
    /// Runs `attempt` on the device in use. Until a session has settled it, a CUDA failure ends
    /// start-up when CUDA was required, and otherwise moves this runtime to CPU, saying why.
    fn settle<T>(&mut self, attempt: impl Fn(Device) -> Result<T, ModelError>, settles: bool) -> Result<T, ModelError> {
        let result = match attempt(self.device) {
            Err(e) if self.device.is_cuda() && !self.settled => {
                if self.asked == Provider::Cuda {
                    return Err(ModelError::CudaUnavailable(e.to_string()));
                }
                tracing::warn!(reason = %e, "CUDA cannot be used; running on CPU");
                (self.device, self.fallback_reason) = (Device::Cpu, Some(e.to_string()));
                attempt(Device::Cpu)
            }
            result => result,
        };
        self.settled |= settles && result.is_ok();
        result
    }
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

fn commit(mut builder: SessionBuilder, data: &ModelData) -> Result<Session, ModelError> {
    match data {
        ModelData::File(path) => builder.commit_from_file(path),
        ModelData::Bytes(bytes) => builder.commit_from_memory(bytes),
    }
    .map_err(ModelError::load)
}

/// Session options shared by every session; on CUDA, registering the CUDA provider must succeed.
fn builder(environment: &Environment, settings: &ModelSettings, device: Device) -> Result<SessionBuilder, ModelError> {
    let mut builder = Session::builder(environment)
        .and_then(|b| Ok(b.with_optimization_level(GraphOptimizationLevel::Level3)?))
        .map_err(ModelError::load)?;
    builder = builder.with_intra_threads(settings.intra_threads()).map_err(ModelError::load)?;
    if device.is_cuda() {
        builder =
            builder.with_execution_providers([cuda(settings).build().error_on_failure()]).map_err(ModelError::load)?;
    } else {
        // On CPU the decoders share the cores with inference: idle ONNX Runtime threads must
        // sleep, not spin, or they burn the time decoding needs. Batches come in every size up
        // to the limit, so no memory pattern is planned and kept per size: each run allocates
        // as it goes.
        builder = builder
            .with_intra_op_spinning(false)
            .map_err(ModelError::load)?
            .with_memory_pattern(false)
            .map_err(ModelError::load)?
            .with_execution_providers([ep::CPU::default().with_arena_allocator(settings.cpu_arena).build()])
            .map_err(ModelError::load)?;
    }
    Ok(builder)
}

/// The CUDA provider as the settings ask (CLIPFN_CUDA_*).
fn cuda(settings: &ModelSettings) -> ep::CUDA {
    use ep::{ArenaExtendStrategy, cuda::ConvAlgorithmSearch};
    let search = match settings.cuda_conv_search {
        ConvSearch::Exhaustive => ConvAlgorithmSearch::Exhaustive,
        ConvSearch::Heuristic => ConvAlgorithmSearch::Heuristic,
        ConvSearch::Default => ConvAlgorithmSearch::Default,
    };
    let extend = match settings.cuda_arena_extend {
        ArenaExtend::NextPowerOfTwo => ArenaExtendStrategy::NextPowerOfTwo,
        ArenaExtend::SameAsRequested => ArenaExtendStrategy::SameAsRequested,
    };
    ep::CUDA::default()
        .with_conv_algorithm_search(search)
        .with_conv_max_workspace(settings.cuda_conv_max_workspace)
        .with_arena_extend_strategy(extend)
        .with_tf32(settings.cuda_tf32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provision(asked: Provider) -> Provision {
        Provision { asked, device: Device::Cuda, fallback_reason: None, settled: false }
    }

    /// Fails on CUDA, runs on CPU.
    fn cpu_only(device: Device) -> Result<Device, ModelError> {
        if device.is_cuda() { Err(ModelError::Load("no CUDA driver".into())) } else { Ok(device) }
    }

    #[test]
    fn auto_falls_back_once_and_says_why() {
        let mut auto = provision(Provider::Auto);
        assert_eq!(auto.settle(cpu_only, true).unwrap(), Device::Cpu);
        assert_eq!((auto.device, auto.fallback_reason.as_deref()), (Device::Cpu, Some("model: no CUDA driver")));
    }

    #[test]
    fn cuda_required_refuses_to_fall_back() {
        let mut cuda = provision(Provider::Cuda);
        assert!(matches!(cuda.settle(cpu_only, false), Err(ModelError::CudaUnavailable(_))));
    }

    #[test]
    fn a_settled_device_no_longer_changes() {
        let mut settled = provision(Provider::Auto);
        assert_eq!(settled.settle(Ok, true).unwrap(), Device::Cuda);
        assert!(settled.settle(cpu_only, true).is_err(), "a later session fails where the first one runs");
        assert_eq!((settled.device, settled.fallback_reason), (Device::Cuda, None));
    }
}
