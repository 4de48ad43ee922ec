//! The worker's unit tests, over the stand-in towers of `fake`.

use std::{
    sync::{Arc, atomic::Ordering},
    thread,
    time::{Duration, Instant},
};

use image::RgbImage;
use opentelemetry::metrics::MeterProvider as _;
use tokio::sync::oneshot;
use tracing::Span;

use super::{
    BatchError, Broken, OptionalTowers, Served, Unhealthy, Worker,
    fake::*,
    health::Health,
    lane::{self, Job, Lanes},
    run::run_worker,
};
use crate::{
    model::{Canvases, FaceCrops, OcrViews, Photos, TextLines, Texts, TowerIo},
    observe::metrics::Metrics,
    preprocess::{CLIP_MEAN, CLIP_STD, FaceCanvas, LineInput, ObjectLayout, ObjectView, OcrView},
    tokenize::Tokens,
};

const SIDE: u32 = 4;

fn photo(value: u8) -> RgbImage {
    RgbImage::from_pixel(SIDE, SIDE, image::Rgb([value; 3]))
}

/// What the fake model embeds a photo of one grey `value` as: its mean normalised value.
fn fake_embedding(value: u8) -> f32 {
    (0..3).map(|c| (f32::from(value) / 255.0 - CLIP_MEAN[c]) / CLIP_STD[c]).sum::<f32>() / 3.0
}

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new(opentelemetry_sdk::metrics::SdkMeterProvider::builder().build().meter("test")))
}

fn embed_all(worker: &Worker, values: &[u8]) -> Vec<Result<Served<Vec<f32>>, BatchError>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // join_all polls every future once before any waits, so all photos are queued at once.
    runtime.block_on(futures::future::join_all(values.iter().map(|&v| worker.embed(photo(v), Span::none()))))
}

#[test]
fn photos_that_trip_the_model_fail_alone_and_the_rest_of_their_batch_runs() {
    let (model, _device) = FakeModel::new(6, SIDE);
    let worker = Worker::start(model, NO_TEXT, OptionalTowers::default(), Duration::from_secs(10), metrics());
    // White trips the model and black crashes it; the greys embed.
    let values = [25, 255, 76, 0, 127, 153];
    let results = embed_all(&worker, &values);
    let mut batch_start = None;
    for (value, result) in values.iter().zip(&results) {
        match result {
            Err(BatchError::Model(_)) => assert!([0, 255].contains(value), "photo {value} failed: {result:?}"),
            Ok(embedded) => {
                let expected = fake_embedding(*value);
                assert!((embedded.output[0] - expected).abs() < 1e-5, "photo {value}: {embedded:?}");
                // All from one batch: the full batch failed and was split, not retried per photo.
                assert_eq!(*batch_start.get_or_insert(embedded.started), embedded.started);
            }
            Err(other) => panic!("photo {value}: {other}"),
        }
    }
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
    assert!(worker.health().is_ok(), "bad photos must not make the instance unhealthy");
}

#[test]
fn a_lost_device_fails_its_batch_and_turns_the_health_bad() {
    let (model, device) = FakeModel::new(4, SIDE);
    let worker = Worker::start(model, NO_TEXT, OptionalTowers::default(), Duration::from_millis(5), metrics());
    assert!(embed_all(&worker, &[51]).pop().unwrap().is_ok());
    assert!(worker.health().is_ok());
    device.store(DEVICE_LOST, Ordering::SeqCst);
    let results = embed_all(&worker, &[51, 102]);
    assert!(results.iter().all(|r| matches!(r, Err(BatchError::Model(_)))), "{results:?}");
    assert!(matches!(worker.health(), Err(Unhealthy { why: Broken::ModelBroken, device: "cpu", .. })));
}

/// Where a job's output arrives.
type Waiting<Io> = oneshot::Receiver<Result<Served<<Io as TowerIo>::Output>, BatchError>>;

fn job<Io: TowerIo>(input: Io::Input) -> (Job<Io>, Waiting<Io>) {
    let (reply, waiting) = oneshot::channel();
    (Job { input, reply, queue_span: Span::none(), request_span: Span::none() }, waiting)
}

