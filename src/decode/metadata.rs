//! Capture time and place from a photo's EXIF block: a pure function of the bytes, read at the
//! decode step from the block `exif.rs` (JPEG), `image`'s decoders (PNG `eXIf`, WebP `EXIF`), the
//! file itself (TIFF) or libheif's `Exif` item (HEIC, AVIF) give, so the block is found once.
//!
//! The TIFF structure is parsed by kamadak-exif (which bounds the IFD count, refuses entries and
//! offsets outside the block and never visits an IFD twice), going on past a broken entry: the
//! entries read before a break stand (real files often carry a maker note whose offsets an editor
//! broke). A tag that is absent, blank, of the wrong type or out of range leaves its field out:
//! metadata never costs the photo.
//!
//! - `taken_at`: `DateTimeOriginal`, with `SubSecTimeOriginal` and `OffsetTimeOriginal` when
//!   present. Without an offset tag, the GPS clock (`GPSDateStamp` + `GPSTimeStamp`, UTC) gives
//!   one: local minus UTC, rounded to 15 minutes (every zone in use is a multiple of 15 minutes
//!   off UTC), but only when the GPS time lies within [`GPS_CLOCK_WINDOW_S`] of the capture time
//!   once those whole quarter hours are taken out: a fix taken long before the shutter (a phone's
//!   last fix, a camera's stale one) would give a wrong zone. Without either it is a local time,
//!   written without an offset as ISO 8601 says local times are. Where the offset came from is
//!   kept (`offset_from_gps`) and answered.
//! - `location`: `GPSLatitude`/`GPSLongitude` with their `Ref`s, `GPSAltitude` with its `Ref`
//!   when present. A void fix (`GPSStatus` = `V`), 0,0 (what a phone writes with no fix) and
//!   minutes or seconds of 60 or more are left out.

use chrono::{NaiveDate, NaiveDateTime, NaiveTime, TimeDelta};
use exif::{Exif, Field, In, Reader, Tag, Value};

/// What a photo's EXIF says of when and where it was taken.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    pub taken_at: Option<TakenAt>,
    pub location: Option<Location>,
    /// A JPEG's estimated quality (1 to 100) from its quantization table (`compression.rs`); not
    /// from the EXIF block, but read at the same step.
    pub jpeg_quality: Option<u8>,
}

/// A capture time as the camera recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenAt {
    /// The local wall-clock time, nanoseconds included when sub-seconds were recorded.
    pub local: NaiveDateTime,
    /// How many sub-second digits were recorded (0 to 9): the text keeps them as given.
    pub subsec_digits: u8,
    /// Minutes east of UTC, when the photo records an offset or its GPS clock gives one.
    pub offset_minutes: Option<i32>,
    /// Whether the offset was derived from the GPS clock rather than recorded.
    pub offset_from_gps: bool,
}

impl TakenAt {
    /// Where the offset came from, as answers say it: `recorded` or `gps`; none without one.
    pub fn offset_source(&self) -> Option<&'static str> {
        self.offset_minutes.map(|_| if self.offset_from_gps { "gps" } else { "recorded" })
    }
}

impl TakenAt {
    /// ISO 8601: `2024-05-04T13:02:01.25+02:00`, or `2024-05-04T13:02:01` without an offset.
    pub fn iso8601(&self) -> String {
        let mut text = self.local.format("%Y-%m-%dT%H:%M:%S").to_string();
        if self.subsec_digits > 0 {
            let digits = u32::from(self.subsec_digits);
            let value = self.local.and_utc().timestamp_subsec_nanos() / 10u32.pow(9 - digits);
            text.push_str(&format!(".{value:0width$}", width = digits as usize));
        }
        if let Some(offset) = self.offset_minutes {
            let sign = if offset < 0 { '-' } else { '+' };
            text.push_str(&format!("{sign}{:02}:{:02}", offset.abs() / 60, offset.abs() % 60));
        }
        text
    }

