#!/usr/bin/env bash
# Runs every test clipfn has, on a fresh machine too: sets up what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
cargo test --locked
if [ -x tools/check-infra.sh ]; then
  tools/check-infra.sh
fi
