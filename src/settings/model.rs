//! Which model runs, where, and how it is batched.

use serde::Deserialize;

use super::{
    ConfigError,
    choices::{self, ArenaExtend, BatchPadding, ConvSearch, Device, Normalize, Precision, Provider},
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
    "CLIPFN_CPU_WORKER_THREADS",
    "CLIPFN_CPU_ARENA",
    "CLIPFN_BATCH_PADDING",
    "CLIPFN_CUDA_CONV_SEARCH",
    "CLIPFN_CUDA_CONV_MAX_WORKSPACE",
    "CLIPFN_CUDA_ARENA_EXTEND",
    "CLIPFN_CUDA_TF32",
    "CLIPFN_INPUT_NAME",
    "CLIPFN_OUTPUT_NAME",
    "CLIPFN_IMAGE_SIZE",
    "CLIPFN_HEADS",
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
    /// Intra-op threads of the towers on the CPU beside towers on CUDA; unset or 0, see
    /// [`ModelSettings::cpu_worker_threads`].
    #[serde(default)]
    pub cpu_worker_threads: usize,
    /// ONNX Runtime's CPU memory arena: it saves allocations per batch but keeps the largest
    /// batch's memory for good, so it is off unless asked for (docs/design.md, "Memory").
    #[serde(default)]
    pub cpu_arena: bool,
    /// Whether a run smaller than its batch bucket is padded up or split into buckets (model/shapes.rs).
    #[serde(default = "defaults::batch_padding", deserialize_with = "choices::batch_padding")]
    pub batch_padding: BatchPadding,
    /// How cuDNN picks each convolution's algorithm on CUDA, per input shape it has not seen
    /// (docs/design.md, "Shapes").
    #[serde(default = "defaults::cuda_conv_search", deserialize_with = "choices::conv_search")]
    pub cuda_conv_search: ConvSearch,
    /// Whether that search may use as much GPU memory as it likes (ONNX Runtime's default), or 32 MB.
    #[serde(default = "defaults::yes")]
    pub cuda_conv_max_workspace: bool,
    /// How the CUDA memory arena grows when a run needs more.
    #[serde(default = "defaults::cuda_arena_extend", deserialize_with = "choices::arena_extend")]
    pub cuda_arena_extend: ArenaExtend,
    /// Whether float32 convolutions and matrix products may run in TF32 (10-bit mantissas) on CUDA.
    #[serde(default)]
    pub cuda_tf32: bool,
    /// Overrides for models whose names or input size cannot be read from the graph.
    #[serde(default)]
    pub input_name: Option<String>,
    #[serde(default)]
    pub output_name: Option<String>,
    #[serde(default)]
    pub image_size: Option<u32>,
    /// Heads on the image embedding: `name=path-or-URI,...` (see [`ModelSettings::heads`]).
    #[serde(default)]
    pub heads: Option<String>,
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
    pub fn batch_padding() -> BatchPadding {
        BatchPadding::Auto
    }
    pub fn cuda_conv_search() -> ConvSearch {
        ConvSearch::Heuristic
    }
    pub fn yes() -> bool {
        true
    }
    pub fn cuda_arena_extend() -> ArenaExtend {
        ArenaExtend::NextPowerOfTwo
    }
}

impl ModelSettings {
    /// These settings with ONNX Runtime's CPU arena, whatever CLIPFN_CPU_ARENA says: for the towers
    /// that run one large view at a time (the face and text detectors, OCR's line towers). With the
    /// arena off, each of their activations of 1 MiB or more is a fresh mapping (`sys::memory`),
    /// faulted in and zeroed on every run: the text detector spent 2.0 s of CPU on a 1184 x 736
    /// view, 0.41 s with the arena, for 20 MiB more RSS (108 MiB at the largest view, 4096 x 736);
    /// SCRFD-2.5G at 640, 140 ms against 99 ms, for 7 MiB (ONNX Runtime 1.31.1 under clipfn's
    /// malloc settings); Human's CenterNet at 512, 133 against 70 ms of the server's CPU a photo,
    /// for 2 MiB of peak RSS (tools/cpu_ab.py objects). Their arena holds one view's activations,
    /// not a batch's.
    pub fn with_cpu_arena(&self) -> ModelSettings {
        ModelSettings { cpu_arena: true, ..self.clone() }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        require_positive(&[("CLIPFN_BATCH_SIZE", self.batch_size.unwrap_or(1) as u64)])?;
        if self.model.trim().is_empty() {
            return Err(ConfigError("CLIPFN_MODEL must name an ONNX file, a model folder or an object URI".into()));
        }
        self.heads().map(drop)
    }

