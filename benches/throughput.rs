//! The throughput benchmark: `cargo bench --bench throughput` (after `tools/setup.sh --bench`).
//!
//! In one run, on the ViT-B/32-architecture model and the real camera photos, it measures
//! 1. raw inference: images/s of the ONNX Runtime session alone at batch 1, 8, 16, 32, 64;
//! 2. preprocessing: photos/s on one core for decode + resize + normalise, beside Pillow's CLIP
//!    preprocessing on the same photos;
//! 3. end to end: the release server over loopback, photos from the GCS emulator, first under the
//!    seed team's load shape scaled to this machine, then as a closed loop at concurrency 2; the
//!    server's peak RSS after the seed shape, against Immich's 0.72 GB on the same weights;
//! 4. precision: the same closed loop on the model folder's fp32 file and a smaller one (int8 by
//!    default; CLIPFN_BENCH_PRECISIONS=fp32,fp16 on a GPU), with each server's peak RSS and the
//!    smaller variant's cosine to fp32 on every photo;
//! 5. the text tower (when `tools/setup.sh --bench` made the ViT-B/32 text model): tokenizer
//!    texts/s on one core, text embeddings/s at batch 1 and 64, and the latency of a one-line search
//!    query sent while 256 photos wait for the model worker;
//! 6. backfill: `clipfn backfill` (release) over copies of the photos, photos/s from its summary;
//! 7. cold start: the release server started, until /readyz and its first answer, 5 times, each
//!    beside Python ONNX Runtime's session creation + warm-up runs (tools/coldstart_reference.py);
//! 8. memory: the server's peak RSS after the seed shape (section 3) against Immich's 0.72 GB;
//! 9. image towers: the SigLIP base-shaped vision tower against ViT-B/32, raw at batch 1 and 8,
//!    with the memory each session holds (when `tools/setup.sh --bench` made it).
//!
//! Section 4 also gives each precision's CPU ceiling, `1 / (1/raw + decode_per_photo/cores)`, and
//! end to end against it.
//!
//! It writes `report.md` and `throughput.svg` to CLIPFN_BENCH_OUT (default target/bench-report).
//! Knobs: CLIPFN_BENCH_RUNS (3), CLIPFN_BENCH_VUS (2), CLIPFN_BENCH_SECONDS (60),
//! CLIPFN_BENCH_PROVIDER (`cpu`; `cuda` on a GPU machine, see tools/gpu-bench.sh),
//! CLIPFN_BENCH_PRECISIONS (`fp32,int8`),
//! CLIPFN_BENCH_BACKFILL_COPIES (20: the backfill embeds that many copies of each photo).

#[path = "support/cold_start.rs"]
mod cold_start;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/towers.rs"]
mod towers;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use clipfn::{
    model::{ImageModel, ModelData, ModelFile, Runtime, TextModel, Tower},
    preprocess::{Transform, decode_square},
    settings::{Device, Settings},
    tokenize::{Tokenizer, Tokens},
};
use common::{ServerConfig, camera_photos, setup_var};
use image::RgbImage;
use plotters::prelude::*;
use serde_json::Value;

const BATCHES: [usize; 5] = [1, 8, 16, 32, 64];
const COLD_STARTS: usize = 5;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct RawPoint {
    batch: usize,
    images_per_s: f64,
    ms_per_batch: f64,
}

/// Settings for sessions loaded in the bench process (warm-up batch of 1).
fn bench_settings(model_path: &str, provider: &str) -> anyhow::Result<Settings> {
    Ok(Settings::from_vars([
        ("CLIPFN_MODEL".to_string(), model_path.to_string()),
        ("CLIPFN_BATCH_SIZE".to_string(), "1".to_string()),
        ("CLIPFN_PROVIDER".to_string(), provider.to_string()),
    ])?)
}

/// The image session the bench runs raw; it also hosts the text session (one ONNX Runtime
/// environment per process).
fn load_image_model(mut runtime: Runtime, settings: &Settings, model_path: &str) -> anyhow::Result<ImageModel> {
    let file = ModelFile::bare(ModelData::File(model_path.into()), model_path);
    Ok(ImageModel::load(&mut runtime, &settings.model, file)?)
}

fn raw_inference(model: &mut ImageModel, runs: usize) -> anyhow::Result<Vec<RawPoint>> {
    BATCHES.iter().map(|&batch| raw_point(model, batch, runs)).collect()
}

