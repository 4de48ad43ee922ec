//! The bench's cold-start and memory checks (issue 13): the release server started from nothing
//! until its first answer, beside Python ONNX Runtime's session creation and warm-up runs on the
//! same model in the same run, and the server's peak RSS against Immich's figure.

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::common::{self, ServerConfig, setup_var};

/// Immich's ML server with the same ViT-B/32 weights (issue 13), bytes.
pub const IMMICH_PEAK_RSS: f64 = 0.72e9;

/// One start of the release server, until its first answer.
pub struct Start {
    pub ready_s: f64,
    pub first_response_s: f64,
    /// The "model loaded and warmed up" log line's fields.
    pub log: Value,
}

impl Start {
    pub fn ms(&self, field: &str) -> f64 {
        self.log[field].as_f64().unwrap_or(f64::NAN)
    }
}

/// Python ONNX Runtime in a fresh process: session creation and the warm-up runs
/// (tools/coldstart_reference.py).
pub struct Reference {
    pub library_s: f64,
    pub session_and_runs_s: f64,
    pub peak_rss: f64,
}

/// Starts `clipfn serve` on `model`, waits for /readyz 200, sends one request of one photo (from a
/// file store holding `photo`), and stops it.
pub fn start_once(model: &str, provider: &str, batch: usize, photo: &Path, log: &Path) -> anyhow::Result<Start> {
    let store = photo.parent().expect("a photo in a folder");
    let key = photo.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let started = Instant::now();
    let config = ServerConfig { wait_ready: false, ..ServerConfig::local(store) }
        .env("CLIPFN_MODEL", model)
        .env("CLIPFN_PROVIDER", provider)
        .env("CLIPFN_BATCH_SIZE", &batch.to_string())
        .env("CLIPFN_LOG_FORMAT", "json")
        .env("LD_LIBRARY_PATH", &std::env::var("LD_LIBRARY_PATH").unwrap_or_default())
        .stderr_to(log);
    let mut server = config.start();
    let client = common::blocking_client();
    // Polled often: the poll interval is part of what is measured.
    while !client.get(format!("{}/readyz", server.base)).send().is_ok_and(|r| r.status() == 200) {
        anyhow::ensure!(server.proc.0.try_wait()?.is_none(), "clipfn exited before it was ready");
        anyhow::ensure!(started.elapsed() < Duration::from_secs(300), "clipfn not ready within 300 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let ready_s = started.elapsed().as_secs_f64();
    let (status, body) = server.embed(&[&key]);
    anyhow::ensure!(status == 200 && common::item(&body, 0).is_ok(), "first request failed: {status} {body}");
    let first_response_s = started.elapsed().as_secs_f64();
    drop(server);
    let log = std::fs::read_to_string(log)?
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["message"] == "model loaded and warmed up")
        .ok_or_else(|| anyhow::anyhow!("no 'model loaded and warmed up' line in {}", log.display()))?;
    Ok(Start { ready_s, first_response_s, log })
}

/// Runs tools/coldstart_reference.py once on `model` at the warm-up `batches`.
pub fn reference(model: &str, provider: &str, batches: &[usize]) -> anyhow::Result<Reference> {
    let batches: Vec<String> = batches.iter().map(usize::to_string).collect();
    let output = Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(common::repo().join("tools/coldstart_reference.py"))
        .args(["--model", model, "--provider", provider, "--batches", &batches.join(",")])
        .env("LD_LIBRARY_PATH", std::env::var("LD_LIBRARY_PATH").unwrap_or_default())
        .output()?;
    anyhow::ensure!(output.status.success(), "coldstart_reference.py: {}", String::from_utf8_lossy(&output.stderr));
    let json: Value = serde_json::from_slice(&output.stdout)?;
    let number = |k: &str| json[k].as_f64().unwrap_or(f64::NAN);
    Ok(Reference {
        library_s: number("library_s"),
        session_and_runs_s: number("session_and_runs_s"),
        peak_rss: number("peak_rss_bytes"),
    })
}
