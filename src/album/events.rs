//! Events: the photos that have a capture time, in time order, cut into runs where the time gap or
//! the distance between consecutive located photos grows too large.
//!
//! The clock, one rule for every pair of photos whatever else the request holds: photos are put in
//! order by their wall clocks (the local time each records; ties by index), and the time between
//! two of them is the difference of their instants when both know their offset from UTC, of their
//! wall clocks otherwise ([`Timed::apart_ms`]). A local time has no instant, and a camera that
//! records no zone is set to the clock where it is, so its wall clock compares with a phone's
//! there; two photos with offsets compare exactly, across zones too.

/// One photo with a time, as the events (and bursts) see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    /// The photo's index in the request.
    pub index: usize,
    /// Its wall-clock time, milliseconds, read as if it were UTC (what orders the photos).
    pub at_ms: i64,
    /// Its instant, milliseconds since the Unix epoch, when its offset from UTC is known.
    pub instant_ms: Option<i64>,
    /// Where it was taken, degrees `(lat, lon)`, when known.
    pub place: Option<(f64, f64)>,
}

impl Timed {
    /// The time between `self` and `other`, milliseconds: their instants' difference when both
    /// have one, their wall clocks' otherwise. It depends on the two photos alone.
    pub fn apart_ms(&self, other: &Timed) -> i64 {
        match (self.instant_ms, other.instant_ms) {
            (Some(a), Some(b)) => b.saturating_sub(a).saturating_abs(),
            _ => other.at_ms.saturating_sub(self.at_ms).saturating_abs(),
        }
    }
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

/// Groups `photos` into events, in wall-clock order (ties by index): a new event starts where the
/// time since the previous photo ([`Timed::apart_ms`]) exceeds `max_gap_ms`, or where a located
/// photo is more than `max_distance_m` from the previous located photo of the event (photos
/// without a place never split one). Events come in that order.
pub fn events(photos: &[Timed], max_gap_ms: i64, max_distance_m: f64) -> Vec<Event> {
    let mut order: Vec<&Timed> = photos.iter().collect();
    order.sort_by_key(|photo| (photo.at_ms, photo.index));
    let mut runs: Vec<Vec<&Timed>> = Vec::new();
    let mut last_place: Option<(f64, f64)> = None;
    for photo in order {
        let split = match runs.last().and_then(|run| run.last()) {
            None => true,
            Some(previous) => {
                previous.apart_ms(photo) > max_gap_ms
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
        Timed { index, at_ms: (hours * HOUR as f64) as i64, instant_ms: None, place }
    }

    /// A photo at `hours` on its wall clock, in a zone `offset_hours` east of UTC when it records one.
    fn zoned(index: usize, hours: f64, offset_hours: Option<f64>) -> Timed {
        let at_ms = (hours * HOUR as f64) as i64;
        let instant_ms = offset_hours.map(|offset| at_ms - (offset * HOUR as f64) as i64);
        Timed { index, at_ms, instant_ms, place: None }
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
    fn offsets_compare_instants_and_local_times_compare_wall_clocks() {
        // A phone (offsets) and a camera without a zone at one party in Tokyo (+09:00): 14:00 to
        // 16:00 on both wall clocks, interleaved. One event whichever photos share the request.
        let party = [
            zoned(0, 14.0, Some(9.0)),
            zoned(1, 14.5, None),
            zoned(2, 15.0, Some(9.0)),
            zoned(3, 15.5, None),
            zoned(4, 16.0, Some(9.0)),
        ];
        assert_eq!(groups(&events(&party, 3 * HOUR, 25_000.0)), vec![vec![0, 1, 2, 3, 4]]);
        let phone: Vec<Timed> = party.iter().filter(|p| p.instant_ms.is_some()).copied().collect();
        assert_eq!(groups(&events(&phone, 3 * HOUR, 25_000.0)), vec![vec![0, 2, 4]]);
        // Two photos' time apart is theirs alone: a camera photo among them changes nothing.
        assert_eq!(party[0].apart_ms(&party[2]), HOUR);
        assert_eq!(party[1].apart_ms(&party[3]), HOUR);
        assert_eq!(party[0].apart_ms(&party[1]), HOUR / 2);
    }

    #[test]
    fn an_album_across_time_zones_and_midnight() {
        // Paris (+02:00) 20:00 and 23:30, then after midnight 00:30 and 01:30 on the next day;
        // a flight to New York (-04:00) lands at 10:00 local, 16:00 in Paris, and two photos follow
        // at 10:30 and 12:00. Wall clocks say 8.5 h from 01:30 to 10:00, instants 14.5 h.
        let day = 24.0;
        let trip = [
            zoned(0, 20.0, Some(2.0)),
            zoned(1, 23.5, Some(2.0)),
            zoned(2, day + 0.5, Some(2.0)),
            zoned(3, day + 1.5, Some(2.0)),
            zoned(4, day + 10.0, Some(-4.0)),
            zoned(5, day + 10.5, Some(-4.0)),
            zoned(6, day + 12.0, Some(-4.0)),
        ];
        // Midnight is no gap; 3.5 h from 20:00 is one past 3 h.
        assert_eq!(groups(&events(&trip, 3 * HOUR, 25_000.0)), vec![vec![0], vec![1, 2, 3], vec![4, 5, 6]]);
        // At a 10 h gap the wall clocks (8.5 h) would join Paris and New York; the instants do not.
        assert_eq!(groups(&events(&trip, 10 * HOUR, 25_000.0)), vec![vec![0, 1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(trip[3].apart_ms(&trip[4]), (14.5 * HOUR as f64) as i64);
        // The same trip by a camera without zones (set to Paris time, then to New York's on
        // landing): only its wall clocks, so the 8.5 h joins at 10 h.
        let camera: Vec<Timed> = trip.iter().map(|p| Timed { instant_ms: None, ..*p }).collect();
        assert_eq!(groups(&events(&camera, 10 * HOUR, 25_000.0)), vec![vec![0, 1, 2, 3, 4, 5, 6]]);
    }

    #[test]
    fn centres_across_the_antimeridian_stay_on_it() {
        let fiji = [at(0, 0.0, Some((-17.0, 179.9))), at(1, 0.5, Some((-17.0, -179.9)))];
        let found = events(&fiji, HOUR, 25_000.0);
        let (lat, lon) = found[0].centre.unwrap();
        assert!((lat + 17.0).abs() < 0.01 && lon.abs() > 179.8, "{lat}, {lon}");
    }
}
