//! The decode stage's threads: `decode_threads` of them, named `clipfn-decode-N`, fed from one
//! queue. They are the one bound on how many photos decode at once, and the one place a decoder's
//! panic is caught.
//!
//! tokio's blocking pool would serve too, but it is shared: object_store's local reads run there,
//! one task per photo in flight, so it grows to a hundred threads under load and each photo's
//! decode lands on whichever is free, its caches cold (docs/design.md, "Where a photo's CPU time
//! goes"). A fixed set keeps the decoders few, warm and named in a profile.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    thread,
    time::{Duration, Instant},
};

use crossbeam_channel::{Sender, unbounded};
use tokio::sync::oneshot;

use crate::{decode::DecodeError, sys::panics};

type Job = Box<dyn FnOnce() + Send>;

pub struct DecodePool {
    jobs: Sender<Job>,
    /// How long a job may run before its photo stops waiting for it (CLIPFN_DECODE_TIMEOUT_MS).
    timeout: Duration,
}

impl DecodePool {
    /// Starts `threads` threads; they end once the pool is dropped and the queue is empty.
    pub fn new(threads: usize, timeout: Duration) -> Self {
        let (jobs, queue) = unbounded::<Job>();
        for n in 0..threads.max(1) {
            let queue = queue.clone();
            thread::Builder::new()
                .name(format!("clipfn-decode-{n}"))
                .spawn(move || queue.iter().for_each(|job| job()))
                .expect("starting a decode thread");
        }
        DecodePool { jobs, timeout }
    }

    /// Runs `work` on a decode thread once one is free; returns when it started, and its result.
    ///
    /// The time budget counts from the start, not from the wait for a thread. Past it the photo
    /// stops waiting (`Timeout`), but the job keeps what it holds (its bytes, its share of the
    /// memory budget) until it really ends, so the threads never run over their bounds. A job
    /// whose photo stopped waiting before it started is dropped unrun. A panic in `work` (a
    /// decoder on a hostile file) ends that job only, as `Crashed`; the thread carries on.
    pub async fn run<T: Send + 'static, E: From<DecodeError> + Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> (Instant, Result<T, E>) {
        let (start, started) = oneshot::channel();
        let (done, result) = oneshot::channel();
        let job = move || {
            if done.is_closed() {
                return;
            }
            let _ = start.send(Instant::now());
            let outcome = catch_unwind(AssertUnwindSafe(work))
                .unwrap_or_else(|panic| Err(DecodeError::Crashed(panics::message(panic.as_ref())).into()));
            let _ = done.send(outcome); // the photo may have stopped waiting (its decode timed out)
        };
        self.jobs.send(Box::new(job)).expect("the decode threads outlive the pool");
        let started = started.await.expect("a job runs while its photo waits");
        match tokio::time::timeout_at((started + self.timeout).into(), result).await {
            Ok(outcome) => (started, outcome.expect("a job that started always answers")),
            Err(_elapsed) => (started, Err(DecodeError::Timeout(self.timeout).into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_panicking_job_returns_its_message_and_the_thread_serves_the_next() {
        let pool = DecodePool::new(1, MINUTE);
        let (_, crashed) = pool.run(|| -> Result<u32, DecodeError> { panic!("hostile photo") }).await;
        assert!(matches!(&crashed, Err(DecodeError::Crashed(m)) if m == "hostile photo"), "{crashed:?}");
        let (_, name) = pool.run(|| Ok::<_, DecodeError>(thread::current().name().map(str::to_string))).await;
        assert_eq!(name.unwrap(), Some("clipfn-decode-0".to_string()));
        let (_, failed) =
            pool.run(|| -> Result<(), DecodeError> { Err(DecodeError::Failed("truncated".into())) }).await;
        assert!(matches!(failed, Err(DecodeError::Failed(_))), "a failure is not a crash: {failed:?}");
    }

    #[tokio::test]
    async fn the_budget_counts_from_the_start_not_from_the_wait_for_a_thread() {
        let pool = DecodePool::new(1, Duration::from_secs(1));
        let sleep = |ms| {
            move || {
                thread::sleep(Duration::from_millis(ms));
                Ok::<_, DecodeError>(())
            }
        };
        // Twelve jobs of 100 ms on one thread: the last waits 1.1 s, longer than the budget, and
        // still finishes within it once started.
        let results = futures::future::join_all((0..12).map(|_| pool.run(sleep(100)))).await;
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
        let (_, late) = pool.run(sleep(1500)).await;
        assert!(matches!(late, Err(DecodeError::Timeout(_))), "{late:?}");
    }
}
