"""infra/make_head.py: score heads for CLIPFN_HEADS from a torch Linear state dict (.pth) or from a
positive / negative prompt pair, checked in ONNX Runtime against numpy.

torch is not installed here, so the .pth files are written by `write_pth` below, which follows
torch.save's layout: a zip holding <name>/data.pkl (pickle protocol 2; each tensor a
torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks) call on the
persistent id ('storage', torch.FloatStorage, key, 'cpu', numel); the state dict an OrderedDict
with a `_metadata` attribute), <name>/data/<key> (raw little-endian storages), <name>/byteorder and
<name>/version; and `write_legacy_pth` the pre-1.6 layout (the magic number, protocol 1001 and
sys_info pickles, the object, the sorted storage keys, then each storage as int64 numel + bytes).
The pickles name torch's globals through stand-in modules that exist only while they are written.
make_head.py was also run on the photo-album app's real aesthetic_regressor.pth files (not kept
here): keys fc.weight [1, 512] / fc.bias [1] (ViT-B/32) and [1, 768] (ViT-L/14)."""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import pickle
import subprocess
import sys
import threading
import types
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from conftest import REPO

ort = pytest.importorskip("onnxruntime")

MAKE_HEAD = REPO / "infra" / "make_head.py"
DIM = 512


# --------------------------------------------------------------------------------------------
# torch.save's layouts, written without torch


class _Storage:
    def __init__(self, key, array):
        self.key, self.array = key, np.ascontiguousarray(array, "<f4").ravel()


class _Tensor:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    def __reduce_ex__(self, protocol):
        rebuild = sys.modules["torch._utils"]._rebuild_tensor_v2
        return rebuild, (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict())


@contextlib.contextmanager
def _torch_names():
    """Stand-in modules, so that pickle writes GLOBAL 'torch FloatStorage' and
    'torch._utils _rebuild_tensor_v2' as torch.save does; removed afterwards."""
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    class FloatStorage:
        pass

    def _rebuild_tensor_v2(*args):
        raise AssertionError("only written here, never called")

    FloatStorage.__module__, FloatStorage.__qualname__ = "torch", "FloatStorage"
    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    torch.FloatStorage, torch._utils, utils._rebuild_tensor_v2 = FloatStorage, utils, _rebuild_tensor_v2
    saved = {name: sys.modules.get(name) for name in ("torch", "torch._utils")}
    sys.modules.update({"torch": torch, "torch._utils": utils})
    try:
        yield torch
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _state_dict(tensors, modules):
    """An OrderedDict of tensors with torch's `_metadata` attribute (the module versions)."""
    state = collections.OrderedDict(tensors)
    state._metadata = collections.OrderedDict((m, {"version": 1}) for m in ["", *modules])
    return state


def linear_state(w, b, prefix, shared=False):
    """A Linear(dim, 1)'s state dict as _Tensors: weight and bias in their own storages, or
    (shared) views into one storage at offsets, as a flattened parameter buffer would be."""
    if shared:
        storage = _Storage("0", np.concatenate([np.zeros(3), w.ravel(), np.zeros(2), b]))
        weight = _Tensor(storage, 3, w.shape, (w.shape[1], 1))
        bias = _Tensor(storage, 3 + w.size + 2, b.shape, (1,))
    else:
        weight = _Tensor(_Storage("0", w), 0, w.shape, (w.shape[1], 1))
        bias = _Tensor(_Storage("1", b), 0, b.shape, (1,))
    return _state_dict([(prefix + "weight", weight), (prefix + "bias", bias)], [prefix.rstrip(".")] if prefix else [])


def _pickle_state(state, buf, legacy=False):
    """Pickles `state` into `buf` as torch.save does, tensors' storages by persistent id (the
    legacy layout's id has one more field); returns the storages by key."""
    storages = {}
    with _torch_names() as torch:
        class Pickler(pickle.Pickler):
            def persistent_id(self, obj):
                if isinstance(obj, _Storage):
                    storages[obj.key] = obj
                    found = ("storage", torch.FloatStorage, obj.key, "cpu", obj.array.size)
                    return found + (None,) if legacy else found
                return None

        Pickler(buf, protocol=2).dump(state)
    return storages


def write_pth(path, state, name="archive"):
    """torch.save's zip layout (torch >= 1.6)."""
    buf = io.BytesIO()
    storages = _pickle_state(state, buf)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", buf.getvalue())
        z.writestr(f"{name}/byteorder", "little")
        for key, storage in storages.items():
            z.writestr(f"{name}/data/{key}", storage.array.tobytes())
        z.writestr(f"{name}/version", "3\n")
        z.writestr(f"{name}/.data/serialization_id", "0123456789")


