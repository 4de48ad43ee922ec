#!/usr/bin/env python3
"""How a large faces + OCR request shares the one model worker with small /v1/embed requests
(issue 47, docs/bench/fairness.md). Standard library only; everything on loopback.

It starts `clipfn serve` (BINARY) on a folder store of copies of the real face photos and OCR
photos (repeated to KEYS keys) and four other photos, with the real face models
(CLIPFN_TEST_FACES_REAL) and PP-OCRv4 (CLIPFN_TEST_OCR) from .cache/clipfn.env, then per run:

- idle: EMBEDS /v1/embed requests of 4 photos, one after another, nothing else running;
- busy: one /v1/analyze request of the KEYS face and OCR photos (faces, text, embeddings) and,
  while it runs, /v1/embed requests of the same 4 photos one after another; only those that
  started and ended inside the large request count.

  tools/fairness.py --binary target/release/clipfn [--runs 3] [--embeds 40] [--keys 100]
                    [--max-seconds 1200] [--env KEY=VALUE ...]

prints each run's p50 and p95 (seconds) idle and busy, the large request's time, the slowest busy
requests with their stage timings, each tower's mean run time from /metrics, and the medians over
the runs, as JSON. Bounded: at most RUNS large requests, EMBEDS idle requests a run, and the
whole within MAX_SECONDS (the server is killed then).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png"}


def setup_env():
    path = REPO / ".cache/clipfn.env"
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key] = value
    return values


def photos_in(folder):
    return sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in PHOTO_SUFFIXES)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body, timeout):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.load(response)
    return answer


def stage_seconds(base):
    """`clipfn_stage_duration_seconds`' sum and count by stage, from /metrics."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as response:
        text = response.read().decode()
    stages = {}
    for line in text.splitlines():
        for part in ("sum", "count"):
            prefix = f"clipfn_stage_duration_seconds_{part}{{"
            if line.startswith(prefix):
                labels, value = line[len(prefix):].rsplit(" ", 1)
                stage = labels.split('stage="', 1)[1].split('"', 1)[0]
                stages.setdefault(stage, {})[part] = float(value)
    return stages


