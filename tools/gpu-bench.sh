#!/usr/bin/env bash
# Every GPU figure in one run, for a machine with an NVIDIA GPU (docs/bench/gpu.md holds the last one):
#   1. tools/gpu-check.sh on the test model and on the ViT-B/32-architecture model: CUDA used,
#      CUDA embeddings equal CPU's in both normalisation modes; then faces (generated SCRFD +
#      ArcFace format, real SCRFD-2.5G + dlib) and OCR (PP-OCRv4's real weights) on CUDA against CPU;
#   2. the throughput bench with CLIPFN_BENCH_PROVIDER=cuda: raw inference by batch size, the
#      release server end to end (photos from fake-gcs-server, concurrency 2 as deployed), fp16
#      against fp32, and the text tower when its model is there.
#
#   ORT_GPU_DYLIB=/path/to/libonnxruntime.so.1.31.1   (onnxruntime-gpu's, its CUDA libraries on
#                                                      LD_LIBRARY_PATH)
#   CLIPFN_BENCH_BIN=target/release/deps/throughput-HASH   (cargo bench --bench throughput --no-run)
#   OUT_DIR=target/gpu-bench tools/gpu-bench.sh
#
# Paths to photos, models, fake-gcs-server and Python come from .cache/clipfn.env
# (tools/setup.sh --bench writes it).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${ORT_GPU_DYLIB:?set ORT_GPU_DYLIB to the libonnxruntime.so of onnxruntime-gpu}"
: "${CLIPFN_BENCH_BIN:?set CLIPFN_BENCH_BIN to the throughput bench executable}"
out=${OUT_DIR:-target/gpu-bench}
mkdir -p "$out"
set -a; . .cache/clipfn.env; set +a
export ORT_GPU_DYLIB

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
for model in "$CLIPFN_TEST_MODEL" "$CLIPFN_BENCH_MODEL"; do
  CLIPFN_MODEL=$model PHOTOS="$CLIPFN_PHOTOS_DIR/wallpapers" tools/gpu-check.sh 2>&1 \
    | tee "$out/gpu-check-$(basename "$model" .onnx).log"
done
# Faces on CUDA against CPU: the generated SCRFD with ArcFace's format, and the real SCRFD-2.5G
# with dlib's recognizer (tools/setup-real-faces.sh), on the real face photos.
CLIPFN_MODEL=$CLIPFN_TEST_MODEL PHOTOS="$CLIPFN_PHOTOS_DIR/wallpapers" FACE_PHOTOS="$CLIPFN_TEST_FACE_PHOTOS" \
  FACE_MODELS="$CLIPFN_TEST_FACES_SCRFD $CLIPFN_TEST_FACES_REAL" tools/gpu-check.sh 2>&1 | tee "$out/gpu-check-faces.log"
# OCR on CUDA against CPU: PP-OCRv4 (tools/setup-ocr.sh) on the photos with text.
CLIPFN_MODEL=$CLIPFN_TEST_MODEL PHOTOS="$CLIPFN_PHOTOS_DIR/wallpapers" OCR_PHOTOS="$CLIPFN_TEST_OCR_PHOTOS" \
  OCR_MODEL="$CLIPFN_TEST_OCR" tools/gpu-check.sh 2>&1 | tee "$out/gpu-check-ocr.log"
ORT_DYLIB_PATH=$ORT_GPU_DYLIB CLIPFN_BENCH_PROVIDER=cuda CLIPFN_BENCH_OUT="$out" \
  CLIPFN_BENCH_PRECISIONS="${CLIPFN_BENCH_PRECISIONS:-fp32,fp16}" \
  CLIPFN_BENCH_RUNS="${CLIPFN_BENCH_RUNS:-10}" CLIPFN_BENCH_SECONDS="${CLIPFN_BENCH_SECONDS:-30}" \
  "$CLIPFN_BENCH_BIN" 2>&1 | tee "$out/bench.log"
