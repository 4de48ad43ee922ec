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
//! CLIPFN_BENCH_PROVIDER (`cpu`; `cuda` on a GPU machine),
//! CLIPFN_BENCH_PRECISIONS (`fp32,int8`),
//! CLIPFN_BENCH_BACKFILL_COPIES (20: the backfill embeds that many copies of each photo).

#[path = "support/alone.rs"]
mod alone;
#[path = "support/backfill.rs"]
mod backfill;
#[path = "support/cold_start.rs"]
mod cold_start;
#[path = "../tests/it/common/mod.rs"]
mod common;
#[path = "support/knobs.rs"]
mod knobs;
#[path = "support/load.rs"]
mod load;
#[path = "support/report.rs"]
mod report;
#[path = "support/stats.rs"]
mod stats;
#[path = "support/text.rs"]
mod text;
#[path = "support/towers.rs"]
mod towers;

use std::path::{Path, PathBuf};

use alone::RawPoint;
use clipfn::{
    model::{ImageModel, Runtime},
    settings::{Device, Settings},
};
use cold_start::ColdStarts;
use common::{ServerConfig, camera_photos, setup_var};
use knobs::env_or;
use load::{LoadResult, PrecisionRun, load};
use text::TextResult;
use towers::Tower;

fn main() -> anyhow::Result<()> {
    // SAFETY: first thing in main, before any other thread exists.
    unsafe { knobs::set_ort_dylib_path() };
    let knobs = Knobs::read()?;
    let photos = camera_photos(usize::MAX);
    let mut sessions = Sessions::load(&knobs)?;
    let raw = alone::raw_inference(&mut sessions.image, knobs.runs)?; // 1
    let towers = image_towers(&knobs, &sessions)?; // 9
    let preprocessing = preprocessing(&photos, knobs.runs)?; // 2
    let loopback = Loopback::start(&photos)?;
    let end_to_end = end_to_end(&knobs, &loopback)?; // 3, and 8's peak RSS
    let precision = precision(&knobs, &loopback, &sessions)?; // 4
    let text = text_tower(&knobs, &loopback, &sessions, &raw)?; // 5
    let backfill = backfill(&knobs, &photos)?; // 6
    let cold_starts = cold_starts(&knobs, &photos)?; // 7, and 8's Python figure
    let results = Results { raw, preprocessing, end_to_end, precision, text, backfill, cold_starts, towers };
    report::write(&knobs, &photos, &results)
}

/// The knobs (see above) and the model and batch they lead to, read once.
struct Knobs {
    runs: usize,
    vus: usize,
    secs: f64,
    provider: String,
    out: PathBuf,
    /// The ViT-B/32-architecture model file (tools/setup.sh --bench).
    model: String,
    /// The server's default batch size for the provider.
    server_batch: usize,
    precisions: String,
    backfill_copies: usize,
}

impl Knobs {
    fn read() -> anyhow::Result<Knobs> {
        let runs: usize = env_or("CLIPFN_BENCH_RUNS", 3);
        let vus: usize = env_or("CLIPFN_BENCH_VUS", 2);
        let secs: f64 = env_or("CLIPFN_BENCH_SECONDS", 60.0);
        let provider: String = env_or("CLIPFN_BENCH_PROVIDER", "cpu".to_string());
        let out = knobs::out_dir()?;
        let model = setup_var("CLIPFN_BENCH_MODEL");
        anyhow::ensure!(Path::new(&model).is_file(), "{model} missing: run tools/setup.sh --bench");
        // The server runs at its default batch size for the provider; it warms up at 1 and at that.
        let server_batch = Settings::from_vars([("CLIPFN_MODEL".to_string(), model.clone())])?
            .model
            .batch_size(if provider == "cuda" { Device::Cuda } else { Device::Cpu });
        let precisions: String = env_or("CLIPFN_BENCH_PRECISIONS", "fp32,int8".to_string());
        let backfill_copies: usize = env_or("CLIPFN_BENCH_BACKFILL_COPIES", 20);
        Ok(Knobs { runs, vus, secs, provider, out, model, server_batch, precisions, backfill_copies })
    }

    fn warm_up_batches(&self) -> [usize; 2] {
        [1, self.server_batch]
    }
}

