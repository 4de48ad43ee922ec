//! Per-core capacity with inference free: `cargo bench --bench per_core` (after `tools/setup.sh`).
//!
//! On a GPU host the model is not what limits clipfn: the CPU is (fetch, decode, resize, batch
//! layout, JSON, HTTP). This bench makes inference nearly free with the test model (a 16x16 patch
//! convolution and one matmul, about 2 MFLOP per photo) and measures, in one run:
//! - **the server**: photos embedded per CPU-second the server process used (utime + stime from
//!   /proc/PID/stat, not wall time x cores), under a closed loop of clients, with the photos in a
//!   file store and in the GCS emulator;
//! - **decode + preprocess alone**: photos per CPU-second of one thread doing only that (decode,
//!   resize and crop: `preprocess::decode_square`), on the same photos, and of one such thread
//!   per CPU at once: the ceilings the server's figure is compared with;
//! - **inference alone**: photos per CPU-second of the test model at the server's batch, on a
//!   session set up as the server's, the batch laid out (normalised) by the tower as the worker
//!   runs it, since "nearly free" is not free: the ceiling with it is `1 / (1/decode + 1/inference)`;
//! - the server's minor page faults per photo;
//! - `/v1/analyze`'s CPU per photo against `/v1/embed`'s, their phases in turns on one server;
//! - "decode less": the coarser DCT step's time and cosine to the reference (support/coarse_scale.rs);
//! - `/v1/analyze`'s CPU with faces against without, with the SCRFD-format test models, with the
//!   real SCRFD-2.5G and dlib recognizer at detector sizes 640, 480 and 320 (also on the real face
//!   photos) and, when setup wrote CLIPFN_BENCH_FACE_MODEL (`tools/setup.sh --bench`), with
//!   SCRFD-10G + IResNet-50 (the buffalo_l architectures, random weights): the detector's and the
//!   recognizer's share of a photo;
//! - `/v1/analyze`'s CPU with objects against without, with Human's CenterNet (real weights).
//!
//! The alone runs take turns with the server's phases (`measure`), so that the machine's drift in
//! speed falls on both sides of each ratio.
//!
//! Photo sets: the real camera photos (Debian wallpapers), and "seed-size" copies of them (the
//! album app's uploads: 1280 px on the long side, baseline JPEG, about 1 MP).
//!
//! Knobs: CLIPFN_BENCH_SECONDS (20 of server phases per row), CLIPFN_BENCH_CLIENTS (4),
//! CLIPFN_BENCH_PHOTOS_PER_REQUEST (40), CLIPFN_BENCH_BATCH (8, the CPU default),
//! CLIPFN_BENCH_SERVER_ENV (more server settings, `NAME=value,NAME=value`), CLIPFN_BENCH_ONLY_FACES
//! (1: only the face architectures' and real models' rows), CLIPFN_BENCH_ONLY_OBJECTS (1: only the
//! objects' rows).
//! Writes `per_core.md` to CLIPFN_BENCH_OUT (default target/bench-report).

#[path = "support/coarse_scale.rs"]
mod coarse_scale;
#[path = "../tests/it/common/mod.rs"]
mod common;
#[path = "support/cpu.rs"]
#[allow(dead_code)] // not its thread_cpu
mod cpu;
#[path = "support/knobs.rs"]
mod knobs;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use clipfn::{
    model::{ImageModel, ModelData, ModelFile, Runtime, Tower},
    preprocess::{Transform, decode_square},
    settings::Settings,
};
use common::{Server, ServerConfig, camera_photos, gcs_env, setup_var};
use cpu::{cpu_seconds, minor_faults};
use image::RgbImage;
use knobs::env_or;
use serde_json::json;