    /// The instant in UTC, milliseconds since the Unix epoch, when the offset is known.
    pub fn utc_millis(&self) -> Option<i64> {
        let offset = self.offset_minutes?;
        Some((self.local - TimeDelta::minutes(i64::from(offset))).and_utc().timestamp_millis())
    }
}

/// Where a photo was taken: WGS 84 degrees (north and east positive) and metres above sea level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Location {
    pub lat: f64,
    pub lon: f64,
    pub alt: Option<f64>,
}

/// The furthest any zone in use is from UTC (UTC+14, Kiribati; UTC-12), in minutes.
const MAX_OFFSET_MINUTES: i32 = 14 * 60;

/// How far the GPS clock may lie from the capture time, once the zone's whole quarter hours are
/// taken out, for its offset to stand: 2 minutes. A phone writes the fix of the shot, seconds
/// old; a fix of unknown age lies anywhere in the quarter hour, and passes 4 times in 15.
pub const GPS_CLOCK_WINDOW_S: i64 = 120;

/// What the EXIF block `block` (a TIFF structure, with or without JPEG's `Exif\0\0` prefix) says.
/// Anything unreadable is left out.
pub fn from_exif(block: &[u8]) -> Metadata {
    let mut block = block.strip_prefix(b"Exif\0\0").unwrap_or(block).to_vec();
    ifd_pointers_as_long(&mut block);
    let mut reader = Reader::new();
    // A broken entry must not hide the good ones beside it.
    reader.continue_on_error(true);
    let exif = match reader.read_raw(block) {
        Ok(exif) => exif,
        Err(exif::Error::PartialResult(partial)) => partial.into_inner().0,
        Err(_) => return Metadata::default(),
    };
    Metadata { taken_at: taken_at(&exif), location: location(&exif), jpeg_quality: None }
}

/// TIFF also lets IFD0 point to the Exif and GPS IFDs with type IFD (13) rather than LONG (4), as
/// some writers do (Pillow's `ifd_tag_type.tiff`) and Pillow reads; kamadak-exif follows LONG
/// pointers only, so such entries are retyped LONG (same size, same value) in the copy it parses.
fn ifd_pointers_as_long(tiff: &mut [u8]) {
    let little = match tiff.get(..2) {
        Some(b"II") => true,
        Some(b"MM") => false,
        _ => return,
    };
    let u16_at = |t: &[u8], at: usize| {
        t.get(at..at + 2)
            .map(|b| if little { u16::from_le_bytes([b[0], b[1]]) } else { u16::from_be_bytes([b[0], b[1]]) })
    };
    let Some(ifd0) = tiff.get(4..8).map(|b| {
        let b = [b[0], b[1], b[2], b[3]];
        if little { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) }
    }) else {
        return;
    };
    let Ok(ifd0) = usize::try_from(ifd0) else { return };
    let Some(count) = u16_at(tiff, ifd0) else { return };
    for entry in 0..usize::from(count) {
        let at = ifd0 + 2 + 12 * entry;
        let (Some(tag), Some(13)) = (u16_at(tiff, at), u16_at(tiff, at + 2)) else { continue };
        if tag == 0x8769 || tag == 0x8825 {
            let long = if little { 4u16.to_le_bytes() } else { 4u16.to_be_bytes() };
            tiff[at + 2..at + 4].copy_from_slice(&long);
        }
    }
}

fn field(exif: &Exif, tag: Tag) -> Option<&Field> {
    exif.get_field(tag, In::PRIMARY)
}

/// The first string of an ASCII tag, trailing NULs and spaces trimmed.
fn ascii(exif: &Exif, tag: Tag) -> Option<&[u8]> {
    match &field(exif, tag)?.value {
        Value::Ascii(values) => {
            let text = values.first()?;
            let end = text.iter().rposition(|&b| b != 0 && b != b' ').map_or(0, |i| i + 1);
            Some(&text[..end]).filter(|text| !text.is_empty())
        }
        _ => None,
    }
}

