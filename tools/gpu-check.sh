#!/usr/bin/env bash
# The checks that need a GPU, as one short script for a machine with an NVIDIA GPU and a CUDA
# build of ONNX Runtime (the Dockerfile.cuda image has both; CI and the dev machines have neither).
#
#   ORT_GPU_DYLIB=/opt/onnxruntime/lib/libonnxruntime.so.1.26.0 \
#   ORT_CPU_DYLIB=.venv/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1 \
#   CLIPFN_MODEL=.cache/models/clip-test.onnx PHOTOS=.cache/photos/wallpapers tools/gpu-check.sh
#
# With FACE_MODELS (face model folders, space-separated, e.g. .cache/models/faces-scrfd-test
# .cache/models/faces-real: SCRFD with ArcFace's format, and the real SCRFD-2.5G with dlib's
# recognizer) it also replays the JPEGs of FACE_PHOTOS (default PHOTOS) through /v1/analyze with
# each folder's faces on CPU and on CUDA, and fails unless every photo has the same number of
# faces both ways, their boxes within 2 px or 2% of their size, and their embeddings at cosine
# >= 0.99. FACE_MODEL (one folder) is read as FACE_MODELS.
#
# With OCR_MODEL (an OCR model folder, e.g. .cache/models/ocr-ppocrv4) it replays the photos of
# OCR_PHOTOS (default PHOTOS; e.g. .cache/photos/ocr) through /v1/analyze with OCR on CPU and on
# CUDA, and fails unless every photo reads the same lines both ways (the same text, box corners
# within 2 px, scores within 0.02): the CUDA side with CLIPFN_OCR_PROVIDER=auto, since OCR runs on
# the CPU by default (docs/bench/gpu.md), as Immich ML keeps its OCR on the CPU under CUDA (immich#23951);
# both sides with CLIPFN_OCR_SIZES=declared, the sizes CUDA runs (the CPU's default is exact).
#
# With OBJECT_MODEL (an object model folder, e.g. .cache/models/objects-centernet) it replays the
# photos of OBJECT_PHOTOS (default PHOTOS) through /v1/analyze with objects on CPU and on CUDA, and
# fails unless every photo has the same objects both ways (labels in order, boxes within 2 px or 2%
# of their size, scores within 0.02).
#
# It replays one request of up to 64 photos through `clipfn replay` four ways (CPU, CUDA with host
# normalisation, CUDA with in-model normalisation, and CUDA at batch 64 twice for timing) and
# fails unless CUDA was used, every photo embedded, and CUDA's embeddings match CPU's (cosine
# >= 0.999 per photo). Prints the per-stage timings of each run. CHECK_EMBEDDINGS=0 leaves that part
# out (faces and OCR only).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CLIPFN_BIN:-target/release/clipfn}
photos=${PHOTOS:?set PHOTOS to a folder of JPEGs}
: "${ORT_GPU_DYLIB:?set ORT_GPU_DYLIB to a CUDA build of libonnxruntime.so}"
: "${ORT_CPU_DYLIB:=$ORT_GPU_DYLIB}"
: "${CLIPFN_MODEL:?set CLIPFN_MODEL}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
request() {  # request FOLDER: up to 64 of its JPEGs as a request body
  python3 - "$1" <<'PY'
import json, os, sys
names = sorted(f for f in os.listdir(sys.argv[1]) if f.lower().endswith((".jpg", ".jpeg", ".png")))[:64]
print(json.dumps({"images": names}))
PY
}
request "$photos" >"$work/request.json"

run() {  # run NAME PROVIDER NORMALIZE DYLIB
  env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" ORT_DYLIB_PATH="$4" CLIPFN_MODEL="$CLIPFN_MODEL" CLIPFN_STORE="file://$(realpath "$photos")" \
    CLIPFN_PROVIDER="$2" CLIPFN_NORMALIZE="$3" CLIPFN_BATCH_SIZE=64 CLIPFN_LOG_FORMAT=text RUST_LOG=warn \
    "$bin" replay "$work/request.json" "$work/request.json" >"$work/$1.jsonl"
}
if [[ ${CHECK_EMBEDDINGS:-1} == 1 ]]; then  # 0: faces and OCR only (tools/gpu-device.sh checks embeddings once per model)
  # /readyz on CUDA names the device and its memory in use (NVML). Polled by tools/gpu_load.py: the
  # GPU machine may have no curl.
  since=$(date +%s.%N)
  env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" ORT_DYLIB_PATH="$ORT_GPU_DYLIB" CLIPFN_MODEL="$CLIPFN_MODEL" CLIPFN_PROVIDER=cuda PORT=18080 \
    CLIPFN_LOG_FORMAT=text RUST_LOG=warn "$bin" serve &
  server=$!
  python3 tools/gpu_load.py ready --url http://127.0.0.1:18080/readyz --since "$since" --pid "$server" --timeout 60 \
    --out "$work/readyz.json" || true
  kill "$server" 2>/dev/null || true
  wait "$server" || true
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("readyz gpu:", r["gpu"]); assert "name" in r["gpu"], r' "$work/readyz.json"

  run cpu cpu cpu "$ORT_CPU_DYLIB"
  run cuda-host cuda cpu "$ORT_GPU_DYLIB"
  run cuda-model cuda model "$ORT_GPU_DYLIB"

  python3 tools/gpu_compare.py embeddings "$work"
  echo "gpu-check: CUDA embeddings match CPU in both normalisation modes"
