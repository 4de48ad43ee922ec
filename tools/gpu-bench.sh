#!/usr/bin/env bash
# The GPU bench: the release server alone (`clipfn serve`, photos from a file:// store; no bench
# binary, no emulator, so that nothing but the binary, its libraries, models and photos need reach
# a GPU machine), one fresh server per row, loaded closed-loop over loopback by tools/gpu_load.py.
# First the rows of issue 57 (a worker per device: does the GPU wait for the CPU?), every one on the
# same server setup: the ViT-B/32-architecture model + the real faces folder (CLIPFN_FACE_MODEL) +
# PP-OCRv4 (CLIPFN_OCR_MODEL), so that only the load differs between them. "The album stream" is ONE
# client in a closed loop, 4 photos a request, {"faces": true, "ocr": true, "embedding": false}, on
# the face + OCR photos (GPU_BENCH_ALBUM_CLIENTS, GPU_BENCH_ALBUM_PER_REQUEST):
#   embed-alone-cuda                /v1/embed alone: 8 clients x 32 wallpapers (GPU_BENCH_PAIR_EMBED_*)
#   embed+album-ocrcpu-cuda         the same /v1/embed load beside the album stream (a second
#                                   gpu_load.py over the same window: its photos/s and p95 in the
#                                   row's "stream"), OCR's towers on the CPU (CLIPFN_OCR_PROVIDER=cpu)
#   album-c1-cuda                   the album stream alone, OCR on the CPU: the album pass
#   ocr-c1-cuda                     the same stream asking OCR alone: the album pass's overlap bound
#   album-c1-cpu                    the album stream with CLIPFN_PROVIDER=cpu: the CPU-only pass
#   embed+album-ocrcuda-cuda        as embed+album-ocrcpu-cuda with OCR on CUDA (CLIPFN_OCR_PROVIDER=auto)
#   album-c1-ocrcuda-cuda           the album stream alone, OCR on CUDA
#   (with GPU_BENCH_PROVIDERS=cpu: embed-alone-cpu, embed+album-ocrcpu-cpu, album-c1-cpu, ocr-c1-cpu)
# Every row (these and the earlier ones) reads /readyz's `workers` at the window's start and end:
# each worker's device, towers, busy_share since start and its busy share of the window (the
# busiest one is the bottleneck). Then the earlier rows:
#   embed-c8-cuda, embed-c32-cuda   /v1/embed, the ViT-B/32-architecture model, 8 and 32 clients,
#                                   requests of 32 wallpapers
#   faces-*, ocr-*, faces+ocr-*     /v1/analyze ("embedding": false) with the real faces folder
#                                   (SCRFD-2.5G + dlib), PP-OCRv4, and both, on the face / OCR
#                                   photos, on CUDA and then with CLIPFN_PROVIDER=cpu on the same host
# Per row: photos/s, p50/p95 request seconds, requests answered/failed, the server's CPU cores busy,
# GPU busy % (nvidia-smi every 0.5 s; n/a without it), cold start to /readyz 200 and /readyz's body;
# the report ends with issue 57's ratios (beside / alone, the album pass / its bound, / CPU-only).
# Writes $OUT/gpu-bench.md (the table), $OUT/gpu-bench.json (every row) and $OUT/gpu-bench/ (each
# row's JSON, /readyz body and server log). The report is rewritten after every row, so a run cut
# short still leaves the rows it finished.
#
#   ORT_GPU_DYLIB=/path/libonnxruntime.so.1.31.1 (onnxruntime-gpu's, its CUDA libraries on
#   LD_LIBRARY_PATH) [ORT_CPU_DYLIB=... (default: the same library, CLIPFN_PROVIDER=cpu)]
#   tools/gpu-bench.sh
#
# Knobs (env): GPU_BENCH_SECONDS (15: measured load per row; a row takes this + warm-up + ~8 s),
# GPU_BENCH_WARMUP (2: seconds of load before the measurement), GPU_BENCH_GRACE (15: seconds the
# requests in flight at the end may take), GPU_BENCH_START_LIMIT (60: seconds to /readyz 200),
# GPU_BENCH_BUDGET_S (unset: no limit; else rows that no longer fit are skipped, and said so),
# GPU_BENCH_PROVIDERS (cuda,cpu; without cuda the embed and issue 57 rows run on the CPU: a local
# check of the script), GPU_BENCH_ROWS (names to run, in this script's order; default all),
# GPU_BENCH_PAIR_EMBED_CLIENTS (8), GPU_BENCH_PAIR_EMBED_PER_REQUEST (32), GPU_BENCH_ALBUM_CLIENTS
# (1), GPU_BENCH_ALBUM_PER_REQUEST (4), GPU_BENCH_EMBED_CLIENTS ("8 32"),
# GPU_BENCH_EMBED_PER_REQUEST (32), GPU_BENCH_ANALYZE_CLIENTS (8), GPU_BENCH_ANALYZE_PER_REQUEST (4),
# GPU_BENCH_VARIANTS (below).
# Models and photos: GPU_BENCH_MODEL (CLIPFN_BENCH_MODEL), GPU_BENCH_ANALYZE_MODEL (CLIPFN_TEST_MODEL:
# the analyze rows still run a CLIP model on every photo, the smallest one), GPU_BENCH_FACE_MODEL
# (CLIPFN_TEST_FACES_REAL), GPU_BENCH_OCR_MODEL (CLIPFN_TEST_OCR), GPU_BENCH_PHOTOS
# ($CLIPFN_PHOTOS_DIR/wallpapers), GPU_BENCH_FACE_PHOTOS, GPU_BENCH_OCR_PHOTOS; the CLIPFN_* defaults
# come from .cache/clipfn.env where there is one (tools/setup.sh; tools/gpu-device.sh sets them on
# the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091 # linted on its own
source tools/setup-env.sh
started=$(date +%s)
bin=${CLIPFN_BIN:-target/release/clipfn}
out=${OUT:-target/gpu-out}
dir=$out/gpu-bench
mkdir -p "$dir"
rm -f "$dir"/*.row.json
py=${PYTHON:-python3}
seconds=${GPU_BENCH_SECONDS:-15}
warmup=${GPU_BENCH_WARMUP:-2}
grace=${GPU_BENCH_GRACE:-15}
start_limit=${GPU_BENCH_START_LIMIT:-60}
budget=${GPU_BENCH_BUDGET_S:-}
providers=${GPU_BENCH_PROVIDERS:-cuda,cpu}
only=${GPU_BENCH_ROWS:-}
[[ -x $bin ]] || { echo "gpu-bench: no $bin (build it: cargo build --release)" >&2; exit 1; }
embed_model=${GPU_BENCH_MODEL:-${CLIPFN_BENCH_MODEL:-}}
analyze_model=${GPU_BENCH_ANALYZE_MODEL:-${CLIPFN_TEST_MODEL:?set CLIPFN_TEST_MODEL or GPU_BENCH_ANALYZE_MODEL}}
face_model=${GPU_BENCH_FACE_MODEL:-${CLIPFN_TEST_FACES_REAL:-}}
ocr_model=${GPU_BENCH_OCR_MODEL:-${CLIPFN_TEST_OCR:-}}
wallpapers=${GPU_BENCH_PHOTOS:-${CLIPFN_PHOTOS_DIR:-}/wallpapers}
face_photos=${GPU_BENCH_FACE_PHOTOS:-${CLIPFN_TEST_FACE_PHOTOS:-}}
ocr_photos=${GPU_BENCH_OCR_PHOTOS:-${CLIPFN_TEST_OCR_PHOTOS:-}}
for folder in "$wallpapers" "$face_photos" "$ocr_photos"; do
  [[ -d $folder ]] || { echo "gpu-bench: no photo folder '$folder' (GPU_BENCH_*PHOTOS, .cache/clipfn.env)" >&2; exit 1; }
done
embed_note=""
if [[ -z $embed_model || ! -f $embed_model ]]; then
  embed_note="ViT-B/32 model missing ('${embed_model}'): the test model instead"
  embed_model=$analyze_model
fi

# One store root for every row: the folders' common parent; requests name photos relative to it.
root=$("$py" -c 'import os, sys; print(os.path.commonpath([os.path.realpath(p) for p in sys.argv[1:]]))' \
  "$wallpapers" "$face_photos" "$ocr_photos")
rel() { "$py" -c 'import os, sys; print(os.path.relpath(os.path.realpath(sys.argv[1]), sys.argv[2]))' "$1" "$root"; }
wallpapers_key=$(rel "$wallpapers")
faces_key=$(rel "$face_photos")
ocr_key=$(rel "$ocr_photos")

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$dir/gpu.txt" 2>&1 || true
else
  echo "no nvidia-smi: GPU busy is n/a" >"$dir/gpu.txt"
fi
echo "gpu-bench: $(cat "$dir/gpu.txt"); $seconds s measured per row; store $root"

server=""
stream=""  # the album stream's load, while a "beside" row runs
running() {  # running PID: alive and not a zombie waiting to be reaped
  local stat
  stat=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ ${stat%% *} != Z ]]
}
stop_server() {  # SIGTERM (CLIPFN_SHUTDOWN_GRACE_S=2 below), SIGKILL after 5 s
  if [[ -n $stream ]]; then
    kill -TERM "$stream" 2>/dev/null || true
    wait "$stream" 2>/dev/null || true
    stream=""
  fi
  [[ -n $server ]] || return 0
  kill -TERM "$server" 2>/dev/null || true
  for _ in $(seq 50); do running "$server" || break; sleep 0.1; done
  kill -KILL "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
}
trap stop_server EXIT

report() {  # the table and the raw JSON from the rows written so far
  local rows=("$dir"/*.row.json)
  [[ -e ${rows[0]} ]] || return 0
  "$py" tools/gpu_load.py report --title "GPU bench ($(date -u +%FT%TZ), $(cat "$dir/gpu.txt"))" --intro "$intro" \
    "${rows[@]}" >"$out/gpu-bench.md"
  "$py" -c 'import json, sys; print(json.dumps([json.load(open(f)) for f in sys.argv[1:]], indent=1))' \
    "${rows[@]}" >"$out/gpu-bench.json"
}

album_clients=${GPU_BENCH_ALBUM_CLIENTS:-1}
album_per_request=${GPU_BENCH_ALBUM_PER_REQUEST:-4}
intro="One fresh \`clipfn serve\` per row, photos from a file:// store on local disk, loaded over loopback by \
tools/gpu_load.py: ${warmup} s of warm-up, then ${seconds} s measured (photos/s: photos answered without error in \
those seconds; p50/p95 of the requests answered in them; server CPU: its utime + stime over them; GPU busy: \
nvidia-smi's utilization.gpu every 0.5 s, mean). Servers at their defaults but CLIPFN_MAX_QUEUED_IMAGES=1024 \
(32 clients x 32 photos in flight). The analyze rows ask \"embedding\": false, yet run the test CLIP model on \
every photo ($(basename "$analyze_model")); embed rows: $(basename "$embed_model"). The rows of issue 57 \
(embed-alone, embed+album-*, album-c1-*, ocr-c1-*) all run one server setup, $(basename "$embed_model") + faces \
($(basename "$face_model")) + OCR ($(basename "$ocr_model")), so their analyze requests run $(basename "$embed_model") \
on every photo; the album stream is ${album_clients} client(s) x ${album_per_request} photos, \
{\"faces\": true, \"ocr\": true, \"embedding\": false}, on the face + OCR photos; a \"beside\" row runs it as a \
second load over the same window as its /v1/embed load (its own photos/s and p95 in the stream column)."
n=0
port=$((18200 + RANDOM % 500))
# row NAME PROVIDER ENDPOINT CLIENTS PER_REQUEST BODY FOLDERS MODEL NOTE [VAR=VALUE...]: one fresh
# server, its cold start, GPU_BENCH_WARMUP + GPU_BENCH_SECONDS of closed-loop load, then stopped.
# With beside=1, the album stream runs as a second load over the same window; row_extra: seconds
# the row's start may take beyond the usual (a server that warms OCR's shapes on CUDA).
beside=0
row_extra=0
album_body='{"faces": true, "ocr": true, "embedding": false}'
row() {
  local name=$1 provider=$2 endpoint=$3 clients=$4 per_request=$5 body=$6 folders=$7 model=$8 note=$9
  shift 9
  if [[ -n $only && " $only " != *" $name "* ]]; then return 0; fi
  n=$((n + 1))
  local file
  file=$dir/$(printf %02d "$n")-$name
  local need=$((warmup + seconds + 8 + row_extra)) dylib=${ORT_GPU_DYLIB:-}
  [[ $provider == cpu ]] && dylib=${ORT_CPU_DYLIB:-${ORT_GPU_DYLIB:-${ORT_DYLIB_PATH:-}}}
  local meta=(--name "$name" --provider "$provider" --model "$model" --note "$note")
  ((beside)) && meta+=(--stream "$file.stream.json")
  if [[ -n $budget ]] && (($(date +%s) + need > started + budget)); then
    echo "gpu-bench: $name skipped: $need s needed, $((started + budget - $(date +%s))) s left"
    "$py" tools/gpu_load.py row "${meta[@]}" --error "skipped: no time left in GPU_BENCH_BUDGET_S" >"$file.row.json"
    report
    return 0
  fi
  port=$((port + 1))
  local t0
  t0=$(date +%s.%N)  # not EPOCHREALTIME: bash 5 only, and its decimal point follows the locale
  env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" ORT_DYLIB_PATH="$dylib" CLIPFN_MODEL="$model" \
    CLIPFN_PROVIDER="$provider" CLIPFN_STORE="file://$root" PORT="$port" CLIPFN_MAX_QUEUED_IMAGES=1024 \
    CLIPFN_SHUTDOWN_GRACE_S=2 CLIPFN_LOG_FORMAT=text RUST_LOG=warn "$@" "$bin" serve >"$file.server.log" 2>&1 &
  server=$!
  local error=""
  if "$py" tools/gpu_load.py ready --url "http://127.0.0.1:$port/readyz" --since "$t0" --pid "$server" \
    --timeout "$start_limit" --out "$file.readyz.json" >"$file.ready.json"; then
    # The load clients bound themselves (warm-up + window + grace); timeout is the backstop. Both
    # loads of a "beside" row start at the same second, so their windows are the same.
    local start_at limit=$((warmup + seconds + grace + 15)) rc=0
    start_at=$(awk -v t="$(date +%s.%N)" 'BEGIN { printf "%.3f", t + 1 }')
    if ((beside)); then
      timeout --foreground -k 2 "$limit" "$py" tools/gpu_load.py load --url "http://127.0.0.1:$port/v1/analyze" \
        --root "$root" --folders "$faces_key,$ocr_key" --per-request "$album_per_request" --clients "$album_clients" \
        --seconds "$seconds" --warmup "$warmup" --grace "$grace" --body "$album_body" --pid "$server" \
        --start-at "$start_at" --no-gpu >"$file.stream.json" &
      stream=$!
    fi
    timeout --foreground -k 2 "$limit" "$py" tools/gpu_load.py load \
      --url "http://127.0.0.1:$port$endpoint" --root "$root" --folders "$folders" --per-request "$per_request" \
      --clients "$clients" --seconds "$seconds" --warmup "$warmup" --grace "$grace" --body "$body" \
      --pid "$server" --start-at "$start_at" --readyz "http://127.0.0.1:$port/readyz" \
      >"$file.load.json" || error="load: exit $? (see the row's failures)"
    if [[ -n $stream ]]; then
      wait "$stream" || rc=$?
      stream=""
      ((rc == 0)) || error="${error:+$error; }stream: exit $rc (see its failures in $(basename "$file").stream.json)"
    fi
  else
    error="no /readyz 200: $(tail -n 3 "$file.server.log" | tr '\n' ' ' | cut -c1-300)"
  fi
  stop_server
  "$py" tools/gpu_load.py row "${meta[@]}" --ready "$file.ready.json" --readyz "$file.readyz.json" \
    --load "$file.load.json" --error "$error" >"$file.row.json"
  "$py" tools/gpu_load.py report "$file.row.json" | grep -F "| $name |" || true
  report
}

gpu_first=cuda
[[ ,$providers, == *,cuda,* ]] || gpu_first=cpu
# Issue 57's rows: one server setup (embed model + faces + OCR), the loads differ.
pair_clients=${GPU_BENCH_PAIR_EMBED_CLIENTS:-8}
pair_per_request=${GPU_BENCH_PAIR_EMBED_PER_REQUEST:-32}
towers=(CLIPFN_FACE_MODEL="$face_model" CLIPFN_OCR_MODEL="$ocr_model")
ocr_cpu="OCR on the CPU (CLIPFN_OCR_PROVIDER=cpu)"
ocr_cuda="OCR on CUDA (CLIPFN_OCR_PROVIDER=auto)"
[[ $gpu_first == cuda ]] || ocr_cpu="every tower on the CPU"
stream_note="beside: the album stream, $album_clients x $album_per_request faces + OCR"
notes() {  # the non-empty arguments, joined by "; "
  local out="" x
  for x in "$@"; do [[ -z $x ]] || out+=${out:+; }$x; done
  printf %s "$out"
}
p=$gpu_first
row "embed-alone-$p" "$p" /v1/embed "$pair_clients" "$pair_per_request" '{}' "$wallpapers_key" "$embed_model" \
  "$(notes "$ocr_cpu" "$embed_note")" "${towers[@]}" CLIPFN_OCR_PROVIDER=cpu
beside=1
row "embed+album-ocrcpu-$p" "$p" /v1/embed "$pair_clients" "$pair_per_request" '{}' "$wallpapers_key" "$embed_model" \
  "$(notes "$ocr_cpu" "$stream_note" "$embed_note")" "${towers[@]}" CLIPFN_OCR_PROVIDER=cpu
beside=0
row "album-c1-$p" "$p" /v1/analyze "$album_clients" "$album_per_request" "$album_body" "$faces_key,$ocr_key" \
  "$embed_model" "$ocr_cpu; the album pass" "${towers[@]}" CLIPFN_OCR_PROVIDER=cpu
row "ocr-c1-$p" "$p" /v1/analyze "$album_clients" "$album_per_request" '{"ocr": true, "embedding": false}' \
  "$faces_key,$ocr_key" "$embed_model" "$ocr_cpu; OCR alone: the album pass's overlap bound" "${towers[@]}" \
  CLIPFN_OCR_PROVIDER=cpu
if [[ $gpu_first == cuda ]]; then
  if [[ ,$providers, == *,cpu,* ]]; then
    row album-c1-cpu cpu /v1/analyze "$album_clients" "$album_per_request" "$album_body" "$faces_key,$ocr_key" \
      "$embed_model" "every tower on the CPU: the CPU-only album pass" "${towers[@]}"
  fi
  row_extra=20  # OCR's shapes warmed on CUDA at start-up (run 3: 8.8 s with the search off)
  beside=1
  row embed+album-ocrcuda-cuda cuda /v1/embed "$pair_clients" "$pair_per_request" '{}' "$wallpapers_key" \
    "$embed_model" "$(notes "$ocr_cuda" "$stream_note" "$embed_note")" "${towers[@]}" CLIPFN_OCR_PROVIDER=auto
  beside=0
  row album-c1-ocrcuda-cuda cuda /v1/analyze "$album_clients" "$album_per_request" "$album_body" \
    "$faces_key,$ocr_key" "$embed_model" "$ocr_cuda; the album pass" "${towers[@]}" CLIPFN_OCR_PROVIDER=auto
  row_extra=0
fi
for clients in ${GPU_BENCH_EMBED_CLIENTS:-8 32}; do
  row "embed-c$clients-$gpu_first" "$gpu_first" /v1/embed "$clients" "${GPU_BENCH_EMBED_PER_REQUEST:-32}" '{}' \
    "$wallpapers_key" "$embed_model" "$embed_note"
done
ac=${GPU_BENCH_ANALYZE_CLIENTS:-8}
ap=${GPU_BENCH_ANALYZE_PER_REQUEST:-4}
for provider in ${providers//,/ }; do  # every CUDA row first: a budget that runs out cuts CPU rows
  row "faces-$provider" "$provider" /v1/analyze "$ac" "$ap" '{"faces": true, "embedding": false}' "$faces_key" \
    "$analyze_model" "" CLIPFN_FACE_MODEL="$face_model"
  row "ocr-$provider" "$provider" /v1/analyze "$ac" "$ap" '{"ocr": true, "embedding": false}' "$ocr_key" \
    "$analyze_model" "" CLIPFN_OCR_MODEL="$ocr_model"
  row "faces+ocr-$provider" "$provider" /v1/analyze "$ac" "$ap" '{"faces": true, "ocr": true, "embedding": false}' \
    "$faces_key,$ocr_key" "$analyze_model" "" CLIPFN_FACE_MODEL="$face_model" CLIPFN_OCR_MODEL="$ocr_model"
done
# GPU_BENCH_VARIANTS="NAME:KIND:VAR=VALUE[,VAR=VALUE] ...": a CUDA row of KIND (faces, ocr or faces+ocr)
# again under other settings, named KIND-cuda-NAME (docs/bench/gpu.md compares them).
for variant in ${GPU_BENCH_VARIANTS:-}; do
  IFS=: read -r name kind vars <<<"$variant"
  IFS=, read -r -a settings <<<"$vars"
  case $kind in
    faces) body='{"faces": true, "embedding": false}' folders=$faces_key ;;
    ocr) body='{"ocr": true, "embedding": false}' folders=$ocr_key ;;
    *) body='{"faces": true, "ocr": true, "embedding": false}' folders="$faces_key,$ocr_key" ;;
  esac
  row "$kind-cuda-$name" cuda /v1/analyze "$ac" "$ap" "$body" "$folders" "$analyze_model" "$vars" \
    CLIPFN_FACE_MODEL="$face_model" CLIPFN_OCR_MODEL="$ocr_model" "${settings[@]}"
done
report
echo "gpu-bench: $n rows in $(($(date +%s) - started)) s -> $out/gpu-bench.md"
