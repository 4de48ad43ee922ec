//! Photos and the model from real emulators on loopback: fake-gcs-server for GCS, moto for S3.
//! Credentials point object_store at the emulators explicitly, so nothing reaches for a cloud
//! metadata server.

use crate::common;

use std::path::Path;

use common::{ServerConfig, blocking_client, camera_photos, gcs_env, item, setup_var, start_fake_gcs, start_moto};

fn put(dir: &Path, key: &str, bytes: &[u8]) {
    let path = dir.join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn gcs_keys_uris_allowlist_and_model_from_the_emulator() {
    let photos = camera_photos(2);
    let (a, b) = (std::fs::read(&photos[0]).unwrap(), std::fs::read(&photos[1]).unwrap());
    let data = tempfile::tempdir().unwrap();
    put(&data.path().join("photos"), "user/7/a.jpg", &a);
    put(&data.path().join("photos"), "user/7/b.jpg", &b);
    put(&data.path().join("photos"), "other/c.jpg", &b);
    put(&data.path().join("shared"), "c.jpg", &b);
    put(&data.path().join("models"), "clip-test.onnx", &std::fs::read(setup_var("CLIPFN_TEST_MODEL")).unwrap());
    let (_gcs, port) = start_fake_gcs(data.path(), None);

    let server = gcs_env(ServerConfig::local(Path::new("/")), port)
        .env("CLIPFN_STORE", "gs://photos/user")
        .env("CLIPFN_ALLOWED_SOURCES", "gs://shared")
        .env("CLIPFN_MODEL", "gs://models/clip-test.onnx")
        .start();

    let images = [
        "7/a.jpg",
        "gs://photos/user/7/b.jpg",
        "gs://shared/c.jpg",
        "7/missing.jpg",
        "gs://photos/other/c.jpg",
        "gs://elsewhere/c.jpg",
        "s3://photos/user/7/a.jpg",
    ];
    let (status, body) = server.embed(&images);
    assert_eq!(status, 200, "{body}");
    let b_from_store = item(&body, 1).expect("full URI under the store");
    assert_eq!(item(&body, 2).expect("allowed source"), b_from_store, "same bytes, same embedding");
    item(&body, 0).expect("bare key");
    assert_eq!(item(&body, 3), Err("not_found".into()));
    assert_eq!(item(&body, 4), Err("forbidden".into()), "outside the store's prefix");
    assert_eq!(item(&body, 5), Err("forbidden".into()), "another bucket");
    assert_eq!(item(&body, 6), Err("forbidden".into()), "another scheme");
    assert_eq!(body["model"], "clip-test");
}

#[test]
fn s3_photos_and_model_from_moto() {
    let photo = std::fs::read(&camera_photos(1)[0]).unwrap();
    let (_moto, port) = start_moto();
    let endpoint = format!("http://127.0.0.1:{port}");
    let client = blocking_client();
    // moto accepts unsigned path-style calls, which keeps seeding free of an S3 client.
    let model = std::fs::read(setup_var("CLIPFN_TEST_MODEL")).unwrap();
    for (path, body) in [
        ("/photos", Vec::new()),
        ("/photos/albums/1/a.jpg", photo.clone()),
        ("/models", Vec::new()),
        ("/models/clip-test.onnx", model),
    ] {
        let response = client.put(format!("{endpoint}{path}")).body(body).send().unwrap();
        assert!(response.status().is_success(), "PUT {path}: {}", response.status());
    }

    let server = ServerConfig::local(Path::new("/"))
        .env("CLIPFN_STORE", "s3://photos/albums")
        .env("CLIPFN_MODEL", "s3://models/clip-test.onnx")
        .env("AWS_ENDPOINT", &endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .start();
    let (status, body) = server.embed(&["1/a.jpg", "s3://photos/albums/1/a.jpg", "1/nope.jpg"]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(item(&body, 0).unwrap(), item(&body, 1).unwrap());
    assert_eq!(item(&body, 2), Err("not_found".into()));
}
