#!/usr/bin/env python3
"""Closed-loop HTTP load on a clipfn server over loopback, for tools/gpu-bench.sh (standard library
only: threads + http.client, so it runs on any Python 3.8+, the GPU machine's included).

  gpu_load.py ready --url http://127.0.0.1:P/readyz --since EPOCH [--pid PID] [--timeout 60] [--out F]
      Polls every 20 ms until the first 200; prints {"cold_start_s": s since EPOCH (the moment the
      server was spawned)}; saves the 200's body to F. Exits 1 on the timeout or when PID has died.
  gpu_load.py load --url http://127.0.0.1:P/v1/embed --root DIR --folders a,b --per-request N
                   --clients C --seconds T [--warmup W] [--grace G] [--body '{"faces": true}']
                   [--pid PID] [--max-requests M] [--start-at EPOCH] [--readyz URL] [--no-gpu]
      C clients, each sending its next request as soon as the last is answered, each request N photo
      keys (the files of DIR/a, DIR/b..., interleaved, in turn) plus the --body fields. Requests
      answered in the first W seconds are warm-up and not counted; the figures are those answered
      in the T seconds after it (photos/s = photos answered with no error / T); requests still in
      flight then get G more seconds to finish (counted as "late"), then the clients are dropped.
      With PID, the server's CPU (utime + stime of /proc/PID/stat) over those T seconds, as cores
      busy, and its peak RSS; with nvidia-smi on PATH, the GPU's utilization.gpu sampled every
      0.5 s over them (mean) and its memory.used (max). With --start-at, the clients start at that
      epoch second (two loads given the same one measure the same window: gpu-bench.sh's "beside"
      rows); with --readyz, /readyz's `workers` at the window's start and end: each worker's
      busy_share since start (as read at the end) and its share of the window (busy_seconds' growth
      over the time between the two reads). --no-gpu: no nvidia-smi sampling (the second load of a
      pair; the first samples). Prints one JSON object.
  gpu_load.py row --name N --provider P --model M [--note T] [--ready F] [--readyz F] [--load F]
                  [--stream F] [--error E]
      One row of gpu-bench.sh as JSON, from what the two commands above wrote (missing files: null);
      --stream: the load run beside the row's own, over the same window ("stream" in the row).
  gpu_load.py report ROW.json... [--title T] [--intro TEXT]
      The rows, as a markdown table, what /readyz said per row, and issue 57's ratios where their
      rows are there.

Only loopback addresses are accepted: this is a bench of a server on the same machine.
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".heic", ".avif", ".gif", ".bmp", ".tif", ".tiff")


def loopback(url):
    """(host, port, path) of URL, which must be http:// on a loopback address."""
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or u.hostname not in LOOPBACK and not (u.hostname or "").startswith("127."):
        sys.exit(f"gpu_load: {url}: only http:// on loopback (127.0.0.0/8, localhost, ::1)")
    return u.hostname, u.port or 80, u.path or "/"


def cpu_seconds(pid):
    """The process's user + system CPU seconds, all its threads (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ready(args):
    host, port, path = loopback(args.url)
    deadline, status, body = time.time() + args.timeout, None, b""
    while time.time() < deadline:
        if args.pid and not alive(args.pid):
            print(json.dumps({"cold_start_s": None, "error": "server exited before /readyz answered 200"}))
            return 1
        try:
            conn = http.client.HTTPConnection(host, port, timeout=2)
            conn.request("GET", path)
            resp = conn.getresponse()
            status, body = resp.status, resp.read()
            conn.close()
            if status == 200:
                took = time.time() - args.since
                if args.out:
                    with open(args.out, "wb") as f:
                        f.write(body)
                print(json.dumps({"cold_start_s": round(took, 3)}))
                return 0
        except OSError:
            pass  # not listening yet
        time.sleep(0.02)
    print(json.dumps({"cold_start_s": None, "error": f"no 200 from /readyz in {args.timeout} s (last: {status} "
                      f"{body[:300].decode(errors='replace')})"}))
    return 1


def workers_now(url):
    """/readyz's `workers` now: {"at": epoch s, "workers": [...]} or {"error": why}."""
    host, port, path = loopback(url)
    try:
        conn = http.client.HTTPConnection(host, port, timeout=5)
        conn.request("GET", path)
        resp = conn.getresponse()
        raw, status = resp.read(), resp.status
        conn.close()
        workers = json.loads(raw).get("workers")
    except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
        return {"error": f"/readyz: {type(e).__name__}: {e}"}
    if not isinstance(workers, list):
        return {"error": f"/readyz {status}: no workers in its body"}
    return {"at": time.time(), "workers": workers}


