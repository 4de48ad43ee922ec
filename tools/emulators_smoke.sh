#!/usr/bin/env bash
# Executable record of how the storage emulators behave (see tools/README.md):
# starts fake-gcs-server and moto_server on free loopback ports, seeds/reads an
# object through each access path the service may use, then stops both.
# Needs .cache/clipfn.env (tools/setup.sh). Takes ~2 s. Exit 0 = all checks ok.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
set -a
# shellcheck source=/dev/null
. "$REPO/.cache/clipfn.env"
set +a
TMP="$(mktemp -d)"; PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
port() { "$CLIPFN_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 100); do curl -s -o /dev/null "$1" && return; sleep 0.1; done; echo "not up: $1" >&2; exit 1; }
check() {  # check NAME EXPECTED-CODE CURL-ARGS...
  local name="$1" want="$2"; shift 2
  local got; got="$(curl -s -o "$TMP/body" -w '%{http_code}' "$@")"
  if [[ "$got" == "$want" ]]; then echo "ok   $name ($got)"; else echo "FAIL $name: $got != $want" >&2; exit 1; fi
}
PHOTOS=("$CLIPFN_PHOTOS_DIR"/wallpapers/*.jpg); PHOTO="${PHOTOS[0]}"

# fake-gcs-server: -data DIR = one folder per bucket, files (nested too) = objects
mkdir -p "$TMP/gcs/photos/sub"; cp "$PHOTO" "$TMP/gcs/photos/sub/a.jpg"
G="$(port)"
"$CLIPFN_FAKE_GCS_BIN" -scheme http -host 127.0.0.1 -port "$G" -backend memory \
  -data "$TMP/gcs" -public-host "127.0.0.1:$G" -log-level warn 2>"$TMP/gcs.log" &
PIDS+=($!); B="http://127.0.0.1:$G"; wait_up "$B/storage/v1/b"
check "gcs json GET (name %2F-escaped)" 200 "$B/storage/v1/b/photos/o/sub%2Fa.jpg?alt=media"
cmp -s "$TMP/body" "$PHOTO" || { echo "FAIL gcs body differs" >&2; exit 1; }
check "gcs /download GET"               200 "$B/download/storage/v1/b/photos/o/sub%2Fa.jpg?alt=media"
check "gcs GET /BUCKET/OBJECT (needs -public-host)" 200 "$B/photos/sub/a.jpg"
check "gcs Range GET"                   206 -H 'Range: bytes=0-9' "$B/storage/v1/b/photos/o/sub%2Fa.jpg?alt=media"
check "gcs XML-path Range GET"          206 -H 'Range: bytes=0-9' "$B/photos/sub/a.jpg"
check "gcs missing object"              404 "$B/storage/v1/b/photos/o/nope.jpg?alt=media"
check "gcs XML-API PUT is rejected"     400 -X PUT --data-binary @"$PHOTO" "$B/photos/put.jpg"
check "gcs upload to missing bucket"    404 -X POST --data-binary @"$PHOTO" "$B/upload/storage/v1/b/nobucket/o?uploadType=media&name=x.jpg"
check "gcs create bucket"               200 -X POST -H 'Content-Type: application/json' -d '{"name":"nobucket"}' "$B/storage/v1/b"
check "gcs JSON media upload"           200 -X POST -H 'Content-Type: image/jpeg' --data-binary @"$PHOTO" "$B/upload/storage/v1/b/photos/o?uploadType=media&name=up%2Fb.jpg"
check "gcs GET uploaded"                200 "$B/storage/v1/b/photos/o/up%2Fb.jpg?alt=media"

# moto_server (S3): buckets via PUT /BUCKET; anonymous GETs of objects are 403,
# any Authorization header (signature is not verified) makes them 200.
M="$(port)"
"$CLIPFN_MOTO_SERVER_BIN" -H 127.0.0.1 -p "$M" >"$TMP/moto.log" 2>&1 &
PIDS+=($!); S="http://127.0.0.1:$M"; wait_up "$S/"
AUTH='Authorization: AWS4-HMAC-SHA256 Credential=test/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0'
check "s3 create bucket"                200 -X PUT "$S/photos"
check "s3 PUT (binary content-type)"    200 -X PUT -H 'Content-Type: application/octet-stream' --data-binary @"$PHOTO" "$S/photos/sub/a.jpg"
check "s3 anonymous GET is denied"      403 "$S/photos/sub/a.jpg"
check "s3 GET with any auth header"     200 -H "$AUTH" "$S/photos/sub/a.jpg"
cmp -s "$TMP/body" "$PHOTO" || { echo "FAIL s3 body differs" >&2; exit 1; }
check "s3 missing key"                  404 -H "$AUTH" "$S/photos/nope.jpg"
check "s3 reset all state"              200 -X POST "$S/moto-api/reset"
echo "emulators: all checks passed"