def percentile(values, q):
    """The nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summary(latencies):
    return {"n": len(latencies), "p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
            "max": max(latencies)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=str(REPO / "target/release/clipfn"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--embeds", type=int, default=40, help="idle /v1/embed requests a run")
    parser.add_argument("--keys", type=int, default=100, help="photos in the large request")
    parser.add_argument("--max-seconds", type=float, default=1200)
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    args = parser.parse_args()
    assert 1 <= args.runs <= 10 and 1 <= args.embeds <= 500 and 1 <= args.keys <= 100
    started = time.monotonic()
    env = setup_env()

    store = Path(tempfile.mkdtemp(prefix="clipfn-fairness-"))
    server = None
    try:
        # The large request: the face photos and the OCR photos, repeated to KEYS keys. Copies,
        # not links: the file store refuses links out of its root.
        sources = photos_in(env["CLIPFN_TEST_FACE_PHOTOS"]) + photos_in(env["CLIPFN_TEST_OCR_PHOTOS"])
        for i, source in enumerate(sources):
            shutil.copyfile(source, store / f"big-{i}{source.suffix.lower()}")
        big = [f"big-{i % len(sources)}{sources[i % len(sources)].suffix.lower()}" for i in range(args.keys)]
        # The small requests: four camera photos (Debian wallpapers).
        small = []
        for i, source in enumerate(photos_in(Path(env["CLIPFN_PHOTOS_DIR"]) / "wallpapers")[:4]):
            shutil.copyfile(source, store / f"small-{i}.jpg")
            small.append(f"small-{i}.jpg")

        port = free_port()
        server_env = {
            "PATH": os.environ.get("PATH", ""),
            "PORT": str(port),
            "RUST_LOG": "warn",
            "ORT_DYLIB_PATH": env["ORT_DYLIB_PATH"],
            "CLIPFN_MODEL": env["CLIPFN_TEST_MODEL"],
            "CLIPFN_FACE_MODEL": env["CLIPFN_TEST_FACES_REAL"],
            "CLIPFN_OCR_MODEL": env["CLIPFN_TEST_OCR"],
            "CLIPFN_STORE": f"file://{store}",
            "CLIPFN_REQUEST_TIMEOUT_MS": "600000",
        }
        server_env.update(kv.split("=", 1) for kv in args.env)
        log = open(store / "server.log", "wb")
        server = subprocess.Popen([args.binary, "serve"], env=server_env, stdout=subprocess.DEVNULL, stderr=log)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/readyz", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("clipfn did not get ready:\n" + (store / "server.log").read_text()[-4000:])
            time.sleep(0.2)

        def remaining():
            left = args.max_seconds - (time.monotonic() - started)
            if left <= 0:
                sys.exit("out of time (--max-seconds)")
            return left

        def embed():
            t = time.monotonic()
            answer = post(base, "/v1/embed", {"images": small}, timeout=min(300, remaining()))
            assert all("embedding" in item for item in answer["data"]), answer
            return time.monotonic() - t, answer["timings_ms"]

        for _ in range(3):  # first requests: the page cache, the allocator
            embed()
        runs = []
        for run in range(args.runs):
            idle = [embed()[0] for _ in range(args.embeds)]
            done = threading.Event()
            result = {}
            large_started = time.monotonic()

            def large():
                t = large_started
                try:
                    answer = post(base, "/v1/analyze", {"images": big}, timeout=remaining())
                    result["errors"] = sum("error" in item for item in answer["data"])
                    result["faces"] = sum(len(item.get("faces") or []) for item in answer["data"])
                    result["lines"] = sum(len(item.get("ocr") or []) for item in answer["data"])
                finally:
                    result["seconds"] = time.monotonic() - t
                    done.set()

            stages_before = stage_seconds(base)
            thread = threading.Thread(target=large)
            thread.start()
            busy, slowest = [], []
            while not done.is_set():
                sent = time.monotonic() - large_started
                latency, timings = embed()
                if not done.is_set():  # one that ended after the large request does not count
                    busy.append(latency)
                    slowest.append({"sent_s": round(sent, 2), "seconds": round(latency, 3), "timings_ms": timings})
            thread.join()
            if not busy:
                sys.exit("no /v1/embed request ran inside the large request")
            slowest = sorted(slowest, key=lambda e: -e["seconds"])[:3]
            # What each of the worker's towers took a run (a batch; a photo for fetch, decode,
            # queue), in milliseconds, while the large request and the small ones ran.
            stages_after = stage_seconds(base)
            towers = {}
            for stage, after in stages_after.items():
                before = stages_before.get(stage, {})
                count = after.get("count", 0) - before.get("count", 0)
                if count:
                    mean = (after.get("sum", 0) - before.get("sum", 0)) / count
                    towers[stage] = {"runs": int(count), "mean_ms": round(1000 * mean, 1)}
            runs.append({"idle": summary(idle), "busy": summary(busy), "large": result, "slowest_busy": slowest,
                         "stages": towers})
            print(json.dumps({"run": run, **runs[-1]}), file=sys.stderr, flush=True)

        medians = {
            f"{phase}_{q}": statistics.median(r[phase][q] for r in runs)
            for phase in ("idle", "busy") for q in ("p50", "p95")
        }
        medians["busy_max"] = statistics.median(r["busy"]["max"] for r in runs)
        medians["large_seconds"] = statistics.median(r["large"]["seconds"] for r in runs)
        medians["busy_p95_over_idle_p95"] = medians["busy_p95"] / medians["idle_p95"]
        print(json.dumps({"runs": runs, "median": medians,
                          "settings": {"keys": args.keys, "embeds": args.embeds, "env": args.env,
                                       "cpus": os.cpu_count()}}, indent=1))
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
