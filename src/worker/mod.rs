//! Worker (the batcher stage): the one owner of the model sessions, fed by queues shared by every
//! request.
//!
//! One worker thread per process runs the model, so requests never fight over the GPU (the seed
//! team's lesson: more workers per GPU made p95 worse). Preprocessed photos from any request are
//! queued; the worker takes up to `batch_size` of them, waiting at most `batch_wait` for a batch to
//! fill once it holds one, runs them together and sends each result back to its waiting photo. A
//! photo whose request gave up (deadline, disconnect) is dropped from the batch before it runs.
//!
//! A batch that fails is not failed whole: its photos may belong to other users' requests. The
//! worker first runs the known-good warm-up input again. If that fails too, the model or its
//! device is broken: the batch fails and the worker's [`Health`] turns bad, so /healthz and /readyz
//! tell the platform to replace the instance. If it passes, the batch is split in halves, and
//! halves that fail are split again, until only the photos that trip the model are left; they get
//! `inference_failed` and everything else its embedding. A panic in the model counts as a failure.
//!
//! Tokenized texts (search queries, labels) ride the same worker, on the text tower, in a queue
//! of their own that the worker looks at first: a query waits at most for the batch being formed
//! or run, never behind an image backlog. Text batches take what is queued without waiting to
//! fill, and fail or split like photo batches.
//!
//! Tracing: each photo's `queue` span ends when its batch starts. A batch may hold photos of
//! several requests, so its one `inference` span is a child of the request of its first photo
//! and links to the span of every other request in it; each photo's `queue` span records the
//! `clipfn.batch.id` it rode in, which is also on the `inference` span.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{Arc, OnceLock},
    thread,
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, Sender, select_biased, unbounded};
use image::RgbImage;
use tokio::sync::oneshot;
use tracing::Span;

use crate::{
    model::{Model, ModelError, ModelInfo, TextModel, TextModelInfo},
    observe::metrics::{BatchFailure, Metrics, Stage},
    preprocess::Pixels,
    sys::{memory::Trimmer, panics},
    tokenize::Tokens,
};

/// One photo's result from the worker.
#[derive(Debug)]
pub struct Embedded {
    pub embedding: Vec<f32>,
    /// When the worker started and finished the batch this photo ran in.
    pub started: Instant,
    pub finished: Instant,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("the model worker has stopped")]
    Stopped,
}

/// Why the model worker can no longer serve; the platform should replace the instance.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unhealthy {
    #[error("the model fails its warm-up input after a failed batch")]
    ModelBroken,
    #[error("the model worker has stopped")]
    WorkerStopped,
}

/// The model worker's health: a fact the worker owns and the API reads. Once bad it stays bad: a
/// lost GPU does not come back, the instance must be replaced.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<OnceLock<Unhealthy>>);

impl Health {
    pub fn check(&self) -> Result<(), Unhealthy> {
        self.0.get().map_or(Ok(()), |why| Err(why.clone()))
    }

    fn fail(&self, why: Unhealthy) {
        if self.0.set(why.clone()).is_ok() {
            tracing::error!(reason = %why, "model worker unhealthy; /healthz and /readyz now answer 503");
        }
    }
}

/// Marks the worker stopped when its thread dies (a panic the worker does not catch). Its orderly
/// end, when the batcher is dropped at exit, is not a failure.
struct StopWatch(Health);

impl Drop for StopWatch {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.fail(Unhealthy::WorkerStopped);
        }
    }
}

/// What the worker needs from a model: `Model` in production; in unit tests, a stand-in that
/// can lose its GPU (that cannot happen here for real).
pub trait Infer: Send + 'static {
    fn info(&self) -> &ModelInfo;
    /// Runs `n` photos laid end to end; one raw embedding per photo.
    fn run(&mut self, pixels: &Pixels, n: usize) -> Result<Vec<Vec<f32>>, ModelError>;
    /// Runs the known-good warm-up input.
    fn check(&mut self) -> Result<(), ModelError>;
}

