//! `clipfn backfill` as Cloud Run would run it: the real binary as separate task processes, photos
//! in fake-gcs-server over loopback, Parquet read back with pyarrow and DuckDB.

use crate::common;

use std::{
    collections::{BTreeMap, HashMap},
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use clipfn::hosts::backfill::{shard::Task, sink::file_name};
use common::{Proc, ServerConfig, camera_photos, cosine, fake_gcs_credentials, gcs_env, setup_var, start_fake_gcs};
use serde_json::{Value, json};

const COPIES: usize = 240;
const TASKS: u32 = 3;
const CHUNK: usize = 8;

/// The bucket `photos`: `lib/uI/pJ.jpg` is a copy of camera photo J, plus two files that are not
/// photos. Returns the keys of the copies with the photo each is a copy of.
fn seed_bucket(data: &Path, photos: &[PathBuf]) -> Vec<(String, usize)> {
    let lib = data.join("photos/lib");
    let mut copies = Vec::new();
    for i in 0..COPIES {
        std::fs::create_dir_all(lib.join(format!("u{i}"))).unwrap();
        let j = i % photos.len();
        std::fs::copy(&photos[j], lib.join(format!("u{i}/p{j}.jpg"))).unwrap();
        copies.push((format!("lib/u{i}/p{j}.jpg"), j));
    }
    std::fs::create_dir_all(lib.join("bad")).unwrap();
    std::fs::copy(common::repo().join("tests/fixtures/truncated_jpeg.jpg"), lib.join("bad/truncated.jpg")).unwrap();
    std::fs::write(lib.join("bad/notes.txt"), "not a photo").unwrap();
    copies
}

/// `clipfn backfill ARGS` against the emulator, from an empty environment.
fn backfill(gcs_port: u16, args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_clipfn"));
    command
        .arg("backfill")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("ORT_DYLIB_PATH", setup_var("ORT_DYLIB_PATH"))
        .env("CLIPFN_MODEL", setup_var("CLIPFN_TEST_MODEL"))
        .env("CLIPFN_STORE", "gs://photos")
        .env("CLIPFN_BATCH_SIZE", "8")
        .env("CLIPFN_FETCH_RETRIES", "0")
        .env("CLIPFN_BACKFILL_CHUNK", CHUNK.to_string())
        .env("CLIPFN_LOG_FORMAT", "json")
        .env("GOOGLE_SERVICE_ACCOUNT_KEY", fake_gcs_credentials(gcs_port))
        .env("GOOGLE_ALLOW_HTTP", "true")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The summary line a finished task prints, after checking it exited 0.
fn summary(output: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "backfill failed: {}\n{stderr}", output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Waits for a task started with its log in `log` and returns its summary.
fn finish(task: &mut Proc, log: &Path) -> Value {
    let status = task.0.wait().unwrap();
    let mut stdout = Vec::new();
    task.0.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
    summary(&Output { status, stdout, stderr: std::fs::read(log).unwrap() })
}

/// Every row under `dir`, read by tools/read_backfill.py (pyarrow and DuckDB).
fn read_back(dir: &Path) -> Value {
    common::read_backfill(dir, &[])
}

fn own_files(dir: &Path, task: Task) -> usize {
    let first = file_name(task, 0);
    let prefix = first.trim_end_matches("000000.parquet");
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(prefix) && name.ends_with(".parquet"))
            .count()
    })
}

