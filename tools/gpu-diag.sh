#!/usr/bin/env bash
# One OCR request (the OCR photos, one /v1/analyze event through `clipfn replay`) under several
# CUDA settings and on CPU, on the lent GPU machine after tools/gpu-device.sh unpack: each variant's
# whole run (start-up and warm-up included), the GPU memory it peaked at, and where the worker's time
# went (its batch log, per tower: batches, total and largest ms). Logs in $OUT/diag-*.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
root=${GPU_ROOT:-/opt/clipfn-gpu}
out=${OUT:-target/gpu-out}
mkdir -p "$out"
# shellcheck disable=SC1090 # the one function of gpu-device.sh that sets the paths
source <(sed -n '/^environment() {/,/^}/p' tools/gpu-device.sh)
venv=${TORCH_VENV:-/opt/torch/.venv}
py=$venv/bin/python3
environment
photos=$root/photos/ocr
"$py" - "$photos" "$out/diag-event.json" <<'PY'
import json, os, sys
names = sorted(f for f in os.listdir(sys.argv[1]) if f.endswith((".jpg", ".png")))
event = json.load(open("events/apigw-v2-analyze-one-bad.json"))
event["body"] = json.dumps({"images": names, "ocr": True, "faces": False, "embedding": False})
json.dump(event, open(sys.argv[2], "w"))
PY
variant() {  # variant NAME PROVIDER VAR=VALUE...
  local name=$1 provider=$2
  shift 2
  (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.5; done) >"$out/diag-$name.mem" 2>/dev/null &
  local sampler=$! s=$EPOCHREALTIME
  timeout -k 2 "${DIAG_LIMIT:-40}" env -i PATH="$PATH" LD_LIBRARY_PATH="$LD_LIBRARY_PATH" ORT_DYLIB_PATH="$ORT_GPU_DYLIB" \
    CLIPFN_MODEL="$CLIPFN_TEST_MODEL" CLIPFN_STORE="file://$photos" CLIPFN_OCR_MODEL="$CLIPFN_TEST_OCR" \
    CLIPFN_PROVIDER="$provider" CLIPFN_LOG_FORMAT=text RUST_LOG=clipfn=debug "$@" \
    "$CLIPFN_BIN" replay "$out/diag-event.json" >"$out/diag-$name.jsonl" 2>"$out/diag-$name.log"
  local rc=$? e=$EPOCHREALTIME
  kill "$sampler" 2>/dev/null
  "$py" - "$name" "$rc" "$s" "$e" "$out/diag-$name.log" "$out/diag-$name.mem" <<'PY'
import collections, re, sys
name, rc, s, e, log, mem = sys.argv[1:]
towers = collections.defaultdict(list)
loaded = ""
for line in open(log, errors="replace"):
    m = re.search(r'\bbatch\b.*size=(\d+).*tower="?(\w+)"?.*ms=(\d+)', line)
    if m:
        towers[m.group(2)].append(int(m.group(3)))
    if "loaded and warmed up" in line:
        loaded += " | " + re.sub(r"^\S+\s+\S+\s+", "", line.strip())[:160]
peak = max((int(x) for x in open(mem).read().split() if x.isdigit()), default=0)
print(f"{name}: exit {rc}, {float(e) - float(s):.1f} s in all, GPU memory peak {peak} MiB")
for tower, ms in sorted(towers.items()):
    print(f"    {tower:16} {len(ms):4} batches, {sum(ms):7} ms, largest {max(ms)} ms, first {ms[0]} ms")
print("   ", loaded[:900])
PY
}
variant cpu cpu
variant cuda-default-settings cuda
variant cuda-small-workspace cuda CLIPFN_CUDA_CONV_MAX_WORKSPACE=false CLIPFN_CUDA_ARENA_EXTEND=same_as_requested
variant cuda-no-search cuda CLIPFN_CUDA_CONV_SEARCH=default CLIPFN_CUDA_CONV_MAX_WORKSPACE=false CLIPFN_CUDA_ARENA_EXTEND=same_as_requested