def worker_shares(start, end):
    """Each worker as read at the window's end, with its share of the window: busy_seconds' growth
    over the time between the two reads (None where a read failed or the workers differ)."""
    if "workers" not in end:
        return None
    before = start.get("workers") or []
    same = len(before) == len(end["workers"]) and all(
        a.get("device") == b.get("device") for a, b in zip(before, end["workers"]))
    span = end["at"] - start["at"] if "at" in start else 0
    out = []
    for i, w in enumerate(end["workers"]):
        share = None
        if same and span > 0:
            try:
                share = round((w["busy_seconds"] - before[i]["busy_seconds"]) / span, 3)
            except (KeyError, TypeError):
                pass
        rounded = {k: round(w[k], 3) if isinstance(w.get(k), (int, float)) else w.get(k)
                   for k in ("busy_seconds", "busy_share")}
        out.append({"device": w.get("device"), "towers": w.get("towers"), "healthy": w.get("healthy"),
                    **rounded, "window_busy_share": share})
    return out


def photo_keys(root, folders):
    """Files of each ROOT/folder as keys relative to ROOT, interleaved folder by folder."""
    lists = []
    for folder in folders:
        names = sorted(n for n in os.listdir(os.path.join(root, folder)) if n.lower().endswith(PHOTO_SUFFIXES))
        lists.append([os.path.normpath(os.path.join(folder, n)) for n in names])
    keys = [k for group in zip(*lists) for k in group] + [k for ks in lists for k in ks[min(map(len, lists)):]]
    if not keys:
        sys.exit(f"gpu_load: no photos in {folders} under {root}")
    return keys