/// An idle spell longer than any test.
const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn an_idle_wait_returns_memory_once_then_serves_the_next_job() {
    let (images, image_lane) = lane::open(FakeModel::new(4, SIDE).0);
    let mut lanes = Lanes::new(Vec::new(), vec![image_lane]);
    let sender = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        let (job, rx) = job::<Photos>(photo(25));
        images.send(job).unwrap();
        rx
    });
    let mut idle_calls = 0;
    let idle = Duration::from_millis(50);
    let (_, size) = lanes.next_batch(Duration::ZERO, (idle, &mut || idle_calls += 1)).unwrap();
    assert_eq!(size, 1, "the job that came after the idle spell");
    assert_eq!(idle_calls, 1, "one trim per idle spell, however long");
    let _rx = sender.join().unwrap();
    assert_eq!(lanes.next_batch(Duration::ZERO, (idle, &mut || idle_calls += 1)), None, "the sender is gone");
    assert_eq!(idle_calls, 1, "a queue with work, or closed, is no idle spell");
}

#[test]
fn a_text_goes_before_queued_photos() {
    let ((images, image_lane), (texts, text_lane)) =
        (lane::open(FakeModel::new(4, SIDE).0), lane::open(FakeText::new(4).0));
    // The serving order, as Worker::start makes it.
    let mut lanes = Lanes::new(vec![text_lane], vec![image_lane]);
    let (text, image) = (0, 1);
    let mut waiting = Vec::new();
    for _ in 0..5 {
        let (job, rx) = job::<Photos>(photo(25));
        images.send(job).unwrap();
        waiting.push(rx);
    }
    let (query, _rx) = job::<Texts>(Tokens { ids: vec![49406, 49407] });
    texts.send(query).unwrap();

    let (lane, size) = lanes.next_batch(Duration::ZERO, (HOUR, &mut || {})).unwrap();
    assert!(size == 1 && lane == text, "the query runs first, alone");
    let (lane, size) = lanes.next_batch(Duration::ZERO, (HOUR, &mut || {})).unwrap();
    assert_eq!(size, 4, "then photos, in batches of the batch size");
    assert_eq!(lane, image);
    drop((images, texts));
    assert_eq!(lanes.next_batch(Duration::ZERO, (HOUR, &mut || {})).map(|(_, size)| size), Some(1), "the last photo");
    assert!(lanes.next_batch(Duration::ZERO, (HOUR, &mut || {})).is_none(), "then the worker stops");
}

/// Queues `input` on `lane`; nobody waits for its output (these tests take batches, never serve
/// them).
fn send<Io: TowerIo>(lane: &crossbeam_channel::Sender<Job<Io>>, input: Io::Input) {
    lane.send(job::<Io>(input).0).unwrap();
}

