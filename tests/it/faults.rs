//! Faults and bad input through the real binary: a photo that trips the model, a store that
//! fails, a client that goes away, and a flood of the largest allowed photos. Each must cost only
//! itself, leak nothing internal to the client, and leave the instance healthy.

use crate::common;

use std::{
    io::Write,
    path::Path,
    time::{Duration, Instant},
};

use common::{HeldStore, Object, ServerConfig, camera_photos, cosine, gcs_env, item, scrape, series};
use serde_json::Value;

/// A store with three real photos and two all-white ones.
fn store_with_white_photos() -> tempfile::TempDir {
    let white = || {
        let mut png = std::io::Cursor::new(Vec::new());
        image::RgbImage::from_pixel(300, 200, image::Rgb([255, 255, 255]))
            .write_to(&mut png, image::ImageFormat::Png)
            .unwrap();
        Object::Bytes(png.into_inner())
    };
    let real = camera_photos(3).into_iter().enumerate().map(|(i, photo)| (format!("p{i}.jpg"), Object::Copy(photo)));
    common::store(real.chain(["white.png", "white-2.png"].map(|name| (name.to_string(), white()))))
}

#[test]
fn a_photo_that_trips_the_model_fails_alone_and_the_instance_stays_healthy() {
    let store = store_with_white_photos();
    // The poison model fails any batch holding an all-white photo. Five photos fill a batch, and
    // a lone photo waits long enough for the others: each request below runs as one batch.
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_MODEL", &common::model("clip-poison.onnx"))
        .env("CLIPFN_BATCH_SIZE", "5")
        .env("CLIPFN_BATCH_WAIT_MS", "10000")
        .start();

    let (status, mixed) = server.embed(&["p0.jpg", "white.png", "p1.jpg", "p2.jpg", "white-2.png"]);
    assert_eq!(status, 200, "{mixed}");
    let (status, clean) = server.embed(&["p0.jpg", "p1.jpg", "p2.jpg", "p0.jpg", "p1.jpg"]);
    assert_eq!(status, 200, "{clean}");

    for (i, white) in [(1, "white.png"), (4, "white-2.png")] {
        assert_eq!(item(&mixed, i), Err("inference_failed".into()), "{mixed}");
        let message = mixed["data"][i]["error"]["message"].as_str().unwrap();
        assert_eq!(message, format!("the model failed on '{white}'"), "ONNX Runtime's text stays in the log");
    }
    // Every other photo of the failed batch got its own embedding, in its own place.
    for (i, j) in [(0, 0), (2, 1), (3, 2)] {
        let similarity = cosine(&item(&mixed, i).unwrap(), &item(&clean, j).unwrap());
        assert!(similarity > 0.9999, "photo {i}: cosine {similarity} to the same photo in a clean batch");
    }
    assert!(cosine(&item(&clean, 0).unwrap(), &item(&clean, 1).unwrap()) < 0.99, "photos are told apart");

    assert_eq!(server.get("/healthz").0, 200, "a bad photo must not make the instance unhealthy");
    assert_eq!(server.get("/readyz").0, 200);
    let metrics = scrape(&server);
    assert_eq!(series(&metrics, "clipfn_batch_failures_total", &[("cause", "error")]), 1.0, "{metrics}");
    assert_eq!(series(&metrics, "clipfn_model_healthy", &[]), 1.0);
    assert_eq!(series(&metrics, "clipfn_batch_size_photos_count", &[]), 2.0, "one batch per request");
}

#[test]
fn a_failing_store_gives_a_fixed_message_and_the_detail_goes_to_the_log_with_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&camera_photos(1)[0], dir.path().join("good.jpg")).unwrap();
    let store = HeldStore::start(dir.path());
    let log = dir.path().join("server.log");
    let server = gcs_env(ServerConfig::local(Path::new("/")), store.port)
        .env("CLIPFN_STORE", "gs://photos")
        .env("CLIPFN_LOG_FORMAT", "json")
        .stderr_to(&log)
        .start();
    let trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let response = common::blocking_client()
        .post(format!("{}/v1/embed", server.base))
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .json(&serde_json::json!({"images": ["good.jpg", "error.jpg", "missing.jpg"]}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().unwrap();
    assert!(item(&body, 0).is_ok(), "{body}");
    assert_eq!(item(&body, 1), Err("fetch_failed".into()));
    assert_eq!(body["data"][1]["error"]["message"], "'error.jpg' could not be read from its source");
    assert_eq!(item(&body, 2), Err("not_found".into()));
    assert_eq!(body["data"][2]["error"]["message"], "no object at 'missing.jpg'");
    let errors = format!("{} {}", body["data"][1]["error"], body["data"][2]["error"]);
    for internal in ["127.0.0.1", "http", "photos/", "internal.example", "500"] {
        assert!(!errors.contains(internal), "'{internal}' reached the client: {errors}");
    }

    let until = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let found = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["message"] == "photo failed" && l["code"] == "fetch_failed");
        if let Some(line) = found {
            break line;
        }
        assert!(Instant::now() < until, "no 'photo failed' line in the log");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(line["index"], 1, "{line}");
    assert_eq!(line["logging.googleapis.com/trace"], trace, "{line}");
    let detail = line["error"].as_str().unwrap();
    assert!(detail.contains("500") && detail.contains("internal.example"), "the log keeps the detail: {line}");
    assert!(!detail.contains("error.jpg"), "the key stays out of the log: {line}");
}