/// Copies of `photos` scaled to 1280 px on the long side and saved as baseline JPEGs.
fn seed_size(photos: &[PathBuf], dir: &Path) -> Vec<PathBuf> {
    let long_side_1280 = |w: u32, h: u32| {
        let scale = 1280.0 / w.max(h) as f32;
        ((w as f32 * scale).round() as u32, (h as f32 * scale).round() as u32)
    };
    common::resized_jpegs(photos, dir, "", 88, long_side_1280)
}

/// Photos done and the CPU-seconds they took, summed over a side's phases.
#[derive(Clone, Copy, Default)]
struct Work {
    photos: f64,
    cpu: f64,
}

impl Work {
    fn add(&mut self, other: Work) {
        (self.photos, self.cpu) = (self.photos + other.photos, self.cpu + other.cpu);
    }

    fn per_cpu_second(&self) -> f64 {
        self.photos / self.cpu
    }
}

/// `threads` threads at once, each decoding and preprocessing (resize and crop, as the decode
/// threads do) for about `seconds`, every photo at least once: with one thread, the issue's "per
/// core" ceiling; with one per core, the same work with the cores' shared caches, memory bandwidth
/// and clock under full load, as the server has them.
fn decode_alone(photos: &[Vec<u8>], seconds: f64, threads: usize) -> Work {
    let transform = Transform::clip(224);
    let mut work = Work::default();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let transform = &transform;
                s.spawn(move || {
                    let (start, wall) = (cpu_seconds("/proc/thread-self/stat"), Instant::now());
                    let mut done = 0usize;
                    while wall.elapsed().as_secs_f64() < seconds || done < photos.len() {
                        let bytes = &photos[(t * 7 + done) % photos.len()];
                        std::hint::black_box(decode_square(bytes, transform, 100_000_000).unwrap());
                        done += 1;
                    }
                    Work { photos: done as f64, cpu: cpu_seconds("/proc/thread-self/stat") - start }
                })
            })
            .collect();
        workers.into_iter().for_each(|w| work.add(w.join().unwrap()));
    });
    work
}

/// The test model run at `batch` for about `seconds` on a session set up as the server's: the
/// CPU inference takes per photo, this process's (ONNX Runtime's threads included) while nothing
/// else in it runs.
fn inference_alone(model: &mut ImageModel, batch: usize, seconds: f64) -> Work {
    let side = model.info.image_size;
    let grey = RgbImage::from_pixel(side, side, image::Rgb([128; 3]));
    let squares = vec![&grey; batch];
    let (start, wall) = (cpu_seconds("/proc/self/stat"), Instant::now());
    let mut runs = 0;
    while wall.elapsed().as_secs_f64() < seconds {
        std::hint::black_box(model.run(&squares).unwrap());
        runs += 1;
    }
    Work { photos: (runs * batch) as f64, cpu: cpu_seconds("/proc/self/stat") - start }
}

/// The server's photos and CPU-seconds (utime + stime) under a closed loop of `clients` for
/// `seconds`, with its wall time and minor page faults.
fn server_phase(
    server: &Server,
    (keys, endpoint): (&[String], Endpoint),
    clients: usize,
    per_request: usize,
    seconds: f64,
) -> ServerRun {
    let stat = format!("/proc/{}/stat", server.pid());
    let (cpu_before, faults_before, started) = (cpu_seconds(&stat), minor_faults(&stat), Instant::now());
    let (embedded, faces) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || {
                    let (mut sent, mut faces) = (0, 0);
                    while started.elapsed().as_secs_f64() < seconds {
                        let (photos, found) = request(server, (keys, endpoint), c * 7 + sent, per_request);
                        (sent, faces) = (sent + photos, faces + found);
                    }
                    (sent, faces)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).fold((0, 0), |(p, f), (wp, wf)| (p + wp, f + wf))
    });
    ServerRun {
        work: Work { photos: embedded as f64, cpu: cpu_seconds(&stat) - cpu_before },
        wall: started.elapsed().as_secs_f64(),
        faults: minor_faults(&stat) - faults_before,
        faces: faces as f64,
    }
}

