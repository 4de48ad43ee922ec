//! The album of a `/v1/analyze` call: the request's photos grouped (duplicates, bursts, events,
//! people) and ranked (each group's best shot, the cover), from the signals the stages gave.
//! The groupings themselves are the `album` leaf's; this file picks their inputs out of the
//! results and shapes the answer.

use super::{
    AppState,
    people::{KnownPeople, album_people},
    photos::PhotoResult,
    types::{Album, EventItem, GroupItem, LocationItem},
};
use crate::{
    album::{Merits, Shot, Timed, bursts, cover, duplicate_groups, events, ranked},
    decode::TakenAt,
    model::{HeadsInfo, RecognizerInfo},
};

/// The request's groupings and rankings. Photos that failed (and faces a model tripped on) take
/// part in none; people only with faces (by `recognizer`, with the request's known people).
pub fn album(
    results: &[PhotoResult],
    state: &AppState,
    heads: Option<&HeadsInfo>,
    recognizer: Option<(&RecognizerInfo, &KnownPeople)>,
    with_location: bool,
) -> Album {
    let signals = &state.settings.signals;
    let hashes: Vec<Option<u64>> =
        results.iter().map(|r| r.as_ref().ok().and_then(|s| s.pixels).map(|p| p.hash)).collect();
    let merits = merits(results, state, heads);
    let duplicates = ranked(duplicate_groups(&hashes, signals.duplicate_bits), &merits);
    let timed = timed(results);
    let shots: Vec<Shot> = timed
        .iter()
        .filter_map(|(photo, _)| {
            let embedding = results[photo.index].as_ref().ok()?.embedding.as_deref()?;
            Some(Shot { index: photo.index, at_ms: photo.at_ms, embedding })
        })
        .collect();
    let burst_gap_ms = i64::try_from(signals.burst_gap_ms).expect("settings bound it");
    let bursts = ranked(bursts(&shots, burst_gap_ms, signals.burst_similarity), &merits);
    let cover = cover(&merits, &[&duplicates, &bursts]);
    let events = album_events(&timed, state, with_location);
    let grouped = recognizer.map(|(recognizer, known)| album_people(results, known, recognizer, &state.settings.faces));
    let (people, unsure) = grouped.unzip();
    Album {
        duplicates: duplicates.into_iter().map(GroupItem::from).collect(),
        bursts: bursts.into_iter().map(GroupItem::from).collect(),
        events,
        cover,
        people,
        unsure,
    }
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
                sharpness: pixels.sharpness,
                pixels: photo.size.map_or(0, |(w, h)| u64::from(w) * u64::from(h)),
            })
        })
        .collect()
}

/// The answered photos that have a time, on one clock: the instants in UTC when every such photo
/// has an offset; otherwise every photo's wall-clock time, offset or not, since a local time has
/// no instant and a camera without a zone is set to the clock where it is (docs/design.md,
/// "Events").
fn timed(results: &[PhotoResult]) -> Vec<(Timed, &TakenAt)> {
    let metadata =
        || results.iter().enumerate().filter_map(|(index, r)| Some((index, r.as_ref().ok()?.metadata.as_ref()?)));
    let taken = || metadata().filter_map(|(index, m)| Some((index, m.taken_at.as_ref()?, m.location)));
    let instants = taken().all(|(_, taken, _)| taken.offset_minutes.is_some());
    taken()
        .map(|(index, taken, place)| {
            let at_ms = match taken.utc_millis() {
                Some(utc) if instants => utc,
                _ => taken.local.and_utc().timestamp_millis(),
            };
            (Timed { index, at_ms, place: place.map(|place| (place.lat, place.lon)) }, taken)
        })
        .collect()
}

/// The request's events, each with its first and last photo's `taken_at` as given.
fn album_events(timed: &[(Timed, &TakenAt)], state: &AppState, with_location: bool) -> Vec<EventItem> {
    let photos: Vec<Timed> = timed.iter().map(|(photo, _)| *photo).collect();
    let signals = &state.settings.signals;
    let taken_at =
        |index: usize| timed.iter().find(|(photo, _)| photo.index == index).expect("an event holds timed photos").1;
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
