//! Batcher stage: the one owner of the model sessions, fed by queues shared by every request.
//!
//! One worker thread per process runs the model, so requests never fight over the GPU (the seed
//! team's lesson: more workers per GPU made p95 worse). Preprocessed photos from any request are
//! queued; the worker takes up to `batch_size` of them, waiting at most `batch_wait` for a batch to
//! fill once it holds one, runs them together and sends each result back to its waiting photo. A
//! photo whose request gave up (deadline, disconnect) is dropped from the batch before it runs.
//!
//! Tokenized texts (search queries, labels) ride the same worker, on the text tower, in a queue
//! of their own that the worker looks at first: a query waits at most for the batch being formed
//! or run, never behind an image backlog. Text batches take what is queued without waiting to fill.
//!
//! Admission is counted in photos: a request takes one permit per photo up front or is refused at
//! once, so the queue, the decoded pixels and the fetches in flight all stay bounded.
//!
//! Tracing: each photo's `queue` span ends when its batch starts. A batch may hold photos of
//! several requests, so its one `inference` span is a child of the request of its first photo
//! and links to the span of every other request in it; each photo's `queue` span records the
//! `clipfn.batch.id` it rode in, which is also on the `inference` span.

use std::{
    sync::Arc,
    thread,
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, Sender, select_biased, unbounded};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tracing::Span;

use crate::{
    metrics::{Metrics, Stage},
    model::{Model, ModelError, ModelInfo, TextModel, TextModelInfo},
    preprocess::Pixels,
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

/// The whole queue is taken; the caller should come back later.
#[derive(Debug, thiserror::Error)]
#[error("{requested} photos asked for, {available} of {capacity} queue places free")]
pub struct Overloaded {
    pub requested: usize,
    pub available: usize,
    pub capacity: usize,
}

/// What one job asks the worker to embed; a batch holds one kind only.
enum Input {
    Image(Pixels),
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
    places: Arc<Semaphore>,
    capacity: usize,
    info: ModelInfo,
    text_info: Option<TextModelInfo>,
    metrics: Arc<Metrics>,
}

impl Batcher {
    /// Moves `model` (and the text tower, when there is one) onto its own worker thread.
    pub fn start(
        model: Model,
        text: Option<TextModel>,
        batch_wait: Duration,
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        let info = model.info.clone();
        let text_info = text.as_ref().map(|t| t.info.clone());
        let ((images, image_jobs), (texts, text_jobs)) = (unbounded(), unbounded());
        let queues = Queues { texts: text_jobs, images: image_jobs };
        let places = Arc::new(Semaphore::new(capacity));
        let watched = Arc::clone(&places);
        metrics.watch_admitted(move || (capacity - watched.available_permits()) as u64);
        let worker_metrics = Arc::clone(&metrics);
        thread::Builder::new()
            .name("clipfn-model".into())
            .spawn(move || run_worker(Towers { image: model, text }, queues, batch_wait, &worker_metrics))
            .expect("spawning the model worker thread");
        Batcher { images, texts, places, capacity, info, text_info, metrics }
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The text tower, when CLIPFN_TEXT_MODEL is set.
    pub fn text_info(&self) -> Option<&TextModelInfo> {
        self.text_info.as_ref()
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
        let job = Job { input: Input::Image(pixels), reply, queue_span, request_span: Span::current() };
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

/// The sessions the worker owns.
struct Towers {
    image: Model,
    text: Option<TextModel>,
}

impl Towers {
    /// Runs one batch of a single kind, laid end to end into the reused buffers.
    fn run(&mut self, batch: &[Job], pixels: &mut Pixels) -> Result<Vec<Vec<f32>>, ModelError> {
        pixels.clear();
        let mut rows = Vec::new();
        for job in batch {
            match &job.input {
                Input::Image(p) => pixels.extend(p),
                Input::Text(tokens) => rows.push(&tokens.ids[..]),
            }
        }
        match (&batch[0].input, &mut self.text) {
            (Input::Image(_), _) => self.image.run(pixels, batch.len()),
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

fn run_worker(mut towers: Towers, queues: Queues, batch_wait: Duration, metrics: &Metrics) {
    let info = &towers.image.info;
    let max = info.batch_size;
    let mut pixels = Pixels::empty(info.input_layout, max * info.slot_len());
    let mut batch_id: u64 = 0;
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
        let result = span.in_scope(|| towers.run(&batch, &mut pixels));
        let finished = Instant::now();
        if is_text {
            metrics.stage(Stage::TextInference, finished - started);
        } else {
            metrics.batch(batch.len());
            metrics.stage(Stage::Inference, finished - started);
        }
        tracing::debug!(size = batch.len(), text = is_text, ms = (finished - started).as_millis() as u64, "batch");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(input: Input) -> (Job, oneshot::Receiver<Result<Embedded, BatchError>>) {
        let (reply, waiting) = oneshot::channel();
        (Job { input, reply, queue_span: Span::none(), request_span: Span::none() }, waiting)
    }

    fn text() -> Input {
        Input::Text(Tokens { ids: vec![49406, 49407] })
    }

    #[test]
    fn a_text_goes_before_queued_photos() {
        let ((images, image_jobs), (texts, text_jobs)) = (unbounded(), unbounded());
        let queues = Queues { texts: text_jobs, images: image_jobs };
        let mut waiting = Vec::new();
        for _ in 0..5 {
            let (job, rx) = job(Input::Image(Pixels::NormalizedNchw(Vec::new())));
            images.send(job).unwrap();
            waiting.push(rx);
        }
        let (query, _rx) = job(text());
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
}