/// The session alone at `batch`, median of `runs` after one run that allocates for the shape; the
/// batch laid out as the worker has the tower do it (on CUDA: uint8, normalised in the model).
fn raw_point(model: &mut ImageModel, batch: usize, runs: usize) -> anyhow::Result<RawPoint> {
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
fn preprocessing(photos: &[PathBuf], runs: usize) -> anyhow::Result<f64> {
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
fn pillow_baseline(photos: &[PathBuf]) -> anyhow::Result<(f64, f64)> {
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

#[derive(Default)]
struct LoadResult {
    requests: usize,
    images: usize,
    errors: usize,
    seconds: f64,
    latencies_s: Vec<f64>,
}

impl LoadResult {
    fn row(&self, name: &str) -> String {
        let mut l = self.latencies_s.clone();
        l.sort_by(f64::total_cmp);
        let p = |q| if l.is_empty() { f64::NAN } else { percentile(&l, q) };
        format!(
            "| {name} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            self.requests,
            self.images,
            self.images as f64 / self.seconds,
            p(0.50),
            p(0.95),
            p(0.99),
            self.errors
        )
    }
}

/// `clients` loops, each sending `min..=max` random photos then thinking `think` seconds, for `secs`.
async fn load(
    base: &str,
    keys: &[String],
    clients: usize,
    photos: (usize, usize),
    think: (f64, f64),
    secs: f64,
) -> LoadResult {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(300)).no_proxy().build().unwrap();
    let keys = Arc::new(keys.to_vec());
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|vu| {
            let (client, keys, url) = (client.clone(), Arc::clone(&keys), format!("{base}/v1/embed"));
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(vu as u64 + 1);
                let mut result = LoadResult::default();
                while Instant::now() < until {
                    let n = rng.usize(photos.0..=photos.1);
                    let images: Vec<&String> = (0..n).map(|_| &keys[rng.usize(..keys.len())]).collect();
                    let t = Instant::now();
                    let response = client.post(&url).json(&serde_json::json!({ "images": images })).send().await;
                    let ok = match response {
                        Ok(r) if r.status() == 200 => r.json::<Value>().await.ok(),
                        _ => None,
                    };
                    result.latencies_s.push(t.elapsed().as_secs_f64());
                    result.requests += 1;
                    match ok {
                        Some(body) => {
                            let items = body["data"].as_array().cloned().unwrap_or_default();
                            let failed = items.iter().filter(|i| i.get("error").is_some()).count();
                            result.images += items.len() - failed;
                            result.errors += failed;
                        }
                        None => result.errors += n,
                    }
                    let pause = think.0 + rng.f64() * (think.1 - think.0);
                    tokio::time::sleep(Duration::from_secs_f64(pause)).await;
                }
                result
            })
        })
        .collect();
    let mut total = LoadResult::default();
    for task in tasks {
        let r = task.await.unwrap();
        total.requests += r.requests;
        total.images += r.images;
        total.errors += r.errors;
        total.latencies_s.extend(r.latencies_s);
    }
    total.seconds = start.elapsed().as_secs_f64();
    total
}

struct PrecisionRun {
    precision: String,
    file: String,
    load: LoadResult,
    peak_rss_mib: f64,
    embeddings: Vec<Vec<f32>>,
}

/// Serves the model folder at `precision`, embeds every photo once (for the cosine to fp32), then
/// runs the closed loop; the peak RSS is the server process's high-water mark (VmHWM).
fn precision_run(
    server: ServerConfig,
    precision: String,
    keys: &[String],
    secs: f64,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<PrecisionRun> {
    let server = server.env("CLIPFN_PRECISION", &precision).start();
    let file = server.get("/readyz").1["model"]["file"].as_str().unwrap_or("?").to_string();
    let mut embeddings = Vec::new();
    for chunk in keys.chunks(32) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let (status, body) = server.embed(&chunk);
        anyhow::ensure!(status == 200, "{precision}: {body}");
        for i in 0..chunk.len() {
            embeddings.push(common::item(&body, i).map_err(|code| anyhow::anyhow!("{precision}: {code}"))?);
        }
    }
    eprintln!("precision {precision} ({file}): closed loop at concurrency 2 for {secs} s");
    let load = runtime.block_on(load(&server.base, keys, 2, (30, 50), (0.0, 0.0), secs));
    let peak_rss_mib = common::status_bytes(&server.pid().to_string(), "VmHWM") / 1024.0 / 1024.0;
    Ok(PrecisionRun { precision, file, load, peak_rss_mib, embeddings })
}

/// Batch sizes the server ran, from its Prometheus histogram: (upper bound, count in bucket).
fn batch_fill(base: &str) -> Vec<(String, u64)> {
    let text =
        common::blocking_client().get(format!("{base}/metrics")).send().and_then(|r| r.text()).unwrap_or_default();
    let mut previous = 0;
    text.lines()
        .filter(|l| l.starts_with("clipfn_batch_size_photos_bucket"))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?.to_string();
            let cumulative: u64 = l.rsplit(' ').next()?.parse::<f64>().ok()? as u64;
            let in_bucket = cumulative - previous;
            previous = cumulative;
            Some((le, in_bucket))
        })
        .collect()
}

