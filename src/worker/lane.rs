//! One lane per tower: the tower and the queue of jobs waiting for it. Lanes hide their input type
//! behind the object-safe [`Lane`], so the loop serves any number of towers the same way, and the
//! order of the lane list is the serving order: the worker forms its next batch from the first
//! lane with a job queued.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, TryRecvError, unbounded};
use tokio::sync::oneshot;
use tracing::Span;

use super::{BatchError, Served, run::BatchRunner};
use std::sync::Arc;

use crate::model::{ShapeCounts, Tower, TowerInfo, TowerIo, TowerKind};

/// One input waiting for a tower of `Io`, and where its output goes.
pub(super) struct Job<Io: TowerIo> {
    pub input: Io::Input,
    pub reply: oneshot::Sender<Result<Served<Io::Output>, BatchError>>,
    /// The input's wait; closed when its batch starts.
    pub queue_span: Span,
    /// The span of the request the input belongs to, for the batch's parent or links.
    pub request_span: Span,
}

/// What the loop asks of a lane, whatever its tower takes.
pub(super) trait Lane: Send {
    /// Starts a batch with what is queued, up to the tower's batch size; a lane whose tower
    /// [waits to fill](crate::model::TowerKind::waits_to_fill) waits up to `batch_wait` for more.
    fn take(&mut self, batch_wait: Duration) -> Taken;
    /// Adds this lane's queue to `select`, to wait on every queue at once.
    fn watch<'a>(&'a self, select: &mut Select<'a>);
    /// Runs the batch taken and answers its jobs.
    fn serve(&mut self, runner: &mut BatchRunner<'_>);
    /// Its tower's kind and shape counts.
    fn shapes(&self) -> (TowerKind, Arc<ShapeCounts>);
}

/// What [`Lane::take`] found.
pub(super) enum Taken {
    /// A batch of this many jobs, ready to serve.
    Batch(usize),
    /// Nothing queued yet.
    Empty,
    /// Nothing queued, and nothing ever will be: the worker's handle is gone.
    Closed,
}

/// A new lane for `tower`, and the sender that queues jobs on it.
pub(super) fn open<T: Tower>(tower: T) -> (Sender<Job<T::Io>>, Box<dyn Lane>) {
    let (jobs, queue) = unbounded();
    (jobs, Box::new(TowerLane { tower, queue, batch: Vec::new() }))
}

struct TowerLane<T: Tower> {
    tower: T,
    queue: Receiver<Job<T::Io>>,
    /// The batch taken, until it is served.
    batch: Vec<Job<T::Io>>,
}

impl<T: Tower> Lane for TowerLane<T> {
    fn take(&mut self, batch_wait: Duration) -> Taken {
        // Only a batch taken and never served (in tests) is still here.
        self.batch.clear();
        match self.queue.try_recv() {
            Ok(job) => self.batch.push(job),
            Err(TryRecvError::Empty) => return Taken::Empty,
            Err(TryRecvError::Disconnected) => return Taken::Closed,
        }
        let fill_by = Instant::now() + if T::KIND.waits_to_fill() { batch_wait } else { Duration::ZERO };
        while self.batch.len() < self.tower.info().batch_size() {
            match self.queue.recv_deadline(fill_by) {
                Ok(job) => self.batch.push(job),
                Err(_) => break,
            }
        }
        Taken::Batch(self.batch.len())
    }

    fn watch<'a>(&'a self, select: &mut Select<'a>) {
        select.recv(&self.queue);
    }

    fn serve(&mut self, runner: &mut BatchRunner<'_>) {
        runner.serve(&mut self.tower, std::mem::take(&mut self.batch));
    }

    fn shapes(&self) -> (TowerKind, Arc<ShapeCounts>) {
        (T::KIND, self.tower.shapes().counts())
    }
}

/// Takes the next batch from the first lane, in `lanes`' order, that has a job queued, waiting
/// for one when none has; returns that lane and the batch's size, or `None` once every queue is
/// closed and served to its end. A job queued on an earlier lane waits at most for the batch being
/// taken or run, never behind a backlog on a later lane. A wait that lasts `idle.0` calls `idle.1`
/// once, then goes on waiting.
pub(super) fn next_batch(
    lanes: &mut [Box<dyn Lane>],
    batch_wait: Duration,
    idle: (Duration, &mut dyn FnMut()),
) -> Option<(usize, usize)> {
    loop {
        let mut open = Vec::with_capacity(lanes.len());
        for (index, lane) in lanes.iter_mut().enumerate() {
            match lane.take(batch_wait) {
                Taken::Batch(size) => return Some((index, size)),
                Taken::Empty => open.push(index),
                Taken::Closed => {}
            }
        }
        if open.is_empty() {
            return None;
        }
        // Wait until a queue gets a job (or closes), then look again in order.
        let mut select = Select::new_biased();
        for &index in &open {
            lanes[index].watch(&mut select);
        }
        if select.ready_timeout(idle.0).is_err() {
            (idle.1)();
            select.ready();
        }
    }
}
