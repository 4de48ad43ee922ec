//! What OCR costs a photo: `cargo bench --bench ocr` (issue 36's goal: clipfn's OCR at no more than
//! 0.7 of RapidOCR's CPU a photo, for the same text).
//!
//! The real binary with PP-OCRv4's real weights (CLIPFN_OCR_MODEL) answers `/v1/analyze` on
//! tools/ocr_photos.py's photos (with text, and one without), a client at a time, PER_REQUEST photos
//! a request, with `"ocr": false` and with OCR in turns; its CPU seconds (utime + stime, /proc) a
//! photo each way, the difference being OCR's. Between them, RapidOCR 1.4.4's own pipeline
//! (tools/ocr_bench.py, .cache/venv-rapidocr) on the same photos, its detector sized as clipfn's, on
//! the same ONNX Runtime threads: its process CPU seconds a photo, the photos decoded beforehand.
//! Also the worker's seconds in the three OCR stages (`clipfn_stage_duration_seconds`), lines a
//! photo and the server's peak RSS. Writes ocr.md to CLIPFN_BENCH_OUT. Knobs: CLIPFN_BENCH_ROUNDS
//! (5), CLIPFN_BENCH_SECONDS (a phase, 6), CLIPFN_BENCH_THREADS (ONNX Runtime's intra-op threads on
//! both sides; default: the CPUs).

#[path = "../tests/it/common/mod.rs"]
mod common;
#[path = "support/cpu.rs"]
#[allow(dead_code)] // not its thread_cpu or minor_faults
mod cpu;
#[path = "support/knobs.rs"]
mod knobs;
#[path = "support/stats.rs"]
#[allow(dead_code)] // only its median
mod stats;

use std::{fmt::Write as _, path::PathBuf, process::Command, time::Instant};

use common::{Server, ServerConfig, file_name, repo, setup_var, store_named};
use cpu::cpu_seconds;
use knobs::env_or;
use serde_json::{Value, json};
use stats::median;

const PHOTOS: [&str; 8] =
    ["sign.jpg", "colours.png", "tilt.jpg", "upside.jpg", "big.jpg", "exif.jpg", "page.png", "notext.jpg"];
const PER_REQUEST: usize = 4;
const STAGES: [&str; 3] = ["text_detection", "line_classification", "text_recognition"];

/// Photos and CPU seconds of one side of a comparison, with the lines read.
#[derive(Default, Clone, Copy)]
struct Cost {
    photos: f64,
    cpu: f64,
    lines: f64,
}

impl Cost {
    fn ms_a_photo(self) -> f64 {
        self.cpu * 1000.0 / self.photos
    }
}

/// The server's cost for `seconds` of requests, OCR on or off.
fn phase(server: &Server, keys: &[&str], ocr: bool, seconds: f64) -> Cost {
    let stat = format!("/proc/{}/stat", server.pid());
    let (before, started) = (cpu_seconds(&stat), Instant::now());
    let mut cost = Cost::default();
    while started.elapsed().as_secs_f64() < seconds {
        let at = cost.photos as usize;
        let images: Vec<&str> = (0..PER_REQUEST).map(|i| keys[(at + i) % keys.len()]).collect();
        let (status, body) =
            server.post_json("/v1/analyze", &json!({ "images": images, "embedding": false, "ocr": ocr }));
        assert_eq!(status, 200, "{body}");
        let items = body["data"].as_array().unwrap();
        assert!(items.iter().all(|item| item.get("error").is_none()), "{body}");
        cost.photos += images.len() as f64;
        cost.lines += items.iter().filter_map(|item| item["ocr"].as_array()).map(Vec::len).sum::<usize>() as f64;
    }
    cost.cpu = cpu_seconds(&stat) - before;
    cost
}

/// RapidOCR's own pipeline for `seconds` on `photos`.
fn rapidocr(photos: &[PathBuf], threads: usize, seconds: f64) -> Cost {
    let output = Command::new(setup_var("CLIPFN_TEST_OCR_PYTHON"))
        .arg(repo().join("tools/ocr_bench.py"))
        .args(["--seconds", &seconds.to_string(), "--threads", &threads.to_string()])
        .args(photos)
        .output()
        .expect("running tools/ocr_bench.py");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let run: Value = serde_json::from_slice(&output.stdout).unwrap();
    let number = |key: &str| run[key].as_f64().unwrap();
    Cost { photos: number("photos"), cpu: number("cpu_s"), lines: number("lines") }
}

/// The worker's seconds so far in each OCR stage.
fn stage_seconds(server: &Server) -> [f64; 3] {
    let metrics = common::scrape(server);
    STAGES.map(|stage| common::series(&metrics, "clipfn_stage_duration_seconds_sum", &[("stage", stage)]))
}

