#!/usr/bin/env bash
# One command from a fresh checkout to embeddings: sets up, builds, serves the sample photos from
# a local folder with the generated test model, sends one request and prints what came back.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
# shellcheck disable=SC1091
source .cache/clipfn.env
cargo build --locked --features heif,avif

port=${PORT:-8080}
photos=${CLIPFN_DEMO_PHOTOS:-$CLIPFN_PHOTOS_DIR/wallpapers}
log=$(mktemp)
env ORT_DYLIB_PATH="$ORT_DYLIB_PATH" PORT="$port" \
  CLIPFN_MODEL="${CLIPFN_DEMO_MODEL:-$CLIPFN_TEST_MODEL}" CLIPFN_STORE="file://$photos" \
  target/debug/clipfn serve 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT

"$CLIPFN_PYTHON" - "$port" "$photos" <<'PY'
import json, os, sys, time, urllib.request, urllib.error

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

keys = sorted(f for f in os.listdir(photos) if f.lower().endswith((".jpg", ".jpeg", ".png", ".webp")))[:50]
keys.append("no/such/photo.jpg")  # one bad reference, to show a per-photo error
request = urllib.request.Request(f"{base}/v1/embed", json.dumps({"images": keys}).encode(),
                                 {"content-type": "application/json"})
with urllib.request.urlopen(request, timeout=600) as r:
    body = json.load(r)
for item in body["data"]:
    if "embedding" in item:
        head = ", ".join(f"{v:+.3f}" for v in item["embedding"][:4])
        print(f"{item['index']:3d} {item['image'][:48]:48s} [{head}, ...]")
    else:
        print(f"{item['index']:3d} {item['image'][:48]:48s} error {item['error']['code']}: {item['error']['message']}")
print(f"model {body['model']}, dim {body['dim']}, {len(keys)} photos, timings_ms {json.dumps(body['timings_ms'])}")
PY
