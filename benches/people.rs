//! What the app's known people cost an album: `cargo bench --bench people`. Issue 38 allows 5 ms of
//! CPU for 1,000 known people of 5 exemplars each against an album of 100 photos.
//!
//! On one thread, in turns, the thread's own CPU: `album::people` over an album's faces (2 a
//! photo, random unit vectors: none is a known person's, so every exemplar is looked at and the
//! clustering is the same on both sides) with no known people and with the known ones, at dlib's
//! 128 and ArcFace's 512 values a face; and what reading the request's `known_people` JSON
//! costs (serde_json into vectors, as the API reads it). Writes `people.md` to CLIPFN_BENCH_OUT
//! (default target/bench-report). Knobs: CLIPFN_BENCH_ROUNDS (9), CLIPFN_BENCH_KNOWN (1000),
//! CLIPFN_BENCH_PHOTOS (100).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/cpu.rs"]
#[allow(dead_code)] // only its thread_cpu
mod cpu;
#[path = "support/knobs.rs"]
#[allow(dead_code)] // only its env_or and out_dir: this bench runs no model
mod knobs;
#[path = "support/stats.rs"]
#[allow(dead_code)] // only its median
mod stats;

use std::fmt::Write as _;

use clipfn::album::{Known, Rules, people};
use cpu::thread_cpu;
use knobs::env_or;
use stats::median;

/// EXEMPLARS a known person, as CLIPFN_PERSON_EXEMPLARS gives them.
const EXEMPLARS: usize = 5;
const FACES_A_PHOTO: usize = 2;

fn unit(rng: &mut fastrand::Rng, dim: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..dim).map(|_| rng.f32() - 0.5).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

/// CPU seconds of one call of `work`, the median of `rounds` (each a run of `times` calls).
fn cpu_of(rounds: usize, times: usize, mut work: impl FnMut()) -> f64 {
    median(
        (0..rounds)
            .map(|_| {
                let start = thread_cpu();
                (0..times).for_each(|_| work());
                (thread_cpu() - start) / times as f64
            })
            .collect(),
    )
}

/// A `known_people` entry as the API reads it; the bench keeps only the time it takes.
#[allow(dead_code)]
#[derive(serde::Deserialize)]
struct KnownPerson {
    id: String,
    embeddings: Vec<Vec<f32>>,
}

fn main() {
    let rounds: usize = env_or("CLIPFN_BENCH_ROUNDS", 9);
    let known_count: usize = env_or("CLIPFN_BENCH_KNOWN", 1000);
    let photos: usize = env_or("CLIPFN_BENCH_PHOTOS", 100);
    let mut rng = fastrand::Rng::with_seed(38);
    let mut md = format!(
        "# Known people: their cost to an album\n\n`cargo bench --bench people`: {known_count} known people of \
         {EXEMPLARS} exemplars against an album of {photos} photos with {FACES_A_PHOTO} faces each (random unit \
         vectors, none a known person's: every exemplar is looked at), one thread, the thread's own CPU, median of \
         {rounds} rounds. `album::people` without and with the known people; reading the request's \
         `known_people` (serde_json).\n\n\
         | values a face | people, no known ms | people, known ms | known adds ms | reading known_people ms | \
         JSON MB |\n|---|---|---|---|---|---|\n"
    );
    for dim in [128, 512] {
        let embeddings: Vec<Vec<f32>> = (0..photos * FACES_A_PHOTO).map(|_| unit(&mut rng, dim)).collect();
        let faces: Vec<(usize, usize, &[f32])> =
            embeddings.iter().enumerate().map(|(i, e)| (i / FACES_A_PHOTO, i % FACES_A_PHOTO, &e[..])).collect();
        let exemplars: Vec<Vec<Vec<f32>>> =
            (0..known_count).map(|_| (0..EXEMPLARS).map(|_| unit(&mut rng, dim)).collect()).collect();
        let known: Vec<Known> =
            exemplars.iter().map(|e| Known { exemplars: e.iter().map(Vec::as_slice).collect() }).collect();
        let rules = Rules { max_distance: 0.5, min_faces: 2, margin: 0.05, suggest_distance: 0.75, exemplars: 5 };
        let alone = cpu_of(rounds, 20, || {
            std::hint::black_box(people(&faces, &[], &rules));
        });
        let with_known = cpu_of(rounds, 3, || {
            std::hint::black_box(people(&faces, &known, &rules));
        });
        let body = serde_json::to_vec(
            &exemplars
                .iter()
                .enumerate()
                .map(|(i, e)| serde_json::json!({ "id": format!("p-{i}"), "embeddings": e }))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let reading = cpu_of(rounds, 3, || {
            std::hint::black_box(serde_json::from_slice::<Vec<KnownPerson>>(&body).unwrap());
        });
        writeln!(
            md,
            "| {dim} | {:.3} | {:.3} | {:.3} | {:.2} | {:.1} |",
            alone * 1e3,
            with_known * 1e3,
            (with_known - alone) * 1e3,
            reading * 1e3,
            body.len() as f64 / 1e6
        )
        .unwrap();
    }
    print!("{md}");
    std::fs::write(knobs::out_dir().unwrap().join("people.md"), md).unwrap();
}
