"""dlib's face-recognition ResNet (dlib_face_recognition_resnet_model_v1, CC0) rebuilt as ONNX from the
real weights that @vladmandic/face-api ships: model/face_recognition_model-weights_manifest.json and
its .bin (tfjs weights, mostly 8-bit quantised, no graph). numpy + onnx only.

The architecture is the one face-api's FaceRecognitionNet runs (read in its source, not copied):
  x  = (RGB - (122.782, 117.001, 104.298)) / input_scale      face-api: 255; dlib itself: 256
  conv32_down   7x7 stride 2, no padding, 3 -> 32, ReLU; then max-pool 3x3 stride 2, no padding
  residual x3 (32), residual_down + x3 (64), residual_down + x2 (128), residual_down + x2 (256),
  residual_down (256, "conv256_down_out"); mean over H, W; MatMul fc [256, 128] -> 128 values.
Every conv: conv (+ bias), then a per-channel scale layer (x * w + b); here the scale is folded
into the conv (W * w, bias * w + b). residual: ReLU(conv) -> conv -> + x -> ReLU (3x3, padding 1).
residual_down: ReLU(conv 3x3 stride 2, no padding) -> conv 3x3 padding 1; the shortcut is a 2x2
stride-2 average pool of x, zero-padded on the channel axis when the width doubles; where the conv
path comes out one row and column short of the pool (odd sizes: 8 -> 3 vs 4, 4 -> 1 vs 2) it gets
a zero row at the bottom and a zero column at the right; then + and ReLU. 29 convs in all.

The file: input "input" float32 [N, 3, 150, 150], raw RGB 0-255 NCHW (the normalisation is in the
graph, part of the format); output "embedding" float32 [N, 128], NOT L2-normalised (face-api's
descriptor). metadata_props: clipfn.face_format=dlib, clipfn.input_scale, the mean, the weights'
sha256. The 150 px chip itself (dlib's alignment) is the caller's: see docs/faces-real-weights.md.
"""
import hashlib
import json
import os

import numpy as np
from onnx import TensorProto, helper

from .graph import Graph, learned_params, onnx_model

MANIFEST = "face_recognition_model-weights_manifest.json"
MEAN_RGB = (122.782, 117.001, 104.298)
SIZE, DIM = 150, 128
MODEL_ID = "dlib-face-recognition-resnet-v1/faceapi-1.7.15"
# the 4 stages: (prefix, residual_down first?, plain residual blocks); then conv256_down_out
STAGES = [("conv32", False, 3), ("conv64", True, 3), ("conv128", True, 2), ("conv256", True, 2)]
DTYPES = {"uint8": np.uint8, "uint16": np.uint16, "float16": np.float16, "float32": np.float32,
          "int32": np.int32}


def read_weights(folder):
    """{name: float32 array in tfjs layout} from the manifest and its shards, dequantised as tfjs does
    (uint8 / uint16: q * scale + min; float16: as is)."""
    with open(os.path.join(folder, MANIFEST)) as f:
        manifest = json.load(f)
    out = {}
    for group in manifest:
        buf = b"".join(open(os.path.join(folder, p), "rb").read() for p in group["paths"])
        off = 0
        for w in group["weights"]:
            n = int(np.prod(w["shape"], dtype=np.int64))
            q = w.get("quantization")
            dt = np.dtype(DTYPES[q["dtype"] if q else w["dtype"]])
            raw = np.frombuffer(buf, dt, n, off)
            off += n * dt.itemsize
            if q and q["dtype"] in ("uint8", "uint16"):
                vals = raw.astype(np.float64) * q["scale"] + q["min"]  # tfjs: in doubles, kept as float32
            else:
                vals = raw
            out[w["name"]] = vals.astype(np.float32).reshape(w["shape"])
        if off != len(buf):
            raise ValueError(f"{folder}: group {group['paths']} holds {len(buf)} bytes, its weights {off}")
    return out


def weights_sha256(folder):
    """sha256 of the manifest and of each shard it names (the inputs of the build)."""
    with open(os.path.join(folder, MANIFEST)) as f:
        paths = [p for g in json.load(f) for p in g["paths"]]
    return {n: hashlib.sha256(open(os.path.join(folder, n), "rb").read()).hexdigest() for n in [MANIFEST, *paths]}


