//! Immich's protocol under load: `cargo bench --bench immich` (after `tools/setup.sh`; with
//! `--bench`, on the ViT-B/32-architecture model).
//!
//! Immich sends one photo per `/predict` request, from its job queue, at its smart-search
//! concurrency (2 by default; users raise it). On one release server, the same photos and model:
//! 1. the baseline: `/v1/embed` with 40 photos a request, a closed loop of 2 clients;
//! 2. `/predict` (Immich's multipart form, one photo each) in closed loops of 2, 8 and 32 clients.
//!
//! Each is run CLIPFN_BENCH_RUNS times (3) for CLIPFN_BENCH_SECONDS (20) after a warm-up, and the
//! median run is reported: images/s, p50 and p95 latency, and `/predict`'s images/s as a ratio of
//! the baseline's in the same run. The goal: at 8 clients, at least 0.9 of the baseline, so that
//! the form's parsing and the per-request overhead are not what limits Immich's throughput; the
//! cross-request batcher fills the batches from the single photos.
//!
//! It writes `immich.md` to CLIPFN_BENCH_OUT (default target/bench-report).

#[path = "../tests/it/common/mod.rs"]
mod common;
#[path = "support/knobs.rs"]
mod knobs;
#[path = "support/stats.rs"]
mod stats;

use std::{
    fmt::Write,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use common::{ServerConfig, camera_photos, file_name, immich, setup_var, store_named};
use knobs::env_or;
use serde_json::{Value, json};
use stats::{median, percentile};

/// What one closed loop gave.
struct Run {
    images: usize,
    errors: usize,
    seconds: f64,
    latencies_s: Vec<f64>,
}

impl Run {
    fn images_per_s(&self) -> f64 {
        self.images as f64 / self.seconds
    }

    fn latency(&self, q: f64) -> f64 {
        let mut sorted = self.latencies_s.clone();
        sorted.sort_by(f64::total_cmp);
        percentile(&sorted, q)
    }
}

/// A request the loops send: `/v1/embed` with these keys, or `/predict` with this photo.
#[derive(Clone)]
enum Request {
    Embed(Vec<String>),
    Predict(Arc<Vec<u8>>),
}

/// `clients` loops, each sending the next of `requests` (round robin from its own start) as soon as
/// the last is answered, for `secs`.
async fn closed_loop(base: &str, requests: Arc<Vec<Request>>, clients: usize, secs: f64) -> Run {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(300)).no_proxy().build().unwrap();
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(secs);
    let loops: Vec<_> = (0..clients)
        .map(|c| {
            let (client, requests, base) = (client.clone(), Arc::clone(&requests), base.to_string());
            tokio::spawn(async move {
                let mut run = Run { images: 0, errors: 0, seconds: 0.0, latencies_s: Vec::new() };
                let mut next = c * requests.len() / clients;
                while Instant::now() < until {
                    let t = Instant::now();
                    let (ok, n) = send(&client, &base, &requests[next % requests.len()]).await;
                    run.latencies_s.push(t.elapsed().as_secs_f64());
                    if ok {
                        run.images += n
                    } else {
                        run.errors += n
                    }
                    next += 1;
                }
                run
            })
        })
        .collect();
    let mut total = Run { images: 0, errors: 0, seconds: 0.0, latencies_s: Vec::new() };
    for each in loops {
        let run = each.await.unwrap();
        total.images += run.images;
        total.errors += run.errors;
        total.latencies_s.extend(run.latencies_s);
    }
    total.seconds = start.elapsed().as_secs_f64();
    total
}

/// Sends one request: whether every photo in it was embedded, and how many photos it held.
async fn send(client: &reqwest::Client, base: &str, request: &Request) -> (bool, usize) {
    match request {
        Request::Embed(keys) => {
            let response = client.post(format!("{base}/v1/embed")).json(&json!({"images": keys})).send().await;
            let body = match response {
                Ok(r) if r.status() == 200 => r.json::<Value>().await.ok(),
                _ => None,
            };
            let embedded =
                body.and_then(|b| b["data"].as_array().map(|d| d.iter().all(|i| i.get("embedding").is_some())));
            (embedded == Some(true), keys.len())
        }
        Request::Predict(photo) => {
            let response = client
                .post(format!("{base}/predict"))
                .header("content-type", immich::content_type())
                .body(immich::visual_form(photo))
                .send()
                .await;
            let body = match response {
                Ok(r) if r.status() == 200 => r.json::<Value>().await.ok(),
                _ => None,
            };
            (body.is_some_and(|b| b["clip"].is_string()), 1)
        }
    }
}