/// What the sections measured, for the report.
struct Results {
    raw: Vec<RawPoint>,
    preprocessing: Preprocessing,
    end_to_end: EndToEnd,
    precision: Precision,
    text: Option<TextResult>,
    backfill: Backfill,
    cold_starts: ColdStarts,
    towers: Vec<Tower>,
}

/// One ONNX Runtime environment per process: the image session (section 1's) also hosts the text
/// session, and the other sessions the bench loads share it.
struct Sessions {
    settings: Settings,
    runtime: Runtime,
    image: ImageModel,
}

impl Sessions {
    fn load(knobs: &Knobs) -> anyhow::Result<Sessions> {
        let settings = alone::bench_settings(&knobs.model, &knobs.provider)?;
        let runtime = Runtime::start(&settings.model)?;
        let image = alone::load_image_model(runtime.clone(), &settings, &knobs.model)?;
        Ok(Sessions { settings, runtime, image })
    }
}

/// Section 9, measured just after section 1 on its runtime: SigLIP against ViT-B/32, when
/// `tools/setup.sh --bench` made the SigLIP tower.
fn image_towers(knobs: &Knobs, sessions: &Sessions) -> anyhow::Result<Vec<Tower>> {
    match setup_env_path("CLIPFN_BENCH_SIGLIP_MODEL") {
        Some(siglip) => towers::compare(&sessions.runtime, &sessions.settings, &knobs.model, &siglip, knobs.runs),
        None => Ok(Vec::new()),
    }
}

/// Section 2: photos/s on one core, clipfn's and Pillow's (full decode, and with JPEG draft).
struct Preprocessing {
    ours: f64,
    pillow: f64,
    pillow_draft: f64,
}

fn preprocessing(photos: &[PathBuf], runs: usize) -> anyhow::Result<Preprocessing> {
    let ours = alone::preprocessing(photos, runs)?;
    eprintln!("preprocessing: {ours:.1} photos/s on one core");
    let (pillow, pillow_draft) = alone::pillow_baseline(photos)?;
    Ok(Preprocessing { ours, pillow, pillow_draft })
}

/// Sections 3 to 5's loopback: the photos in the GCS emulator, and the runtime the load runs on.
/// (Fields drop in order: the runtime, then the emulator, then its folder.)
struct Loopback {
    runtime: tokio::runtime::Runtime,
    _gcs: common::Proc,
    gcs_port: u16,
    keys: Vec<String>,
    _data: tempfile::TempDir,
}

impl Loopback {
    fn start(photos: &[PathBuf]) -> anyhow::Result<Loopback> {
        let data = tempfile::tempdir()?;
        let keys = load::seed_gcs(photos, data.path());
        let (gcs, gcs_port) = common::start_fake_gcs(data.path(), None);
        let runtime = tokio::runtime::Runtime::new()?;
        Ok(Loopback { runtime, _gcs: gcs, gcs_port, keys, _data: data })
    }

    /// A release server on the emulator's photos, serving `model` at the server's batch.
    fn server(&self, knobs: &Knobs, model: &str) -> ServerConfig {
        common::gcs_env(ServerConfig::local(Path::new("/")), self.gcs_port)
            .env("CLIPFN_STORE", "gs://photos")
            .env("CLIPFN_MODEL", model)
            .env("CLIPFN_PROVIDER", &knobs.provider)
            .env("CLIPFN_BATCH_SIZE", &knobs.server_batch.to_string())
            .env("CLIPFN_REQUEST_TIMEOUT_MS", "600000")
    }

    /// `clients` loops of 30-50 photos a request for `secs`: see [`load()`].
    fn load(&self, base: &str, clients: usize, think: (f64, f64), secs: f64) -> LoadResult {
        self.runtime.block_on(load(base, &self.keys, clients, (30, 50), think, secs))
    }
}

/// Section 3: the seed shape, then the closed loop, on one server; and for section 8, the server's
/// peak RSS (VmHWM, bytes) after the seed shape, at its batch and at 64.
struct EndToEnd {
    seed: LoadResult,
    closed: LoadResult,
    /// Batches by size bucket over both runs: (upper bound, count).
    fill: Vec<(String, u64)>,
    peak_rss: f64,
    /// None when the server's batch is 64.
    peak_rss_64: Option<f64>,
}

