//! What the album's time and place cost a photo: `cargo bench --bench exif` (after
//! `tools/setup.sh`). Issue 37 allows reading EXIF at most 2% of a photo's CPU.
//!
//! On one thread, in turns (so that the machine's drift falls on both sides of the ratios), over
//! the camera photos that carry EXIF: the CPU a photo's decode and preprocess take as the server
//! does them (`preprocess::decode_square`: decode at the DCT scale, orientation and metadata,
//! resize, crop); the CPU of the metadata step alone (finding the JPEG's EXIF block and parsing
//! it: `decode::jpeg_exif`, `decode::metadata::from_exif`); and the album's groupings over 100
//! photos (events, bursts, duplicate groups, each group's best shot and the cover: `album`), a
//! photo's share of them. CPU is the thread's own (`CLOCK_THREAD_CPUTIME_ID`), so other processes
//! do not count. Writes `exif.md` to CLIPFN_BENCH_OUT (default target/bench-report). Knob:
//! CLIPFN_BENCH_ROUNDS (9).

#[path = "../tests/it/common/mod.rs"]
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
    album::{Merits, Shot, Timed, bursts, cover, duplicate_groups, events, ranked},
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

/// Photos in the album whose groupings are timed.
const ALBUM: usize = 100;

/// An album of [`ALBUM`] photos as the groupings see it: two days of shots in runs of five 1.5 s
/// apart (bursts, where each frame's 512-d embedding stays close to the last), every run a few
/// kilometres on, every fifth photo a near-copy of the one before (a duplicate).
struct Album {
    timed: Vec<Timed>,
    embeddings: Vec<Vec<f32>>,
    hashes: Vec<Option<u64>>,
    merits: Vec<Option<Merits>>,
}

fn album() -> Album {
    let mut rng = fastrand::Rng::with_seed(37);
    let mut embedding: Vec<f32> = vec![0.0; 512];
    let (mut timed, mut embeddings, mut merits) = (Vec::new(), Vec::new(), Vec::new());
    let mut hashes: Vec<Option<u64>> = Vec::new();
    for index in 0..ALBUM {
        let (run, frame) = (index / 5, index % 5);
        if frame == 0 {
            embedding = (0..512).map(|_| rng.f32() - 0.5).collect();
        }
        embedding.iter_mut().for_each(|x| *x += (rng.f32() - 0.5) * 0.05);
        let norm = embedding.iter().map(|x| x * x).sum::<f32>().sqrt();
        embeddings.push(embedding.iter().map(|x| x / norm).collect());
        let at_ms = (run as i64) * 1_800_000 + (index as i64 / 50) * 86_400_000 + frame as i64 * 1_500;
        let place = Some((48.85 + run as f64 * 0.03, 2.35));
        timed.push(Timed { index, at_ms, instant_ms: Some(at_ms - 7_200_000), place });
        hashes.push(Some(if frame == 4 { hashes[index - 1].unwrap() ^ 0b101 } else { rng.u64(..) }));
        let pixels = 12_000_000 - (index as u64 % 3) * 4_000_000;
        let sharpness = rng.f64() * 900.0;
        merits.push(Some(Merits {
            blurry: index % 7 == 0,
            faces_cut: Some(0),
            head: None,
            sharpness: [sharpness, sharpness * 0.8, sharpness * 0.6],
            pixels,
            long_side: 4_000 - (index as u32 % 3) * 1_000,
            jpeg_quality: Some(90),
        }));
    }
    Album { timed, embeddings, hashes, merits }
}

/// The album's groupings, as `/v1/analyze` runs them at the defaults: (events, bursts, duplicate
/// groups, the cover).
fn groupings(album: &Album) -> (usize, usize, usize, Option<usize>) {
    let found = events(&album.timed, 10_800_000, 25_000.0);
    let shots: Vec<Shot> =
        album.timed.iter().map(|t| Shot { time: *t, embedding: &album.embeddings[t.index] }).collect();
    let bursts = ranked(bursts(&shots, 2_000, 0.9), &album.merits);
    let duplicates = ranked(duplicate_groups(&album.hashes, 6), &album.merits);
    let best = cover(&album.merits, &[&duplicates, &bursts]);
    (found.len(), bursts.len(), duplicates.len(), best)
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
    let album = album();
    let (events, bursts, duplicates, cover) = groupings(&album);
    assert!(events >= 2 && bursts >= 10 && duplicates >= 10 && cover.is_some(), "{events} {bursts} {duplicates}");
    let (mut decode, mut exif, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut grouped, mut album_ratios) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let whole = per_photo(&photos, 1, |bytes| {
            std::hint::black_box(decode_square(bytes, &transform, 100_000_000).unwrap());
        });
        // The metadata step takes microseconds: many passes for a reading well above the clock's grain.
        let metadata = per_photo(&photos, 200, |bytes| {
            std::hint::black_box(jpeg_exif(bytes).map(from_exif));
        });
        let start = thread_cpu();
        (0..200).for_each(|_| {
            std::hint::black_box(groupings(&album));
        });
        let a_photo = (thread_cpu() - start) / (200 * ALBUM) as f64;
        ratios.push(metadata / whole);
        album_ratios.push(a_photo / whole);
        decode.push(whole);
        exif.push(metadata);
        grouped.push(a_photo);
    }
    let range = |ratios: &[f64]| ratios.iter().fold((f64::MAX, 0.0f64), |(l, h), &r| (l.min(r), h.max(r)));
    let ((low, high), (album_low, album_high)) = (range(&ratios), range(&album_ratios));
    let mut md = String::new();
    writeln!(
        md,
        "# The album's time and place: their share of a photo's CPU\n\n`cargo bench --bench exif`: {} camera photos that carry \
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
    writeln!(
        md,
        "\nThe album's groupings over {ALBUM} photos with times, places and 512-d embeddings (two days of runs of five \
         shots 1.5 s apart, every fifth a near-copy: {events} events, {bursts} bursts, {duplicates} duplicate groups), \
         as `/v1/analyze` runs them at the defaults: events, bursts, duplicate groups, each group's best shot, the \
         cover. Per photo, against the same decode + preprocess.\n\n\
         | groupings µs/photo | groupings / decode + preprocess | range |\n|---|---|---|\n| {:.2} | {:.3}% | \
         {:.3}-{:.3}% |",
        median(grouped) * 1e6,
        median(album_ratios) * 100.0,
        album_low * 100.0,
        album_high * 100.0,
    )
    .unwrap();
    print!("{md}");
    std::fs::write(knobs::out_dir().unwrap().join("exif.md"), md).unwrap();
}
