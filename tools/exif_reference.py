"""The reference for /v1/analyze's `taken_at`, `location`, `width` and `height` (tests/it/analyze.rs).

    exif_reference.py write DIR     writes the EXIF corpus (JPEG, PNG, WebP, HEIC) into DIR: by
                                    Pillow, and two files (exiftool_*) by exiftool itself
    exif_reference.py album DIR     writes an album for events: two days in two cities, one photo
                                    without a time (day1-*.jpg, day2-*.jpg, untimed.jpg)
    exif_reference.py burst DIR     writes a burst: a cat crossing a table in five frames 350 ms
                                    apart (burst-0..4.jpg), another scene 1 s after (other.jpg),
                                    the table again 10 s later (later.jpg); prints their times
    exif_reference.py trip DIR      writes a trip across midnight and time zones, no places: Paris
                                    (+02:00) from 20:00 to 01:30, New York (-04:00) from 10:00 the
                                    next morning, and a camera there that records no offset
    exif_reference.py read FILE...  prints {file name: {taken_at, taken_at_offset, location, width,
                                    height}}
    exif_reference.py exiftool FILE...
                                    the same, from exiftool's reading of the tags (Debian's
                                    libimage-exiftool-perl): a second parser under the same rules

`read` parses with Pillow's own EXIF reader (getexif, and pillow-heif's for HEIC), not clipfn's,
and applies README's rules to what it reads: DateTimeOriginal with SubSecTimeOriginal and
OffsetTimeOriginal; without an offset, local time minus the GPS clock's UTC rounded to 15 minutes,
when the GPS clock lies within 120 s of the capture time at that offset; GPS void fixes, 0,0 and
minutes or seconds of 60 or more left out; anything unreadable left out. A file Pillow cannot open is left out.
"""

import datetime
import json
import math
import os
import re
import subprocess
import sys

from PIL import Image

try:
    import pillow_heif

    pillow_heif.register_heif_opener()
except ImportError:  # HEIC then stays out of the corpus
    pillow_heif = None

EXIF_IFD, GPS_IFD = 0x8769, 0x8825
ORIGINAL, OFFSET, SUBSEC = 0x9003, 0x9011, 0x9291
LAT_REF, LAT, LON_REF, LON, ALT_REF, ALT, TIME, STATUS, DATE = 1, 2, 3, 4, 5, 6, 7, 9, 0x1D
MAX_OFFSET = 14 * 60
GPS_CLOCK_WINDOW_S = 120


def text(value):
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        return None
    value = value.rstrip("\0 ")
    return value or None


def number(value):
    try:
        value = float(value)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return value if math.isfinite(value) else None


def taken_at(exif, gps):
    """(ISO 8601 text, where its offset came from: "recorded", "gps" or None), or None."""
    original = text(exif.get(ORIGINAL))
    if original is None:
        return None
    try:
        local = datetime.datetime.strptime(original, "%Y:%m:%d %H:%M:%S")
    except ValueError:
        return None
    out = local.strftime("%Y-%m-%dT%H:%M:%S")
    subsec = text(exif.get(SUBSEC))
    if subsec:
        digits = re.match(r"\d*", subsec).group()[:9]
        if digits:
            out += "." + digits
            local += datetime.timedelta(microseconds=int(digits.ljust(9, "0")) / 1000)
    offset = None
    recorded = text(exif.get(OFFSET))
    match = re.fullmatch(r"([+-])(\d\d):(\d\d)", recorded or "")
    if match and int(match.group(3)) < 60:
        minutes = int(match.group(2)) * 60 + int(match.group(3))
        minutes = -minutes if match.group(1) == "-" else minutes
        if abs(minutes) <= MAX_OFFSET:
            offset = minutes
    source = None if offset is None else "recorded"
    if offset is None:
        offset = gps_offset(gps, local)
        source = None if offset is None else "gps"
    if offset is not None:
        sign = "-" if offset < 0 else "+"
        out += f"{sign}{abs(offset) // 60:02}:{abs(offset) % 60:02}"
    return out, source


