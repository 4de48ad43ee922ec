//! The bench's cold-start and memory checks (issue 13): the release server started from nothing
//! until its first answer, beside Python ONNX Runtime's session creation and warm-up runs on the
//! same model in the same run, and the server's peak RSS against Immich's figure; and the report's
//! sections 7 (cold start) and 8 (memory) from them.

use std::{
    fmt::Write as _,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    common::{self, ServerConfig, setup_var},
    stats::median,
};

/// Starts of the server measured, each beside one run of the Python reference.
pub const COLD_STARTS: usize = 5;

/// Immich's ML server with the same ViT-B/32 weights (issue 13), bytes.
pub const IMMICH_PEAK_RSS: f64 = 0.72e9;

/// The starts and the Python reference runs beside them.
pub struct ColdStarts {
    pub starts: Vec<Start>,
    pub references: Vec<Reference>,
}

/// [`COLD_STARTS`] starts of the server on `model` (each logging to `out/cold-start-N.log`), each
/// beside the Python reference at the warm-up batches, so that both see the same machine load.
pub fn measure(
    model: &str,
    provider: &str,
    batch: usize,
    warm_up_batches: [usize; 2],
    photo: &Path,
    out: &Path,
) -> anyhow::Result<ColdStarts> {
    let mut starts = Vec::new();
    let mut references = Vec::new();
    for run in 0..COLD_STARTS {
        let log = out.join(format!("cold-start-{run}.log"));
        starts.push(start_once(model, provider, batch, photo, &log)?);
        references.push(reference(model, provider, &warm_up_batches)?);
        eprintln!(
            "cold start {run}: ready {:.2} s, Python ORT session + warm-up {:.2} s",
            starts[run].ready_s, references[run].session_and_runs_s
        );
    }
    Ok(ColdStarts { starts, references })
}

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

/// Sections 7 (cold start and its breakdown) and 8 (memory) of the report, with their goals.
pub fn write(
    md: &mut String,
    ColdStarts { starts, references }: &ColdStarts,
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
    writeln!(md, "| Immich's ML server, same weights (issue 13) | {:.2} |", IMMICH_PEAK_RSS / 1e9)?;
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
        IMMICH_PEAK_RSS / 1e9,
        peak_rss / IMMICH_PEAK_RSS
    )?;
    Ok(())
}
