//! One lane per tower: the tower and the queue of jobs waiting for it. Lanes hide their input type
//! behind the object-safe [`Lane`], so the loop serves any number of towers the same way.
//! [`Lanes`] holds them in their serving order: the lanes that go ahead (texts) whenever they have
//! a job, then the others in turn, one batch each.

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

/// Every lane of the worker, and whose turn it is.
///
/// The lanes `ahead` (the text tower's: someone waits on a search query) are looked at first, in
/// order, before every batch. The others take turns: the worker looks at them from the one after
/// the lane it last served, round the list, and takes a batch from the first with a job queued. So
/// a job queued on one of them waits at most for the batch running when it was queued, then one
/// batch of each other lane that has work (and whatever texts come meanwhile), never behind a
/// backlog on another lane. Turns, not age: served by the age of each lane's oldest job, a photo
/// queued behind 100 photos' canvases would wait for all 100 detector runs (the detector takes one
/// canvas a batch); in turns it waits for one.
pub(super) struct Lanes {
    lanes: Vec<Box<dyn Lane>>,
    /// How many lanes, at the front of `lanes`, go ahead of the others.
    ahead: usize,
    /// The index in `lanes` of the lane whose turn is next, among those that take turns.
    turn: usize,
}

impl Lanes {
    /// `ahead` go first whenever they have a job; `in_turn` take turns, in this order.
    pub(super) fn new(ahead: Vec<Box<dyn Lane>>, in_turn: Vec<Box<dyn Lane>>) -> Self {
        let turn = ahead.len();
        let mut lanes = ahead;
        lanes.extend(in_turn);
        Lanes { lanes, ahead: turn, turn }
    }

    /// The order to look at the lanes in for the next batch: those ahead, then the others from the
    /// one whose turn it is, round the list.
    fn order(&self) -> impl Iterator<Item = usize> + use<> {
        let (ahead, turn, len) = (self.ahead, self.turn, self.lanes.len());
        (0..ahead).chain((turn..len).chain(ahead..turn))
    }

    /// Takes the next batch (see [`Lanes`] for whose), waiting for a job when no lane has one;
    /// returns the lane's index and the batch's size, or `None` once every queue is closed and
    /// served to its end. A wait that lasts `idle.0` calls `idle.1` once, then goes on waiting.
    pub(super) fn next_batch(
        &mut self,
        batch_wait: Duration,
        idle: (Duration, &mut dyn FnMut()),
    ) -> Option<(usize, usize)> {
        loop {
            let mut open = Vec::with_capacity(self.lanes.len());
            for index in self.order() {
                match self.lanes[index].take(batch_wait) {
                    Taken::Batch(size) => {
                        if index >= self.ahead {
                            self.turn = if index + 1 == self.lanes.len() { self.ahead } else { index + 1 };
                        }
                        return Some((index, size));
                    }
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
                self.lanes[index].watch(&mut select);
            }
            if select.ready_timeout(idle.0).is_err() {
                (idle.1)();
                select.ready();
            }
        }
    }

    /// Runs the batch [`Lanes::next_batch`] took from lane `index` and answers its jobs.
    pub(super) fn serve(&mut self, index: usize, runner: &mut BatchRunner<'_>) {
        self.lanes[index].serve(runner);
    }
}
