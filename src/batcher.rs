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

use std::{
    sync::{Arc, mpsc},
    thread,
    time::{Duration, Instant},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::{
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
}

pub struct Batcher {
    queue: mpsc::Sender<Job>,
    places: Arc<Semaphore>,
    capacity: usize,
    info: ModelInfo,
}

impl Batcher {
    /// Moves `model` onto its own worker thread.
    pub fn start(model: Model, batch_wait: Duration, capacity: usize) -> Self {
        let info = model.info.clone();
        let (queue, jobs) = mpsc::channel();
        thread::Builder::new()
            .name("clipfn-model".into())
            .spawn(move || run_worker(model, jobs, batch_wait))
            .expect("spawning the model worker thread");
        Batcher { queue, places: Arc::new(Semaphore::new(capacity)), capacity, info }
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
    /// the photo: the worker skips jobs nobody waits for.
    pub async fn embed(&self, pixels: Pixels) -> Result<Embedded, BatchError> {
        let (reply, result) = oneshot::channel();
        self.queue.send(Job { pixels, reply }).map_err(|_| BatchError::Stopped)?;
        result.await.map_err(|_| BatchError::Stopped)?
    }
}

fn run_worker(mut model: Model, jobs: mpsc::Receiver<Job>, batch_wait: Duration) {
    let max = model.info.batch_size;
    let mut input = Pixels::empty(model.info.input_layout, max * model.info.slot_len());
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
        batch.retain(|job| !job.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        input.clear();
        for job in &batch {
            input.extend(&job.pixels);
        }
        let started = Instant::now();
        let result = model.run(&input, batch.len());
        let finished = Instant::now();
        tracing::debug!(size = batch.len(), ms = (finished - started).as_millis() as u64, "batch");
        match result {
            Ok(embeddings) => {
                for (job, embedding) in batch.into_iter().zip(embeddings) {
                    let _ = job.reply.send(Ok(Embedded { embedding, started, finished }));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, size = batch.len(), "batch failed");
                let message = e.to_string();
                for job in batch {
                    let _ = job.reply.send(Err(BatchError::Model(ModelError::Inference(message.clone()))));
                }
            }
        }
    }
    tracing::debug!("model worker stopped");
}
