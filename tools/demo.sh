#!/usr/bin/env bash
# One command from a fresh checkout to an album: sets up, builds, serves the sample photos (the
# wallpapers, 11 of them with a smaller copy, plus a trip written with EXIF times and places: two
# days in two cities and a burst) from a local folder with the generated test model, sends one
# /v1/analyze request and prints what a person wants to see: the duplicates and which copy to keep,
# the blurry photos, the bursts, the events, the cover, and the photo that could not be read.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
# shellcheck disable=SC1091
source .cache/clipfn.env
cargo build --locked --features heif,avif

port=${PORT:-8080}
log=$(mktemp)
photos=${CLIPFN_DEMO_PHOTOS:-}
if [[ -z $photos ]]; then
  photos=$(mktemp -d)
  cp "$CLIPFN_PHOTOS_DIR"/wallpapers/*.jpg "$photos/"
  "$CLIPFN_PYTHON" tools/exif_reference.py album "$photos/trip"
  "$CLIPFN_PYTHON" tools/exif_reference.py burst "$photos/trip" >/dev/null
  made=$photos
fi
# The test model's random weights are not CLIP's: one scene's frames agree at a cosine of about
# 0.6 to 0.8 there, so bursts take 0.5 (the default, 0.9, is for real CLIP: docs/design.md).
env ORT_DYLIB_PATH="$ORT_DYLIB_PATH" PORT="$port" CLIPFN_BURST_SIMILARITY="${CLIPFN_BURST_SIMILARITY:-0.5}" \
  CLIPFN_MODEL="${CLIPFN_DEMO_MODEL:-$CLIPFN_TEST_MODEL}" CLIPFN_STORE="file://$photos" \
  target/debug/clipfn serve 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$log" ${made:+"$made"}' EXIT

"$CLIPFN_PYTHON" - "$port" "$photos" <<'PY'
import json, sys, time, urllib.request, urllib.error
from pathlib import Path

port, photos = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
for _ in range(600):
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=2) as r:
            ready = json.load(r)
            break
    except (urllib.error.URLError, ConnectionError):
        time.sleep(0.1)
else:
    sys.exit("clipfn did not become ready")
print(f"ready: {json.dumps(ready['model'])}")

keys = sorted(str(p.relative_to(photos)) for p in Path(photos).rglob("*")
              if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".webp"))[:99]
keys.append("no/such/photo.jpg")  # one bad reference, to show a per-photo error
request = urllib.request.Request(f"{base}/v1/analyze", json.dumps({"images": keys}).encode(),
                                 {"content-type": "application/json"})
started = time.monotonic()
with urllib.request.urlopen(request, timeout=600) as r:
    body = json.load(r)
seconds = time.monotonic() - started
data, album = body["data"], body["album"]
name = lambda i: keys[i]
answered = [item for item in data if "error" not in item]
print(f"{len(answered)} of {len(keys)} photos analyzed in {seconds:.1f} s: model {body['model']}, dim {body['dim']}, "
      f"e.g. {name(0)} -> [{', '.join(f'{v:+.3f}' for v in answered[0]['embedding'][:4])}, ...]")

def groups(title, found):
    print(f"\n{title}: {len(found)}")
    for group in found:
        others = ", ".join(name(i) for i in group["photos"] if i != group["best"])
        print(f"  keep {name(group['best'])} ({group['why'].replace('_', ' ')}) over {others}")

groups("duplicate groups", album["duplicates"])
groups("bursts", album["bursts"])
blurry = [f"{name(item['index'])} ({item['quality']['sharpness']:.0f})" for item in answered if item["quality"]["blurry"]]
print(f"\nblurry photos: {len(blurry)}" + "".join(f"\n  {b}" for b in blurry))
print(f"\nevents: {len(album['events'])}")
for event in album["events"]:
    where = event.get("centre")
    place = f" around {where['lat']:.3f}, {where['lon']:.3f}" if where else ""
    count = len(event["photos"])
    print(f"  {event['start']} to {event['end']}: {count} photo{'s' if count > 1 else ''}{place}")
print(f"\ncover: {name(album['cover'])}" if "cover" in album else "\ncover: none")
for item in data:
    if "error" in item:
        print(f"\nerror for {name(item['index'])}: {item['error']['code']}: {item['error']['message']}")
print(f"\ntimings_ms {json.dumps(body['timings_ms'])}")
PY
