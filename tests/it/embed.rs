//! End to end over HTTP on loopback: the real binary, the real ONNX Runtime, the test model, real
//! photos from a local store.

use crate::common;

use std::path::Path;

use common::{
    ServerConfig, camera_photos, cosine, file_name, item, reference_embeddings, resized_jpegs, setup_var, store_named,
};
use serde_json::json;

#[test]
fn embeddings_match_the_pillow_reference() {
    let mut photos = camera_photos(6);
    let pillow = Path::new(&setup_var("CLIPFN_PILLOW_IMAGES_DIR")).to_path_buf();
    // Rotated by EXIF tag: the reference transposes first, so must we.
    photos.extend((2..=8).map(|o| pillow.join(format!("hopper_orientation_{o}.jpg"))));
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path()).start();

    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, body) = server.embed(&keys);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["dim"], 512);
    assert_eq!(body["model"], "clip-test");

    let reference = reference_embeddings(&setup_var("CLIPFN_TEST_MODEL"), &photos);
    for (i, photo) in photos.iter().enumerate() {
        let ours = item(&body, i).unwrap_or_else(|code| panic!("{}: {code}", photo.display()));
        let norm: f32 = ours.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "{} not unit length: {norm}", photo.display());
        let similarity = cosine(&ours, &reference[photo]);
        assert!(similarity >= 0.99, "{}: cosine {similarity} against the reference", photo.display());
    }
    // Orientations 2-8 store one picture in seven layouts; set upright, they must agree.
    let upright = item(&body, photos.len() - 7).unwrap();
    for (i, photo) in photos.iter().enumerate().skip(photos.len() - 6) {
        let similarity = cosine(&upright, &item(&body, i).unwrap());
        assert!(similarity >= 0.95, "{}: cosine {similarity} to orientation 2", photo.display());
    }
}

/// Photos just under a DCT step (a short side of 860: 215 at 1/4; 430: 215 at 1/2) decode at the
/// coarser step and are enlarged a little; they must still match the reference (full decode) as
/// the decode gate asks: mean cosine >= 0.995, each >= 0.985.
#[test]
#[cfg(feature = "jpeg-turbo")]
fn photos_just_under_a_scale_step_match_the_reference() {
    use clipfn::decode::{DecodeOptions, decode};
    let dir = tempfile::tempdir().unwrap();
    let mut photos = Vec::new();
    for (short, step) in [(860, 4), (430, 2)] {
        let to_short = |w: u32, h: u32| ((w * short).div_ceil(w.min(h)), (h * short).div_ceil(w.min(h)));
        for path in resized_jpegs(&camera_photos(4), dir.path(), &format!("{short}-"), 90, to_short) {
            let decoded = decode(&std::fs::read(&path).unwrap(), &DecodeOptions::for_input(224, u64::MAX)).unwrap();
            assert_eq!(decoded.scale_denom, step, "{} decodes at the coarser step", path.display());
            photos.push(path);
        }
    }
    let store = store_named(&photos);
    let server = ServerConfig::local(store.path()).start();
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let (status, body) = server.embed(&keys);
    assert_eq!(status, 200, "{body}");
    let reference = reference_embeddings(&setup_var("CLIPFN_TEST_MODEL"), &photos);
    let cosines: Vec<f32> =
        photos.iter().enumerate().map(|(i, photo)| cosine(&item(&body, i).unwrap(), &reference[photo])).collect();
    let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
    assert!(mean >= 0.995, "mean cosine {mean} against the reference: {cosines:?}");
    assert!(cosines.iter().all(|&c| c >= 0.985), "a photo under 0.985: {cosines:?}");
}

#[test]
fn the_test_model_sees_layout() {
    // Without this, agreeing orientations could mean a model blind to rotation.
    let photo = &camera_photos(1)[0];
    let store = tempfile::tempdir().unwrap();
    let image = image::open(photo).unwrap();
    image.save(store.path().join("a.png")).unwrap();
    image.fliph().save(store.path().join("mirrored.png")).unwrap();
    image.rotate90().save(store.path().join("rotated.png")).unwrap();
    let server = ServerConfig::local(store.path()).start();
    let (status, body) = server.embed(&["a.png", "mirrored.png", "rotated.png"]);
    assert_eq!(status, 200, "{body}");
    let a = item(&body, 0).unwrap();
    for i in 1..3 {
        let similarity = cosine(&a, &item(&body, i).unwrap());
        assert!(similarity < 0.9, "{}: cosine {similarity}", body["data"][i]["image"]);
    }
}

#[test]
fn bad_photos_get_their_own_errors_and_the_rest_are_embedded() {
    let mut photos = camera_photos(2);
    photos.sort_by_key(|p| std::fs::metadata(p).unwrap().len()); // [small, big]: the big one goes over the byte limit
    photos.reverse();
    let store = store_named(&photos);
    let root = store.path();
    std::fs::write(root.join("error-page.jpg"), b"<!DOCTYPE html><html>Access denied</html>").unwrap();
    std::fs::write(root.join("empty.jpg"), b"").unwrap();
    let jpeg = std::fs::read(&photos[0]).unwrap();
    std::fs::write(root.join("truncated.jpg"), &jpeg[..200]).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::copy(&photos[0], outside.path().join("secret.jpg")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.jpg"), root.join("link.jpg")).unwrap();
    let server = ServerConfig::local(root).env("CLIPFN_MAX_IMAGE_BYTES", &(jpeg.len() as u64 - 1).to_string()).start();

    let outside_uri = format!("file://{}/secret.jpg", outside.path().display());
    let good = file_name(&photos[1]);
    let requests = [
        (good, Ok(())),
        ("missing/IMG_0001.jpg", Err("not_found")),
        ("../secret.jpg", Err("forbidden")),
        ("/etc/passwd", Err("forbidden")),
        (outside_uri.as_str(), Err("forbidden")),
        ("link.jpg", Err("forbidden")),
        ("error-page.jpg", Err("unsupported_format")),
        ("empty.jpg", Err("unsupported_format")),
        ("truncated.jpg", Err("decode_failed")),
        (file_name(&photos[0]), Err("too_large")),
        (good, Ok(())),
    ];
    let keys: Vec<&str> = requests.iter().map(|(k, _)| *k).collect();
    let (status, body) = server.embed(&keys);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), keys.len());
    for (i, (key, expected)) in requests.iter().enumerate() {
        assert_eq!(body["data"][i]["image"], *key);
        match (item(&body, i), expected) {
            (Ok(_), Ok(())) => {}
            (Err(code), Err(want)) => assert_eq!(code, *want, "{key}: {}", body["data"][i]),
            (got, want) => panic!("{key}: got {got:?}, want {want:?}"),
        }
    }
    assert_eq!(item(&body, 0).unwrap(), item(&body, keys.len() - 1).unwrap(), "same photo, same embedding");
    assert_eq!(server.get("/readyz").0, 200, "a bad batch must not hurt readiness");
}

