//! Section 6: the release `clipfn backfill` over copies of the photos in a local store.

use std::path::PathBuf;

use serde_json::Value;

/// Photos/s of the release `clipfn backfill` over `copies` copies of every photo (one task, batch
/// 64, Parquet to a temporary folder), from its final summary. The copies are symlinks inside a
/// local store, so the figure is the pipeline's and not an emulator's.
pub fn run(
    model: &str,
    provider: &str,
    batch: usize,
    photos: &[PathBuf],
    copies: usize,
) -> anyhow::Result<(usize, f64)> {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("photos");
    std::fs::create_dir_all(&store)?;
    let mut keys = Vec::new();
    for photo in photos {
        let name = photo.file_name().unwrap().to_string_lossy().into_owned();
        std::fs::copy(photo, store.join(&name))?;
        for copy in 0..copies {
            std::fs::create_dir_all(store.join(format!("c{copy}")))?;
            std::os::unix::fs::symlink(store.join(&name), store.join(format!("c{copy}/{name}")))?;
            keys.push(format!("c{copy}/{name}"));
        }
    }
    let manifest = dir.path().join("manifest.txt");
    std::fs::write(&manifest, keys.join("\n"))?;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_clipfn"))
        .args(["backfill", "--task-index", "0", "--task-count", "1", "--manifest"])
        .arg(&manifest)
        .arg("--out")
        .arg(dir.path().join("out"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("ORT_DYLIB_PATH", std::env::var("ORT_DYLIB_PATH")?)
        .env("CLIPFN_MODEL", model)
        .env("CLIPFN_PROVIDER", provider)
        .env("CLIPFN_STORE", format!("file://{}", store.display()))
        .env("CLIPFN_BATCH_SIZE", batch.to_string())
        .env("CLIPFN_LOG_FORMAT", "json")
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(output.status.success(), "clipfn backfill failed: {}", output.status);
    let stdout = String::from_utf8(output.stdout)?;
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())?;
    anyhow::ensure!(summary["embedded"] == keys.len(), "backfill embedded {} of {}", summary["embedded"], keys.len());
    Ok((keys.len(), summary["photos_per_s"].as_f64().unwrap_or(f64::NAN)))
}