    /// The heads `CLIPFN_HEADS` names, `(name, location)` in its order: `name=path-or-URI` pairs
    /// split by commas, each name made of letters, digits, `_` and `-`, and used once.
    pub fn heads(&self) -> Result<Vec<(String, String)>, ConfigError> {
        let Some(list) = self.heads.as_deref().filter(|list| !list.trim().is_empty()) else { return Ok(Vec::new()) };
        let mut heads: Vec<(String, String)> = Vec::new();
        for entry in list.split(',').map(str::trim) {
            let bad = |why: &str| ConfigError(format!("CLIPFN_HEADS: '{entry}' {why}; write name=path-or-URI,..."));
            let (name, location) = entry.split_once('=').ok_or_else(|| bad("has no '='"))?;
            let (name, location) = (name.trim(), location.trim());
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(bad("needs a name of letters, digits, '_' and '-'"));
            }
            if location.is_empty() {
                return Err(bad("names no file"));
            }
            if heads.iter().any(|(known, _)| known == name) {
                return Err(bad("repeats a name"));
            }
            heads.push((name.to_string(), location.to_string()));
        }
        Ok(heads)
    }

    /// Photos per inference run: as set, else 64 on CUDA (the seed's finding: batches of 64 beat
    /// 16 and 32 on a GPU) and 8 on CPU, where images/s is no higher at 16 to 64 while the
    /// activations' memory, the warm-up and the wait behind a running batch grow with the batch
    /// (docs/design.md, "Batch size per provider").
    pub fn batch_size(&self, device: Device) -> usize {
        self.batch_size.unwrap_or(if device.is_cuda() { 64 } else { 8 })
    }

    /// How a run smaller than its bucket runs (never `Auto`): padded up to it on CUDA unless asked
    /// otherwise, where a padded row costs little and a new shape a search; at its own size on
    /// CPU, where padding is work and a new shape costs nothing. Split into buckets, CPU's rule
    /// until issue 57, ViT-B/32 ran a batch of 7 as 4 + 2 + 1 in 20-28% more time than 7 whole (2
    /// threads; docs/bench/immich.md), which cost Immich's single-photo requests throughput.
    pub fn fill(&self, device: Device) -> BatchPadding {
        match self.batch_padding {
            BatchPadding::Auto if device.is_cuda() => BatchPadding::Pad,
            BatchPadding::Auto => BatchPadding::Exact,
            chosen => chosen,
        }
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

    /// ONNX Runtime intra-op threads of the towers placed on the CPU on a host whose other towers
    /// run on CUDA (OCR by default): as set, else half the CPUs this process may use, at least
    /// one. They run on a worker of their own beside the GPU's, at the same time as the decode
    /// pool that feeds the GPU: with every CPU they would slow the decodes the GPU waits for
    /// (docs/design.md, "The worker").
    pub fn cpu_worker_threads(&self) -> usize {
        match self.cpu_worker_threads {
            0 => (super::available_cpus() / 2).max(1),
            n => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::settings::Settings;

    fn heads(value: &str) -> Result<Vec<(String, String)>, String> {
        let vars = [("CLIPFN_MODEL", "m.onnx"), ("CLIPFN_HEADS", value)];
        Settings::from_vars(vars.map(|(k, v)| (k.to_string(), v.to_string())))
            .map(|s| s.model.heads().unwrap())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn heads_are_name_location_pairs_in_order() {
        let pair = |n: &str, l: &str| (n.to_string(), l.to_string());
        assert_eq!(
            heads("aesthetic=gs://b/a.onnx, sharp=/m/s.onnx").unwrap(),
            [pair("aesthetic", "gs://b/a.onnx"), pair("sharp", "/m/s.onnx")]
        );
        assert_eq!(heads(" ").unwrap(), []);
        for (bad, says) in [("a.onnx", "no '='"), ("a b=x", "a name"), ("a=", "no file"), ("a=x,a=y", "repeats")] {
            let message = heads(bad).unwrap_err();
            assert!(message.contains("CLIPFN_HEADS") && message.contains(says), "{bad}: {message}");
        }
    }
}