fn end_to_end(knobs: &Knobs, loopback: &Loopback) -> anyhow::Result<EndToEnd> {
    let Knobs { vus, secs, .. } = *knobs;
    let server = loopback.server(knobs, &knobs.model);
    // The seed shape's peak RSS at batch 64 too, from a server of its own.
    let peak_rss_64 = if knobs.server_batch == 64 {
        None
    } else {
        let server = server.clone().env("CLIPFN_BATCH_SIZE", "64").start();
        eprintln!("end to end at batch 64: seed load shape, {vus} VUs for {secs} s");
        loopback.load(&server.base, vus, (3.0, 5.0), secs);
        Some(common::status_bytes(&server.pid().to_string(), "VmHWM"))
    };
    let server = server.start();
    eprintln!("end to end: seed load shape, {vus} VUs for {secs} s");
    let seed = loopback.load(&server.base, vus, (3.0, 5.0), secs);
    let peak_rss = common::status_bytes(&server.pid().to_string(), "VmHWM");
    eprintln!("end to end: closed loop at concurrency 2 for {secs} s");
    let closed = loopback.load(&server.base, 2, (0.0, 0.0), secs);
    let fill = load::batch_fill(&server.base);
    Ok(EndToEnd { seed, closed, fill, peak_rss, peak_rss_64 })
}

/// Section 4: the model folder's file at each precision, end to end, then alone.
struct Precision {
    by_precision: Vec<PrecisionRun>,
    /// Each precision's session alone at the server's batch, images/s.
    raw_by_precision: Vec<f64>,
}

fn precision(knobs: &Knobs, loopback: &Loopback, sessions: &Sessions) -> anyhow::Result<Precision> {
    let folder = setup_var("CLIPFN_BENCH_FOLDER");
    let by_precision = knobs
        .precisions
        .split(',')
        .map(|precision| {
            let server = loopback.server(knobs, &folder);
            load::precision_run(server, precision.to_string(), &loopback.keys, knobs.secs, &loopback.runtime)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Each precision's session alone at the server's batch, just after its server stopped.
    let raw_by_precision = by_precision
        .iter()
        .map(|r| {
            let path = format!("{folder}/{}", r.file);
            let mut model = alone::load_image_model(sessions.runtime.clone(), &sessions.settings, &path)?;
            Ok(alone::raw_point(&mut model, knobs.server_batch, knobs.runs)?.images_per_s)
        })
        .collect::<anyhow::Result<Vec<f64>>>()?;
    Ok(Precision { by_precision, raw_by_precision })
}

/// Section 5, when `tools/setup.sh --bench` made the text model: the text session on section 1's
/// runtime beside its image session, and queries to a server on the emulator's photos.
fn text_tower(
    knobs: &Knobs,
    loopback: &Loopback,
    sessions: &Sessions,
    raw: &[RawPoint],
) -> anyhow::Result<Option<TextResult>> {
    let Some(text_model) = setup_env_path("CLIPFN_BENCH_TEXT_MODEL") else { return Ok(None) };
    let batch_ms = raw.iter().find(|p| p.batch == 64).map_or(f64::NAN, |p| p.ms_per_batch);
    let text = text::text_tower(
        (&sessions.runtime, &sessions.image),
        &sessions.settings,
        &text_model,
        &knobs.model,
        batch_ms,
        &loopback.keys,
        loopback.gcs_port,
        &knobs.provider,
        knobs.runs,
    )?;
    Ok(Some(text))
}

/// Section 6: photos embedded and photos/s of `clipfn backfill`.
struct Backfill {
    photos: usize,
    rate: f64,
}

fn backfill(knobs: &Knobs, photos: &[PathBuf]) -> anyhow::Result<Backfill> {
    let copies = knobs.backfill_copies;
    eprintln!("backfill: {copies} copies of {} photos", photos.len());
    let (backfilled, rate) = backfill::run(&knobs.model, &knobs.provider, knobs.server_batch, photos, copies)?;
    Ok(Backfill { photos: backfilled, rate })
}

/// Section 7: cold starts, each beside the Python reference, so that both see the same machine load.
fn cold_starts(knobs: &Knobs, photos: &[PathBuf]) -> anyhow::Result<ColdStarts> {
    let Knobs { model, provider, server_batch, out, .. } = knobs;
    cold_start::measure(model, provider, *server_batch, knobs.warm_up_batches(), &photos[0], out)
}

/// A path from .cache/clipfn.env, if set and present.
fn setup_env_path(name: &str) -> Option<String> {
    common::setup_env().get(name).filter(|p| Path::new(p).is_file()).cloned()
}