/// Which endpoint the clients call: `/v1/embed`, or `/v1/analyze` (every pixel signal too, from
/// the same decode), whose CPU per photo is compared with embed's, without and with faces.
#[derive(Clone, Copy, PartialEq)]
enum Endpoint {
    Embed,
    Analyze,
    AnalyzeFaces,
    AnalyzeObjects,
}

/// One request of `per_request` photos from `keys`, starting at `offset`; all must embed. Returns
/// the photos and the faces found in them.
fn request(
    server: &Server,
    (keys, endpoint): (&[String], Endpoint),
    offset: usize,
    per_request: usize,
) -> (usize, usize) {
    let images: Vec<&str> = (0..per_request).map(|i| keys[(offset + i) % keys.len()].as_str()).collect();
    let (path, body) = match endpoint {
        Endpoint::Embed => ("/v1/embed", json!({ "images": images })),
        Endpoint::Analyze | Endpoint::AnalyzeFaces | Endpoint::AnalyzeObjects => {
            let (faces, objects) = (endpoint == Endpoint::AnalyzeFaces, endpoint == Endpoint::AnalyzeObjects);
            ("/v1/analyze", json!({ "images": images, "faces": faces, "objects": objects }))
        }
    };
    let (status, body) = server.post_json(path, &body);
    assert_eq!(status, 200, "{body}");
    let items = body["data"].as_array().unwrap();
    assert!(items.iter().all(|item| item["embedding"].is_array()), "{body}");
    let found = |field: &str| items.iter().filter_map(|item| item[field].as_array()).map(Vec::len).sum::<usize>();
    (per_request, found("faces") + found("objects"))
}

#[derive(Default)]
struct ServerRun {
    work: Work,
    wall: f64,
    faults: f64,
    /// Faces found (with faces).
    faces: f64,
}

impl ServerRun {
    fn add(&mut self, other: ServerRun) {
        self.work.add(other.work);
        (self.wall, self.faults, self.faces) =
            (self.wall + other.wall, self.faults + other.faults, self.faces + other.faces);
    }
}

/// The seconds in the face stages (the detector and the recognizer on the worker, the chips on the
/// decode threads) since `before`, their totals when it was taken (`[0.0; 3]`: so far).
fn face_stages(server: &Server, before: [f64; 3]) -> [f64; 3] {
    stage_seconds(server, ["face_detection", "face_chips", "face_recognition"], before)
}

/// The seconds in each of `stages` since `before` (`clipfn_stage_duration_seconds`).
fn stage_seconds<const N: usize>(server: &Server, stages: [&str; N], before: [f64; N]) -> [f64; N] {
    let metrics = common::scrape(server);
    let mut seconds =
        stages.map(|stage| common::series(&metrics, "clipfn_stage_duration_seconds_sum", &[("stage", stage)]));
    seconds.iter_mut().zip(before).for_each(|(stage, before)| *stage -= before);
    seconds
}

/// A row of the faces table: `/v1/analyze` without faces and with, the face stages' seconds over the
/// phases with faces, and the server's peak RSS.
fn face_row(
    row: &str,
    without: &ServerRun,
    with: &ServerRun,
    [detector, chips, recognizer]: [f64; 3],
    server: &Server,
) -> String {
    let (plain, faces) = (without.work.per_cpu_second(), with.work.per_cpu_second());
    let per_photo = with.faces / with.work.photos;
    let ms = |seconds: f64, n: f64| seconds * 1000.0 / n;
    let rss = common::status_bytes(&server.pid().to_string(), "VmHWM") / 1048576.0;
    eprintln!("faces, {row}: {plain:.0} -> {faces:.1} photos/CPU-s, {per_photo:.2} faces a photo");
    // No face found: no time a face.
    let per_face = if with.faces > 0.0 { format!("{:.1}", ms(recognizer, with.faces)) } else { "-".into() };
    format!(
        "| {row} | {plain:.0} | {faces:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {per_face} | {per_photo:.2} | {rss:.0} |\n",
        1000.0 / plain,
        1000.0 / faces,
        plain / faces,
        ms(detector, with.work.photos),
        ms(chips, with.work.photos),
        ms(recognizer, with.work.photos),
    )
}

