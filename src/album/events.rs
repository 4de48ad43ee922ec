//! Events: the photos that have a capture time, in time order, cut into runs where the time gap or
//! the distance between consecutive located photos grows too large.

/// One photo with a time, as the events see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    /// The photo's index in the request.
    pub index: usize,
    /// Its time in milliseconds on one clock shared by every photo of the call (the caller picks
    /// it: instants in UTC, or wall-clock times read as if UTC).
    pub at_ms: i64,
    /// Where it was taken, degrees `(lat, lon)`, when known.
    pub place: Option<(f64, f64)>,
}

/// One event: indices in time order (the first is its start, the last its end).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub photos: Vec<usize>,
    /// The mean position of its located photos (on the sphere), when any is located.
    pub centre: Option<(f64, f64)>,
}

/// The mean Earth radius (IUGG), in metres.
const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// Great-circle distance in metres between two `(lat, lon)` points in degrees (haversine).
pub fn distance_m(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (lat_a, lat_b) = (a.0.to_radians(), b.0.to_radians());
    let (dlat, dlon) = ((b.0 - a.0).to_radians(), (b.1 - a.1).to_radians());
    let h = (dlat / 2.0).sin().powi(2) + lat_a.cos() * lat_b.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * h.sqrt().min(1.0).asin()
}

/// Groups `photos` into events, in time order (ties by index): a new event starts where the time
/// since the previous photo exceeds `max_gap_ms`, or where a located photo is more than
/// `max_distance_m` from the previous located photo of the event (photos without a place never
/// split one). Events come in time order.
pub fn events(photos: &[Timed], max_gap_ms: i64, max_distance_m: f64) -> Vec<Event> {
    let mut order: Vec<&Timed> = photos.iter().collect();
    order.sort_by_key(|photo| (photo.at_ms, photo.index));
    let mut runs: Vec<Vec<&Timed>> = Vec::new();
    let mut last_place: Option<(f64, f64)> = None;
    for photo in order {
        let split = match runs.last().and_then(|run| run.last()) {
            None => true,
            Some(previous) => {
                photo.at_ms.saturating_sub(previous.at_ms) > max_gap_ms
                    || photo.place.zip(last_place).is_some_and(|(here, there)| distance_m(here, there) > max_distance_m)
            }
        };
        if split {
            runs.push(Vec::new());
            last_place = None;
        }
        last_place = photo.place.or(last_place);
        runs.last_mut().expect("a run was just pushed").push(photo);
    }
    runs.into_iter()
        .map(|run| Event {
            centre: centre(run.iter().filter_map(|photo| photo.place)),
            photos: run.into_iter().map(|photo| photo.index).collect(),
        })
        .collect()
}

