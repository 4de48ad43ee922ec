//! Every tower runs only its declared input shapes (issue 47; src/model/shapes.rs), and padding a
//! run up to its bucket changes no answer. The real face stack (SCRFD-2.5G + dlib), PP-OCRv4, the
//! real CenterNet object detector, the test image model and a head, on a workload the other tests
//! do not send: photos of many sizes and aspects (a 200 px thumbnail, a 16,000 px panorama), 0 to 29
//! faces, text lines of many widths and counts, objects, one photo a request and fourteen. On a GPU
//! each shape outside the set would cost cuDNN a search; here /readyz's counts show that none ran,
//! on a server that pads every run (as CUDA does) and on one that splits runs into buckets (as CPU
//! did until issue 57; it now runs each at its own size, `exact`, which every other test on the CPU
//! runs), and both answer alike.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Server, ServerConfig, camera_photos, cosine, file_name, model, resized_jpegs, setup_var};
use serde_json::{Value, json};

/// A photo's new size from its own.
type Resize = fn(u32, u32) -> (u32, u32);

/// The photos: the face and OCR photos, camera photos at other sizes and aspects, and a crowd of
/// two Solvay photos side by side (twice as wide, so its faces are smaller on the canvas: 20 found).
fn workload(dir: &Path) -> Vec<PathBuf> {
    let folder = |var: &str| PathBuf::from(setup_var(var));
    let listed = |dir: PathBuf, names: &[&str]| names.iter().map(|name| dir.join(name)).collect::<Vec<_>>();
    let faces = folder("CLIPFN_TEST_FACE_PHOTOS");
    let mut photos = listed(faces.clone(), &["solvay_conference_1927.jpg", "astronaut.png", "obama.jpg"]);
    photos.extend(listed(folder("CLIPFN_TEST_OCR_PHOTOS"), &["sign.jpg", "page.png", "strewn.png", "panorama.jpg"]));
    let camera = camera_photos(2);
    let sizes: [(&str, Resize); 3] =
        [("thumb-", |w, h| (200, 200 * h / w)), ("wide-", |w, _| (w, w / 3)), ("tall-", |_, h| (h / 2, h))];
    for (prefix, size) in sizes {
        photos.extend(resized_jpegs(&camera, dir, prefix, 90, size));
    }
    let solvay = image::open(faces.join("solvay_conference_1927.jpg")).unwrap().to_rgb8();
    let mut crowd = image::RgbImage::new(solvay.width() * 2, solvay.height());
    image::imageops::replace(&mut crowd, &solvay, 0, 0);
    image::imageops::replace(&mut crowd, &solvay, i64::from(solvay.width()), 0);
    let path = dir.join("crowd.jpg");
    crowd.save(&path).unwrap();
    photos.push(path);
    for photo in &photos {
        let copy = dir.join(file_name(photo));
        if !copy.exists() {
            std::fs::copy(photo, &copy).unwrap();
        }
    }
    photos
}

fn serve(store: &Path, padding: &str) -> Server {
    ServerConfig::local(store)
        .env("CLIPFN_BATCH_PADDING", padding)
        .env("CLIPFN_FACE_MODEL", &setup_var("CLIPFN_TEST_FACES_REAL"))
        .env("CLIPFN_OCR_MODEL", &setup_var("CLIPFN_TEST_OCR"))
        // OCR's views and lines in their declared sizes, as on CUDA (exact on the CPU by default).
        .env("CLIPFN_OCR_SIZES", "declared")
        .env("CLIPFN_OBJECT_MODEL", &setup_var("CLIPFN_TEST_OBJECTS"))
        .env("CLIPFN_HEADS", &format!("flat={}", model("head-flat.onnx")))
        .env("CLIPFN_MAX_FACES", "60")
        // Faces and OCR of 14 photos in one request on 2 cores, in a debug build.
        .env("CLIPFN_REQUEST_TIMEOUT_MS", "300000")
        .start()
}

/// Every photo of `photos`: all in one request, then one a request.
fn answers(server: &Server, photos: &[PathBuf]) -> Vec<Value> {
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let analyze = |keys: &[&str]| {
        let body = json!({"images": keys, "faces": true, "ocr": true, "objects": true});
        let (status, body) = server.post_json("/v1/analyze", &body);
        assert_eq!(status, 200, "{body}");
        body["data"].as_array().unwrap().clone()
    };
    let all = analyze(&keys);
    let one_by_one: Vec<Value> = keys.iter().flat_map(|key| analyze(&[key])).collect();
    for (i, answer) in all.iter().enumerate() {
        assert!(answer.get("error").is_none(), "{answer}");
        same(answer, &one_by_one[i], "alone");
    }
    all
}

