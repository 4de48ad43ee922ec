//! The album of a `/v1/analyze` call: the request's photos grouped (duplicates, bursts, events,
//! people) and ranked (each group's best shot, the cover), from the signals the stages gave.
//! The groupings themselves are the `album` leaf's; this file picks their inputs out of the
//! results, runs them as a stage of their own and shapes the answer.
//!
//! The album stage runs on tokio's blocking pool, never on the runtime's threads (an album of
//! thousands of faces is seconds of CPU, and the runtime must keep answering `/readyz` and other
//! requests meanwhile), under the request's deadline: it reads an owned copy of what it needs,
//! so when the deadline passes the handler answers the photos at once, with the album marked as
//! not computed and why, and the stage stops at its next look at the clock.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    AppState,
    error::ErrorBody,
    people::AlbumFaces,
    pets::AlbumPets,
    photos::PhotoResult,
    types::{Album, AlbumAnswer, AlbumNotComputed, EventItem, GroupItem, LocationItem},
};
use crate::{
    album::{Merits, Shot, Stopped, Timed, beaten, bursts, cover, duplicate_groups, events, ranked},
    decode::TakenAt,
    model::HeadsInfo,
    observe::metrics::Stage,
    settings::Settings,
    sys::cpu::thread_cpu_seconds,
};

/// What the album stage reads of the request's photos: an owned copy (hashes, merits, times and
/// places, the timed photos' embeddings, the faces), so that it can run off the runtime and be
/// left behind at the deadline while the photos' answers go out.
pub(super) struct AlbumInput {
    settings: Arc<Settings>,
    hashes: Vec<Option<u64>>,
    merits: Vec<Option<Merits>>,
    timed: Vec<(Timed, TakenAt)>,
    /// The image embedding of each photo in `timed`, in its order (the bursts').
    embeddings: Vec<Vec<f32>>,
    faces: Option<AlbumFaces>,
    pets: Option<AlbumPets>,
    with_location: bool,
}

impl AlbumInput {
    /// Photos that failed (and faces a model tripped on) take part in none of the groupings;
    /// people only with `faces`, pets only with `pets`.
    pub(super) fn new(
        results: &[PhotoResult],
        state: &AppState,
        heads: Option<&HeadsInfo>,
        (faces, pets): (Option<AlbumFaces>, Option<AlbumPets>),
        with_location: bool,
    ) -> Self {
        let hashes = results.iter().map(|r| r.as_ref().ok().and_then(|s| s.pixels).map(|p| p.hash)).collect();
        let timed = timed(results);
        let embeddings = timed
            .iter()
            .map(|(photo, _)| results[photo.index].as_ref().ok().and_then(|s| s.embedding.clone()).unwrap_or_default())
            .collect();
        AlbumInput {
            settings: Arc::clone(&state.settings),
            hashes,
            merits: merits(results, state, heads),
            timed,
            embeddings,
            faces,
            pets,
            with_location,
        }
    }
}

/// The album stage: `input`'s album, computed on the blocking pool by `deadline`, or why not.
/// Also the stage's wall time when it ran to the end (for `timings_ms.album`).
pub(super) async fn album_stage(
    state: &AppState,
    input: AlbumInput,
    deadline: tokio::time::Instant,
) -> (AlbumAnswer, Option<Duration>) {
    let faces = input.faces.as_ref().map_or(0, AlbumFaces::count);
    let photos = input.hashes.len();
    // Set when the handler stops waiting (the deadline, or the client gone and the handler's
    // future dropped): the stage stops at its next look.
    let given_up = Arc::new(AtomicBool::new(false));
    let _give_up_when_dropped = GiveUpOnDrop(Arc::clone(&given_up));
    let until = deadline.into_std();
    let task = tokio::task::spawn_blocking(move || {
        let (started, cpu) = (Instant::now(), thread_cpu_seconds());
        let stop = || given_up.load(Ordering::Relaxed) || Instant::now() >= until;
        let album = if stop() { Err(Stopped) } else { album(&input, &stop) };
        let cpu_ms = thread_cpu_seconds().zip(cpu).map(|(after, before)| (after - before) * 1000.0);
        (album, started.elapsed(), cpu_ms)
    });
    let outcome = tokio::time::timeout_at(deadline, task).await;
    let (answer, wall, cpu_ms) = match outcome {
        Ok(Ok((Ok(album), wall, cpu_ms))) => (AlbumAnswer::Computed(album), Some(wall), cpu_ms),
        Ok(Ok((Err(Stopped), wall, cpu_ms))) => (not_computed(DEADLINE_EXCEEDED), Some(wall), cpu_ms),
        Err(_) => (not_computed(DEADLINE_EXCEEDED), None, None),
        Ok(Err(failed)) => {
            let cause = if failed.is_panic() {
                crate::sys::panics::message(failed.into_panic().as_ref())
            } else {
                failed.to_string()
            };
            tracing::error!(error = %cause, "the album stage failed");
            (not_computed(ALBUM_FAILED), None, None)
        }
    };
    let computed = matches!(answer, AlbumAnswer::Computed(_));
    if let Some(wall) = wall.filter(|_| computed) {
        state.metrics.stage(Stage::Album, wall);
    }
    let wall_ms = wall.map(|w| w.as_secs_f64() * 1000.0);
    tracing::debug!(photos, faces, computed, wall_ms, cpu_ms, "album stage");
    (answer, wall.filter(|_| computed))
}

/// The album stage's codes, when it is not computed.
pub(super) const DEADLINE_EXCEEDED: &str = "deadline_exceeded";
pub(super) const ALBUM_FAILED: &str = "album_failed";
pub(super) const ALBUM_CODES: [&str; 2] = [DEADLINE_EXCEEDED, ALBUM_FAILED];

