//! What the app's known people cost an album: `cargo bench --bench people`. Issue 38 allows 5 ms of
//! CPU for 1,000 known people of 5 exemplars each against an album of 100 photos.
//!
//! On one thread, in turns, the thread's own CPU: `album::people` over an album's faces (2 a
//! photo, random unit vectors: none is a known person's, so every exemplar is looked at and the
//! clustering is the same on both sides) with no known people and with the known ones, at dlib's
//! 128 and ArcFace's 512 values a face; and what reading the request's `known_people` JSON
//! costs (serde_json into vectors, as the API reads it). Writes `people.md` to CLIPFN_BENCH_OUT
//! (default target/bench-report). Knobs: CLIPFN_BENCH_ROUNDS (9), CLIPFN_BENCH_KNOWN (1000),
//! CLIPFN_BENCH_PHOTOS (100). Then the crowd rows (issue 48): `album::people` on albums of
//! CLIPFN_BENCH_PHOTOS photos each showing the same 0, 5, 30 or 60 people (`crowds`).

#[path = "../tests/it/common/mod.rs"]
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
    crowds(&mut md, rounds, photos);
    print!("{md}");
    std::fs::write(knobs::out_dir().unwrap().join("people.md"), md).unwrap();
}

/// Faces a photo in the crowd rows: none, a family, a class, a conference.
const CROWDS: [usize; 4] = [0, 5, 30, 60];

/// The album stage's people on crowds (issue 48): `photos` photos each showing the same `faces`
/// people, as copies of one group photo do, at dlib's 128 values and its distance (0.075). The
/// people look alike as grey faces do: each is a shared direction plus a quarter of a random one
/// (about 0.06 apart, inside the distance, so DBSCAN chains them all and the cannot-link must
/// split them), and each face its person plus a tenth of noise (about 0.01 from it). Also the
/// pairwise precision and recall against who each face is.
fn crowds(md: &mut String, rounds: usize, photos: usize) {
    let dim = 128;
    let rules = Rules { max_distance: 0.075, min_faces: 2, margin: 0.0075, suggest_distance: 0.1125, exemplars: 5 };
    let mut rng = fastrand::Rng::with_seed(48);
    writeln!(
        md,
        "\n## Crowds: the album's people on {photos} photos of one group\n\n`album::people` on {photos} photos each \
         showing the same people (dlib's 128 values, its 0.075 distance; people about 0.06 apart, so DBSCAN \
         chains them and the cannot-link splits them; faces about 0.01 from their person), one thread, the \
         thread's own CPU, median of {rounds} rounds.\n\n\
         | faces a photo | faces | pairs of people within the distance | people found | CPU ms | pairwise precision | \
         pairwise recall |\n|---|---|---|---|---|---|---|"
    )
    .unwrap();
    let shared = unit(&mut rng, dim);
    for per_photo in CROWDS {
        let who: Vec<Vec<f32>> = (0..per_photo)
            .map(|_| {
                let v: Vec<f32> = shared.iter().zip(unit(&mut rng, dim)).map(|(s, r)| s + 0.25 * r).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect();
        let within = (0..per_photo)
            .flat_map(|a| (a + 1..per_photo).map(move |b| (a, b)))
            .filter(|&(a, b)| 1.0 - who[a].iter().zip(&who[b]).map(|(x, y)| x * y).sum::<f32>() <= rules.max_distance)
            .count();
        let mut truth = Vec::new();
        let embeddings: Vec<Vec<f32>> = (0..photos * per_photo)
            .map(|i| {
                let person = &who[i % per_photo];
                truth.push(i % per_photo);
                let v: Vec<f32> = person.iter().zip(unit(&mut rng, dim)).map(|(p, r)| p + 0.1 * r).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect();
        let faces: Vec<(usize, usize, &[f32])> =
            embeddings.iter().enumerate().map(|(i, e)| (i / per_photo.max(1), i % per_photo.max(1), &e[..])).collect();
        let cpu = cpu_of(rounds, 1, || {
            std::hint::black_box(people(&faces, &[], &rules));
        });
        let found = people(&faces, &[], &rules).people;
        let mut person_of = vec![usize::MAX; faces.len()];
        for (p, person) in found.iter().enumerate() {
            for &(photo, face) in &person.faces {
                person_of[photo * per_photo + face] = p;
            }
        }
        let (mut same, mut together, mut right) = (0usize, 0usize, 0usize);
        for i in 0..faces.len() {
            for j in i + 1..faces.len() {
                let with = person_of[i] != usize::MAX && person_of[i] == person_of[j];
                same += usize::from(truth[i] == truth[j]);
                together += usize::from(with);
                right += usize::from(with && truth[i] == truth[j]);
            }
        }
        let ratio = |a: usize, b: usize| if b == 0 { "-".to_string() } else { format!("{:.4}", a as f64 / b as f64) };
        writeln!(
            md,
            "| {per_photo} | {} | {within} of {} | {} | {:.1} | {} | {} |",
            faces.len(),
            per_photo * per_photo.saturating_sub(1) / 2,
            found.len(),
            cpu * 1e3,
            ratio(right, together),
            ratio(right, same)
        )
        .unwrap();
    }
}
