//! Batcher stage: the one owner of the model session, fed by a queue shared by every request.
//!
//! One worker thread per process runs the model, so requests never fight over the GPU (the seed
//! team's lesson: more workers per GPU made p95 worse). Preprocessed photos from any request are
//! queued; the worker takes up to `batch_size` of them, waiting at most `batch_wait` for a batch to
//! fill once it holds one, runs them together and sends each result back to its waiting photo. A
//! photo whose request gave up (deadline, disconnect) is dropped from the batch before it runs.
//!
//! Admission is counted in photos: a request takes one permit per photo up front or is refused at
//! once, so the queue, the decoded pixels and the fetches in flight all stay bounded.
//!
//! Tracing: each photo's `queue` span ends when its batch starts. A batch may hold photos of
//! several requests, so its one `inference` span is a child of the request of its first photo
//! and links to the span of every other request in it; each photo's `queue` span records the
//! `clipfn.batch.id` it rode in, which is also on the `inference` span.

use std::{
    sync::{Arc, mpsc},
    thread,
    time::{Duration, Instant},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tracing::Span;

use crate::{
    metrics::{Metrics, Stage},
    model::{Model, ModelError, ModelInfo},
    preprocess::Pixels,
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

/// The whole queue is taken; the caller should come back later.
#[derive(Debug, thiserror::Error)]
#[error("{requested} photos asked for, {available} of {capacity} queue places free")]
pub struct Overloaded {
    pub requested: usize,
    pub available: usize,
    pub capacity: usize,
}

struct Job {
    pixels: Pixels,
    reply: oneshot::Sender<Result<Embedded, BatchError>>,
    /// The photo's wait; closed when its batch starts.
    queue_span: Span,
    /// The span of the request the photo belongs to, for the batch's parent or links.
    request_span: Span,
}

pub struct Batcher {
    queue: mpsc::Sender<Job>,
    places: Arc<Semaphore>,
    capacity: usize,
    info: ModelInfo,
    metrics: Arc<Metrics>,
}

impl Batcher {
    /// Moves `model` onto its own worker thread.
    pub fn start(model: Model, batch_wait: Duration, capacity: usize, metrics: Arc<Metrics>) -> Self {
        let info = model.info.clone();
        let (queue, jobs) = mpsc::channel();
        let places = Arc::new(Semaphore::new(capacity));
        let watched = Arc::clone(&places);
        metrics.watch_admitted(move || (capacity - watched.available_permits()) as u64);
        let worker_metrics = Arc::clone(&metrics);
        thread::Builder::new()
            .name("clipfn-model".into())
            .spawn(move || run_worker(model, jobs, batch_wait, &worker_metrics))
            .expect("spawning the model worker thread");
        Batcher { queue, places, capacity, info, metrics }
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Reserves queue places for `photos` photos, or says at once that there is no room.
    pub fn admit(&self, photos: usize) -> Result<OwnedSemaphorePermit, Overloaded> {
        let overloaded =
            || Overloaded { requested: photos, available: self.places.available_permits(), capacity: self.capacity };
        let n = u32::try_from(photos).map_err(|_| overloaded())?;
        Arc::clone(&self.places).try_acquire_many_owned(n).map_err(|_| overloaded())
    }

    /// Photos currently admitted (queued, decoding or fetching).
    pub fn in_flight(&self) -> usize {
        self.capacity - self.places.available_permits()
    }

    /// Queues one preprocessed photo and waits for its embedding. Dropping the future withdraws
    /// the photo: the worker skips jobs nobody waits for. `queue_span` times the wait and is
    /// closed when the batch starts; the current span is taken as the photo's request span.
    pub async fn embed(&self, pixels: Pixels, queue_span: Span) -> Result<Embedded, BatchError> {
        let (reply, result) = oneshot::channel();
        let job = Job { pixels, reply, queue_span, request_span: Span::current() };
        self.queue.send(job).map_err(|_| BatchError::Stopped)?;
        self.metrics.queued(1);
        result.await.map_err(|_| BatchError::Stopped)?
    }
}

fn run_worker(mut model: Model, jobs: mpsc::Receiver<Job>, batch_wait: Duration, metrics: &Metrics) {
    let max = model.info.batch_size;
    let mut input = Pixels::empty(model.info.input_layout, max * model.info.slot_len());
    let mut batch_id: u64 = 0;
    // Ends when every sender is gone, i.e. the Batcher was dropped at shutdown.
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        let fill_by = Instant::now() + batch_wait;
        while batch.len() < max {
            match jobs.recv_timeout(fill_by.saturating_duration_since(Instant::now())) {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        metrics.queued(-(batch.len() as i64));
        batch.retain(|job| !job.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        batch_id += 1;
        let span = batch_span(&mut batch, batch_id);
        input.clear();
        for job in &batch {
            input.extend(&job.pixels);
        }
        let started = Instant::now();
        // The span ends with the run, before any reply, so it never outlives the requests it serves.
        let result = span.in_scope(|| model.run(&input, batch.len()));
        let finished = Instant::now();
        metrics.batch(batch.len());
        metrics.stage(Stage::Inference, finished - started);
        tracing::debug!(size = batch.len(), ms = (finished - started).as_millis() as u64, "batch");
        match result {
            Ok(embeddings) => {
                for (job, embedding) in batch.into_iter().zip(embeddings) {
                    let _ = job.reply.send(Ok(Embedded { embedding, started, finished }));
                }
            }
            Err(e) => {
                span.record("otel.status_code", "ERROR");
                span.in_scope(|| tracing::error!(error = %e, size = batch.len(), "batch failed"));
                let message = e.to_string();
                for job in batch {
                    let _ = job.reply.send(Err(BatchError::Model(ModelError::Inference(message.clone()))));
                }
            }
        }
    }
    tracing::debug!("model worker stopped");
}

/// Ends the photos' queue spans and opens the batch's `inference` span: a child of the first
/// photo's request, linked to every other request in the batch.
fn batch_span(batch: &mut [Job], batch_id: u64) -> Span {
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
