#!/usr/bin/env python3
"""A/B of clipfn release binaries: the server's CPU per photo on one fixed pass of photos, in turns.

  cpu_ab.py {ocr,faces,both,objects} NAME=BINARY... [--rounds 3]

For each round, each binary in turn: `clipfn serve` with the test image model and the real models
the workload needs (.cache/clipfn.env, tools/setup.sh), photos from a file:// store; one warm-up
`/v1/analyze` of every photo of the workload's folder, then 3 more, and the server's utime + stime
(/proc/PID/stat) over those 3, per photo, with the worker's wall time in each model stage
(`clipfn_stage_duration_seconds`) over them, per photo, and the server's peak RSS (VmHWM). Prints each round and each binary's medians. The servers
listen on loopback only. Build an older commit's binary with a worktree and a shared target dir:
  git worktree add /tmp/old REV && (cd /tmp/old && CARGO_TARGET_DIR=$PWD/target cargo build --release)
"""
import argparse
import contextlib
import http.client
import json
import os
import random
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def setup_env() -> dict:
    env = {}
    for line in (REPO / ".cache" / "clipfn.env").read_text().splitlines():
        line = line.strip().removeprefix("export ")
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value.strip("\"'")
    return env


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    line = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


STAGES = ["face_detection", "face_recognition", "text_detection", "line_classification", "text_recognition",
          "object_detection"]


def stage_seconds(port: int) -> dict:
    """Each model stage's seconds so far, from the server's /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    seconds = dict.fromkeys(STAGES, 0.0)
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith("clipfn_stage_duration_seconds_sum{"):
            stage = line.split('stage="', 1)[1].split('"', 1)[0]
            if stage in seconds:
                seconds[stage] += float(line.rsplit(" ", 1)[1])
    return seconds


@contextlib.contextmanager
def started_server(binary: str, env: dict):
    """`binary serve` on a loopback port, once /readyz says 200; the port. Stopped on leaving."""
    port = 20000 + random.randrange(10000)
    server = subprocess.Popen([binary, "serve"], env={**os.environ, **env, "PORT": str(port)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None:
                raise SystemExit(f"{binary} exited with {server.returncode} before it was ready")
            time.sleep(0.1)
        server.port = port
        yield server
    finally:
        server.terminate()
        server.wait()


def one_server(binary: str, env: dict, keys: list, body: dict) -> tuple:
    with started_server(binary, env) as server:
        port = server.port

        def analyze() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            conn.request("POST", "/v1/analyze", json.dumps({"images": keys, **body}), {"content-type": "application/json"})
            data = json.loads(conn.getresponse().read())["data"]
            failed = [item for item in data if "error" in item]
            assert len(data) == len(keys) and not failed, failed

        analyze()
        start, stages = cpu_seconds(server.pid), stage_seconds(port)
        for _ in range(3):
            analyze()
        per_photo = lambda seconds: seconds / (3 * len(keys)) * 1000
        after = stage_seconds(port)
        stages = {s: per_photo(after[s] - stages[s]) for s in STAGES}
        return per_photo(cpu_seconds(server.pid) - start), {**stages, "peak_rss_mib": peak_rss_mib(server.pid)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=["ocr", "faces", "both", "objects"])
    ap.add_argument("binaries", nargs="+", help="NAME=PATH of a release clipfn binary")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    setup = setup_env()
    faces = {"CLIPFN_FACE_MODEL": setup["CLIPFN_TEST_FACES_REAL"]}
    ocr = {"CLIPFN_OCR_MODEL": setup["CLIPFN_TEST_OCR"]}
    objects = {"CLIPFN_OBJECT_MODEL": setup["CLIPFN_TEST_OBJECTS"]}
    folder, models, body = {
        "ocr": ("ocr", ocr, {"ocr": True}),
        "faces": ("faces", faces, {"faces": True}),
        "both": ("faces", {**faces, **ocr}, {"faces": True, "ocr": True}),
        # Human's CenterNet on the face photos: people, and what they hold.
        "objects": ("faces", objects, {"objects": True}),
    }[args.workload]
    photos = Path(setup["CLIPFN_PHOTOS_DIR"])
    keys = sorted(f"{folder}/{p.name}" for p in (photos / folder).iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    assert keys, f"no photos in {photos / folder}"
    env = {**setup, **models, "CLIPFN_MODEL": setup["CLIPFN_TEST_MODEL"], "CLIPFN_STORE": f"file://{photos}",
           "RUST_LOG": "warn", "CLIPFN_REQUEST_TIMEOUT_MS": "600000"}
    binaries = dict(b.split("=", 1) for b in args.binaries)
    results = {name: [] for name in binaries}
    for round_ in range(args.rounds):
        for name, binary in binaries.items():
            ms, stages = one_server(binary, env, keys, body)
            results[name].append((ms, stages))
            print(f"{args.workload} {name} round {round_ + 1}: {ms:.1f} CPU ms a photo; {wall(stages)}", flush=True)
    for name, runs in results.items():
        medians = {s: statistics.median(stages[s] for _, stages in runs) for s in [*STAGES, "peak_rss_mib"]}
        print(f"{args.workload} {name}: median {statistics.median(ms for ms, _ in runs):.1f} CPU ms a photo "
              f"({', '.join(f'{ms:.0f}' for ms, _ in runs)}; {len(keys)} photos x 3 a round); {wall(medians)}")


def wall(stages: dict) -> str:
    """The stages that ran, as worker wall ms a photo, and the server's peak RSS."""
    ran = ", ".join(f"{s} {ms:.1f}" for s, ms in stages.items() if s in STAGES and ms > 0)
    return f"worker ms a photo: {ran}; peak RSS {stages['peak_rss_mib']:.0f} MiB"


if __name__ == "__main__":
    main()