#[test]
fn three_tasks_one_killed_and_rerun_give_every_key_one_row() {
    let photos = camera_photos(3);
    let data = tempfile::tempdir().unwrap();
    let copies = seed_bucket(data.path(), &photos);
    let bad = [
        ("lib/bad/truncated.jpg", "decode_failed"),
        ("lib/bad/notes.txt", "unsupported_format"),
        ("lib/missing/IMG_0404.jpg", "not_found"),
        ("../outside.jpg", "forbidden"),
        ("gs://elsewhere/x.jpg", "forbidden"),
    ];
    // Blank lines, a whitespace-only line, CRLF endings and duplicates are all in the manifest.
    let mut manifest: Vec<String> = copies.iter().map(|(key, _)| key.clone()).collect();
    manifest.extend(bad.iter().map(|(key, _)| key.to_string()));
    manifest.extend(["".into(), "   ".into(), copies[0].0.clone(), format!("{}\r", copies[1].0), bad[2].0.into()]);
    std::fs::write(data.path().join("photos/manifest.txt"), manifest.join("\n")).unwrap();
    let (_gcs, port) = start_fake_gcs(data.path(), None);
    let out_dir = tempfile::tempdir().unwrap();
    let out = format!("file://{}", out_dir.path().display());
    let heads = format!("aesthetic={}", common::model("head-test.onnx"));
    let faces = setup_var("CLIPFN_TEST_FACES_SCRFD");
    let run = |index: u32| {
        let (index, count) = (index.to_string(), TASKS.to_string());
        let args = ["--manifest", "gs://photos/manifest.txt", "--out", &out];
        // Cloud Run's variables pick the task.
        let envs = [
            ("CLOUD_RUN_TASK_INDEX", &*index),
            ("CLOUD_RUN_TASK_COUNT", &count),
            ("CLIPFN_HEADS", &heads),
            ("CLIPFN_FACE_MODEL", &faces),
        ];
        backfill(port, &args, &envs)
    };

    // Three tasks at once; task 1 is killed as soon as its first chunk is there.
    let victim = Task { index: 1, count: TASKS };
    let logs = tempfile::tempdir().unwrap();
    let log = |i: u32| logs.path().join(format!("task-{i}.log"));
    let mut tasks: Vec<Proc> =
        (0..TASKS).map(|i| Proc(run(i).stderr(std::fs::File::create(log(i)).unwrap()).spawn().unwrap())).collect();
    let until = Instant::now() + Duration::from_secs(120);
    while own_files(out_dir.path(), victim) == 0 {
        assert!(tasks[1].0.try_wait().unwrap().is_none(), "task 1 ended before its first chunk was written");
        assert!(Instant::now() < until, "task 1 wrote no chunk within 120 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    tasks[1].0.kill().unwrap(); // SIGKILL
    tasks[1].0.wait().unwrap();
    let victim_keys = manifest.iter().map(|k| k.trim_end_matches('\r')).filter(|k| victim.owns(k)).count();
    let survived = own_files(out_dir.path(), victim);
    assert!(survived * CHUNK < victim_keys, "task 1 finished ({survived} chunks) before it was killed");
    let others: Vec<Value> = [0, 2].iter().map(|&i| finish(&mut tasks[i as usize], &log(i))).collect();

    // The rerun skips the chunks the killed task finished.
    let started = Instant::now();
    let rerun = summary(&run(1).output().unwrap());
    eprintln!("killed task resumed and finished in {:.1} s: {rerun}", started.elapsed().as_secs_f64());
    assert!(rerun["chunks_present"].as_u64().unwrap() >= survived as u64, "{rerun}");
    assert!(rerun["already_done"].as_u64().unwrap() >= CHUNK as u64, "{rerun}");
    for summary in others.iter().chain([&rerun]) {
        assert_eq!(summary["task_count"], TASKS, "{summary}");
    }

    let read = read_back(out_dir.path());
    let rows = read["rows"].as_array().unwrap();
    let mut by_key: HashMap<&str, Vec<&Value>> = HashMap::new();
    for row in rows {
        by_key.entry(row["key"].as_str().unwrap()).or_default().push(row);
    }
    let mut expected: Vec<&str> = copies.iter().map(|(k, _)| k.as_str()).chain(bad.iter().map(|(k, _)| *k)).collect();
    expected.sort_unstable();
    let mut found: Vec<&str> = by_key.keys().copied().collect();
    found.sort_unstable();
    assert_eq!(found, expected, "keys in the files are not the manifest's keys");
    assert!(by_key.values().all(|rows| rows.len() == 1), "some key has more than one row");
    for (key, code) in bad {
        assert_eq!(by_key[key][0]["error_code"], code, "{key}: {}", by_key[key][0]);
        assert!(by_key[key][0]["embedding"].is_null());
    }
    let duck = &read["duckdb"];
    assert_eq!(duck["rows"], expected.len(), "DuckDB sees another row count: {duck}");
    assert_eq!(duck["distinct_keys"], expected.len());
    assert_eq!(duck["embedded"], copies.len());
    assert_eq!(duck["errors"]["forbidden"], 2);

    // Every signal equals what /v1/analyze answers for the same photos.
    let server = gcs_env(ServerConfig::local(Path::new("/")), port)
        .env("CLIPFN_STORE", "gs://photos")
        .env("CLIPFN_HEADS", &heads)
        .env("CLIPFN_FACE_MODEL", &faces)
        .start();
    let originals: Vec<&str> = (0..photos.len()).map(|j| copies[j].0.as_str()).collect();
    let (status, body) = server.post_json("/v1/analyze", &serde_json::json!({ "images": originals }));
    assert_eq!(status, 200, "{body}");
    let dim = body["dim"].as_u64().unwrap();
    assert!(read["files"].as_array().unwrap().iter().all(|f| f["model"] == body["model"] && f["dim"] == dim));
    assert_eq!(duck["dims"], serde_json::json!([dim]));
    for (key, j) in &copies {
        let api = common::item(&body, *j).unwrap();
        let row: Vec<f32> = by_key[key.as_str()][0]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let similarity = cosine(&api, &row);
        assert!(similarity >= 0.9999, "{key}: cosine {similarity} against /v1/analyze");
        let (row, api) = (by_key[key.as_str()][0], &body["data"][*j]);
        assert_eq!(row["hash"], api["hash"], "{key}");
        let close = |a: &Value, b: &Value| (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-4;
        assert!(close(&row["sharpness"], &api["quality"]["sharpness"]), "{key}: {row} {api}");
        assert!(close(&row["scores"]["aesthetic"], &api["scores"]["aesthetic"]), "{key}: {row} {api}");
        let (row_faces, api_faces) = (row["faces"].as_array().unwrap(), api["faces"].as_array().unwrap());
        assert_eq!(row_faces.len(), api_faces.len(), "{key}");
        for (a, b) in row_faces.iter().zip(api_faces) {
            assert!(close(&a["score"], &b["score"]) && close(&a["box"][2], &b["box"][2]), "{key}: {a} {b}");
            assert_eq!(a["embedding"].as_array().unwrap().len(), b["embedding"].as_array().unwrap().len());
        }
    }
    for (key, _) in bad {
        let row = by_key[key][0];
        let nothing = ["hash", "sharpness", "scores", "faces"].iter().all(|column| row[column].is_null());
        assert!(nothing, "{row}");
    }
    // docs/deploy.md's near-duplicates query links the copies of each photo, and only them.
    let pairs = duck["near_duplicates"].as_array().unwrap();
    let original: HashMap<&str, usize> = copies.iter().map(|(key, j)| (key.as_str(), *j)).collect();
    for pair in pairs {
        assert_eq!(original[pair[0].as_str().unwrap()], original[pair[1].as_str().unwrap()], "{pair}");
    }
    let copies_of = |j: usize| copies.iter().filter(|(_, of)| *of == j).count();
    let expected_pairs: usize = (0..photos.len()).map(|j| copies_of(j) * (copies_of(j) - 1) / 2).sum();
    assert_eq!(pairs.len(), expected_pairs, "every two copies of a photo are a pair");
    let sizes: BTreeMap<usize, u64> =
        (0..photos.len()).map(|j| (j, std::fs::metadata(&photos[j]).unwrap().len())).collect();
    for (key, j) in &copies {
        assert_eq!(by_key[key.as_str()][0]["bytes"], sizes[j], "{key}");
    }
}

/// moto's S3 with a bucket `photos`: settings that point clipfn at it, and the bucket's URL for
/// unsigned seeding.
fn s3(port: u16) -> ([(&'static str, String); 5], String) {
    let endpoint = format!("http://127.0.0.1:{port}");
    let response = common::blocking_client().put(format!("{endpoint}/photos")).send().unwrap();
    assert!(response.status().is_success(), "creating the bucket: {}", response.status());
    let env = [
        ("AWS_ENDPOINT", endpoint.clone()),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
    ];
    (env, format!("{endpoint}/photos"))
}

fn upload(bucket: &str, key: &str, bytes: Vec<u8>) {
    let response = common::blocking_client().put(format!("{bucket}/{key}")).body(bytes).send().unwrap();
    assert!(response.status().is_success(), "PUT {key}: {}", response.status());
}

/// Every object under `prefix` in moto's bucket `photos`, copied into `dir`; their keys. Objects
/// that clipfn wrote are private, so this reads them as clipfn does, with signed requests.
fn download(endpoint: &str, prefix: &str, dir: &Path) -> Vec<String> {
    use futures::TryStreamExt;
    use object_store::{ObjectStore, ObjectStoreExt, aws::AmazonS3Builder, path::Path as ObjectPath};
    let store = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_bucket_name("photos")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let objects: Vec<_> = store.list(Some(&ObjectPath::from(prefix))).try_collect().await.unwrap();
        let mut keys = Vec::new();
        for object in objects {
            let bytes = store.get(&object.location).await.unwrap().bytes().await.unwrap();
            std::fs::write(dir.join(object.location.filename().unwrap()), bytes).unwrap();
            keys.push(object.location.to_string());
        }
        keys
    })
}

#[test]
fn listed_prefix_then_incremental_array_job_then_another_model_is_refused() {
    let photo = std::fs::read(&camera_photos(1)[0]).unwrap();
    let (_moto, port) = common::start_moto();
    let (aws, bucket) = s3(port);
    for i in 0..6 {
        upload(&bucket, &format!("lib/a{i}.jpg"), photo.clone());
    }
    let env = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        [("CLIPFN_STORE", "s3://photos".to_string())]
            .into_iter()
            .chain(aws.iter().cloned())
            .chain(extra.iter().cloned())
            .collect()
    };
    let run = |args: &[&str], extra: &[(&'static str, String)]| {
        let env = env(extra);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        backfill(0, args, &env).output().unwrap()
    };
    // The output lies inside the listed prefix: the listing must leave it out.
    let args = ["--source", "s3://photos/lib/", "--out", "s3://photos/lib/embeddings"];
    let first = summary(&run(&args, &[]));
    assert_eq!((first["photos"].as_u64(), first["embedded"].as_u64()), (Some(6), Some(6)), "{first}");

    // Two new photos arrive; a nightly --incremental AWS Batch array job of two embeds only those.
    upload(&bucket, "lib/b0.jpg", photo.clone());
    upload(&bucket, "lib/b1.jpg", photo.clone());
    let mut nightly_args = args.to_vec();
    nightly_args.extend(["--incremental", "--task-count", "2"]);
    let nightly: Vec<Value> =
        (0..2).map(|i| summary(&run(&nightly_args, &[("AWS_BATCH_JOB_ARRAY_INDEX", i.to_string())]))).collect();
    let total = |field: &str| nightly.iter().map(|s| s[field].as_u64().unwrap()).sum::<u64>();
    assert_eq!((total("photos"), total("already_done")), (2, 6), "{nightly:?}");
    assert_eq!(nightly.iter().map(|s| s["task_index"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1]);

    let out = tempfile::tempdir().unwrap();
    let files = download(&format!("http://127.0.0.1:{port}"), "lib/embeddings", out.path());
    assert!(!files.is_empty() && files.iter().all(|f| f.ends_with(".parquet")), "{files:?}");
    let read = read_back(out.path());
    let mut keys: Vec<&str> = read["rows"].as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
    keys.sort_unstable();
    let mut expected: Vec<String> = (0..6).map(|i| format!("s3://photos/lib/a{i}.jpg")).collect();
    expected.extend(["s3://photos/lib/b0.jpg".into(), "s3://photos/lib/b1.jpg".into()]);
    assert_eq!(keys, expected);
    assert_eq!(read["duckdb"]["embedded"], 8);

    // Another model's embeddings never land beside these.
    let models = tempfile::tempdir().unwrap();
    let other = models.path().join("clip-other.onnx");
    std::fs::copy(setup_var("CLIPFN_TEST_MODEL"), &other).unwrap();
    let refused = run(&args, &[("CLIPFN_MODEL", other.display().to_string())]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a second model was let into the same --out");
    assert!(
        stderr.contains("'clip-test'") && stderr.contains("'clip-other'") && stderr.contains("another --out"),
        "{stderr}"
    );
}

/// The groups of `groups` (lists of keys or of indices into `names`) as sorted lists of file names.
fn named_groups(groups: &Value, name: impl Fn(&Value) -> String) -> Vec<Vec<String>> {
    let mut named: Vec<Vec<String>> =
        groups.as_array().unwrap().iter().map(|g| g.as_array().unwrap().iter().map(&name).collect()).collect();
    named.sort();
    named
}

#[test]
fn the_librarys_events_and_bursts_by_docs_queries_are_the_albums() {
    // Two days in two cities and, on the first, a burst of a moving cat and what follows it.
    let photos = tempfile::tempdir().unwrap();
    let trip = photos.path().join("trip");
    common::exif_photos("album", &trip);
    common::exif_photos("burst", &trip);
    let out = tempfile::tempdir().unwrap();
    let store = format!("file://{}", photos.path().display());
    let args = ["--source", &format!("{store}/trip/"), "--out", &format!("file://{}", out.path().display())];
    let done = summary(&backfill(0, &args, &[("CLIPFN_STORE", &store)]).output().unwrap());
    let mut names: Vec<String> =
        std::fs::read_dir(&trip).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(done["embedded"].as_u64(), Some(names.len() as u64), "{done}");
    // The test model is not CLIP: its burst frames agree at about 0.6 (tests/it/analyze.rs).
    let read = common::read_backfill(out.path(), &["similarity=0.5"]);
    let row = read["rows"].as_array().unwrap().iter().find(|r| r["key"].as_str().unwrap().ends_with("day2-0.jpg"));
    let row = row.unwrap();
    assert_eq!(
        (&row["taken_at"], &row["width"], &row["height"]),
        (&json!("2024-05-05T10:00:00+02:00"), &json!(320), &json!(240))
    );
    assert!((row["location"]["lat"].as_f64().unwrap() - 45.764).abs() < 0.001, "{row}");

    let server = ServerConfig::local(&trip).env("CLIPFN_BURST_SIMILARITY", "0.5").start();
    let (status, body) = server.post_json("/v1/analyze", &json!({ "images": names, "embedding": false }));
    assert_eq!(status, 200, "{body}");
    let file = |key: &Value| key.as_str().unwrap().rsplit('/').next().unwrap().to_string();
    let by_index = |i: &Value| names[i.as_u64().unwrap() as usize].clone();
    let album_events: Vec<Value> =
        body["album"]["events"].as_array().unwrap().iter().map(|e| e["photos"].clone()).collect();
    let album_bursts: Vec<Value> =
        body["album"]["bursts"].as_array().unwrap().iter().map(|b| b["photos"].clone()).collect();
    let events = named_groups(&read["duckdb"]["events"], file);
    assert_eq!(events, named_groups(&Value::Array(album_events), by_index));
    assert_eq!(events.len(), 2, "{events:?}");
    let bursts = named_groups(&read["duckdb"]["bursts"], file);
    assert_eq!(bursts, named_groups(&Value::Array(album_bursts), by_index));
    assert_eq!(bursts, [(0..5).map(|i| format!("burst-{i}.jpg")).collect::<Vec<_>>()]);
}

/// The real face stack (SCRFD-2.5G with the rebuilt dlib recognizer, on the real face photos) and
/// the YOLOv5-face format (the drawn-face model, on tools/draw_faces.py's photos) through backfill:
/// each row's faces are /v1/analyze's (boxes and scores, embeddings at cosine 0.9999, dlib's 128
/// values), and the files name the recognizer every face answer names.
#[test]
fn the_dlib_and_yolov5_face_formats_come_through_backfill() {
    let photos = tempfile::tempdir().unwrap();
    let real = photos.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let face_photos = PathBuf::from(setup_var("CLIPFN_TEST_FACE_PHOTOS"));
    for name in ["solvay_conference_1927.jpg", "newton.png", "obama.jpg", "coffee.png"] {
        std::fs::copy(face_photos.join(name), real.join(name)).unwrap();
    }
    let drawn = photos.path().join("drawn");
    let status = Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(common::repo().join("tools/draw_faces.py"))
        .arg(&drawn)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "tools/draw_faces.py");
    let store = format!("file://{}", photos.path().display());
    for (folder, set, recognizer, dim) in [
        ("CLIPFN_TEST_FACES_REAL", "real", "dlib:", 128),
        ("CLIPFN_TEST_FACES_YOLOV5_FACE_DRAWN", "drawn", "arcface:", 512),
    ] {
        let faces = setup_var(folder);
        let out = tempfile::tempdir().unwrap();
        let args = ["--source", &format!("{store}/{set}/"), "--out", &format!("file://{}", out.path().display())];
        let envs = [("CLIPFN_STORE", &*store), ("CLIPFN_FACE_MODEL", &faces)];
        let done = summary(&backfill(0, &args, &envs).output().unwrap());
        let read = read_back(out.path());
        let mut names: Vec<String> = std::fs::read_dir(photos.path().join(set))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| !name.ends_with(".json"))
            .collect();
        names.sort();
        assert_eq!(done["embedded"].as_u64(), Some(names.len() as u64), "{set}: {done}");

        let server = ServerConfig::local(&photos.path().join(set)).env("CLIPFN_FACE_MODEL", &faces).start();
        let (status, body) = server.post_json("/v1/analyze", &json!({ "images": names }));
        assert_eq!(status, 200, "{body}");
        let mut found = 0;
        for (i, name) in names.iter().enumerate() {
            let row = read["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["key"].as_str().unwrap().ends_with(&format!("/{name}")));
            let (row, api) = (row.unwrap_or_else(|| panic!("{set}: no row for {name}")), &body["data"][i]);
            let (row_faces, api_faces) = (row["faces"].as_array().unwrap(), api["faces"].as_array().unwrap());
            assert_eq!(row_faces.len(), api_faces.len(), "{set}/{name}");
            for (a, b) in row_faces.iter().zip(api_faces) {
                let close = |x: &Value, y: &Value| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-3;
                assert!(close(&a["score"], &b["score"]), "{set}/{name}: {a} {b}");
                assert!((0..4).all(|k| close(&a["box"][k], &b["box"][k])), "{set}/{name}: {a} {b}");
                assert!(b["recognizer"].as_str().unwrap().starts_with(recognizer), "{b}");
                let vector =
                    |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<_>>();
                let (ours, theirs) = (vector(&a["embedding"]), vector(&b["embedding"]));
                assert_eq!(ours.len(), dim, "{set}/{name}");
                assert!(cosine(&ours, &theirs) >= 0.9999, "{set}/{name}: cosine {}", cosine(&ours, &theirs));
                found += 1;
            }
        }
        assert!(found >= 4, "{set}: {found} faces");
        let id = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|item| item["faces"].as_array().into_iter().flatten())
            .next()
            .unwrap()["recognizer"]
            .clone();
        for file in read["files"].as_array().unwrap() {
            assert_eq!(file["face_recognizer"], id, "{set}: {file}");
        }
    }
}

#[test]
fn unreadable_manifest_or_unwritable_out_fails_the_task() {
    let photos = tempfile::tempdir().unwrap();
    std::fs::copy(&camera_photos(1)[0], photos.path().join("a.jpg")).unwrap();
    let store = format!("file://{}", photos.path().display());
    let manifest = photos.path().join("manifest.txt");
    std::fs::write(&manifest, "a.jpg\n").unwrap();
    let out = tempfile::tempdir().unwrap();
    let out_arg = out.path().display().to_string();
    let missing = photos.path().join("missing.txt");

    let env = [("CLIPFN_STORE", store.as_str())];
    let failed = backfill(0, &["--manifest", missing.to_str().unwrap(), "--out", &out_arg], &env).output().unwrap();
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("cannot read the listing"), "{failed:?}");

    // A regular file where the output folder should be: nothing can be written under it.
    let blocked = out.path().join("file");
    std::fs::write(&blocked, "").unwrap();
    let blocked_out = format!("file://{}/out", blocked.display());
    let failed =
        backfill(0, &["--manifest", manifest.to_str().unwrap(), "--out", &blocked_out], &env).output().unwrap();
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("cannot use --out"), "{failed:?}");
}