fn not_computed(code: &'static str) -> AlbumAnswer {
    let message = match code {
        DEADLINE_EXCEEDED => {
            "the request's deadline (CLIPFN_REQUEST_TIMEOUT_MS) passed before the album was computed; the photos' \
             answers stand"
        }
        _ => "the album stage failed (the server's log says why); the photos' answers stand",
    };
    AlbumAnswer::NotComputed(AlbumNotComputed { error: ErrorBody { code, message: message.into() } })
}

/// Tells the album stage to stop when the handler stops waiting for it.
struct GiveUpOnDrop(Arc<AtomicBool>);

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The request's groupings and rankings, asking `stop` between steps (and within people's).
fn album(input: &AlbumInput, stop: &dyn Fn() -> bool) -> Result<Album, Stopped> {
    let signals = &input.settings.signals;
    let merits = &input.merits;
    let duplicates = ranked(duplicate_groups(&input.hashes, signals.duplicate_bits), merits);
    // A duplicate group takes part in bursts through its best shot alone: a photo and its resized
    // copy (one capture time, near-identical hashes) are a duplicate group, not a burst too.
    let shots: Vec<Shot> = input
        .timed
        .iter()
        .zip(&input.embeddings)
        .filter(|((photo, _), embedding)| !embedding.is_empty() && !beaten(photo.index, &duplicates))
        .map(|((photo, _), embedding)| Shot { time: *photo, embedding })
        .collect();
    let burst_gap_ms = i64::try_from(signals.burst_gap_ms).expect("settings bound it");
    let bursts = ranked(bursts(&shots, burst_gap_ms, signals.burst_similarity), merits);
    let cover = cover(merits, &[&duplicates, &bursts]);
    let events = album_events(&input.timed, &input.settings, input.with_location);
    if stop() {
        return Err(Stopped);
    }
    let (people, unsure) = match &input.faces {
        Some(faces) => {
            let (people, unsure) = faces.people(stop)?;
            (Some(people), Some(unsure))
        }
        None => (None, None),
    };
    let (pets, unsure_pets) = match &input.pets {
        Some(pets) => {
            let (pets, unsure) = pets.pets(stop)?;
            (Some(pets), Some(unsure))
        }
        None => (None, None),
    };
    Ok(Album {
        pets,
        unsure_pets,
        duplicates: duplicates.into_iter().map(GroupItem::from).collect(),
        bursts: bursts.into_iter().map(GroupItem::from).collect(),
        events,
        cover,
        people,
        unsure,
    })
}

/// What the best-shot ranking reads of each answered photo.
fn merits(results: &[PhotoResult], state: &AppState, heads: Option<&HeadsInfo>) -> Vec<Option<Merits>> {
    let signals = &state.settings.signals;
    let head = signals.rank_head.as_ref().and_then(|name| heads?.names.iter().position(|n| n == name));
    results
        .iter()
        .map(|result| {
            let photo = result.as_ref().ok()?;
            let pixels = photo.pixels?;
            Some(Merits {
                blurry: pixels.sharpness < signals.blur_threshold,
                faces_cut: match &photo.faces {
                    Some(Ok(found)) => Some(found.faces.iter().filter(|face| face.cut).count()),
                    Some(Err(_)) => None,
                    None => Some(0),
                },
                head: head.zip(photo.scores.as_ref()).map(|(i, scores)| scores[i]),
                sharpness: [pixels.sharpness, pixels.coarser[0], pixels.coarser[1]],
                pixels: photo.size.map_or(0, |(w, h)| u64::from(w) * u64::from(h)),
                long_side: photo.size.map_or(0, |(w, h)| w.max(h)),
                jpeg_quality: photo.metadata.as_ref().and_then(|m| m.jpeg_quality),
            })
        })
        .collect()
}

/// The answered photos that have a time: each with its wall clock (what orders them) and, when its
/// offset is known, its instant; two photos are compared on their instants when both have one, on
/// their wall clocks otherwise, whatever the other photos of the request (`album::Timed`;
/// docs/design.md, "Events").
fn timed(results: &[PhotoResult]) -> Vec<(Timed, TakenAt)> {
    results
        .iter()
        .enumerate()
        .filter_map(|(index, r)| Some((index, r.as_ref().ok()?.metadata.as_ref()?)))
        .filter_map(|(index, m)| Some((index, m.taken_at.as_ref()?, m.location)))
        .map(|(index, taken, place)| {
            let time = Timed {
                index,
                at_ms: taken.local.and_utc().timestamp_millis(),
                instant_ms: taken.utc_millis(),
                place: place.map(|place| (place.lat, place.lon)),
            };
            (time, taken.clone())
        })
        .collect()
}

/// The request's events, each with its first and last photo's `taken_at` as given.
fn album_events(timed: &[(Timed, TakenAt)], settings: &Settings, with_location: bool) -> Vec<EventItem> {
    let photos: Vec<Timed> = timed.iter().map(|(photo, _)| *photo).collect();
    let signals = &settings.signals;
    let taken_at =
        |index: usize| &timed.iter().find(|(photo, _)| photo.index == index).expect("an event holds timed photos").1;
    events(&photos, (signals.event_gap_s * 1000) as i64, signals.event_distance_m)
        .into_iter()
        .map(|event| EventItem {
            start: taken_at(event.photos[0]).iso8601(),
            end: taken_at(*event.photos.last().expect("an event has photos")).iso8601(),
            centre: event.centre.filter(|_| with_location).map(|(lat, lon)| LocationItem { lat, lon, alt: None }),
            photos: event.photos,
        })
        .collect()
}
