//! Worker (the batcher stage): the one owner of the model sessions, fed by queues shared by every
//! request. This file is the handle the rest of the service holds, [`Batcher`].
//!
//! One worker thread per process runs the towers, so requests never fight over the GPU (the seed
//! team's lesson: more workers per GPU made p95 worse). Each tower has a lane (`lane`): its queue
//! of jobs from any request. The worker takes up to a batch of one lane's jobs, runs them together
//! and sends each result back to its waiting request (`run`). A job whose request gave up
//! (deadline, disconnect) is dropped from the batch before it runs.
//!
//! Preprocessed photos go to the image tower; a photo batch waits at most `batch_wait` to fill
//! once it holds one. Tokenized texts (search queries, labels) go to the text tower, in a lane the
//! worker looks at first: a query waits at most for the batch being formed or run, never behind
//! an image backlog. Text batches take what is queued without waiting to fill.
//!
//! A batch that fails is not failed whole: its inputs may belong to other users' requests. The
//! worker first runs that tower's known-good warm-up input again. If that fails too, the model or
//! its device is broken: the batch fails and the worker's [`Health`] turns bad (`health`), so
//! /healthz and /readyz tell the platform to replace the instance. If it passes, the batch is
//! split in halves, and halves that fail are split again, until only the inputs that trip the
//! model are left; they get `inference_failed` and everything else its embedding. A panic in the
//! model counts as a failure. Each batch has one `inference` span (`span`).

mod health;
mod lane;
mod run;
mod span;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

use std::{
    sync::Arc,
    thread,
    time::{Duration, Instant},
};

use crossbeam_channel::Sender;
use image::RgbImage;
use tokio::sync::oneshot;
use tracing::Span;

pub use self::health::{Health, Unhealthy};
use self::{
    health::StopWatch,
    lane::{Job, Lane},
};
use crate::{
    model::{ModelError, ModelInfo, Photos, TextModelInfo, Texts, Tower},
    observe::metrics::Metrics,
    tokenize::Tokens,
};

/// One job's result from the worker.
#[derive(Debug)]
pub struct Embedded {
    pub embedding: Vec<f32>,
    /// When the worker started and finished the batch this job ran in.
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

pub struct Batcher {
    images: Sender<Job<RgbImage>>,
    /// Present when there is a text tower.
    texts: Option<Sender<Job<Tokens>>>,
    info: ModelInfo,
    text_info: Option<TextModelInfo>,
    health: Health,
    metrics: Arc<Metrics>,
}

impl Batcher {
    /// Moves the image tower (and the text tower, when there is one) onto its own worker thread.
    pub fn start<I, T>(image: I, text: Option<T>, batch_wait: Duration, metrics: Arc<Metrics>) -> Self
    where
        I: Tower<Embeds = Photos>,
        T: Tower<Embeds = Texts>,
    {
        let info = image.info().clone();
        let text_info = text.as_ref().map(|t| t.info().clone());
        let (images, image_lane) = lane::open(image);
        let (texts, text_lane) = text.map(lane::open).unzip();
        // The serving order: texts first.
        let lanes: Vec<Box<dyn Lane>> = text_lane.into_iter().chain([image_lane]).collect();
        let health = Health::default();
        let watched = health.clone();
        metrics.watch_healthy(move || watched.check().is_ok());
        let (worker_metrics, worker_health) = (Arc::clone(&metrics), health.clone());
        thread::Builder::new()
            .name("clipfn-model".into())
            .spawn(move || {
                let _stopped = StopWatch(worker_health.clone());
                run::run_worker(lanes, batch_wait, &worker_metrics, &worker_health)
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
        let result = queue(&self.images, square, queue_span)?;
        self.metrics.queued(1);
        result.await.map_err(|_| BatchError::Stopped)?
    }

    /// Queues one tokenized text for the text tower and waits for its embedding; dropping the
    /// future withdraws it, as for photos.
    pub async fn embed_text(&self, tokens: Tokens) -> Result<Embedded, BatchError> {
        let texts = self.texts.as_ref().ok_or_else(|| ModelError::Inference("no text model is loaded".into()))?;
        // Texts have no queue span of their own: their wait is a batch at most.
        let result = queue(texts, tokens, Span::none())?;
        result.await.map_err(|_| BatchError::Stopped)?
    }
}

type Reply = oneshot::Receiver<Result<Embedded, BatchError>>;

/// Puts `input` on a lane's queue, with the current span as its request's.
fn queue<I>(lane: &Sender<Job<I>>, input: I, queue_span: Span) -> Result<Reply, BatchError> {
    let (reply, result) = oneshot::channel();
    let job = Job { input, reply, queue_span, request_span: Span::current() };
    lane.send(job).map_err(|_| BatchError::Stopped)?;
    Ok(result)
}
