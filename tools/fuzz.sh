#!/usr/bin/env bash
# Fuzzes the decode path (photo bytes -> model input; fuzz/fuzz_targets/decode.rs) for SECONDS
# (default 600) with cargo-fuzz / libFuzzer, on one core, its corpus seeded from the test photos
# that tools/setup.sh fetched. Exits non-zero when libFuzzer finds a crash, a timeout or an
# out-of-memory; the input that caused it is in fuzz/artifacts/decode/.
#
#   tools/fuzz.sh [SECONDS]
#
# Needs cargo-fuzz (installed here with `cargo install` if missing) and a nightly toolchain for
# AddressSanitizer. Without nightly it runs on stable with RUSTC_BOOTSTRAP=1 (cargo-fuzz passes
# -Z flags) and no sanitizer: crashes, aborts, panics, timeouts and OOMs are still caught. Only
# the Rust code is coverage-instrumented; libjpeg-turbo and libheif are built by cmake without
# instrumentation, so the fuzzer runs them but is not guided through them.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-600}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS]" >&2; exit 2; }

if [[ -f .cache/clipfn.env ]]; then
  set -a
  # shellcheck disable=SC1091
  . .cache/clipfn.env
  set +a
fi
photos=${CLIPFN_PHOTOS_DIR:-.cache/photos}

corpus=fuzz/corpus/decode
mkdir -p "$corpus"
if [[ -z "$(ls -A "$corpus")" ]]; then
  [[ -d $photos ]] || { echo "fuzz: no photos in $photos; run tools/setup.sh first" >&2; exit 1; }
  # Small files of every format keep each run fast; big photos add little coverage.
  find "$photos" -type f -size -300k \
    \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.mpo' -o -iname '*.png' -o -iname '*.gif' \
    -o -iname '*.webp' -o -iname '*.bmp' -o -iname '*.tif' -o -iname '*.tiff' -o -iname '*.avif' \
    -o -iname '*.heic' -o -iname '*.heif' -o -iname '*.hif' \) -print0 |
    while IFS= read -r -d '' f; do
      cp "$f" "$corpus/$(sha1sum "$f" | cut -c1-16)"
    done
  echo "fuzz: seeded $corpus with $(find "$corpus" -type f | wc -l) photos from $photos"
fi

toolchain=() sanitizer=none
if cargo +nightly --version >/dev/null 2>&1; then
  toolchain=(+nightly) sanitizer=address
else
  export RUSTC_BOOTSTRAP=1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

# Its own target directory: the instrumented build shares nothing with the normal one.
unset CARGO_TARGET_DIR
echo "fuzz: ${toolchain[*]:-stable} sanitizer=$sanitizer, ${seconds}s on one core"
# -timeout: one input may take 20 s (a 16 MP HEIC takes about 1 s); -rss_limit_mb: the 16 MP
# pixel budget of the target plus libheif's buffers.
exec nice -n 10 cargo "${toolchain[@]}" fuzz run --sanitizer "$sanitizer" decode "$corpus" -- \
  -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 -max_len=1048576 -print_final_stats=1
