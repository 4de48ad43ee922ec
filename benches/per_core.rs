//! Per-core capacity with inference free: `cargo bench --bench per_core` (after `tools/setup.sh`).
//!
//! On a GPU host the model is not what limits clipfn: the CPU is (fetch, decode, resize, batch
//! layout, JSON, HTTP). This bench makes inference nearly free with the test model (a 16x16 patch
//! convolution and one matmul, about 2 MFLOP per photo) and measures, in one run:
//! - **the server**: photos embedded per CPU-second the server process used (utime + stime from
//!   /proc/PID/stat, not wall time x cores), under a closed loop of clients, with the photos in a
//!   file store and in the GCS emulator;
//! - **decode + preprocess alone**: photos per CPU-second of one thread doing only that (decode,
//!   resize, normalise into a batch), on the same photos, and of one such thread per CPU at once:
//!   the ceilings the server's figure is compared with, each measured just before and just after
//!   the server run;
//! - the server's minor page faults per photo;
//! - "decode less": the coarser DCT step's time and cosine to the reference (support/coarse_scale.rs).
//!
//! Photo sets: the real camera photos (Debian wallpapers), and "seed-size" copies of them (the
//! album app's uploads: 1280 px on the long side, baseline JPEG, about 1 MP).
//!
//! Knobs: CLIPFN_BENCH_SECONDS (20 per server run), CLIPFN_BENCH_CLIENTS (4),
//! CLIPFN_BENCH_PHOTOS_PER_REQUEST (40), CLIPFN_BENCH_BATCH (8, the CPU default).
//! Writes `per_core.md` to CLIPFN_BENCH_OUT (default target/bench-report).