/// The mean of points on the sphere (the mean of their unit vectors, projected back), so that an
/// event across the antimeridian is centred on it, not on the far side of the Earth.
fn centre(places: impl Iterator<Item = (f64, f64)>) -> Option<(f64, f64)> {
    let (mut x, mut y, mut z, mut n) = (0.0, 0.0, 0.0, 0usize);
    for (lat, lon) in places {
        let (lat, lon) = (lat.to_radians(), lon.to_radians());
        x += lat.cos() * lon.cos();
        y += lat.cos() * lon.sin();
        z += lat.sin();
        n += 1;
    }
    if n == 0 {
        return None;
    }
    let horizontal = x.hypot(y);
    if horizontal < 1e-12 && z.abs() < 1e-12 {
        return None; // points that cancel out (antipodes) have no mean
    }
    Some((z.atan2(horizontal).to_degrees(), y.atan2(x).to_degrees()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;
    const PARIS: (f64, f64) = (48.8566, 2.3522);
    const VERSAILLES: (f64, f64) = (48.8049, 2.1204); // about 18 km from Paris
    const LYON: (f64, f64) = (45.764, 4.8357);

    fn at(index: usize, hours: f64, place: Option<(f64, f64)>) -> Timed {
        Timed { index, at_ms: (hours * HOUR as f64) as i64, place }
    }

    fn groups(events: &[Event]) -> Vec<Vec<usize>> {
        events.iter().map(|event| event.photos.clone()).collect()
    }

    #[test]
    fn distances_are_great_circle() {
        assert!((distance_m(PARIS, LYON) - 392_000.0).abs() < 2_000.0, "{}", distance_m(PARIS, LYON));
        assert!((distance_m(PARIS, VERSAILLES) - 18_000.0).abs() < 500.0, "{}", distance_m(PARIS, VERSAILLES));
        // A degree of longitude across the antimeridian is about 111 km at the equator.
        assert!((distance_m((0.0, 179.5), (0.0, -179.5)) - 111_195.0).abs() < 100.0);
        assert_eq!(distance_m(PARIS, PARIS), 0.0);
    }

    #[test]
    fn a_gap_over_the_limit_starts_an_event_and_one_at_it_does_not() {
        // Given out of order: sorted by time, then split where the gap exceeds 3 h.
        let photos = [at(2, 5.0, None), at(0, 0.0, None), at(1, 3.0, None), at(3, 8.5, None)];
        assert_eq!(groups(&events(&photos, 3 * HOUR, 25_000.0)), vec![vec![0, 1, 2], vec![3]]);
        assert_eq!(groups(&events(&[], 3 * HOUR, 25_000.0)), Vec::<Vec<usize>>::new());
        // The same time: ties by index.
        assert_eq!(groups(&events(&[at(5, 1.0, None), at(4, 1.0, None)], HOUR, 1.0)), vec![vec![4, 5]]);
    }

    #[test]
    fn a_move_between_located_photos_starts_an_event_and_unlocated_ones_never_split() {
        let day = [
            at(0, 9.0, Some(PARIS)),
            at(1, 10.0, None),
            at(2, 11.0, Some(VERSAILLES)),
            at(3, 12.0, None),
            // Lyon by train, an hour later: near in time, far in space.
            at(4, 13.0, Some(LYON)),
            at(5, 14.0, Some(LYON)),
        ];
        let found = events(&day, 3 * HOUR, 25_000.0);
        assert_eq!(groups(&found), vec![vec![0, 1, 2, 3], vec![4, 5]]);
        let (lat, lon) = found[0].centre.unwrap();
        assert!(
            (lat - (PARIS.0 + VERSAILLES.0) / 2.0).abs() < 0.01 && (lon - (PARIS.1 + VERSAILLES.1) / 2.0).abs() < 0.01
        );
        assert!(distance_m(found[1].centre.unwrap(), LYON) < 1.0);
        // With a tighter distance, Versailles is an event of its own; unlocated photos stay put.
        assert_eq!(groups(&events(&day, 3 * HOUR, 10_000.0)), vec![vec![0, 1], vec![2, 3], vec![4, 5]]);
        // Without places, one event and no centre.
        let unlocated: Vec<Timed> = day.iter().map(|photo| Timed { place: None, ..*photo }).collect();
        let found = events(&unlocated, 3 * HOUR, 25_000.0);
        assert_eq!((groups(&found), found[0].centre), (vec![vec![0, 1, 2, 3, 4, 5]], None));
    }

    #[test]
    fn two_days_in_two_cities() {
        let mut photos = Vec::new();
        for (day, city) in [(0.0, PARIS), (1.0, LYON)] {
            for hour in 0..5 {
                photos.push(at(photos.len(), day * 24.0 + 10.0 + f64::from(hour), Some(city)));
            }
        }
        let found = events(&photos, 3 * HOUR, 25_000.0);
        assert_eq!(groups(&found), vec![(0..5).collect::<Vec<_>>(), (5..10).collect()]);
    }

    #[test]
    fn centres_across_the_antimeridian_stay_on_it() {
        let fiji = [at(0, 0.0, Some((-17.0, 179.9))), at(1, 0.5, Some((-17.0, -179.9)))];
        let found = events(&fiji, HOUR, 25_000.0);
        let (lat, lon) = found[0].centre.unwrap();
        assert!((lat + 17.0).abs() < 0.01 && lon.abs() > 179.8, "{lat}, {lon}");
    }
}
