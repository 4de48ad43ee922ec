//! Immich's machine-learning protocol over HTTP on loopback, against the real binary. The client
//! here sends what Immich v2.5.6's `machine-learning.repository.ts` sends (tests/it/common/immich.rs:
//! the multipart form, the same `entries` per task). Each answer is held to the shape Immich's TypeScript
//! types declare and to what clipfn's own API answers for the same photo or text.

use crate::common;

use std::path::Path;

use common::{
    ServerConfig, blocking_client, camera_photos, cosine, file_name,
    immich::{Part, content_type, form},
    scrape, series, setup_var, store_named,
};
use serde_json::{Value, json};

/// POST /predict with `body` as a multipart form: the status and the JSON answer.
fn predict(base: &str, body: Vec<u8>) -> (u16, Value) {
    let response = blocking_client()
        .post(format!("{base}/predict"))
        .header("content-type", content_type())
        .body(body)
        .send()
        .expect("request to clipfn");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn image_request(base: &str, entries: &Value, photo: &Path) -> (u16, Value) {
    let bytes = std::fs::read(photo).unwrap();
    predict(base, form(&[Part("entries", false, entries.to_string().as_bytes()), Part("image", true, &bytes)]))
}

/// An embedding as Immich reads it: a string holding a JSON array of numbers.
fn vector(value: &Value) -> Vec<f32> {
    let text = value.as_str().unwrap_or_else(|| panic!("an embedding string, got {value}"));
    serde_json::from_str(text).unwrap()
}

fn floats(value: &Value) -> Vec<f32> {
    value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect()
}

fn server(store: &Path) -> common::Server {
    ServerConfig::local(store)
        .env("CLIPFN_TEXT_MODEL", &setup_var("CLIPFN_TEST_TEXT_MODEL"))
        .env("CLIPFN_FACE_MODEL", &setup_var("CLIPFN_TEST_FACES_SCRFD"))
        .env("CLIPFN_FACE_SCORE_FLOOR", "0.5")
        .start()
}

/// Each task as Immich sends it, answered as its types declare and equal to clipfn's own answers:
/// `clip` (visual) to `/v1/embed`'s embedding, `facial-recognition` to `/v1/analyze`'s faces
/// (boxes rounded to pixels, as Immich ML rounds them), `clip` (textual) to `/v1/embed`'s texts.
#[test]
fn immichs_requests_get_clipfns_answers_in_immichs_shapes() {
    let photos = camera_photos(3);
    let store = store_named(&photos);
    let server = server(store.path());
    let base = &server.base;
    let ping = blocking_client().get(format!("{base}/ping")).send().unwrap();
    assert_eq!(ping.status(), 200);
    assert_eq!(ping.text().unwrap(), "pong");
    assert_eq!(server.get("/"), (200, json!({"message": "Immich ML"})));

    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, analyzed) = server.post_json("/v1/analyze", &json!({"images": keys}));
    assert_eq!(status, 200, "{analyzed}");
    // /v1/embed's, not /v1/analyze's: with faces asked the photo is decoded finer (for the
    // detector's canvas), which moves the square by a little.
    let (status, embedded) = server.embed(&keys);
    assert_eq!(status, 200, "{embedded}");
    let visual = json!({"clip": {"visual": {"modelName": "ViT-B-32__openai"}}});
    let faces = json!({"facial-recognition": {
        "detection": {"modelName": "buffalo_l", "options": {"minScore": 0.7}},
        "recognition": {"modelName": "buffalo_l"}
    }});
    let (mut found, mut lower) = (0, 0);
    for (i, photo) in photos.iter().enumerate() {
        let item = &analyzed["data"][i];
        let (width, height) = image::image_dimensions(photo).unwrap();
        let (status, answer) = image_request(base, &visual, photo);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            (answer["imageWidth"].as_u64(), answer["imageHeight"].as_u64()),
            (Some(width.into()), Some(height.into()))
        );
        let similarity = cosine(&vector(&answer["clip"]), &floats(&embedded["data"][i]["embedding"]));
        assert!(similarity >= 0.9999, "{}: cosine {similarity} to /v1/embed's", file_name(photo));

        let (status, answer) = image_request(base, &faces, photo);
        assert_eq!(status, 200, "{answer}");
        assert!(answer.get("clip").is_none(), "only the tasks asked: {answer}");
        let theirs = answer["facial-recognition"].as_array().unwrap();
        let ours = item["faces"].as_array().unwrap();
        assert_eq!(theirs.len(), ours.len(), "{}: {answer}", file_name(photo));
        for (theirs, ours) in theirs.iter().zip(ours) {
            let b = floats(&ours["box"]);
            let rounded = json!({"x1": b[0].round() as i64, "y1": b[1].round() as i64, "x2": b[2].round() as i64, "y2": b[3].round() as i64});
            assert_eq!(theirs["boundingBox"], rounded);
            assert!((theirs["score"].as_f64().unwrap() - ours["score"].as_f64().unwrap()).abs() < 1e-6);
            assert!(cosine(&vector(&theirs["embedding"]), &floats(&ours["embedding"])) >= 0.9999);
        }
        found += theirs.len();

        // A higher minScore keeps only the faces at or above it.
        let strict = json!({"facial-recognition": {
            "detection": {"modelName": "buffalo_l", "options": {"minScore": 0.9}},
            "recognition": {"modelName": "buffalo_l"}
        }});
        let (_, answer) = image_request(base, &strict, photo);
        let kept = ours.iter().filter(|f| f["score"].as_f64().unwrap() >= 0.9).count();
        assert_eq!(answer["facial-recognition"].as_array().unwrap().len(), kept, "{answer}");
        // A lower one, down to the floor (0.5 here), keeps more: the default's faces and then
        // those between.
        let lenient = json!({"facial-recognition": {
            "detection": {"modelName": "buffalo_l", "options": {"minScore": 0.5}},
            "recognition": {"modelName": "buffalo_l"}
        }});
        let (_, answer) = image_request(base, &lenient, photo);
        let more = answer["facial-recognition"].as_array().unwrap();
        let scores: Vec<f64> = more.iter().map(|f| f["score"].as_f64().unwrap()).collect();
        assert!(scores.iter().all(|&s| s >= 0.5) && more.len() >= ours.len(), "{answer}");
        assert_eq!(more.iter().filter(|f| f["score"].as_f64().unwrap() >= 0.7).count(), ours.len(), "{answer}");
        lower += more.len() - ours.len();
    }
    assert!(found > 0, "the test detector finds faces on the camera photos");
    assert!(lower > 0, "and faces scoring 0.5 to 0.7 too");

    let text = "a dog on the beach";
    let entries = json!({"clip": {"textual": {"modelName": "ViT-B-32__openai", "options": {"language": "en"}}}});
    let (status, answer) = predict(
        base,
        form(&[Part("entries", false, entries.to_string().as_bytes()), Part("text", false, text.as_bytes())]),
    );
    assert_eq!(status, 200, "{answer}");
    let (_, embedded) = server.post_json("/v1/embed", &json!({"texts": [text]}));
    assert!(cosine(&vector(&answer["clip"]), &floats(&embedded["data"][0]["embedding"])) >= 0.9999);
    assert!(answer.get("imageWidth").is_none(), "a text has no size: {answer}");
}

