//! The worker thread: the loop that serves the lanes, and what happens to one batch, a failed one
//! included (docs/design.md, "A failed batch is split, not failed whole": the warm-up input again,
//! then bisection).

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use super::{
    BatchError, Served,
    health::{Broken, Health},
    lane::{Job, Lanes},
    span::batch_span,
};
use crate::{
    model::{Input, ModelError, Output, Tower, run_in_buckets},
    observe::metrics::{BatchFailure, Metrics},
    sys::{
        memory::{IDLE_BEFORE_TRIM, Trimmer},
        panics,
    },
};

/// What every lane's batches share on the worker thread.
pub(super) struct BatchRunner<'a> {
    metrics: &'a Metrics,
    health: &'a Health,
    /// Nanoseconds this worker spent running batches (`seat`).
    busy: &'a AtomicU64,
    batch_id: u64,
    trimmer: Trimmer,
}

/// Serves `lanes`, in their order, until every queue is closed (the Worker was dropped at
/// shutdown) and what was queued is served.
pub(super) fn run_worker(mut lanes: Lanes, batch_wait: Duration, metrics: &Metrics, health: &Health, busy: &AtomicU64) {
    let mut runner = BatchRunner { metrics, health, busy, batch_id: 0, trimmer: Trimmer::default() };
    // Once a burst is over, the memory its photos and batches took goes back to the system.
    loop {
        let idle: (_, &mut dyn FnMut()) = (IDLE_BEFORE_TRIM, &mut || runner.trimmer.idle());
        let Some((lane, _size)) = lanes.next_batch(batch_wait, idle) else { break };
        lanes.serve(lane, &mut runner);
    }
    tracing::debug!("model worker stopped");
}

type JobResult<T> = Result<Output<T>, BatchError>;

impl BatchRunner<'_> {
    /// Runs `batch` on `tower` and answers each job; jobs nobody waits for any more are dropped
    /// first.
    pub(super) fn serve<T: Tower>(&mut self, tower: &mut T, mut batch: Vec<Job<T::Io>>) {
        let kind = T::KIND;
        if kind.counts_as_photos() {
            self.metrics.queued(-(batch.len() as i64));
        }
        batch.retain(|job| !job.reply.is_closed());
        if batch.is_empty() {
            return;
        }
        self.batch_id += 1;
        let span = batch_span(&mut batch, self.batch_id, kind);
        let started = Instant::now();
        // The span ends with the run, before any reply, so it never outlives the requests it serves.
        let results = span.in_scope(|| self.run_batch(tower, &batch));
        let finished = Instant::now();
        self.busy.fetch_add((finished - started).as_nanos() as u64, Ordering::Relaxed);
        if kind.counts_as_photos() {
            self.metrics.batch(batch.len());
        }
        self.metrics.stage(kind.stage(), finished - started);
        tracing::debug!(
            size = batch.len(),
            tower = kind.as_str(),
            ms = (finished - started).as_millis() as u64,
            "batch"
        );
        if results.iter().any(Result::is_err) {
            span.record("otel.status_code", "ERROR");
        }
        for (job, result) in batch.into_iter().zip(results) {
            let _ = job.reply.send(result.map(|output| Served { output, started, finished }));
        }
        // The batch's tensors and inputs are gone now: within a long burst, let their memory go.
        self.trimmer.after_batch();
    }

    /// One result per job. A failed batch is told apart: a broken tower fails every job and the
    /// worker's health; otherwise the inputs that trip the model are isolated by bisection.
    fn run_batch<T: Tower>(&self, tower: &mut T, batch: &[Job<T::Io>]) -> Vec<JobResult<T>> {
        let failure = match attempt(tower, batch) {
            Ok(outputs) => return outputs.into_iter().map(Ok).collect(),
            Err(failure) => failure,
        };
        self.metrics.batch_failed(failure.cause);
        let (size, tower_name) = (batch.len(), T::KIND.as_str());
        tracing::error!(error = %failure.error, size, tower = tower_name, "batch failed; running the warm-up input");
        // A panic here is not caught: the worker then stops, and its health says so.
        if let Err(e) = tower.check() {
            tracing::error!(error = %e, tower = tower_name, "the warm-up input fails too: the model is broken");
            self.health.fail(Broken::ModelBroken);
            let message = e.to_string();
            return batch.iter().map(|_| Err(BatchError::Model(ModelError::Inference(message.clone())))).collect();
        }
        let results = isolate(tower, batch, failure.error);
        let failed = results.iter().filter(|r| r.is_err()).count();
        tracing::warn!(
            failed,
            size,
            tower = tower_name,
            "inputs that trip the model isolated; the rest of the batch ran"
        );
        results
    }
}

/// `jobs` failed together with `error`: runs each half on its own and splits again the halves
/// that fail, down to single inputs.
fn isolate<T: Tower>(tower: &mut T, jobs: &[Job<T::Io>], error: ModelError) -> Vec<JobResult<T>> {
    if jobs.len() == 1 {
        return vec![Err(BatchError::Model(error))];
    }
    let (left, right) = jobs.split_at(jobs.len() / 2);
    let mut results = Vec::with_capacity(jobs.len());
    for half in [left, right] {
        match attempt(tower, half) {
            Ok(outputs) => results.extend(outputs.into_iter().map(Ok)),
            Err(failure) => results.extend(isolate(tower, half, failure.error)),
        }
    }
    results
}

/// A model run that failed, by error or by panic.
struct RunFailure {
    error: ModelError,
    cause: BatchFailure,
}

fn attempt<T: Tower>(tower: &mut T, jobs: &[Job<T::Io>]) -> Result<Vec<Output<T>>, RunFailure> {
    let inputs: Vec<&Input<T>> = jobs.iter().map(|job| &job.input).collect();
    match catch_unwind(AssertUnwindSafe(|| run_in_buckets(tower, &inputs))) {
        Ok(Ok(outputs)) => Ok(outputs),
        Ok(Err(error)) => Err(RunFailure { error, cause: BatchFailure::Error }),
        Err(panic) => {
            let error = ModelError::Inference(format!("the model panicked: {}", panics::message(panic.as_ref())));
            Err(RunFailure { error, cause: BatchFailure::Panic })
        }
    }
}
