//! Which model runs, where, and how it is batched.

use serde::Deserialize;

use super::{
    ConfigError,
    choices::{self, Device, Normalize, Precision, Provider},
    require_positive,
};

/// The variables of [`ModelSettings`], one per field and in the fields' order (envy reads each
/// field from `CLIPFN_` + its name upper-cased; a unit test holds the two together).
pub(super) const VARIABLES: &[&str] = &[
    "CLIPFN_MODEL",
    "CLIPFN_PROVIDER",
    "CLIPFN_PRECISION",
    "CLIPFN_NORMALIZE",
    "CLIPFN_BATCH_SIZE",
    "CLIPFN_BATCH_WAIT_MS",
    "CLIPFN_INTRA_THREADS",
    "CLIPFN_CPU_ARENA",
    "CLIPFN_INPUT_NAME",
    "CLIPFN_OUTPUT_NAME",
    "CLIPFN_IMAGE_SIZE",
];

#[derive(Debug, Clone, Deserialize)]
pub struct ModelSettings {
    /// Path or object URI of the ONNX CLIP image encoder, or of a model folder (transformers.js layout).
    pub model: String,
    #[serde(default = "defaults::provider", deserialize_with = "choices::provider")]
    pub provider: Provider,
    #[serde(default = "defaults::precision", deserialize_with = "choices::precision")]
    pub precision: Precision,
    #[serde(default = "defaults::normalize", deserialize_with = "choices::normalize")]
    pub normalize: Normalize,
    /// Photos per inference run; unset, see [`ModelSettings::batch_size`].
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// How long the model worker waits for a batch to fill once it holds one photo.
    #[serde(default = "defaults::batch_wait_ms")]
    pub batch_wait_ms: u64,
    /// ONNX Runtime intra-op threads; unset or 0, see [`ModelSettings::intra_threads`].
    #[serde(default)]
    pub intra_threads: usize,
    /// ONNX Runtime's CPU memory arena: it saves allocations per batch but keeps the largest
    /// batch's memory for good, so it is off unless asked for (docs/design.md, "Memory").
    #[serde(default)]
    pub cpu_arena: bool,
    /// Overrides for models whose names or input size cannot be read from the graph.
    #[serde(default)]
    pub input_name: Option<String>,
    #[serde(default)]
    pub output_name: Option<String>,
    #[serde(default)]
    pub image_size: Option<u32>,
}

mod defaults {
    use super::*;
    pub fn provider() -> Provider {
        Provider::Auto
    }
    pub fn precision() -> Precision {
        Precision::Auto
    }
    pub fn normalize() -> Normalize {
        Normalize::Auto
    }
    pub fn batch_wait_ms() -> u64 {
        5
    }
}

impl ModelSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[("CLIPFN_BATCH_SIZE", self.batch_size.unwrap_or(1) as u64)])?;
        if self.model.trim().is_empty() {
            return Err(ConfigError("CLIPFN_MODEL must name an ONNX file, a model folder or an object URI".into()));
        }
        Ok(())
    }

    /// Photos per inference run: as set, else 64 on CUDA (the seed's finding: batches of 64 beat
    /// 16 and 32 on a GPU) and 8 on CPU, where images/s is no higher at 16 to 64 while the
    /// activations' memory, the warm-up and the wait behind a running batch grow with the batch
    /// (docs/design.md, "Batch size per provider").
    pub fn batch_size(&self, device: Device) -> usize {
        self.batch_size.unwrap_or(if device.is_cuda() { 64 } else { 8 })
    }

    /// ONNX Runtime intra-op threads: as set, else one per CPU this process may use. That count
    /// follows a cgroup CPU quota (the container's on Cloud Run), where ONNX Runtime's own default
    /// is the host's physical cores: on a large host with a small quota that oversubscribes the
    /// quota many times over.
    pub fn intra_threads(&self) -> usize {
        match self.intra_threads {
            0 => super::available_cpus(),
            n => n,
        }
    }
}
