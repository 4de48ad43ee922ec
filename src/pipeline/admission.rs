//! Admission is counted in photos: a request takes one place per photo up front or is refused at
//! once (429), so the queue, the decoded pixels and the fetches in flight all stay bounded.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::observe::metrics::Metrics;

/// The whole queue is taken; the caller should come back later.
#[derive(Debug, thiserror::Error)]
#[error("{requested} photos asked for, {available} of {capacity} queue places free")]
pub struct Overloaded {
    pub requested: usize,
    pub available: usize,
    pub capacity: usize,
}

pub struct Admission {
    places: Arc<Semaphore>,
    capacity: usize,
}

impl Admission {
    /// `capacity` places (`CLIPFN_MAX_QUEUED_IMAGES`), reported as `clipfn_admitted_photos`.
    pub fn new(capacity: usize, metrics: &Metrics) -> Self {
        let places = Arc::new(Semaphore::new(capacity));
        let watched = Arc::clone(&places);
        metrics.watch_admitted(move || (capacity - watched.available_permits()) as u64);
        Admission { places, capacity }
    }

    /// Reserves places for `photos` photos, or says at once that there is no room.
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
}
