//! Objects in photos (issue 50), end to end over HTTP on loopback.
//!
//! - The real CenterNet from `@vladmandic/human` 3.3.6 on npm (`CLIPFN_TEST_OBJECTS`, made by
//!   tools/setup-objects.sh) against Human's own JavaScript on the same pixels
//!   (tools/objects/reference.cjs under node, tfjs-backend-cpu): scikit-image's photos, the face
//!   photos and the wallpapers.
//! - A generated YOLO-format detector (`CLIPFN_TEST_OBJECTS_YOLO`, tools/models/objects.py) on
//!   drawn photos whose answers are known (tools/draw_objects.py): the letterbox's geometry, the
//!   folder's class names and the cap on a photo of noise.
//! - Models refused at start-up: outputs of neither format, a class file of the wrong length.

use crate::common;

use std::path::{Path, PathBuf};

use clipfn::decode::{DecodeOptions, decode};
use common::{Server, ServerConfig, file_name, setup_var, store_named};
use serde_json::{Value, json};

fn photos_in(folder: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut photos: Vec<PathBuf> = std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "jpg" || e == "png") && keep(file_name(path)))
        .collect();
    photos.sort();
    photos
}

fn analyze(server: &Server, photos: &[PathBuf]) -> Vec<Value> {
    analyzed(server, photos).iter().map(|item| item["objects"].clone()).collect()
}

/// Each photo's item of `/v1/analyze`, every one with its `objects`.
fn analyzed(server: &Server, photos: &[PathBuf]) -> Vec<Value> {
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, body) = server.post_json("/v1/analyze", &json!({ "images": keys, "embedding": false }));
    assert_eq!(status, 200, "{body}");
    keys.iter()
        .enumerate()
        .map(|(i, _)| body["data"][i].clone())
        .inspect(|item| assert!(item["objects"].is_array(), "{keys:?}: {body}"))
        .collect()
}