#[path = "support/coarse_scale.rs"]
mod coarse_scale;
#[path = "../tests/common/mod.rs"]
mod common;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use clipfn::{
    decode::{DecodeOptions, decode},
    preprocess::{Layout, Pixels, Transform, preprocess},
};
use common::{ServerConfig, camera_photos, gcs_env, setup_var};
use serde_json::json;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Fields of /proc/PID/stat (or, for `thread-self`, this thread's) after the command name, which
/// may hold spaces and is closed by the last ')': field 3 of proc(5) is index 0 here.
fn stat_fields(stat: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(stat).unwrap_or_else(|e| panic!("{stat}: {e}"));
    text[text.rfind(')').unwrap() + 2..].split(' ').map(|f| f.parse().unwrap_or(f64::NAN)).collect()
}

/// CPU seconds used: utime + stime, in USER_HZ (100 on Linux).
fn cpu_seconds(stat: &str) -> f64 {
    let fields = stat_fields(stat);
    (fields[11] + fields[12]) / 100.0
}

/// Minor page faults so far: each is a page the kernel mapped and zeroed on first touch.
fn minor_faults(stat: &str) -> f64 {
    stat_fields(stat)[7]
}

/// Copies of `photos` scaled to 1280 px on the long side and saved as baseline JPEGs.
fn seed_size(photos: &[PathBuf], dir: &Path) -> Vec<PathBuf> {
    let long_side_1280 = |w: u32, h: u32| {
        let scale = 1280.0 / w.max(h) as f32;
        ((w as f32 * scale).round() as u32, (h as f32 * scale).round() as u32)
    };
    common::resized_jpegs(photos, dir, "", 88, long_side_1280)
}

/// Photos per CPU-second of `threads` threads at once, each decoding and preprocessing (resize,
/// then normalise into a batch as the worker lays it out) for about `seconds`: with one thread,
/// the "per core" ceiling; with one per core, the same work with the cores' shared caches,
/// memory bandwidth and clock under full load, as the server has them.
fn decode_alone(photos: &[Vec<u8>], seconds: f64, threads: usize) -> f64 {
    let transform = Transform::clip(224);
    let options = DecodeOptions::for_input(transform.resize_side(), 100_000_000);
    let per_thread: Vec<(usize, f64)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let transform = &transform;
                s.spawn(move || {
                    let mut batch = Pixels::empty(Layout::NormalizedNchw, 3 * 224 * 224);
                    let (start, wall) = (cpu_seconds("/proc/thread-self/stat"), Instant::now());
                    let mut done = 0usize;
                    while wall.elapsed().as_secs_f64() < seconds || done < photos.len() {
                        let decoded = decode(&photos[(t * 7 + done) % photos.len()], &options).unwrap();
                        batch.clear();
                        batch.push(&preprocess(&decoded, transform).unwrap(), transform);
                        std::hint::black_box(&batch);
                        done += 1;
                    }
                    (done, cpu_seconds("/proc/thread-self/stat") - start)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let (done, cpu) = per_thread.iter().fold((0, 0.0), |(n, c), (d, t)| (n + d, c + t));
    done as f64 / cpu
}

/// [`decode_alone`] before and after `between` runs, averaged, so that drift in the machine's
/// speed over the server runs falls on both sides of the ratio alike.
fn decode_alone_around<T>(photos: &[Vec<u8>], seconds: f64, threads: usize, between: impl FnOnce() -> T) -> (f64, T) {
    let before = decode_alone(photos, seconds, threads);
    let result = between();
    ((before + decode_alone(photos, seconds, threads)) / 2.0, result)
}

/// Photos per CPU-second of the server under a closed loop of `clients` for `seconds`, and its
/// images/s; `config` says where the photos are and `keys` name them.
fn server_per_cpu(
    config: ServerConfig,
    keys: &[String],
    clients: usize,
    per_request: usize,
    seconds: f64,
) -> ServerRun {
    let server = config.env("CLIPFN_MAX_IMAGES", &per_request.to_string()).start();
    let request = |offset: usize| {
        let images: Vec<&str> = (0..per_request).map(|i| keys[(offset + i) % keys.len()].as_str()).collect();
        let (status, body) = server.post_json("/v1/embed", &json!({ "images": images }));
        assert_eq!(status, 200, "{body}");
        assert!(body["data"].as_array().unwrap().iter().all(|item| item["embedding"].is_array()), "{body}");
        per_request
    };
    request(0); // the first request of each kind of photo pays for lazy set-up; keep it out
    let stat = format!("/proc/{}/stat", server.pid());
    let (cpu_before, faults_before, started) = (cpu_seconds(&stat), minor_faults(&stat), Instant::now());
    let embedded: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || {
                    let mut sent = 0;
                    while started.elapsed().as_secs_f64() < seconds {
                        sent += request(c * 7 + sent);
                    }
                    sent
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let (cpu, wall) = (cpu_seconds(&stat) - cpu_before, started.elapsed().as_secs_f64());
    let faults = minor_faults(&stat) - faults_before;
    ServerRun {
        per_cpu_second: embedded as f64 / cpu,
        per_second: embedded as f64 / wall,
        faults_per_photo: faults / embedded as f64,
    }
}

struct ServerRun {
    /// Photos embedded per CPU-second the server used.
    per_cpu_second: f64,
    /// Photos embedded per second of wall time.
    per_second: f64,
    /// Minor page faults of the server per photo embedded.
    faults_per_photo: f64,
}

fn main() {
    if std::env::var_os("ORT_DYLIB_PATH").is_none() {
        // SAFETY: first thing in main, before any other thread exists.
        unsafe { std::env::set_var("ORT_DYLIB_PATH", setup_var("ORT_DYLIB_PATH")) };
    }
    let seconds: f64 = env_or("CLIPFN_BENCH_SECONDS", 20.0);
    let clients: usize = env_or("CLIPFN_BENCH_CLIENTS", 4);
    let per_request: usize = env_or("CLIPFN_BENCH_PHOTOS_PER_REQUEST", 40);
    // ServerConfig::local runs batch 8, the CPU default.
    let batch: usize = env_or("CLIPFN_BENCH_BATCH", 8);
    let out = PathBuf::from(env_or("CLIPFN_BENCH_OUT", "target/bench-report".to_string()));
    std::fs::create_dir_all(&out).unwrap();

    let camera = camera_photos(usize::MAX);
    let seed_dir = tempfile::tempdir().unwrap();
    let seed = seed_size(&camera, seed_dir.path());
    let mut md = String::new();
    writeln!(
        md,
        "# Per-core capacity with inference free\n\nMachine: {} CPUs. Model: the test model (about 2 MFLOP per \
         photo). Closed loop: {clients} clients x {per_request} photos per request, {seconds} s per server run. \
         Server batch: {}. Figures are photos per CPU-second: the server's utime + stime; for decode + \
         preprocess alone, one thread's, and that of one thread per CPU running at once (the cores' shared \
         caches, memory bandwidth and clock under full load, as the server has them). Each alone figure is the \
         mean of a run just before and one just after its server run.\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        batch,
    )
    .unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    writeln!(
        md,
        "| photos | store | server photos/CPU-s | alone, 1 thread | server / alone | alone, {cpus} threads at once | server / that | server images/s | server page faults per photo |"
    )
    .unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|").unwrap();
    for (label, photos) in [("camera", &camera), ("seed-size", &seed)] {
        let bytes: Vec<Vec<u8>> = photos.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let mean_mp = photos
            .iter()
            .map(|p| image::image_dimensions(p).map(|(w, h)| f64::from(w * h) / 1e6).unwrap())
            .sum::<f64>()
            / photos.len() as f64;
        let data = tempfile::tempdir().unwrap();
        let bucket = data.path().join("photos");
        std::fs::create_dir_all(&bucket).unwrap();
        let mut keys = Vec::new();
        for photo in photos.iter() {
            let name = photo.file_name().unwrap().to_string_lossy().into_owned();
            std::fs::copy(photo, bucket.join(&name)).unwrap();
            keys.push(name);
        }
        let (_gcs, gcs_port) = common::start_fake_gcs(data.path());
        let local = || ServerConfig::local(&bucket).env("CLIPFN_BATCH_SIZE", &batch.to_string());
        let stores =
            [("file", local()), ("GCS emulator", gcs_env(local(), gcs_port).env("CLIPFN_STORE", "gs://photos"))];
        for (store, config) in stores {
            let (one, (all, run)) = decode_alone_around(&bytes, seconds / 4.0, 1, || {
                decode_alone_around(&bytes, seconds / 4.0, cpus, || {
                    server_per_cpu(config, &keys, clients, per_request, seconds)
                })
            });
            let (per_cpu, rate, faults) = (run.per_cpu_second, run.per_second, run.faults_per_photo);
            eprintln!(
                "{label} ({mean_mp:.1} MP), {store}: server {per_cpu:.0} photos/CPU-s, alone {one:.0} (1 thread), {all:.0} ({cpus} threads), {rate:.0} images/s, {faults:.0} page faults/photo"
            );
            writeln!(
                md,
                "| {label} ({} photos, mean {mean_mp:.1} MP) | {store} | {per_cpu:.0} | {one:.0} | {:.2} | {all:.0} | {:.2} | {rate:.0} | {faults:.0} |",
                photos.len(),
                per_cpu / one,
                per_cpu / all
            )
            .unwrap();
        }
    }
    coarse_scale::write(&mut md, &coarse_scale::measure(&camera)).unwrap();
    std::fs::write(out.join("per_core.md"), &md).unwrap();
    println!("{md}");
}