class _Net:
    """Builds the graph while tracking the activation's shape [C, H, W] (the zero pads need it)."""

    def __init__(self, weights):
        self.w, self.used, self.g = weights, set(), Graph(None)

    def take(self, name):
        self.used.add(name)
        return self.w[name]

    def conv(self, x, prefix, shape, stride, pad, relu):
        """conv + bias + scale layer (folded), ReLU or not; returns (out, new shape)."""
        f = self.take(f"{prefix}/conv/filters")  # tfjs [kh, kw, in, out]
        bias, sw, sb = (self.take(f"{prefix}/{n}") for n in ("conv/bias", "scale/weights", "scale/biases"))
        kh, kw, cin, cout = f.shape
        assert cin == shape[0] and kh == kw, (prefix, f.shape, shape)
        wt = (f.astype(np.float64) * sw).astype(np.float32).transpose(3, 2, 0, 1)  # -> [out, in, kh, kw]
        b = (bias.astype(np.float64) * sw + sb).astype(np.float32)
        g = self.g
        y = g.op("Conv", [x, g.const(f"{prefix}.weight", wt), g.const(f"{prefix}.bias", b)],
                 kernel_shape=[kh, kw], strides=[stride, stride], pads=[pad] * 4)
        h = (shape[1] + 2 * pad - kh) // stride + 1
        w = (shape[2] + 2 * pad - kw) // stride + 1
        return (g.op("Relu", [y]) if relu else y), (cout, h, w)

    def residual(self, x, prefix, shape):
        y, s = self.conv(x, f"{prefix}/conv1", shape, 1, 1, True)
        y, s = self.conv(y, f"{prefix}/conv2", s, 1, 1, False)
        assert s == shape, (prefix, s, shape)
        return self.g.op("Relu", [self.g.op("Add", [y, x])]), s

    def residual_down(self, x, prefix, shape):
        g = self.g
        y, s = self.conv(x, f"{prefix}/conv1", shape, 2, 0, True)
        y, s = self.conv(y, f"{prefix}/conv2", s, 1, 1, False)
        pooled = g.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
        ps = (shape[0], shape[1] // 2, shape[2] // 2)
        if ps[1:] != s[1:]:  # the conv path is one row and one column short: zeros at the bottom, right
            assert (ps[1] - s[1], ps[2] - s[2]) == (1, 1), (prefix, ps, s)
            y = g.op("Pad", [y, g.ints([0, 0, 0, 0, 0, 0, 1, 1])], mode="constant")
        if ps[0] != s[0]:  # the width grows: the shortcut's extra channels are zeros
            pooled = g.op("Pad", [pooled, g.ints([0, 0, 0, 0, 0, s[0] - ps[0], 0, 0])], mode="constant")
        out_shape = (s[0], ps[1], ps[2])
        return g.op("Relu", [g.op("Add", [pooled, y])]), out_shape


def build(folder, input_scale=255):
    """(onnx model, learned parameter count) from a face-api model folder."""
    if input_scale not in (255, 256):
        raise ValueError(f"input_scale {input_scale}: face-api divides by 255, dlib by 256")
    net = _Net(read_weights(folder))
    g = net.g
    mean = g.const("mean_rgb", np.array(MEAN_RGB, np.float32).reshape(1, 3, 1, 1))
    x = g.op("Div", [g.op("Sub", ["input", mean]), g.floats(float(input_scale))])
    x, s = net.conv(x, "conv32_down", (3, SIZE, SIZE), 2, 0, True)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    s = (s[0], (s[1] - 3) // 2 + 1, (s[2] - 3) // 2 + 1)
    for prefix, down, n in STAGES:
        if down:
            x, s = net.residual_down(x, f"{prefix}_down", s)
        for i in range(1, n + 1):
            x, s = net.residual(x, f"{prefix}_{i}", s)
    x, s = net.residual_down(x, "conv256_down_out", s)
    x = g.op("ReduceMean", [x], axes=[2, 3], keepdims=0)  # [N, 256]
    fc = g.const("fc.weight", net.take("fc"))
    g.nodes.append(helper.make_node("MatMul", [x, fc], ["embedding"], name="embedding"))
    unused = sorted(set(net.w) - net.used)
    if unused:
        raise ValueError(f"{folder}: weights the architecture does not use: {unused}")
    convs = sum(1 for n in g.nodes if n.op_type == "Conv")
    assert convs == 29, convs
    sha = weights_sha256(folder)
    meta = {"clipfn.model_id": MODEL_ID, "clipfn.kind": "dlib-recognizer", "clipfn.face_format": "dlib",
            "clipfn.input_size": str(SIZE), "clipfn.embedding_dim": str(DIM),
            "clipfn.input": "RGB 0-255 NCHW; (x - mean) / input_scale is in the graph",
            "clipfn.mean": ",".join(map(str, MEAN_RGB)), "clipfn.input_scale": str(input_scale),
            "clipfn.normalized": "false",
            "clipfn.weights": "@vladmandic/face-api 1.7.15 model/face_recognition_model (dlib, CC0)",
            **{f"clipfn.sha256.{n}": h for n, h in sha.items()}}
    model = onnx_model(g, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
                       [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", DIM])],
                       "clipfn_dlib_recognizer", meta)
    return model, learned_params(g)


def check(path):
    """A batch of 2 chips in ONNX Runtime: names, shapes, finite; returns a line of figures."""
    import time

    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert inp.name == "input" and inp.shape == ["N", 3, SIZE, SIZE], inp.shape
    x = np.random.default_rng(5).uniform(0, 255, (2, 3, SIZE, SIZE)).astype(np.float32)
    t = time.perf_counter()
    (y,) = sess.run(None, {"input": x})
    dt = time.perf_counter() - t
    assert y.shape == (2, DIM) and np.isfinite(y).all(), y.shape
    n = np.linalg.norm(y, axis=1)
    return (f"{inp.name} {inp.shape} -> {out.name} {out.shape}; batch of 2 in {dt * 1000:.1f} ms, "
            f"|y| = {n[0]:.3f}, {n[1]:.3f}, cos(y0, y1) = {float(y[0] @ y[1] / n[0] / n[1]):.3f}")