fn seed_gcs(photos: &[PathBuf], data: &Path) -> Vec<String> {
    let bucket = data.join("photos");
    std::fs::create_dir_all(&bucket).unwrap();
    photos
        .iter()
        .map(|p| {
            let key = p.file_name().unwrap().to_string_lossy().into_owned();
            std::fs::copy(p, bucket.join(&key)).unwrap();
            key
        })
        .collect()
}

/// Photos/s of the release `clipfn backfill` over `copies` copies of every photo (one task, batch
/// 64, Parquet to a temporary folder), from its final summary. The copies are symlinks inside a
/// local store, so the figure is the pipeline's and not an emulator's.
fn backfill(
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

fn chart(points: &[RawPoint], path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(450);
    let max_rate = points.iter().map(|p| p.images_per_s).fold(0.0, f64::max) * 1.2;
    let max_ms = points.iter().map(|p| p.ms_per_batch).fold(0.0, f64::max) * 1.2;
    for (area, title, max, value, label) in [
        (&left, "Throughput by batch size", max_rate, 0usize, "images/s"),
        (&right, "Latency of one batch", max_ms, 1, "ms per batch"),
    ] {
        let mut c = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..70f64, 0f64..max)?;
        c.configure_mesh().x_desc("batch size").y_desc(label).draw()?;
        let series: Vec<(f64, f64)> =
            points.iter().map(|p| (p.batch as f64, if value == 0 { p.images_per_s } else { p.ms_per_batch })).collect();
        c.draw_series(LineSeries::new(series.clone(), &BLUE))?;
        c.draw_series(series.iter().map(|&(x, y)| Circle::new((x, y), 4, BLUE.filled())))?;
    }
    root.present()?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    if std::env::var_os("ORT_DYLIB_PATH").is_none() {
        // SAFETY: first thing in main, before any other thread exists.
        unsafe { std::env::set_var("ORT_DYLIB_PATH", setup_var("ORT_DYLIB_PATH")) };
    }
    let runs: usize = env_or("CLIPFN_BENCH_RUNS", 3);
    let vus: usize = env_or("CLIPFN_BENCH_VUS", 2);
    let secs: f64 = env_or("CLIPFN_BENCH_SECONDS", 60.0);
    let provider: String = env_or("CLIPFN_BENCH_PROVIDER", "cpu".to_string());
    let out = PathBuf::from(std::env::var("CLIPFN_BENCH_OUT").unwrap_or_else(|_| "target/bench-report".into()));
    std::fs::create_dir_all(&out)?;
    let model = setup_var("CLIPFN_BENCH_MODEL");
    anyhow::ensure!(Path::new(&model).is_file(), "{model} missing: run tools/setup.sh --bench");
    let photos = camera_photos(usize::MAX);
    // The server runs at its default batch size for the provider; it warms up at 1 and at that.
    let server_batch = Settings::from_vars([("CLIPFN_MODEL".to_string(), model.clone())])?
        .model
        .batch_size(if provider == "cuda" { Device::Cuda } else { Device::Cpu });
    let warm_up_batches = [1, server_batch];

    // One ONNX Runtime environment per process: the image session also hosts the text session.
    let settings = bench_settings(&model, &provider)?;
    let ort_runtime = Runtime::start(&settings.model)?;
    let mut session = load_image_model(ort_runtime.clone(), &settings, &model)?;
    let raw = raw_inference(&mut session, runs)?;
    let towers = match setup_env_path("CLIPFN_BENCH_SIGLIP_MODEL") {
        Some(siglip) => towers::compare(&ort_runtime, &settings, &model, &siglip, runs)?,
        None => Vec::new(),
    };
    let ours = preprocessing(&photos, runs)?;
    eprintln!("preprocessing: {ours:.1} photos/s on one core");
    let (pillow, pillow_draft) = pillow_baseline(&photos)?;

    let data = tempfile::tempdir()?;
    let keys = seed_gcs(&photos, data.path());
    let (_gcs, gcs_port) = common::start_fake_gcs(data.path());
    let server = common::gcs_env(ServerConfig::local(Path::new("/")), gcs_port)
        .env("CLIPFN_STORE", "gs://photos")
        .env("CLIPFN_MODEL", &model)
        .env("CLIPFN_PROVIDER", &provider)
        .env("CLIPFN_BATCH_SIZE", &server_batch.to_string())
        .env("CLIPFN_REQUEST_TIMEOUT_MS", "600000");
    let runtime = tokio::runtime::Runtime::new()?;
    // The seed shape's peak RSS at batch 64 too, from a server of its own.
    let peak_rss_64 = if server_batch == 64 {
        None
    } else {
        let server = server.clone().env("CLIPFN_BATCH_SIZE", "64").start();
        eprintln!("end to end at batch 64: seed load shape, {vus} VUs for {secs} s");
        runtime.block_on(load(&server.base, &keys, vus, (30, 50), (3.0, 5.0), secs));
        Some(common::status_bytes(&server.pid().to_string(), "VmHWM"))
    };
    let server = server.start();
    eprintln!("end to end: seed load shape, {vus} VUs for {secs} s");
    let seed = runtime.block_on(load(&server.base, &keys, vus, (30, 50), (3.0, 5.0), secs));
    let peak_rss = common::status_bytes(&server.pid().to_string(), "VmHWM");
    eprintln!("end to end: closed loop at concurrency 2 for {secs} s");
    let closed = runtime.block_on(load(&server.base, &keys, 2, (30, 50), (0.0, 0.0), secs));
    let fill = batch_fill(&server.base);
    drop(server);
    let folder = setup_var("CLIPFN_BENCH_FOLDER");
    let precision_server = || {
        common::gcs_env(ServerConfig::local(Path::new("/")), gcs_port)
            .env("CLIPFN_STORE", "gs://photos")
            .env("CLIPFN_MODEL", &folder)
            .env("CLIPFN_PROVIDER", &provider)
            .env("CLIPFN_BATCH_SIZE", &server_batch.to_string())
            .env("CLIPFN_REQUEST_TIMEOUT_MS", "600000")
    };
    let precisions: String = env_or("CLIPFN_BENCH_PRECISIONS", "fp32,int8".to_string());
    let by_precision = precisions
        .split(',')
        .map(|precision| precision_run(precision_server(), precision.to_string(), &keys, secs, &runtime))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Each precision's session alone at the server's batch, just after its server stopped.
    let raw_by_precision = by_precision
        .iter()
        .map(|r| {
            let mut model = load_image_model(ort_runtime.clone(), &settings, &format!("{folder}/{}", r.file))?;
            Ok(raw_point(&mut model, server_batch, runs)?.images_per_s)
        })
        .collect::<anyhow::Result<Vec<f64>>>()?;
    let text = match setup_env_path("CLIPFN_BENCH_TEXT_MODEL") {
        Some(text_model) => {
            let batch_ms = raw.iter().find(|p| p.batch == 64).map_or(f64::NAN, |p| p.ms_per_batch);
            Some(text_tower(
                (&ort_runtime, &session),
                &settings,
                &text_model,
                &model,
                batch_ms,
                &keys,
                gcs_port,
                &provider,
                runs,
            )?)
        }
        None => None,
    };
    let copies: usize = env_or("CLIPFN_BENCH_BACKFILL_COPIES", 20);
    eprintln!("backfill: {copies} copies of {} photos", photos.len());
    let (backfilled, backfill_rate) = backfill(&model, &provider, server_batch, &photos, copies)?;

    // Cold starts, each beside the Python reference, so that both see the same machine load.
    let mut starts = Vec::new();
    let mut references = Vec::new();
    for run in 0..COLD_STARTS {
        let log = out.join(format!("cold-start-{run}.log"));
        starts.push(cold_start::start_once(&model, &provider, server_batch, &photos[0], &log)?);
        references.push(cold_start::reference(&model, &provider, &warm_up_batches)?);
        eprintln!(
            "cold start {run}: ready {:.2} s, Python ORT session + warm-up {:.2} s",
            starts[run].ready_s, references[run].session_and_runs_s
        );
    }

    let raw64 = raw.iter().find(|p| p.batch == 64).map_or(f64::NAN, |p| p.images_per_s);
    let e2e = closed.images as f64 / closed.seconds;
    let mean_mp = photos
        .iter()
        .filter_map(|p| image::image_dimensions(p).ok())
        .map(|(w, h)| f64::from(w) * f64::from(h) / 1e6)
        .sum::<f64>()
        / photos.len() as f64;

    let mut md = String::new();
    writeln!(md, "# clipfn benchmark\n")?;
    writeln!(
        md,
        "Machine: {} cores, {}. Model: {} (ViT-B/32 architecture, random weights), {provider} execution provider. Photos: {} real camera JPEGs, mean {mean_mp:.1} MP. Medians of {runs} runs.\n",
        std::thread::available_parallelism()?.get(),
        cpu_name(),
        Path::new(&model).file_name().unwrap_or_default().to_string_lossy(),
        photos.len()
    )?;
    writeln!(
        md,
        "## 1. Raw inference (ONNX Runtime session alone)\n\n| batch | images/s | ms per batch |\n|---|---|---|"
    )?;
    for p in &raw {
        writeln!(md, "| {} | {:.1} | {:.0} |", p.batch, p.images_per_s, p.ms_per_batch)?;
    }
    writeln!(
        md,
        "\n## 2. Preprocessing, one core (decode + resize + normalise, no fetch)\n\n| implementation | photos/s |\n|---|---|"
    )?;
    writeln!(
        md,
        "| clipfn | {ours:.1} |\n| Pillow, CLIP preprocessing (full decode) | {pillow:.1} |\n| Pillow with JPEG draft (DCT-scaled decode) | {pillow_draft:.1} |"
    )?;
    writeln!(md, "\n## 3. End to end (release server, loopback, photos from fake-gcs-server)\n")?;
    writeln!(
        md,
        "| load | requests | images embedded | images/s | p50 s | p95 s | p99 s | errors |\n|---|---|---|---|---|---|---|---|"
    )?;
    writeln!(md, "{}", seed.row(&format!("seed shape: {vus} VUs, 30-50 photos, 3-5 s think, {secs} s")))?;
    writeln!(md, "{}", closed.row(&format!("closed loop, concurrency 2, 30-50 photos, {secs} s")))?;
    writeln!(
        md,
        "\nBatch fill over both runs (batches by size bucket, from /metrics):\n\n| batch size <= | batches |\n|---|---|"
    )?;
    for (le, n) in &fill {
        writeln!(md, "| {le} | {n} |")?;
    }
    writeln!(md, "\n## Ratios (same run)\n")?;
    writeln!(
        md,
        "- end-to-end images/s (closed loop) / raw batch-64 images/s = {e2e:.1} / {raw64:.1} = **{:.2}** (target >= 0.90)",
        e2e / raw64
    )?;
    writeln!(
        md,
        "- clipfn preprocessing / Pillow (full decode) per core = {ours:.1} / {pillow:.1} = **{:.2}** (target >= 3)",
        ours / pillow
    )?;
    writeln!(md, "- clipfn preprocessing / Pillow with draft per core = **{:.2}**", ours / pillow_draft)?;
    // The first precision is the baseline (fp32), the second the variant measured against it.
    let (base, variant) = (&by_precision[0], &by_precision[1]);
    let (b, v) = (&base.precision, &variant.precision);
    // The goals are for int8 on CPU; other pairs are reported without one.
    let goal = |text: &str| if v == "int8" { format!(" (goal {text})") } else { String::new() };
    let rate = |r: &PrecisionRun| r.load.images as f64 / r.load.seconds;
    let cosines: Vec<f64> =
        base.embeddings.iter().zip(&variant.embeddings).map(|(a, b)| f64::from(common::cosine(a, b))).collect();
    let min_cosine = cosines.iter().copied().fold(1.0, f64::min);
    writeln!(md, "\n## 4. Precision: the model folder's {b} and {v} files, end to end on {provider}\n")?;
    writeln!(
        md,
        "| precision | file | requests | images embedded | images/s | p50 s | p95 s | p99 s | errors | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for r in &by_precision {
        let row = r.load.row(&r.precision);
        let row = row.replacen(&format!("| {} |", r.precision), &format!("| {} | {} |", r.precision, r.file), 1);
        writeln!(md, "{row} {:.0} |", r.peak_rss_mib)?;
    }
    writeln!(
        md,
        "\n- {v} / {b} end-to-end images/s = {:.1} / {:.1} = **{:.2}x**{}",
        rate(variant),
        rate(base),
        rate(variant) / rate(base),
        goal(">= 2.2")
    )?;
    writeln!(
        md,
        "- {v} / {b} peak RSS = {:.0} / {:.0} MiB = **{:.2}**{}",
        variant.peak_rss_mib,
        base.peak_rss_mib,
        variant.peak_rss_mib / base.peak_rss_mib,
        goal("<= 0.5")
    )?;
    writeln!(
        md,
        "- {v} embeddings' cosine to {b}'s over {} photos: min **{min_cosine:.4}**, mean {:.4}{}",
        cosines.len(),
        cosines.iter().sum::<f64>() / cosines.len() as f64,
        goal(">= 0.99")
    )?;
    let cores = std::thread::available_parallelism()?.get() as f64;
    writeln!(
        md,
        "\nThe CPU ceiling at a precision is `1 / (1/raw + decode_per_photo/cores)`: raw is that file's session \
         alone at batch {server_batch} (measured just after its server stopped), decode_per_photo is section 2's \
         1/{ours:.1} s, and there are {cores} cores.\n"
    )?;
    for (r, raw) in by_precision.iter().zip(&raw_by_precision) {
        let ceiling = 1.0 / (1.0 / raw + 1.0 / (ours * cores));
        writeln!(
            md,
            "- {}: raw {raw:.1} images/s, ceiling {ceiling:.1}; end to end / ceiling = {:.1} / {ceiling:.1} = **{:.2}** (goal >= 0.9)",
            r.precision,
            rate(r),
            rate(r) / ceiling
        )?;
    }
    match &text {
        Some(text) => text.write(&mut md)?,
        None => writeln!(md, "\n## 5. Text tower\n\nSkipped: no CLIPFN_BENCH_TEXT_MODEL (tools/setup.sh --bench).")?,
    }
    writeln!(
        md,
        "\n## 6. Backfill (`clipfn backfill`, release, one task, batch {server_batch}, local store, Parquet out)\n\n| photos | photos/s |\n|---|---|\n| {backfilled} | {backfill_rate:.1} |"
    )?;
    writeln!(
        md,
        "\n- backfill photos/s / raw batch-64 images/s = {backfill_rate:.1} / {raw64:.1} = **{:.2}** (target >= 0.95)",
        backfill_rate / raw64
    )?;
    cold_start_sections(&mut md, &starts, &references, warm_up_batches, (peak_rss, peak_rss_64))?;
    match towers.as_slice() {
        [] => writeln!(md, "\n## 9. Image towers\n\nSkipped: no CLIPFN_BENCH_SIGLIP_MODEL (tools/setup.sh --bench).")?,
        towers => towers::write(&mut md, towers)?,
    }
    writeln!(md, "\nChart: throughput.svg (images/s and ms per batch by batch size, raw inference).")?;
    std::fs::write(out.join("report.md"), &md)?;
    chart(&raw, &out.join("throughput.svg"))?;
    println!("{md}");
    eprintln!("wrote {}", out.join("report.md").display());
    Ok(())
}

