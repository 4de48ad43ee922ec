"""The ONNX graph builder every family shares: `Graph` hands out node names and draws seeded
random initialisers, `transformer` is CLIP's residual attention stack (also used by the
multilingual tower), and `onnx_model` wraps a finished graph the same way for every file
(opset 17, IR 8, producer and metadata_props), so that a seed always gives the same bytes."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Graph:
    """Tiny builder: collects nodes/initializers and hands out unique names."""

    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def name(self, p):
        self.n += 1
        return f"{p}_{self.n}"

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.array(arr, order="C"), name))  # keeps 0-d
        return name

    def floats(self, v):
        """A float32 constant (a scalar or a list), named for the graph."""
        return self.const(self.name("c"), np.array(v, np.float32))

    def ints(self, v):
        """An int64 constant (shapes, axes, indices)."""
        return self.const(self.name("i"), np.array(v, np.int64))

    def randn(self, name, shape, std):
        return self.const(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    # CLIP building blocks -------------------------------------------------
    def linear(self, x, prefix, d_in, d_out, std=0.02):
        w = self.randn(f"{prefix}.weight", (d_in, d_out), std)  # stored as W^T for MatMul
        b = self.const(f"{prefix}.bias", np.zeros(d_out, np.float32))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layernorm(self, x, prefix, d):
        g = self.const(f"{prefix}.weight", np.ones(d, np.float32))
        b = self.const(f"{prefix}.bias", np.zeros(d, np.float32))
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)


def transformer(g, x, width, layers, heads, mask=None):
    """CLIP's residual attention blocks (LN, MHA, LN, QuickGELU MLP); `mask` is added to the
    attention logits (the text tower's causal mask)."""
    hd = width // heads
    split = g.const("qkv_split", np.array([width] * 3, np.int64))
    heads_shape = g.const("heads_shape", np.array([0, 0, heads, hd], np.int64))
    merge_shape = g.const("merge_shape", np.array([0, 0, width], np.int64))
    scale = g.const("attn_scale", np.array(1.0 / np.sqrt(hd), np.float32))
    gelu_k = g.const("quickgelu_k", np.array(1.702, np.float32))
    for i in range(layers):
        p = f"transformer.resblocks.{i}"
        h = g.layernorm(x, f"{p}.ln_1", width)
        qkv = g.linear(h, f"{p}.attn.in_proj", width, 3 * width)
        q, k, v = (g.name("qkv") for _ in range(3))
        g.nodes.append(helper.make_node("Split", [qkv, split], [q, k, v], axis=-1))
        q = g.op("Transpose", [g.op("Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])  # N,H,L,D
        k = g.op("Transpose", [g.op("Reshape", [k, heads_shape])], perm=[0, 2, 3, 1])  # N,H,D,L
        v = g.op("Transpose", [g.op("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])
        logits = g.op("Mul", [g.op("MatMul", [q, k]), scale])
        if mask is not None:
            logits = g.op("Add", [logits, mask])
        att = g.op("Softmax", [logits], axis=-1)
        o = g.op("Transpose", [g.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
        o = g.linear(g.op("Reshape", [o, merge_shape]), f"{p}.attn.out_proj", width, width)
        x = g.op("Add", [x, o])
        h = g.layernorm(x, f"{p}.ln_2", width)
        h = g.linear(h, f"{p}.mlp.c_fc", width, 4 * width)
        h = g.op("Mul", [h, g.op("Sigmoid", [g.op("Mul", [h, gelu_k])])])  # QuickGELU
        h = g.linear(h, f"{p}.mlp.c_proj", 4 * width, width)
        x = g.op("Add", [x, h])
    return x


def onnx_model(g, inputs, outputs, name, meta):
    """The finished model of graph `g`: opset 17, IR 8 (readable by every ONNX Runtime >= 1.10),
    `meta` as metadata_props."""
    graph = helper.make_graph(g.nodes, name, inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="clipfn-tools-make_models", producer_version="1")
    model.ir_version = 8
    helper.set_model_props(model, meta)
    return model


def learned_params(g):
    """Learned tensors only: 0-d float constants (attention scale, QuickGELU 1.702) and integer
    shapes do not count."""
    return sum(int(np.prod(t.dims)) for t in g.inits if t.data_type == TensorProto.FLOAT and t.dims)
