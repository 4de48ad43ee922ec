#!/usr/bin/env bash
# Runs every test clipfn has, on a fresh machine too: sets up what is missing first.
#
# Each step is timed: `step NAME` ends the step before it and starts NAME; when a step ends, a line
# gives the time and its seconds, and at the end (also when a step fails) a table gives them all.
# A step that took more than 120% of its figure in docs/deploy.md ("CI's steps") gets a note; a
# note never fails the run. The exit status is the failing step's, as without the timing.
set -euo pipefail
cd "$(dirname "$0")/.."

FIGURES=docs/deploy.md
T0=$(date +%s)
step_name=
step_t0=
done_steps=() # "NAME SECONDS STATUS", in order

# figure NAME: NAME's seconds from the table under "## CI's steps" in docs/deploy.md, or nothing
# (no file, no section, no row).
figure() {
  [[ -f $FIGURES ]] || return 0
  awk -v step="$1" '
    /^#+ / { inside = ($0 ~ /^## CI.s steps *$/); next }
    inside && index($0, "| `" step "` | ") == 1 {
      split($0, cell, "|"); gsub(/ /, "", cell[3])
      if (cell[3] ~ /^[0-9]+$/) { print cell[3]; exit }
    }' "$FIGURES"
}

# end_step STATUS: closes the running step, if any.
end_step() {
  [[ -n $step_name ]] || return 0
  local took=$(($(date +%s) - step_t0))
  done_steps+=("$step_name $took $1")
  echo "test.sh: $(date '+%F %T') step $step_name $1 after $took s"
  step_name=
}

# step NAME: ends the step before it (it succeeded: set -e stops at a failure) and starts NAME.
step() {
  end_step ok
  step_name=$1
  step_t0=$(date +%s)
  echo "test.sh: $(date '+%F %T') step $step_name starts"
}

# At exit, whatever the status: the step that was running, the table, the notes; the status stays.
finish() {
  local rc=$? entry name took status recorded notes=()
  trap - EXIT
  set +e
  # A step still open failed, or (status 0: a signal ended the script) was interrupted.
  end_step "$( ((rc)) && echo "FAILED (exit $rc)" || echo interrupted)"
  echo
  echo "test.sh: steps (seconds; figures from $FIGURES, \"CI's steps\")"
  printf '  %-12s %7s %7s  %s\n' step seconds figure status
  for entry in "${done_steps[@]}"; do
    read -r name took status <<<"$entry"
    recorded=$(figure "$name")
    printf '  %-12s %7s %7s  %s\n' "$name" "$took" "${recorded:--}" "$status"
    if [[ $status == ok && -n $recorded ]] && ((took * 5 > recorded * 6)); then
      notes+=("note: step $name took $took s, over 120% of its $recorded s in $FIGURES")
    fi
  done
  printf '  %-12s %7s\n' total "$(($(date +%s) - T0))"
  ((${#notes[@]} == 0)) || printf '%s\n' "${notes[@]}"
  rm -f "${prepare_log:-}"
  exit "$rc"
}
trap finish EXIT

# wait_prepare: waits for the background install of the image step's Debian packages, once; its
# exit status in $prepared.
prepared=
wait_prepare() {
  [[ -z $prepared ]] || return 0
  prepared=0
  wait "$prepare_pid" || prepared=$?
  echo "test.sh: tools/image-check.sh --prepare exited $prepared: $(tail -n 1 "$prepare_log")"
}

step setup
tools/setup.sh
# The image step's Debian packages (docker.io, mmdebstrap, shellcheck, pigz), downloaded and
# installed in the background while the Rust steps build; started after setup, whose apt-get would
# find dpkg's lock taken. Left to finish if the run stops early: a killed dpkg breaks the next one.
prepare_log=$(mktemp "${TMPDIR:-/tmp}/clipfn-image-prepare.XXXXXX")
tools/image-check.sh --prepare >"$prepare_log" 2>&1 &
prepare_pid=$!
step dlib_parity
# The rebuilt dlib recognizer equals face-api's own JavaScript on the same chips (issue 35).
.venv/bin/python tools/dlib_parity.py
# Formatting and lints before the tests: every target, every feature (heif and avif build against
# the libraries setup.sh installs), warnings as errors.
step fmt
cargo fmt --check
step clippy
cargo clippy --locked --all-targets --all-features -- -D warnings
# HEIC and AVIF are optional features (on in the images); test them too.
step test
cargo test --locked --features heif,avif
# The infrastructure checks: hadolint, terraform formatting and pins, scripts.
step infra
wait_prepare # check-infra.sh's own apt-get (shellcheck, when missing) would find dpkg's lock taken
tools/check-infra.sh
# The seed team's k6 script against the local stack (GCS emulator + the binary cargo test built).
step k6
CLIPFN_BIN="${CARGO_TARGET_DIR:-target}/debug/clipfn" infra/k6/smoke.sh
# The images users deploy, built from the real Dockerfiles and run as Cloud Run and Lambda run them
# (dockerd, local Debian bases, the GCS emulator; about 26 minutes on 2 cores, cold).
step images
wait_prepare
if ((prepared)); then
  cat "$prepare_log" >&2
  echo "test.sh: tools/image-check.sh --prepare failed (exit $prepared): the image step's packages are not installed" >&2
  exit "$prepared"
fi
tools/image-check.sh
end_step ok