/// Sections 7 (cold start and its breakdown) and 8 (memory) of the report, with their goals.
fn cold_start_sections(
    md: &mut String,
    starts: &[cold_start::Start],
    references: &[cold_start::Reference],
    warm_up_batches: [usize; 2],
    (peak_rss, peak_rss_64): (f64, Option<f64>),
) -> anyhow::Result<()> {
    let warm_up = warm_up_batches.map(|b| b.to_string()).join(" and ");
    writeln!(
        md,
        "\n## 7. Cold start (release server, model file in the page cache, warm-up at batch {warm_up})\n\n\
         {COLD_STARTS} starts of the server, each followed by one request of one photo from a file store and by \
         Python ONNX Runtime in a fresh process: session creation + one run at each warm-up batch size on the same \
         model (tools/coldstart_reference.py).\n"
    )?;
    writeln!(md, "| | median s | max s |\n|---|---|---|")?;
    let row = |md: &mut String, name: &str, xs: Vec<f64>| -> std::fmt::Result {
        let max = xs.iter().copied().fold(f64::NAN, f64::max);
        writeln!(md, "| {name} | {:.2} | {max:.2} |", median(xs))
    };
    row(md, "clipfn: process start to /readyz 200", starts.iter().map(|s| s.ready_s).collect())?;
    row(md, "clipfn: process start to first response", starts.iter().map(|s| s.first_response_s).collect())?;
    row(md, "Python ONNX Runtime: session + warm-up runs", references.iter().map(|r| r.session_and_runs_s).collect())?;
    row(md, "Python ONNX Runtime: `import onnxruntime`", references.iter().map(|r| r.library_s).collect())?;
    writeln!(md, "\nWhere clipfn's time to ready goes (medians, from its \"model loaded and warmed up\" log line):\n")?;
    writeln!(md, "| phase | ms |\n|---|---|")?;
    let ms = |field: &str| median(starts.iter().map(|s| s.ms(field)).collect());
    let before_load = median(starts.iter().map(|s| s.ready_s * 1e3 - s.ms("load_ms")).collect());
    for (phase, value) in [
        ("process start, HTTP listening, /readyz polling (ready minus load_ms)", before_load),
        ("ONNX Runtime library load and provider choice (runtime_ms)", ms("runtime_ms")),
        ("model read (read_ms)", ms("read_ms")),
        ("session creation (session_ms)", ms("session_ms")),
        ("warm-up (warm_up_ms)", ms("warm_up_ms")),
    ] {
        writeln!(md, "| {phase} | {value:.0} |")?;
    }
    writeln!(md, "\n## 8. Memory\n\n| | peak RSS, GB |\n|---|---|")?;
    let batch = warm_up_batches[1];
    writeln!(md, "| clipfn, end-to-end server after the seed shape, batch {batch} (VmHWM) | {:.2} |", peak_rss / 1e9)?;
    if let Some(peak_rss_64) = peak_rss_64 {
        writeln!(md, "| the same at `CLIPFN_BATCH_SIZE=64` | {:.2} |", peak_rss_64 / 1e9)?;
    }
    let python = median(references.iter().map(|r| r.peak_rss).collect());
    writeln!(md, "| Python ONNX Runtime, session + warm-up runs (ru_maxrss, median) | {:.2} |", python / 1e9)?;
    writeln!(md, "| Immich's ML server, same weights (issue 13) | {:.2} |", cold_start::IMMICH_PEAK_RSS / 1e9)?;
    let ready = median(starts.iter().map(|s| s.ready_s).collect());
    let floor = median(references.iter().map(|r| r.session_and_runs_s).collect());
    writeln!(
        md,
        "\n- cold start, medians: process start to /readyz 200 / Python ONNX Runtime session + warm-up runs = {ready:.2} / {floor:.2} s = **{:.2}** (goal <= 1.2)",
        ready / floor
    )?;
    writeln!(
        md,
        "- peak RSS after the seed shape / Immich's ML server = {:.2} / {:.2} GB = **{:.2}** (goal <= 1.0)",
        peak_rss / 1e9,
        cold_start::IMMICH_PEAK_RSS / 1e9,
        peak_rss / cold_start::IMMICH_PEAK_RSS
    )?;
    Ok(())
}

