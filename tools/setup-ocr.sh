#!/usr/bin/env bash
# Real OCR weights from PyPI (issue 36); safe to re-run (each step is skipped when its stamp says
# it is current), works from any directory. Needs python3 (venv + pip) and the project's Python
# ($CLIPFN_PYTHON, default .venv/bin/python: Pillow + scikit-image, for the photos).
#
#   1. the rapidocr-onnxruntime 1.4.4 wheel (Apache-2.0), by pinned version and sha256, with
#      `pip download --no-deps`; its three PP-OCR models are checked against the pins below and
#      laid out as an OCR model folder, .cache/models/ocr-ppocrv4/{detection,recognition,
#      classification}/model.onnx (Immich's layout; the recognizer carries its characters in its
#      `character` metadata);
#      1b. .cache/models/ocr-ppocrv4-charfile: the recognizer without that metadata, its characters
#      in recognition/characters.txt;
#   2. .cache/venv-rapidocr: the same wheel installed in a venv of its own, the reference
#      (tools/ocr_reference.py): it needs opencv-python, which clashes with the test venv's
#      headless OpenCV;
#   3. .cache/photos/ocr: tools/ocr_photos.py's photos with text and their truth.
#
# Weights never enter the repository or an image.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$REPO/.cache"
PY="${CLIPFN_PYTHON:-$REPO/.venv/bin/python}"
WHEEL=rapidocr_onnxruntime-1.4.4-py3-none-any.whl
WHEEL_SHA256=971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf
MODELS=(ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx)
MODELS_SHA256=(d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9
               48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b
               e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c)
ROLES=(detection recognition classification)
OUT="$CACHE/models/ocr-ppocrv4"
REF_VENV="$CACHE/venv-rapidocr"
PHOTOS="$CACHE/photos/ocr"
fail() { echo "setup-ocr: $*" >&2; exit 1; }
sha() { sha256sum "$@" | cut -d' ' -f1 | sha256sum | cut -c1-16; }
[[ -x "$PY" ]] || fail "no Python at $PY (run tools/setup.sh first, or set CLIPFN_PYTHON)"

# 1. the wheel and its models
mkdir -p "$CACHE/wheels"
if [[ "$(sha256sum "$CACHE/wheels/$WHEEL" 2>/dev/null | cut -d' ' -f1)" != "$WHEEL_SHA256" ]]; then
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$CACHE/wheels" rapidocr-onnxruntime==1.4.4 || fail "pip download rapidocr-onnxruntime==1.4.4 failed"
  got="$(sha256sum "$CACHE/wheels/$WHEEL" | cut -d' ' -f1)"
  [[ "$got" == "$WHEEL_SHA256" ]] || fail "$WHEEL: sha256 $got, pinned $WHEEL_SHA256"
fi
for i in "${!MODELS[@]}"; do
  dst="$OUT/${ROLES[$i]}/model.onnx"
  [[ "$(sha256sum "$dst" 2>/dev/null | cut -d' ' -f1)" == "${MODELS_SHA256[$i]}" ]] && continue
  mkdir -p "$OUT/${ROLES[$i]}"
  "$PY" - "$CACHE/wheels/$WHEEL" "rapidocr_onnxruntime/models/${MODELS[$i]}" "$dst.tmp" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[3], "wb") as out:
    out.write(wheel.read(sys.argv[2]))
EOF
  got="$(sha256sum "$dst.tmp" | cut -d' ' -f1)"
  [[ "$got" == "${MODELS_SHA256[$i]}" ]] || { rm -f "$dst.tmp"; fail "${MODELS[$i]}: sha256 $got, pinned ${MODELS_SHA256[$i]}"; }
  mv "$dst.tmp" "$dst"
done
echo "setup-ocr: $OUT holds PP-OCRv4 (detection, recognition, classification)"

# 1b. the same recognizer with its `character` metadata taken out and written beside it as
#     recognition/characters.txt, the layout of a recognizer that carries none (PP-OCRv5's Korean)
CHARFILE="$CACHE/models/ocr-ppocrv4-charfile"
if [[ "$(cat "$CHARFILE/.stamp" 2>/dev/null)" != "${MODELS_SHA256[1]}-2" ]]; then
  rm -rf "$CHARFILE" && mkdir -p "$CHARFILE/recognition"
  ln -s "$OUT/detection" "$CHARFILE/detection"
  ln -s "$OUT/classification" "$CHARFILE/classification"
  "$PY" - "$OUT/recognition/model.onnx" "$CHARFILE/recognition" <<'EOF'
import sys, onnx
model = onnx.load(sys.argv[1])
(listed,) = [p.value for p in model.metadata_props if p.key == "character"]
kept = [p for p in model.metadata_props if p.key != "character"]
del model.metadata_props[:]
model.metadata_props.extend(kept)
onnx.save(model, sys.argv[2] + "/model.onnx")
with open(sys.argv[2] + "/characters.txt", "w", encoding="utf-8") as out:
    out.write(listed)
EOF
  echo "${MODELS_SHA256[1]}-2" >"$CHARFILE/.stamp"
  echo "setup-ocr: $CHARFILE holds the recognizer with recognition/characters.txt"
fi

# 2. the reference's venv, from the same checked wheel (its dependencies from PyPI)
if [[ "$(cat "$REF_VENV/.wheel.sha" 2>/dev/null)" != "$WHEEL_SHA256" ]]; then
  rm -rf "$REF_VENV"
  python3 -m venv "$REF_VENV"
  "$REF_VENV/bin/pip" install -q --disable-pip-version-check "$CACHE/wheels/$WHEEL" \
    || fail "installing $WHEEL into $REF_VENV failed"
  echo "$WHEEL_SHA256" >"$REF_VENV/.wheel.sha"
  echo "setup-ocr: $REF_VENV installed"
fi

# 3. the photos (stamp = hash of their maker and the wallpapers' manifest)
h="$(sha "$REPO/tools/ocr_photos.py" "$CACHE/photos/MANIFEST.txt")"
if [[ -f "$PHOTOS/truth.json" && "$(cat "$PHOTOS/.stamp" 2>/dev/null)" == "$h" ]]; then
  echo "setup-ocr: photos up to date"
else
  "$PY" "$REPO/tools/ocr_photos.py" "$CACHE/photos" "$PHOTOS"
  echo "$h" >"$PHOTOS/.stamp"
  echo "setup-ocr: photos written to $PHOTOS"
fi