fn main() -> anyhow::Result<()> {
    // SAFETY: first thing in main, before any other thread exists.
    unsafe { knobs::set_ort_dylib_path() };
    let runs: usize = env_or("CLIPFN_BENCH_RUNS", 3);
    let secs: f64 = env_or("CLIPFN_BENCH_SECONDS", 20.0);
    let model =
        std::env::var("CLIPFN_BENCH_MODEL").ok().or_else(|| common::setup_env().get("CLIPFN_BENCH_MODEL").cloned());
    let model = model.filter(|m| Path::new(m).is_file()).unwrap_or_else(|| setup_var("CLIPFN_TEST_MODEL"));
    let photos = camera_photos(usize::MAX);
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_MODEL", &model)
        .env("CLIPFN_REQUEST_TIMEOUT_MS", "600000")
        .env("CLIPFN_MAX_QUEUED_IMAGES", "4096")
        .start();
    let runtime = tokio::runtime::Runtime::new()?;
    let keys: Vec<String> = photos.iter().map(|p| file_name(p).to_string()).collect();
    // 40 photos a request, drawn round robin from the photos.
    let embed: Vec<Request> = (0..keys.len())
        .map(|i| Request::Embed((0..40).map(|j| keys[(i + j) % keys.len()].clone()).collect()))
        .collect();
    let predict: Vec<Request> =
        photos.iter().map(|p| Ok(Request::Predict(Arc::new(std::fs::read(p)?)))).collect::<std::io::Result<_>>()?;
    let (embed, predict) = (Arc::new(embed), Arc::new(predict));
    eprintln!("immich bench: {} photos, model {model}, {runs} runs of {secs} s each", photos.len());
    runtime.block_on(closed_loop(&server.base, Arc::clone(&embed), 2, secs.min(5.0))); // warm-up
    let mut rows: Vec<(String, Vec<Run>)> = Vec::new();
    let shapes = [("/v1/embed, 40 photos a request", 2, &embed), ("/predict, 1 photo a request", 2, &predict)];
    let more = [("/predict, 1 photo a request", 8, &predict), ("/predict, 1 photo a request", 32, &predict)];
    for (name, clients, requests) in shapes.into_iter().chain(more) {
        let runs: Vec<Run> = (0..runs)
            .map(|i| {
                eprintln!("immich bench: {name}, {clients} clients, run {}", i + 1);
                runtime.block_on(closed_loop(&server.base, Arc::clone(requests), clients, secs))
            })
            .collect();
        rows.push((format!("{name} | {clients}"), runs));
    }
    let report = report(&model, &photos, secs, &rows);
    let out = knobs::out_dir()?.join("immich.md");
    std::fs::write(&out, &report)?;
    println!("{report}\nwritten to {}", out.display());
    Ok(())
}

/// The median run (by images/s) of each shape, and `/predict`'s ratio to the baseline.
fn report(model: &str, photos: &[PathBuf], secs: f64, rows: &[(String, Vec<Run>)]) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut md = String::from("# Immich's protocol under load (`cargo bench --bench immich`)\n\n");
    let _ = writeln!(
        md,
        "{} camera photos, model `{}`, CPU ({cores} cores); closed loops, median of {} runs of {secs} s each.\n",
        photos.len(),
        file_name(Path::new(model)),
        rows[0].1.len()
    );
    md.push_str(
        "| shape | clients | images/s | p50 s | p95 s | errors | of the baseline |\n|---|---|---|---|---|---|---|\n",
    );
    let baseline = median(rows[0].1.iter().map(Run::images_per_s).collect());
    for (name, runs) in rows {
        let rate = median(runs.iter().map(Run::images_per_s).collect());
        let run = runs
            .iter()
            .min_by(|a, b| (a.images_per_s() - rate).abs().total_cmp(&(b.images_per_s() - rate).abs()))
            .unwrap();
        let errors: usize = runs.iter().map(|r| r.errors).sum();
        let _ = writeln!(
            md,
            "| {name} | {rate:.2} | {:.3} | {:.3} | {errors} | {:.2} |",
            run.latency(0.5),
            run.latency(0.95),
            rate / baseline
        );
    }
    md
}