/// A path from .cache/clipfn.env, if set and present.
fn setup_env_path(name: &str) -> Option<String> {
    common::setup_env().get(name).filter(|p| Path::new(p).is_file()).cloned()
}

struct TextResult {
    tokenizer_per_s: f64,
    /// (batch, texts/s, ms per batch)
    embeddings: Vec<(usize, f64, f64)>,
    /// Raw batch-64 time of the image session alone (section 1).
    image_batch_ms: f64,
    backlog: Backlog,
}

impl TextResult {
    fn write(&self, md: &mut String) -> std::fmt::Result {
        writeln!(md, "\n## 5. Text tower (ViT-B/32 text architecture, random weights)\n")?;
        writeln!(md, "Tokenizer (clean-up + BPE, one core): **{:.0} texts/s**.\n", self.tokenizer_per_s)?;
        writeln!(md, "| batch | texts/s | ms per batch |\n|---|---|---|")?;
        for (batch, rate, ms) in &self.embeddings {
            writeln!(md, "| {batch} | {rate:.1} | {ms:.1} |")?;
        }
        let stats = |xs: &[f64]| {
            let mut xs = xs.to_vec();
            xs.sort_by(f64::total_cmp);
            if xs.is_empty() { (f64::NAN, f64::NAN) } else { (percentile(&xs, 0.5), xs[xs.len() - 1]) }
        };
        let b = &self.backlog;
        let ((idle_p50, idle_max), (busy_p50, busy_max)) = (stats(&b.idle_ms), stats(&b.busy_ms));
        writeln!(
            md,
            "\nOne-line search query over HTTP (`/v1/embed` with one new text), end to end:\n\n| while | queries | p50 ms | max ms |\n|---|---|---|---|"
        )?;
        writeln!(md, "| idle | {} | {idle_p50:.1} | {idle_max:.1} |", b.idle_ms.len())?;
        writeln!(
            md,
            "| one request of 256 photos in flight, {} photos queued for the model when sent | {} | {busy_p50:.1} | {busy_max:.1} |",
            b.queued.iter().map(|q| format!("{q:.0}")).collect::<Vec<_>>().join(", "),
            b.busy_ms.len()
        )?;
        // In a single queue the query would wait for the batch running and every queued photo.
        let fifo_ms: Vec<String> =
            b.queued.iter().map(|q| format!("{:.0}", ((q / 64.0).ceil() + 1.0) * b.batch_ms)).collect();
        writeln!(
            md,
            "\nImage batches (up to 64 photos) took {:.0} ms on average on the server during the backlog (decoders sharing the cores; {:.0} ms for the session alone in section 1). A query waits for the batch already running, then runs ahead of the queued photos; behind them, in one queue, it would have waited about {} ms.",
            b.batch_ms,
            self.image_batch_ms,
            fifo_ms.join(" and ")
        )
    }
}

