#!/usr/bin/env bash
# Real sensitive-photo classifier weights from the npm registry (issue 58); safe to re-run (each step
# is skipped when its stamp says it is current), works from any directory. Needs node + npm (>= 18)
# and the project's Python ($CLIPFN_PYTHON, default .venv/bin/python: numpy + onnx + onnxruntime).
#
#   1. .cache/node-sensitive: `npm ci --ignore-scripts` of tools/sensitive's package.json +
#      package-lock.json (nsfwjs 4.4.0, MIT; its peers @tensorflow/tfjs 4.22.0, Apache-2.0, with
#      the tfjs packages that it pulls in, and buffer 6.0.3; npm checks every tarball against the
#      lockfile's sha512 integrity). No install scripts run, nothing is downloaded outside npm.
#   2. nsfwjs's MobileNetV2Mid as the package ships it (dist/models/mobilenet_v2_mid: the graph in
#      model.min.js, its uint8-quantised weights as base64 in two group1-shard*.min.js), the
#      JavaScript that loads and preprocesses (dist/cjs/core.js, model_imports/mobilenet_v2_mid.js)
#      and its class names (dist/cjs/nsfw_classes.js): sha256 checked against the pins below.
#   3. .cache/models/sensitive-nsfwjs/model.onnx and classes.txt: tools/sensitive/reference.cjs
#      --mode export writes the graph and its weights as nsfwjs's own loaders give them (to a temp
#      folder), tools/nsfwjs_onnx.py converts them node by node (tools/tfjs_onnx.py, the converter
#      CenterNet shares); rebuilt only when the pinned files, the export, the converter or the
#      requirements (onnx's version) change.
#
# Weights never enter the repository or an image. tools/sensitive_parity.py then holds the ONNX model
# to nsfwjs's own classify() under node on the same photos; docs/sensitive-nsfwjs.md.
set -euo pipefail

T0=$(date +%s)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$REPO/.cache"
PY="${CLIPFN_PYTHON:-$REPO/.venv/bin/python}"
NODE_DIR="$CACHE/node-sensitive"
OUT="$CACHE/models/sensitive-nsfwjs"
NSFWJS="$NODE_DIR/node_modules/nsfwjs"
# the pins: nsfwjs 4.4.0's files
FILES=(dist/models/mobilenet_v2_mid/model.min.js
       dist/models/mobilenet_v2_mid/group1-shard1of2.min.js
       dist/models/mobilenet_v2_mid/group1-shard2of2.min.js
       dist/cjs/core.js
       dist/cjs/model_imports/mobilenet_v2_mid.js
       dist/cjs/nsfw_classes.js)
FILES_SHA256=(a7a9e701491e2449b221dab7c424957f853e700602b5575da33cfd745616f964
              f2e79a209e44d668220ec5f1533a98f2be954e3953685bf074d201b82fefc29a
              f291df992a0131741372506a6072fb9f1645bff7c973c983fd6276f5f9625d5e
              7ee20a82c3d1a9465facc49183fd06528a7bc1203bcd60830dbe94e52978fd9c
              5f5a63cfd2ca4c915301e2f049214ef915a05da98c76561b0130e208a1756d5b
              14b2c622d25f10c8577b833c45d63e8c6cf3ea365d5f752a209d90454ec9fc0f)
sha() { sha256sum "$@" | cut -d' ' -f1 | sha256sum | cut -c1-16; }
fail() { echo "setup-sensitive: $*" >&2; exit 1; }

# shellcheck disable=SC1091 # linted on its own (tests/infra)
source "$REPO/tools/npm-pinned.sh"
need_node "nsfwjs's reference"
[[ -x "$PY" ]] || fail "no Python at $PY (run tools/setup.sh first, or set CLIPFN_PYTHON)"

# 1. nsfwjs and tfjs from the npm registry
npm_ci_pinned sensitive "$NODE_DIR" "nsfwjs 4.4.0, @tensorflow/tfjs 4.22.0"

# 2. the model files and the JavaScript around them, checked where npm put them
paths=()
for i in "${!FILES[@]}"; do
  f="$NSFWJS/${FILES[$i]}"
  [[ -f "$f" ]] || fail "nsfwjs 4.4.0 has no ${FILES[$i]} (in $NSFWJS)"
  got="$(sha256sum "$f" | cut -d' ' -f1)"
  if [[ "$got" != "${FILES_SHA256[$i]}" ]]; then
    rm -f "$NODE_DIR/.lock.sha"  # the next run reinstalls .cache/node-sensitive
    fail "${FILES[$i]}: sha256 $got, pinned ${FILES_SHA256[$i]} (re-run to reinstall .cache/node-sensitive)"
  fi
  paths+=("$f")
done

# 3. the ONNX model and its classes; stamp = hash of the pinned files, the export, the converter and
#    the requirements (onnx's version)
MODEL_HASH="$(sha "${paths[@]}" "$REPO/tools/sensitive/reference.cjs" "$REPO/tools/nsfwjs_onnx.py" \
  "$REPO/tools/tfjs_onnx.py" "$REPO/tools/requirements.txt")"
if [[ -f "$OUT/model.onnx" && -f "$OUT/classes.txt" && "$(cat "$OUT/model.onnx.stamp" 2>/dev/null)" == "$MODEL_HASH" ]]; then
  echo "setup-sensitive: sensitive-nsfwjs/model.onnx up to date"
else
  mkdir -p "$OUT"
  rm -f "$OUT/model.onnx.stamp"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  node "$REPO/tools/sensitive/reference.cjs" --mode export --out "$tmp" --modules "$NODE_DIR/node_modules" >/dev/null \
    || fail "exporting nsfwjs's MobileNetV2Mid failed"
  "$PY" "$REPO/tools/nsfwjs_onnx.py" --model "$tmp/model.json" --classes "$tmp/classes.json" \
    --out "$OUT/model.onnx" --classes-out "$OUT/classes.txt" --check \
    || fail "converting nsfwjs's MobileNetV2Mid to $OUT/model.onnx failed"
  echo "$MODEL_HASH" >"$OUT/model.onnx.stamp"
fi
echo "setup-sensitive: done in $(( $(date +%s) - T0 ))s ($OUT/model.onnx, $OUT/classes.txt)"