/// The real face architectures' rows: `/v1/analyze` without and with faces in turns on one server.
/// Requests of FACE_ARCH_PER_REQUEST photos: at a few photos a second, a phase of 40-photo requests
/// would last a minute whatever CLIPFN_BENCH_SECONDS says.
const FACE_ARCH_PER_REQUEST: usize = 4;

fn face_cost(server: &Server, keys: &[String], clients: usize, seconds: f64) -> (ServerRun, ServerRun, [f64; 3]) {
    let before = face_stages(server, [0.0; 3]);
    let (without, with) = cost(server, (keys, Endpoint::AnalyzeFaces), (clients, FACE_ARCH_PER_REQUEST), seconds);
    (without, with, face_stages(server, before))
}

/// `/v1/analyze` without and with what `with` asks, in turns on one server (each kind's first
/// request before, as it pays for lazy set-up).
fn cost(
    server: &Server,
    (keys, with_endpoint): (&[String], Endpoint),
    (clients, per_request): (usize, usize),
    seconds: f64,
) -> (ServerRun, ServerRun) {
    let (plain, faces) = ((keys, Endpoint::Analyze), (keys, with_endpoint));
    request(server, plain, 0, per_request);
    request(server, faces, 0, per_request);
    let phase = seconds / (2 * ROUNDS) as f64;
    let (mut without, mut with) = (ServerRun::default(), ServerRun::default());
    for _ in 0..ROUNDS {
        without.add(server_phase(server, plain, clients, per_request, phase));
        with.add(server_phase(server, faces, clients, per_request, phase));
        with.add(server_phase(server, faces, clients, per_request, phase));
        without.add(server_phase(server, plain, clients, per_request, phase));
    }
    (without, with)
}

/// The object models of the objects table: Human's CenterNet (the real weights: a CPU-only
/// deployment's cost) and the generated YOLO-format model (inference nearly free, as the test image
/// model's: the host's share where the detector runs on a GPU).
const OBJECT_MODELS: [(&str, &str); 2] =
    [("CenterNet (real)", "CLIPFN_TEST_OBJECTS"), ("YOLO format, generated", "CLIPFN_TEST_OBJECTS_YOLO")];

/// A row of the objects table: `/v1/analyze` without objects and with (the model `variable` names),
/// in turns on one server: CPU per photo both ways, the detector's worker time per photo.
fn objects_row(
    (label, model, variable): (&str, &str, &str),
    bucket: &Path,
    keys: &[String],
    (clients, per_request, batch): (usize, usize, usize),
    seconds: f64,
) -> String {
    let server = server_env(ServerConfig::local(bucket).env("CLIPFN_BATCH_SIZE", &batch.to_string()))
        .env("CLIPFN_OBJECT_MODEL", &setup_var(variable))
        .env("CLIPFN_MAX_IMAGES", &per_request.to_string())
        .start();
    let [before] = stage_seconds(&server, ["object_detection"], [0.0]);
    let (without, with) = cost(&server, (keys, Endpoint::AnalyzeObjects), (clients, per_request), seconds);
    let [detector] = stage_seconds(&server, ["object_detection"], [before]);
    let (plain, objects) = (without.work.per_cpu_second(), with.work.per_cpu_second());
    let per_photo = with.faces / with.work.photos;
    eprintln!("objects, {label}, {model}: {plain:.0} -> {objects:.1} photos/CPU-s, {per_photo:.2} objects a photo");
    format!(
        "| {label} | {model} | {:.1} | {:.1} | {:.2} | {:.1} | {per_photo:.2} |\n",
        1000.0 / plain,
        1000.0 / objects,
        plain / objects,
        detector * 1000.0 / with.work.photos,
    )
}