/// Section 4: the tokenizer, the text session alone, and a query against an image backlog.
#[allow(clippy::too_many_arguments)]
fn text_tower(
    (runtime, image): (&Runtime, &ImageModel),
    settings: &Settings,
    text_model: &str,
    image_model: &str,
    image_batch_ms: f64,
    keys: &[String],
    gcs_port: u16,
    provider: &str,
    runs: usize,
) -> anyhow::Result<TextResult> {
    let queries: Vec<String> = (0..2000)
        .map(|i| {
            let things = ["beach at sunset", "my dog in the snow", "birthday cake", "Tokyo at night", "서울 야경"];
            format!("a photo of {} #{i}", things[i % things.len()])
        })
        .collect();
    let tokenizer = Tokenizer::clip();
    let tokenizer_per_s = median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                queries.iter().for_each(|q| drop(std::hint::black_box(tokenizer.tokenize(q))));
                queries.len() as f64 / t.elapsed().as_secs_f64()
            })
            .collect(),
    );
    eprintln!("tokenizer: {tokenizer_per_s:.0} texts/s on one core");

    let data = ModelData::File(text_model.into());
    let mut session =
        TextModel::load(&mut runtime.clone(), &image.info, &settings.model, data, "bench-text".into(), &tokenizer)?;
    let tokens = queries.iter().take(64).map(|q| tokenizer.tokenize(q)).collect::<Result<Vec<Tokens>, _>>()?;
    let rows: Vec<&Tokens> = tokens.iter().collect();
    let mut embeddings = Vec::new();
    for batch in [1, 64] {
        let ids = &rows[..batch];
        session.run(ids)?;
        let secs = median(
            (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    session.run(ids).map(|_| t.elapsed().as_secs_f64())
                })
                .collect::<Result<_, _>>()?,
        );
        eprintln!("text embeddings: batch {batch}: {:.1} texts/s", batch as f64 / secs);
        embeddings.push((batch, batch as f64 / secs, secs * 1e3));
    }
    let backlog = query_under_backlog(text_model, image_model, keys, gcs_port, provider)?;
    Ok(TextResult { tokenizer_per_s, embeddings, image_batch_ms, backlog })
}

