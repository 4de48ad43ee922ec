#!/usr/bin/env bash
# Packs everything the lent GPU machine needs into at most two xz tarballs under .gpu/ (ignored via
# .git/info/exclude): that machine has no network at all, and each call to it carries the working
# tree plus at most 64 MiB, so call 1 carries .gpu/gpu-1.tar.xz and unpacks it, call 2 carries
# .gpu/gpu-2.tar.xz, unpacks it and runs everything (tools/gpu-device.sh says how).
#
# What goes in (layout under /opt/clipfn-gpu on the GPU machine):
#   ort/      libonnxruntime.so.1.31.1 + providers_shared + providers_cuda from PyPI's onnxruntime-gpu
#             1.31.1 wheel (CUDA 13; pinned by sha256 below), the CUDA provider's fatbin cut to sm_90
#             (the H200's; tools/gpu_pack.py fatbin: 284 MB that xz takes to 52 MB instead of ~100)
#   bin/      the release clipfn (target/release/clipfn: build it first, this script does not), less
#             its line tables (strip --strip-debug: 270 -> 49 MB, 11 MB of xz; function names stay,
#             so a backtrace there names functions, and target/release/clipfn, same build id, has lines)
#   lib/      libde265.so.0 and libdav1d.so.6 from this system (the release binary links them)
#   models/   the test model, the generated SCRFD face folder, the real one (SCRFD-2.5G + dlib), the
#             PP-OCRv4 folder; vit-b32-random.onnx.sha256: the ViT-B/32-architecture model is 351 MB
#             of random floats, so the GPU machine generates it (make_models.py --kind vit-b32,
#             numpy + onnx only, ~10 s) and checks it against the sha256 generated here
#   photos/   faces/, ocr/, wallpapers/ (.cache/clipfn.env's); when the two bundles cannot hold them
#             all, the largest wallpapers go first, and the run says which
#   pack.txt  what went where, versions, what was dropped
#
#   tools/gpu-pack.sh        # ~5 min the first time on 2 cores (the CUDA provider's xz), then ~1 min
# Knobs: GPU_PACK_LIMIT_MIB (60, and never more than 64 MiB less the working tree).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091 # linted on its own
source tools/setup-env.sh
gpu=.gpu
py=${CLIPFN_PYTHON:-python3}  # needs numpy + onnx for the ViT-B/32 hash (.venv has them)
wheel=onnxruntime_gpu-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl
wheel_sha256=e26c475fe361b2015f45b4b824bd13f0bb20204e59b62814e6f0acd5f3d491a6  # as pip fetched it, 2026-12-04
bin=target/release/clipfn
t0=$(date +%s)

[[ -x $bin ]] || { echo "gpu-pack: no $bin: build the release binary first (cargo build --release)" >&2; exit 1; }
for v in CLIPFN_TEST_MODEL CLIPFN_TEST_FACES_SCRFD CLIPFN_TEST_FACES_REAL CLIPFN_TEST_OCR \
  CLIPFN_PHOTOS_DIR CLIPFN_TEST_FACE_PHOTOS CLIPFN_TEST_OCR_PHOTOS; do
  [[ -e ${!v:-/nonexistent} ]] || { echo "gpu-pack: $v ('${!v:-}') missing: run tools/setup.sh" >&2; exit 1; }
done
mkdir -p "$gpu/wheel" "$gpu/ort" "$gpu/vit"
grep -qxF /.gpu .git/info/exclude 2>/dev/null || echo /.gpu >>.git/info/exclude

# 1. The onnxruntime-gpu wheel, by version and hash (pip checks it); kept for the next run.
if ! echo "$wheel_sha256  $gpu/wheel/$wheel" | sha256sum -c --quiet 2>/dev/null; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --python-version 3.11 --implementation cp --abi cp311 --dest "$gpu/wheel" --require-hashes \
    -r <(echo "onnxruntime-gpu==1.31.1 --hash=sha256:$wheel_sha256")
fi
echo "$wheel_sha256  $gpu/wheel/$wheel" | sha256sum -c --quiet
python3 - "$gpu/wheel/$wheel" "$gpu/ort" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in ("libonnxruntime.so.1.31.1", "libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so"):
        with open(f"{sys.argv[2]}/{n}", "wb") as f:
            f.write(z.read(f"onnxruntime/capi/{n}"))
PY
mkdir -p "$gpu/ort/sm90"
python3 tools/gpu_pack.py fatbin "$gpu/ort/libonnxruntime_providers_cuda.so" \
  "$gpu/ort/sm90/libonnxruntime_providers_cuda.so" | tee "$gpu/fatbin.txt"