def gps_offset(gps, local):
    date, hms = text(gps.get(DATE)), gps.get(TIME)
    if date is None or not isinstance(hms, tuple) or len(hms) != 3:
        return None
    try:
        day = datetime.datetime.strptime(date, "%Y:%m:%d")
    except ValueError:
        return None
    h, m, s = (number(v) for v in hms)
    if None in (h, m, s) or not (0 <= h < 24 and 0 <= m < 60 and 0 <= s < 61):
        return None
    utc = day + datetime.timedelta(milliseconds=round((h * 3600 + m * 60 + s) * 1000))
    apart = (local - utc).total_seconds()
    offset = round(apart / 60 / 15) * 15
    return offset if abs(offset) <= MAX_OFFSET and abs(apart - offset * 60) <= GPS_CLOCK_WINDOW_S else None


def coordinate(gps, tag, ref_tag, positive, negative, limit):
    parts = gps.get(tag)
    if not isinstance(parts, tuple) or not 1 <= len(parts) <= 3:
        return None
    parts = [number(p) for p in parts]
    if None in parts or any(not 0 <= p < 60 for p in parts[1:]):
        return None
    magnitude = sum(p / d for p, d in zip(parts, (1, 60, 3600)))
    ref = (text(gps.get(ref_tag)) or "").upper()
    sign = {positive: 1, negative: -1}.get(ref)
    if sign is None or magnitude > limit:
        return None
    return sign * magnitude


def location(gps):
    if text(gps.get(STATUS)) == "V":
        return None
    lat = coordinate(gps, LAT, LAT_REF, "N", "S", 90)
    lon = coordinate(gps, LON, LON_REF, "E", "W", 180)
    if lat is None or lon is None or (lat == 0 and lon == 0):
        return None
    place = {"lat": lat, "lon": lon}
    alt = number(gps.get(ALT)) if ALT in gps else None
    ref = gps.get(ALT_REF, b"\0")
    ref = ref[0] if isinstance(ref, bytes) and len(ref) == 1 else ref
    if alt is not None and ref in (0, 1):
        place["alt"] = -alt if ref == 1 else alt
    return place


def read(path):
    with Image.open(path) as image:
        exif = image.getexif()
        width, height = image.size
        # pillow-heif gives HEIC upright already (irot/imir); the others say so in the tag.
        if image.format not in ("HEIF", "AVIF") and exif.get(0x0112) in (5, 6, 7, 8):
            width, height = height, width
        # A TIFF's IFDs are read from the open file.
        gps = exif.get_ifd(GPS_IFD)
        when, where = taken_at(exif.get_ifd(EXIF_IFD), gps), location(gps)
    out = {"width": width, "height": height}
    if when is not None:
        out["taken_at"], source = when
        if source is not None:
            out["taken_at_offset"] = source
    if where is not None:
        out["location"] = where
    return out


