#!/usr/bin/env bash
# Soak and fault run (not CI): the GCS emulator with the sample photos, a fault proxy in front of
# it and clipfn behind that; writes docs/reliability.md. See infra/soak.py for the phases.
#
#   infra/soak.sh                    # 10 minutes of the seed load shape, then faults, recovery
#   infra/soak.sh --minutes 2        # shorter, on a shared machine
#
# Needs tools/setup.sh (emulator, k6, model) and a built binary (target/debug/clipfn, or --bin).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${CLIPFN_PYTHON:-$REPO/.venv/bin/python}
export CLIPFN_STACK_DIR=${CLIPFN_STACK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/clipfn-soak-stack.XXXXXX")}
exec "$REPO/infra/local-stack.sh" run --gcs-only -- "$PY" "$REPO/infra/soak.py" "$@"