#[test]
fn a_photo_waits_for_one_batch_of_each_other_lane_never_for_their_backlog() {
    let (texts, text_lane) = lane::open(FakeText::new(4).0);
    let (crops, recognizer_lane) = lane::open(fake_face_recognizer(4));
    let (canvases, detector_lane) = lane::open(fake_face_detector());
    let (lines, reader_lane) = lane::open(fake_text_recognizer(4));
    let (views, finder_lane) = lane::open(fake_text_detector());
    let (images, image_lane) = lane::open(FakeModel::new(4, SIDE).0);
    // The serving order, as Worker::start makes it with faces and OCR (no heads, no classifier).
    let mut lanes =
        Lanes::new(vec![text_lane], vec![recognizer_lane, detector_lane, reader_lane, finder_lane, image_lane]);
    let (text, image) = (0, 5);
    let others = 1..5;
    let pixels = || std::sync::Arc::new(RgbImage::new(32, 32));
    let canvas = || FaceCanvas { image: pixels(), scale: 1.0, offset: [0.0; 2], full_size: (32, 32), photo: None };
    let view = || OcrView { view: RgbImage::new(32, 32), pixels: pixels(), scale: 1.0, full_size: (32, 32) };
    let line = || LineInput { image: RgbImage::new(32, 48), width: 32 };
    // One large request's backlog on the detectors and recognizers (the detectors take one photo
    // a batch, the recognizers four faces or lines): 100 batches in all under strict priority.
    for _ in 0..30 {
        send::<Canvases>(&canvases, canvas());
        send::<OcrViews>(&views, view());
    }
    for _ in 0..80 {
        send::<FaceCrops>(&crops, photo(25));
        send::<TextLines>(&lines, line());
    }
    let mut next = || lanes.next_batch(Duration::ZERO, (HOUR, &mut || {})).unwrap().0;
    // Until the photo's batch: what ran before it, by lane.
    let until_served = |next: &mut dyn FnMut() -> usize| {
        let mut before = Vec::new();
        loop {
            match next() {
                lane if lane == image => return before,
                lane => before.push(lane),
            }
        }
    };
    let at_most_one_batch_of_each = |before: &[usize]| {
        for lane in others.clone() {
            let batches = before.iter().filter(|&&l| l == lane).count();
            assert!(batches <= 1, "the photo waited for {batches} batches of lane {lane}: {before:?}");
        }
        assert!(!before.contains(&text), "no text was queued: {before:?}");
    };
    // Another request's photo, queued behind that backlog, and one queued mid-way through it.
    send::<Photos>(&images, photo(51));
    at_most_one_batch_of_each(&until_served(&mut next));
    for _ in 0..3 {
        assert!(others.contains(&next()), "the backlog goes on");
    }
    send::<Photos>(&images, photo(76));
    let before = until_served(&mut next);
    at_most_one_batch_of_each(&before);
    assert!(!before.is_empty(), "every other lane still has work, and took its turn");

    // A search query still goes ahead of every lane's turn, photos' included.
    send::<Photos>(&images, photo(102));
    send::<Texts>(&texts, Tokens { ids: vec![49406, 49407] });
    assert_eq!(next(), text, "the query runs first");
    at_most_one_batch_of_each(&until_served(&mut next));
}

#[test]
fn a_text_batch_runs_on_the_text_tower_before_queued_photos() {
    let ((images, image_lane), (texts, text_lane)) =
        (lane::open(FakeModel::new(2, SIDE).0), lane::open(FakeText::new(2).0));
    let photos: Vec<_> = (0..5)
        .map(|_| {
            let (job, rx) = job::<Photos>(photo(76));
            images.send(job).unwrap();
            rx
        })
        .collect();
    let (query, text) = job::<Texts>(Tokens { ids: vec![49406, 320, 49407] });
    texts.send(query).unwrap();
    drop((images, texts));
    // The worker's loop, here on the test's thread: it serves what was queued, then ends.
    let lanes = Lanes::new(vec![text_lane], vec![image_lane]);
    run_worker(lanes, Duration::ZERO, &metrics(), &Health::default(), &Default::default());

    let text = text.blocking_recv().unwrap().unwrap();
    assert_eq!(text.output, [3.0, 0.0], "the fake text tower's embedding: the text's 3 ids");
    for photo in photos {
        let photo = photo.blocking_recv().unwrap().unwrap();
        assert!((photo.output[0] - fake_embedding(76)).abs() < 1e-5, "{photo:?}");
        assert!(text.finished <= photo.started, "the text ran after a photo: {text:?}, {photo:?}");
    }
}

#[test]
fn texts_are_embedded_through_the_worker_only_with_a_text_tower() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let tokens = || Tokens { ids: vec![49406, 49407] };
    let worker = Worker::start(
        FakeModel::new(4, SIDE).0,
        Some(FakeText::new(4).0),
        OptionalTowers::default(),
        Duration::ZERO,
        metrics(),
    );
    assert_eq!(worker.text_info().map(|info| info.id.as_str()), Some("fake-text"));
    assert_eq!(runtime.block_on(worker.embed_text(tokens())).unwrap().output, [2.0, 0.0]);

    let worker =
        Worker::start(FakeModel::new(4, SIDE).0, NO_TEXT, OptionalTowers::default(), Duration::ZERO, metrics());
    assert!(worker.text_info().is_none());
    assert!(matches!(runtime.block_on(worker.embed_text(tokens())), Err(BatchError::Model(_))));
}

