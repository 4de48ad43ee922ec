"""A TensorFlow.js graph model (model JSON + weight shards) to ONNX, node by node: the converter
that tools/centernet_onnx.py (Human's CenterNet) and tools/nsfwjs_onnx.py (nsfwjs's MobileNetV2Mid)
share.

  - weights are decoded as tfjs-core's io_utils decodes them: float32 and int32 as stored; float16
    widened to float32 (IEEE half to single, no other rounding); uint8 / uint16 quantised float32
    as q * scale + min in float64, stored as float32 (int32: Math.round of the same);
  - the input stays NHWC as the tfjs graph declares it; a free batch dimension (-1) becomes the
    symbolic dim "N" of the input and of every output (ops that would bake a batch size in, Reshape
    and ResizeBilinear, refuse it); inside, 4-D activations run NCHW (ONNX's convolutions), with
    one Transpose in after the input and one back wherever an op needs the TensorFlow layout;
  - outputs keep their tfjs names, shapes and layouts.

Op by op (TF -> ONNX): Conv2D / _FusedConv2D (BiasAdd, BiasAdd+Relu, BiasAdd+Relu6) -> Conv
(+Relu / Clip), weights HWIO -> OIHW, SAME padding as explicit pads (TensorFlow pads the extra
pixel at the end); DepthwiseConv2dNative / FusedDepthwiseConv2dNative -> Conv with group = channels,
weights HW(C,M) -> (C*M)1HW; Relu6 -> Clip(0, 6); Relu, Sigmoid, Add/AddV2, Sub, Mul, Equal,
Identity -> the same; Mean (keep_dims) -> ReduceMean; ConcatV2 -> Concat; ResizeBilinear
(align_corners / half_pixel_centers) -> Resize linear, coordinate_transformation_mode
align_corners / half_pixel / asymmetric; MaxPool -> MaxPool; AvgPool -> AveragePool (padding
excluded from the count, as TensorFlow); Squeeze -> Squeeze; MatMul / _FusedMatMul (BiasAdd
[+Relu/Relu6]) -> Gemm (+Relu / Clip); Softmax (last axis) -> Softmax; Cast -> Cast; Reshape ->
Reshape; ExpandDims -> Unsqueeze; GatherV2 (batch_dims 0) -> Gather; StridedSlice (begin/end masks
only) -> Slice; TopKV2 -> TopK (largest, sorted; int64 indices cast to int32 as TensorFlow's);
FloorDiv on integers -> Div(a - Mod(a, b), b) (exact floor division), on floats -> Floor(Div);
FloorMod (integers) -> Mod(fmod=0). Anything else, or any attribute outside what is handled,
stops the conversion with a message (ConvertError).
"""
import base64
import hashlib
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
NHWC_TO_NCHW = [0, 3, 1, 2]
NCHW_TO_NHWC = [0, 2, 3, 1]
AXIS_NHWC_TO_NCHW = {0: 0, 1: 2, 2: 3, 3: 1}
BATCH = "N"  # the symbolic batch dimension of a graph whose input batch is -1
TF_DTYPES = {"DT_FLOAT": (np.float32, TensorProto.FLOAT), "DT_INT32": (np.int32, TensorProto.INT32),
             "DT_BOOL": (np.bool_, TensorProto.BOOL), "DT_INT64": (np.int64, TensorProto.INT64)}
ONNX_OF_NP = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}


class ConvertError(Exception):
    pass


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_weights(model_json, bin_dir, weights_path=None):
    """{name: numpy array} from the manifest and its .bin, as tfjs decodes them."""
    out = {}
    for group in model_json["weightsManifest"]:
        paths = group["paths"]
        if weights_path is not None:
            if len(paths) != 1:
                raise ConvertError(f"--weights given, but the manifest names {len(paths)} files: {paths}")
            blobs = [read_bytes(weights_path)]
        else:
            blobs = [read_bytes(os.path.join(bin_dir, p)) for p in paths]
        data = b"".join(blobs)
        off = 0
        for w in group["weights"]:
            shape = [int(s) for s in w["shape"]]
            n = int(np.prod(shape)) if shape else 1
            q = w.get("quantization")
            if q is None:
                dt = {"float32": np.float32, "int32": np.int32}.get(w["dtype"])
                if dt is None:
                    raise ConvertError(f"{w['name']}: dtype {w['dtype']} not handled")
                size = n * 4
                arr = np.frombuffer(data, dt, n, off).copy()
            elif q.get("dtype") == "float16" and w["dtype"] == "float32":
                size = n * 2
                arr = np.frombuffer(data, np.float16, n, off).astype(np.float32)
            elif q.get("dtype") in ("uint8", "uint16") and w["dtype"] in ("float32", "int32"):
                qt = np.uint8 if q["dtype"] == "uint8" else np.uint16
                size = n * np.dtype(qt).itemsize
                # tfjs-core io_utils: values[i] = v * scale + min (JavaScript doubles), stored as float32,
                # or Math.round of it (half up) for int32
                v = np.frombuffer(data, qt, n, off).astype(np.float64) * float(q["scale"]) + float(q["min"])
                arr = v.astype(np.float32) if w["dtype"] == "float32" else np.floor(v + 0.5).astype(np.int32)
            else:
                raise ConvertError(f"{w['name']}: quantization {q} not handled "
                                   "(float16 -> float32, uint8 / uint16 -> float32 / int32)")
            off += size
            out[w["name"]] = arr.reshape(shape)
        if off != len(data):
            raise ConvertError(f"the manifest accounts for {off} bytes, the weights hold {len(data)}")
    return out


