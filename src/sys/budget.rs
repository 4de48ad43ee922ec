//! Memory that photos take turns at: the fetched-bytes budget (`CLIPFN_MAX_FETCHED_BYTES`) and
//! the decode budget (`CLIPFN_MAX_DECODE_BYTES`). A photo waits, without holding anything else,
//! until its bytes fit, and holds them until its permit is dropped.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Clone)]
pub struct Budget {
    kib: Arc<Semaphore>,
    capacity_kib: u32,
}

impl Budget {
    pub fn new(bytes: u64) -> Self {
        let capacity_kib = kib(bytes);
        Budget { kib: Arc::new(Semaphore::new(capacity_kib as usize)), capacity_kib }
    }

    /// Waits until `bytes` fit, and holds them. A request larger than the whole budget waits for
    /// all of it: it then runs alone rather than never.
    pub async fn reserve(&self, bytes: u64) -> OwnedSemaphorePermit {
        let units = kib(bytes).min(self.capacity_kib);
        Arc::clone(&self.kib).acquire_many_owned(units).await.expect("the semaphore is never closed")
    }

    /// As [`Budget::reserve`], where no budget may be set: then nothing is held, and `bytes` (a
    /// header read) is not worked out.
    pub async fn hold(budget: Option<&Budget>, bytes: impl FnOnce() -> u64) -> Held {
        match budget {
            Some(budget) => Held(Some(budget.reserve(bytes()).await)),
            None => Held(None),
        }
    }
}

/// What a photo holds of a budget (nothing where none is set), given back when dropped. What it
/// keeps after a step is never more than what the step held, so it only ever gives back: a holder
/// never waits on the budget, and holders cannot wait on each other.
#[derive(Debug)]
pub struct Held(Option<OwnedSemaphorePermit>);

impl Held {
    /// Moves what `bytes` take (at most all that is held) into a hold of their own.
    pub fn split_off(&mut self, bytes: u64) -> Held {
        Held(self.0.as_mut().and_then(|permit| {
            let units = (kib(bytes) as usize).min(permit.num_permits());
            permit.split(units)
        }))
    }

    /// Gives back all but what `bytes` take.
    pub fn keep(&mut self, bytes: u64) {
        *self = self.split_off(bytes);
    }

    /// Bytes held, rounded up to KiB.
    pub fn bytes(&self) -> u64 {
        self.0.as_ref().map_or(0, |permit| permit.num_permits() as u64 * 1024)
    }
}

/// Units of KiB, rounded up (so that any photo under a byte limit fits a budget at least as
/// large), and at most what a semaphore can count.
fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).min(Semaphore::MAX_PERMITS as u32)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_reservation_waits_until_its_bytes_fit() {
        let budget = Budget::new(100 * 1024);
        let held = budget.reserve(60 * 1024).await;
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(50 * 1024).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "110 KiB do not fit in 100");
        drop(held);
        let second =
            tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("fits once the first is let go");
        assert_eq!(second.unwrap().num_permits(), 50);
    }

    #[tokio::test]
    async fn what_a_photo_keeps_is_split_off_its_hold_and_the_rest_given_back() {
        let budget = Budget::new(100 * 1024);
        let mut decode = Budget::hold(Some(&budget), || 80 * 1024).await;
        let kept = decode.split_off(30 * 1024);
        assert_eq!((kept.bytes(), decode.bytes()), (30 * 1024, 50 * 1024));
        decode.keep(500 * 1024);
        assert_eq!(decode.bytes(), 50 * 1024, "keeping more than is held keeps what is held");
        decode.keep(10 * 1024);
        assert_eq!(decode.bytes(), 10 * 1024);
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(70 * 1024).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "40 KiB are still held: 70 do not fit in 100");
        drop((kept, decode));
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap().num_permits(), 70);
        assert_eq!(Budget::hold(None, || 1 << 30).await.bytes(), 0, "no budget, nothing held");
    }

    #[tokio::test]
    async fn more_than_the_whole_budget_runs_alone_rather_than_never() {
        let budget = Budget::new(10 * 1024);
        let huge =
            tokio::time::timeout(Duration::from_secs(5), budget.reserve(1 << 40)).await.expect("never waits forever");
        assert_eq!(huge.num_permits(), 10, "takes the whole budget");
        let small = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(1).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!small.is_finished(), "nothing runs beside it");
        drop(huge);
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), small).await.unwrap().unwrap().num_permits(), 1);
    }
}