#[test]
fn a_worker_that_dies_is_reported_stopped() {
    let (model, device) = FakeModel::new(4, SIDE);
    let worker = Worker::start(model, NO_TEXT, OptionalTowers::default(), Duration::from_millis(5), metrics());
    device.store(DEVICE_CRASHING, Ordering::SeqCst);
    assert!(matches!(embed_all(&worker, &[51]).pop().unwrap(), Err(BatchError::Stopped)));
    // The thread marks itself stopped as it unwinds, just after the photo's reply is dropped.
    let until = Instant::now() + Duration::from_secs(5);
    while worker.health().is_ok() {
        assert!(Instant::now() < until, "the dead worker was never reported");
        thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(worker.health(), Err(Unhealthy { why: Broken::WorkerStopped, .. })));
    assert!(matches!(embed_all(&worker, &[51]).pop().unwrap(), Err(BatchError::Stopped)));
}

/// A photo's view for the object detector stand-in.
fn object_view() -> ObjectView {
    let (layout, photo) = (ObjectLayout::Letterboxed(32), RgbImage::new(SIDE, SIDE));
    crate::preprocess::object_view(&photo, photo.dimensions(), layout).unwrap()
}

#[test]
fn towers_on_two_devices_get_a_worker_each_and_neither_waits_for_the_other() {
    const HOLD: Duration = Duration::from_secs(2);
    let (objects, _device) = slow_object_detector(HOLD);
    let towers = OptionalTowers { heads: None, faces: None, ocr: None, objects: Some(objects) };
    let worker = Worker::start(FakeModel::new(4, SIDE).0, NO_TEXT, towers, Duration::ZERO, metrics());
    let seats: Vec<_> = worker.workers().into_iter().map(|seat| (seat.device, seat.towers)).collect();
    assert_eq!(seats, [("cuda", vec!["object_detector"]), ("cpu", vec!["image"])], "CUDA's worker first");

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let view = object_view();
    let started = Instant::now();
    let (long, photos) = runtime.block_on(async {
        let long = worker.find_objects(view);
        let photos = async {
            // The long job is queued (its future polled) before the first photo.
            tokio::task::yield_now().await;
            let mut answered = Vec::new();
            for value in [25, 76, 127] {
                let served = worker.embed(photo(value), Span::none()).await.unwrap();
                answered.push(served.finished);
            }
            answered
        };
        tokio::join!(long, photos)
    });
    let long = long.unwrap();
    assert!(long.finished - started >= HOLD, "the stand-in held its worker: {:?}", long.finished - started);
    assert_eq!(photos.len(), 3);
    for finished in photos {
        assert!(finished < long.finished, "a photo waited for the other device's run");
    }
    let [cuda, cpu] = &worker.workers()[..] else { panic!("two workers") };
    assert!(cuda.busy_seconds >= HOLD.as_secs_f64() && cuda.busy_share > 0.0, "{cuda:?}");
    assert!(cpu.busy_seconds < cuda.busy_seconds, "{cpu:?}");
}

#[test]
fn a_lost_device_fails_only_its_own_workers_towers() {
    let (objects, device) = slow_object_detector(Duration::ZERO);
    let towers = OptionalTowers { heads: None, faces: None, ocr: None, objects: Some(objects) };
    let worker = Worker::start(FakeModel::new(4, SIDE).0, NO_TEXT, towers, Duration::ZERO, metrics());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert!(runtime.block_on(worker.find_objects(object_view())).is_ok());
    device.store(DEVICE_LOST, Ordering::SeqCst);
    assert!(matches!(runtime.block_on(worker.find_objects(object_view())), Err(BatchError::Model(_))));
    let lost = worker.health().unwrap_err();
    assert_eq!((lost.device, lost.towers.as_str(), lost.why), ("cuda", "object_detector", Broken::ModelBroken));
    assert!(worker.image_health().is_ok(), "the image tower's worker is another");
    assert!(embed_all(&worker, &[51]).pop().unwrap().is_ok(), "and it keeps answering");
    let healthy: Vec<bool> = worker.workers().iter().map(|seat| seat.healthy).collect();
    assert_eq!(healthy, [false, true]);
}