/// Both sides of the comparison for one photo set and store, summed over their phases.
#[derive(Default)]
struct Measured {
    server: ServerRun,
    /// The same closed loop on `/v1/analyze`, in turns with `server`'s phases.
    analyze: ServerRun,
    /// And on `/v1/analyze` with faces (the SCRFD-format test models).
    faces: ServerRun,
    /// The face stages' seconds over the phases (only `faces`'s run them).
    face_stages: [f64; 3],
    alone_one: Work,
    alone_all: Work,
    inference: Work,
}

/// Server phases and the alone measurements, in turns, so that the machine's drift in speed
/// (10-25% within minutes on the development machine) falls on both sides of each ratio alike.
/// Each gap between server phases stays under the worker's idle trim (`IDLE_BEFORE_TRIM`, 1 s),
/// as within a burst.
const ROUNDS: usize = 4;
const ALONE_SECONDS: f64 = 0.35;
const INFERENCE_SECONDS: f64 = 0.2;

fn measure(
    server: &Server,
    (photos, keys): (&[Vec<u8>], &[String]),
    model: &mut ImageModel,
    (clients, per_request, batch): (usize, usize, usize),
    seconds: f64,
) -> Measured {
    // The first request of each kind of photo pays for lazy set-up.
    request(server, (keys, Endpoint::Embed), 0, per_request);
    request(server, (keys, Endpoint::Analyze), 0, per_request);
    request(server, (keys, Endpoint::AnalyzeFaces), 0, per_request);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let phase = seconds / (2 * ROUNDS) as f64;
    let (embed, analyze, faces) = ((keys, Endpoint::Embed), (keys, Endpoint::Analyze), (keys, Endpoint::AnalyzeFaces));
    let mut m = Measured::default();
    let before = face_stages(server, [0.0; 3]);
    for _ in 0..ROUNDS {
        m.alone_one.add(decode_alone(photos, ALONE_SECONDS, 1));
        m.inference.add(inference_alone(model, batch, INFERENCE_SECONDS));
        m.server.add(server_phase(server, embed, clients, per_request, phase));
        m.analyze.add(server_phase(server, analyze, clients, per_request, phase));
        m.alone_all.add(decode_alone(photos, ALONE_SECONDS, cpus));
        m.analyze.add(server_phase(server, analyze, clients, per_request, phase));
        m.server.add(server_phase(server, embed, clients, per_request, phase));
        m.faces.add(server_phase(server, faces, clients, per_request, phase));
        m.analyze.add(server_phase(server, analyze, clients, per_request, phase));
        m.faces.add(server_phase(server, faces, clients, per_request, phase));
    }
    m.face_stages = face_stages(server, before);
    m
}

/// The test model on a session set up as the server's on this machine (the CPU provider).
fn test_model() -> ImageModel {
    let path = setup_var("CLIPFN_TEST_MODEL");
    let settings = Settings::from_vars([("CLIPFN_MODEL".to_string(), path.clone())]).unwrap();
    let file = ModelFile::bare(ModelData::File(path.clone().into()), &path);
    ImageModel::load(&mut Runtime::start(&settings.model).unwrap(), &settings.model, file).unwrap()
}

/// `config` with the settings in CLIPFN_BENCH_SERVER_ENV (`NAME=value,NAME=value`), to compare a
/// server setting's effect in runs of this bench.
fn server_env(mut config: ServerConfig) -> ServerConfig {
    let extra = std::env::var("CLIPFN_BENCH_SERVER_ENV").unwrap_or_default();
    for setting in extra.split(',').filter(|s| !s.is_empty()) {
        let (name, value) = setting.split_once('=').expect("CLIPFN_BENCH_SERVER_ENV: NAME=value,...");
        config = config.env(name, value);
    }
    config
}