def write(folder):
    """The corpus: each file's name says what its EXIF holds."""
    os.makedirs(folder, exist_ok=True)

    def exif_of(original=None, offset=None, subsec=None, gps=None, orientation=None):
        exif = Image.Exif()
        if orientation:
            exif[0x0112] = orientation
        ifd = exif.get_ifd(EXIF_IFD)
        for tag, value in ((ORIGINAL, original), (OFFSET, offset), (SUBSEC, subsec)):
            if value is not None:
                ifd[tag] = value
        if gps:
            exif.get_ifd(GPS_IFD).update(gps)
        return exif

    def photo(width=96, height=64):
        return Image.radial_gradient("L").resize((width, height)).convert("RGB")

    def paris():
        return {LAT_REF: "N", LAT: (48.0, 51.0, 24.0), LON_REF: "E", LON: (2.0, 21.0, 0.5), ALT_REF: b"\0", ALT: 35.5}

    corpus = {
        "local.jpg": exif_of("2024:05:04 13:02:01"),
        "offset_subsec_paris.jpg": exif_of("2024:05:04 13:02:01", "+02:00", "045", paris()),
        "gps_clock_tokyo.jpg": exif_of(
            "2024:05:04 13:02:01",
            gps={LAT_REF: "N", LAT: (35.0, 40.0, 52.3), LON_REF: "E", LON: (139.0, 46.0, 1.6),
                 DATE: "2024:05:04", TIME: (4.0, 1.0, 21.0)},
        ),
        "gps_clock_new_york_past_midnight.jpg": exif_of(
            "2024:05:04 20:03:00",
            gps={LAT_REF: "N", LAT: (40.0, 42.0, 46.0), LON_REF: "W", LON: (74.0, 0.0, 22.0),
                 DATE: "2024:05:05", TIME: (0.0, 4.0, 0.0)},
        ),
        # A fix 4 minutes off the shutter (its quarter hours aside): no offset from it.
        "gps_clock_stale.jpg": exif_of(
            "2024:05:04 20:03:00", gps={DATE: "2024:05:05", TIME: (0.0, 7.0, 0.0)},
        ),
        # 60 minutes is no minute: no place.
        "gps_minutes_60.jpg": exif_of(
            "2024:05:04 13:02:01", "+02:00", gps={LAT_REF: "N", LAT: (48.0, 60.0, 0.0), LON_REF: "E", LON: (2.0, 21.0, 0.5)},
        ),
        "south_west_below_sea.jpg": exif_of(
            "2023:12:31 23:59:59", "-03:00",
            gps={LAT_REF: "S", LAT: (22.0, 54.0, 0.0), LON_REF: "W", LON: (43.0, 12.0, 0.0), ALT_REF: b"\x01", ALT: 12.0},
        ),
        "south_east.jpg": exif_of(
            "2022:01:01 08:00:00", "+11:00",
            gps={LAT_REF: "S", LAT: (33.0, 51.0, 25.0), LON_REF: "E", LON: (151.0, 12.0, 40.0)},
        ),
        "void_fix.jpg": exif_of("2024:05:04 13:02:01", gps={**paris(), STATUS: "V"}),
        "zero_zero.jpg": exif_of(
            "2024:05:04 13:02:01", gps={LAT_REF: "N", LAT: (0.0, 0.0, 0.0), LON_REF: "E", LON: (0.0, 0.0, 0.0)}
        ),
        "broken_time_no_refs.jpg": exif_of(
            "2024:02:30 10:00:00", gps={LAT: (48.0, 51.0, 24.0), LON: (2.0, 21.0, 0.0)}
        ),
        "bad_offset.jpg": exif_of("2024:05:04 13:02:01", "+5:30"),
        # DateTimeOriginal as a LONG, not ASCII: the time is left out, the place kept.
        "wrong_type.jpg": exif_of(20240504, gps=paris()),
        "rotated.jpg": exif_of("2024:05:04 13:02:01", orientation=6),
        "no_exif.jpg": None,
        "paris.png": exif_of("2024:05:04 13:02:01", "+02:00", "5", paris()),
        "paris.webp": exif_of("2024:05:04 13:02:01", "+02:00", None, paris()),
    }
    if pillow_heif is not None:
        corpus["paris.heic"] = exif_of("2024:05:04 13:02:01", "+02:00", "25", paris())
    for name, exif in corpus.items():
        kwargs = {} if exif is None else {"exif": exif.tobytes()}
        photo().save(os.path.join(folder, name), quality=90, **kwargs)
    # Written by a second writer, exiftool (Debian's libimage-exiftool-perl): Sydney, its offset and
    # sub-seconds, into a JPEG's APP1 and a PNG's eXIf chunk.
    for name in ("exiftool_sydney.jpg", "exiftool_sydney.png"):
        path = os.path.join(folder, name)
        photo().save(path, quality=90)
        tags = {"DateTimeOriginal": "2024:05:04 13:02:01", "OffsetTimeOriginal": "+10:00", "SubSecTimeOriginal": "5",
                "GPSLatitude": "33.8568", "GPSLatitudeRef": "S", "GPSLongitude": "151.2153", "GPSLongitudeRef": "E",
                "GPSAltitude": "58", "GPSAltitudeRef": "0"}
        command = ["exiftool", "-q", "-overwrite_original", *(f"-EXIF:{tag}={value}" for tag, value in tags.items()), path]
        subprocess.run(command, check=True)