class T:
    """A converted tensor: ONNX name (None while only a constant), TF (NHWC) shape, numpy dtype,
    layout of a 4-D tensor in ONNX ('nhwc' or 'nchw'), and its value when it is a constant."""

    def __init__(self, name, shape, dtype, layout="nhwc", value=None):
        self.name, self.shape, self.dtype, self.layout, self.value = name, list(shape), np.dtype(dtype), layout, value

    @property
    def const(self):
        return self.value is not None


class Converter:
    def __init__(self, model_json, weights):
        self.topo = model_json["modelTopology"]
        self.sig = model_json.get("signature", {})
        self.weights = weights
        self.nodes, self.inits, self.inputs = [], [], []
        self.env = {}
        self.ops_seen = {}
        self.cache = {}
        self.counter = 0
        self.free_batch = False  # the input's batch is -1: declared "N", traced as 1

    # -- helpers -----------------------------------------------------------------------------
    def fresh(self, base):
        self.counter += 1
        return f"{base}__{self.counter}"

    def node(self, op, inputs, outputs, name=None, **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name or self.fresh(outputs[0]), **attrs))

    def init(self, base, arr):
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def materialise(self, t, base="const"):
        """The ONNX name of t (an initialiser for a constant)."""
        if t.name is None:
            t.name = self.init(base, t.value)
        return t.name

    def to_layout(self, t, layout):
        """t's ONNX name in the wanted layout (4-D activations only; others are unchanged)."""
        if len(t.shape) != 4 or t.layout == layout:
            return self.materialise(t)
        if t.const:
            perm = NHWC_TO_NCHW if layout == "nchw" else NCHW_TO_NHWC
            return self.init("const_t", np.transpose(t.value, perm))
        key = (t.name, layout)
        if key not in self.cache:
            out = self.fresh(t.name + ("_nchw" if layout == "nchw" else "_nhwc"))
            self.node("Transpose", [t.name], [out], perm=NHWC_TO_NCHW if layout == "nchw" else NCHW_TO_NHWC)
            self.cache[key] = out
        return self.cache[key]

    def const_value(self, tf_name, what):
        t = self.env[tf_name]
        if not t.const:
            raise ConvertError(f"{what}: {tf_name} is not a constant")
        return t.value

    @staticmethod
    def attr(n, key, default=None):
        a = n.get("attr", {}).get(key)
        if a is None:
            return default
        if "s" in a:
            return base64.b64decode(a["s"]).decode()
        if "list" in a:
            lst = a["list"]
            if "i" in lst:
                return [int(v) for v in lst["i"]]
            if "s" in lst:
                return [base64.b64decode(v).decode() for v in lst["s"]]
            return []
        if "i" in a:
            return int(a["i"])
        if "b" in a:
            return bool(a["b"])
        if "f" in a:
            return float(a["f"])
        if "type" in a:
            return a["type"]
        return a

    def src(self, ref):
        name, _, idx = ref.partition(":")
        if ref.startswith("^"):
            return None
        key = name if idx in ("", "0") else f"{name}:{idx}"
        if key not in self.env:
            raise ConvertError(f"input {ref} not converted yet (graph not in topological order?)")
        return self.env[key]

    @staticmethod
    def same_pads(in_hw, k_hw, s_hw, d_hw, padding):
        """ONNX pads [top, left, bottom, right] and the output size, as TensorFlow pads."""
        if padding == "VALID":
            out = [(i - (k - 1) * d - 1) // s + 1 for i, k, s, d in zip(in_hw, k_hw, s_hw, d_hw)]
            return [0, 0, 0, 0], out
        if padding != "SAME":
            raise ConvertError(f"padding {padding} not handled")
        begin, end, out = [], [], []
        for i, k, s, d in zip(in_hw, k_hw, s_hw, d_hw):
            o = -(-i // s)
            total = max((o - 1) * s + (k - 1) * d + 1 - i, 0)
            begin.append(total // 2)
            end.append(total - total // 2)
            out.append(o)
        return begin + end, out

    def check_nhwc(self, n):
        fmt = self.attr(n, "data_format", "NHWC")
        if fmt != "NHWC":
            raise ConvertError(f"{n['name']}: data_format {fmt} not handled")

    # -- ops -----------------------------------------------------------------------------------
    def op_Placeholder(self, n):
        dims = [int(d["size"]) for d in n["attr"]["shape"]["shape"]["dim"]]
        dt = TF_DTYPES[n["attr"]["dtype"]["type"]]
        if dims and dims[0] == -1 and all(d > 0 for d in dims[1:]):
            if self.inputs:
                raise ConvertError(f"{n['name']}: a free batch dimension on more than one input not handled")
            self.free_batch = True
            self.inputs.append(helper.make_tensor_value_info(n["name"], dt[1], [BATCH, *dims[1:]]))
            dims = [1, *dims[1:]]
        elif any(d < 1 for d in dims):
            raise ConvertError(f"{n['name']}: input shape {dims} not handled (only the batch may be free)")
        else:
            self.inputs.append(helper.make_tensor_value_info(n["name"], dt[1], dims))
        self.env[n["name"]] = T(n["name"], dims, dt[0], "nhwc")

    def no_free_batch(self, n):
        if self.free_batch:
            raise ConvertError(f"{n['name']}: {n['op']} would fix the batch size; not handled with a free batch")

    def op_Const(self, n):
        if n["name"] not in self.weights:
            raise ConvertError(f"constant {n['name']} has no weight in the manifest")
        v = self.weights[n["name"]]
        self.env[n["name"]] = T(None, v.shape, v.dtype, "nhwc", v)

    def conv(self, n, depthwise):
        self.check_nhwc(n)
        ins = [i for i in n["input"] if not i.startswith("^")]
        x, w = self.src(ins[0]), self.src(ins[1])
        if not w.const:
            raise ConvertError(f"{n['name']}: non-constant filter")
        fused = self.attr(n, "fused_ops", []) if n["op"].startswith(("_Fused", "Fused")) else []
        if fused not in ([], ["BiasAdd"], ["BiasAdd", "Relu"], ["BiasAdd", "Relu6"]):
            raise ConvertError(f"{n['name']}: fused_ops {fused} not handled")
        if fused and int(self.attr(n, "num_args", 1)) != 1:
            raise ConvertError(f"{n['name']}: num_args {self.attr(n, 'num_args')} not handled")
        strides = self.attr(n, "strides", [1, 1, 1, 1])
        dil = self.attr(n, "dilations", [1, 1, 1, 1])
        if strides[0] != 1 or strides[3] != 1 or dil[0] != 1 or dil[3] != 1:
            raise ConvertError(f"{n['name']}: strides {strides} / dilations {dil} not handled")
        if self.attr(n, "explicit_paddings", []):
            raise ConvertError(f"{n['name']}: explicit_paddings not handled")
        kh, kw, cin, cm = w.value.shape
        if depthwise:
            wo = np.transpose(w.value, (2, 3, 0, 1)).reshape(cin * cm, 1, kh, kw)
            group, cout = cin, cin * cm
        else:
            wo = np.transpose(w.value, (3, 2, 0, 1))
            group, cout = 1, cm
        if x.shape[3] != cin:
            raise ConvertError(f"{n['name']}: input has {x.shape[3]} channels, filter {cin}")
        pads, out_hw = self.same_pads(x.shape[1:3], [kh, kw], strides[1:3], dil[1:3], self.attr(n, "padding"))
        inputs = [self.to_layout(x, "nchw"), self.init(n["name"] + "_W", wo.astype(np.float32))]
        if fused:
            b = self.src(ins[2])
            if not b.const or b.value.shape != (cout,):
                raise ConvertError(f"{n['name']}: bias must be a constant [{cout}]")
            inputs.append(self.init(n["name"] + "_B", b.value.astype(np.float32)))
        out = n["name"] if len(fused) < 2 else self.fresh(n["name"] + "_conv")
        self.node("Conv", inputs, [out], name=n["name"] + "/Conv", kernel_shape=[kh, kw], strides=strides[1:3],
                  dilations=dil[1:3], pads=pads, group=group)
        if len(fused) == 2:
            if fused[1] == "Relu":
                self.node("Relu", [out], [n["name"]])
            else:
                self.clip6(out, n["name"])
        self.env[n["name"]] = T(n["name"], [x.shape[0], *out_hw, cout], np.float32, "nchw")

    def op_Conv2D(self, n):
        self.conv(n, False)

    op__FusedConv2D = op_Conv2D

    def op_DepthwiseConv2dNative(self, n):
        self.conv(n, True)

    op_FusedDepthwiseConv2dNative = op_DepthwiseConv2dNative

    def clip6(self, src, out):
        self.node("Clip", [src, self.init("zero", np.array(0, np.float32)), self.init("six", np.array(6, np.float32))],
                  [out])

    def unary(self, n, op):
        x = self.src(n["input"][0])
        if x.const:
            raise ConvertError(f"{n['name']}: constant input not handled")
        if op == "Clip6":
            self.clip6(x.name, n["name"])
        else:
            self.node(op, [x.name], [n["name"]], name=n["name"])
        self.env[n["name"]] = T(n["name"], x.shape, x.dtype, x.layout)

    def op_Relu(self, n):
        self.unary(n, "Relu")

    def op_Relu6(self, n):
        self.unary(n, "Clip6")

    def op_Sigmoid(self, n):
        self.unary(n, "Sigmoid")

    def op_Identity(self, n):
        self.env[n["name"]] = self.src(n["input"][0])  # an alias; graph outputs get their own Identity

    def binary(self, n, op):
        a, b = self.src(n["input"][0]), self.src(n["input"][1])
        shape = list(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
        if a.const and b.const:
            raise ConvertError(f"{n['name']}: two constant inputs not folded")
        acts = [t for t in (a, b) if not t.const]
        # NCHW when the result is 4-D and every 4-D activation already is; constants follow
        layout = "nchw" if len(shape) == 4 and all(t.layout == "nchw" for t in acts if len(t.shape) == 4) \
            and all(len(t.shape) in (0, 4) or t.const for t in acts) else "nhwc"
        names = []
        for t in (a, b):
            if t.const and layout == "nchw" and len(t.shape) != 4:
                v = np.asarray(t.value)
                if v.ndim == 0 or v.size == 1:
                    v = v.reshape(())
                elif v.ndim == 1:
                    v = v.reshape(1, -1, 1, 1)  # [C] broadcast on NHWC's last axis is NCHW's axis 1
                else:
                    raise ConvertError(f"{n['name']}: constant of shape {v.shape} not handled in NCHW")
                names.append(self.init(n["name"] + "_c", v.astype(t.dtype)))
            else:
                names.append(self.to_layout(t, layout) if len(t.shape) == 4 else self.materialise(t))
        dtype = np.bool_ if op == "Equal" else np.result_type(a.dtype, b.dtype)
        self.node(op, names, [n["name"]], name=n["name"])
        self.env[n["name"]] = T(n["name"], shape, dtype, layout if len(shape) == 4 else "nhwc")

    def op_Add(self, n):
        self.binary(n, "Add")

    op_AddV2 = op_Add

    def op_Sub(self, n):
        self.binary(n, "Sub")

    def op_Mul(self, n):
        self.binary(n, "Mul")

    def op_Equal(self, n):
        if not self.attr(n, "incompatible_shape_error", True):
            raise ConvertError(f"{n['name']}: incompatible_shape_error false not handled")
        self.binary(n, "Equal")

    def op_Cast(self, n):
        x = self.src(n["input"][0])
        np_t, onnx_t = TF_DTYPES[self.attr(n, "DstT")]
        if self.attr(n, "Truncate", False):
            raise ConvertError(f"{n['name']}: Truncate not handled")
        self.node("Cast", [self.materialise(x)], [n["name"]], name=n["name"], to=onnx_t)
        self.env[n["name"]] = T(n["name"], x.shape, np_t, x.layout)

    def op_Mean(self, n):
        x = self.src(n["input"][0])
        axes = [int(v) % len(x.shape) for v in np.atleast_1d(self.const_value(n["input"][1], n["name"]))]
        keep = self.attr(n, "keep_dims", False)
        if len(x.shape) == 4 and keep:
            layout, onnx_axes = "nchw", sorted(AXIS_NHWC_TO_NCHW[a] for a in axes)
        else:
            layout, onnx_axes = "nhwc", sorted(axes)
        self.node("ReduceMean", [self.to_layout(x, layout)], [n["name"]], name=n["name"], axes=onnx_axes,
                  keepdims=int(keep))
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keep else \
            [d for i, d in enumerate(x.shape) if i not in axes]
        self.env[n["name"]] = T(n["name"], shape, x.dtype, layout if len(shape) == 4 else "nhwc")

    def op_ConcatV2(self, n):
        ins = [self.src(i) for i in n["input"][:-1]]
        axis = int(self.const_value(n["input"][-1], n["name"]))
        rank = len(ins[0].shape)
        axis %= rank
        layout = "nchw" if rank == 4 and all(t.layout == "nchw" or t.const for t in ins) else "nhwc"
        onnx_axis = AXIS_NHWC_TO_NCHW[axis] if layout == "nchw" else axis
        names = [self.to_layout(t, layout) if rank == 4 else self.materialise(t) for t in ins]
        self.node("Concat", names, [n["name"]], name=n["name"], axis=onnx_axis)
        shape = list(ins[0].shape)
        shape[axis] = sum(t.shape[axis] for t in ins)
        self.env[n["name"]] = T(n["name"], shape, ins[0].dtype, layout)

    def op_ResizeBilinear(self, n):
        self.no_free_batch(n)
        x = self.src(n["input"][0])
        size = [int(v) for v in self.const_value(n["input"][1], n["name"])]
        ac, hp = self.attr(n, "align_corners", False), self.attr(n, "half_pixel_centers", False)
        if ac and hp:
            raise ConvertError(f"{n['name']}: align_corners with half_pixel_centers")
        mode = "align_corners" if ac else ("half_pixel" if hp else "asymmetric")
        sizes = np.array([x.shape[0], x.shape[3], *size], np.int64)
        self.node("Resize", [self.to_layout(x, "nchw"), "", "", self.init(n["name"] + "_sizes", sizes)], [n["name"]],
                  name=n["name"], mode="linear", coordinate_transformation_mode=mode)
        self.env[n["name"]] = T(n["name"], [x.shape[0], *size, x.shape[3]], np.float32, "nchw")

    def op_MaxPool(self, n):
        self.check_nhwc(n)
        x = self.src(n["input"][0])
        k, s = self.attr(n, "ksize"), self.attr(n, "strides")
        if k[0] != 1 or k[3] != 1 or s[0] != 1 or s[3] != 1 or self.attr(n, "explicit_paddings", []):
            raise ConvertError(f"{n['name']}: ksize {k} / strides {s} not handled")
        pads, out_hw = self.same_pads(x.shape[1:3], k[1:3], s[1:3], [1, 1], self.attr(n, "padding"))
        # TensorFlow's SAME max-pool never takes a padded value; ONNX MaxPool's pads are -inf
        self.node("MaxPool", [self.to_layout(x, "nchw")], [n["name"]], name=n["name"], kernel_shape=k[1:3],
                  strides=s[1:3], pads=pads)
        self.env[n["name"]] = T(n["name"], [x.shape[0], *out_hw, x.shape[3]], x.dtype, "nchw")

    def op_Reshape(self, n):
        self.no_free_batch(n)
        x = self.src(n["input"][0])
        shape = [int(v) for v in np.atleast_1d(self.const_value(n["input"][1], n["name"]))]
        total = int(np.prod(x.shape))
        if shape.count(-1) == 1:
            shape[shape.index(-1)] = total // int(np.prod([d for d in shape if d != -1]))
        if int(np.prod(shape)) != total:
            raise ConvertError(f"{n['name']}: cannot reshape {x.shape} to {shape}")
        self.node("Reshape", [self.to_layout(x, "nhwc"), self.init(n["name"] + "_shape", np.array(shape, np.int64))],
                  [n["name"]], name=n["name"])
        self.env[n["name"]] = T(n["name"], shape, x.dtype, "nhwc")

    def op_TopKV2(self, n):
        self.no_free_batch(n)
        x = self.src(n["input"][0])
        k = int(self.const_value(n["input"][1], n["name"]))
        if not self.attr(n, "sorted", True):
            raise ConvertError(f"{n['name']}: sorted=false not handled")
        idx64 = self.fresh(n["name"] + "_indices64")
        self.node("TopK", [self.to_layout(x, "nhwc"), self.init(n["name"] + "_k", np.array([k], np.int64))],
                  [n["name"], idx64], name=n["name"], axis=-1, largest=1, sorted=1)
        self.node("Cast", [idx64], [n["name"] + ":1"], to=TensorProto.INT32)  # TensorFlow's indices are int32
        shape = [*x.shape[:-1], k]
        self.env[n["name"]] = T(n["name"], shape, x.dtype, "nhwc")
        self.env[n["name"] + ":1"] = T(n["name"] + ":1", shape, np.int32, "nhwc")

    def op_ExpandDims(self, n):
        self.no_free_batch(n)
        x = self.src(n["input"][0])
        dim = int(np.asarray(self.const_value(n["input"][1], n["name"])).reshape(()))
        rank = len(x.shape) + 1
        dim %= rank
        self.node("Unsqueeze", [self.to_layout(x, "nhwc"), self.init(n["name"] + "_axes", np.array([dim], np.int64))],
                  [n["name"]], name=n["name"])
        shape = list(x.shape)
        shape.insert(dim, 1)
        self.env[n["name"]] = T(n["name"], shape, x.dtype, "nhwc")

    def int_binary_inputs(self, n):
        a, b = self.src(n["input"][0]), self.src(n["input"][1])
        for t in (a, b):
            if len(t.shape) == 4:
                raise ConvertError(f"{n['name']}: 4-D {n['op']} not handled")
        return a, b, list(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))

    def op_FloorDiv(self, n):
        a, b, shape = self.int_binary_inputs(n)
        an, bn = self.materialise(a), self.materialise(b)
        if np.issubdtype(np.result_type(a.dtype, b.dtype), np.integer):
            # ONNX Div truncates integers; a - floormod(a, b) is an exact multiple of b
            m, d = self.fresh(n["name"] + "_mod"), self.fresh(n["name"] + "_sub")
            self.node("Mod", [an, bn], [m], fmod=0)
            self.node("Sub", [an, m], [d])
            self.node("Div", [d, bn], [n["name"]], name=n["name"])
        else:
            q = self.fresh(n["name"] + "_div")
            self.node("Div", [an, bn], [q])
            self.node("Floor", [q], [n["name"]], name=n["name"])
        self.env[n["name"]] = T(n["name"], shape, np.result_type(a.dtype, b.dtype), "nhwc")

    def op_FloorMod(self, n):
        a, b, shape = self.int_binary_inputs(n)
        dtype = np.result_type(a.dtype, b.dtype)
        if not np.issubdtype(dtype, np.integer):
            raise ConvertError(f"{n['name']}: float FloorMod not handled")
        self.node("Mod", [self.materialise(a), self.materialise(b)], [n["name"]], name=n["name"], fmod=0)
        self.env[n["name"]] = T(n["name"], shape, dtype, "nhwc")

    def op_GatherV2(self, n):
        self.no_free_batch(n)
        params, idx = self.src(n["input"][0]), self.src(n["input"][1])
        axis = int(np.asarray(self.const_value(n["input"][2], n["name"])).reshape(()))
        if self.attr(n, "batch_dims", 0) != 0:
            raise ConvertError(f"{n['name']}: batch_dims not handled")
        axis %= len(params.shape)
        self.node("Gather", [self.to_layout(params, "nhwc"), self.materialise(idx)], [n["name"]], name=n["name"],
                  axis=axis)
        shape = params.shape[:axis] + idx.shape + params.shape[axis + 1:]
        self.env[n["name"]] = T(n["name"], shape, params.dtype, "nhwc")

    def op_StridedSlice(self, n):
        self.no_free_batch(n)
        x = self.src(n["input"][0])
        begin, end, strides = (np.atleast_1d(self.const_value(i, n["name"])).astype(np.int64) for i in n["input"][1:4])
        for m in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
            if self.attr(n, m, 0):
                raise ConvertError(f"{n['name']}: {m} not handled")
        bm, em = self.attr(n, "begin_mask", 0), self.attr(n, "end_mask", 0)
        starts, ends, slices = [], [], []
        big = np.iinfo(np.int64).max
        for i in range(len(begin)):
            st = int(strides[i])
            b = (0 if st > 0 else -1) if bm >> i & 1 else int(begin[i])
            e = (big if st > 0 else -big) if em >> i & 1 else int(end[i])
            starts.append(b)
            ends.append(e)
            slices.append(slice(None if bm >> i & 1 else b, None if em >> i & 1 else e, st))
        shape = list(np.empty(x.shape, np.bool_)[tuple(slices)].shape) if int(np.prod(x.shape)) < 1 << 24 else None
        if shape is None:
            raise ConvertError(f"{n['name']}: input too large to trace its slice")
        self.node("Slice", [self.to_layout(x, "nhwc"), self.init(n["name"] + "_starts", np.array(starts, np.int64)),
                            self.init(n["name"] + "_ends", np.array(ends, np.int64)),
                            self.init(n["name"] + "_axes", np.arange(len(begin), dtype=np.int64)),
                            self.init(n["name"] + "_steps", strides)], [n["name"]], name=n["name"])
        self.env[n["name"]] = T(n["name"], shape, x.dtype, "nhwc")

    def op_AvgPool(self, n):
        self.check_nhwc(n)
        x = self.src(n["input"][0])
        k, s = self.attr(n, "ksize"), self.attr(n, "strides")
        if k[0] != 1 or k[3] != 1 or s[0] != 1 or s[3] != 1:
            raise ConvertError(f"{n['name']}: ksize {k} / strides {s} not handled")
        pads, out_hw = self.same_pads(x.shape[1:3], k[1:3], s[1:3], [1, 1], self.attr(n, "padding"))
        # TensorFlow's SAME average leaves padded pixels out of the count: count_include_pad 0
        self.node("AveragePool", [self.to_layout(x, "nchw")], [n["name"]], name=n["name"], kernel_shape=k[1:3],
                  strides=s[1:3], pads=pads, count_include_pad=0)
        self.env[n["name"]] = T(n["name"], [x.shape[0], *out_hw, x.shape[3]], x.dtype, "nchw")

    def op_Squeeze(self, n):
        x = self.src(n["input"][0])
        rank = len(x.shape)
        axes = sorted(int(a) % rank for a in self.attr(n, "squeeze_dims", []) or [])
        if not axes:
            axes = [i for i, d in enumerate(x.shape) if d == 1 and not (i == 0 and self.free_batch)]
        if any(x.shape[a] != 1 for a in axes) or (self.free_batch and 0 in axes):
            raise ConvertError(f"{n['name']}: cannot squeeze axes {axes} of {x.shape}")
        keep = [i for i in range(rank) if i not in axes]
        # NCHW stays when the kept axes come out in TensorFlow's order (e.g. [N, C, 1, 1] -> [N, C])
        nchw = rank == 4 and x.layout == "nchw" and sorted(keep, key=AXIS_NHWC_TO_NCHW.get) == keep
        onnx_axes = sorted(AXIS_NHWC_TO_NCHW[a] for a in axes) if nchw else axes
        self.node("Squeeze", [self.to_layout(x, "nchw" if nchw else "nhwc"),
                              self.init(n["name"] + "_axes", np.array(onnx_axes, np.int64))], [n["name"]], name=n["name"])
        shape = [x.shape[i] for i in keep]
        self.env[n["name"]] = T(n["name"], shape, x.dtype, "nchw" if nchw and len(shape) == 4 else "nhwc")

    def op_MatMul(self, n):
        ins = [i for i in n["input"] if not i.startswith("^")]
        a, b = self.src(ins[0]), self.src(ins[1])
        fused = self.attr(n, "fused_ops", []) if n["op"] == "_FusedMatMul" else []
        if fused not in ([], ["BiasAdd"], ["BiasAdd", "Relu"], ["BiasAdd", "Relu6"]):
            raise ConvertError(f"{n['name']}: fused_ops {fused} not handled")
        if fused and int(self.attr(n, "num_args", 1)) != 1:
            raise ConvertError(f"{n['name']}: num_args {self.attr(n, 'num_args')} not handled")
        if len(a.shape) != 2 or len(b.shape) != 2 or a.const or not b.const:
            raise ConvertError(f"{n['name']}: only a 2-D activation times a 2-D constant is handled")
        ta, tb = int(self.attr(n, "transpose_a", False)), int(self.attr(n, "transpose_b", False))
        if ta:
            raise ConvertError(f"{n['name']}: transpose_a not handled")
        cout = b.shape[0] if tb else b.shape[1]
        inputs = [self.materialise(a), self.init(n["name"] + "_W", b.value.astype(np.float32))]
        if fused:
            bias = self.src(ins[2])
            if not bias.const or bias.value.shape != (cout,):
                raise ConvertError(f"{n['name']}: bias must be a constant [{cout}]")
            inputs.append(self.init(n["name"] + "_B", bias.value.astype(np.float32)))
        out = n["name"] if len(fused) < 2 else self.fresh(n["name"] + "_gemm")
        self.node("Gemm", inputs, [out], name=n["name"] + "/Gemm", transB=tb)
        if len(fused) == 2:
            if fused[1] == "Relu":
                self.node("Relu", [out], [n["name"]])
            else:
                self.clip6(out, n["name"])
        self.env[n["name"]] = T(n["name"], [a.shape[0], cout], np.float32, "nhwc")

    op__FusedMatMul = op_MatMul

    def op_Softmax(self, n):
        x = self.src(n["input"][0])
        if x.const:
            raise ConvertError(f"{n['name']}: constant input not handled")
        # TensorFlow's softmax runs over the last axis (of the NHWC layout for a 4-D tensor)
        self.node("Softmax", [self.to_layout(x, "nhwc")], [n["name"]], name=n["name"], axis=-1)
        self.env[n["name"]] = T(n["name"], x.shape, x.dtype, "nhwc")

    # -- the graph ---------------------------------------------------------------------------
    def convert(self, outputs, graph_name, producer):
        for n in self.topo["node"]:
            fn = getattr(self, "op_" + n["op"], None)
            if fn is None:
                raise ConvertError(f"op {n['op']} ({n['name']}) not handled")
            self.ops_seen[n["op"]] = self.ops_seen.get(n["op"], 0) + 1
            fn(n)
        outs = []
        for name in outputs:
            t = self.env[name]
            self.node("Identity", [self.to_layout(t, "nhwc")], [name], name=name + "/output")
            shape = [BATCH, *t.shape[1:]] if self.free_batch else t.shape
            outs.append(helper.make_tensor_value_info(name, ONNX_OF_NP[t.dtype], shape))
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, outs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=producer)
        model.ir_version = IR_VERSION
        return model


def topo_sort(nodes):
    """The nodes in an order where every input comes first (tfjs JSON need not be ordered)."""
    by_name = {n["name"]: n for n in nodes}
    done, order = set(), []

    def visit(name, stack):
        if name in done:
            return
        if name in stack:
            raise ConvertError(f"cycle at {name}")
        stack.add(name)
        for ref in by_name[name].get("input", []):
            dep = ref.lstrip("^").partition(":")[0]
            if dep not in by_name:
                raise ConvertError(f"{name}: input {ref} is not a node")
            visit(dep, stack)
        stack.discard(name)
        done.add(name)
        order.append(by_name[name])

    sys.setrecursionlimit(max(10000, 4 * len(nodes)))
    for n in nodes:
        visit(n["name"], set())
    return order



def sha256(path):
    return hashlib.sha256(read_bytes(path)).hexdigest()


def read_graph_model(model_path, weights_path=None):
    """(model JSON, {name: weight}) of a tfjs graph model, its nodes in topological order."""
    mj = json.loads(read_bytes(model_path))
    if mj.get("format") != "graph-model":
        raise ConvertError(f"{model_path}: format {mj.get('format')!r}, not a tfjs graph-model")
    weights = read_weights(mj, os.path.dirname(os.path.abspath(model_path)), weights_path)
    mj["modelTopology"]["node"] = topo_sort(mj["modelTopology"]["node"])
    return mj, weights


def dims(value_info):
    """A value's declared dims: ints, or the symbolic name of a free one."""
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def save_checked(model, meta, out, feed=None):
    """Sets meta as the model's metadata, checks it (checker, strict shape inference agrees with the
    declared outputs), writes it to out through a temp file and, with feed ({input: array}), runs
    it once in ONNX Runtime (CPU): every output finite, of its declared shape (a symbolic dim
    matches any size). Returns {output: declared dims}."""
    onnx.helper.set_model_props(model, meta)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    declared = {o.name: dims(o) for o in model.graph.output}
    got = {o.name: dims(o) for o in inferred.graph.output}
    if got != declared:
        raise ConvertError(f"shape inference disagrees with the declared outputs: {got} vs {declared}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    onnx.save(model, tmp)
    if feed is not None:
        import onnxruntime as ort

        sess = ort.InferenceSession(tmp, providers=["CPUExecutionProvider"])
        res = sess.run(None, feed)
        for o, r in zip(sess.get_outputs(), res):
            want = declared[o.name]
            ok = len(r.shape) == len(want) and all(isinstance(w, str) or w == d for w, d in zip(want, r.shape))
            if not ok or not np.all(np.isfinite(r)):
                raise ConvertError(f"ONNX Runtime: {o.name} has shape {r.shape}, declared {want}")
    os.replace(tmp, out)
    return declared


def write_classes_and_report(who, converted, names, classes_out, declared):
    """`names` one a line in `classes_out` (written whole or not at all), then a summary of the
    conversion (`converted`: the tfjs graph's JSON, the Converter, the ONNX model, its path), its
    input and its outputs' `declared` shapes (save_checked's), as `who` (the script)."""
    mj, conv, model, out = converted
    if classes_out:
        with open(classes_out + ".tmp", "w", encoding="utf-8") as f:
            f.write("".join(name + "\n" for name in names))
        os.replace(classes_out + ".tmp", classes_out)
    print(f"{who}: {len(mj['modelTopology']['node'])} tfjs nodes, {len(conv.ops_seen)} op types "
          f"-> {len(model.graph.node)} ONNX nodes, {len(model.graph.initializer)} initialisers: {out}"
          + (f" (+ {len(names)} classes in {classes_out})" if classes_out else ""))
    print(f"  input {model.graph.input[0].name} "
          f"{[d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]}")
    for o in model.graph.output:
        print(f"  output {o.name} {declared[o.name]}")