fn main() -> std::io::Result<()> {
    // SAFETY: first thing in main, before any other thread exists.
    unsafe { knobs::set_ort_dylib_path() };
    let rounds: usize = env_or("CLIPFN_BENCH_ROUNDS", 5);
    let seconds: f64 = env_or("CLIPFN_BENCH_SECONDS", 6.0);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: usize = env_or("CLIPFN_BENCH_THREADS", cpus);
    let folder = PathBuf::from(setup_var("CLIPFN_TEST_OCR_PHOTOS"));
    let photos: Vec<PathBuf> = PHOTOS.iter().map(|name| folder.join(name)).collect();
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_OCR_MODEL", &setup_var("CLIPFN_TEST_OCR"))
        .env("CLIPFN_INTRA_THREADS", &threads.to_string())
        .start();
    // Every photo once each way first: the sessions' first runs of each shape.
    phase(&server, &keys, false, 0.0);
    for at in (0..keys.len()).step_by(PER_REQUEST) {
        let images: Vec<&str> = keys.iter().cycle().skip(at).take(PER_REQUEST).copied().collect();
        assert_eq!(server.post_json("/v1/analyze", &json!({ "images": images })).0, 200);
    }
    let stages_before = stage_seconds(&server);
    let (mut without, mut with, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // In turns, so that the machine's drift falls on every side alike.
        let (a, b) = (phase(&server, &keys, false, seconds / 2.0), phase(&server, &keys, true, seconds));
        let r = rapidocr(&photos, threads, seconds);
        let c = phase(&server, &keys, false, seconds / 2.0);
        let plain = Cost { photos: a.photos + c.photos, cpu: a.cpu + c.cpu, lines: 0.0 };
        eprintln!(
            "round {round}: analyze {:.0} ms a photo, with OCR {:.0}, RapidOCR {:.0}",
            plain.ms_a_photo(),
            b.ms_a_photo(),
            r.ms_a_photo()
        );
        without.push(plain);
        with.push(b);
        theirs.push(r);
    }
    let stages = stage_seconds(&server);
    let rss = common::status_bytes(&server.pid().to_string(), "VmHWM") / 1048576.0;
    let med = |costs: &[Cost]| median(costs.iter().map(|c| c.ms_a_photo()).collect());
    let ocr_share: Vec<f64> = with.iter().zip(&without).map(|(w, p)| w.ms_a_photo() - p.ms_a_photo()).collect();
    let ratios: Vec<f64> = ocr_share.iter().zip(&theirs).map(|(ours, r)| ours / r.ms_a_photo()).collect();
    let photos_with: f64 = with.iter().map(|c| c.photos).sum();
    let lines =
        |costs: &[Cost]| costs.iter().map(|c| c.lines).sum::<f64>() / costs.iter().map(|c| c.photos).sum::<f64>();
    let stage_ms: Vec<f64> = stages.iter().zip(stages_before).map(|(s, b)| (s - b) * 1000.0 / photos_with).collect();

    let mut report = String::new();
    writeln!(
        report,
        "# OCR's cost\n\n`cargo bench --bench ocr`: {rounds} rounds of {seconds} s with OCR, in turns with as long \
         without and with RapidOCR's pipeline, on {} photos (tools/ocr_photos.py), {PER_REQUEST} a request, one \
         client, ONNX Runtime on {threads} intra-op threads on both sides, on {cpus} CPUs. Medians over the rounds.\n",
        PHOTOS.len()
    )
    .unwrap();
    writeln!(report, "| | CPU ms a photo |\n| --- | --- |").unwrap();
    writeln!(report, "| `/v1/analyze`, `\"ocr\": false` | {:.0} |", med(&without)).unwrap();
    writeln!(report, "| `/v1/analyze` with OCR | {:.0} |", med(&with)).unwrap();
    writeln!(report, "| OCR's share (the difference) | {:.0} |", median(ocr_share.clone())).unwrap();
    writeln!(report, "| RapidOCR 1.4.4's pipeline, photos decoded beforehand | {:.0} |", med(&theirs)).unwrap();
    writeln!(report, "| **OCR's share / RapidOCR's** (goal at most 0.7) | **{:.2}** |\n", median(ratios.clone()))
        .unwrap();
    writeln!(
        report,
        "The worker's wall ms a photo in the OCR stages: text detection {:.0}, line classification {:.1}, text \
         recognition {:.1}. Lines a photo: clipfn {:.2}, RapidOCR {:.2}. The server's peak RSS: {rss:.0} MiB.\n\nPer \
         round, OCR's share / RapidOCR's: {}.",
        stage_ms[0],
        stage_ms[1],
        stage_ms[2],
        lines(&with),
        lines(&theirs),
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ")
    )
    .unwrap();
    print!("{report}");
    std::fs::write(knobs::out_dir()?.join("ocr.md"), report)
}