# 2. The ViT-B/32 model's hash, for the GPU machine to check its own copy against (regenerated when
# make_models.py or its package changes; same bytes with Python 3.11/3.12, numpy 2.3-2.5, onnx 1.19-1.23).
stamp=$(cat tools/make_models.py tools/models/*.py | sha256sum | cut -c1-16)
if [[ $(cat "$gpu/vit/stamp" 2>/dev/null) != "$stamp" || ! -f $gpu/vit/vit-b32-random.onnx.sha256 ]]; then
  s=$(date +%s)
  "$py" tools/make_models.py --kind vit-b32 --out "$gpu/vit/vit-b32-random.onnx" >/dev/null
  {
    (cd "$gpu/vit" && sha256sum vit-b32-random.onnx)
    "$py" -c 'import sys, numpy, onnx; print(f"# python {sys.version.split()[0]}, numpy {numpy.__version__}, onnx {onnx.__version__}")'
    echo "# generated in $(($(date +%s) - s)) s on $(nproc) cores"
  } >"$gpu/vit/vit-b32-random.onnx.sha256"
  echo "$stamp" >"$gpu/vit/stamp"
fi
echo "gpu-pack: ViT-B/32 $(head -c 16 "$gpu/vit/vit-b32-random.onnx.sha256") ($(sed -n 3p "$gpu/vit/vit-b32-random.onnx.sha256" | cut -c3-))"

# 3. The binary without its line tables (a quarter of the bytes), and the two libraries the
# release binary links beyond glibc and libstdc++.
strip --strip-debug -o "$gpu/clipfn" "$bin"
syslib() { ldconfig -p | awk -v n="$1" '$1 == n && /x86-64/ { print $NF; exit }'; }
de265=$(syslib libde265.so.0)
dav1d=$(syslib libdav1d.so.6)
[[ -n $de265 && -n $dav1d ]] || { echo "gpu-pack: libde265.so.0 / libdav1d.so.6 not found (apt-get install libde265-0 libdav1d6)" >&2; exit 1; }

# 4. What goes where, in priority order (tools/gpu_pack.py bundle).
{
  printf 'ort\tort/%s\t%s\n' libonnxruntime.so.1.31.1 "$gpu/ort/libonnxruntime.so.1.31.1" \
    libonnxruntime_providers_shared.so "$gpu/ort/libonnxruntime_providers_shared.so" \
    libonnxruntime_providers_cuda.so "$gpu/ort/sm90/libonnxruntime_providers_cuda.so"
  printf 'need\t%s\t%s\n' bin/clipfn "$gpu/clipfn" lib/libde265.so.0 "$de265" lib/libdav1d.so.6 "$dav1d" \
    models/clip-test.onnx "$CLIPFN_TEST_MODEL" models/faces-scrfd-test "$CLIPFN_TEST_FACES_SCRFD" \
    models/faces-real "$CLIPFN_TEST_FACES_REAL" models/ocr-ppocrv4 "$CLIPFN_TEST_OCR" \
    models/objects-centernet "$CLIPFN_TEST_OBJECTS" \
    models/vit-b32-random.onnx.sha256 "$gpu/vit/vit-b32-random.onnx.sha256"
  printf 'photo\t%s\t%s\n' photos/faces "$CLIPFN_TEST_FACE_PHOTOS" photos/ocr "$CLIPFN_TEST_OCR_PHOTOS" \
    photos/wallpapers "$CLIPFN_PHOTOS_DIR/wallpapers"
} >"$gpu/manifest.tsv"

# Each call carries the working tree too (tracked files and untracked ones git does not ignore).
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
limit=$(python3 -c "import sys; print(round(min(float(sys.argv[1]), 64 - int(sys.argv[2]) / 2**20 - 0.5), 2))" \
  "${GPU_PACK_LIMIT_MIB:-60}" "$tree")
{
  echo "packed $(date -u +%FT%TZ) by tools/gpu-pack.sh from $(git rev-parse --short HEAD) ($(git status --porcelain | wc -l) paths changed)"
  echo "clipfn: $(sha256sum "$bin" | cut -c1-16) ($(file -b "$bin" | grep -o 'BuildID[^,]*')), packed without debug sections; links: $(ldd "$bin" | awk '{print $1}' | tr '\n' ' ')"
  echo "onnxruntime-gpu: $wheel sha256 $wheel_sha256"
  cat "$gpu/fatbin.txt"
  echo "vit-b32-random.onnx: $(tr '\n' ' ' <"$gpu/vit/vit-b32-random.onnx.sha256")"
  echo "working tree $((tree / 1024)) KiB; bundles under $limit MiB"
} >"$gpu/info.txt"
python3 tools/gpu_pack.py bundle "$gpu/manifest.tsv" --out "$gpu" --limit-mib "$limit" --info "$gpu/info.txt"
echo "gpu-pack: working tree $((tree / 1024)) KiB + each bundle < $limit MiB per call; done in $(($(date +%s) - t0)) s"
ls -l "$gpu"/gpu-*.tar.xz
