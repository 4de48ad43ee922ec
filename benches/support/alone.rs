//! Sections 1 and 2's measurements, each piece alone in the bench process: the image session at a
//! batch (also section 9's, through `towers`), and decode + resize on one core beside Pillow.

use std::{path::PathBuf, time::Instant};

use clipfn::{
    model::{ImageModel, ModelData, ModelFile, Runtime, Tower},
    preprocess::{Transform, decode_square},
    settings::Settings,
};
use image::RgbImage;
use serde_json::Value;

use crate::{
    common::{self, setup_var},
    stats::median,
};

const BATCHES: [usize; 5] = [1, 8, 16, 32, 64];

pub struct RawPoint {
    pub batch: usize,
    pub images_per_s: f64,
    pub ms_per_batch: f64,
}

/// Settings for sessions loaded in the bench process (warm-up batch of 1).
pub fn bench_settings(model_path: &str, provider: &str) -> anyhow::Result<Settings> {
    Ok(Settings::from_vars([
        ("CLIPFN_MODEL".to_string(), model_path.to_string()),
        ("CLIPFN_BATCH_SIZE".to_string(), "1".to_string()),
        ("CLIPFN_PROVIDER".to_string(), provider.to_string()),
    ])?)
}

/// The image session the bench runs raw; it also hosts the text session (one ONNX Runtime
/// environment per process).
pub fn load_image_model(mut runtime: Runtime, settings: &Settings, model_path: &str) -> anyhow::Result<ImageModel> {
    let file = ModelFile::bare(ModelData::File(model_path.into()), model_path);
    Ok(ImageModel::load(&mut runtime, &settings.model, file)?)
}

pub fn raw_inference(model: &mut ImageModel, runs: usize) -> anyhow::Result<Vec<RawPoint>> {
    BATCHES.iter().map(|&batch| raw_point(model, batch, runs)).collect()
}

/// The session alone at `batch`, median of `runs` after one run that allocates for the shape; the
/// batch laid out as the worker has the tower do it (on CUDA: uint8, normalised in the model).
pub fn raw_point(model: &mut ImageModel, batch: usize, runs: usize) -> anyhow::Result<RawPoint> {
    let side = model.info.image_size;
    let grey = RgbImage::from_pixel(side, side, image::Rgb([128; 3]));
    let squares = vec![&grey; batch];
    model.run(&squares)?;
    let times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            model.run(&squares).map(|_| t.elapsed().as_secs_f64())
        })
        .collect::<Result<_, _>>()?;
    let secs = median(times);
    eprintln!("raw inference: {} batch {batch}: {:.1} img/s", model.info.file, batch as f64 / secs);
    Ok(RawPoint { batch, images_per_s: batch as f64 / secs, ms_per_batch: secs * 1e3 })
}

/// Photos/s of decode + resize on one thread as the decode threads do it (JPEG at the DCT scale
/// that covers 224, where the reference decodes at full size), median of `runs` passes.
pub fn preprocessing(photos: &[PathBuf], runs: usize) -> anyhow::Result<f64> {
    let data: Vec<Vec<u8>> = photos.iter().map(std::fs::read).collect::<Result<_, _>>()?;
    let transform = Transform::clip(224);
    let mut rates = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        for bytes in &data {
            std::hint::black_box(decode_square(bytes, &transform, u64::MAX)?);
        }
        rates.push(data.len() as f64 / t.elapsed().as_secs_f64());
    }
    Ok(median(rates))
}

/// Pillow's CLIP preprocessing on the same photos (tools/reference.py --bench): (exact, draft).
pub fn pillow_baseline(photos: &[PathBuf]) -> anyhow::Result<(f64, f64)> {
    let output = std::process::Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(common::repo().join("tools/reference.py"))
        .arg("--bench")
        .args(photos)
        .output()?;
    anyhow::ensure!(output.status.success(), "reference.py --bench: {}", String::from_utf8_lossy(&output.stderr));
    let json: Value = serde_json::from_slice(&output.stdout)?;
    let rate = |k: &str| json[k]["photos_per_s"].as_f64().unwrap_or(f64::NAN);
    Ok((rate("exact"), rate("jpeg_draft")))
}
