//! The Lambda path: every sample event in events/ replayed through `clipfn replay`, and the real
//! binary serving invocations from a Lambda Runtime API peer on loopback.

use crate::common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use clipfn::hosts::replay::Expectation;
use common::{Object, Proc, RuntimeApi, camera_photos, with_settings};
use serde_json::{Value, json};

/// The local store the sample events refer to: sample/photo-{1,2,3}.jpg.
fn sample_store() -> tempfile::TempDir {
    common::store(
        camera_photos(3)
            .into_iter()
            .enumerate()
            .map(|(i, photo)| (format!("sample/photo-{}.jpg", i + 1), Object::Copy(photo))),
    )
}

fn clipfn(store: &Path) -> Command {
    with_settings(Command::new(env!("CARGO_BIN_EXE_clipfn")), store)
}

/// Checks a gateway response against the expectation kept next to the event, as `clipfn replay`
/// does.
fn check(event: &Path, response: &Value) {
    let expectation = Expectation::for_event(event).unwrap().expect("every sample event has an expectation");
    if let Err(mismatch) = expectation.check(response) {
        panic!("{}: {mismatch}: {response}", event.display());
    }
}

fn sample_events() -> Vec<PathBuf> {
    let mut events: Vec<PathBuf> = std::fs::read_dir(common::repo().join("events"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.to_str().unwrap().ends_with(".expect.json"))
        .collect();
    events.sort();
    assert!(events.len() >= 10, "events/ lost its samples");
    events
}

/// The replay lines printed on stdout.
fn lines(stdout: Vec<u8>) -> Vec<Value> {
    String::from_utf8(stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_readme_replay_command_checks_every_sample_event() {
    let store = sample_store();
    // Exactly as README gives it, from the repository root: the shell's glob also names the
    // NAME.expect.json files.
    let bin = Path::new(env!("CARGO_BIN_EXE_clipfn")).parent().unwrap();
    let output = with_settings(Command::new("sh"), store.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .current_dir(common::repo())
        .args(["-c", "clipfn replay events/*.json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "replay failed: {}", String::from_utf8_lossy(&output.stderr));
    let mut replayed: Vec<String> = lines(output.stdout)
        .iter()
        .map(|line| {
            assert_eq!(line["check"], "pass", "{line}");
            line["file"].as_str().unwrap().to_string()
        })
        .collect();
    replayed.sort();
    let events: Vec<String> =
        sample_events().iter().map(|e| e.strip_prefix(common::repo()).unwrap().display().to_string()).collect();
    assert_eq!(replayed, events, "one line per event, none for expectation files");
}

#[test]
fn replay_fails_when_an_event_misses_its_expectation() {
    let store = sample_store();
    let dir = tempfile::tempdir().unwrap();
    let events = common::repo().join("events");
    std::fs::copy(events.join("body-embed-one-bad.json"), dir.path().join("one-bad.json")).unwrap();
    std::fs::write(dir.path().join("one-bad.expect.json"), r#"{"status": 200, "items": ["ok", "ok", "ok"]}"#).unwrap();
    std::fs::copy(events.join("body-embed-good.json"), dir.path().join("good.json")).unwrap();
    let output = clipfn(store.path())
        .arg("replay")
        .args([dir.path().join("good.json"), dir.path().join("one-bad.json")])
        .output()
        .unwrap();
    assert!(!output.status.success(), "a failed expectation must fail the replay");
    let lines = lines(output.stdout);
    assert_eq!(lines[0]["check"], "none", "good.json has no expectation: {}", lines[0]);
    assert_eq!(lines[1]["check"], "fail", "{}", lines[1]);
    assert!(lines[1]["mismatch"].as_str().unwrap().contains("not_found"), "{}", lines[1]);
}

#[test]
fn serves_invocations_from_a_lambda_runtime_api_peer() {
    let store = sample_store();
    let events_dir = common::repo().join("events");
    let invocations = ["apigw-v1-embed-good", "apigw-v2-embed-one-bad", "apigw-v1-embed-malformed", "apigw-v2-readyz"];
    let runtime_api = RuntimeApi::start(invocations.iter().map(|name| {
        let text = std::fs::read_to_string(events_dir.join(format!("{name}.json"))).unwrap();
        (name.to_string(), serde_json::from_str::<Value>(&text).unwrap())
    }));

    let child = runtime_api.function_env(clipfn(store.path()).arg("serve")).stdout(Stdio::null()).spawn().unwrap();
    let _function = Proc(child);

    for name in invocations {
        let answer = runtime_api.answer(Duration::from_secs(60));
        assert_eq!((answer.id.as_str(), answer.kind), (name, "response"), "{}", answer.body);
        check(&events_dir.join(format!("{name}.json")), &answer.body);
    }
}

/// The sample `/v1/analyze` event replayed with `setting` (a model folder) set: its answer's body.
fn analyze_by_replay(setting: (&str, &str)) -> Value {
    let store = sample_store();
    let output = clipfn(store.path())
        .env(setting.0, common::setup_var(setting.1))
        .arg("replay")
        .arg(common::repo().join("events/apigw-v2-analyze-one-bad.json"))
        .output()
        .unwrap();
    assert!(output.status.success(), "replay failed: {}", String::from_utf8_lossy(&output.stderr));
    let line = &lines(output.stdout)[0];
    serde_json::from_str(line["response"]["body"].as_str().unwrap()).unwrap()
}

/// `/v1/analyze` with faces through the Lambda path: the same router, so the same faces and people.
#[test]
fn faces_come_through_replay() {
    let body = analyze_by_replay(("CLIPFN_FACE_MODEL", "CLIPFN_TEST_FACES_SCRFD"));
    assert!(body["data"][0]["faces"].is_array() && body["data"][2]["faces"].is_array(), "{body}");
    assert!(body["data"][1].get("faces").is_none() && body["data"][1]["error"].is_object(), "{body}");
    assert!(body["album"]["people"].is_array(), "{body}");
}

/// `/v1/analyze` with OCR through the Lambda path: each photo's lines (the sample camera photos
/// hold none readable), none for the missing one.
#[test]
fn ocr_comes_through_replay() {
    let body = analyze_by_replay(("CLIPFN_OCR_MODEL", "CLIPFN_TEST_OCR"));
    assert!(body["data"][0]["ocr"].is_array() && body["data"][2]["ocr"].is_array(), "{body}");
    assert!(body["data"][1].get("ocr").is_none() && body["data"][1]["error"].is_object(), "{body}");
}

/// `/v1/analyze` with objects through the Lambda path: each photo's objects (and the album's pets),
/// none for the missing one.
#[test]
fn objects_come_through_replay() {
    let body = analyze_by_replay(("CLIPFN_OBJECT_MODEL", "CLIPFN_TEST_OBJECTS"));
    assert!(body["data"][0]["objects"].is_array() && body["data"][2]["objects"].is_array(), "{body}");
    assert!(body["data"][1].get("objects").is_none() && body["data"][1]["error"].is_object(), "{body}");
    assert!(body["album"]["pets"].is_array(), "{body}");
}

// ---- /v1/analyze's album through the Lambda path, against plain HTTP -------------------------

/// `body` as an HTTP API (v2) event for POST /v1/analyze: the sample analyze event with its body
/// replaced.
fn analyze_event(body: &Value) -> Value {
    let text = std::fs::read_to_string(common::repo().join("events/apigw-v2-analyze-one-bad.json")).unwrap();
    let mut event: Value = serde_json::from_str(&text).unwrap();
    event["body"] = Value::String(body.to_string());
    event
}

/// The JSON body of a gateway response, which must be a 200.
fn gateway_body(response: &Value) -> Value {
    assert_eq!(response["statusCode"], 200, "{response}");
    assert_ne!(response["isBase64Encoded"], true, "{response}");
    serde_json::from_str(response["body"].as_str().unwrap()).unwrap()
}

/// `bodies` posted to /v1/analyze over HTTP, by `clipfn replay` and as invocations of `clipfn
/// serve` as a Lambda function, each way one process serving `store` with `envs`: the answers'
/// bodies, `[http, replay, lambda]` for each body.
fn analyze_three_ways(store: &Path, envs: &[(&str, String)], bodies: &[Value]) -> Vec<[Value; 3]> {
    // The same batches every way: with_settings' 4 over ServerConfig::local's 8.
    let server = envs
        .iter()
        .fold(common::ServerConfig::local(store).env("CLIPFN_BATCH_SIZE", "4"), |config, (k, v)| config.env(k, v))
        .start();
    let over_http = bodies.iter().map(|body| {
        let (status, answer) = server.post_json("/v1/analyze", body);
        assert_eq!(status, 200, "{answer}");
        answer
    });
    let over_http: Vec<Value> = over_http.collect();

    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = bodies
        .iter()
        .enumerate()
        .map(|(n, body)| {
            let file = dir.path().join(format!("analyze-{n}.json"));
            std::fs::write(&file, analyze_event(body).to_string()).unwrap();
            file
        })
        .collect();
    let output = clipfn(store).envs(envs.iter().map(|(k, v)| (k, v))).arg("replay").args(&files).output().unwrap();
    assert!(output.status.success(), "replay failed: {}", String::from_utf8_lossy(&output.stderr));
    let replayed: Vec<Value> = lines(output.stdout).iter().map(|line| gateway_body(&line["response"])).collect();
    assert_eq!(replayed.len(), bodies.len());

    let runtime_api =
        RuntimeApi::start(bodies.iter().enumerate().map(|(n, body)| (format!("analyze-{n}"), analyze_event(body))));
    let mut command = clipfn(store);
    command.envs(envs.iter().map(|(k, v)| (k, v))).arg("serve").stdout(Stdio::null());
    let _function = Proc(runtime_api.function_env(&mut command).spawn().unwrap());
    let invoked = (0..bodies.len()).map(|n| {
        let answer = runtime_api.response(Duration::from_secs(120));
        assert_eq!(answer.id, format!("analyze-{n}"));
        gateway_body(&answer.body)
    });
    let invoked: Vec<Value> = invoked.collect();

    over_http.into_iter().zip(replayed).zip(invoked).map(|((http, replay), lambda)| [http, replay, lambda]).collect()
}

/// Holds each photo's metadata and the album's groupings of `other` (the answer of `path`) to
/// `http`'s: equal, field by field.
fn same_album(http: &Value, other: &Value, path: &str) {
    let (ours, theirs) = (http["data"].as_array().unwrap(), other["data"].as_array().unwrap());
    assert_eq!(ours.len(), theirs.len(), "{path}: {other}");
    for (a, b) in ours.iter().zip(theirs) {
        for field in ["index", "image", "error", "taken_at", "location", "width", "height", "hash", "quality"] {
            assert_eq!(a.get(field), b.get(field), "{path}, photo {}: {field}", a["index"]);
        }
    }
    for part in ["duplicates", "bursts", "events", "cover"] {
        assert_eq!(http["album"].get(part), other["album"].get(part), "{path}: album.{part}");
    }
}

/// `/v1/analyze` through the Lambda path (`clipfn replay` and a Lambda function) answers what plain
/// HTTP does on photos with EXIF times and places (tools/exif_reference.py's album: two days in two
/// cities, and its burst): each photo's `taken_at`, `location`, `width` and `height`, and the
/// album's events, bursts, duplicates and cover; and those are what the photos were written with.
#[test]
fn the_album_through_lambda_and_replay_is_the_album_over_http() {
    let folder = tempfile::tempdir().unwrap();
    common::exif_photos("album", folder.path());
    common::exif_photos("burst", folder.path());
    let album = ["day2-3.jpg", "day1-0.jpg", "untimed.jpg", "day1-4.jpg", "day2-0.jpg", "day1-2.jpg", "day2-4.jpg"];
    let album: Vec<&str> = album.into_iter().chain(["day1-1.jpg", "day2-1.jpg", "day2-2.jpg", "day1-3.jpg"]).collect();
    let burst = ["other.jpg", "burst-3.jpg", "later.jpg", "burst-0.jpg", "burst-4.jpg", "burst-1.jpg", "burst-2.jpg"];
    let names = album.iter().chain(&burst);
    let store = common::store(names.map(|name| (format!("album/{name}"), Object::Copy(folder.path().join(name)))));
    let keys = |names: &[&str]| names.iter().map(|name| format!("album/{name}")).collect::<Vec<_>>();
    let bodies = [json!({ "images": keys(&album) }), json!({ "images": keys(&burst) })];
    // The test model's frames of one scene agree at a cosine of about 0.6 to 0.8 (tests/it/analyze.rs).
    let envs = [("CLIPFN_BURST_SIMILARITY", "0.5".to_string())];
    let answers = analyze_three_ways(store.path(), &envs, &bodies);

    for ([http, replay, lambda], names) in answers.iter().zip([&album[..], &burst[..]]) {
        same_album(http, replay, "replay");
        same_album(http, lambda, "lambda");
        let index = |name: &str| names.iter().position(|n| *n == name).unwrap();
        // What the photos were written with (tools/exif_reference.py): so that three answers
        // that agree on nothing read count for nothing.
        for answer in [http, replay, lambda] {
            let item = |name: &str| &answer["data"][index(name)];
            if names.contains(&"day1-0.jpg") {
                let dms = |d: f64, m: f64, s: f64| d + m / 60.0 + s / 3600.0;
                let cities =
                    [(4, dms(48.0, 51.0, 24.0), dms(2.0, 21.0, 8.0)), (5, dms(45.0, 45.0, 51.0), dms(4.0, 50.0, 2.0))];
                for (day, lat, lon) in cities {
                    for hour in 0..5 {
                        let photo = item(&format!("day{}-{hour}.jpg", day - 3));
                        assert_eq!(
                            photo["taken_at"],
                            format!("2024-05-0{day}T{:02}:00:00+02:00", 10 + hour),
                            "{photo}"
                        );
                        let location = &photo["location"];
                        assert!((location["lat"].as_f64().unwrap() - lat).abs() < 1e-9, "{photo}");
                        assert!((location["lon"].as_f64().unwrap() - lon).abs() < 1e-9, "{photo}");
                        assert_eq!((&photo["width"], &photo["height"]), (&json!(320 + hour), &json!(240)), "{photo}");
                    }
                }
                let untimed = item("untimed.jpg").as_object().unwrap();
                assert!(!untimed.contains_key("taken_at") && !untimed.contains_key("location"), "{untimed:?}");
                assert_eq!((&untimed["width"], &untimed["height"]), (&json!(64), &json!(48)));
                let events = answer["album"]["events"].as_array().unwrap();
                assert_eq!(events.len(), 2, "{}", answer["album"]);
                for (event, day) in events.iter().zip(["day1", "day2"]) {
                    let expected: Vec<usize> = (0..5).map(|hour| index(&format!("{day}-{hour}.jpg"))).collect();
                    assert_eq!(event["photos"], json!(expected), "{event}");
                }
            } else {
                for i in 0..5 {
                    let ms = 100 + 350 * i;
                    let when = format!("2024-05-04T12:00:{:02}.{:03}+02:00", ms / 1000, ms % 1000);
                    assert_eq!(item(&format!("burst-{i}.jpg"))["taken_at"], when);
                }
                let bursts = answer["album"]["bursts"].as_array().unwrap();
                let frames: Vec<usize> = (0..5).map(|i| index(&format!("burst-{i}.jpg"))).collect();
                assert_eq!(bursts.len(), 1, "{}", answer["album"]);
                assert_eq!(bursts[0]["photos"], json!(frames), "{}", answer["album"]);
                let best = bursts[0]["best"].as_u64().unwrap() as usize;
                assert!(frames.contains(&best), "{}", answer["album"]);
                let cover = answer["album"]["cover"].as_u64().unwrap() as usize;
                assert!([best, index("other.jpg"), index("later.jpg")].contains(&cover), "{}", answer["album"]);
            }
        }
    }
}

/// The real face stack (SCRFD-2.5G with the rebuilt dlib recognizer, on the real face photos) and
/// the YOLOv5-face format (the drawn-face model, on tools/draw_faces.py's photos) through the
/// Lambda path: `clipfn replay` and a Lambda function answer the faces, their recognizer and the
/// people plain HTTP answers.
#[test]
fn the_dlib_and_yolov5_face_formats_through_lambda_and_replay_are_the_faces_over_http() {
    let drawn = tempfile::tempdir().unwrap();
    common::python_json("draw_faces.py", &[drawn.path().to_str().unwrap()], &[], None);
    let real = PathBuf::from(common::setup_var("CLIPFN_TEST_FACE_PHOTOS"));
    let sets = [
        ("CLIPFN_TEST_FACES_REAL", real.as_path(), ["newton.png", "obama.jpg", "obama2.jpg", "coffee.png"], "dlib:"),
        (
            "CLIPFN_TEST_FACES_YOLOV5_FACE_DRAWN",
            drawn.path(),
            ["drawn-row.png", "drawn-large.jpg", "drawn-turned-6.jpg", "drawn-empty.png"],
            "arcface:",
        ),
    ];
    for (folder, photos, names, recognizer) in sets {
        let store = common::store(names.iter().map(|name| (*name, Object::Copy(photos.join(name)))));
        let envs = [("CLIPFN_FACE_MODEL", common::setup_var(folder))];
        let [[http, replay, lambda]] =
            analyze_three_ways(store.path(), &envs, &[json!({ "images": names })]).try_into().unwrap();
        let faces = |answer: &Value| -> Vec<Value> {
            answer["data"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|item| item["faces"].as_array().unwrap().clone())
                .collect()
        };
        assert!(faces(&http).len() >= 3, "{folder}: {http}");
        assert!(faces(&http).iter().all(|face| face["recognizer"].as_str().unwrap().starts_with(recognizer)));
        // The recognizer batches faces as they come, so a face's embedding may differ in its last bits.
        let numbers = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect::<Vec<_>>();
        let members = |answer: &Value| -> Vec<Value> {
            answer["album"]["people"].as_array().unwrap().iter().map(|person| person["faces"].clone()).collect()
        };
        for (other, path) in [(&replay, "replay"), (&lambda, "lambda")] {
            let (ours, theirs) = (faces(&http), faces(other));
            assert_eq!(ours.len(), theirs.len(), "{folder}: {path}");
            for (a, b) in ours.iter().zip(&theirs) {
                assert_eq!((&a["recognizer"], &a["box"], &a["score"]), (&b["recognizer"], &b["box"], &b["score"]));
                let cosine: f64 =
                    numbers(&a["embedding"]).iter().zip(numbers(&b["embedding"])).map(|(x, y)| x * y).sum();
                assert!(cosine >= 0.9999, "{folder}: {path}: cosine {cosine}");
            }
            assert_eq!(members(&http), members(other), "{folder}: {path}'s people");
        }
    }
}

/// `known_people` through the Lambda path: the people of an album of drawn faces (tools/
/// draw_faces.py), sent back with their exemplars and the recognizer's id, name the next album's
/// faces as plain HTTP names them, by replay and as a Lambda function alike.
#[test]
fn known_people_through_lambda_and_replay_are_the_people_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    common::python_json("draw_faces.py", &[out], &[], None);
    common::python_json("draw_faces.py", &[out, "twins"], &[], None);
    // Persons 0 to 3 in the first album; 2, 3 and 0 in the next (the twins photo: 0 and 3 twice).
    let first = ["drawn-row.png", "drawn-large.jpg"];
    let next = ["drawn-turned-1.jpg", "drawn-turned-6.jpg", "drawn-twins.png"];
    let store = common::store(first.iter().chain(&next).map(|name| (*name, Object::Copy(dir.path().join(name)))));
    let envs = [("CLIPFN_FACE_MODEL", common::setup_var("CLIPFN_TEST_FACES_SCRFD_DRAWN"))];
    let server = envs.iter().fold(common::ServerConfig::local(store.path()), |c, (k, v)| c.env(k, v)).start();
    let (status, album) = server.post_json("/v1/analyze", &json!({ "images": first }));
    assert_eq!(status, 200, "{album}");
    let embedding = |f: &Value| {
        album["data"][f[0].as_u64().unwrap() as usize]["faces"][f[1].as_u64().unwrap() as usize]["embedding"].clone()
    };
    let known: Vec<Value> = album["album"]["people"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(k, person)| {
            let exemplars: Vec<Value> = person["exemplars"].as_array().unwrap().iter().map(embedding).collect();
            json!({ "id": format!("p-{k}"), "embeddings": exemplars })
        })
        .collect();
    assert_eq!(known.len(), 4, "{}", album["album"]);
    let recognizer = album["data"][0]["faces"][0]["recognizer"].clone();
    let body = json!({ "images": next, "known_people": known, "recognizer": recognizer });

    let [http, replay, lambda] = analyze_three_ways(store.path(), &envs, &[body]).remove(0);
    let people = |answer: &Value| -> Vec<Value> {
        let people = answer["album"]["people"].as_array().unwrap_or_else(|| panic!("{answer}"));
        people
            .iter()
            .map(|p| {
                let maybe = p.get("maybe").map(|m| m["id"].clone());
                json!([p.get("id"), p["faces"], p["representative"], p["exemplars"], maybe])
            })
            .collect()
    };
    for (path, other) in [("replay", &replay), ("lambda", &lambda)] {
        assert_eq!(people(&http), people(other), "{path}'s people: {}", other["album"]);
        assert_eq!(http["album"]["unsure"], other["album"]["unsure"], "{path}");
        for (a, b) in http["data"].as_array().unwrap().iter().zip(other["data"].as_array().unwrap()) {
            assert_eq!(a["faces"].as_array().map(Vec::len), b["faces"].as_array().map(Vec::len), "{path}: {b}");
        }
    }
    // The three persons drawn in the next album are known: three ids, each on one person.
    let mut ids: Vec<&str> =
        http["album"]["people"].as_array().unwrap().iter().filter_map(|p| p.get("id")?.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "{}", http["album"]);
}