class GpuSampler(threading.Thread):
    """utilization.gpu and memory.used every PERIOD s from one-shot nvidia-smi runs (no child outlives us)."""

    def __init__(self, period=0.5):
        super().__init__(daemon=True)
        self.period, self.busy, self.memory = period, [], []
        self.stop = threading.Event()
        self.smi = shutil.which("nvidia-smi")

    def run(self):
        while self.smi and not self.stop.is_set():
            t = time.time()
            try:
                out = subprocess.run([self.smi, "--query-gpu=utilization.gpu,memory.used",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                     timeout=2).stdout.splitlines()
                busy, memory = (float(x) for x in out[0].split(","))  # the first GPU
                self.busy.append(busy)
                self.memory.append(memory)
            except (OSError, subprocess.SubprocessError, ValueError, IndexError):
                pass
            self.stop.wait(max(0.0, self.period - (time.time() - t)))


def load(args):
    host, port, path = loopback(args.url)
    keys = photo_keys(args.root, args.folders.split(","))
    extra = json.loads(args.body)
    lock = threading.Lock()
    state = {"next": 0, "sent": 0}
    done = []  # (start, end, status, photos ok, photo errors {code: n}, error text)
    t0 = args.start_at or time.time()
    time.sleep(max(0.0, t0 - time.time()))
    w0, w1 = t0 + args.warmup, t0 + args.warmup + args.seconds
    give_up = w1 + args.grace

    def body():
        with lock:
            if state["sent"] >= args.max_requests:
                return None
            state["sent"] += 1
            i = state["next"]
            state["next"] = (i + args.per_request) % len(keys)
        images = [keys[(i + j) % len(keys)] for j in range(args.per_request)]
        return json.dumps({"images": images, **extra}).encode()

    def client():
        conn = None
        while time.time() < w1:
            payload = body()
            if payload is None:
                return
            start = time.time()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(host, port, timeout=max(1.0, give_up - start))
                conn.request("POST", path, payload, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                raw, status = resp.read(), resp.status
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    done.append((start, time.time(), None, 0, {}, f"{type(e).__name__}: {e}"))
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)  # a dead server must not make this spin
                continue
            end, ok, errors, text = time.time(), 0, {}, None
            if status == 200:
                for item in json.loads(raw).get("data", []):
                    code = (item.get("error") or {}).get("code") or ("faces_error" if "faces_error" in item else None) \
                        or ("ocr_error" if "ocr_error" in item else None)
                    if code:
                        errors[code] = errors.get(code, 0) + 1
                    else:
                        ok += 1
            else:
                text = raw[:200].decode(errors="replace")
                if status == 429 or status == 503:
                    time.sleep(0.05)
            with lock:
                done.append((start, end, status, ok, errors, text))
        if conn is not None:
            conn.close()

    sampler = GpuSampler()
    if args.no_gpu:
        sampler.smi = None
    cpu, marks = {}, {}

    def window():  # CPU, GPU and the workers over exactly [w0, w1]
        time.sleep(max(0.0, w0 - time.time()))
        if args.pid:
            cpu["start"] = cpu_seconds(args.pid)
        sampler.start()
        if args.readyz:
            marks["start"] = workers_now(args.readyz)
        time.sleep(max(0.0, w1 - time.time()))
        sampler.stop.set()
        if args.pid and alive(args.pid):
            cpu["end"] = cpu_seconds(args.pid)
            cpu["rss"] = peak_rss_mib(args.pid)
        if args.readyz:
            marks["end"] = workers_now(args.readyz)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
    timer = threading.Thread(target=window, daemon=True)
    timer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, give_up - time.time()))
    timer.join(max(0.0, w1 + 12 - time.time()))  # two /readyz reads of at most 5 s each
    abandoned = sum(t.is_alive() for t in threads)  # requests still unanswered at give_up

    with lock:
        rows = list(done)
    counted = [r for r in rows if w0 <= r[1] < w1]
    answered = [r for r in counted if r[2] == 200]
    latencies = sorted(r[1] - r[0] for r in answered)
    photo_errors = {}
    for r in counted:
        for code, n in r[4].items():
            photo_errors[code] = photo_errors.get(code, 0) + n
    statuses = {}
    for r in counted:
        statuses[str(r[2])] = statuses.get(str(r[2]), 0) + 1
    failures = [r[5] for r in counted if r[2] != 200]

    def pct(q):
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)
    result = {
        "endpoint": path, "clients": args.clients, "photos_per_request": args.per_request,
        "extra": extra, "photo_keys": len(keys), "warmup_s": args.warmup, "window_s": args.seconds,
        "grace_s": args.grace,
        "photos_per_s": round(sum(r[3] for r in answered) / args.seconds, 1),
        "p50_s": pct(0.50), "p95_s": pct(0.95),
        "mean_s": round(statistics.mean(latencies), 3) if latencies else None,
        "requests_ok": len(answered), "requests_failed": len(counted) - len(answered),
        "photos_ok": sum(r[3] for r in answered), "photo_errors": photo_errors, "statuses": statuses,
        "failure_samples": failures[:3],
        "late": sum(1 for r in rows if r[1] >= w1), "abandoned": abandoned,
        "warmup_requests": sum(1 for r in rows if r[1] < w0),
        "cpu_cores_busy": round((cpu["end"] - cpu["start"]) / args.seconds, 2) if "end" in cpu else None,
        "peak_rss_mib": round(cpu["rss"]) if cpu.get("rss") else None,
        "gpu_busy_pct": round(statistics.mean(sampler.busy), 1) if sampler.busy else None,
        "gpu_samples": len(sampler.busy),
        "gpu_memory_max_mib": max(sampler.memory) if sampler.memory else None,
    }
    if args.readyz:
        end = marks.get("end") or {"error": "no /readyz read at the window's end"}
        result["workers"] = worker_shares(marks.get("start") or {}, end)
        errors = [m["error"] for m in (marks.get("start") or {"error": "no read at the start"}, end) if "error" in m]
        if errors:
            result["workers_error"] = "; ".join(errors)
    print(json.dumps(result))
    return 0 if answered and not failures else 1


def read_json(name):
    """NAME's JSON, or None when there is no such file or it holds no JSON (a step that failed)."""
    try:
        with open(name) as f:
            return json.load(f)
    except (OSError, ValueError, TypeError):
        return None


def row(args):
    ready = read_json(args.ready) or {}
    error = args.error or ready.get("error") or ""
    load = read_json(args.load)
    out = {"row": args.name, "provider": args.provider, "model": args.model, "note": args.note,
           "cold_start_s": ready.get("cold_start_s"), "readyz": read_json(args.readyz),
           "load": load, "workers": (load or {}).get("workers"), "error": error}
    if args.stream:  # a "beside" row: null when its stream wrote nothing
        out["stream"] = read_json(args.stream)
    print(json.dumps(out))
    return 0


