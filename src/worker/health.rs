//! The worker's health: a fact the worker owns and the API reads (/healthz, /readyz, /v1/embed and
//! `clipfn_model_healthy`). Neither side guesses it from the other.

use std::{
    sync::{Arc, OnceLock},
    thread,
};

/// Why the model worker can no longer serve; the platform should replace the instance.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unhealthy {
    #[error("the model fails its warm-up input after a failed batch")]
    ModelBroken,
    #[error("the model worker has stopped")]
    WorkerStopped,
}

/// Once bad it stays bad: a lost GPU does not come back, the instance must be replaced.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<OnceLock<Unhealthy>>);

impl Health {
    pub fn check(&self) -> Result<(), Unhealthy> {
        self.0.get().map_or(Ok(()), |why| Err(why.clone()))
    }

    pub(super) fn fail(&self, why: Unhealthy) {
        if self.0.set(why.clone()).is_ok() {
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
            self.0.fail(Unhealthy::WorkerStopped);
        }
    }
}
