//! The decode stage's threads: `decode_threads` of them, named `clipfn-decode-N`, fed from one
//! queue.
//!
//! tokio's blocking pool would serve too, but it is shared: object_store's local reads run there,
//! one task per photo in flight, so it grows to a hundred threads under load and each photo's
//! decode lands on whichever is free, its caches cold (docs/design.md, "Where a photo's CPU time
//! goes"). A fixed set keeps the decoders few, warm and named in a profile.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    thread,
};

use crossbeam_channel::{Sender, unbounded};
use tokio::sync::oneshot;

use crate::sys::panics;

type Job = Box<dyn FnOnce() + Send>;

pub struct DecodePool {
    jobs: Sender<Job>,
}

impl DecodePool {
    /// Starts `threads` threads; they end once the pool is dropped and the queue is empty.
    pub fn new(threads: usize) -> Self {
        let (jobs, queue) = unbounded::<Job>();
        for n in 0..threads.max(1) {
            let queue = queue.clone();
            thread::Builder::new()
                .name(format!("clipfn-decode-{n}"))
                .spawn(move || queue.iter().for_each(|job| job()))
                .expect("starting a decode thread");
        }
        DecodePool { jobs }
    }

    /// Runs `work` on a decode thread. A panic in it (a decoder on a hostile file) ends that job
    /// only and comes back as its message; the thread carries on.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
        let (done, result) = oneshot::channel();
        let job = move || {
            let outcome = catch_unwind(AssertUnwindSafe(work)).map_err(|panic| panics::message(panic.as_ref()));
            let _ = done.send(outcome); // the photo may have stopped waiting (its decode timed out)
        };
        self.jobs.send(Box::new(job)).expect("the decode threads outlive the pool");
        result.await.expect("a decode job always answers")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_job_returns_its_message_and_the_thread_serves_the_next() {
        let pool = DecodePool::new(1);
        let crashed = pool.run(|| -> u32 { panic!("hostile photo") }).await;
        assert_eq!(crashed, Err("hostile photo".to_string()));
        let name = pool.run(|| thread::current().name().map(str::to_string)).await;
        assert_eq!(name, Ok(Some("clipfn-decode-0".to_string())));
    }
}
