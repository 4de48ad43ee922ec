#!/usr/bin/env python3
"""A/B of clipfn release binaries on Immich's protocol: photos/s and p95 in turns, one round each.

  immich_ab.py NAME=BINARY... [--rounds 3] [--clients 8] [--seconds 30] [--warmup 3] [VAR=VALUE ...]

Immich sends one photo per `/predict` request (its multipart form, CLIP only), from its job queue,
at its smart-search concurrency. For each round, each binary in turn: `clipfn serve` with the
ViT-B/32-architecture model (CLIPFN_BENCH_MODEL: tools/setup.sh --bench; else the test model) and
the wallpapers as the photos; --warmup seconds of closed-loop load from --clients clients, then
--seconds measured: photos answered over those seconds, and the p95 of the requests answered in
them. Prints each round, then each binary's medians (run 3 rounds or more: a single round on a
2-core machine moves by up to 10%). VAR=VALUE arguments go to every server (CLIPFN_BATCH_PADDING=pad,
say). The servers listen on loopback only.

Build an older commit's binary with a worktree (tools/cpu_ab.py says how).
"""
import argparse
import http.client
import statistics
import threading
import time
from pathlib import Path

from cpu_ab import setup_env, started_server

BOUNDARY = "----formdata-undici-0421337"
ENTRIES = b'{"clip":{"visual":{"modelName":"ViT-B-32__openai"}}}'


def form(photo: bytes) -> bytes:
    """Immich's form for a photo's CLIP embedding, as undici's FormData writes it (tests/it/common/immich.rs)."""
    head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="entries"\r\n\r\n'.encode()
    blob = (f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="blob"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    return head + ENTRIES + blob + photo + f"\r\n--{BOUNDARY}--\r\n".encode()


def load(port: int, bodies: list, clients: int, warmup: float, seconds: float) -> tuple:
    """(photos/s, p95 s) of the requests answered within the measured window."""
    start = time.monotonic() + warmup
    stop = start + seconds
    answered, failures, lock = [], [], threading.Lock()

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        i = k
        while time.monotonic() < stop:
            t0 = time.monotonic()
            conn.request("POST", "/predict", bodies[i % len(bodies)],
                         {"content-type": f"multipart/form-data; boundary={BOUNDARY}"})
            response = conn.getresponse()
            response.read()
            t1 = time.monotonic()
            with lock:
                (answered if response.status == 200 else failures).append((t0, t1))
            i += clients

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, f"{len(failures)} requests failed"
    window = [t1 - t0 for t0, t1 in answered if start <= t1 <= stop]
    assert window, "no request answered in the window"
    return len(window) / seconds, statistics.quantiles(window, n=20)[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+", help="NAME=PATH of a release clipfn binary, or VAR=VALUE for every server")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=3)
    args = ap.parse_intermixed_args()
    setup = setup_env()
    model = setup.get("CLIPFN_BENCH_MODEL") or setup["CLIPFN_TEST_MODEL"]
    photos = sorted((Path(setup["CLIPFN_PHOTOS_DIR"]) / "wallpapers").glob("*.jpg"))
    assert photos, "no wallpapers: run tools/setup.sh"
    bodies = [form(p.read_bytes()) for p in photos]
    extra = {k: v for k, v in (a.split("=", 1) for a in args.binaries) if k.startswith("CLIPFN_")}
    binaries = {k: v for k, v in (a.split("=", 1) for a in args.binaries) if k not in extra}
    env = {**setup, **extra, "CLIPFN_MODEL": model, "RUST_LOG": "warn", "CLIPFN_MAX_QUEUED_IMAGES": "4096"}
    print(f"model {Path(model).name}, {len(photos)} photos, {args.clients} clients, {args.seconds} s a round; {extra}")
    results = {name: [] for name in binaries}
    for round_ in range(args.rounds):
        for name, binary in binaries.items():
            with started_server(binary, env) as server:
                rate, p95 = load(server.port, bodies, args.clients, args.warmup, args.seconds)
            results[name].append((rate, p95))
            print(f"{name} round {round_ + 1}: {rate:.1f} photos/s, p95 {p95 * 1000:.0f} ms", flush=True)
    for name, runs in results.items():
        rates, p95s = [r for r, _ in runs], [p for _, p in runs]
        print(f"{name}: median {statistics.median(rates):.1f} photos/s ({', '.join(f'{r:.1f}' for r in rates)}), "
              f"p95 {statistics.median(p95s) * 1000:.0f} ms ({', '.join(f'{p * 1000:.0f}' for p in p95s)})")


if __name__ == "__main__":
    main()