#[test]
fn malformed_requests_get_4xx_with_a_message() {
    let store = tempfile::tempdir().unwrap();
    let server =
        ServerConfig::local(store.path()).env("CLIPFN_MAX_IMAGES", "3").env("CLIPFN_MAX_BODY_BYTES", "1000").start();
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "bad_request"),
        (br#"{"images": []}"#.to_vec(), 400, "bad_request"),
        (br#"{"images": "a.jpg"}"#.to_vec(), 400, "bad_request"),
        (br#"{"images": [1, 2]}"#.to_vec(), 400, "bad_request"),
        (br#"{"pictures": ["a.jpg"]}"#.to_vec(), 400, "bad_request"),
        (br#"{"images": ["a", "b", "c", "d"]}"#.to_vec(), 400, "bad_request"),
        (serde_json::to_vec(&json!({"images": ["x".repeat(2000)]})).unwrap(), 413, "body_too_large"),
    ];
    for (body, want_status, want_code) in cases {
        let (status, response) = server.post_raw("/v1/embed", body.clone());
        assert_eq!(status, want_status, "{}: {response}", String::from_utf8_lossy(&body[..body.len().min(60)]));
        assert_eq!(response["error"]["code"], want_code);
        assert!(!response["error"]["message"].as_str().unwrap().is_empty());
    }
    assert_eq!(server.get("/nope").0, 404);
    // A wrong method gets the JSON error body too, and says which method to use.
    let wrong_method = common::blocking_client().get(format!("{}/v1/embed", server.base)).send().unwrap();
    assert_eq!(wrong_method.status(), 405);
    assert_eq!(wrong_method.headers()["allow"], "POST");
    let body: serde_json::Value = wrong_method.json().unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("POST"), "{body}");
    assert_eq!(server.get("/healthz"), (200, json!({"status": "ok"})));
    let (status, ready) = server.get("/readyz");
    assert_eq!(status, 200);
    assert_eq!(ready["model"]["provider"], "cpu", "{ready}");
    assert_eq!(ready["model"]["image_size"], 224);
    assert_eq!(ready["model"]["batch_size"], 8);
    // Warmed up at both shapes a request can bring first: one photo and a full batch.
    assert_eq!(ready["model"]["warm_up_batches"], json!([1, 8]), "{ready}");
    assert_eq!(ready["model"]["id"], "clip-test");
    assert!(ready.get("gpu").is_none(), "no GPU section on CPU: {ready}");
}

#[test]
fn normalising_in_the_model_gives_the_same_embeddings() {
    let photos = camera_photos(4);
    let store = store_named(&photos);
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let embed = |normalize: &str| {
        let server = ServerConfig::local(store.path()).env("CLIPFN_NORMALIZE", normalize).start();
        let layout = server.get("/readyz").1["model"]["input_layout"].clone();
        let (status, body) = server.embed(&keys);
        assert_eq!(status, 200, "{body}");
        (layout, (0..keys.len()).map(|i| item(&body, i).unwrap()).collect::<Vec<_>>())
    };
    let (host_layout, on_host) = embed("cpu");
    let (model_layout, in_model) = embed("model");
    assert_eq!((host_layout, model_layout), (json!("normalized_nchw"), json!("raw_nhwc")));
    for (i, (a, b)) in on_host.iter().zip(&in_model).enumerate() {
        let similarity = cosine(a, b);
        assert!(similarity > 0.9999, "{}: cosine {similarity}", keys[i]);
    }
}

#[test]
fn a_decode_budget_smaller_than_any_photo_decodes_them_one_at_a_time_and_loses_none() {
    let photos = camera_photos(8);
    let store = store_named(&photos);
    let keys: Vec<&str> = photos.iter().map(|p| file_name(p)).collect();
    let unbounded = ServerConfig::local(store.path()).env("CLIPFN_DECODE_THREADS", "2").start().embed(&keys);
    // 1 KiB: every photo needs more, so each one waits for all of it and decodes alone.
    let bounded = ServerConfig::local(store.path())
        .env("CLIPFN_DECODE_THREADS", "2")
        .env("CLIPFN_MAX_DECODE_BYTES", "1024")
        .start()
        .embed(&keys);
    assert_eq!((unbounded.0, bounded.0), (200, 200), "{}", bounded.1);
    for (i, photo) in photos.iter().enumerate() {
        let (a, b) = (item(&unbounded.1, i).unwrap(), item(&bounded.1, i).unwrap());
        assert!(cosine(&a, &b) > 0.9999, "{}: the budget changed the embedding", photo.display());
    }
}