/// Latencies (ms) of one-text queries over HTTP, first idle, then while one request of 256 photos
/// is in flight with at least a batch of them queued for the model; and the queue depth seen
/// before each of those. Every query is a new text, so none comes from the cache.
fn query_under_backlog(
    text_model: &str,
    image_model: &str,
    keys: &[String],
    gcs_port: u16,
    provider: &str,
) -> anyhow::Result<Backlog> {
    let server = common::gcs_env(ServerConfig::local(Path::new("/")), gcs_port)
        .env("CLIPFN_STORE", "gs://photos")
        .env("CLIPFN_MODEL", image_model)
        .env("CLIPFN_TEXT_MODEL", text_model)
        .env("CLIPFN_PROVIDER", provider)
        .env("CLIPFN_BATCH_SIZE", "64")
        .env("CLIPFN_MAX_IMAGES", "256")
        .env("CLIPFN_REQUEST_TIMEOUT_MS", "600000")
        .start();
    let client = common::blocking_client();
    let url = format!("{}/v1/embed", server.base);
    let mut n = 0;
    let mut query = || -> anyhow::Result<f64> {
        n += 1;
        let t = Instant::now();
        let response =
            client.post(&url).json(&serde_json::json!({ "texts": [format!("{n} dogs on a beach")] })).send()?;
        anyhow::ensure!(response.status() == 200, "text query: {}", response.status());
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let idle = (0..10).map(|_| query()).collect::<anyhow::Result<Vec<_>>>()?;
    let images: Vec<String> = keys.iter().cycle().take(256).cloned().collect();
    let backlog_url = url.clone();
    let backlog = std::thread::spawn(move || {
        common::blocking_client()
            .post(backlog_url)
            .json(&serde_json::json!({ "images": images }))
            .send()
            .map(|r| r.status())
    });
    let (mut busy, mut depths) = (Vec::new(), Vec::new());
    while !backlog.is_finished() && busy.len() < 20 {
        let depth = common::series(&common::scrape(&server), "clipfn_queue_depth_photos", &[]);
        if depth >= 64.0 {
            depths.push(depth);
            busy.push(query()?);
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let status = backlog.join().expect("backlog thread")?;
    anyhow::ensure!(status == 200, "the 256-photo request: {status}");
    // The image batches that ran meanwhile, as the server timed them (decoders sharing the cores).
    let metrics = common::scrape(&server);
    let stage = |suffix: &str| {
        common::series(&metrics, &format!("clipfn_stage_duration_seconds_{suffix}"), &[("stage", "inference")])
    };
    let batch_ms = stage("sum") / stage("count") * 1e3;
    eprintln!(
        "search query: idle {idle:?} ms, under backlog {busy:?} ms (queue depths {depths:?}), image batches {batch_ms:.0} ms"
    );
    Ok(Backlog { idle_ms: idle, busy_ms: busy, queued: depths, batch_ms })
}

/// A search query's latency against an image backlog, and the image batches that ran meanwhile.
struct Backlog {
    idle_ms: Vec<f64>,
    busy_ms: Vec<f64>,
    /// Photos queued for the model when each busy query was sent.
    queued: Vec<f64>,
    /// Mean image batch time on the server during the backlog.
    batch_ms: f64,
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
