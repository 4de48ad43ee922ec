//! A batch's trace. Each job's `queue` span ends when its batch starts. A batch may hold jobs of
//! several requests, so its one `inference` span is a child of the request of its first job and
//! links to the span of every other request in it; each job's `queue` span records the
//! `clipfn.batch.id` it rode in, which is also on the `inference` span.

use tracing::Span;

use super::lane::Job;
use crate::model::{TowerIo, TowerKind};

/// Ends the jobs' queue spans and opens the batch's `inference` span.
pub(super) fn batch_span<Io: TowerIo>(batch: &mut [Job<Io>], batch_id: u64, tower: TowerKind) -> Span {
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
        clipfn.batch.tower = tower.as_str(),
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
