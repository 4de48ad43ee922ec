#!/usr/bin/env bash
# Runs every test clipfn has, on a fresh machine too: sets up what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
# The rebuilt dlib recognizer equals face-api's own JavaScript on the same chips (issue 35).
.venv/bin/python tools/dlib_parity.py
# Formatting and lints before the tests: every target, every feature (heif and avif build against
# the libraries setup.sh installs), warnings as errors.
cargo fmt --check
cargo clippy --locked --all-targets --all-features -- -D warnings
# HEIC and AVIF are optional features (on in the images); test them too.
cargo test --locked --features heif,avif
# The infrastructure checks: hadolint, terraform formatting and pins, scripts.
tools/check-infra.sh
# The seed team's k6 script against the local stack (GCS emulator + the binary cargo test built).
CLIPFN_BIN="${CARGO_TARGET_DIR:-target}/debug/clipfn" infra/k6/smoke.sh
# The images users deploy, built from the real Dockerfiles and run as Cloud Run and Lambda run them
# (dockerd, local Debian bases, the GCS emulator; about 26 minutes on 2 cores, cold).
tools/image-check.sh
