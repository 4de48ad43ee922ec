#!/usr/bin/env python3
"""Score heads for clipfn's /v1/analyze (CLIPFN_HEADS=name=path,...), from the photo-album app's
models, with numpy and onnx only (no torch).

A head is a small ONNX graph that clipfn runs on the L2-normalised CLIP image embedding: float32
"embedding" [N, dim] in, one float32 "score" [N, 1] out; clipfn answers its value per photo under
"scores". The heads written here are plain ONNX (MatMul, Add, Sigmoid; opset 17, IR 8): they need
nothing but ONNX Runtime to run, and `dim` must be the serving model's (512 for ViT-B/32, 768 for
ViT-L/14), or clipfn refuses to start.

  linear   a torch nn.Linear(dim, 1) state dict, e.g. the app's aesthetic_regressor.pth:

               python infra/make_head.py linear --pth aesthetic_regressor.pth --out aesthetic.onnx

           score = x @ W.T + b (MatMul + Add). The app (app/model/aesthetic_regressor.py) wraps the
           layer as `self.fc`, so its keys are "fc.weight" [1, dim] and "fc.bias" [1]; its
           highlight service divides each embedding by its norm before the layer, exactly what
           clipfn feeds a head; its output is the raw regression value (no sigmoid, not bounded).
           --key-prefix auto (default) takes the one "<prefix>weight" / "<prefix>bias" pair with a
           weight of shape [1, dim] ("fc.", "linear.", "module.fc.", "" ...); --key-prefix fc. names
           it. A layer without bias gets b = 0.

           The .pth is read WITHOUT torch and without running its pickle: torch.save's zip layout
           (<name>/data.pkl, a pickle whose tensors are `torch._utils._rebuild_tensor_v2(storage,
           offset, size, stride, ...)` calls on persistent ids ('storage', StorageType, key,
           location, numel), the raw storages at <name>/data/<key>, <name>/byteorder), and also
           the legacy pre-1.6 layout (pickles of the magic number, protocol version 1001 and
           sys_info, the object, the storage keys, then each storage as int64 numel + raw bytes).
           The unpickler allows only collections.OrderedDict, torch._utils._rebuild_tensor_v2 /
           _rebuild_parameter and the torch.*Storage type names; any other global (os.system,
           builtins.eval, a module class ...) stops the load with an error before it can run.

  prompts  a positive / negative prompt pair, scored the way CLIP compares two texts:

               python infra/make_head.py prompts --server http://127.0.0.1:8080 \\
                   --positive "a sharp photo" --negative "a blurry photo" --out sharp.onnx [--scale 1]

           The text embeddings come from a running clipfn (POST URL/v1/embed {"texts": [...]},
           CLIPFN_TEXT_MODEL set; --header "Authorization: Bearer ..." for a Cloud Run service);
           each side's prompts are averaged and L2-normalised (CLIP's prompt ensembling), giving
           t_pos and t_neg, and the head is score = sigmoid(scale * (t_pos - t_neg) . x), [N, 1].

           Why that is the two-prompt softmax: for a unit embedding x the positive entry of
           softmax([s * t_pos.x, s * t_neg.x]) is e^a / (e^a + e^b) = 1 / (1 + e^-(a - b)) =
           sigmoid(a - b) with a - b = s * (t_pos - t_neg) . x: one linear layer (weight
           s * (t_pos - t_neg), bias 0) and a sigmoid.

           The scale: the photo-album app's quality test (app/service/quality.py,
           compute_pairwise_score) takes F.softmax of the raw cosines, i.e. scale 1 (the default
           here), and its thresholds (good >= 0.488, 0.75 * good + 0.25 * sharp >= 0.490 for
           ViT-B/32; 0.483 / 0.486 for ViT-L/14) are on that scale. CLIP's zero-shot recipe (and
           clipfn's /v1/classify) multiplies cosines by its logit scale, 100: --scale 100 gives that.
           Its pairs are "a good photo" / "a bad photo", "a sharp photo" / "a blurry photo", "a
           clean photo" / "a noisy photo", "a high contrast photo" / "a low contrast photo".

Each head is checked after writing (onnx.checker, then onnx's reference evaluator against numpy on
random unit vectors) and its metadata_props record where it came from (clipfn.head.*).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import pickle
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile

import numpy as np

OPSET = 17
# torch.<Name>Storage -> numpy dtype of its elements ("bfloat16" is widened by hand)
STORAGE_DTYPES = {
    "FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "BFloat16Storage": "bfloat16",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1",
    "ByteStorage": "u1", "BoolStorage": "?",
}
LEGACY_MAGIC, LEGACY_PROTOCOL = 0x1950A86A20F9469CFC6C, 1001


class PthError(Exception):
    """A .pth that cannot (or must not) be read; the message says why."""


# ---------------------------------------------------------------------------------------------
# torch.save files without torch


class _StorageType:
    """Stands for torch.<Name>Storage in a pickle: only names a dtype."""

    def __init__(self, name):
        self.name, self.dtype = name, STORAGE_DTYPES[name]

    def __repr__(self):
        return f"torch.{self.name}"


class _Storage:
    """One storage's elements (filled at once from a zip, after the pickle in the legacy layout)."""

    def __init__(self, stype, numel):
        self.stype, self.numel, self.array = stype, int(numel), None

    def fill(self, raw, byteorder="little"):
        if self.stype.dtype == "bfloat16":  # the high half of a float32
            bits = np.frombuffer(raw, "<u2" if byteorder == "little" else ">u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            dtype = np.dtype(self.stype.dtype)
            if byteorder == "big" and dtype.itemsize > 1:
                dtype = dtype.newbyteorder(">")
            if len(raw) % dtype.itemsize:
                raise PthError(f"storage of {len(raw)} bytes is not a whole number of {self.stype} elements")
            array = np.frombuffer(raw, dtype)
        if array.size != self.numel:
            raise PthError(f"storage holds {array.size} elements, the pickle says {self.numel}")
        self.array = array


class _View:
    """A legacy view: elements [offset, offset + size) of a root storage."""

    def __init__(self, root, offset, size):
        self.root, self.offset, self.numel = root, int(offset), int(size)

    @property
    def array(self):
        return self.root.array[self.offset:self.offset + self.numel]


class _Tensor:
    """A tensor as torch._utils._rebuild_tensor_v2 describes it; made an array once storages are read."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, int(offset), tuple(size), tuple(stride)
        if len(self.size) != len(self.stride) or min(self.size, default=1) < 0 or min(self.stride, default=0) < 0:
            raise PthError(f"bad tensor geometry: size {self.size}, stride {self.stride}")
        if 0 not in self.size:  # the last element it reaches must lie inside the storage
            last = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride))
            if self.offset < 0 or last >= storage.numel:
                raise PthError(f"tensor {self.size} at offset {self.offset} runs past its storage of {storage.numel}")

    def to_numpy(self):
        base = self.storage.array
        if 0 in self.size:
            return np.zeros(self.size, base.dtype)
        view = np.lib.stride_tricks.as_strided(base[self.offset:], self.size,
                                               [s * base.itemsize for s in self.stride], writeable=False)
        return np.array(view)  # a copy, in C order


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    if not isinstance(storage, (_Storage, _View)):
        raise PthError("_rebuild_tensor_v2 called on something that is not a storage")
    return _Tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None):  # state_dict(keep_vars=True)
    if not isinstance(data, _Tensor):
        raise PthError("_rebuild_parameter called on something that is not a tensor")
    return data


ALLOWED_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _StateDictUnpickler(pickle.Unpickler):
    """Resolves only the globals a state dict of plain tensors needs; refuses everything else
    before it can be called (a .pth is a pickle, and a pickle can name any function)."""

    def __init__(self, file, storage_for):
        super().__init__(file)
        self.storage_for = storage_for

    def find_class(self, module, name):
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            allowed = ", ".join(sorted(f"{m}.{n}" for m, n in ALLOWED_GLOBALS if not n.endswith("Storage")))
            raise PthError(f"refusing to load {module}.{name}: this .pth asks for a global that a "
                           f"state dict of tensors never needs (allowed: {allowed}, torch.*Storage); "
                           f"nothing from it was run") from None

    def persistent_load(self, pid):
        if self.storage_for is None:
            raise PthError(f"unexpected persistent id {pid!r} outside the object pickle")
        return self.storage_for(pid)


def _restricted_load(file, storage_for=None):
    try:
        return _StateDictUnpickler(file, storage_for).load()
    except PthError:
        raise
    except Exception as e:  # truncated or malformed pickle data
        raise PthError(f"cannot unpickle: {type(e).__name__}: {e}") from None


def _materialise(obj):
    if isinstance(obj, _Tensor):
        return obj.to_numpy()
    if isinstance(obj, dict):
        return collections.OrderedDict((k, _materialise(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_materialise(v) for v in obj)
    return obj


def _load_zip(path):
    with zipfile.ZipFile(path) as z:
        pickles = [n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise PthError(f"{path}: a torch.save zip holds one <name>/data.pkl, this one {len(pickles)}")
        prefix = pickles[0][: -len("data.pkl")]
        names = set(z.namelist())
        byteorder = z.read(prefix + "byteorder").decode().strip() if prefix + "byteorder" in names else "little"
        if byteorder not in ("little", "big"):
            raise PthError(f"{path}: unknown byteorder {byteorder!r}")
        storages = {}

        def storage_for(pid):
            if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                    and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)):
                raise PthError(f"{path}: unexpected persistent id {pid!r}")
            _, stype, key, _location, numel = pid
            if key not in storages:
                member = f"{prefix}data/{key}"
                if member not in names:
                    raise PthError(f"{path}: storage {key!r} is missing ({member})")
                storages[key] = _Storage(stype, numel)
                storages[key].fill(z.read(member), byteorder)
            return storages[key]

        return _materialise(_restricted_load(io.BytesIO(z.read(pickles[0])), storage_for))


def _load_legacy(path):
    """torch < 1.6: five pickles and the raw storages, one file."""
    f = io.BytesIO(open(path, "rb").read())
    try:
        magic = _restricted_load(f)
    except PthError as e:
        if "refusing" in str(e):
            raise
        raise PthError(f"{path}: neither a torch.save zip nor a legacy torch.save file ({e})") from None
    if magic != LEGACY_MAGIC:
        raise PthError(f"{path}: neither a zip nor a legacy torch.save file (no magic number)")
    if (version := _restricted_load(f)) != LEGACY_PROTOCOL:
        raise PthError(f"{path}: legacy torch.save protocol {version!r}, only {LEGACY_PROTOCOL} is known")
    sys_info = _restricted_load(f)
    if not isinstance(sys_info, dict) or not sys_info.get("little_endian", True):
        raise PthError(f"{path}: saved on a big-endian machine; re-save it with a current torch")
    roots, views = {}, {}

    def storage_for(pid):
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise PthError(f"{path}: unexpected persistent id {pid!r}")
        _, stype, key, _location, numel, view = pid
        roots.setdefault(key, _Storage(stype, numel))
        if view is None:
            return roots[key]
        view_key, offset, size = view
        return views.setdefault(view_key, _View(roots[key], offset, size))

    result = _restricted_load(f, storage_for)
    keys = _restricted_load(f)
    for key in keys:
        if key not in roots:
            raise PthError(f"{path}: storage {key!r} is listed but no tensor uses it")
        head = f.read(8)
        if len(head) != 8:
            raise PthError(f"{path}: truncated before storage {key!r}")
        numel = int.from_bytes(head, "little")
        itemsize = 2 if roots[key].stype.dtype == "bfloat16" else np.dtype(roots[key].stype.dtype).itemsize
        raw = f.read(numel * itemsize)
        if len(raw) != numel * itemsize:
            raise PthError(f"{path}: truncated inside storage {key!r}")
        roots[key].fill(raw)
    if missing := [k for k, s in roots.items() if s.array is None]:
        raise PthError(f"{path}: no data for storages {missing}")
    return _materialise(result)


def load_state_dict(path):
    """{key: numpy array} of a torch.save'd state dict, without torch and without running its pickle."""
    if zipfile.is_zipfile(path):
        state = _load_zip(path)
    elif tarfile.is_tarfile(path):
        raise PthError(f"{path}: the tar layout of torch < 0.4 is not supported; re-save it with a current torch")
    else:
        state = _load_legacy(path)
    if not isinstance(state, dict):
        raise PthError(f"{path}: holds a {type(state).__name__}, not a state dict")
    return state


def find_linear(state, key_prefix="auto"):
    """(prefix, W [1, dim] float32, b [1] float32) of the single-output Linear layer in `state`."""
    if key_prefix == "auto":
        found = [k[: -len("weight")] for k, v in state.items()
                 if isinstance(k, str) and k.endswith("weight") and isinstance(v, np.ndarray) and v.ndim == 2
                 and v.shape[0] == 1]
        if len(found) != 1:
            keys = {k: getattr(v, "shape", type(v).__name__) for k, v in state.items()}
            raise PthError(f"--key-prefix auto needs exactly one '<prefix>weight' of shape [1, dim], found "
                           f"{len(found)} {found}; keys: {keys}. Name it with --key-prefix")
        key_prefix = found[0]
    w, b = state.get(key_prefix + "weight"), state.get(key_prefix + "bias")
    if not isinstance(w, np.ndarray):
        raise PthError(f"no {key_prefix + 'weight'!r} in the state dict; keys: {sorted(map(str, state))}")
    if w.ndim != 2 or w.shape[0] != 1:
        raise PthError(f"{key_prefix}weight has shape {list(w.shape)}: a head is a Linear(dim, 1), weight [1, dim]")
    if b is None:
        b = np.zeros(1, np.float32)
    if not isinstance(b, np.ndarray) or b.shape != (1,):
        raise PthError(f"{key_prefix}bias has shape {list(np.shape(b))}, a Linear(dim, 1) has [1]")
    if not (np.isfinite(w).all() and np.isfinite(b).all()):
        raise PthError(f"{key_prefix}weight / bias hold NaN or infinite values")
    return key_prefix, w.astype(np.float32), b.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# the heads


def head_model(weight, bias, sigmoid, meta):
    """"embedding" float32 [N, dim] -> "score" float32 [N, 1] = (sigmoid of) x @ weight + bias;
    weight [dim, 1], bias [1]."""
    from onnx import TensorProto, helper, numpy_helper

    dim = weight.shape[0]
    inits = [numpy_helper.from_array(np.ascontiguousarray(weight, np.float32), "head.weight"),
             numpy_helper.from_array(np.ascontiguousarray(bias, np.float32), "head.bias")]
    nodes = [helper.make_node("MatMul", ["embedding", "head.weight"], ["matmul"], name="matmul"),
             helper.make_node("Add", ["matmul", "head.bias"], ["logit" if sigmoid else "score"], name="add")]
    if sigmoid:
        nodes.append(helper.make_node("Sigmoid", ["logit"], ["score"], name="sigmoid"))
    graph = helper.make_graph(nodes, "clipfn_head",
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", dim])],
                              [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N", 1])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="clipfn-infra-make_head", producer_version="1")
    model.ir_version = 8  # readable by every ONNX Runtime >= 1.10
    helper.set_model_props(model, {"clipfn.head.embedding_dim": str(dim), **meta})
    return model


def write_checked(model, out, expect):
    """Checks `model`, compares it with `expect` (numpy, [N, dim] -> [N, 1]) on random unit
    vectors in onnx's reference evaluator, and saves it atomically."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    onnx.checker.check_model(model, full_check=True)
    dim = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    x = np.random.default_rng(0).standard_normal((4, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    (got,) = ReferenceEvaluator(model).run(None, {"embedding": x})
    if got.shape != (4, 1) or not np.allclose(got, expect(x), atol=1e-5, rtol=1e-5):
        raise SystemExit(f"make_head: the written graph disagrees with numpy: {got.ravel()} vs {expect(x).ravel()}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    onnx.save_model(model, tmp)
    os.replace(tmp, out)
    return got


def cmd_linear(a):
    state = load_state_dict(a.pth)
    prefix, w, b = find_linear(state, a.key_prefix)
    sha = hashlib.sha256(open(a.pth, "rb").read()).hexdigest()
    meta = {"clipfn.head.kind": "linear", "clipfn.head.source": os.path.basename(a.pth),
            "clipfn.head.source_sha256": sha, "clipfn.head.key_prefix": prefix}
    model = head_model(w.T, b, False, meta)
    write_checked(model, a.out, lambda x: x @ w.T + b)
    norm = float(np.linalg.norm(w))
    print(f"make_head linear: {a.pth} keys {prefix}weight {list(w.shape)}, {prefix}bias -> {a.out}\n"
          f"  embedding [N, {w.shape[1]}] -> score [N, 1] = x @ W.T + b; b = {float(b[0]):.4f}, |W| = {norm:.4f}, "
          f"so a unit x scores within [{float(b[0]) - norm:.4f}, {float(b[0]) + norm:.4f}]")


def fetch_embeddings(server, texts, headers, timeout):
    """The L2-normalised text embeddings of `texts` from clipfn's POST /v1/embed, in order."""
    body = json.dumps({"texts": texts}).encode()
    req = urllib.request.Request(server.rstrip("/") + "/v1/embed", data=body, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            answer = json.load(r)
    except urllib.error.HTTPError as e:
        raise SystemExit(f"make_head: {server}/v1/embed answered {e.code}: {e.read()[:500].decode(errors='replace')}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise SystemExit(f"make_head: {server}/v1/embed: {e}")
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or len(data) != len(texts):
        raise SystemExit(f"make_head: {server}/v1/embed: expected {len(texts)} items under 'data', "
                         f"got {str(answer)[:300]}")
    rows = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "embedding" not in item:
            raise SystemExit(f"make_head: text {i} ({texts[i]!r}) has no embedding: {str(item)[:300]}")
        rows.append(np.asarray(item["embedding"], np.float64))
    if len({r.shape for r in rows}) != 1 or rows[0].ndim != 1 or not rows[0].size:
        raise SystemExit(f"make_head: embeddings of different or empty shapes: {[r.shape for r in rows]}")
    return np.stack(rows)


def unit(v):
    n = np.linalg.norm(v)
    if not np.isfinite(n) or n == 0:
        raise SystemExit("make_head: a side's mean embedding is zero or not finite")
    return v / n


def cmd_prompts(a):
    headers = {}
    for h in a.header:
        name, sep, value = h.partition(":")
        if not sep:
            raise SystemExit(f"make_head: --header {h!r} is not 'Name: value'")
        headers[name.strip()] = value.strip()
    e = fetch_embeddings(a.server, a.positive + a.negative, headers, a.timeout)
    t_pos, t_neg = unit(e[: len(a.positive)].mean(0)), unit(e[len(a.positive):].mean(0))
    w = (a.scale * (t_pos - t_neg)).astype(np.float32)
    meta = {"clipfn.head.kind": "prompts", "clipfn.head.positive": json.dumps(a.positive, ensure_ascii=False),
            "clipfn.head.negative": json.dumps(a.negative, ensure_ascii=False), "clipfn.head.scale": repr(a.scale),
            "clipfn.head.server": a.server}
    model = head_model(w[:, None], np.zeros(1, np.float32), True, meta)
    write_checked(model, a.out, lambda x: 1 / (1 + np.exp(-(x @ w[:, None]))))
    print(f"make_head prompts: {len(a.positive)} positive, {len(a.negative)} negative prompt(s) "
          f"from {a.server} -> {a.out}\n"
          f"  embedding [N, {w.size}] -> score [N, 1] = sigmoid({a.scale:g} * (t_pos - t_neg) . x); "
          f"cos(t_pos, t_neg) = {float(t_pos @ t_neg):.4f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lin = sub.add_parser("linear", help="a torch Linear(dim, 1) state dict (.pth) -> head")
    lin.add_argument("--pth", required=True, help="torch.save'd state dict (zip or legacy layout)")
    lin.add_argument("--out", required=True, help="the head .onnx to write")
    lin.add_argument("--key-prefix", default="auto",
                     help="prefix of the layer's keys, e.g. 'fc.' for fc.weight / fc.bias; '' for none; "
                          "auto (default): the one [1, dim] weight")
    pr = sub.add_parser("prompts", help="positive / negative prompts, via a running clipfn -> sigmoid head")
    pr.add_argument("--server", required=True, help="clipfn base URL, e.g. http://127.0.0.1:8080")
    pr.add_argument("--positive", action="append", required=True, help="a positive prompt (repeat for several)")
    pr.add_argument("--negative", action="append", required=True, help="a negative prompt (repeat for several)")
    pr.add_argument("--out", required=True, help="the head .onnx to write")
    pr.add_argument("--scale", type=float, default=1.0,
                    help="logit scale (default 1, the photo-album app's quality scores; CLIP's zero-shot uses 100)")
    pr.add_argument("--header", action="append", default=[], help="an extra HTTP header, 'Name: value'")
    pr.add_argument("--timeout", type=float, default=60.0, help="seconds for the /v1/embed call")
    a = ap.parse_args(argv)
    try:
        (cmd_linear if a.cmd == "linear" else cmd_prompts)(a)
    except PthError as e:
        raise SystemExit(f"make_head: {e}")
    except (OSError, zipfile.BadZipFile) as e:
        raise SystemExit(f"make_head: {e}")


if __name__ == "__main__":
    main()