/// `a` and `b` answer one photo alike, within float noise.
fn same(a: &Value, b: &Value, how: &str) {
    let image = a["image"].as_str().unwrap();
    let floats = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<_>>();
    let embedding = cosine(&floats(&a["embedding"]), &floats(&b["embedding"]));
    assert!(embedding > 0.9999, "{image} {how}: embedding cosine {embedding}");
    let (fa, fb) = (a["faces"].as_array().unwrap(), b["faces"].as_array().unwrap());
    assert_eq!(fa.len(), fb.len(), "{image} {how}: faces");
    for (x, y) in fa.iter().zip(fb) {
        let corners = |f: &Value| floats(&f["box"]);
        let apart = corners(x).iter().zip(corners(y)).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
        assert!(apart < 1.0, "{image} {how}: a face's box moved {apart} px");
        let similar = cosine(&floats(&x["embedding"]), &floats(&y["embedding"]));
        assert!(similar > 0.999, "{image} {how}: a face's embedding at cosine {similar}");
    }
    let (oa, ob) = (a["objects"].as_array().unwrap(), b["objects"].as_array().unwrap());
    assert_eq!(oa.len(), ob.len(), "{image} {how}: objects");
    for (x, y) in oa.iter().zip(ob) {
        assert_eq!(x["label"], y["label"], "{image} {how}: an object's label");
        let gap = (x["score"].as_f64().unwrap() - y["score"].as_f64().unwrap()).abs();
        assert!(gap < 1e-3, "{image} {how}: an object's score moved {gap}");
        let corners = |o: &Value| floats(&o["box"]);
        let apart = corners(x).iter().zip(corners(y)).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
        assert!(apart < 1.0, "{image} {how}: an object's box moved {apart} px");
    }
    let text = |v: &Value| v["ocr"].as_array().unwrap().iter().map(|l| l["text"].clone()).collect::<Vec<_>>();
    assert_eq!(text(a), text(b), "{image} {how}: OCR lines");
    for (x, y) in a["ocr"].as_array().unwrap().iter().zip(b["ocr"].as_array().unwrap()) {
        let gap = (x["score"].as_f64().unwrap() - y["score"].as_f64().unwrap()).abs();
        assert!(gap < 1e-3, "{image} {how}: a line's score moved {gap}");
    }
}

/// /readyz's shape counts: no tower ran a shape outside its set, none declares more than 32, and
/// every tower the workload reaches ran some.
fn shapes_held(server: &Server) -> Value {
    let (status, ready) = server.get("/readyz");
    assert_eq!(status, 200, "{ready}");
    let shapes = ready["shapes"].as_object().unwrap_or_else(|| panic!("no shapes: {ready}")).clone();
    let towers = [
        "image",
        "heads",
        "face_detector",
        "face_recognizer",
        "text_detector",
        "line_classifier",
        "text_recognizer",
        "object_detector",
    ];
    for tower in towers {
        let counts = &shapes[tower];
        let (allowed, run) = (counts["allowed"].as_u64().unwrap(), counts["run"].as_u64().unwrap());
        assert_eq!(counts["outside"], 0, "{tower} ran shapes outside its set: {counts}");
        assert!((1..=32).contains(&allowed), "{tower} declares {allowed} shapes");
        assert!(run >= 1 && run <= allowed, "{tower}: {counts}");
    }
    json!(shapes)
}

#[test]
fn a_varied_workload_runs_only_declared_shapes_and_padding_changes_no_answer() {
    let store = tempfile::tempdir().unwrap();
    let photos = workload(store.path());
    let padded = serve(store.path(), "pad");
    let split = serve(store.path(), "split");
    let (a, b) = (answers(&padded, &photos), answers(&split, &photos));
    assert_eq!(a.len(), photos.len());
    for (x, y) in a.iter().zip(&b) {
        same(x, y, "padded against split");
    }
    let faces: Vec<usize> = a.iter().map(|answer| answer["faces"].as_array().unwrap().len()).collect();
    let lines: Vec<usize> = a.iter().map(|answer| answer["ocr"].as_array().unwrap().len()).collect();
    assert!(faces.contains(&0) && faces.iter().max() >= Some(&20), "faces a photo: {faces:?}");
    assert!(lines.contains(&0) && lines.iter().max() >= Some(&20), "lines a photo: {lines:?}");
    let objects: Vec<usize> = a.iter().map(|answer| answer["objects"].as_array().unwrap().len()).collect();
    assert!(objects.iter().any(|&n| n >= 2), "objects a photo: {objects:?}");
    println!("faces a photo {faces:?}; lines a photo {lines:?}; objects a photo {objects:?}");
    println!("padded: {}", shapes_held(&padded));
    println!("split: {}", shapes_held(&split));
}