def fmt(value, spec=""):
    return "n/a" if value is None else format(value, spec)


def stream_cell(r):
    """The stream's own photos/s and p95 on a "beside" row; "-" on a row without one."""
    if "stream" not in r:
        return "-"
    s = r.get("stream") or {}
    return f"{fmt(s.get('photos_per_s'))} / {fmt(s.get('p95_s'))}"


def workers_line(workers, error=None):
    """The workers as read right after the window, and the busiest one over it: the bottleneck."""
    if not workers:
        return f"workers n/a ({error})" if error else "workers n/a"
    parts = [f"{w.get('device')} ({', '.join(w.get('towers') or [])}) busy {fmt(w.get('window_busy_share'))} of "
             f"the window, {fmt(w.get('busy_share'))} since start" + ("" if w.get("healthy", True) else ", UNHEALTHY")
             for w in workers]
    timed = [w for w in workers if w.get("window_busy_share") is not None]
    busiest = max(timed, key=lambda w: w["window_busy_share"]) if timed else None
    tail = f"; busiest over the window: {busiest['device']}" if busiest and len(workers) > 1 else ""
    return "workers: " + "; ".join(parts) + tail


def goals(rows):
    """Issue 57's ratios from the rows that hold them (the thresholds are its GPU goals)."""
    by = {r["row"]: r for r in rows}

    def rate(name, key="load"):
        return ((by.get(name) or {}).get(key) or {}).get("photos_per_s")

    def ratio(a, b):
        return round(a / b, 2) if a is not None and b else None
    out = []
    for p in ("cuda", "cpu"):
        alone = rate(f"embed-alone-{p}")
        for ocr in ("ocrcpu", "ocrcuda"):
            beside = f"embed+album-{ocr}-{p}"
            if alone is not None and beside in by:
                p95 = ratio((by[beside].get("load") or {}).get("p95_s"),
                            (by[f"embed-alone-{p}"].get("load") or {}).get("p95_s"))
                out.append(f"- /v1/embed beside the album stream ({beside}) / alone (embed-alone-{p}): photos/s "
                           f"{fmt(ratio(rate(beside), alone))} (goal on the GPU: at least 0.70), p95 {fmt(p95)}")
        album, ocr_alone, cpu_only = rate(f"album-c1-{p}"), rate(f"ocr-c1-{p}"), rate("album-c1-cpu")
        if p == "cuda" and album is not None and ocr_alone is not None:
            out.append("- the album pass with OCR on the CPU (album-c1-cuda) / OCR alone on the same server "
                       f"(ocr-c1-cuda): {fmt(ratio(album, ocr_alone))} of its overlap bound (goal: at least 0.8)")
        if p == "cuda" and cpu_only and (album is not None or ocr_alone is not None):
            bound = ratio(ocr_alone, cpu_only)
            out.append(f"- against the CPU-only album pass (album-c1-cpu, {fmt(cpu_only)} photos/s): album-c1-cuda "
                       f"{fmt(ratio(album, cpu_only))}x, the overlap bound (ocr-c1-cuda) {fmt(bound)}x")
        if p == "cuda" and cpu_only:
            cuda_album = rate("album-c1-ocrcuda-cuda")
            beside_rate = rate("embed+album-ocrcuda-cuda", "stream")
            if cuda_album is not None:
                out.append("- OCR on CUDA, the album pass alone (album-c1-ocrcuda-cuda): "
                           f"{fmt(ratio(cuda_album, cpu_only))}x the CPU-only pass (goal, once OCR on CUDA is fixed: "
                           "at least 3x)")
            if beside_rate is not None:
                out.append(f"- OCR on CUDA, the stream beside /v1/embed (embed+album-ocrcuda-cuda): "
                           f"{fmt(ratio(beside_rate, cpu_only))}x the CPU-only pass (a floor for the pass alone)")
    return out