/// The rationals of a RATIONAL tag, as numbers; none if any has a zero denominator.
fn rationals(exif: &Exif, tag: Tag) -> Option<Vec<f64>> {
    match &field(exif, tag)?.value {
        Value::Rational(values) if !values.is_empty() => {
            values.iter().map(|r| (r.denom != 0).then(|| r.to_f64())).collect()
        }
        _ => None,
    }
}

fn taken_at(exif: &Exif) -> Option<TakenAt> {
    let mut parsed = exif::DateTime::from_ascii(ascii(exif, Tag::DateTimeOriginal)?).ok()?;
    let date = NaiveDate::from_ymd_opt(i32::from(parsed.year), u32::from(parsed.month), u32::from(parsed.day))?;
    let time = NaiveTime::from_hms_opt(u32::from(parsed.hour), u32::from(parsed.minute), u32::from(parsed.second))?;
    let mut local = date.and_time(time);
    let mut subsec_digits = 0;
    if let Some(subsec) = ascii(exif, Tag::SubSecTimeOriginal) {
        let digits = subsec.iter().take_while(|b| b.is_ascii_digit()).count().min(9);
        if digits > 0
            && parsed.parse_subsec(&subsec[..digits]).is_ok()
            && let Some(nanos) = parsed.nanosecond
        {
            local += TimeDelta::nanoseconds(i64::from(nanos));
            subsec_digits = digits as u8;
        }
    }
    let recorded = ascii(exif, Tag::OffsetTimeOriginal)
        // kamadak-exif checks the shape `±HH:MM`, not that the minutes are under 60.
        .filter(|text| text.get(4..6).is_some_and(|minutes| minutes < b"60".as_slice()))
        .and_then(|text| parsed.parse_offset(text).ok().and(parsed.offset))
        .map(i32::from)
        .filter(|offset| offset.abs() <= MAX_OFFSET_MINUTES);
    let (offset_minutes, offset_from_gps) = match recorded {
        Some(offset) => (Some(offset), false),
        None => {
            let derived = gps_offset(exif, local);
            (derived, derived.is_some())
        }
    };
    Some(TakenAt { local, subsec_digits, offset_minutes, offset_from_gps })
}

/// The offset of `local` from the GPS clock's UTC, rounded to 15 minutes; none past ±14 h, and none
/// when the GPS time lies more than [`GPS_CLOCK_WINDOW_S`] off the capture time at that offset.
fn gps_offset(exif: &Exif, local: NaiveDateTime) -> Option<i32> {
    let date = std::str::from_utf8(ascii(exif, Tag::GPSDateStamp)?).ok()?;
    let date = NaiveDate::parse_from_str(date, "%Y:%m:%d").ok()?;
    let hms = rationals(exif, Tag::GPSTimeStamp)?;
    let [hours, minutes, seconds] = hms[..] else { return None };
    if !(0.0..24.0).contains(&hours) || !(0.0..60.0).contains(&minutes) || !(0.0..61.0).contains(&seconds) {
        return None;
    }
    let millis = ((hours * 3600.0 + minutes * 60.0 + seconds) * 1000.0).round() as i64;
    let utc = date.and_time(NaiveTime::MIN) + TimeDelta::milliseconds(millis);
    let apart_ms = (local - utc).num_milliseconds();
    let offset = ((apart_ms as f64 / 60_000.0 / 15.0).round() * 15.0) as i32;
    let off_ms = apart_ms - i64::from(offset) * 60_000;
    (offset.abs() <= MAX_OFFSET_MINUTES && off_ms.abs() <= GPS_CLOCK_WINDOW_S * 1000).then_some(offset)
}

fn location(exif: &Exif) -> Option<Location> {
    if ascii(exif, Tag::GPSStatus) == Some(b"V") {
        return None;
    }
    let lat = coordinate(exif, Tag::GPSLatitude, Tag::GPSLatitudeRef, b'N', b'S', 90.0)?;
    let lon = coordinate(exif, Tag::GPSLongitude, Tag::GPSLongitudeRef, b'E', b'W', 180.0)?;
    if lat == 0.0 && lon == 0.0 {
        return None;
    }
    Some(Location { lat, lon, alt: altitude(exif) })
}

