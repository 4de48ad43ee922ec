//! What /readyz says about the GPU when the model runs on CUDA: the device's name and the memory
//! in use, read through NVML. NVML comes with the NVIDIA driver and is loaded at run time, so
//! machines without one (CI, CPU deployments) need nothing and simply report no GPU.

use std::sync::OnceLock;

use nvml_wrapper::Nvml;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct GpuStatus {
    pub name: String,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}

/// Device `index`'s status, or why it cannot be read.
pub fn status(index: u32) -> Result<GpuStatus, String> {
    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();
    let nvml = NVML.get_or_init(|| Nvml::init().map_err(|e| format!("NVML unavailable: {e}"))).as_ref()?;
    let device = nvml.device_by_index(index).map_err(|e| format!("GPU {index}: {e}"))?;
    let memory = device.memory_info().map_err(|e| format!("GPU {index} memory: {e}"))?;
    Ok(GpuStatus {
        name: device.name().map_err(|e| format!("GPU {index} name: {e}"))?,
        memory_used_bytes: memory.used,
        memory_total_bytes: memory.total,
    })
}
