#!/usr/bin/env bash
# Soak and fault run (not CI): the GCS emulator with the sample photos, a fault proxy in front of
# it and clipfn behind that; writes docs/reliability.md. See infra/soak.py for the phases.
#
#   infra/soak.sh                    # 10 minutes of the seed load shape, then faults, recovery
#   infra/soak.sh --minutes 2        # shorter, on a shared machine
#   infra/soak.sh --ocr --report .cache/soak-ocr.md   # OCR on photos with text (tools/setup-ocr.sh)
#
# Needs tools/setup.sh (emulator, k6, model) and a built binary (target/debug/clipfn, or --bin).
#
# The image itself (not CI; root, as tools/image-check.sh): builds clipfn-check:cpu from ./Dockerfile
# with tools/image-check.sh (its dockerd, bases and build; CLIPFN_IMAGES_KEEP=1 keeps them for the
# next run) and runs it under docker run --memory 1g --cpus 2 with the album app's load, sampling
# the container's memory; writes .cache/soak-image/summary.{md,json} (--out), not reliability.md:
#
#   infra/soak.sh --image                    # one hour
#   infra/soak.sh --image --duration 20m --vus 4
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${CLIPFN_PYTHON:-$REPO/.venv/bin/python}
for arg in "$@"; do
  if [[ $arg == --image ]]; then
    export CLIPFN_IMAGES_ONLY=cpu
    exec "$REPO/tools/image-check.sh" --then "$PY" "$REPO/infra/soak.py" "$@"
  fi
done
for arg in "$@"; do
  if [[ $arg == --ocr ]]; then
    export CLIPFN_STACK_PHOTOS=${CLIPFN_STACK_PHOTOS:-$REPO/.cache/photos/ocr}
  fi
done
export CLIPFN_STACK_DIR=${CLIPFN_STACK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/clipfn-soak-stack.XXXXXX")}
exec "$REPO/infra/local-stack.sh" run --gcs-only -- "$PY" "$REPO/infra/soak.py" "$@"
