//! Backfill progress: a bar on a terminal, one JSON log line every 10 s otherwise (Cloud Run and
//! AWS Batch logs), and a summary at the end.

use std::{
    collections::BTreeMap,
    io::IsTerminal,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use super::shard::Task;

const LOG_EVERY: Duration = Duration::from_secs(10);

pub struct Progress {
    done: Arc<AtomicU64>,
    errors: BTreeMap<&'static str, u64>,
    started: Instant,
    bar: Option<ProgressBar>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

/// What a task did, printed as one JSON line on stdout when it ends.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub task_index: u32,
    pub task_count: u32,
    /// Photos given a row in this run, errors included.
    pub photos: u64,
    pub embedded: u64,
    pub errors: BTreeMap<&'static str, u64>,
    /// Keys of this task that already had a row under `--out`.
    pub already_done: u64,
    /// This task's chunk files that were already there (a retry skips them).
    pub chunks_present: u64,
    pub chunks_written: u64,
    pub seconds: f64,
    pub photos_per_s: f64,
}

impl Progress {
    pub fn start(total: u64) -> Self {
        let done = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        if std::io::stderr().is_terminal() {
            let style =
                ProgressStyle::with_template("{wide_bar} {pos}/{len} photos  {per_sec}  ETA {eta}  elapsed {elapsed}")
                    .expect("the template is valid");
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr()).with_style(style);
            return Progress { done, errors: BTreeMap::new(), started, bar: Some(bar), ticker: None };
        }
        let counter = Arc::clone(&done);
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval_at(tokio::time::Instant::now() + LOG_EVERY, LOG_EVERY);
            loop {
                every.tick().await;
                let done = counter.load(Ordering::Relaxed);
                let seconds = started.elapsed().as_secs_f64();
                let rate = done as f64 / seconds;
                let eta_s = if rate > 0.0 { (total.saturating_sub(done) as f64 / rate).round() } else { f64::NAN };
                tracing::info!(done, total, photos_per_s = round2(rate), eta_s, "backfill progress");
            }
        });
        Progress { done, errors: BTreeMap::new(), started, bar: None, ticker: Some(ticker) }
    }

    /// One photo has its row; `error` is its error code, if any.
    pub fn record(&mut self, error: Option<&'static str>) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if let Some(code) = error {
            *self.errors.entry(code).or_default() += 1;
        }
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    pub fn finish(self, task: Task, already_done: u64, chunks_present: u64, chunks_written: u64) -> Summary {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
        if let Some(ticker) = &self.ticker {
            ticker.abort();
        }
        let photos = self.done.load(Ordering::Relaxed);
        let seconds = self.started.elapsed().as_secs_f64();
        Summary {
            task_index: task.index,
            task_count: task.count,
            photos,
            embedded: photos - self.errors.values().sum::<u64>(),
            errors: self.errors,
            already_done,
            chunks_present,
            chunks_written,
            seconds: round2(seconds),
            photos_per_s: round2(if seconds > 0.0 { photos as f64 / seconds } else { 0.0 }),
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
