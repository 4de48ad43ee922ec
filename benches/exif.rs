//! What reading the capture time and place costs a photo: `cargo bench --bench exif` (after
//! `tools/setup.sh`). Issue 37 allows at most 2% of a photo's CPU.
//!
//! On one thread, in turns (so that the machine's drift falls on both sides of the ratio), over
//! the camera photos that carry EXIF: the CPU a photo's decode and preprocess take as the server
//! does them (`preprocess::decode_square`: decode at the DCT scale, orientation and metadata,
//! resize, crop), and the CPU of the metadata step alone (finding the JPEG's EXIF block and
//! parsing it: `decode::jpeg_exif`, `decode::metadata::from_exif`). CPU is the thread's own
//! (`CLOCK_THREAD_CPUTIME_ID`), so other processes do not count. Writes `exif.md` to
//! CLIPFN_BENCH_OUT (default target/bench-report). Knob: CLIPFN_BENCH_ROUNDS (9).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/cpu.rs"]
#[allow(dead_code)] // only its thread_cpu
mod cpu;
#[allow(dead_code)] // only its env_or and out_dir: this bench runs no model
#[path = "support/knobs.rs"]
mod knobs;
#[path = "support/stats.rs"]
#[allow(dead_code)] // only its median
mod stats;

use std::fmt::Write as _;

use clipfn::{
    decode::{jpeg_exif, metadata::from_exif},
    preprocess::{Transform, decode_square},
};
use common::camera_photos;
use cpu::thread_cpu;
use knobs::env_or;
use stats::median;

/// CPU seconds per call of `work` over `photos`, each photo `times` times.
fn per_photo(photos: &[Vec<u8>], times: usize, mut work: impl FnMut(&[u8])) -> f64 {
    let start = thread_cpu();
    for _ in 0..times {
        photos.iter().for_each(|bytes| work(bytes));
    }
    (thread_cpu() - start) / (times * photos.len()) as f64
}

fn main() {
    let rounds: usize = env_or("CLIPFN_BENCH_ROUNDS", 9);
    let photos: Vec<Vec<u8>> = camera_photos(usize::MAX)
        .iter()
        .map(|path| std::fs::read(path).unwrap())
        .filter(|bytes| jpeg_exif(bytes).is_some_and(|block| from_exif(block).taken_at.is_some()))
        .collect();
    assert!(!photos.is_empty(), "no camera photo with an EXIF capture time");
    let transform = Transform::clip(224);
    let (mut decode, mut exif, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let whole = per_photo(&photos, 1, |bytes| {
            std::hint::black_box(decode_square(bytes, &transform, 100_000_000).unwrap());
        });
        // The metadata step takes microseconds: many passes for a reading well above the clock's grain.
        let metadata = per_photo(&photos, 200, |bytes| {
            std::hint::black_box(jpeg_exif(bytes).map(from_exif));
        });
        ratios.push(metadata / whole);
        decode.push(whole);
        exif.push(metadata);
    }
    let (low, high) = ratios.iter().fold((f64::MAX, 0.0f64), |(l, h), &r| (l.min(r), h.max(r)));
    let mut md = String::new();
    writeln!(
        md,
        "# Reading EXIF: its share of a photo's CPU\n\n`cargo bench --bench exif`: {} camera photos that carry \
         an EXIF capture time (Debian's wallpapers), one thread, {rounds} rounds in turns; the thread's own CPU \
         time. Decode + preprocess as the server does them (`decode_square`: DCT-scaled decode, orientation and \
         metadata, resize, crop) against the metadata step alone (find the EXIF block, parse it: \
         `jpeg_exif` + `from_exif`). Medians, and the ratio's range over the rounds.\n\n\
         | decode + preprocess ms/photo | metadata µs/photo | metadata / decode + preprocess | range |\n\
         |---|---|---|---|\n| {:.2} | {:.1} | {:.3}% | {:.3}-{:.3}% |",
        photos.len(),
        median(decode) * 1e3,
        median(exif) * 1e6,
        median(ratios) * 100.0,
        low * 100.0,
        high * 100.0,
    )
    .unwrap();
    print!("{md}");
    std::fs::write(knobs::out_dir().unwrap().join("exif.md"), md).unwrap();
}