impl Infer for Model {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn run(&mut self, pixels: &Pixels, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
        Model::run(self, pixels, n)
    }
    fn check(&mut self) -> Result<(), ModelError> {
        Model::check(self)
    }
}

/// What one job asks the worker to embed; a batch holds one kind only.
enum Input {
    Image(RgbImage),
    Text(Tokens),
}

struct Job {
    input: Input,
    reply: oneshot::Sender<Result<Embedded, BatchError>>,
    /// The photo's wait; closed when its batch starts.
    queue_span: Span,
    /// The span of the request the photo belongs to, for the batch's parent or links.
    request_span: Span,
}

/// The worker's two queues: texts are served first.
struct Queues {
    texts: Receiver<Job>,
    images: Receiver<Job>,
}

pub struct Batcher {
    images: Sender<Job>,
    texts: Sender<Job>,
    info: ModelInfo,
    text_info: Option<TextModelInfo>,
    health: Health,
    metrics: Arc<Metrics>,
}

impl Batcher {
    /// Moves `model` (and the text tower, when there is one) onto its own worker thread.
    pub fn start(model: impl Infer, text: Option<TextModel>, batch_wait: Duration, metrics: Arc<Metrics>) -> Self {
        let info = model.info().clone();
        let text_info = text.as_ref().map(|t| t.info.clone());
        let ((images, image_jobs), (texts, text_jobs)) = (unbounded(), unbounded());
        let queues = Queues { texts: text_jobs, images: image_jobs };
        let health = Health::default();
        let watched = health.clone();
        metrics.watch_healthy(move || watched.check().is_ok());
        let (worker_metrics, worker_health) = (Arc::clone(&metrics), health.clone());
        thread::Builder::new()
            .name("clipfn-model".into())
            .spawn(move || {
                let _stopped = StopWatch(worker_health.clone());
                run_worker(Towers { image: model, text }, queues, batch_wait, &worker_metrics, &worker_health)
            })
            .expect("spawning the model worker thread");
        Batcher { images, texts, info, text_info, health, metrics }
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The text tower, when there is one.
    pub fn text_info(&self) -> Option<&TextModelInfo> {
        self.text_info.as_ref()
    }

    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Queues one preprocessed photo and waits for its embedding. Dropping the future withdraws
    /// the photo: the worker skips jobs nobody waits for. `queue_span` times the wait and is
    /// closed when the batch starts; the current span is taken as the photo's request span.
    pub async fn embed(&self, square: RgbImage, queue_span: Span) -> Result<Embedded, BatchError> {
        let (reply, result) = oneshot::channel();
        let job = Job { input: Input::Image(square), reply, queue_span, request_span: Span::current() };
        self.images.send(job).map_err(|_| BatchError::Stopped)?;
        self.metrics.queued(1);
        result.await.map_err(|_| BatchError::Stopped)?
    }

    /// Queues one tokenized text for the text tower and waits for its embedding; dropping the
    /// future withdraws it, as for photos.
    pub async fn embed_text(&self, tokens: Tokens) -> Result<Embedded, BatchError> {
        let (reply, result) = oneshot::channel();
        // Texts have no queue span of their own: their wait is a batch at most.
        let job = Job { input: Input::Text(tokens), reply, queue_span: Span::none(), request_span: Span::current() };
        self.texts.send(job).map_err(|_| BatchError::Stopped)?;
        result.await.map_err(|_| BatchError::Stopped)?
    }
}

/// The sessions the worker owns, and the buffers batches are laid out in.
struct Towers<M> {
    image: M,
    text: Option<TextModel>,
}

struct Buffers {
    pixels: Pixels,
}

impl<M: Infer> Towers<M> {
    /// Runs `jobs`, all of one kind, on their tower.
    fn run(&mut self, jobs: &[Job], buffers: &mut Buffers) -> Result<Vec<Vec<f32>>, ModelError> {
        buffers.pixels.clear();
        // Texts stay one row each: the text model pads them to a common length.
        let mut rows = Vec::new();
        for job in jobs {
            match &job.input {
                Input::Image(square) => buffers.pixels.push(square, &self.image.info().preprocessing),
                Input::Text(tokens) => rows.push(&tokens.ids[..]),
            }
        }
        match (&jobs[0].input, &mut self.text) {
            (Input::Image(_), _) => self.image.run(&buffers.pixels, jobs.len()),
            (Input::Text(_), Some(text)) => text.run(&rows),
            (Input::Text(_), None) => Err(ModelError::Inference("no text model is loaded".into())),
        }
    }
}

/// The next batch, all of one kind, or `None` once the Batcher is gone. Texts come first; an
/// image batch then waits up to `batch_wait` to fill, a text batch takes what is queued.
fn next_batch(queues: &Queues, max: usize, batch_wait: Duration) -> Option<Vec<Job>> {
    let (first, queue) = match queues.texts.try_recv() {
        Ok(job) => (job, &queues.texts),
        Err(_) => select_biased! {
            recv(queues.texts) -> job => match job {
                Ok(job) => (job, &queues.texts),
                // Both senders go together; photos still queued are served to the end.
                Err(_) => (queues.images.recv().ok()?, &queues.images),
            },
            recv(queues.images) -> job => (job.ok()?, &queues.images),
        },
    };
    let is_text = matches!(first.input, Input::Text(_));
    let mut batch = vec![first];
    let fill_by = Instant::now() + if is_text { Duration::ZERO } else { batch_wait };
    while batch.len() < max {
        match queue.recv_deadline(fill_by) {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    Some(batch)
}

type JobResult = Result<Vec<f32>, BatchError>;

fn run_worker(
    mut towers: Towers<impl Infer>,
    queues: Queues,
    batch_wait: Duration,
    metrics: &Metrics,
    health: &Health,
) {
    let info = towers.image.info();
    let max = info.batch_size;
    let pixels = Pixels::empty(info.input_layout, max * info.slot_len());
    let mut buffers = Buffers { pixels };
    let mut batch_id: u64 = 0;
    let mut trimmer = Trimmer::default();
    // Ends when every sender is gone, i.e. the Batcher was dropped at shutdown.
    while let Some(mut batch) = next_batch(&queues, max, batch_wait) {
        let is_text = matches!(batch[0].input, Input::Text(_));
        if !is_text {
            metrics.queued(-(batch.len() as i64));
        }
        batch.retain(|job| !job.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        batch_id += 1;
        let span = batch_span(&mut batch, batch_id, if is_text { "text" } else { "image" });
        let started = Instant::now();
        // The span ends with the run, before any reply, so it never outlives the requests it serves.
        let results = span.in_scope(|| run_batch(&mut towers, &mut buffers, &batch, metrics, health));
        let finished = Instant::now();
        if is_text {
            metrics.stage(Stage::TextInference, finished - started);
        } else {
            metrics.batch(batch.len());
            metrics.stage(Stage::Inference, finished - started);
        }
        tracing::debug!(size = batch.len(), text = is_text, ms = (finished - started).as_millis() as u64, "batch");
        if results.iter().any(Result::is_err) {
            span.record("otel.status_code", "ERROR");
        }
        for (job, result) in batch.into_iter().zip(results) {
            let _ = job.reply.send(result.map(|embedding| Embedded { embedding, started, finished }));
        }
        // The batch's tensors and photos are gone now: let their memory go before the next one.
        trimmer.after_batch();
    }
    tracing::debug!("model worker stopped");
}

/// One result per job. A failed batch is told apart: a broken model fails every photo and the
/// worker's health; otherwise the photos that trip the model are isolated by bisection.
fn run_batch(
    towers: &mut Towers<impl Infer>,
    buffers: &mut Buffers,
    batch: &[Job],
    metrics: &Metrics,
    health: &Health,
) -> Vec<JobResult> {
    let failure = match attempt(towers, buffers, batch) {
        Ok(embeddings) => return embeddings.into_iter().map(Ok).collect(),
        Err(failure) => failure,
    };
    metrics.batch_failed(failure.cause);
    tracing::error!(error = %failure.error, size = batch.len(), "batch failed; running the warm-up input");
    // A panic here is not caught: the worker then stops, and its health says so. The image
    // tower's warm-up input also tells whether the device the text tower shares still works.
    if let Err(e) = towers.image.check() {
        tracing::error!(error = %e, "the warm-up input fails too: the model is broken");
        health.fail(Unhealthy::ModelBroken);
        let message = e.to_string();
        return batch.iter().map(|_| Err(BatchError::Model(ModelError::Inference(message.clone())))).collect();
    }
    let results = isolate(towers, buffers, batch, failure.error);
    let failed = results.iter().filter(|r| r.is_err()).count();
    tracing::warn!(failed, size = batch.len(), "photos that trip the model isolated; the rest of the batch ran");
    results
}

/// `jobs` failed together with `error`: runs each half on its own and splits again the halves
/// that fail, down to single photos.
fn isolate(towers: &mut Towers<impl Infer>, buffers: &mut Buffers, jobs: &[Job], error: ModelError) -> Vec<JobResult> {
    if jobs.len() == 1 {
        return vec![Err(BatchError::Model(error))];
    }
    let (left, right) = jobs.split_at(jobs.len() / 2);
    let mut results = Vec::with_capacity(jobs.len());
    for half in [left, right] {
        match attempt(towers, buffers, half) {
            Ok(embeddings) => results.extend(embeddings.into_iter().map(Ok)),
            Err(failure) => results.extend(isolate(towers, buffers, half, failure.error)),
        }
    }
    results
}

/// A model run that failed, by error or by panic.
struct Failure {
    error: ModelError,
    cause: BatchFailure,
}

fn attempt(towers: &mut Towers<impl Infer>, buffers: &mut Buffers, jobs: &[Job]) -> Result<Vec<Vec<f32>>, Failure> {
    match catch_unwind(AssertUnwindSafe(|| towers.run(jobs, buffers))) {
        Ok(Ok(embeddings)) => Ok(embeddings),
        Ok(Err(error)) => Err(Failure { error, cause: BatchFailure::Error }),
        Err(panic) => {
            let error = ModelError::Inference(format!("the model panicked: {}", panics::message(panic.as_ref())));
            Err(Failure { error, cause: BatchFailure::Panic })
        }
    }
}

/// Ends the photos' queue spans and opens the batch's `inference` span: a child of the first
/// photo's request, linked to every other request in the batch.
fn batch_span(batch: &mut [Job], batch_id: u64, tower: &'static str) -> Span {
    let mut requests: Vec<tracing::Id> = Vec::new();
    for job in batch.iter() {
        if let Some(id) = job.request_span.id()
            && !requests.contains(&id)
        {
            requests.push(id);
        }
    }
    // i64, not usize: tracing-opentelemetry turns u64 fields into strings.
    let span = tracing::info_span!(
        parent: &batch[0].request_span,
        "inference",
        clipfn.batch.id = batch_id as i64,
        clipfn.batch.size = batch.len() as i64,
        clipfn.batch.requests = requests.len() as i64,
        clipfn.batch.tower = tower,
        otel.status_code = tracing::field::Empty,
    );
    let parent = batch[0].request_span.id();
    for id in requests.iter().filter(|id| Some(*id) != parent.as_ref()) {
        span.follows_from(id);
    }
    for job in batch.iter_mut() {
        job.queue_span.record("clipfn.batch.id", batch_id as i64);
        drop(std::mem::replace(&mut job.queue_span, Span::none()));
    }
    span
}

/// A stand-in model for unit tests, here and in `api`: it can lose its device mid-flight, which
/// cannot happen on this machine for real. A photo's embedding is `[mean of its values, 1]`. Like
/// the poison model of tools/make_models.py, a photo whose values are all above 1.9 (white) fails
/// the run it is in; one whose values are all below -1.4 (black: -1.79, -1.75 and -1.48 by
/// channel) makes the run panic.
#[cfg(test)]
pub(crate) mod fake {
    use std::sync::atomic::{AtomicU8, Ordering};

    use super::*;
    use crate::{
        preprocess::{Layout, Transform},
        settings::{Device, Weights},
    };

    pub const DEVICE_OK: u8 = 0;
    /// Every run and the warm-up input fail.
    pub const DEVICE_LOST: u8 = 1;
    /// Every run fails and the warm-up input panics.
    pub const DEVICE_CRASHING: u8 = 2;

    pub struct FakeModel {
        info: ModelInfo,
        device: Arc<AtomicU8>,
    }

    impl FakeModel {
        /// The model and the switch for its device's state.
        pub fn new(batch_size: usize, image_size: u32) -> (Self, Arc<AtomicU8>) {
            let info = ModelInfo {
                id: "fake".into(),
                file: "fake.onnx".into(),
                precision: Weights::Fp32,
                provider: Device::Cpu,
                fallback_reason: None,
                input_name: "pixel_values".into(),
                output_name: "image_embeds".into(),
                image_size,
                preprocessing: Transform::clip(image_size),
                input_layout: Layout::NormalizedNchw,
                dim: 2,
                batch_size,
                warm_up_batches: vec![1, batch_size],
            };
            let device = Arc::new(AtomicU8::new(DEVICE_OK));
            (FakeModel { info, device: Arc::clone(&device) }, device)
        }
    }

    impl Infer for FakeModel {
        fn info(&self) -> &ModelInfo {
            &self.info
        }

        fn run(&mut self, pixels: &Pixels, n: usize) -> Result<Vec<Vec<f32>>, ModelError> {
            if self.device.load(Ordering::SeqCst) != DEVICE_OK {
                return Err(ModelError::Inference("CUDA error: device lost".into()));
            }
            let Pixels::NormalizedNchw(values) = pixels else { unreachable!("the fake takes normalised input") };
            assert_eq!(values.len(), n * self.info.slot_len());
            let photos: Vec<&[f32]> = values.chunks(self.info.slot_len()).collect();
            if photos.iter().any(|p| p.iter().all(|&v| v < -1.4)) {
                panic!("a black photo");
            }
            if photos.iter().any(|p| p.iter().all(|&v| v > 1.9)) {
                return Err(ModelError::Inference("Reshape: the input cannot be reshaped".into()));
            }
            Ok(photos.iter().map(|p| vec![p.iter().sum::<f32>() / p.len() as f32, 1.0]).collect())
        }

        fn check(&mut self) -> Result<(), ModelError> {
            match self.device.load(Ordering::SeqCst) {
                DEVICE_OK => Ok(()),
                DEVICE_LOST => Err(ModelError::Inference("CUDA error: device lost".into())),
                _ => panic!("the driver crashed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use opentelemetry::metrics::MeterProvider as _;

    use super::{fake::*, *};
    use crate::preprocess::{CLIP_MEAN, CLIP_STD};

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

    fn embed_all(batcher: &Batcher, values: &[u8]) -> Vec<Result<Embedded, BatchError>> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        // join_all polls every future once before any waits, so all photos are queued at once.
        runtime.block_on(futures::future::join_all(values.iter().map(|&v| batcher.embed(photo(v), Span::none()))))
    }

    #[test]
    fn photos_that_trip_the_model_fail_alone_and_the_rest_of_their_batch_runs() {
        let (model, _device) = FakeModel::new(6, SIDE);
        let batcher = Batcher::start(model, None, Duration::from_secs(10), metrics());
        // White trips the model and black crashes it; the greys embed.
        let values = [25, 255, 76, 0, 127, 153];
        let results = embed_all(&batcher, &values);
        let mut batch_start = None;
        for (value, result) in values.iter().zip(&results) {
            match result {
                Err(BatchError::Model(_)) => assert!([0, 255].contains(value), "photo {value} failed: {result:?}"),
                Ok(embedded) => {
                    let expected = fake_embedding(*value);
                    assert!((embedded.embedding[0] - expected).abs() < 1e-5, "photo {value}: {embedded:?}");
                    // All from one batch: the full batch failed and was split, not retried per photo.
                    assert_eq!(*batch_start.get_or_insert(embedded.started), embedded.started);
                }
                Err(other) => panic!("photo {value}: {other}"),
            }
        }
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4);
        assert!(batcher.health().check().is_ok(), "bad photos must not make the instance unhealthy");
    }

    #[test]
    fn a_lost_device_fails_its_batch_and_turns_the_health_bad() {
        let (model, device) = FakeModel::new(4, SIDE);
        let batcher = Batcher::start(model, None, Duration::from_millis(5), metrics());
        assert!(embed_all(&batcher, &[51]).pop().unwrap().is_ok());
        assert!(batcher.health().check().is_ok());
        device.store(DEVICE_LOST, Ordering::SeqCst);
        let results = embed_all(&batcher, &[51, 102]);
        assert!(results.iter().all(|r| matches!(r, Err(BatchError::Model(_)))), "{results:?}");
        assert!(matches!(batcher.health().check(), Err(Unhealthy::ModelBroken)));
    }

    fn job(input: Input) -> (Job, oneshot::Receiver<Result<Embedded, BatchError>>) {
        let (reply, waiting) = oneshot::channel();
        (Job { input, reply, queue_span: Span::none(), request_span: Span::none() }, waiting)
    }

    #[test]
    fn a_text_goes_before_queued_photos() {
        let ((images, image_jobs), (texts, text_jobs)) = (unbounded(), unbounded());
        let queues = Queues { texts: text_jobs, images: image_jobs };
        let mut waiting = Vec::new();
        for _ in 0..5 {
            let (job, rx) = job(Input::Image(photo(25)));
            images.send(job).unwrap();
            waiting.push(rx);
        }
        let (query, _rx) = job(Input::Text(Tokens { ids: vec![49406, 49407] }));
        texts.send(query).unwrap();

        let first = next_batch(&queues, 4, Duration::ZERO).unwrap();
        assert!(first.len() == 1 && matches!(first[0].input, Input::Text(_)), "the query runs first, alone");
        let second = next_batch(&queues, 4, Duration::ZERO).unwrap();
        assert_eq!(second.len(), 4, "then photos, in batches of the batch size");
        assert!(second.iter().all(|j| matches!(j.input, Input::Image(_))));
        drop((images, texts));
        assert_eq!(next_batch(&queues, 4, Duration::ZERO).map(|b| b.len()), Some(1), "the last photo");
        assert!(next_batch(&queues, 4, Duration::ZERO).is_none(), "then the worker stops");
    }

    #[test]
    fn a_worker_that_dies_is_reported_stopped() {
        let (model, device) = FakeModel::new(4, SIDE);
        let batcher = Batcher::start(model, None, Duration::from_millis(5), metrics());
        device.store(DEVICE_CRASHING, Ordering::SeqCst);
        assert!(matches!(embed_all(&batcher, &[51]).pop().unwrap(), Err(BatchError::Stopped)));
        // The thread marks itself stopped as it unwinds, just after the photo's reply is dropped.
        let until = Instant::now() + Duration::from_secs(5);
        while batcher.health().check().is_ok() {
            assert!(Instant::now() < until, "the dead worker was never reported");
            thread::sleep(Duration::from_millis(10));
        }
        assert!(matches!(batcher.health().check(), Err(Unhealthy::WorkerStopped)));
        assert!(matches!(embed_all(&batcher, &[51]).pop().unwrap(), Err(BatchError::Stopped)));
    }
}