def report(args):
    rows = []
    for name in args.rows:
        with open(name) as f:
            rows.append(json.load(f))
    out = [f"# {args.title}", ""] + ([args.intro, ""] if args.intro else [])
    out.append("| row | provider | clients x photos | photos/s | p50 s | p95 s | requests ok / failed | photo errors "
               "| server CPU cores busy | GPU busy % | beside: stream photos/s / p95 s | cold start s | notes |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        load = r.get("load") or {}
        notes = [r.get("note"), r.get("error")]
        if load.get("abandoned"):
            notes.append(f"{load['abandoned']} requests unanswered {load.get('grace_s', '')} s after the window")
        stream = r.get("stream") or {}
        if stream.get("abandoned"):
            notes.append(f"stream: {stream['abandoned']} requests unanswered {stream.get('grace_s', '')} s "
                         "after the window")
        if stream.get("requests_failed"):
            notes.append(f"stream: {stream['requests_failed']} requests failed")
        notes = "; ".join(x for x in notes if x)
        errors = ", ".join(f"{k} {v}" for k, v in sorted((load.get("photo_errors") or {}).items())) or "0"
        shape = f"{load['clients']} x {load['photos_per_request']}" if load else "n/a"
        out.append(f"| {r['row']} | {r['provider']} | {shape} | {fmt(load.get('photos_per_s'))} "
                   f"| {fmt(load.get('p50_s'))} | {fmt(load.get('p95_s'))} "
                   f"| {fmt(load.get('requests_ok'))} / {fmt(load.get('requests_failed'))} | {errors} "
                   f"| {fmt(load.get('cpu_cores_busy'))} | {fmt(load.get('gpu_busy_pct'))} | {stream_cell(r)} "
                   f"| {fmt(r.get('cold_start_s'))} | {notes.strip().replace('|', '/')} |")
    out += ["", "What /readyz said, per row (at start-up, and its workers read right after the window; the bodies "
            "are in gpu-bench/):", ""]
    for r in rows:
        z = r.get("readyz") or {}
        model = z.get("model") if isinstance(z.get("model"), dict) else {}
        gpu = z.get("gpu")
        if isinstance(gpu, dict) and "memory_used_bytes" in gpu:
            gpu = f"{gpu.get('name')}, {round(gpu['memory_used_bytes'] / 2**20)} MiB used"
        load = r.get("load") or {}
        out.append(f"- {r['row']}: provider {model.get('provider')}, model {model.get('id')} ({model.get('precision')}, "
                   f"batch {model.get('batch_size')}, {model.get('input_layout')}), gpu {json.dumps(gpu)}"
                   + (f", cuda {json.dumps(z['cuda'])}" if z.get("cuda") else "")
                   + f"; peak RSS {fmt(load.get('peak_rss_mib'))} MiB, GPU memory at most "
                   f"{fmt(load.get('gpu_memory_max_mib'))} MiB"
                   + (f"; {workers_line(r.get('workers'), load.get('workers_error'))}" if load else ""))
    ratios = goals(rows)
    if ratios:
        out += ["", "Issue 57's ratios (photos/s of the rows named; each row one run):", ""] + ratios
    print("\n".join(out))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ready")
    p.add_argument("--url", required=True)
    p.add_argument("--since", type=float, required=True, help="epoch seconds when the server was spawned")
    p.add_argument("--pid", type=int)
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--out")
    p.set_defaults(func=ready)
    p = sub.add_parser("load")
    p.add_argument("--url", required=True)
    p.add_argument("--root", required=True, help="the folder CLIPFN_STORE points at")
    p.add_argument("--folders", required=True, help="comma-separated folders under --root")
    p.add_argument("--per-request", type=int, default=32)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--warmup", type=float, default=2)
    p.add_argument("--grace", type=float, default=15)
    p.add_argument("--body", default="{}", help="JSON object of fields added to every request")
    p.add_argument("--pid", type=int)
    p.add_argument("--max-requests", type=int, default=100000)
    p.add_argument("--start-at", type=float, help="epoch second the clients start at (default: now)")
    p.add_argument("--readyz", help="/readyz's URL: its workers at the window's start and end")
    p.add_argument("--no-gpu", action="store_true", help="no nvidia-smi sampling")
    p.set_defaults(func=load)
    p = sub.add_parser("row")
    for flag in ("--name", "--provider", "--model"):
        p.add_argument(flag, required=True)
    for flag in ("--note", "--ready", "--readyz", "--load", "--stream", "--error"):
        p.add_argument(flag, default="")
    p.set_defaults(func=row)
    p = sub.add_parser("report")
    p.add_argument("rows", nargs="+")
    p.add_argument("--title", default="GPU bench")
    p.add_argument("--intro", default="", help="a paragraph under the title")
    p.set_defaults(func=report)
    args = ap.parse_args()
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