fn main() {
    // SAFETY: first thing in main, before any other thread exists.
    unsafe { knobs::set_ort_dylib_path() };
    let seconds: f64 = env_or("CLIPFN_BENCH_SECONDS", 20.0);
    let clients: usize = env_or("CLIPFN_BENCH_CLIENTS", 4);
    let per_request: usize = env_or("CLIPFN_BENCH_PHOTOS_PER_REQUEST", 40);
    // ServerConfig::local runs batch 8, the CPU default.
    let batch: usize = env_or("CLIPFN_BENCH_BATCH", 8);
    let out = knobs::out_dir().unwrap();

    let camera = camera_photos(usize::MAX);
    let seed_dir = tempfile::tempdir().unwrap();
    let seed = seed_size(&camera, seed_dir.path());
    let mut model = test_model();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut md = String::new();
    writeln!(
        md,
        "# Per-core capacity with inference free\n\nMachine: {cpus} CPUs. Model: the test model (about 2 MFLOP per \
         photo). Closed loop: {clients} clients x {per_request} photos per request, {seconds} s of server phases \
         per row. Server batch: {batch}. Figures are photos per CPU-second: the server's utime + stime; for \
         decode + preprocess alone (decode, resize and crop), one thread's, and that of one thread per CPU running \
         at once (the cores' shared caches, memory bandwidth and clock under full load, as the server has them); \
         for inference alone, the test model at the server's batch on a session set up as the server's, the \
         batch laid out (normalised) by the tower. The alone runs take \
         turns with {} server phases, so that the machine's drift falls on both sides of each ratio. \
         \"Its CPUs busy\" is images/s over photos/CPU-s: the cores' worth of CPU the server kept busy; \
         with inference free, a server that cannot use them all leaves throughput unsold.\n",
        2 * ROUNDS,
    )
    .unwrap();
    writeln!(
        md,
        "| photos | store | server photos/CPU-s | alone, 1 thread | server / alone | alone, {cpus} threads at once | server / that | inference alone | server / (alone + inference) | server images/s | its CPUs busy | server page faults per photo |"
    )
    .unwrap();
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|").unwrap();
    // `/v1/analyze` against `/v1/embed` on the same server and photos, their phases in turns.
    let mut analyze_md = String::from(
        "\n## `/v1/analyze` against `/v1/embed`\n\nThe same closed loop, phases of each endpoint in turns on \
         one server: CPU-seconds per photo (utime + stime), and analyze's over embed's (its pixel signals: the \
         luma, the hash, the sharpness and the duplicate groups; no heads, no labels).\n\n\
         | photos | store | embed photos/CPU-s | analyze photos/CPU-s | analyze CPU per photo / embed's |\n|---|---|---|---|---|\n",
    );
    // Faces: `/v1/analyze` with and without them, in turns on the same server; what the detector and
    // the recognizer took on the worker and the chips on the decode threads (wall time, from the
    // stage metrics), and the peak RSS.
    let mut faces_md = format!(
        "\n## `/v1/analyze` with faces\n\nThe same closed loop with `\"faces\": true` and `false` in turns on one \
         server: with the SCRFD-format test models (tools/models/faces.py) in the phases above, and with \
         the real SCRFD-2.5G (its input size open: tools/dynamic_detector.py; CLIPFN_FACE_DET_SIZE 640, 480, \
         320) with the rebuilt dlib recognizer, and SCRFD-10G + IResNet-50 (buffalo_l's architectures, random \
         weights: tools/models/face_archs.py), each on a server of its own, {clients} clients x \
         {FACE_ARCH_PER_REQUEST} photos per request, file store; the real models also on the real face photos \
         (Solvay 1927's 29 faces, portraits, photos without a face). CPU per photo (utime + stime), the worker's wall \
         time on the detector per photo and on the recognizer per photo and per face over the phases with faces, \
         the chips' on the decode threads per photo (with the finer decode where a face needs one), \
         the faces found per photo, and the server's peak RSS after all its phases.\n\n\
         | photos | store | models | analyze photos/CPU-s | with faces | CPU ms per photo | with faces | with / without | \
         detector ms/photo | chips ms/photo | recognizer ms/photo | ms/face | faces/photo | peak RSS MiB |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let only_faces = env_or("CLIPFN_BENCH_ONLY_FACES", 0) == 1;
    let only_objects = env_or("CLIPFN_BENCH_ONLY_OBJECTS", 0) == 1;
    let mut objects_md = String::from(
        "\n## `/v1/analyze` with objects\n\nThe same closed loop with `\"objects\": true` and `false` in turns on one \
         server, file store, with Human's CenterNet (the real weights, tools/setup-objects.sh; docs/objects.md) and \
         with the generated YOLO-format model (tools/models/objects.py: inference nearly free, what the host pays \
         where the detector runs on a GPU): CPU per photo (utime + stime) both ways, and the worker's wall time on \
         the detector per photo.\n\n\
         | photos | object model | CPU ms per photo | with objects | with / without | detector ms/photo | objects/photo |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let local = |bucket: &Path, faces: &str| {
        server_env(ServerConfig::local(bucket).env("CLIPFN_BATCH_SIZE", &batch.to_string()))
            .env("CLIPFN_FACE_MODEL", faces)
    };
    let face_photos = face_photos();
    let sets: &[(&str, &[PathBuf])] = &[("camera", &camera), ("seed-size", &seed), ("face photos", &face_photos)];
    for &(label, photos) in sets {
        let (data, bucket, keys) = photo_bucket(photos);
        if !only_faces && label != "face photos" {
            for (model, variable) in OBJECT_MODELS {
                let row = objects_row((label, model, variable), &bucket, &keys, (clients, per_request, batch), seconds);
                objects_md.push_str(&row);
            }
        }
        if only_objects {
            continue;
        }
        for (models, folder, det_size) in real_face_models() {
            let mut config = local(&bucket, &folder).env("CLIPFN_MAX_IMAGES", &FACE_ARCH_PER_REQUEST.to_string());
            if let Some(side) = det_size {
                config = config.env("CLIPFN_FACE_DET_SIZE", &side.to_string());
            }
            let server = config.start();
            let (without, with, stages) = face_cost(&server, &keys, clients, seconds);
            let row = format!("{label} | file | {models}");
            faces_md.push_str(&face_row(&row, &without, &with, stages, &server));
        }
        if only_faces || label == "face photos" {
            continue;
        }
        let bytes: Vec<Vec<u8>> = photos.iter().map(|p| std::fs::read(p).unwrap()).collect();
        let mean_mp = photos
            .iter()
            .map(|p| image::image_dimensions(p).map(|(w, h)| f64::from(w * h) / 1e6).unwrap())
            .sum::<f64>()
            / photos.len() as f64;
        let (_gcs, gcs_port) = common::start_fake_gcs(data.path(), None);
        let test_faces = setup_var("CLIPFN_TEST_FACES_SCRFD");
        let stores = [
            ("file", local(&bucket, &test_faces)),
            ("GCS emulator", gcs_env(local(&bucket, &test_faces), gcs_port).env("CLIPFN_STORE", "gs://photos")),
        ];
        for (store, config) in stores {
            let server = config.env("CLIPFN_MAX_IMAGES", &per_request.to_string()).start();
            let m = measure(&server, (&bytes, &keys), &mut model, (clients, per_request, batch), seconds);
            let per_cpu = m.server.work.per_cpu_second();
            let (one, all, inference) =
                (m.alone_one.per_cpu_second(), m.alone_all.per_cpu_second(), m.inference.per_cpu_second());
            let with_inference = 1.0 / (1.0 / one + 1.0 / inference);
            let rate = m.server.work.photos / m.server.wall;
            let faults = m.server.faults / m.server.work.photos;
            eprintln!(
                "{label} ({mean_mp:.1} MP), {store}: server {per_cpu:.0} photos/CPU-s, alone {one:.0} (1 thread), {all:.0} ({cpus} threads), inference {inference:.0}, {rate:.0} images/s, {faults:.0} page faults/photo"
            );
            writeln!(
                md,
                "| {label} ({} photos, mean {mean_mp:.1} MP) | {store} | {per_cpu:.0} | {one:.0} | {:.2} | {all:.0} | {:.2} | {inference:.0} | {:.2} | {rate:.0} | {:.2} of {cpus} | {faults:.0} |",
                photos.len(),
                per_cpu / one,
                per_cpu / all,
                per_cpu / with_inference,
                rate / per_cpu,
            )
            .unwrap();
            let analyze_per_cpu = m.analyze.work.per_cpu_second();
            eprintln!("{label}, {store}: analyze {analyze_per_cpu:.0} photos/CPU-s, embed {per_cpu:.0}");
            writeln!(
                analyze_md,
                "| {label} | {store} | {per_cpu:.0} | {analyze_per_cpu:.0} | {:.3} |",
                per_cpu / analyze_per_cpu
            )
            .unwrap();
            let row = format!("{label} | {store} | test");
            faces_md.push_str(&face_row(&row, &m.analyze, &m.faces, m.face_stages, &server));
        }
    }
    if only_faces || only_objects {
        let only = if only_faces {
            "faces only (CLIPFN_BENCH_ONLY_FACES)"
        } else {
            "objects only (CLIPFN_BENCH_ONLY_OBJECTS)"
        };
        md = format!("# Per-core capacity: {only}\n\nMachine: {cpus} CPUs.\n");
    } else {
        md.push_str(&analyze_md);
    }
    if !only_objects {
        md.push_str(&faces_md);
    }
    if !only_faces {
        md.push_str(&objects_md);
    }
    if !only_faces && !only_objects {
        coarse_scale::write(&mut md, &coarse_scale::measure(&camera, &mut model)).unwrap();
    }
    std::fs::write(out.join("per_core.md"), &md).unwrap();
    println!("{md}");
}

/// The real face photos (tools/setup-real-faces.sh: Solvay 1927, the portraits, the labelled ones
/// and photos without a face).
fn face_photos() -> Vec<PathBuf> {
    let dir = PathBuf::from(setup_var("CLIPFN_TEST_FACE_PHOTOS"));
    let mut photos: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jpg" || x == "png"))
        .collect();
    photos.sort();
    photos
}

/// The face models of the architectures' rows: buffalo_l's with random weights where setup wrote
/// CLIPFN_BENCH_FACE_MODEL (`tools/setup.sh --bench`), and the real SCRFD-2.5G (its input size
/// open) with the rebuilt dlib recognizer at three detector sizes: (row name, folder, size).
fn real_face_models() -> Vec<(String, String, Option<u32>)> {
    let arch = common::setup_env().get("CLIPFN_BENCH_FACE_MODEL").cloned();
    let real = setup_var("CLIPFN_TEST_FACES_REAL_DYNAMIC");
    let sized = [640, 480, 320].map(|side| (format!("SCRFD-2.5G {side} + dlib (real)"), real.clone(), Some(side)));
    arch.map(|folder| ("SCRFD-10G + IResNet-50".to_string(), folder, None)).into_iter().chain(sized).collect()
}

/// `photos` copied into a `photos` folder (the file store's bucket, the GCS emulator's data) of a
/// temporary folder: (that folder, the bucket, its keys).
fn photo_bucket(photos: &[PathBuf]) -> (tempfile::TempDir, PathBuf, Vec<String>) {
    let data = tempfile::tempdir().unwrap();
    let bucket = data.path().join("photos");
    std::fs::create_dir_all(&bucket).unwrap();
    let keys = photos
        .iter()
        .map(|photo| {
            let name = photo.file_name().unwrap().to_string_lossy().into_owned();
            std::fs::copy(photo, bucket.join(&name)).unwrap();
            name
        })
        .collect();
    (data, bucket, keys)
}
