//! A worker thread per device. The towers on CUDA and the towers on the CPU (OCR by default, beside
//! a GPU) each get a thread with their own lanes, so a CUDA batch never waits behind a CPU run,
//! nor a CPU run behind a CUDA batch: the album pass costs the larger of the two devices' times,
//! not their sum. One thread per device keeps the seed team's rule (more workers on one GPU made
//! p95 worse) for each device. Triton places models the same way: an instance group per kind of
//! device (`KIND_GPU`, `KIND_CPU`), each with its own scheduler.
//!
//! A CPU-only host has one device, so one worker, as before.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde::Serialize;

use super::{
    health::{Health, Unhealthy, UnwindGuard},
    lane::{Lane, Lanes},
    run,
};
use crate::{model::TowerKind, observe::metrics::Metrics, settings::Device};

/// A lane and where it is served: on its tower's device, ahead of the others or in turn.
pub(super) struct Placed {
    pub device: Device,
    pub ahead: bool,
    pub lane: Box<dyn Lane>,
}

/// One device's worker thread, as the handle sees it.
pub(super) struct Seat {
    device: Device,
    towers: Vec<TowerKind>,
    health: Health,
    /// Nanoseconds spent running batches.
    busy: Arc<AtomicU64>,
    started: Instant,
}

/// What /readyz says of a worker.
#[derive(Debug, Serialize)]
pub struct SeatStatus {
    pub device: &'static str,
    pub towers: Vec<&'static str>,
    /// Seconds spent running batches since start.
    pub busy_seconds: f64,
    /// That time's share of the time since start, 0 to 1.
    pub busy_share: f64,
    pub healthy: bool,
}

/// Starts one worker thread per device that `placed` names, each serving its lanes in the order
/// given (CUDA's first).
pub(super) fn seat(placed: Vec<Placed>, batch_wait: Duration, metrics: &Arc<Metrics>) -> Vec<Seat> {
    let mut by_device: Vec<(Device, Vec<Placed>)> = Vec::new();
    for lane in placed {
        match by_device.iter_mut().find(|(device, _)| *device == lane.device) {
            Some((_, lanes)) => lanes.push(lane),
            None => by_device.push((lane.device, vec![lane])),
        }
    }
    by_device.sort_by_key(|(device, _)| !device.is_cuda());
    let seats: Vec<Seat> =
        by_device.into_iter().map(|(device, lanes)| start(device, lanes, batch_wait, metrics)).collect();
    let healths: Vec<Health> = seats.iter().map(|seat| seat.health.clone()).collect();
    metrics.watch_healthy(move || healths.iter().all(|health| health.check().is_ok()));
    seats
}

fn start(device: Device, placed: Vec<Placed>, batch_wait: Duration, metrics: &Arc<Metrics>) -> Seat {
    let towers = placed.iter().map(|p| p.lane.shapes().0).collect();
    let (ahead, in_turn): (Vec<_>, Vec<_>) = placed.into_iter().partition(|p| p.ahead);
    let lanes = Lanes::new(ahead.into_iter().map(|p| p.lane).collect(), in_turn.into_iter().map(|p| p.lane).collect());
    let seat = Seat { device, towers, health: Health::default(), busy: Arc::default(), started: Instant::now() };
    let busy = Arc::clone(&seat.busy);
    metrics.watch_busy(device.as_str(), move || seconds(&busy));
    let (metrics, health, busy) = (Arc::clone(metrics), seat.health.clone(), Arc::clone(&seat.busy));
    thread::Builder::new()
        .name(format!("clipfn-worker-{}", device.as_str()))
        .spawn(move || {
            let _unwinding = UnwindGuard(health.clone());
            run::run_worker(lanes, batch_wait, &metrics, &health, &busy)
        })
        .expect("spawning a model worker thread");
    seat
}

/// The seconds in a worker's count of nanoseconds busy.
fn seconds(busy: &AtomicU64) -> f64 {
    Duration::from_nanos(busy.load(Ordering::Relaxed)).as_secs_f64()
}

impl Seat {
    fn tower_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.towers.iter().map(|tower| tower.as_str())
    }

    pub(super) fn runs(&self, tower: TowerKind) -> bool {
        self.towers.contains(&tower)
    }

    pub(super) fn check(&self) -> Result<(), Unhealthy> {
        self.health.check().map_err(|why| Unhealthy {
            device: self.device.as_str(),
            towers: self.tower_names().collect::<Vec<_>>().join(", "),
            why,
        })
    }

    pub(super) fn status(&self) -> SeatStatus {
        let busy = seconds(&self.busy);
        let since = self.started.elapsed().as_secs_f64();
        SeatStatus {
            device: self.device.as_str(),
            towers: self.tower_names().collect(),
            busy_seconds: busy,
            busy_share: if since > 0.0 { (busy / since).min(1.0) } else { 0.0 },
            healthy: self.health.check().is_ok(),
        }
    }
}
