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

With --ocr (infra/soak.sh --ocr serves tools/ocr_photos.py's photos with text instead of the
wallpapers), clipfn runs with PP-OCRv4's real weights (CLIPFN_OCR_MODEL) and the load posts
4-8 photos a request to /v1/analyze, so every photo is read too; write its figures elsewhere
(--report).

With --image (infra/soak.sh --image, which runs this under tools/image-check.sh --then, so that
DOCKER_HOST is image-check's own dockerd and clipfn-check:cpu was just built from ./Dockerfile):
a long run of the CPU image itself, see image_soak() below. It writes --out (summary.md,
summary.json), never docs/reliability.md.
"""
import argparse
import calendar
import importlib.util
import json
import os
import random
import re
import shutil
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
# docs/reliability.md's heading for the --image run, which the process soak's report keeps.
IMAGE_SECTION = "## 4. The CPU image"


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
    if args.ocr:
        child_env["CLIPFN_OCR_MODEL"] = env["CLIPFN_TEST_OCR"]
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
    photos = ["MIN_PHOTOS=4", "MAX_PHOTOS=8", "ENDPOINT=/v1/analyze"] if args.ocr else ["MIN_PHOTOS=30", "MAX_PHOTOS=50"]
    rc = subprocess.call([k6, "run", "--quiet", "--no-color", "-e", f"BASE_URL={url}",
                          "-e", f"PHOTOS_FILE={photos_file}", "-e", f"VUS={args.vus}",
                          "-e", f"DURATION={args.minutes}m", *[a for p in photos for a in ("-e", p)],
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
        "behind a fault proxy."
        + (" **With OCR** (PP-OCRv4's real weights) on tools/ocr_photos.py's photos, 4-8 a request to "
           "`/v1/analyze`." if args.ocr else ""),
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
    # The image soak's section (infra/soak.sh --image, written by hand from its summary) stays.
    kept = ""
    if os.path.exists(path):
        previous = open(path).read()
        at = previous.find("\n" + IMAGE_SECTION)
        kept = previous[at + 1:] if at >= 0 else ""
    with open(path, "w") as out:
        out.write("\n".join(lines) + ("\n" + kept if kept else ""))


# ---------------------------------------------------------------------------
# --image: a long run of the CPU image itself
# ---------------------------------------------------------------------------
#
# The image runs as tools/image_check.py runs it (its own non-root user, --read-only with a tmpfs
# /tmp, --network=host to reach the GCS emulator on loopback), here under --memory 1g
# --memory-swap 1g --cpus 2 (Cloud Run's smallest shape that fits the model, no swap), with the
# generated test model and the sample photos in fake-gcs-server as image_check.py serves them
# (gs://models/clip-test.onnx, gs://photos/...). k6 drives the album app's shape (infra/k6/load.js:
# 30-50 photos a request, 3-5 s think time, --vus users). Every --sample-s seconds: the RSS of the
# container's process (VmRSS of its PID 1, clipfn), the cgroup's memory use (what --memory limits,
# page cache included) and its rss, `docker stats`' figure, the CPU the container and the whole
# machine used, and the cgroup's OOM-kill count. At the end: docker inspect's State.OOMKilled.


def duration_s(text):
    """'20m', '1h', '1h30m', '90s', '45' (seconds) -> seconds."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (20m, 1h, 1h30m, 90s)")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def load_image_check():
    """tools/image_check.py as a module: its emulator (Stack), Docker wrapper and container flags."""
    spec = importlib.util.spec_from_file_location("image_check", os.path.join(REPO, "tools/image_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_int(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_keyed(path):
    """'key value' lines (memory.stat, memory.oom_control, memory.events) as a dict."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if value.strip().lstrip("-").isdigit():
                    out[key] = int(value)
    except OSError:
        pass
    return out


class ContainerCgroup:
    """The container's memory and CPU accounting, cgroup v1 or v2, found from its PID 1's
    /proc/PID/cgroup (any cgroup driver), else docker's usual folders."""

    def __init__(self, cid, pid):
        self.v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        self.memory = self.cpu = None
        paths = {}
        try:
            for line in open(f"/proc/{pid}/cgroup"):
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    paths[c] = path
        except OSError:
            pass
        if self.v2:
            candidates = [paths.get(""), f"/docker/{cid}", f"/system.slice/docker-{cid}.scope"]
            for rel in filter(None, candidates):
                if os.path.exists(f"/sys/fs/cgroup{rel}/memory.current"):
                    self.memory = self.cpu = f"/sys/fs/cgroup{rel}"
                    break
        else:
            for rel in filter(None, [paths.get("memory"), f"/docker/{cid}"]):
                if os.path.exists(f"/sys/fs/cgroup/memory{rel}/memory.usage_in_bytes"):
                    self.memory = f"/sys/fs/cgroup/memory{rel}"
                    break
            for rel in filter(None, [paths.get("cpuacct") or paths.get("cpu,cpuacct"), f"/docker/{cid}"]):
                for root in ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"):
                    if os.path.exists(f"{root}{rel}/cpuacct.usage"):
                        self.cpu = f"{root}{rel}"
                        break
                if self.cpu:
                    break

    def sample(self):
        """usage (bytes, what the limit counts), rss (anonymous memory), cache, peak, oom_kill, failcnt, cpu_ns."""
        m, out = self.memory, {}
        if m and self.v2:
            stat, events = read_keyed(f"{m}/memory.stat"), read_keyed(f"{m}/memory.events")
            out = {"usage": read_int(f"{m}/memory.current"), "rss": stat.get("anon"), "cache": stat.get("file"),
                   "peak": read_int(f"{m}/memory.peak"), "oom_kill": events.get("oom_kill"), "failcnt": events.get("max")}
        elif m:
            stat = read_keyed(f"{m}/memory.stat")
            out = {"usage": read_int(f"{m}/memory.usage_in_bytes"), "rss": stat.get("total_rss", stat.get("rss")),
                   "cache": stat.get("total_cache", stat.get("cache")),
                   "peak": read_int(f"{m}/memory.max_usage_in_bytes"),
                   "oom_kill": read_keyed(f"{m}/memory.oom_control").get("oom_kill"),
                   "failcnt": read_int(f"{m}/memory.failcnt")}
        if self.cpu and self.v2:
            usec = read_keyed(f"{self.cpu}/cpu.stat").get("usage_usec")
            out["cpu_ns"] = usec * 1000 if usec is not None else None
        elif self.cpu:
            out["cpu_ns"] = read_int(f"{self.cpu}/cpuacct.usage")
        return out


def proc_status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def process_cpu_s(pid):
    """User plus system CPU seconds of a process, all its threads, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def machine_cpu():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def docker_stats_bytes(docker, cid):
    """`docker stats`' memory figure (usage less page cache), in bytes."""
    proc = docker.run("stats", "--no-stream", "--format", "{{.MemUsage}}", cid, check=False, timeout=60)
    m = re.match(r"\s*([0-9.]+)\s*([A-Za-z]+)", proc.stdout)
    return float(m.group(1)) * UNITS.get(m.group(2), 0) if m and m.group(2) in UNITS else None


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def read_k6_points(path, t_start):
    """From k6's JSON output: per request (seconds since the load began, duration ms, status), and
    the per-photo error codes."""
    requests, item_errors = [], {}
    if not os.path.exists(path):
        return requests, item_errors
    with open(path) as f:
        for line in f:
            if '"Point"' not in line:
                continue
            point = json.loads(line)
            metric, data = point.get("metric"), point.get("data", {})
            if metric == "http_req_duration":
                when = data["time"]
                # RFC 3339 with nanoseconds and an offset; seconds are enough.
                stamp = calendar.timegm(time.strptime(when[:19], "%Y-%m-%dT%H:%M:%S"))
                offset = re.search(r"([+-])(\d\d):(\d\d)$", when)
                if offset:
                    sign = 1 if offset.group(1) == "+" else -1
                    stamp -= sign * (int(offset.group(2)) * 3600 + int(offset.group(3)) * 60)
                requests.append((stamp - t_start, data["value"], data.get("tags", {}).get("status", "?")))
            elif metric == "embed_item_errors":
                code = data.get("tags", {}).get("code", "?")
                item_errors[code] = item_errors.get(code, 0) + int(data.get("value", 1))
    return requests, item_errors


def lay_out_bucket(data, model):
    """The photos bucket as infra/local-stack.sh fills it (every image of the sample wallpapers) and
    the models bucket as image_check.py fills it (the generated test model)."""
    env = env_file()
    source = os.environ.get("CLIPFN_STACK_PHOTOS") or os.path.join(env.get("CLIPFN_PHOTOS_DIR", os.path.join(REPO, ".cache/photos")), "wallpapers")
    exts = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")
    os.makedirs(os.path.join(data, "photos"))
    os.makedirs(os.path.join(data, "models"))
    keys = []
    for name in sorted(os.listdir(source)):
        if name.lower().endswith(exts) and os.path.isfile(os.path.join(source, name)):
            shutil.copy(os.path.join(source, name), os.path.join(data, "photos", name))
            keys.append(name)
    if not keys:
        sys.exit(f"soak: no photos in {source}: run tools/setup.sh")
    model = model or os.environ.get("CLIPFN_TEST_MODEL") or env.get("CLIPFN_TEST_MODEL")
    if not model or not os.path.isfile(model):
        sys.exit("soak: no test model: run tools/setup.sh (CLIPFN_TEST_MODEL), or give --model")
    shutil.copy(model, os.path.join(data, "models", "model.onnx"))
    return keys, model


def image_soak(args):
    """The --image run; writes args.out/summary.{md,json}, exits 1 when it did not pass."""
    ic = load_image_check()
    docker = ic.Docker(os.environ.get("CLIPFN_DOCKER", "/usr/bin/docker"))
    if not os.environ.get("DOCKER_HOST"):
        print("soak: DOCKER_HOST is not set: run through infra/soak.sh --image (tools/image-check.sh --then)", file=sys.stderr)
    image_info = docker.inspect(args.tag)
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="clipfn-soak-image.")
    stack = ic.Stack(ic.Path(work))
    cid, started_at = None, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        keys, model = lay_out_bucket(str(stack.data), args.model)
        stack.start()
        photos_file = os.path.join(work, "photos.txt")
        with open(photos_file, "w") as f:
            f.write("\n".join(keys) + "\n")
        port = ic.free_port()
        env = {**stack.env(), "CLIPFN_MODEL": "gs://models/model.onnx", "CLIPFN_STORE": "gs://photos",
               "CLIPFN_PROVIDER": "cpu", "CLIPFN_LOG_FORMAT": "json"}
        flags = ic.container_args(env, port, memory=args.memory, extra=["--cpus", args.cpus])
        t_run = time.monotonic()
        cid = docker.run("run", "-d", *flags, args.tag).stdout.strip()
        ready, body = ic.wait_ready(port, lambda: docker.running(cid))
        ready_s = time.monotonic() - t_run
        if not ready:
            sys.exit(f"soak: the image did not become ready: {body}; logs: {docker.logs(cid)[-1500:]}")
        state = docker.inspect(cid)
        pid = state["State"]["Pid"]
        cgroup = ContainerCgroup(cid, pid)
        print(f"soak: {args.tag} ready in {ready_s:.1f} s on port {port}, pid {pid}, cgroup memory {cgroup.memory}, "
              f"cpu {cgroup.cpu}; {len(keys)} photos; {args.vus} VUs for {args.duration:.0f} s", file=sys.stderr)

        samples, stop = [], threading.Event()
        t0 = time.monotonic()
        wall0 = time.time()
        k6_proc = []

        def take():
            c = cgroup.sample()
            busy, total = machine_cpu()
            sample = {"t_s": round(time.monotonic() - t0, 1), "rss_kib": proc_status_kib(pid, "VmRSS"),
                      "anon_kib": proc_status_kib(pid, "RssAnon"), "hwm_kib": proc_status_kib(pid, "VmHWM"),
                      "cpu_s": process_cpu_s(pid), "docker_stats_bytes": docker_stats_bytes(docker, cid),
                      "machine_busy": busy, "machine_total": total, "loadavg": open("/proc/loadavg").read().split()[0],
                      **{f"cgroup_{k}": v for k, v in c.items()}}
            running = docker.running(cid)
            sample["running"] = running
            samples.append(sample)
            mib = lambda b: f"{b / 2**20:.0f}" if b is not None else "?"
            print(f"soak: t={sample['t_s']:.0f}s rss={(sample['rss_kib'] or 0) / 1024:.0f} MiB "
                  f"cgroup={mib(c.get('usage'))} MiB stats={mib(sample['docker_stats_bytes'])} MiB "
                  f"oom_kill={c.get('oom_kill')} load={sample['loadavg']}", file=sys.stderr, flush=True)
            if not running and k6_proc:
                print("soak: the container stopped; ending the load", file=sys.stderr)
                k6_proc[0].terminate()

        def sampler():
            take()
            while not stop.wait(args.sample_s):
                take()

        sampler_thread = threading.Thread(target=sampler, daemon=True)
        sampler_thread.start()
        summary_path, points_path = os.path.join(work, "k6-summary.json"), os.path.join(work, "k6-points.json")
        k6 = os.environ.get("CLIPFN_K6_BIN") or env_file().get("CLIPFN_K6_BIN") or os.path.join(REPO, ".venv/bin/k6")
        k6_wall0 = time.time()
        k6_proc.append(subprocess.Popen(
            [k6, "run", "--quiet", "--no-color", "--out", f"json={points_path}", "-e", f"BASE_URL=http://127.0.0.1:{port}",
             "-e", f"PHOTOS_FILE={photos_file}", "-e", f"VUS={args.vus}", "-e", f"DURATION={args.duration:.0f}s",
             "-e", "MIN_PHOTOS=30", "-e", "MAX_PHOTOS=50", "-e", "THINK_MIN_S=3", "-e", "THINK_MAX_S=5",
             "-e", "REQUEST_TIMEOUT=120s", "-e", "EXPECT_DIM=0", "-e", f"SUMMARY_JSON={summary_path}",
             os.path.join(REPO, "infra/k6/load.js")], env=dict(os.environ, no_proxy="127.0.0.1,localhost")))
        k6_rc = k6_proc[0].wait()
        load_s = time.monotonic() - t0
        stop.set()
        sampler_thread.join()
        take()  # one after the load: what it holds once idle
        state = docker.inspect(cid)
        logs = docker.logs(cid)
        with open(os.path.join(args.out, "clipfn.log"), "w") as f:
            f.write(logs[-200_000:])
        metrics = json.load(open(summary_path))["metrics"] if os.path.exists(summary_path) else {}
        requests, item_errors = read_k6_points(points_path, k6_wall0)
    finally:
        if cid:
            docker.rm(cid)
        stack.stop()
        shutil.rmtree(work, ignore_errors=True)

    result = summarise_image_soak(args, image_info, model, keys, ready_s, load_s, k6_rc, metrics, requests,
                                  item_errors, samples, state, started_at, wall0)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(result, f, indent=2)
    markdown = image_soak_markdown(result)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(markdown)
    print(markdown)
    print(f"soak: wrote {args.out}/summary.md and summary.json", file=sys.stderr)
    return 0 if result["ok"] else 1


def summarise_image_soak(args, image_info, model, keys, ready_s, load_s, k6_rc, metrics, requests, item_errors,
                         samples, state, started_at, wall0):
    value = lambda name, key: metrics.get(name, {}).get("values", {}).get(key, 0)
    mib = lambda b: round(b / 2**20, 1) if b is not None else None
    during = [s for s in samples[:-1]] or samples
    rss = [(s["t_s"], s["rss_kib"] / 1024) for s in during if s["rss_kib"] is not None]
    warm = [m for t, m in rss if 60 <= t <= 240] or [m for _, m in rss[: max(1, len(rss) // 5)]]
    tail = [m for _, m in rss[-max(1, len(rss) // 10):]]
    statuses = {}
    for _, _, status in requests:
        statuses[status] = statuses.get(status, 0) + 1
    non_200 = {s: n for s, n in statuses.items() if s != "200"}
    # p95 per window of a quarter of the run (at least 5 minutes): does latency drift?
    window = max(300.0, load_s / 4)
    windows = []
    start = 0.0
    while start < load_s - 1:
        ms = [v for t, v, _ in requests if start <= t < start + window]
        if ms:
            windows.append({"from_min": round(start / 60, 1), "to_min": round(min(start + window, load_s) / 60, 1),
                            "requests": len(ms), "p95_s": round(percentile(ms, 0.95) / 1000, 2)})
        start += window
    # CPU: the container's and the whole machine's, in cores, over the load.
    first, last = samples[0], samples[-2] if len(samples) > 1 else samples[-1]
    elapsed = max(last["t_s"] - first["t_s"], 1e-9)
    # clipfn's own CPU time (/proc/PID/stat), and the cgroup's accounting as a cross-check.
    container_cores = ((last.get("cpu_s") or 0) - (first.get("cpu_s") or 0)) / elapsed
    cgroup_cores = ((last.get("cgroup_cpu_ns") or 0) - (first.get("cgroup_cpu_ns") or 0)) / 1e9 / elapsed
    jiffy = os.sysconf("SC_CLK_TCK")
    machine_cores = (last["machine_busy"] - first["machine_busy"]) / jiffy / elapsed
    oom_counts = [s.get("cgroup_oom_kill") for s in samples if s.get("cgroup_oom_kill") is not None]
    result = {
        "started": started_at,
        "image": args.tag, "image_id": image_info["Id"][:19], "image_created": image_info.get("Created", "")[:19],
        "image_size_mb": round(image_info.get("Size", 0) / 1e6),
        "docker_run": f"--memory {args.memory} --memory-swap {args.memory} --cpus {args.cpus} --read-only --tmpfs /tmp --network=host",
        "model": os.path.basename(model), "model_mb": round(os.path.getsize(model) / 1e6, 1),
        "photos": len(keys), "vus": args.vus, "photos_per_request": "30-50", "think_s": "3-5",
        "host_cores": os.cpu_count(), "ready_s": round(ready_s, 1),
        "planned_s": args.duration, "load_s": round(load_s), "k6_exit": k6_rc,
        "requests": int(value("http_reqs", "count")) or len(requests),
        "non_200": non_200,
        "photos_sent": int(value("embed_item_ok", "passes") + value("embed_item_ok", "fails")),
        "photo_errors": item_errors, "photo_errors_total": int(value("embed_item_errors", "count")),
        "failed_checks": int(value("checks", "fails")),
        "latency_s": {k: round(value("http_req_duration", key) / 1000, 2)
                      for k, key in (("p50", "med"), ("p95", "p(95)"), ("p99", "p(99)"), ("max", "max"))},
        "server_total_p95_s": round(value("embed_server_total_ms", "p(95)") / 1000, 2),
        "p95_by_window": windows,
        "rss_mib": {"idle_after_ready": round(rss[0][1], 1) if rss else None,
                    "warm": round(statistics.median(warm), 1) if warm else None,
                    "peak_sampled": round(max(m for _, m in rss), 1) if rss else None,
                    "peak_vmhwm": round(max((s["hwm_kib"] or 0) for s in samples) / 1024, 1),
                    "end": round(statistics.median(tail), 1) if tail else None,
                    "after_load": round(samples[-1]["rss_kib"] / 1024, 1) if samples[-1]["rss_kib"] else None},
        "cgroup_mib": {"peak": mib(max((s.get("cgroup_peak") or 0) for s in samples) or None),
                       "max_sampled": mib(max((s.get("cgroup_usage") or 0) for s in samples) or None),
                       "end": mib(samples[-2].get("cgroup_usage") if len(samples) > 1 else None)},
        "limit_hits": max((s.get("cgroup_failcnt") or 0) for s in samples),
        "cpu_cores": {"clipfn": round(container_cores, 2), "cgroup": round(cgroup_cores, 2),
                      "machine": round(machine_cores, 2)},
        "oom_killed": bool(state["State"].get("OOMKilled")),
        "cgroup_oom_kill": max(oom_counts) if oom_counts else None,
        "restarts": state.get("RestartCount", 0),
        "running_at_end": bool(state["State"].get("Running")),
        "samples": [{"t_s": s["t_s"], "rss_mib": round((s["rss_kib"] or 0) / 1024, 1),
                     "anon_mib": round((s["anon_kib"] or 0) / 1024, 1),
                     "cgroup_mib": mib(s.get("cgroup_usage")), "cgroup_rss_mib": mib(s.get("cgroup_rss")),
                     "docker_stats_mib": mib(s.get("docker_stats_bytes")), "loadavg": s["loadavg"],
                     "oom_kill": s.get("cgroup_oom_kill")} for s in samples],
    }
    r = result
    r["rss_change"] = round(r["rss_mib"]["end"] / r["rss_mib"]["warm"] - 1, 3) if r["rss_mib"]["warm"] else None
    r["ok"] = bool(r["requests"] > 0 and not non_200 and r["photo_errors_total"] == 0 and r["failed_checks"] == 0
                   and not r["oom_killed"] and not r["cgroup_oom_kill"] and r["running_at_end"]
                   and r["rss_change"] is not None and abs(r["rss_change"]) <= 0.10)
    return r


def image_soak_markdown(r):
    fmt = lambda d: ", ".join(f"{k}: {v}" for k, v in sorted(d.items())) or "none"
    rows = r["samples"]
    step = max(1, len(rows) // 12)
    shown = rows[::step] + ([rows[-1]] if (len(rows) - 1) % step else [])
    lines = [
        f"## Image soak: `{r['image']}` under `docker run --memory` ({'pass' if r['ok'] else 'FAIL'})",
        "",
        f"Started {r['started']}: image {r['image_id']} ({r['image_size_mb']} MB), `{r['docker_run']}`, "
        f"model {r['model']} ({r['model_mb']} MB) and {r['photos']} photos from fake-gcs-server; {r['host_cores']} host cores. "
        f"Ready {r['ready_s']} s after `docker run`. Load: {r['vus']} virtual users, {r['photos_per_request']} photos a request, "
        f"{r['think_s']} s think time (infra/k6/load.js), for {r['load_s'] / 60:.1f} minutes "
        f"(planned {r['planned_s'] / 60:.1f}).",
        "",
        "| requests | non-200 | photos sent | photo errors | failed checks | p50 s | p95 s | p99 s | max s | OOMKilled | cgroup oom_kill |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {r['requests']} | {fmt(r['non_200'])} | {r['photos_sent']} | {fmt(r['photo_errors'])} | {r['failed_checks']} "
        f"| {r['latency_s']['p50']} | {r['latency_s']['p95']} | {r['latency_s']['p99']} | {r['latency_s']['max']} "
        f"| {r['oom_killed']} | {r['cgroup_oom_kill']} |",
        "",
        f"RSS of clipfn (VmRSS): {r['rss_mib']['idle_after_ready']} MiB idle after ready, {r['rss_mib']['warm']} MiB warm "
        f"(median of minutes 1-4), {r['rss_mib']['end']} MiB at the end (median of the last tenth), change "
        f"{(r['rss_change'] or 0):+.1%}; peak {r['rss_mib']['peak_sampled']} MiB sampled, {r['rss_mib']['peak_vmhwm']} MiB VmHWM; "
        f"{r['rss_mib']['after_load']} MiB after the load. cgroup memory (what --memory counts, page cache included): "
        f"peak {r['cgroup_mib']['peak']} MiB, limit hits {r['limit_hits']}. CPU over the load: clipfn "
        f"{r['cpu_cores']['clipfn']} cores (its cgroup {r['cpu_cores']['cgroup']}), the whole machine "
        f"{r['cpu_cores']['machine']} cores of {r['host_cores']}.",
        "",
        "p95 by window: " + "; ".join(f"{w['from_min']}-{w['to_min']} min: {w['p95_s']} s ({w['requests']} requests)"
                                      for w in r["p95_by_window"]) + ".",
        "",
        "| t min | RSS MiB | of it anonymous | cgroup MiB | cgroup rss MiB | load avg | oom_kill |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in shown:
        lines.append(f"| {s['t_s'] / 60:.1f} | {s['rss_mib']} | {s['anon_mib']} | {s['cgroup_mib']} | {s['cgroup_rss_mib']} "
                     f"| {s['loadavg']} | {s['oom_kill']} |")
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--vus", type=int, default=None, help="virtual users (2; with --image 4)")
    image = ap.add_argument_group("--image: a long run of the CPU image under docker run --memory --cpus")
    image.add_argument("--image", action="store_true")
    image.add_argument("--duration", type=duration_s, default="1h", help="e.g. 20m, 1h, 1h30m (1h)")
    image.add_argument("--tag", default="clipfn-check:cpu", help="the image (tools/image-check.sh's tag)")
    image.add_argument("--memory", default="1g", help="docker run --memory and --memory-swap (1g)")
    image.add_argument("--cpus", default="2", help="docker run --cpus (2)")
    image.add_argument("--sample-s", type=float, default=30, help="seconds between memory samples (30)")
    image.add_argument("--model", default=None, help="ONNX file served as gs://models/ (the test model)")
    image.add_argument("--out", default=os.path.join(REPO, ".cache/soak-image"), help="summary.md, summary.json")
    ap.add_argument("--ocr", action="store_true", help="OCR on every photo (infra/soak.sh --ocr)")
    ap.add_argument("--fault-requests", type=int, default=20)
    ap.add_argument("--stall-s", type=float, default=6)
    ap.add_argument("--fetch-timeout-ms", type=int, default=2000)
    ap.add_argument("--request-timeout-ms", type=int, default=15000)
    ap.add_argument("--bin", default=os.path.join(REPO, "target/debug/clipfn"))
    ap.add_argument("--report", default=os.path.join(REPO, "docs/reliability.md"))
    args = ap.parse_args()
    if args.image:
        args.vus = args.vus or 4
        return image_soak(args)
    args.vus = args.vus or 2
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