/// Degrees, minutes and seconds (or fewer parts: degrees alone, or degrees and decimal minutes),
/// signed by the reference; none without a reference or out of range (minutes and seconds under
/// 60: a writer's 30/0/75 is not 30 degrees 1 minute 15 seconds).
fn coordinate(exif: &Exif, tag: Tag, reference: Tag, positive: u8, negative: u8, limit: f64) -> Option<f64> {
    let parts = rationals(exif, tag)?;
    if parts.len() > 3 || parts.iter().skip(1).any(|part| !(0.0..60.0).contains(part)) {
        return None;
    }
    let magnitude: f64 = parts.iter().zip([1.0, 60.0, 3600.0]).map(|(part, per_degree)| part / per_degree).sum();
    let sign = match ascii(exif, reference)? {
        [r] if r.eq_ignore_ascii_case(&positive) => 1.0,
        [r] if r.eq_ignore_ascii_case(&negative) => -1.0,
        _ => return None,
    };
    (magnitude.is_finite() && magnitude <= limit).then_some(sign * magnitude)
}

/// Metres above sea level (below it with `GPSAltitudeRef` = 1); none when absent or broken.
fn altitude(exif: &Exif) -> Option<f64> {
    let [metres] = rationals(exif, Tag::GPSAltitude)?[..] else { return None };
    let below = match field(exif, Tag::GPSAltitudeRef).map(|f| f.value.get_uint(0)) {
        None => false,
        Some(Some(0)) => false,
        Some(Some(1)) => true,
        Some(_) => return None,
    };
    metres.is_finite().then_some(if below { -metres } else { metres })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of an IFD entry as the test writes it.
    enum V {
        Ascii(&'static str),
        Rationals(Vec<(u32, u32)>),
        Byte(u8),
        Short(u16),
    }

    /// An EXIF block (big-endian TIFF) with `exif` tags in the Exif IFD and `gps` tags in the GPS
    /// IFD, both linked from IFD0. Entries are sorted by tag as the spec wants.
    fn block(exif: &[(u16, V)], gps: &[(u16, V)]) -> Vec<u8> {
        fn ifd(entries: &[(u16, V)], at: u32) -> Vec<u8> {
            let mut entries: Vec<&(u16, V)> = entries.iter().collect();
            entries.sort_by_key(|(tag, _)| *tag);
            let table = 2 + 12 * entries.len() as u32 + 4;
            let (mut head, mut data) = ((entries.len() as u16).to_be_bytes().to_vec(), Vec::new());
            for (tag, value) in entries {
                let (kind, count, bytes): (u16, u32, Vec<u8>) = match value {
                    V::Ascii(s) => (2, s.len() as u32 + 1, [s.as_bytes(), &[0]].concat()),
                    V::Rationals(r) => (
                        5,
                        r.len() as u32,
                        r.iter().flat_map(|(n, d)| [n.to_be_bytes(), d.to_be_bytes()]).flatten().collect(),
                    ),
                    V::Byte(b) => (1, 1, vec![*b]),
                    V::Short(s) => (3, 1, s.to_be_bytes().to_vec()),
                };
                head.extend(tag.to_be_bytes());
                head.extend(kind.to_be_bytes());
                head.extend(count.to_be_bytes());
                if bytes.len() <= 4 {
                    let mut inline = bytes.clone();
                    inline.resize(4, 0);
                    head.extend(inline);
                } else {
                    head.extend((at + table + data.len() as u32).to_be_bytes());
                    data.extend(&bytes);
                    if data.len() % 2 == 1 {
                        data.push(0);
                    }
                }
            }
            head.extend(0u32.to_be_bytes());
            [head, data].concat()
        }
        // IFD0 at 8 with two LONG pointers: 2 + 24 + 4 = 30 bytes, so the Exif IFD starts at 38.
        let exif_at = 38u32;
        let exif_ifd = ifd(exif, exif_at);
        let gps_at = exif_at + exif_ifd.len() as u32;
        let gps_ifd = ifd(gps, gps_at);
        let mut t = b"MM\0\x2a\0\0\0\x08".to_vec();
        t.extend(2u16.to_be_bytes());
        for (tag, at) in [(0x8769u16, exif_at), (0x8825, gps_at)] {
            t.extend(tag.to_be_bytes());
            t.extend(4u16.to_be_bytes());
            t.extend(1u32.to_be_bytes());
            t.extend(at.to_be_bytes());
        }
        t.extend(0u32.to_be_bytes());
        t.extend(exif_ifd);
        t.extend(gps_ifd);
        t
    }

    const ORIGINAL: u16 = 0x9003;
    const OFFSET: u16 = 0x9011;
    const SUBSEC: u16 = 0x9291;
    const LAT_REF: u16 = 1;
    const LAT: u16 = 2;
    const LON_REF: u16 = 3;
    const LON: u16 = 4;
    const ALT_REF: u16 = 5;
    const ALT: u16 = 6;
    const TIME: u16 = 7;
    const STATUS: u16 = 9;
    const DATE: u16 = 0x1d;

    fn taken(exif: &[(u16, V)], gps: &[(u16, V)]) -> Option<String> {
        from_exif(&block(exif, gps)).taken_at.map(|t| t.iso8601())
    }

    fn dms(d: u32, m: u32, s100: u32) -> V {
        V::Rationals(vec![(d, 1), (m, 1), (s100, 100)])
    }

    #[test]
    fn times_with_and_without_offsets_and_subseconds() {
        assert_eq!(taken(&[(ORIGINAL, V::Ascii("2024:05:04 13:02:01"))], &[]).unwrap(), "2024-05-04T13:02:01");
        let full =
            [(ORIGINAL, V::Ascii("2024:05:04 13:02:01")), (SUBSEC, V::Ascii("045")), (OFFSET, V::Ascii("+05:30"))];
        assert_eq!(taken(&full, &[]).unwrap(), "2024-05-04T13:02:01.045+05:30");
        let taken_at = from_exif(&block(&full, &[])).taken_at.unwrap();
        assert_eq!(taken_at.offset_source(), Some("recorded"));
        assert_eq!(taken_at.utc_millis(), Some(1_714_807_921_045), "07:32:01.045 UTC");
        let west = [(ORIGINAL, V::Ascii("2023:12:31 23:59:59")), (OFFSET, V::Ascii("-03:00"))];
        assert_eq!(taken(&west, &[]).unwrap(), "2023-12-31T23:59:59-03:00");
        // Sub-seconds padded with spaces, or longer than nanoseconds.
        let spaced = [(ORIGINAL, V::Ascii("2024:05:04 13:02:01")), (SUBSEC, V::Ascii("7  "))];
        assert_eq!(taken(&spaced, &[]).unwrap(), "2024-05-04T13:02:01.7");
        let long = [(ORIGINAL, V::Ascii("2024:05:04 13:02:01")), (SUBSEC, V::Ascii("12345678901"))];
        assert_eq!(taken(&long, &[]).unwrap(), "2024-05-04T13:02:01.123456789");
        // A local time has no instant.
        let local = from_exif(&block(&[(ORIGINAL, V::Ascii("2024:05:04 13:02:01"))], &[])).taken_at.unwrap();
        assert_eq!((local.utc_millis(), local.offset_source()), (None, None));
    }

    #[test]
    fn the_gps_clock_gives_the_offset_rounded_to_15_minutes() {
        let time = |h, m, s| V::Rationals(vec![(h, 1), (m, 1), (s, 1)]);
        let shot = (ORIGINAL, V::Ascii("2024:05:04 13:02:01"));
        // Tokyo, the fix 40 s before the shutter: +09:00.
        let gps = [(DATE, V::Ascii("2024:05:04")), (TIME, time(4, 1, 21))];
        let taken_at = from_exif(&block(&[shot], &gps)).taken_at.unwrap();
        assert_eq!((taken_at.iso8601().as_str(), taken_at.offset_source()), ("2024-05-04T13:02:01+09:00", Some("gps")));
        // Across midnight, westwards: New York's -04:00 from the next day's UTC date.
        let gps = [(DATE, V::Ascii("2024:05:05")), (TIME, time(0, 4, 0))];
        let evening = (ORIGINAL, V::Ascii("2024:05:04 20:03:00"));
        assert_eq!(taken(&[evening], &gps).unwrap(), "2024-05-04T20:03:00-04:00");
        // Nepal's +05:45, the fix 90 s before the shutter; 3 minutes before, outside the window, no
        // offset (the fix may be hours old: its quarter hours cannot tell).
        let gps = [(DATE, V::Ascii("2024:05:04")), (TIME, time(7, 15, 30))];
        let kathmandu = (ORIGINAL, V::Ascii("2024:05:04 13:02:00"));
        assert_eq!(taken(&[kathmandu], &gps).unwrap(), "2024-05-04T13:02:00+05:45");
        let gps = [(DATE, V::Ascii("2024:05:04")), (TIME, time(7, 14, 0))];
        let kathmandu = (ORIGINAL, V::Ascii("2024:05:04 13:02:00"));
        assert_eq!(taken(&[kathmandu], &gps).unwrap(), "2024-05-04T13:02:00");
        // A fix 2 h 40 s old in Tokyo would say +11:00; it is 40 s off the hour, so it stands, as
        // any clock off by whole quarter hours must: the window bounds what it can catch.
        let gps = [(DATE, V::Ascii("2024:05:04")), (TIME, time(2, 1, 21))];
        let stale = from_exif(&block(&[(ORIGINAL, V::Ascii("2024:05:04 13:02:01"))], &gps)).taken_at.unwrap();
        assert_eq!(stale.iso8601(), "2024-05-04T13:02:01+11:00");
        // At the window's edge, 120 s, it stands; at 121 s it does not.
        for (seconds, stands) in [(1, true), (0, false)] {
            let gps = [(DATE, V::Ascii("2024:05:04")), (TIME, time(3, 0, seconds))];
            let at = from_exif(&block(&[(ORIGINAL, V::Ascii("2024:05:04 12:02:01"))], &gps)).taken_at.unwrap();
            assert_eq!(at.offset_minutes.is_some(), stands, "{seconds}: {at:?}");
        }
        // A recorded offset wins over the GPS clock.
        let gps = [(DATE, V::Ascii("2024:05:04")), (TIME, time(4, 2, 1))];
        let recorded = [(ORIGINAL, V::Ascii("2024:05:04 13:02:01")), (OFFSET, V::Ascii("+10:00"))];
        assert_eq!(taken(&recorded, &gps).unwrap(), "2024-05-04T13:02:01+10:00");
        // A GPS clock days off gives no offset; so does one without its date.
        let gps = [(DATE, V::Ascii("2024:05:01")), (TIME, time(4, 2, 1))];
        assert_eq!(taken(&[(ORIGINAL, V::Ascii("2024:05:04 13:02:01"))], &gps).unwrap(), "2024-05-04T13:02:01");
        let gps = [(TIME, time(4, 2, 1))];
        assert_eq!(taken(&[(ORIGINAL, V::Ascii("2024:05:04 13:02:01"))], &gps).unwrap(), "2024-05-04T13:02:01");
    }

    #[test]
    fn places_in_each_hemisphere() {
        let place = |lat_ref, lat, lon_ref, lon, extra: Vec<(u16, V)>| {
            let mut gps = vec![(LAT_REF, V::Ascii(lat_ref)), (LAT, lat), (LON_REF, V::Ascii(lon_ref)), (LON, lon)];
            gps.extend(extra);
            from_exif(&block(&[], &gps)).location
        };
        let paris = place("N", dms(48, 51, 2400), "E", dms(2, 21, 0), vec![(ALT, V::Rationals(vec![(355, 10)]))]);
        let paris = paris.unwrap();
        assert!((paris.lat - (48.0 + 51.0 / 60.0 + 24.0 / 3600.0)).abs() < 1e-9);
        assert!((paris.lon - (2.0 + 21.0 / 60.0)).abs() < 1e-9);
        assert_eq!(paris.alt, Some(35.5));
        let rio = place("S", dms(22, 54, 0), "W", dms(43, 12, 0), vec![]).unwrap();
        assert!(rio.lat < 0.0 && rio.lon < 0.0 && rio.alt.is_none());
        let dead_sea = place(
            "N",
            dms(31, 30, 0),
            "E",
            dms(35, 30, 0),
            vec![(ALT, V::Rationals(vec![(430, 1)])), (ALT_REF, V::Byte(1))],
        );
        assert_eq!(dead_sea.unwrap().alt, Some(-430.0));
        // Decimal degrees in one rational, as some apps write them.
        let one =
            place("N", V::Rationals(vec![(35_6812, 10_000)]), "E", V::Rationals(vec![(139_7671, 10_000)]), vec![]);
        assert!((one.unwrap().lat - 35.6812).abs() < 1e-9);
    }

    #[test]
    fn void_fixes_zero_zero_and_broken_tags_are_left_out() {
        let gps = |extra: Vec<(u16, V)>| {
            let mut gps =
                vec![(LAT_REF, V::Ascii("N")), (LAT, dms(10, 0, 0)), (LON_REF, V::Ascii("E")), (LON, dms(20, 0, 0))];
            gps.extend(extra);
            from_exif(&block(&[], &gps)).location
        };
        assert!(gps(vec![]).is_some());
        assert!(gps(vec![(STATUS, V::Ascii("A"))]).is_some());
        assert!(gps(vec![(STATUS, V::Ascii("V"))]).is_none(), "a void fix");
        let zero = vec![(LAT_REF, V::Ascii("N")), (LAT, dms(0, 0, 0)), (LON_REF, V::Ascii("E")), (LON, dms(0, 0, 0))];
        assert!(from_exif(&block(&[], &zero)).location.is_none(), "0,0");
        // No reference, a bad reference, a zero denominator, a wrong type, out of range.
        let no_ref = vec![(LAT, dms(10, 0, 0)), (LON_REF, V::Ascii("E")), (LON, dms(20, 0, 0))];
        assert!(from_exif(&block(&[], &no_ref)).location.is_none());
        let bad = |lat: V, lat_ref: &'static str| {
            let gps = vec![(LAT_REF, V::Ascii(lat_ref)), (LAT, lat), (LON_REF, V::Ascii("E")), (LON, dms(20, 0, 0))];
            from_exif(&block(&[], &gps)).location
        };
        assert!(bad(dms(10, 0, 0), "X").is_none());
        assert!(bad(V::Rationals(vec![(10, 0), (0, 1), (0, 1)]), "N").is_none());
        assert!(bad(V::Ascii("10.5"), "N").is_none());
        assert!(bad(dms(91, 0, 0), "N").is_none());
        // Minutes or seconds of 60 or more are no place; 59.99 seconds are.
        assert!(bad(dms(10, 60, 0), "N").is_none());
        assert!(bad(dms(10, 0, 6000), "N").is_none());
        assert!(bad(V::Rationals(vec![(10, 1), (61, 1)]), "N").is_none(), "decimal minutes");
        assert!(bad(dms(10, 59, 5999), "N").is_some());
        // A broken altitude drops the altitude only.
        let broken_alt = gps(vec![(ALT, V::Rationals(vec![(5, 0)]))]).unwrap();
        assert_eq!(broken_alt.alt, None);
        let odd_ref = gps(vec![(ALT, V::Rationals(vec![(5, 1)])), (ALT_REF, V::Byte(7))]).unwrap();
        assert_eq!(odd_ref.alt, None);
    }

    #[test]
    fn broken_times_are_left_out() {
        for text in
            ["2024:13:04 13:02:01", "2024:02:30 13:02:01", "2024:05:04 25:02:01", "    :  :     :  :  ", "2024-05-04"]
        {
            assert_eq!(taken(&[(ORIGINAL, V::Ascii(text))], &[]), None, "{text}");
        }
        assert_eq!(taken(&[(ORIGINAL, V::Short(2024))], &[]), None, "a tag of the wrong type");
        // A broken offset or sub-second leaves a local time, not nothing.
        let bad_offset = [(ORIGINAL, V::Ascii("2024:05:04 13:02:01")), (OFFSET, V::Ascii("05:30"))];
        assert_eq!(taken(&bad_offset, &[]).unwrap(), "2024-05-04T13:02:01");
        for offset in ["+19:00", "+05:75", "      "] {
            let odd = [(ORIGINAL, V::Ascii("2024:05:04 13:02:01")), (OFFSET, V::Ascii(offset))];
            assert_eq!(taken(&odd, &[]).unwrap(), "2024-05-04T13:02:01", "{offset:?}");
        }
        let bad_subsec = [(ORIGINAL, V::Ascii("2024:05:04 13:02:01")), (SUBSEC, V::Ascii("x1"))];
        assert_eq!(taken(&bad_subsec, &[]).unwrap(), "2024-05-04T13:02:01");
    }

    #[test]
    fn pointers_typed_ifd_are_followed() {
        let mut typed = block(&[(ORIGINAL, V::Ascii("2024:05:04 13:02:01"))], &[]);
        for entry in 0..2 {
            typed[10 + 12 * entry + 2..10 + 12 * entry + 4].copy_from_slice(&13u16.to_be_bytes());
        }
        assert_eq!(taken(&[(ORIGINAL, V::Ascii("2024:05:04 13:02:01"))], &[]).unwrap(), "2024-05-04T13:02:01");
        assert_eq!(from_exif(&typed).taken_at.unwrap().iso8601(), "2024-05-04T13:02:01");
    }

    #[test]
    fn truncated_and_hostile_blocks_give_nothing_and_never_panic() {
        let good = block(
            &[(ORIGINAL, V::Ascii("2024:05:04 13:02:01"))],
            &[(LAT_REF, V::Ascii("N")), (LAT, dms(10, 0, 0)), (LON_REF, V::Ascii("E")), (LON, dms(20, 0, 0))],
        );
        let full = from_exif(&good);
        assert!(full.taken_at.is_some() && full.location.is_some());
        // With JPEG's prefix too.
        assert_eq!(from_exif(&[b"Exif\0\0".as_slice(), &good].concat()), full);
        for cut in 0..good.len() {
            let _ = from_exif(&good[..cut]);
        }
        // An IFD claiming 65,535 entries: the entries read before the block runs out stand (the
        // pointer to the Exif IFD comes first, so its time is still found), the rest is dropped.
        let mut huge = good.clone();
        huge[8..10].copy_from_slice(&0xFFFFu16.to_be_bytes());
        assert_eq!(from_exif(&huge).taken_at, full.taken_at);
        let mut huge_exif_ifd = good.clone();
        huge_exif_ifd[38..40].copy_from_slice(&0xFFFFu16.to_be_bytes());
        let read = from_exif(&huge_exif_ifd);
        assert!(read.taken_at.is_none() || read.taken_at == full.taken_at, "{read:?}");
        // Entries pointing outside the block.
        let mut outside = good.clone();
        let n = outside.len();
        for at in (10..n.min(120)).step_by(4) {
            outside[at..at + 4].copy_from_slice(&0x7FFF_FFF0u32.to_be_bytes());
            let _ = from_exif(&outside);
        }
        assert_eq!(from_exif(b""), Metadata::default());
        assert_eq!(from_exif(b"II*\0\xff\xff\xff\xff"), Metadata::default());
    }
}