/// What Immich's client could send wrong, or a photo that cannot be read: each its status, and the
/// server answers the next good request.
#[test]
fn bad_forms_get_their_status_and_leave_the_server_serving() {
    let photos = camera_photos(1);
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path()).env("CLIPFN_MAX_IMAGE_BYTES", "2000000").start();
    let base = &server.base;
    let visual = json!({"clip": {"visual": {"modelName": "ViT-B-32__openai"}}}).to_string();
    let photo = std::fs::read(&photos[0]).unwrap();
    let garbage: Vec<u8> = (0..100_000u32).map(|i| b'!' + (i * 7919 % 90) as u8).collect();
    let big = vec![0xffu8; 3_000_000];
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("no entries", form(&[Part("image", true, &photo)]), 422, "bad_entries"),
        ("100 kB of garbage entries", form(&[Part("entries", false, &garbage), Part("image", true, &photo)]), 422, "bad_entries"),
        (
            "an entry without modelName",
            form(&[Part("entries", false, br#"{"clip": {"visual": {}}}"#), Part("image", true, &photo)]),
            422,
            "bad_entries",
        ),
        ("neither image nor text", form(&[Part("entries", false, visual.as_bytes())]), 400, "bad_request"),
        ("a photo that is no photo", form(&[Part("entries", false, visual.as_bytes()), Part("image", true, b"not a photo")]), 422, "unsupported_format"),
        ("a photo over the byte limit", form(&[Part("entries", false, visual.as_bytes()), Part("image", true, &big)]), 413, "too_large"),
        ("a text of invalid UTF-8", form(&[Part("entries", false, visual.as_bytes()), Part("text", false, b"\xff\xfe")]), 400, "bad_request"),
        (
            "faces on a server without face models",
            form(&[
                Part("entries", false, br#"{"facial-recognition": {"detection": {"modelName": "buffalo_l"}, "recognition": {"modelName": "buffalo_l"}}}"#),
                Part("image", true, &photo),
            ]),
            400,
            "bad_request",
        ),
        (
            "ocr on a server without OCR models",
            form(&[Part("entries", false, br#"{"ocr": {"detection": {"modelName": "PP-OCRv5_mobile"}}}"#), Part("image", true, &photo)]),
            400,
            "bad_request",
        ),
        (
            "a task clipfn does not do",
            form(&[Part("entries", false, br#"{"captioning": {"visual": {"modelName": "blip"}}}"#), Part("image", true, &photo)]),
            400,
            "bad_request",
        ),
        (
            "a text task without a text tower",
            form(&[Part("entries", false, br#"{"clip": {"textual": {"modelName": "ViT-B-32__openai"}}}"#), Part("text", false, b"dog")]),
            404,
            "text_model_not_configured",
        ),
    ];
    let mut messages = std::collections::BTreeMap::new();
    for (what, body, status, code) in cases {
        let (got, answer) = predict(base, body);
        assert_eq!((got, answer["error"]["code"].as_str()), (status, Some(code)), "{what}: {answer}");
        messages.insert(what, answer["error"]["message"].as_str().unwrap_or_default().to_string());
    }
    // The two 400s on tasks are told apart by their branch's message, not only their code.
    let (missing, unknown) = (&messages["ocr on a server without OCR models"], &messages["a task clipfn does not do"]);
    assert!(missing.contains("CLIPFN_OCR_MODEL"), "{missing}");
    assert!(unknown.contains("not captioning.visual") && !unknown.contains("CLIPFN_"), "{unknown}");
    let json_body = server.post_raw("/predict", br#"{"entries": {}}"#.to_vec());
    assert_eq!(json_body.0, 422, "a JSON body is not Immich's form: {}", json_body.1);

    let (status, answer) =
        image_request(base, &json!({"clip": {"visual": {"modelName": "another-model"}}}), &photos[0]);
    assert_eq!(status, 200, "a model name it does not hold is answered by the one held: {answer}");
    assert!(!vector(&answer["clip"]).is_empty());
    // /predict has its own label in the request counter.
    let metrics = common::scrape(&server);
    let predict = |code| common::series(&metrics, "clipfn_requests_total", &[("code", code), ("endpoint", "predict")]);
    assert_eq!((predict("ok"), predict("bad_entries")), (1.0, 4.0), "{metrics}");
}

/// `CLIPFN_MODEL` pointing into Immich's model cache (`clip/ViT-B-32__openai`): requests naming
/// that folder are answered by it without a word in the log; one naming another model is answered
/// by the one held, and the log names both.
#[test]
fn a_model_from_immichs_cache_answers_by_its_folder_name() {
    let photos = camera_photos(1);
    let store = store_named(&photos);
    let log = tempfile::NamedTempFile::new().unwrap();
    let folder = setup_var("CLIPFN_TEST_IMMICH_CLIP");
    let server = ServerConfig::local(store.path()).env("CLIPFN_MODEL", &folder).stderr_to(log.path()).start();
    let base = &server.base;
    let text_request = |model: &str| {
        let entries = json!({"clip": {"textual": {"modelName": model}}});
        predict(base, form(&[Part("entries", false, entries.to_string().as_bytes()), Part("text", false, b"a cat")]))
    };
    let (status, held) = text_request("immich-app/ViT-B-32__openai");
    assert_eq!(status, 200, "{held}");
    let (status, answer) =
        image_request(base, &json!({"clip": {"visual": {"modelName": "ViT-B-32__openai"}}}), &photos[0]);
    assert_eq!(status, 200, "{answer}");
    let (_, embedded) = server.embed(&[file_name(&photos[0])]);
    assert!(cosine(&vector(&answer["clip"]), &floats(&embedded["data"][0]["embedding"])) >= 0.9999);
    let quiet = std::fs::read_to_string(log.path()).unwrap();
    assert!(!quiet.contains("does not hold"), "the held model's name was warned about: {quiet}");

    let (status, other) = text_request("ViT-L-14__openai");
    assert_eq!(status, 200, "{other}");
    assert_eq!(vector(&other["clip"]), vector(&held["clip"]), "another name is answered by the held model");
    drop(server);
    let warned = std::fs::read_to_string(log.path()).unwrap();
    let line = warned.lines().find(|l| l.contains("does not hold")).unwrap_or_else(|| panic!("no warning: {warned}"));
    assert!(line.contains("ViT-L-14__openai") && line.contains("held") && line.contains("ViT-B-32__openai"), "{line}");
}

/// The `ocr` task as Immich sends it (its server's defaults: detection `minScore` 0.5,
/// `maxResolution` 736, recognition `minScore` 0.8) on PP-OCRv4's real weights: the lines of
/// `/v1/analyze` at or over 0.8, as four lists, each box's eight numbers as fractions of the
/// upright photo; a recognition `minScore` of 0.99 keeps only the lines at or over it; a form
/// with detection and no recognition is a 400.
#[test]
fn immichs_ocr_task_gets_the_analyzed_lines_in_immichs_shape() {
    let photos: Vec<std::path::PathBuf> = ["sign.jpg", "colours.png", "notext.jpg"]
        .iter()
        .map(|name| Path::new(&setup_var("CLIPFN_TEST_OCR_PHOTOS")).join(name))
        .collect();
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path()).env("CLIPFN_OCR_MODEL", &setup_var("CLIPFN_TEST_OCR")).start();
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, analyzed) = server.post_json("/v1/analyze", &json!({"images": keys, "embedding": false}));
    assert_eq!(status, 200, "{analyzed}");
    let ocr = |min: f64| {
        json!({"ocr": {
            "detection": {"modelName": "PP-OCRv5_mobile", "options": {"minScore": 0.5, "maxResolution": 736}},
            "recognition": {"modelName": "PP-OCRv5_mobile", "options": {"minScore": min}}
        }})
    };
    let mut lines = 0;
    for (i, photo) in photos.iter().enumerate() {
        let item = &analyzed["data"][i];
        let (width, height) = (item["width"].as_f64().unwrap(), item["height"].as_f64().unwrap());
        for min in [0.8, 0.99] {
            let (status, answer) = image_request(&server.base, &ocr(min), photo);
            assert_eq!(status, 200, "{answer}");
            let kept: Vec<&Value> =
                item["ocr"].as_array().unwrap().iter().filter(|l| l["score"].as_f64().unwrap() >= min).collect();
            let theirs = &answer["ocr"];
            let texts: Vec<&Value> = kept.iter().map(|l| &l["text"]).collect();
            assert_eq!(theirs["text"].as_array().unwrap().iter().collect::<Vec<_>>(), texts, "{answer}");
            let boxes: Vec<f64> = kept
                .iter()
                .flat_map(|l| l["box"].as_array().unwrap().clone())
                .flat_map(|p| [p[0].as_f64().unwrap() / width, p[1].as_f64().unwrap() / height])
                .collect();
            let given = floats(&theirs["box"]);
            assert_eq!(given.len(), boxes.len(), "{answer}");
            assert!(given.iter().zip(&boxes).all(|(a, b)| (f64::from(*a) - b).abs() < 1e-5), "{answer}");
            for (key, field) in [("textScore", "score"), ("boxScore", "box_score")] {
                let want: Vec<f32> = kept.iter().map(|l| l[field].as_f64().unwrap() as f32).collect();
                assert_eq!(floats(&theirs[key]), want, "{key}: {answer}");
            }
            lines += kept.len();
        }
    }
    assert!(lines >= 6, "the photos hold lines over 0.8: {lines}");
    // A detection minScore of the request's own, above Immich's default, keeps the lines whose box
    // scores reach it: a threshold between the analyzed lines' box scores, so some go and some stay.
    let mut box_scores: Vec<f64> = (0..photos.len())
        .flat_map(|i| analyzed["data"][i]["ocr"].as_array().unwrap().clone())
        .filter(|l| l["score"].as_f64().unwrap() >= 0.8)
        .map(|l| l["box_score"].as_f64().unwrap())
        .collect();
    box_scores.sort_by(f64::total_cmp);
    let middle = box_scores.len() / 2;
    assert!(middle >= 1 && box_scores[middle - 1] < box_scores[middle], "{box_scores:?}");
    let threshold = (box_scores[middle - 1] + box_scores[middle]) / 2.0;
    let strict = json!({"ocr": {
        "detection": {"modelName": "PP-OCRv5_mobile", "options": {"minScore": threshold, "maxResolution": 736}},
        "recognition": {"modelName": "PP-OCRv5_mobile", "options": {"minScore": 0.8}}
    }});
    let (mut kept_all, mut given_all) = (0, 0);
    for (i, photo) in photos.iter().enumerate() {
        let (status, answer) = image_request(&server.base, &strict, photo);
        assert_eq!(status, 200, "{answer}");
        let kept: Vec<&Value> = analyzed["data"][i]["ocr"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["score"].as_f64().unwrap() >= 0.8 && l["box_score"].as_f64().unwrap() >= threshold)
            .map(|l| &l["text"])
            .collect();
        let given: Vec<&Value> = answer["ocr"]["text"].as_array().unwrap().iter().collect();
        assert_eq!(given, kept, "minScore {threshold}: {answer}");
        for score in floats(&answer["ocr"]["boxScore"]) {
            assert!(f64::from(score) >= threshold - 1e-6, "{score} under {threshold}: {answer}");
        }
        (kept_all, given_all) = (kept_all + kept.len(), given_all + given.len());
    }
    assert!(
        given_all == kept_all && given_all >= 1 && given_all < box_scores.len(),
        "{given_all} of {}",
        box_scores.len()
    );
    let half = json!({"ocr": {"detection": {"modelName": "PP-OCRv5_mobile"}}});
    let (status, answer) = image_request(&server.base, &half, &photos[0]);
    assert_eq!(status, 400, "{answer}");
}

/// A face-only or OCR-only job needs no CLIP embedding: the image tower runs no batch for it
/// (`clipfn_batch_size_photos` and the `inference` stage stay where they were), while the face or
/// text detector runs; a `clip.visual` job still runs it.
#[test]
fn face_and_ocr_jobs_never_run_the_image_tower() {
    let photos = [
        Path::new(&setup_var("CLIPFN_TEST_FACE_PHOTOS")).join("obama.jpg"),
        Path::new(&setup_var("CLIPFN_TEST_OCR_PHOTOS")).join("sign.jpg"),
    ];
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_FACE_MODEL", &setup_var("CLIPFN_TEST_FACES_SCRFD"))
        .env("CLIPFN_OCR_MODEL", &setup_var("CLIPFN_TEST_OCR"))
        .start();
    let faces = json!({"facial-recognition": {
        "detection": {"modelName": "buffalo_l"}, "recognition": {"modelName": "buffalo_l"}
    }});
    let ocr = json!({"ocr": {
        "detection": {"modelName": "PP-OCRv5_mobile"}, "recognition": {"modelName": "PP-OCRv5_mobile"}
    }});
    let visual = json!({"clip": {"visual": {"modelName": "ViT-B-32__openai"}}});
    let stage = |text: &str, stage: &str| series(text, "clipfn_stage_duration_seconds_count", &[("stage", stage)]);
    let photos_embedded = |text: &str| series(text, "clipfn_batch_size_photos_sum", &[]);
    for (entries, detector) in [(&faces, "face_detection"), (&ocr, "text_detection")] {
        for photo in &photos {
            let before = scrape(&server);
            let (status, answer) = image_request(&server.base, entries, photo);
            assert_eq!(status, 200, "{answer}");
            assert!(answer.get("clip").is_none(), "{answer}");
            let after = scrape(&server);
            assert_eq!(stage(&after, detector) - stage(&before, detector), 1.0, "{entries}: the detector ran");
            assert_eq!(stage(&after, "inference"), stage(&before, "inference"), "{entries}: an image batch ran");
            assert_eq!(stage(&after, "queue"), stage(&before, "queue"), "{entries}: a photo queued for it");
            assert_eq!(photos_embedded(&after), photos_embedded(&before), "{entries}");
        }
    }
    let before = scrape(&server);
    let both = json!({"clip": visual["clip"], "facial-recognition": faces["facial-recognition"]});
    let (status, answer) = image_request(&server.base, &both, &photos[0]);
    assert_eq!(status, 200, "{answer}");
    assert!(!vector(&answer["clip"]).is_empty(), "{answer}");
    let after = scrape(&server);
    assert_eq!(photos_embedded(&after) - photos_embedded(&before), 1.0, "clip.visual's photo is embedded");
    assert_eq!(stage(&after, "face_detection") - stage(&before, "face_detection"), 1.0);
}