/// `[x1, y1, x2, y2]` boxes' intersection over union.
fn iou(a: [f64; 4], b: [f64; 4]) -> f64 {
    let inter = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0) * (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let area = |r: [f64; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    inter / (area(a) + area(b) - inter)
}

fn boxed(value: &Value) -> [f64; 4] {
    let v: Vec<f64> = value.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    [v[0], v[1], v[2], v[3]]
}

/// A photo's objects as Human gives them (label, score, box `[x1, y1, x2, y2]`), and the
/// full-size photo's pixels per pixel it was given.
type Detected = (Vec<(String, f64, [f64; 4])>, (f64, f64));

/// Human's detections of each photo, on the pixels clipfn decodes it to for the object view (a
/// large JPEG at a DCT scale: docs/objects.md, "Pixels").
fn human(photos: &[PathBuf]) -> Vec<Detected> {
    let scratch = tempfile::tempdir().unwrap();
    let mut scales = Vec::new();
    let manifest: Vec<Value> = photos
        .iter()
        .enumerate()
        .map(|(i, photo)| {
            let decoded = decode(&std::fs::read(photo).unwrap(), &DecodeOptions::for_input(512, u64::MAX)).unwrap();
            let (rgb, (width, height)) = (decoded.image, decoded.full_size);
            scales.push((f64::from(width) / f64::from(rgb.width()), f64::from(height) / f64::from(rgb.height())));
            let path = scratch.path().join(format!("{i}.rgb"));
            std::fs::write(&path, rgb.as_raw()).unwrap();
            json!({ "name": file_name(photo), "rgb": path, "width": rgb.width(), "height": rgb.height() })
        })
        .collect();
    let list = scratch.path().join("photos.json");
    std::fs::write(&list, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let output = std::process::Command::new("node")
        .arg(common::repo().join("tools/objects/reference.cjs"))
        .args(["--model", &setup_var("CLIPFN_TEST_OBJECTS_HUMAN"), "--mode", "detect", "--photos"])
        .arg(&list)
        .output()
        .expect("node runs Human's reference (tools/setup.sh installs it)");
    assert!(output.status.success(), "reference.cjs: {}", String::from_utf8_lossy(&output.stderr));
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    let photos = answer["photos"].as_array().unwrap();
    assert_eq!(photos.len(), scales.len());
    photos
        .iter()
        .zip(scales)
        .map(|(photo, scale)| {
            let object = |o: &Value| {
                let b = boxed(&o["box"]);
                (
                    o["label"].as_str().unwrap().to_string(),
                    o["score"].as_f64().unwrap(),
                    [b[0], b[1], b[0] + b[2], b[1] + b[3]],
                )
            };
            (photo["objects"].as_array().unwrap().iter().map(object).collect(), scale)
        })
        .collect()
}

/// The photos Human's pipeline is held to: scikit-image's (chelsea, astronaut, coffee, rocket,
/// camera), the face photos, wallpapers large and small, and drawn squares (Human's JavaScript takes about 7 s a
/// photo on 2 cores, so a few of them).
fn real_photos() -> Vec<PathBuf> {
    let faces = PathBuf::from(setup_var("CLIPFN_TEST_FACE_PHOTOS"));
    let wallpapers = PathBuf::from(setup_var("CLIPFN_PHOTOS_DIR")).join("wallpapers");
    let mut photos = photos_in(&faces, |_| true);
    let some = ["mate_LadyBird.jpg", "plasma_ColorfulCups_small.jpg", "plasma_Kite_small.jpg", "plasma_Grey_small.jpg"];
    photos.extend(photos_in(&wallpapers, |name| some.contains(&name)));
    // Drawn squares of no class: a photo with no objects.
    photos.push(PathBuf::from(setup_var("CLIPFN_TEST_OBJECT_PHOTOS")).join("objects-empty.png"));
    assert_eq!(photos.len(), 15 + some.len(), "{photos:?}");
    photos
}

#[test]
fn the_real_centernet_finds_what_humans_own_pipeline_finds() {
    let photos = real_photos();
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_OBJECT_MODEL", &setup_var("CLIPFN_TEST_OBJECTS"))
        .env("CLIPFN_MAX_OBJECTS", "10") // Human's maxDetected
        .start();
    let ours = analyze(&server, &photos);
    let theirs = human(&photos);
    let (mut matched, mut empty, mut worst_iou, mut worst_score) = (0, 0, 1.0f64, 0.0f64);
    for ((photo, ours), (theirs, (sx, sy))) in photos.iter().zip(&ours).zip(&theirs) {
        // Our box in the pixels Human was given, its x, y, width and height truncated as Human's are.
        let as_humans = |b: [f64; 4]| {
            let (x, y) = ((b[0] / sx).trunc(), (b[1] / sy).trunc());
            [x, y, x + ((b[2] - b[0]) / sx).trunc(), y + ((b[3] - b[1]) / sy).trunc()]
        };
        let (ours, name) = (ours.as_array().unwrap(), file_name(photo));
        assert_eq!(ours.len(), theirs.len(), "{name}: ours {ours:?}\nHuman's {theirs:?}");
        empty += usize::from(theirs.is_empty());
        for (label, score, human_box) in theirs {
            let best = ours
                .iter()
                .filter(|o| o["label"] == label.as_str())
                .map(|o| (iou(as_humans(boxed(&o["box"])), *human_box), o["score"].as_f64().unwrap(), boxed(&o["box"])))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let Some((overlap, our_score, our_box)) = best else { panic!("{name}: no {label} in {ours:?}") };
            // Human truncates its scores to 2 digits.
            let off = ((our_score * 100.0).trunc() / 100.0 - score).abs();
            assert!(
                overlap >= 0.9 && off <= 0.01 + 1e-9,
                "{name} {label}: IoU {overlap:.3} ({our_box:?} against {human_box:?}), score {our_score} vs {score}"
            );
            (matched, worst_iou, worst_score) = (matched + 1, worst_iou.min(overlap), worst_score.max(off));
        }
    }
    eprintln!(
        "objects: {matched} of Human's detections on {} photos matched (worst IoU {worst_iou:.3}, score off by \
         {worst_score:.3} at most); {empty} photos without objects",
        photos.len()
    );
    assert!(matched >= 15 && empty >= 1, "{matched} detections, {empty} empty photos: too few to hold anything to");
    let chelsea = photos.iter().position(|p| file_name(p) == "chelsea.png").unwrap();
    let pets = ours[chelsea].as_array().unwrap();
    assert!(pets.iter().any(|o| o["label"] == "cat" || o["label"] == "dog"), "{pets:?}");
}

#[test]
fn a_yolo_folder_is_read_through_its_letterbox_and_its_class_names_and_capped() {
    let folder = PathBuf::from(setup_var("CLIPFN_TEST_OBJECT_PHOTOS"));
    let expected: Value = serde_json::from_slice(&std::fs::read(folder.join("expected.json")).unwrap()).unwrap();
    let photos = photos_in(&folder, |_| true);
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_OBJECT_MODEL", &setup_var("CLIPFN_TEST_OBJECTS_YOLO"))
        .env("CLIPFN_OBJECT_MIN_SCORE", "0.25")
        .start();
    let ours = analyzed(&server, &photos);
    let mut checked = 0;
    for want in expected["photos"].as_array().unwrap() {
        let at = photos.iter().position(|p| file_name(p) == want["file"].as_str().unwrap()).unwrap();
        let found = ours[at]["objects"].as_array().unwrap();
        let Some(objects) = want["objects"].as_array() else {
            // The noise photo: thousands of detections, capped at CLIPFN_MAX_OBJECTS' default, 50,
            // and the answer says how many more there were.
            assert!(want["count"].as_u64().unwrap() >= 10_000, "{want}");
            assert_eq!(found.len(), 50, "capped: {}", found.len());
            assert!(ours[at]["objects_left_out"].as_u64().is_some_and(|n| n >= 1), "{}", ours[at]);
            continue;
        };
        assert!(ours[at].get("objects_left_out").is_none(), "none left out: {}", ours[at]);
        assert_eq!(found.len(), objects.len(), "{}: {found:?}", want["file"]);
        for (ours, theirs) in found.iter().zip(objects) {
            let b = boxed(&theirs["box"]);
            let our_box = boxed(&ours["box"]);
            let off = [our_box[0] - b[0], our_box[1] - b[1], our_box[2] - b[0] - b[2], our_box[3] - b[1] - b[3]];
            assert_eq!(ours["label"], theirs["label"], "{}", want["file"]);
            assert!(off.iter().all(|d| d.abs() <= 2.0), "{}: {ours} against {theirs}", want["file"]);
            assert!((ours["score"].as_f64().unwrap() - theirs["score"].as_f64().unwrap()).abs() < 0.02, "{ours}");
            checked += 1;
        }
    }
    assert!(checked >= 4, "{checked} objects checked");

    // A cap of 1 keeps the best of a photo's 2 objects and counts the other.
    let two = photos.iter().position(|p| file_name(p) == "objects-landscape.png").unwrap();
    let capped = ServerConfig::local(store.path())
        .env("CLIPFN_OBJECT_MODEL", &setup_var("CLIPFN_TEST_OBJECTS_YOLO"))
        .env("CLIPFN_OBJECT_MIN_SCORE", "0.25")
        .env("CLIPFN_MAX_OBJECTS", "1")
        .start();
    let one = &analyzed(&capped, &photos[two..=two])[0];
    assert_eq!(one["objects"], json!([ours[two]["objects"][0]]), "the best kept: {one}");
    assert_eq!(one["objects_left_out"], 1, "{one}");
}

/// `clipfn backfill` with an object model writes each photo's objects as `/v1/analyze` answers
/// them, and docs/deploy.md's query finds the photos by a label.
#[test]
fn backfill_writes_the_objects_and_the_docs_query_finds_photos_by_a_label() {
    let folder = PathBuf::from(setup_var("CLIPFN_TEST_OBJECT_PHOTOS"));
    let photos = photos_in(&folder, |name| name != "objects-noise.png");
    let store = store_named(&photos);
    let out = tempfile::tempdir().unwrap();
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let model = setup_var("CLIPFN_TEST_OBJECTS_YOLO");
    let parquet = common::backfill_local(store.path(), &keys, ("CLIPFN_OBJECT_MODEL", &model), out.path());
    let server = ServerConfig::local(store.path()).env("CLIPFN_OBJECT_MODEL", &model).start();
    let answered = analyze(&server, &photos);
    let read = |label: &str| common::read_backfill(&parquet, &[&format!("label='{label}'")]);
    let read_back = read("red");
    let rows = read_back["rows"].as_array().unwrap();
    assert_eq!(rows.len(), keys.len(), "a row per photo: {read_back}");
    for row in rows {
        let i = keys.iter().position(|k| row["key"] == *k).unwrap();
        let labels = |objects: &Value| -> Vec<String> {
            objects.as_array().unwrap().iter().map(|o| o["label"].as_str().unwrap().to_string()).collect()
        };
        assert_eq!(labels(&row["objects"]), labels(&answered[i]), "{row}");
    }
    let keys_of = |things: &Value| -> Vec<String> {
        things.as_array().unwrap().iter().map(|t| t[0].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(keys_of(&read_back["duckdb"]["things"]), ["objects-landscape.png", "objects-portrait.png"]);
    assert_eq!(keys_of(&read("green")["duckdb"]["things"]), ["objects-portrait.png"]);
}

/// `"objects": false` leaves them out; `"objects": true` where no object model is loaded, or for
/// stored embeddings, is a 400 naming what is missing.
#[test]
fn objects_are_asked_for_and_refused_plainly() {
    let photo = PathBuf::from(setup_var("CLIPFN_TEST_OBJECT_PHOTOS")).join("objects-landscape.png");
    let store = store_named(std::slice::from_ref(&photo));
    let server =
        ServerConfig::local(store.path()).env("CLIPFN_OBJECT_MODEL", &setup_var("CLIPFN_TEST_OBJECTS_YOLO")).start();
    let images = json!([file_name(&photo)]);
    let (status, body) = server.post_json("/v1/analyze", &json!({ "images": images, "objects": false }));
    assert!(status == 200 && body["data"][0].get("objects").is_none(), "{body}");
    let stored = json!({ "embeddings": [body["data"][0]["embedding"]], "objects": true });
    let (status, body) = server.post_json("/v1/analyze", &stored);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("not stored embeddings"), "{body}");
    let plain = ServerConfig::local(store.path()).start();
    let (status, body) = plain.post_json("/v1/analyze", &json!({ "images": images, "objects": true }));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("CLIPFN_OBJECT_MODEL"), "{body}");
}

#[test]
fn an_object_model_of_neither_format_or_with_the_wrong_classes_is_refused_at_start_up() {
    for (variable, says) in [
        ("CLIPFN_TEST_OBJECTS_BAD", "fits neither object format"),
        ("CLIPFN_TEST_OBJECTS_MISMATCH", "names 2 classes, the model has 3"),
    ] {
        let folder = setup_var(variable);
        let stderr = common::failed_start(&[("CLIPFN_OBJECT_MODEL", &folder)]);
        assert!(stderr.contains(&format!("{folder}/model.onnx")) && stderr.contains(says), "{variable}: {stderr}");
    }
}

/// The pet photos, made from scikit-image's chelsea (`CLIPFN_TEST_FACE_PHOTOS` holds it) and its
/// horse (a silhouette, another animal): copies scaled, re-encoded, cropped and mirrored, and a made
/// photo of two cats. Each with the cat it shows: `chelsea`, `mirrored` (chelsea mirrored, taken for
/// another cat, since the two share a made photo), `horse`; the two-cat photo's left then right.
fn pet_photos(folder: &Path) -> Vec<(PathBuf, Vec<&'static str>)> {
    let faces = PathBuf::from(setup_var("CLIPFN_TEST_FACE_PHOTOS"));
    let chelsea = image::open(faces.join("chelsea.png")).unwrap().to_rgb8();
    let mirrored = image::imageops::flip_horizontal(&chelsea);
    let save = |name: &str, photo: &image::RgbImage| {
        let path = folder.join(name);
        match name.ends_with(".jpg") {
            true => {
                let quality = if name.contains("q50") { 50 } else { 90 };
                let mut file = std::fs::File::create(&path).unwrap();
                image::codecs::jpeg::JpegEncoder::new_with_quality(&mut file, quality).encode_image(photo).unwrap();
            }
            false => photo.save(&path).unwrap(),
        }
        path
    };
    let half = image::imageops::resize(&chelsea, 226, 150, image::imageops::FilterType::Triangle);
    let cropped = image::imageops::crop_imm(&chelsea, 30, 0, 400, 300).to_image();
    let mut two = image::RgbImage::from_pixel(902, 902, image::Rgb([128; 3]));
    image::imageops::replace(&mut two, &chelsea, 0, 0);
    image::imageops::replace(&mut two, &mirrored, 451, 601);
    let horse = image::open(skimage_data().join("horse.png"));
    let horse = horse.map(|h| h.to_rgb8()).unwrap_or_else(|e| panic!("scikit-image's horse.png: {e}"));
    vec![
        (save("chelsea.png", &chelsea), vec!["chelsea"]),
        (save("chelsea-half.jpg", &half), vec!["chelsea"]),
        (save("chelsea-q50.jpg", &chelsea), vec!["chelsea"]),
        (save("chelsea-cropped.png", &cropped), vec!["chelsea"]),
        (save("chelsea-mirrored.png", &mirrored), vec!["mirrored"]),
        (save("two-cats.png", &two), vec!["chelsea", "mirrored"]),
        (save("horse.png", &horse), vec!["horse"]),
    ]
}

/// scikit-image's bundled data folder, in the project's Python (tools/requirements.txt installs it).
fn skimage_data() -> PathBuf {
    let script = "import os, skimage.data; print(os.path.dirname(skimage.data.__file__))";
    let output = std::process::Command::new(setup_var("CLIPFN_PYTHON")).args(["-c", script]).output().unwrap();
    assert!(output.status.success(), "scikit-image: {}", String::from_utf8_lossy(&output.stderr));
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// Pets: each pet's crop embedded by the image tower and grouped across the album as faces are
/// into people. The image model here is the generated test model, not CLIP (no registry ships
/// CLIP's weights): it shows the grouping's mechanics (copies of one crop together, cannot-link
/// within a photo, known pets), not how well CLIP tells two cats apart (docs/objects.md, "Pets").
#[test]
fn pets_are_grouped_across_the_album_and_known_pets_are_recognised() {
    let made = tempfile::tempdir().unwrap();
    let photos = pet_photos(made.path());
    let paths: Vec<PathBuf> = photos.iter().map(|(path, _)| path.clone()).collect();
    let store = store_named(&paths);
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_OBJECT_MODEL", &setup_var("CLIPFN_TEST_OBJECTS"))
        .env("CLIPFN_PET_LABELS", "cat,dog,horse")
        // The test model's own scale: a re-encoded copy's crop is 0.14 from the original's, the
        // mirrored cat's 0.53 to 0.71, the horse's 0.83 to 1.03.
        .env("CLIPFN_PET_MAX_DISTANCE", "0.3")
        .start();
    let keys: Vec<&str> = paths.iter().map(|p| file_name(p)).collect();
    let request = json!({ "images": keys, "embedding": false, "pet_embeddings": true });
    let (status, body) = server.post_json("/v1/analyze", &request);
    assert_eq!(status, 200, "{body}");
    // Each photo's pets, left to right: `[photo, object]` and its crop embedding.
    let mut pets: Vec<([usize; 2], Vec<f32>, f64)> = Vec::new();
    for (i, (path, cats)) in photos.iter().enumerate() {
        let objects = body["data"][i]["objects"].as_array().unwrap();
        let mut found: Vec<_> = objects
            .iter()
            .enumerate()
            .filter(|(_, o)| o.get("embedding").is_some())
            .map(|(j, o)| {
                let embedding: Vec<f32> = serde_json::from_value(o["embedding"].clone()).unwrap();
                ([i, j], embedding, boxed(&o["box"])[0])
            })
            .collect();
        assert_eq!(found.len(), cats.len(), "{}: {objects:?}", file_name(path));
        found.sort_by(|a, b| a.2.total_cmp(&b.2));
        pets.extend(found);
    }
    let cat_of = |at: [usize; 2]| {
        let i = pets.iter().position(|p| p.0 == at).unwrap();
        let before = pets[..i].iter().filter(|p| p.0[0] == at[0]).count();
        photos[at[0]].1[before]
    };
    let groups: Vec<Vec<[usize; 2]>> = body["album"]["pets"]
        .as_array()
        .unwrap_or_else(|| panic!("no album.pets: {}", body["album"]))
        .iter()
        .map(|pet| serde_json::from_value(pet["objects"].clone()).unwrap())
        .collect();
    let pet_of = |at: [usize; 2]| groups.iter().position(|g| g.contains(&at)).unwrap();
    // Pairwise: two crops of one cat in one pet (recall), one pet holding one cat (precision).
    let (mut same_cat, mut same_pet, mut both) = (0, 0, 0);
    for (a, pa) in pets.iter().enumerate() {
        for pb in &pets[a + 1..] {
            let (cat, pet) = (cat_of(pa.0) == cat_of(pb.0), pet_of(pa.0) == pet_of(pb.0));
            let distance = 1.0 - common::cosine(&pa.1, &pb.1);
            eprintln!("pets: {:?} {:?}: distance {distance:.4}", pa.0, pb.0);
            (same_cat, same_pet, both) =
                (same_cat + usize::from(cat), same_pet + usize::from(pet), both + usize::from(cat && pet));
        }
    }
    eprintln!(
        "pets: {} crops in {} pets; pairwise precision {both}/{same_pet}, recall {both}/{same_cat}: {groups:?}",
        pets.len(),
        groups.len()
    );
    let two_cats = photos.iter().position(|(p, _)| file_name(p) == "two-cats.png").unwrap();
    let (left, right) =
        (pets.iter().find(|p| p.0[0] == two_cats).unwrap().0, pets.iter().rfind(|p| p.0[0] == two_cats).unwrap().0);
    assert_ne!(pet_of(left), pet_of(right), "two cats of one photo are never one pet");
    assert_eq!(both, same_pet, "a pet holds one cat: {groups:?}");
    let copies = [[0, 0], [1, 0], [2, 0], [3, 0]];
    assert!(copies.iter().all(|&at| pet_of(at) == pet_of(copies[0])), "scaled, re-encoded, cropped: {groups:?}");
    let horse = pets.last().unwrap().0;
    assert_eq!(groups[pet_of(horse)], [horse], "another animal, another pet");

    // The chelsea crop's embedding as a known pet's exemplar: its pet takes the id.
    let known = json!([{ "id": "chelsea", "embeddings": [pets[0].1] }]);
    let (status, again) = server.post_json("/v1/analyze", &json!({ "images": keys, "known_pets": known }));
    assert_eq!(status, 200, "{again}");
    let named: Vec<&Value> =
        again["album"]["pets"].as_array().unwrap().iter().filter(|p| p["id"] == "chelsea").collect();
    assert_eq!(named.len(), 1, "{}", again["album"]["pets"]);
    let objects: Vec<[usize; 2]> = serde_json::from_value(named[0]["objects"].clone()).unwrap();
    // The copies within reach of the exemplar (the cropped one, 0.44 from it, is a pet of its own).
    assert_eq!(objects, [[0, 0], [1, 0], [2, 0]]);
    assert!(again["data"][0]["objects"][0].get("embedding").is_none(), "crop embeddings only when asked");
    assert_eq!(again["album"]["unsure_pets"], json!([]), "one known pet leaves none unsure");

    // Crops embedded by another image model never meet this one's, even at the same length: naming
    // it is refused, as another recognizer is for known people; naming this one is fine.
    let model = again["model"].as_str().expect("the answer names its image model");
    let with_model = |named: &str| json!({ "images": keys, "known_pets": known, "known_pets_model": named });
    let (status, refused) = server.post_json("/v1/analyze", &with_model("another-clip"));
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    let expected =
        format!("known_pets_model: the request names 'another-clip', and this server's image model is '{model}'");
    assert!(status == 400 && message.contains(&expected), "{status} {refused}");
    let (status, same) = server.post_json("/v1/analyze", &with_model(model));
    assert_eq!((status, &same["album"]["pets"]), (200, &again["album"]["pets"]), "{same}");

    // Two known pets with the same exemplar: the crop is as near one as the other, so it goes to
    // neither, and album.unsure_pets says so, as album.unsure does for people.
    let twins = json!([{ "id": "chelsea", "embeddings": [pets[0].1] }, { "id": "twin", "embeddings": [pets[0].1] }]);
    let (status, torn) = server.post_json("/v1/analyze", &json!({ "images": keys, "known_pets": twins }));
    assert_eq!(status, 200, "{torn}");
    let unsure = torn["album"]["unsure_pets"].as_array().unwrap();
    assert!(unsure.iter().any(|u| u["object"] == json!([0, 0])), "{unsure:?}");
    for u in unsure {
        let between: Vec<&str> = u["between"].as_array().unwrap().iter().map(|id| id.as_str().unwrap()).collect();
        assert_eq!(between.len(), 2, "{u}");
        assert!(between.contains(&"chelsea") && between.contains(&"twin"), "{u}");
    }
    let taken = torn["album"]["pets"].as_array().unwrap().iter().filter(|p| !p["id"].is_null()).count();
    assert_eq!(taken, 0, "an unsure pet goes to neither: {}", torn["album"]["pets"]);
}
