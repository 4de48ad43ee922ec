//! Sections 3 and 4's loopback pieces: the photos copied into the GCS emulator's bucket, the load
//! generator (`load`: clients in loops, their requests, images and latencies), a precision's
//! server under it (`precision_run`), and the batch sizes the server ran, from /metrics.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    common::{self, ServerConfig},
    stats::percentile,
};

#[derive(Default)]
pub struct LoadResult {
    pub requests: usize,
    pub images: usize,
    pub errors: usize,
    pub seconds: f64,
    pub latencies_s: Vec<f64>,
}

impl LoadResult {
    pub fn row(&self, name: &str) -> String {
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
pub async fn load(
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

pub struct PrecisionRun {
    pub precision: String,
    pub file: String,
    pub load: LoadResult,
    pub peak_rss_mib: f64,
    pub embeddings: Vec<Vec<f32>>,
}

/// Serves the model folder at `precision`, embeds every photo once (for the cosine to fp32), then
/// runs the closed loop; the peak RSS is the server process's high-water mark (VmHWM).
pub fn precision_run(
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
pub fn batch_fill(base: &str) -> Vec<(String, u64)> {
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

pub fn seed_gcs(photos: &[PathBuf], data: &Path) -> Vec<String> {
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