fi

analyze_event() {  # analyze_event FOLDER NAME FIELD: FOLDER's photos as an HTTP API event for
  # /v1/analyze with FIELD true (events/ has its shape), written to $work/NAME.json
  request "$1" >"$work/$2-request.json"
  python3 - "$work" "$2" "$3" <<'PY'
import json, sys
work, name, field = sys.argv[1:]
event = json.load(open("events/apigw-v2-analyze-one-bad.json"))
event["body"] = json.dumps({**json.load(open(f"{work}/{name}-request.json")), field: True, "embedding": False})
json.dump(event, open(f"{work}/{name}.json", "w"))
PY
}

face_models=${FACE_MODELS:-${FACE_MODEL:-}}
face_photos=${FACE_PHOTOS:-$photos}
[[ -z "$face_models" ]] || analyze_event "$face_photos" analyze faces
faces() {  # faces NAME PROVIDER DYLIB FOLDER
  env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" ORT_DYLIB_PATH="$3" CLIPFN_MODEL="$CLIPFN_MODEL" CLIPFN_STORE="file://$(realpath "$face_photos")" \
    CLIPFN_FACE_MODEL="$(realpath "$4")" CLIPFN_PROVIDER="$2" CLIPFN_BATCH_SIZE=64 CLIPFN_LOG_FORMAT=text RUST_LOG=warn \
    "$bin" replay "$work/analyze.json" >"$work/$1.jsonl"
}
for folder in $face_models; do  # none: no faces to check
  echo "gpu-check: faces of $folder"
  faces faces-cpu cpu "$ORT_CPU_DYLIB" "$folder"
  faces faces-cuda cuda "$ORT_GPU_DYLIB" "$folder"
  python3 tools/gpu_compare.py faces "$work"
done
[[ -z "$face_models" ]] || echo "gpu-check: CUDA faces match CPU"

if [[ -n "${OBJECT_MODEL:-}" ]]; then
  object_photos=${OBJECT_PHOTOS:-$photos}
  analyze_event "$object_photos" objects objects
  objects() {  # objects NAME PROVIDER DYLIB
    env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" ORT_DYLIB_PATH="$3" CLIPFN_MODEL="$CLIPFN_MODEL" CLIPFN_STORE="file://$(realpath "$object_photos")" \
      CLIPFN_OBJECT_MODEL="$(realpath "$OBJECT_MODEL")" CLIPFN_PROVIDER="$2" CLIPFN_BATCH_SIZE=64 CLIPFN_LOG_FORMAT=text RUST_LOG=warn \
      "$bin" replay "$work/objects.json" >"$work/$1.jsonl"
  }
  echo "gpu-check: objects of $OBJECT_MODEL"
  objects objects-cpu cpu "$ORT_CPU_DYLIB"
  objects objects-cuda cuda "$ORT_GPU_DYLIB"
  python3 tools/gpu_compare.py objects "$work"
  echo "gpu-check: CUDA objects match CPU"
fi

[[ -n "${OCR_MODEL:-}" ]] || exit 0
ocr_photos=${OCR_PHOTOS:-$photos}
analyze_event "$ocr_photos" ocr ocr
ocr() {  # ocr NAME PROVIDER DYLIB
  env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" ORT_DYLIB_PATH="$3" CLIPFN_MODEL="$CLIPFN_MODEL" CLIPFN_STORE="file://$(realpath "$ocr_photos")" \
    CLIPFN_OCR_MODEL="$(realpath "$OCR_MODEL")" CLIPFN_PROVIDER="$2" CLIPFN_OCR_PROVIDER=auto CLIPFN_OCR_SIZES=declared CLIPFN_BATCH_SIZE=64 CLIPFN_LOG_FORMAT=text RUST_LOG=warn \
    "$bin" replay "$work/ocr.json" >"$work/$1.jsonl"
}
echo "gpu-check: OCR of $OCR_MODEL"
ocr ocr-cpu cpu "$ORT_CPU_DYLIB"
ocr ocr-cuda cuda "$ORT_GPU_DYLIB"
python3 tools/gpu_compare.py ocr "$work"
echo "gpu-check: CUDA OCR matches CPU"