def write_legacy_pth(path, state):
    """torch.save's layout before 1.6 (_use_new_zipfile_serialization=False)."""
    buf = io.BytesIO()
    for header in (0x1950A86A20F9469CFC6C, 1001,
                   {"protocol_version": 1001, "little_endian": True,
                    "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(header, buf, protocol=2)
    storages = _pickle_state(state, buf, legacy=True)
    keys = sorted(storages)
    pickle.dump(keys, buf, protocol=2)
    for key in keys:
        buf.write(storages[key].array.size.to_bytes(8, "little") + storages[key].array.tobytes())
    path.write_bytes(buf.getvalue())


# --------------------------------------------------------------------------------------------
# helpers


def make_head(*args, check=True):
    proc = subprocess.run([sys.executable, str(MAKE_HEAD), *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def unit_vectors(n, dim=DIM, seed=7):
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def run_head(path, x):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert (inp.name, inp.type, inp.shape) == ("embedding", "tensor(float)", ["N", x.shape[1]])
    assert (out.name, out.type, out.shape) == ("score", "tensor(float)", ["N", 1])
    (y,) = sess.run(None, {"embedding": x})
    return y


@pytest.fixture(scope="module")
def linear_weights():
    rng = np.random.default_rng(20240601)
    w = (rng.standard_normal((1, DIM)) * 0.1).astype(np.float32)
    return w, np.array([4.25], np.float32)


# --------------------------------------------------------------------------------------------
# linear


@pytest.mark.parametrize("prefix,shared", [("", False), ("fc.", False), ("linear.", True), ("module.fc.", False)])
def test_linear_head_equals_the_layer(tmp_path, linear_weights, prefix, shared):
    w, b = linear_weights
    pth, out = tmp_path / "aesthetic_regressor.pth", tmp_path / "head.onnx"
    write_pth(pth, linear_state(w, b, prefix, shared))
    proc = make_head("linear", "--pth", pth, "--out", out)  # --key-prefix auto
    assert f"keys {prefix}weight [1, {DIM}]" in proc.stdout, proc.stdout
    x = unit_vectors(64)
    y = run_head(out, x)
    assert y.shape == (64, 1)
    np.testing.assert_allclose(y, x @ w.T + b, atol=1e-5, rtol=0)


def test_linear_head_from_the_legacy_layout(tmp_path, linear_weights):
    w, b = linear_weights
    pth, out = tmp_path / "old.pth", tmp_path / "head.onnx"
    write_legacy_pth(pth, linear_state(w, b, "fc."))
    make_head("linear", "--pth", pth, "--out", out, "--key-prefix", "fc.")
    x = unit_vectors(16)
    np.testing.assert_allclose(run_head(out, x), x @ w.T + b, atol=1e-5, rtol=0)


def test_linear_head_metadata_and_graph(tmp_path, linear_weights):
    import onnx

    w, b = linear_weights
    pth, out = tmp_path / "a.pth", tmp_path / "head.onnx"
    write_pth(pth, linear_state(w, b, "fc."))
    make_head("linear", "--pth", pth, "--out", out)
    model = onnx.load(str(out))
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Add"]
    assert model.opset_import[0].version == 17 and model.ir_version == 8
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["clipfn.head.kind"] == "linear" and meta["clipfn.head.key_prefix"] == "fc."
    assert meta["clipfn.head.embedding_dim"] == str(DIM) and len(meta["clipfn.head.source_sha256"]) == 64


def test_a_named_prefix_that_is_absent_is_refused(tmp_path, linear_weights):
    pth = tmp_path / "a.pth"
    write_pth(pth, linear_state(*linear_weights, "fc."))
    proc = make_head("linear", "--pth", pth, "--out", tmp_path / "h.onnx", "--key-prefix", "linear.", check=False)
    assert proc.returncode != 0 and "no 'linear.weight'" in proc.stderr and "fc.weight" in proc.stderr, proc.stderr
    assert not (tmp_path / "h.onnx").exists()


def test_two_candidate_layers_need_a_prefix(tmp_path, linear_weights):
    w, b = linear_weights
    a, c = linear_state(w, b, "a."), linear_state(w * 2, b, "c.")
    pth = tmp_path / "two.pth"
    write_pth(pth, _state_dict([*a.items(), *[(k, _Tensor(_Storage(k, v.storage.array), 0, v.size, v.stride))
                                            for k, v in c.items()]], ["a", "c"]))
    proc = make_head("linear", "--pth", pth, "--out", tmp_path / "h.onnx", check=False)
    assert proc.returncode != 0 and "found 2" in proc.stderr and "--key-prefix" in proc.stderr, proc.stderr
    make_head("linear", "--pth", pth, "--out", tmp_path / "h.onnx", "--key-prefix", "c.")
    x = unit_vectors(8)
    np.testing.assert_allclose(run_head(tmp_path / "h.onnx", x), x @ (2 * w).T + b, atol=1e-5, rtol=0)


def test_a_layer_with_several_outputs_is_refused(tmp_path):
    w, b = np.ones((3, DIM), np.float32), np.zeros(3, np.float32)
    pth = tmp_path / "a.pth"
    write_pth(pth, linear_state(w, b, "fc."))
    proc = make_head("linear", "--pth", pth, "--out", tmp_path / "h.onnx", "--key-prefix", "fc.", check=False)
    assert proc.returncode != 0 and "[3, 512]" in proc.stderr and "Linear(dim, 1)" in proc.stderr, proc.stderr


class _Evil:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


@pytest.mark.parametrize("layout", ["zip", "raw pickle"])
def test_a_pickle_that_calls_anything_else_is_refused_and_nothing_runs(tmp_path, layout):
    marker = tmp_path / "ran"
    payload = pickle.dumps(collections.OrderedDict(weight=_Evil(f"touch {marker}")), protocol=2)
    pth = tmp_path / "evil.pth"
    if layout == "zip":
        with zipfile.ZipFile(pth, "w") as z:
            z.writestr("archive/data.pkl", payload)
    else:
        pth.write_bytes(payload)
    proc = make_head("linear", "--pth", pth, "--out", tmp_path / "h.onnx", check=False)
    assert proc.returncode != 0
    assert f"refusing to load {os.system.__module__}.system" in proc.stderr, proc.stderr
    assert "nothing from it was run" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists() and not (tmp_path / "h.onnx").exists()


def test_a_file_that_is_no_torch_save_is_refused(tmp_path):
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint at all")
    proc = make_head("linear", "--pth", junk, "--out", tmp_path / "h.onnx", check=False)
    assert proc.returncode != 0 and "neither a torch.save zip nor a legacy" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------------------------
# prompts


TEXTS = ["a sharp photo", "a crisp photo", "a blurry photo"]


@pytest.fixture
def embed_server():
    """A stand-in clipfn answering POST /v1/embed {"texts": [...]} with fixed unit vectors per text."""
    rng = np.random.default_rng(11)
    base = rng.standard_normal(DIM)
    table = {}
    for text in TEXTS:  # correlated, as real prompt embeddings are (cosines around 0.8)
        v = base + 0.5 * rng.standard_normal(DIM)
        table[text] = v / np.linalg.norm(v)
    requests = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append((self.path, body, dict(self.headers)))
            data = [{"index": i, "text": t, "embedding": table[t].tolist()} for i, t in enumerate(body["texts"])]
            raw = json.dumps({"model": "stub", "dim": DIM, "data": data}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", table, requests
    finally:
        server.shutdown()
        server.server_close()


def _softmax_positive(x, t_pos, t_neg, scale):
    logits = np.stack([scale * (x @ t_pos), scale * (x @ t_neg)], axis=1)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True))[:, :1]


@pytest.mark.parametrize("scale", [None, 100.0])
def test_prompt_head_is_the_two_prompt_softmax(tmp_path, embed_server, scale):
    url, table, requests = embed_server
    out = tmp_path / "sharp.onnx"
    args = ["prompts", "--server", url, "--positive", TEXTS[0], "--positive", TEXTS[1], "--negative", TEXTS[2],
            "--out", out, "--header", "Authorization: Bearer test-token"]
    make_head(*args, *([] if scale is None else ["--scale", scale]))
    (path, body, headers), = requests
    assert path == "/v1/embed" and body == {"texts": TEXTS} and headers["Authorization"] == "Bearer test-token"

    t_pos = table[TEXTS[0]] + table[TEXTS[1]]
    t_pos, t_neg = t_pos / np.linalg.norm(t_pos), table[TEXTS[2]]
    # random unit vectors, and vectors near the prompts so that scores spread over (0, 1)
    x = np.concatenate([unit_vectors(32), unit_vectors(16, seed=8) * 0.3 + t_pos,
                        unit_vectors(16, seed=9) * 0.3 + t_neg])
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    y = run_head(out, x)
    want = _softmax_positive(x.astype(np.float64), t_pos, t_neg, 1.0 if scale is None else scale)
    np.testing.assert_allclose(y, want, atol=1e-5, rtol=0)
    assert y.min() < 0.5 < y.max()


def test_prompts_without_a_server_fail_clearly(tmp_path):
    proc = make_head("prompts", "--server", "http://127.0.0.1:9", "--positive", "a", "--negative", "b",
                     "--out", tmp_path / "h.onnx", "--timeout", "5", check=False)
    assert proc.returncode != 0 and "/v1/embed" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