def scene(n, second_half):
    """A distinct real photo for each of five hours and two days: one of scikit-image's, its left
    or right half (so that no two photos of the album are near-duplicates)."""
    import skimage.data

    photo = [skimage.data.astronaut, skimage.data.coffee, skimage.data.chelsea, skimage.data.rocket,
             skimage.data.immunohistochemistry][n]()
    image = Image.fromarray(photo).convert("RGB")
    w, h = image.size
    return image.crop((w // 2, 0, w, h) if second_half else (0, 0, w // 2, h))


def album(folder):
    """Paris on 4 May from 10:00 (+02:00), Lyon on 5 May from 10:00, a photo an hour apart each."""
    os.makedirs(folder, exist_ok=True)
    cities = [("day1", 4, (48.0, 51.0, 24.0), (2.0, 21.0, 8.0)), ("day2", 5, (45.0, 45.0, 51.0), (4.0, 50.0, 2.0))]
    for name, day, lat, lon in cities:
        for hour in range(5):
            exif = Image.Exif()
            ifd = exif.get_ifd(EXIF_IFD)
            ifd[ORIGINAL] = f"2024:05:{day:02} {10 + hour:02}:00:00"
            ifd[OFFSET] = "+02:00"
            exif.get_ifd(GPS_IFD).update({LAT_REF: "N", LAT: lat, LON_REF: "E", LON: lon})
            image = scene(hour, day == 5).resize((320 + hour, 240))
            image.save(os.path.join(folder, f"{name}-{hour}.jpg"), exif=exif.tobytes())
    Image.linear_gradient("L").resize((64, 48)).convert("RGB").save(os.path.join(folder, "untimed.jpg"))


def burst(folder):
    """Frames whose hashes are far apart (the subject moves a quarter of the frame) but whose
    embeddings stay alike; times with sub-seconds and an offset, crossing a second; and a copy of
    the third frame at 60%, with its time."""
    import numpy as np
    import skimage.data

    os.makedirs(folder, exist_ok=True)
    table = Image.fromarray(skimage.data.coffee()).resize((640, 480))
    cat = Image.fromarray(skimage.data.chelsea()).resize((320, 240))
    start = datetime.datetime(2024, 5, 4, 12, 0, 0, 100_000)

    def save(image, name, at):
        exif = Image.Exif()
        ifd = exif.get_ifd(EXIF_IFD)
        ifd[ORIGINAL] = at.strftime("%Y:%m:%d %H:%M:%S")
        ifd[SUBSEC] = f"{at.microsecond // 1000:03}"
        ifd[OFFSET] = "+02:00"
        image.save(os.path.join(folder, name), quality=92, exif=exif.tobytes())
        return {name: at.isoformat(timespec="milliseconds") + "+02:00"}

    times = {}
    for i in range(5):
        frame = table.copy()
        frame.paste(cat, (80 * i, 40 + 50 * (i % 3)))
        times |= save(frame, f"burst-{i}.jpg", start + datetime.timedelta(milliseconds=350 * i))
        if i == 2:  # a resized copy of a frame, with its time: a duplicate of it, not a frame
            small = frame.resize((384, 288), Image.LANCZOS)
            times |= save(small, "burst-2-small.jpg", start + datetime.timedelta(milliseconds=350 * i))
    last = start + datetime.timedelta(milliseconds=350 * 4)
    other = Image.fromarray(np.asarray(skimage.data.astronaut())).resize((640, 480))
    times |= save(other, "other.jpg", last + datetime.timedelta(seconds=1))
    frame = table.copy()
    frame.paste(cat, (20, 220))  # moved on: neither in the burst nor a copy of a frame
    times |= save(frame, "later.jpg", last + datetime.timedelta(seconds=10))
    print(json.dumps(times))


def trip(folder):
    """An evening in Paris past midnight, a flight, a morning in New York; a phone that records its
    offset, and in New York also a camera that does not (set to the local clock). No places: the
    clock alone parts the events."""
    os.makedirs(folder, exist_ok=True)
    shots = [
        ("paris-0.jpg", "2024:05:04 20:00:00", "+02:00"),
        ("paris-1.jpg", "2024:05:04 23:30:00", "+02:00"),
        ("paris-2.jpg", "2024:05:05 00:30:00", "+02:00"),
        ("paris-3.jpg", "2024:05:05 01:30:00", "+02:00"),
        ("new-york-0.jpg", "2024:05:05 10:00:00", "-04:00"),
        ("new-york-1.jpg", "2024:05:05 10:30:00", "-04:00"),
        ("new-york-camera.jpg", "2024:05:05 11:00:00", None),
        ("new-york-2.jpg", "2024:05:05 12:00:00", "-04:00"),
    ]
    for n, (name, original, offset) in enumerate(shots):
        exif = Image.Exif()
        ifd = exif.get_ifd(EXIF_IFD)
        ifd[ORIGINAL] = original
        if offset:
            ifd[OFFSET] = offset
        scene(n % 4, n >= 4).resize((320 + n, 240)).save(os.path.join(folder, name), exif=exif.tobytes())


def exiftool(paths):
    """exiftool's raw values (`-n`) of the EXIF group's tags, shaped as Pillow gives them, then the
    same rules; width and height as exiftool reads the file, swapped by its Orientation."""
    tags = ["DateTimeOriginal", "SubSecTimeOriginal", "OffsetTimeOriginal", "GPSLatitude", "GPSLatitudeRef",
            "GPSLongitude", "GPSLongitudeRef", "GPSAltitude", "GPSAltitudeRef", "GPSStatus", "GPSDateStamp",
            "GPSTimeStamp", "Orientation"]
    import subprocess

    command = ["exiftool", "-j", "-n", *(f"-EXIF:{tag}" for tag in tags), "-File:ImageWidth", "-File:ImageHeight",
               "-PNG:ImageWidth", "-PNG:ImageHeight", "-RIFF:ImageWidth", "-RIFF:ImageHeight", "-EXIF:ImageWidth",
               "-EXIF:ImageHeight", *paths]
    found = json.loads(subprocess.run(command, capture_output=True, text=True, check=False).stdout or "[]")
    answers = {}
    for tags_of in found:
        raw = lambda tag: None if tags_of.get(tag) is None else str(tags_of[tag])
        exif = {ORIGINAL: raw("DateTimeOriginal"), SUBSEC: raw("SubSecTimeOriginal"), OFFSET: raw("OffsetTimeOriginal")}
        gps = {}
        for tag, key in ((LAT, "GPSLatitude"), (LON, "GPSLongitude")):
            if key in tags_of:  # -n gives the degrees, unsigned; the reference says the hemisphere
                gps[tag] = (tags_of[key],)
        for tag, key in ((LAT_REF, "GPSLatitudeRef"), (LON_REF, "GPSLongitudeRef"), (STATUS, "GPSStatus"),
                         (DATE, "GPSDateStamp")):
            if key in tags_of:
                gps[tag] = raw(key)
        if "GPSAltitude" in tags_of:
            gps[ALT] = tags_of["GPSAltitude"]
        if "GPSAltitudeRef" in tags_of:
            gps[ALT_REF] = tags_of["GPSAltitudeRef"]
        hms = re.findall(r"[\d.]+", raw("GPSTimeStamp") or "")
        if len(hms) == 3:
            gps[TIME] = tuple(float(v) for v in hms)
        width, height = tags_of.get("ImageWidth"), tags_of.get("ImageHeight")
        if tags_of.get("Orientation") in (5, 6, 7, 8):
            width, height = height, width
        out = {"width": width, "height": height}
        when, where = taken_at(exif, gps), location(gps)
        if when is not None:
            out["taken_at"], source = when
            if source is not None:
                out["taken_at_offset"] = source
        if where is not None:
            out["location"] = where
        answers[os.path.basename(tags_of["SourceFile"])] = out
    print(json.dumps(answers))


def main():
    if sys.argv[1] == "write":
        write(sys.argv[2])
        return
    if sys.argv[1] == "album":
        album(sys.argv[2])
        return
    if sys.argv[1] == "burst":
        burst(sys.argv[2])
        return
    if sys.argv[1] == "trip":
        trip(sys.argv[2])
        return
    if sys.argv[1] == "exiftool":
        exiftool(sys.argv[2:])
        return
    answers = {}
    for path in sys.argv[2:]:
        try:
            answers[os.path.basename(path)] = read(path)
        except Exception:  # noqa: BLE001 - a file Pillow cannot read has no reference
            pass
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
