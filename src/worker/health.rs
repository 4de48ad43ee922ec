//! A worker's health: a fact each worker thread owns and the API reads (/healthz, /readyz, /v1/embed
//! and `clipfn_model_healthy`). Neither side guesses it from the other.

use std::{
    sync::{Arc, OnceLock},
    thread,
};

/// Why a worker thread can no longer serve its towers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Broken {
    #[error("its model fails the warm-up input after a failed batch")]
    ModelBroken,
    #[error("the worker thread has stopped")]
    WorkerStopped,
}

/// A worker that can no longer serve, and why; the platform should replace the instance.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the {device} worker ({towers}) can no longer serve: {why}")]
pub struct Unhealthy {
    /// The device its towers run on (`cuda`, `cpu`).
    pub device: &'static str,
    /// Its towers, comma-separated.
    pub towers: String,
    pub why: Broken,
}

/// Once bad it stays bad: a lost GPU does not come back, the instance must be replaced.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<OnceLock<Broken>>);

impl Health {
    pub fn check(&self) -> Result<(), Broken> {
        self.0.get().map_or(Ok(()), |why| Err(*why))
    }

    pub(super) fn fail(&self, why: Broken) {
        if self.0.set(why).is_ok() {
            tracing::error!(reason = %why, "model worker unhealthy; /healthz and /readyz now answer 503");
        }
    }
}

/// A guard on the worker thread that marks the worker stopped when a panic the worker does not
/// catch unwinds the thread. Its orderly end, when the handle is dropped at exit, is not a failure.
pub(super) struct UnwindGuard(pub(super) Health);

impl Drop for UnwindGuard {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.fail(Broken::WorkerStopped);
        }
    }
}
