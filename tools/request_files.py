#!/usr/bin/env python3
"""Which of src/'s files one `/v1/analyze` request runs code in (issue 49's measure), by coverage.

  request_files.py BINARY [--photos N] [--list]

BINARY is a clipfn built with its own crates instrumented (its dependencies not), from this
checkout or from the one --root names (a worktree of another commit):
  printf '#!/bin/sh\\nr="$1"; shift; exec "$r" "$@" -C instrument-coverage\\n' > /tmp/covwrap.sh
  chmod +x /tmp/covwrap.sh
  RUSTC_WORKSPACE_WRAPPER=/tmp/covwrap.sh cargo build --all-features --bin clipfn
and llvm-profdata / llvm-cov of rustc's LLVM major (`rustc -vV`; Debian's llvm-22 package),
found as llvm-profdata-NN or on PATH.

Two runs of `clipfn serve` on loopback (.cache/clipfn.env: the test image and text models, the
real face models, PP-OCRv4; a file:// store): one that starts, waits for its "ready" log line
and is stopped (SIGTERM), and one that does the same with one `/v1/analyze` between (N face and N
OCR photos, labels, faces and text). No HTTP probe is sent, so the two runs differ by the request
alone. A function is on the request's path when it ran more often in the second run; the
measure is how many of src/'s files hold such a function.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
from cpu_ab import setup_env  # noqa: E402


def llvm_tool(name: str) -> str:
    major = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    major = next(line for line in major.splitlines() if line.startswith("LLVM version")).split()[-1].split(".")[0]
    found = shutil.which(f"{name}-{major}") or shutil.which(name)
    if not found:
        raise SystemExit(f"no {name}-{major}: install LLVM {major}'s tools (Debian: llvm-{major})")
    return found


def run(binary: str, env: dict, profile: str, request: dict | None) -> None:
    port = 20000 + os.getpid() % 10000
    server = subprocess.Popen([binary, "serve"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                              env={**os.environ, **env, "PORT": str(port), "LLVM_PROFILE_FILE": profile})
    deadline = time.monotonic() + 300
    for line in server.stderr:
        if '"ready"' in line or line.rstrip().endswith(" ready"):
            break
        if time.monotonic() > deadline:
            server.kill()
            raise SystemExit("not ready within 300 s")
    else:
        raise SystemExit(f"exited with {server.wait()} before it was ready")
    if request is not None:
        post = urllib.request.Request(f"http://127.0.0.1:{port}/v1/analyze", json.dumps(request).encode(),
                                      {"content-type": "application/json"})
        data = json.load(urllib.request.urlopen(post, timeout=300))["data"]
        failed = [item for item in data if "error" in item]
        assert len(data) == len(request["images"]) and not failed, failed
        assert any(item.get("faces") for item in data) and any(item.get("ocr") for item in data), "nothing found"
    server.send_signal(signal.SIGTERM)
    server.stderr.read()
    if server.wait(timeout=60) != 0:
        raise SystemExit(f"exited with {server.returncode}")


def function_counts(binary: str, profiles: list, workdir: Path, root: Path) -> dict:
    """Each of src/'s functions (by mangled name, summed over copies), its count of runs."""
    merged = workdir / "merged.profdata"
    subprocess.run([llvm_tool("llvm-profdata"), "merge", "-sparse", *profiles, "-o", merged], check=True)
    exported = subprocess.run([llvm_tool("llvm-cov"), "export", "-format=text", "-skip-expansions",
                               f"-instr-profile={merged}", binary], capture_output=True, text=True, check=True)
    counts = defaultdict(lambda: [0, ""])
    src = str(root / "src") + "/"
    for function in json.loads(exported.stdout)["data"][0]["functions"]:
        file = function["filenames"][0]
        if file.startswith(src):
            counts[function["name"]][0] += function["count"]
            counts[function["name"]][1] = file.removeprefix(str(root) + "/")
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--photos", type=int, default=2, help="face photos and OCR photos each")
    ap.add_argument("--list", action="store_true", help="print the files")
    ap.add_argument("--root", type=Path, default=REPO, help="the checkout BINARY was built from (a worktree)")
    args = ap.parse_args()
    setup = setup_env()
    photos = Path(setup["CLIPFN_PHOTOS_DIR"])
    keys = [f"{folder}/{p.name}" for folder in ("faces", "ocr")
            for p in sorted(p for p in (photos / folder).iterdir() if p.suffix in (".jpg", ".png"))[:args.photos]]
    env = {**setup, "CLIPFN_MODEL": setup["CLIPFN_TEST_MODEL"], "CLIPFN_TEXT_MODEL": setup["CLIPFN_TEST_TEXT_MODEL"],
           "CLIPFN_FACE_MODEL": setup["CLIPFN_TEST_FACES_REAL"], "CLIPFN_OCR_MODEL": setup["CLIPFN_TEST_OCR"],
           "CLIPFN_STORE": f"file://{photos}", "RUST_LOG": "info", "CLIPFN_REQUEST_TIMEOUT_MS": "300000"}
    request = {"images": keys, "labels": ["a cat", "a dog", "a street sign"], "faces": True, "ocr": True}
    with tempfile.TemporaryDirectory() as workdir:
        workdir = Path(workdir)
        run(args.binary, env, str(workdir / "idle-%p.profraw"), None)
        idle = function_counts(args.binary, list(workdir.glob("idle-*.profraw")), workdir, args.root)
        run(args.binary, env, str(workdir / "request-%p.profraw"), request)
        asked = function_counts(args.binary, list(workdir.glob("request-*.profraw")), workdir, args.root)
    ran = {file for name, (count, file) in asked.items() if count > idle.get(name, [0])[0]}
    every = list((args.root / "src").rglob("*.rs"))
    started = {file for count, file in idle.values() if count > 0}
    print(f"/v1/analyze of {len(keys)} photos (labels, faces, text): code ran in {len(ran)} of src/'s {len(every)} "
          f"files ({len(started)} at start-up alone)")
    if args.list:
        print("\n".join(sorted(ran)))


if __name__ == "__main__":
    main()