#[test]
fn a_client_that_disconnects_has_its_photos_withdrawn_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&camera_photos(1)[0], dir.path().join("good.jpg")).unwrap();
    let store = HeldStore::start(dir.path());
    // Three photos make a batch and a started batch waits long for them: the cancelled request's
    // photo is still waiting in the worker when the next request comes.
    let server = gcs_env(ServerConfig::local(Path::new("/")), store.port)
        .env("CLIPFN_STORE", "gs://photos")
        .env("CLIPFN_BATCH_SIZE", "3")
        .env("CLIPFN_BATCH_WAIT_MS", "20000")
        .start();
    let address = server.base.trim_start_matches("http://").to_string();
    let body = r#"{"images": ["good.jpg", "slow.jpg"]}"#;
    let mut client = std::net::TcpStream::connect(&address).unwrap();
    write!(
        client,
        "POST /v1/embed HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // good.jpg waits in the model's queue, slow.jpg in the store.
    let until = Instant::now() + Duration::from_secs(30);
    while series(&scrape(&server), "clipfn_queue_depth_photos", &[]) != 1.0 {
        assert!(Instant::now() < until, "the first photo never reached the queue");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(client);
    server.wait_in_flight(0);

    let (status, next) = server.embed(&["good.jpg", "good.jpg"]);
    assert_eq!(status, 200, "{next}");
    assert!(item(&next, 0).is_ok() && item(&next, 1).is_ok(), "{next}");
    let metrics = scrape(&server);
    assert_eq!(series(&metrics, "clipfn_requests_total", &[("code", "cancelled")]), 1.0, "{metrics}");
    assert_eq!(series(&metrics, "clipfn_batch_size_photos_count", &[]), 1.0);
    assert_eq!(series(&metrics, "clipfn_batch_size_photos_sum", &[]), 2.0, "the withdrawn photo did not run");
    store.release();
}

/// A real photo padded with APP15 segments (which decoders skip) to just under `size` bytes: as
/// costly to fetch and hold as the largest allowed photo, with real entropy-coded data to decode.
fn padded_jpeg(size: usize) -> Vec<u8> {
    let photo = std::fs::read(&camera_photos(1)[0]).unwrap();
    assert_eq!(&photo[..2], [0xFF, 0xD8]);
    let mut padded = photo[..2].to_vec();
    let chunk = vec![0x55u8; 65533];
    while padded.len() + photo.len() + 65537 <= size {
        padded.extend_from_slice(&[0xFF, 0xEF, 0xFF, 0xFF]);
        padded.extend_from_slice(&chunk);
    }
    padded.extend_from_slice(&photo[2..]);
    padded
}

#[test]
fn a_flood_of_the_largest_photos_stays_within_the_fetch_budget_plus_the_queue() {
    let store = tempfile::tempdir().unwrap();
    let max_bytes = 25 * 1024 * 1024;
    std::fs::write(store.path().join("large.jpg"), padded_jpeg(max_bytes)).unwrap();
    // Default settings but the store, and a deadline that a shared, loaded test machine cannot
    // run into (the deadline bounds time, not memory).
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_BATCH_SIZE", "64")
        .env("CLIPFN_REQUEST_TIMEOUT_MS", "600000")
        .start();
    let (status, body) = server.embed(&["large.jpg"]);
    assert_eq!(status, 200, "{body}");
    assert!(item(&body, 0).is_ok(), "{body}");
    let mib = |field| common::status_bytes(&server.pid().to_string(), field) / (1024.0 * 1024.0);
    let idle = mib("VmRSS");

    // Five requests of 100 photos each: 500 of the 512 queue places.
    let keys = vec!["large.jpg"; 100];
    std::thread::scope(|s| {
        let requests: Vec<_> = (0..5).map(|_| s.spawn(|| server.embed(&keys))).collect();
        for request in requests {
            let (status, body) = request.join().unwrap();
            assert_eq!(status, 200, "{body}");
            assert!((0..100).all(|i| item(&body, i).is_ok()), "not every photo was embedded");
        }
    });
    let peak = mib("VmHWM");
    let growth_mib = (peak - idle).max(0.0);
    println!("idle RSS {idle:.0} MiB, peak RSS {peak:.0} MiB, growth {growth_mib:.0} MiB");
    // The default fetched-bytes budget (16 MiB per decode thread, one core each, at least one
    // photo), plus room for 500 queued squares, the decoders' buffers and the allocator: the
    // 256 MiB budget and float queue of before grew 837 MiB here.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let bound_mib = ((16 * cores).max(25) + 256) as f64;
    assert!(
        growth_mib < bound_mib,
        "peak RSS grew {growth_mib:.0} MiB over idle under a flood of 25 MiB photos (bound {bound_mib} MiB)"
    );
}

/// Issue 48: one budget (`CLIPFN_MAX_DECODE_BYTES`) covers what photos keep of their decodes until
/// their detectors answer. 12 MP PNGs (decoded at full size, 36 MB of RGB each) showing a face and
/// text, with faces (the real SCRFD-2.5G + dlib, whose chips come from a second, finer decode) and
/// OCR (PP-OCRv4, whose lines are cut from the kept decode): every photo is answered with both,
/// and the peak RSS grows over a warm server's by no more than the budget, the fetch budget and
/// slack. Without the budget the same flood keeps four decodes at once (docs/design.md, "One budget
/// for what a photo keeps", has both figures).
#[test]
fn twelve_megapixel_pngs_with_faces_and_text_stay_within_the_decode_budget() {
    let store = tempfile::tempdir().unwrap();
    let face = image::open(Path::new(&common::setup_var("CLIPFN_TEST_FACE_PHOTOS")).join("obama.jpg")).unwrap();
    let text = image::open(Path::new(&common::setup_var("CLIPFN_TEST_OCR_PHOTOS")).join("sign.jpg")).unwrap();
    // 4000 x 3000: the face photo (4:5) at 2400 x 3000 beside the sign (16:10) at 1600 x 1000.
    let filter = image::imageops::FilterType::Triangle;
    let mut large = image::RgbImage::new(4000, 3000);
    image::imageops::replace(&mut large, &image::imageops::resize(&face.to_rgb8(), 2400, 3000, filter), 0, 0);
    image::imageops::replace(&mut large, &image::imageops::resize(&text.to_rgb8(), 1600, 1000, filter), 2400, 0);
    large.save(store.path().join("large.png")).unwrap();
    let budget_mib: u64 = 96;
    let server = ServerConfig::local(store.path())
        .env("CLIPFN_FACE_MODEL", &common::setup_var("CLIPFN_TEST_FACES_REAL"))
        .env("CLIPFN_OCR_MODEL", &common::setup_var("CLIPFN_TEST_OCR"))
        .env("CLIPFN_MAX_DECODE_BYTES", &(budget_mib << 20).to_string())
        .env("CLIPFN_REQUEST_TIMEOUT_MS", "600000")
        .start();
    let analyze = |count: usize| {
        let body = serde_json::json!({"images": vec!["large.png"; count], "faces": true, "ocr": true});
        let (status, body) = server.post_json("/v1/analyze", &body);
        assert_eq!(status, 200, "{body}");
        let data = body["data"].as_array().unwrap().clone();
        assert_eq!(data.len(), count);
        for answer in &data {
            let found = |field: &str| answer[field].as_array().map_or(0, Vec::len);
            assert!(found("faces") >= 1 && found("ocr") >= 1, "every photo with its face and its text: {answer}");
        }
    };
    analyze(1);
    let mib = |field| common::status_bytes(&server.pid().to_string(), field) / (1024.0 * 1024.0);
    let warm = mib("VmHWM");
    let count = std::env::var("CLIPFN_TEST_BUDGET_PHOTOS").map_or(24, |n| n.parse().unwrap());
    analyze(count);
    let growth_mib = mib("VmHWM") - warm;
    println!("{count} photos of 12 MP PNG: peak RSS {warm:.0} MiB warm, grew {growth_mib:.0} MiB");
    // The decode budget, the fetched bytes (16 MiB per decode thread, at least one 25 MiB photo),
    // and slack for the allocator and the queued squares.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let bound_mib = (budget_mib + (16 * cores).max(25) + 48) as f64;
    assert!(growth_mib < bound_mib, "peak RSS grew {growth_mib:.0} MiB over a warm server's (bound {bound_mib} MiB)");
}
