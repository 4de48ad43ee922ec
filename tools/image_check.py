#!/usr/bin/env python3
"""The checks tools/image-check.sh runs on the built images (standard library only, plus Pillow
for the 20 MB photos and Schemathesis for the API, which tools/setup.sh's .venv has).

Every container runs as Cloud Run and Lambda run it: the image's own non-root user (Lambda: an
arbitrary uid), --read-only with a tmpfs /tmp, --network=host to reach the GCS emulator
(fake-gcs-server) on loopback. Nothing here talks to anything but 127.0.0.1.

Prints one line per check ('ok ...' / 'FAILED ...') and the figures for docs/deploy.md, then
'N passed, N failed'; exits non-zero when a check failed.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import http.server
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGES = {"cpu": "clipfn-check:cpu", "cuda12": "clipfn-check:cuda12", "cuda13": "clipfn-check:cuda13"}
# The CUDA user-space libraries: a reason or an ldd line naming one of these means they did not load.
CUDA_USER_LIBS = ("libcudart", "libcublas", "libcublasLt", "libcufft", "libcurand", "libcudnn", "libnvrtc", "libnvJitLink")
LABEL = "clipfn-image-check"
COSINE_MIN = 0.9999
GROWTH_MAX = 1.10

results: list[tuple[str, bool, str]] = []
figures: dict[str, object] = {}


def check(name: str, ok: bool, detail: str = "") -> bool:
    results.append((name, ok, detail))
    print(f"{'ok' if ok else 'FAILED'}: {name}" + (f" ({detail})" if detail else ""), flush=True)
    return ok


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# HTTP on loopback
# ---------------------------------------------------------------------------


def http_call(port: int, method: str, path: str, body: object = None, timeout: float = 120) -> tuple[int, object]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw.decode(errors="replace")
    finally:
        conn.close()


def wait_ready(port: int, alive, within: float = 180) -> tuple[bool, object]:
    """Polls /readyz until 200; (False, last answer) if `alive()` turns false or time runs out."""
    until = time.monotonic() + within
    last: object = None
    next_alive = time.monotonic() + 1
    while time.monotonic() < until:
        try:
            status, body = http_call(port, "GET", "/readyz", timeout=5)
            last = body
            if status == 200:
                return True, body
        except OSError as e:
            last = str(e)
        if time.monotonic() > next_alive:  # asking docker costs a process: once a second
            if not alive():
                return False, last
            next_alive = time.monotonic() + 1
        time.sleep(0.02)
    return False, last


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


# ---------------------------------------------------------------------------
# Docker
# ---------------------------------------------------------------------------


class Docker:
    def __init__(self, binary: str):
        self.bin = binary

    def run(self, *args: str, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.bin, *args], capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args[:3])}... failed: {proc.stderr.strip()}")
        return proc

    def inspect(self, what: str) -> dict:
        return json.loads(self.run("inspect", what).stdout)[0]

    def logs(self, cid: str) -> str:
        proc = self.run("logs", cid, check=False)
        return proc.stdout + proc.stderr

    def running(self, cid: str) -> bool:
        return self.inspect(cid)["State"]["Running"]

    def rm(self, cid: str) -> None:
        self.run("rm", "-f", cid, check=False)


class Stack:
    """fake-gcs-server on loopback with the photo and model buckets, and what containers need."""

    def __init__(self, work: Path):
        self.work = work
        self.data = work / "gcs"
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> None:
        self.port = free_port()
        host = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [os.environ["CLIPFN_FAKE_GCS_BIN"], "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
             "-public-host", host, "-backend", "memory", "-data", str(self.data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        until = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > until:
                    raise RuntimeError("fake-gcs-server did not start")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def env(self) -> dict[str, str]:
        """What points clipfn at the emulator, as tests/it/common does."""
        key = {"gcs_base_url": f"http://127.0.0.1:{self.port}", "disable_oauth": True,
               "client_email": "", "private_key": "", "private_key_id": ""}
        return {"GOOGLE_SERVICE_ACCOUNT_KEY": json.dumps(key), "GOOGLE_ALLOW_HTTP": "true"}


def container_args(env: dict[str, str], port: int | None, user: str | None = None, memory: str | None = None,
                   extra: list[str] | None = None) -> list[str]:
    args = ["--label", LABEL, "--network=host", "--read-only", "--tmpfs", "/tmp:rw,size=512m"]
    if user:
        args += ["--user", user]
    if memory:
        args += ["--memory", memory, "--memory-swap", memory]
    if port is not None:
        env = {**env, "PORT": str(port)}
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    return args + (extra or [])


# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------


class Checks:
    def __init__(self, docker: Docker, stack: Stack, work: Path, photos: list[str]):
        self.docker = docker
        self.stack = stack
        self.work = work
        self.photos = photos  # keys in the photos bucket
        self.reference: dict[str, list[float]] = {}

    def base_env(self, provider: str | None) -> dict[str, str]:
        env = {**self.stack.env(), "CLIPFN_MODEL": "gs://models/clip-test.onnx", "CLIPFN_STORE": "gs://photos",
               "CLIPFN_LOG_FORMAT": "text"}
        if provider:
            env["CLIPFN_PROVIDER"] = provider
        return env

    def start(self, image: str, env: dict[str, str], **kw) -> tuple[str, int, float]:
        port = free_port()
        started = time.monotonic()
        cid = self.docker.run("run", "-d", *container_args(env, port, **kw), IMAGES[image]).stdout.strip()
        return cid, port, started

    def embed(self, port: int, keys: list[str]) -> dict[str, list[float]]:
        status, body = http_call(port, "POST", "/v1/embed", {"images": keys}, timeout=300)
        assert status == 200, f"/v1/embed answered {status}: {str(body)[:300]}"
        out = {}
        for item in body["data"]:
            assert "embedding" in item, f"{item['image']}: {item.get('error')}"
            out[item["image"]] = item["embedding"]
        return out

    # -- the test build: the reference ------------------------------------

    def reference_embeddings(self) -> None:
        port = free_port()
        env = {"PATH": "/usr/bin:/bin", "ORT_DYLIB_PATH": os.environ["ORT_DYLIB_PATH"], "PORT": str(port),
               **self.base_env("cpu"), "RUST_LOG": "warn"}
        proc = subprocess.Popen([os.environ["CLIPFN_BIN"], "serve"], env=env, stdout=subprocess.DEVNULL,
                                stderr=open(self.work / "reference.log", "w"))
        try:
            ready, body = wait_ready(port, lambda: proc.poll() is None, within=120)
            assert ready, f"the test build did not become ready: {body}"
            self.reference = self.embed(port, self.photos)
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    # -- per image ---------------------------------------------------------

    def serve_and_embed(self, image: str) -> None:
        provider = "cpu" if image == "cpu" else "auto"
        cid, port, started = self.start(image, self.base_env(provider))
        try:
            ready, body = wait_ready(port, lambda: self.docker.running(cid))
            if not check(f"{image}: /readyz answers 200 (CLIPFN_PROVIDER={provider})", ready, "" if ready else f"{body}; logs: {self.docker.logs(cid)[-800:]}"):
                return
            model = body["model"]
            user = self.docker.run("exec", cid, "id", "-u").stdout.strip()
            check(f"{image}: runs as its own non-root user, read-only root, tmpfs /tmp", user not in ("", "0") and
                  self.docker.inspect(cid)["HostConfig"]["ReadonlyRootfs"], f"uid {user}")
            if image == "cpu":
                check(f"{image}: the model runs on CPU, no fallback", model["provider"] == "cpu" and "fallback_reason" not in model,
                      json.dumps({k: model.get(k) for k in ("provider", "fallback_reason")}))
            else:
                reason = model.get("fallback_reason") or ""
                named = [lib for lib in CUDA_USER_LIBS if re.search(re.escape(lib) + r"\.so", reason)]
                if image == "cuda12":
                    # All of the provider's libraries loaded: creating it failed at cudaSetDevice.
                    driver = "CUDA driver version is insufficient" in reason or "cudaErrorInsufficientDriver" in reason
                else:
                    # onnxruntime-gpu 1.31.1's provider links the driver itself: libcuda.so.1 is what is missing.
                    driver = "libcuda.so.1" in reason
                check(f"{image}: auto comes up on CPU and /readyz says the driver, not a CUDA library, is missing",
                      model["provider"] == "cpu" and driver and not named and "gpu" not in body,
                      f"fallback_reason: ...{reason[-300:]}")
                figures[f"{image}_fallback_reason"] = reason
            got = self.embed(port, self.photos)
            worst = min(cosine(got[k], self.reference[k]) for k in self.photos)
            check(f"{image}: {len(self.photos)} photos from the emulator, cosine to the test build >= {COSINE_MIN}",
                  worst >= COSINE_MIN, f"worst {worst:.6f}")
            self.stop_under_load(image, cid, port)
        finally:
            self.docker.rm(cid)

    def stop_under_load(self, image: str, cid: str, port: int) -> None:
        """`docker stop -t 10` while every worker has a request in flight: exit 0 within 10 s, and
        every request sent before the stop gets a whole HTTP answer (200, or 503 shutting_down)."""
        workers = 3
        keys = (self.photos * 4)[:24]
        stop = threading.Event()
        lock = threading.Lock()
        waiting: set[int] = set()
        outcomes: list[str] = []

        def worker(n: int) -> None:
            while not stop.is_set():
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                try:
                    conn.connect()
                except OSError:
                    return  # not accepted: the server is gone or going
                try:
                    conn.request("POST", "/v1/embed", body=json.dumps({"images": keys}),
                                 headers={"Content-Type": "application/json"})
                    with lock:
                        waiting.add(n)
                    resp = conn.getresponse()
                    body = resp.read()
                    code = ""
                    if resp.status != 200:
                        try:
                            code = json.loads(body)["error"]["code"]
                        except (ValueError, KeyError, TypeError):
                            code = "?"
                    with lock:
                        outcomes.append(f"{resp.status}{' ' + code if code else ''}")
                except OSError as e:
                    with lock:
                        outcomes.append(f"no answer: {e.__class__.__name__}")
                finally:
                    with lock:
                        waiting.discard(n)
                    conn.close()

        threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(workers)]
        for t in threads:
            t.start()
        until = time.monotonic() + 60
        while time.monotonic() < until:
            with lock:
                if len(waiting) == workers and outcomes:
                    break
            time.sleep(0.01)
        with lock:
            in_flight = len(waiting)
            before = len(outcomes)
        stop.set()
        t0 = time.monotonic()
        self.docker.run("stop", "-t", "10", cid, timeout=60)
        took = time.monotonic() - t0
        for t in threads:
            t.join(timeout=30)
        state = self.docker.inspect(cid)["State"]
        answered = outcomes[before:]
        bad = [o for o in answered if not (o == "200" or o == "503 shutting_down")]
        check(f"{image}: docker stop -t 10 with {in_flight} requests in flight exits 0 within 10 s, every one answered",
              state["ExitCode"] == 0 and took < 10 and in_flight == workers and len(answered) >= in_flight and not bad,
              f"exit {state['ExitCode']} after {took:.1f} s, answers {answered}")
        figures.setdefault("stop_s", {})[image] = round(took, 2)

    def cuda_refuses(self, image: str) -> None:
        """The image's own default, CLIPFN_PROVIDER=cuda, on a machine without a GPU."""
        env = self.base_env(None)
        cid, port, _ = self.start(image, env)
        try:
            exited = wait_exit(self.docker, cid, 60)
            logs = self.docker.logs(cid)
            state = self.docker.inspect(cid)["State"]
            check(f"{image}: CLIPFN_PROVIDER=cuda (the image's default) refuses to start without a GPU",
                  exited and state["ExitCode"] != 0 and "CUDA was required (CLIPFN_PROVIDER=cuda) but cannot be used" in logs,
                  f"exit {state['ExitCode']}: {last_error(logs)}")
        finally:
            self.docker.rm(cid)

    def cuda_ldd(self, image: str) -> None:
        script = ("for l in /opt/onnxruntime/lib/libonnxruntime_providers_cuda.so /usr/local/cuda/lib64/*.so.*; do "
                  "ldd \"$l\" | sed \"s|^|$l: |\"; done; cat /etc/ld.so.conf.d/cuda.conf")
        out = self.docker.run("run", "--rm", "--label", LABEL, "--network=none", "--entrypoint", "/bin/sh",
                              IMAGES[image], "-c", script).stdout
        missing = sorted({line.split(":")[0] + ": " + line.split(":", 1)[1].split("=>")[0].strip()
                          for line in out.splitlines() if "not found" in line})
        others = [m for m in missing if not m.endswith(": libcuda.so.1")]
        provider = [l for l in out.splitlines() if l.startswith("/opt/onnxruntime/lib/libonnxruntime_providers_cuda.so:")]
        from_cuda = [l for l in provider if "/usr/local/cuda/lib64/" in l]
        check(f"{image}: ldd of the CUDA provider and every CUDA library finds all but the driver's libcuda.so.1",
              not others and "/usr/local/cuda/lib64" in out and from_cuda,
              f"not found: {sorted(set(m.split(': ')[1] for m in missing))}; provider libraries from /usr/local/cuda/lib64: "
              f"{len(from_cuda)}" + (f"; others missing: {others}" if others else ""))
        env = self.docker.inspect(IMAGES[image])["Config"]["Env"]
        want = {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}
        ld = next((e for e in env if e.startswith("LD_LIBRARY_PATH=")), "")
        check(f"{image}: the driver mount's settings (LD_LIBRARY_PATH with /usr/local/nvidia/lib64, NVIDIA_*)",
              want <= set(env) and "/usr/local/nvidia/lib64" in ld.split("=", 1)[1].split(":"), ld)

    def bad_model(self, image: str) -> None:
        """A model path missing inside the container, and an unreadable one, stop it at start-up."""
        provider = "cpu" if image == "cpu" else "auto"
        env = {**self.base_env(provider)}
        del env["CLIPFN_MODEL"]  # the image's default: /opt/clipfn/model/model.onnx, not baked in
        secret = self.work / "unreadable" / "model.onnx"
        secret.parent.mkdir(exist_ok=True)
        if not secret.exists():
            shutil.copy(os.environ["CLIPFN_TEST_MODEL"], secret)
            secret.chmod(0o000)
        cases = [
            ("missing", "/opt/clipfn/model/model.onnx", env, []),
            ("unreadable", "/models/model.onnx", {**env, "CLIPFN_MODEL": "/models/model.onnx"},
             ["-v", f"{secret.parent}:/models:ro"]),
        ]
        for what, path, case_env, extra in cases:
            cid, port, _ = self.start(image, case_env, extra=extra)
            try:
                never_ready = True
                until = time.monotonic() + 60
                while time.monotonic() < until:
                    for _ in range(20):
                        try:
                            never_ready &= http_call(port, "GET", "/readyz", timeout=2)[0] != 200
                        except OSError:
                            pass
                        time.sleep(0.05)
                    if not self.docker.running(cid):
                        break
                state = self.docker.inspect(cid)["State"]
                logs = self.docker.logs(cid)
                check(f"{image}: a {what} model ({path}) stops the container at start-up, naming the path",
                      not state["Running"] and state["ExitCode"] != 0 and path in logs and never_ready,
                      f"exit {state['ExitCode']}: {last_error(logs)}")
            finally:
                self.docker.rm(cid)

    def lambda_peer(self) -> None:
        """The CPU image as a Lambda container image: a Runtime API peer on loopback hands it the
        sample events (as tests/it/lambda.rs does); it runs as an arbitrary uid, as Lambda does."""
        names = ["apigw-v1-embed-good", "apigw-v2-embed-one-bad", "apigw-v1-embed-malformed", "apigw-v2-readyz",
                 "apigw-v2-embed-too-many", "apigw-v1-readyz"]
        events = {n: json.loads((REPO / "events" / f"{n}.json").read_text()) for n in names}
        queue = list(names)
        answers: dict[str, tuple[str, object]] = {}
        done = threading.Event()
        lock = threading.Lock()

        class Api(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path != "/2018-06-01/runtime/invocation/next":
                    return self.reply(404, b"{}")
                with lock:
                    name = queue.pop(0) if queue else None
                if name is None:
                    done.wait(120)  # hold the long poll, as the real service does
                    return self.reply(500, b"{}")
                deadline = int(time.time() * 1000) + 60_000
                self.reply(200, json.dumps(events[name]).encode(), {
                    "Lambda-Runtime-Aws-Request-Id": name,
                    "Lambda-Runtime-Deadline-Ms": str(deadline),
                    "Lambda-Runtime-Invoked-Function-Arn": "arn:aws:lambda:us-east-1:123456789012:function:clipfn",
                    "Lambda-Runtime-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
                    "Content-Type": "application/json",
                })

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                m = re.fullmatch(r"/2018-06-01/runtime/(?:invocation/([^/]+)/(response|error)|init/(error))", self.path)
                if m:
                    key, kind = (m.group(1), m.group(2)) if m.group(1) else ("init", "error")
                    try:
                        value = json.loads(body)
                    except ValueError:
                        value = body.decode(errors="replace")
                    with lock:
                        answers[key] = (kind, value)
                        if len(answers) >= len(names) or key == "init":
                            done.set()
                self.reply(202, b"{}")

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = {**self.base_env(None), "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{server.server_address[1]}",
               "AWS_LAMBDA_FUNCTION_NAME": "clipfn", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048",
               "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST", "CLIPFN_BATCH_SIZE": "4"}
        cid, _, _ = self.start("cpu", env, user="993:990", memory="2g")
        try:
            done.wait(180)
            failures = []
            for n in names:
                kind, value = answers.get(n, ("none", None))
                expect = json.loads((REPO / "events" / f"{n}.expect.json").read_text())
                if kind != "response" or not isinstance(value, dict):
                    failures.append(f"{n}: {kind} {str(value)[:200]}")
                    continue
                if value.get("statusCode") != expect["status"]:
                    failures.append(f"{n}: status {value.get('statusCode')}, expected {expect['status']}")
                    continue
                if "items" in expect:
                    body = json.loads(value["body"])
                    got = ["ok" if "embedding" in d else d["error"]["code"] for d in body.get("data", [])]
                    if got != expect["items"]:
                        failures.append(f"{n}: items {got}, expected {expect['items']}")
            logs = "" if not failures else self.docker.logs(cid)[-1000:]
            check(f"cpu: serves {len(names)} invocations from a Lambda Runtime API peer as uid 993, read-only",
                  not failures, "; ".join(failures) + (f"; logs: {logs}" if logs else ""))
        finally:
            self.docker.rm(cid)
            done.set()
            server.shutdown()

    def under_memory(self, cid: str, port: int, path: str, body: dict) -> tuple[int, object, float, dict, int | None]:
        """One request to a container started under --memory: its status, its answer, its seconds,
        the container's state after it and the cgroup's peak memory."""
        t0 = time.monotonic()
        try:
            status, answer = http_call(port, "POST", path, body, timeout=900)
        except OSError as e:
            status, answer = 0, str(e)
        took = time.monotonic() - t0
        return status, answer, took, self.docker.inspect(cid)["State"], cgroup_peak(cid)

    def memory_1g(self, big: list[str]) -> None:
        """The CPU image with the int8 file of a model folder, --memory 1g (no swap), 100 photos of
        about 20 MB in one request: no out-of-memory kill, every photo embedded."""
        env = {**self.base_env("cpu"), "CLIPFN_MODEL": "gs://models/clip-test/", "CLIPFN_PRECISION": "int8"}
        cid, port, _ = self.start("cpu", env, memory="1g")
        try:
            ready, body = wait_ready(port, lambda: self.docker.running(cid))
            if not check("cpu: int8 model folder under --memory 1g becomes ready", ready and body["model"]["precision"] == "int8",
                         str(body)[:300] if not ready else body["model"]["file"]):
                return
            status, answer, took, state, peak = self.under_memory(cid, port, "/v1/embed", {"images": big})
            embedded = sum("embedding" in d for d in answer.get("data", [])) if isinstance(answer, dict) else 0
            errors = sorted({d["error"]["code"] for d in answer.get("data", []) if "error" in d}) if isinstance(answer, dict) else []
            check(f"cpu: {len(big)} photos of ~20 MB under --memory 1g, no OOM kill, all embedded",
                  status == 200 and embedded == len(big) and state["Running"] and not state["OOMKilled"],
                  f"status {status}, {embedded} embedded, errors {errors}, OOMKilled {state['OOMKilled']}, "
                  f"{took:.0f} s, peak {peak}")
            figures["memory_1g"] = {"seconds": round(took, 1), "peak_bytes": peak, "embedded": embedded}
        finally:
            self.docker.rm(cid)

    def memory_faces_ocr(self, large: list[str]) -> None:
        """Issue 48: the CPU image under --memory 512m (no swap) with the real face stack (SCRFD-2.5G
        + dlib) and PP-OCRv4, a 96 MiB decode budget, and 60 photos of a 12 MP PNG showing a face and
        a sign in one /v1/analyze: no out-of-memory kill, every photo answered with both. Outside
        Docker the same request peaked at 354 MiB of RSS with the budget and 462 MiB without it
        (docs/design.md, "One budget for what a photo keeps")."""
        env = {**self.base_env("cpu"), "CLIPFN_FACE_MODEL": "gs://models/faces-real/",
               "CLIPFN_OCR_MODEL": "gs://models/ocr/", "CLIPFN_MAX_DECODE_BYTES": str(96 << 20),
               "CLIPFN_REQUEST_TIMEOUT_MS": "600000"}
        cid, port, _ = self.start("cpu", env, memory="512m")
        try:
            ready, body = wait_ready(port, lambda: self.docker.running(cid))
            if not check("cpu: faces and OCR under --memory 512m become ready", ready,
                         "" if ready else f"{body}; logs: {self.docker.logs(cid)[-800:]}"):
                return
            body = {"images": large, "faces": True, "ocr": True}
            status, answer, took, state, peak = self.under_memory(cid, port, "/v1/analyze", body)
            data = answer.get("data", []) if isinstance(answer, dict) else []
            both = sum(bool(d.get("faces")) and bool(d.get("ocr")) for d in data)
            check(f"cpu: {len(large)} photos of 12 MP PNG with faces and OCR under --memory 512m and a 96 MiB "
                  "decode budget, no OOM kill, each with its face and its text",
                  status == 200 and len(large) > 0 and both == len(large) and state["Running"] and not state["OOMKilled"],
                  f"status {status}, {both} of {len(large)} with both, OOMKilled {state['OOMKilled']}, "
                  f"{took:.0f} s, peak {peak}")
            figures["memory_faces_ocr"] = {"seconds": round(took, 1), "peak_bytes": peak, "answered_with_both": both}
        finally:
            self.docker.rm(cid)

    def schemathesis(self) -> None:
        """Schemathesis (tools/schemathesis.toml) against the CPU image serving everything the
        document describes: the text tower, label sets, a head and the face models beside the image
        model, and the photos the document's examples name in the emulator."""
        env = {**self.base_env("cpu"), "CLIPFN_TEXT_MODEL": "gs://models/clip-text-test.onnx",
               "CLIPFN_LABELS": "gs://models/labels.json", "CLIPFN_HEADS": "aesthetic=gs://models/head-test.onnx",
               "CLIPFN_FACE_MODEL": "gs://models/faces-scrfd-test/"}
        cid, port, _ = self.start("cpu", env)
        try:
            ready, body = wait_ready(port, lambda: self.docker.running(cid))
            if not check("cpu: serves the text tower, label sets, a head and faces (for Schemathesis)", ready,
                         "" if ready else f"{body}; logs: {self.docker.logs(cid)[-800:]}"):
                return
            t0 = time.monotonic()
            rc, found = run_schemathesis(port, self.work / "schemathesis.log")
            found["seconds"] = round(time.monotonic() - t0)
            figures["schemathesis"] = found
            check("cpu: Schemathesis against /openapi.json, every operation and phase, valid and invalid bodies: "
                  "no failure", rc == 0 and self.docker.running(cid), json.dumps(found))
        finally:
            self.docker.rm(cid)

    def cold_start(self, image: str, runs: int = 3) -> None:
        """`docker run` to /readyz 200, against the same release binary and ONNX Runtime run bare
        on the host, same model (from the emulator), same settings."""
        env = self.base_env("cpu" if image == "cpu" else "auto")
        container = []
        for _ in range(runs):
            cid, port, started = self.start(image, env)
            try:
                ready, _ = wait_ready(port, lambda: self.docker.running(cid))
                if ready:
                    container.append(time.monotonic() - started)
            finally:
                self.docker.rm(cid)
        bare = []
        if image == "cpu":
            out = self.work / "bare"
            if not out.exists():
                cid = self.docker.run("create", "--label", LABEL, IMAGES[image]).stdout.strip()
                out.mkdir()
                self.docker.run("cp", f"{cid}:/usr/local/bin/clipfn", str(out / "clipfn"))
                self.docker.run("cp", f"{cid}:/opt/onnxruntime", str(out / "onnxruntime"))
                self.docker.rm(cid)
            lib = next((out / "onnxruntime" / "lib").glob("libonnxruntime.so.1.*"))
            for _ in range(runs):
                port = free_port()
                started = time.monotonic()
                proc = subprocess.Popen([str(out / "clipfn"), "serve"], env={
                    "PATH": "/usr/bin:/bin", "ORT_DYLIB_PATH": str(lib), "PORT": str(port), **env},
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    ready, _ = wait_ready(port, lambda: proc.poll() is None)
                    if ready:
                        bare.append(time.monotonic() - started)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
        med = lambda xs: round(statistics.median(xs), 2) if xs else None
        figures.setdefault("cold_start_s", {})[image] = {"container": [round(x, 2) for x in container],
                                                          "bare": [round(x, 2) for x in bare]}
        check(f"{image}: cold start, docker run to /readyz 200", len(container) == runs,
              f"median {med(container)} s" + (f"; bare binary {med(bare)} s" if bare else ""))

    def ca_clean(self, image: str, extra_ca: Path) -> None:
        """No extra CA certificate of the build machine is in the image; the bundle is Debian's."""
        if not extra_ca.is_file() or not extra_ca.stat().st_size:
            check(f"{image}: no build machine CA in the image", True, "no extra CA on this machine")
            return
        lines = []
        for block in re.findall(r"-----BEGIN CERTIFICATE-----\n(.*?)-----END", extra_ca.read_text(), re.S):
            body = [l for l in block.splitlines() if l.strip()]
            lines.append(body[len(body) // 2])  # a line from the middle: unique to that certificate
        pattern = "\n".join(lines)
        # The pattern finds them where they are (so a miss below means something)...
        assert all(l in extra_ca.read_text() for l in lines)
        # ...and, searching as root (every file readable), they are nowhere in the image.
        proc = self.docker.run("run", "--rm", "--label", LABEL, "--network=none", "--user", "0", "--entrypoint", "/bin/grep",
                               IMAGES[image], "-rlF", "-e", pattern, "/etc", "/usr", "/opt", check=False)
        history = self.docker.run("history", "--no-trunc", IMAGES[image]).stdout
        check(f"{image}: none of the build machine's {len(lines)} extra CAs is in the image or its history",
              proc.returncode == 1 and not any(l in history for l in lines),
              (proc.stdout + proc.stderr).strip()[:300] or f"grep exit {proc.returncode}")


# What a run's summary says, for the figures.
SCHEMATHESIS_SAYS = {
    "operations": r"Operations:\s+(\d+) selected",
    "test_cases": r"(\d+) generated",
    "stateful_scenarios": r"Scenarios:\s+(\d+)",
    "links_covered": r"API Links:\s+(\d+) covered",
    "failures": r"(\d+) unique failures?",
    "seed": r"Seed: (\d+)",
}


def run_schemathesis(port: int, log: Path) -> tuple[int, dict[str, int]]:
    """Runs Schemathesis as tools/schemathesis.toml says against clipfn on `port`, its output to
    `log` (its folder is the working directory: Hypothesis writes there); its exit status and
    figures. On a failure, prints the failures."""
    # From a copy: given the document's own URL, Schemathesis leaves that operation out.
    status, document = http_call(port, "GET", "/openapi.json")
    assert status == 200, f"/openapi.json answered {status}"
    # The stateful phase follows the links and sends an item's embedding back as a stored one; the
    # served links leave the body to the caller (openapi-generator takes only a string there).
    for path in ("/v1/embed", "/v1/analyze"):
        for link in document["paths"][path]["post"]["responses"]["200"]["links"].values():
            link["requestBody"] = {"embeddings": ["$response.body#/data/0/embedding"], "labels": ["beach", "city"]}
    copy = log.with_name("openapi.json")
    copy.write_text(json.dumps(document))
    command = [Path(sys.executable).with_name("schemathesis"), "--config-file", REPO / "tools" / "schemathesis.toml",
               "run", copy, "--url", f"http://127.0.0.1:{port}", "--no-color", "--request-timeout", "120"]
    with open(log, "w") as out:
        rc = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent, timeout=1200).returncode
    said = log.read_text(errors="replace")
    found = {name: int(m.group(1)) for name, pattern in SCHEMATHESIS_SAYS.items() if (m := re.search(pattern, said))}
    found.setdefault("failures", 0 if rc == 0 else -1)
    if rc != 0:
        failures = said[said.find("FAILURES"):] if "FAILURES" in said else said[-6000:]
        print("\n".join(line[:400] for line in failures.splitlines()[:200]), flush=True)
    return rc, found


def wait_exit(docker: Docker, cid: str, within: float) -> bool:
    until = time.monotonic() + within
    while time.monotonic() < until:
        if not docker.running(cid):
            return True
        time.sleep(0.1)
    return False


def last_error(logs: str) -> str:
    lines = [l for l in logs.strip().splitlines() if l.strip()]
    return lines[-1][:400] if lines else "(no output)"


def cgroup_peak(cid: str) -> int | None:
    full = cid if len(cid) == 64 else None
    for path in (f"/sys/fs/cgroup/memory/docker/{full}/memory.max_usage_in_bytes",
                 f"/sys/fs/cgroup/docker/{full}/memory.peak"):
        try:
            return int(Path(path).read_text())
        except (OSError, ValueError):
            continue
    return None


# ---------------------------------------------------------------------------
# Inputs: photos and models in the emulator's folders
# ---------------------------------------------------------------------------


def lay_out(data: Path, n_photos: int, n_big: int, n_large: int) -> tuple[list[str], list[str], list[str]]:
    photos_dir = Path(os.environ["CLIPFN_PHOTOS_DIR"]) / "wallpapers"
    camera = sorted(p for p in photos_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    assert camera, f"no camera photos in {photos_dir}"
    bucket = data / "photos"
    (bucket / "camera").mkdir(parents=True)
    (bucket / "sample").mkdir()
    keys = []
    for p in camera[:n_photos]:
        shutil.copy(p, bucket / "camera" / p.name)
        keys.append(f"camera/{p.name}")
    for i, p in enumerate(camera[:3]):  # what the sample events name
        shutil.copy(p, bucket / "sample" / f"photo-{i + 1}.jpg")
    # What the OpenAPI document's examples name (Schemathesis sends them); c.jpg is b.jpg again, so
    # that the album has duplicates and people (the test face detector finds faces in it).
    for key, p in [("user/7/IMG_0001.jpg", camera[0]), ("album/7/a.jpg", camera[1]), ("album/7/b.jpg", camera[2]),
                   ("album/7/c.jpg", camera[2])]:
        (bucket / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, bucket / key)
    models = data / "models"
    models.mkdir()
    test_model = Path(os.environ["CLIPFN_TEST_MODEL"])
    shutil.copy(test_model, models / "clip-test.onnx")
    shutil.copytree(os.environ["CLIPFN_TEST_FOLDER"], models / "clip-test")
    # The text tower, a head and the face models beside it (tools/setup.sh makes them), and the
    # examples' label sets.
    for name in ("clip-text-test.onnx", "head-test.onnx"):
        shutil.copy(test_model.with_name(name), models / name)
    shutil.copytree(test_model.with_name("faces-scrfd-test"), models / "faces-scrfd-test")
    # The real face stack and PP-OCRv4 (tools/setup-real-faces.sh, tools/setup-ocr.sh) for the
    # memory check of faces and OCR.
    shutil.copytree(os.environ["CLIPFN_TEST_FACES_REAL"], models / "faces-real")
    shutil.copytree(os.environ["CLIPFN_TEST_OCR"], models / "ocr")
    sets = {"places": ["beach", "city", "mountain"], "categories": ["beach", "food", "city", "people", "pets"]}
    (models / "labels.json").write_text(json.dumps({"sets": {k: {"labels": v} for k, v in sets.items()}}))
    big = make_big_photos(bucket / "big", camera, n_big) if n_big else []
    large = make_large_pngs(bucket / "large", n_large) if n_large else []
    return keys, big, large


def make_big_photos(folder: Path, camera: list[Path], n: int, target: int = 20_000_000) -> list[str]:
    """n JPEGs of about `target` bytes: camera photos enlarged to 24 MP with film grain, at quality
    95 (what a camera's finest setting writes). Four distinct ones, hard-linked n times over."""
    from PIL import Image, ImageChops

    folder.mkdir(parents=True)
    distinct = []
    for i, src in enumerate(camera[:4]):
        img = Image.open(src).convert("RGB").resize((6000, 4000), Image.BICUBIC)
        grain = Image.effect_noise((6000, 4000), 40).convert("RGB")
        img = ImageChops.add(img, grain, scale=1.0, offset=-128)
        quality = 95
        out = folder / f"distinct-{i}.jpg"
        for _ in range(4):
            img.save(out, quality=quality, subsampling=0)
            size = out.stat().st_size
            if abs(size - target) / target < 0.1:
                break
            quality = max(70, min(100, quality + (2 if size < target else -3)))
        distinct.append(out)
    keys = []
    for k in range(n):
        name = f"photo-{k:03d}.jpg"
        os.link(distinct[k % len(distinct)], folder / name)
        keys.append(f"big/{name}")
    for d in distinct:
        d.unlink()
    figures["big_photo_bytes"] = sorted({(folder / k.split("/")[1]).stat().st_size for k in keys})
    return keys


def make_large_pngs(folder: Path, n: int) -> list[str]:
    """n keys of one 4000 x 3000 PNG (decoded at full size: 36 MB of RGB) showing a face photo and a
    sign side by side, as tests/it/faults.rs draws it, hard-linked n times over."""
    from PIL import Image

    folder.mkdir(parents=True)
    face = Image.open(Path(os.environ["CLIPFN_TEST_FACE_PHOTOS"]) / "obama.jpg").convert("RGB")
    sign = Image.open(Path(os.environ["CLIPFN_TEST_OCR_PHOTOS"]) / "sign.jpg").convert("RGB")
    large = Image.new("RGB", (4000, 3000))
    large.paste(face.resize((2400, 3000), Image.BILINEAR), (0, 0))
    large.paste(sign.resize((1600, 1000), Image.BILINEAR), (2400, 0))
    first = folder / "photo-000.png"
    large.save(first)
    for k in range(1, n):
        os.link(first, folder / f"photo-{k:03d}.png")
    return [f"large/photo-{k:03d}.png" for k in range(n)]


# ---------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------


def image_sizes(docker: Docker, image: str) -> tuple[int, int]:
    """(uncompressed bytes as `docker image inspect` counts them, the layers gzip-compressed as a
    registry stores them, at gzip's default level)."""
    size = docker.inspect(IMAGES[image])["Size"]
    save = subprocess.Popen([docker.bin, "save", IMAGES[image]], stdout=subprocess.PIPE)
    compressed = 0
    with tarfile.open(fileobj=save.stdout, mode="r|") as tar:
        for member in tar:
            if not member.name.endswith("layer.tar"):
                continue
            f = tar.extractfile(member)
            if shutil.which("pigz"):  # the same gzip stream, on every core
                pigz = subprocess.Popen(["pigz", "-6", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                counter = threading.Thread(target=lambda: counted.append(sum(iter(lambda: len(pigz.stdout.read(1 << 20)), 0))))
                counted: list[int] = []
                counter.start()
                shutil.copyfileobj(f, pigz.stdin, 1 << 20)
                pigz.stdin.close()
                counter.join()
                pigz.wait()
                compressed += counted[0]
                continue
            z = zlib.compressobj(6, zlib.DEFLATED, 31)
            while chunk := f.read(1 << 20):
                compressed += len(z.compress(chunk))
            compressed += len(z.flush())
    save.wait()
    return size, compressed


SIZE_ROW = re.compile(r"^\| `(clipfn-check:(?:cpu|cuda12|cuda13))` \| ([0-9.]+) GB \| ([0-9.]+) GB \|", re.M)
# What the CUDA images' own layers come from, and the line beside the size rows that records its checksum.
CUDA_INPUTS = ("Dockerfile.cuda", "infra/cuda")
CUDA_SUM_LINE = re.compile(r"^`Dockerfile\.cuda` \+ `infra/cuda` sha256: `?([0-9a-f]{16})`?", re.M)


def cuda_inputs_sha256(root: Path = REPO) -> str:
    """The first 16 hex digits of the sha256 of `sha256sum`'s listing of Dockerfile.cuda and every
    file under infra/cuda, sorted by path; in a shell, from the repository:
    find Dockerfile.cuda infra/cuda -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16"""
    files = []
    for name in CUDA_INPUTS:
        path = root / name
        files += [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    listing = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(root).as_posix()}\n"
                      for p in sorted(files, key=lambda p: p.relative_to(root).as_posix().encode()))
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def size_checks(docker: Docker, images: list[str], doc: Path) -> None:
    """Every image's uncompressed size against its row. The compressed size (docker save through
    gzip, minutes for a CUDA image) is measured for the CPU image on every run, and for a CUDA image
    only when Dockerfile.cuda and infra/cuda differ from the checksum recorded beside the rows (then
    a failed check gives the checksum to record)."""
    text = doc.read_text()
    recorded = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in SIZE_ROW.finditer(text)}
    cuda_sum = cuda_inputs_sha256()
    said = CUDA_SUM_LINE.search(text)
    cuda_same = said is not None and said.group(1) == cuda_sum
    cuda_measured = False
    for image in images:
        was = recorded.get(IMAGES[image])
        if image == "cpu" or not cuda_same or was is None:
            raw, packed = image_sizes(docker, image)
            cuda_measured |= image != "cpu"
        else:
            raw, packed = docker.inspect(IMAGES[image])["Size"], None
            print(f"image-check: {image}: compressed size not measured: Dockerfile.cuda + infra/cuda sha256 {cuda_sum} "
                  f"is the one {doc.name} records beside its {was[1]:.2f} GB (the uncompressed size is checked)", flush=True)
        gb = (round(raw / 1e9, 2), None if packed is None else round(packed / 1e9, 2))
        figures.setdefault("sizes_gb", {})[image] = gb
        if was is None:
            row = f"| `{IMAGES[image]}` | {gb[0]:.2f} GB | {gb[1]:.2f} GB |"
            check(f"{image}: size recorded in {doc.name}", False, f"add the row: {row}")
            continue
        pairs = [("uncompressed", gb[0], was[0])] + ([("compressed", gb[1], was[1])] if gb[1] is not None else [])
        grown = [f"{what} {now:.2f} GB > {GROWTH_MAX:.2f} x {then:.2f} GB" for what, now, then in pairs if now > GROWTH_MAX * then]
        now = f"now {gb[0]:.2f} GB uncompressed, " + (f"{gb[1]:.2f} GB compressed" if gb[1] is not None else "compressed not measured")
        check(f"{image}: size within 10% of docs/deploy.md ({was[0]:.2f} / {was[1]:.2f} GB)", not grown, "; ".join(grown) or now)
    if cuda_measured and not cuda_same:
        line = f"`Dockerfile.cuda` + `infra/cuda` sha256: `{cuda_sum}`"
        check("the CUDA images' compressed sizes are recorded for Dockerfile.cuda + infra/cuda as they are",
              False, f"{doc.name} records {said.group(1) if said else 'no checksum'}: with the sizes above in its table, "
                     f"record the line: {line}")


# ---------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docker", default="/usr/bin/docker")
    ap.add_argument("--images", nargs="+", default=list(IMAGES))
    ap.add_argument("--extra-ca", type=Path, default=Path("/nonexistent"))
    ap.add_argument("--build-times", type=Path)
    ap.add_argument("--deploy-doc", type=Path, default=REPO / "docs" / "deploy.md")
    ap.add_argument("--photos", type=int, default=12)
    ap.add_argument("--big", type=int, default=100)
    ap.add_argument("--large", type=int, default=60)
    args = ap.parse_args()

    docker = Docker(args.docker)
    work = Path(tempfile.mkdtemp(prefix="clipfn-image-check-py."))
    stack = Stack(work)
    try:
        t = time.monotonic()
        cpu = "cpu" in args.images
        keys, big, large = lay_out(stack.data, args.photos, args.big if cpu else 0, args.large if cpu else 0)
        stack.start()
        print(f"image-check: emulator on 127.0.0.1:{stack.port}, {len(keys)} camera photos, {len(big)} big photos "
              f"({figures.get('big_photo_bytes')} bytes) ready in {time.monotonic() - t:.0f} s", flush=True)
        checks = Checks(docker, stack, work, keys)
        checks.reference_embeddings()
        for image in args.images:
            t = time.monotonic()
            checks.serve_and_embed(image)
            checks.bad_model(image)
            if image != "cpu":
                checks.cuda_refuses(image)
                checks.cuda_ldd(image)
            checks.ca_clean(image, args.extra_ca)
            checks.cold_start(image)
            if image == "cpu":
                checks.lambda_peer()
                checks.schemathesis()
                checks.memory_1g(big)
                checks.memory_faces_ocr(large)
            print(f"image-check: {image} checked in {time.monotonic() - t:.0f} s", flush=True)
        t = time.monotonic()
        size_checks(docker, args.images, args.deploy_doc)
        print(f"image-check: sizes measured in {time.monotonic() - t:.0f} s", flush=True)
    except Exception as e:  # a check that could not run is a failed check
        import traceback

        traceback.print_exc()
        check("the checks ran to the end", False, f"{e.__class__.__name__}: {e}")
    finally:
        stack.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.build_times and args.build_times.is_file():
        figures["build_s"] = dict(line.split() for line in args.build_times.read_text().splitlines() if line.strip())
    print("image-check figures: " + json.dumps(figures, sort_keys=True))
    failed = sum(not ok for _, ok, _ in results)
    print(f"image-check: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
