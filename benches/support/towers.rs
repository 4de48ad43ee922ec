//! Section 9 (issue 21): the SigLIP base-shaped vision tower against ViT-B/32, raw, on the same
//! ONNX Runtime environment in the same run, with the memory each session holds.

use std::fmt::Write as _;

use clipfn::{
    model::{ImageModel, Runtime},
    settings::Settings,
};

use crate::alone::{load_image_model, raw_point};

/// Batch sizes compared: one photo, and the CPU server's batch.
const BATCHES: [usize; 2] = [1, 8];

pub struct Tower {
    name: &'static str,
    file: String,
    image_size: u32,
    dim: usize,
    /// Resident memory the loaded, warmed-up session added to the process, MiB.
    rss_mib: f64,
    /// (batch, images/s)
    rates: Vec<(usize, f64)>,
}

/// The process's resident set, MiB.
fn rss_mib() -> f64 {
    crate::common::status_bytes("self", "VmRSS") / (1024.0 * 1024.0)
}

/// Loads `path` on `runtime`, then times it raw at [`BATCHES`] (median of `runs`).
fn measure(
    name: &'static str,
    runtime: &Runtime,
    settings: &Settings,
    path: &str,
    runs: usize,
) -> anyhow::Result<Tower> {
    let before = rss_mib();
    let mut model: ImageModel = load_image_model(runtime.clone(), settings, path)?;
    let rss_mib = rss_mib() - before;
    let rates = BATCHES
        .iter()
        .map(|&batch| raw_point(&mut model, batch, runs).map(|p| (batch, p.images_per_s)))
        .collect::<anyhow::Result<_>>()?;
    let file = std::path::Path::new(path).file_name().unwrap_or_default().to_string_lossy().into_owned();
    Ok(Tower { name, file, image_size: model.info.image_size, dim: model.info.dim, rss_mib, rates })
}

/// ViT-B/32 (`clip`) and the SigLIP base vision tower (`siglip`), one after the other, each
/// dropped before the next loads so that its memory is its own.
pub fn compare(
    runtime: &Runtime,
    settings: &Settings,
    clip: &str,
    siglip: &str,
    runs: usize,
) -> anyhow::Result<Vec<Tower>> {
    Ok(vec![
        measure("CLIP ViT-B/32", runtime, settings, clip, runs)?,
        measure("SigLIP base/16 vision tower", runtime, settings, siglip, runs)?,
    ])
}

pub fn write(md: &mut String, towers: &[Tower]) -> std::fmt::Result {
    writeln!(md, "\n## 9. Image towers: SigLIP base against ViT-B/32 (raw, random weights, same runtime)\n")?;
    let batches: String = BATCHES.iter().map(|b| format!(" batch {b} images/s |")).collect();
    writeln!(md, "| tower | file | input | dim | session RSS MiB |{batches}")?;
    writeln!(md, "|---|---|---|---|---|{}", "---|".repeat(BATCHES.len()))?;
    for t in towers {
        let rates: String = t.rates.iter().map(|(_, r)| format!(" {r:.1} |")).collect();
        writeln!(
            md,
            "| {} | {} | {}x{} | {} | {:.0} |{rates}",
            t.name, t.file, t.image_size, t.image_size, t.dim, t.rss_mib
        )?;
    }
    if let [clip, siglip] = towers {
        writeln!(md)?;
        for (i, batch) in BATCHES.iter().enumerate() {
            writeln!(
                md,
                "- SigLIP / ViT-B/32 images/s at batch {batch} = {:.1} / {:.1} = **{:.2}**",
                siglip.rates[i].1,
                clip.rates[i].1,
                siglip.rates[i].1 / clip.rates[i].1
            )?;
        }
    }
    Ok(())
}
