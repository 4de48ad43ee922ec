"""Score heads (CLIPFN_HEADS): tiny graphs that clipfn runs on the L2-normalised image embedding,
one value per photo under "scores" in /v1/analyze. A head takes float32 [N, dim] and gives one
float32 output, [N, 1] or [N]; any names. Test heads, seeded random weights:

  head              "embedding" [N, 512] -> "score" [N, 1]: MatMul + Add (a linear regressor, like
                    the photo-album app's aesthetic_regressor.pth through infra/make_head.py)
  head-flat         "embedding" [N, 512] -> "score" [N]: MatMul + Add + Sigmoid + Squeeze, other
                    weights (a two-prompt quality score has this form, see infra/make_head.py)
  head-wrong-dim    "embedding" [N, 256] -> "score" [N, 1]: a 512-dim model must refuse it
  head-two-outputs  "embedding" [N, 512] -> "score" [N, 1] and "aux" [N, 1]: must be refused
                    (a head has one output)

Weights: N(0, std) with |x| = 1, so x . w is N(0, std^2): outputs are O(1) for unit inputs."""
import time

import numpy as np
from onnx import TensorProto, helper

from .graph import Graph, learned_params, onnx_model

# dim: input width; out: shape of each output after N; salt: mixed into the seed, so each kind
# has its own weights; std / bias_std: weight and bias scales; sigmoid: squash to (0, 1)
HEAD_KINDS = {
    "head": {"file": "head-test.onnx", "dim": 512, "outputs": {"score": [1]}, "salt": 1,
             "std": 1.0, "bias_std": 0.5, "sigmoid": False},
    "head-flat": {"file": "head-flat.onnx", "dim": 512, "outputs": {"score": []}, "salt": 2,
                  "std": 2.0, "bias_std": 0.25, "sigmoid": True},
    "head-wrong-dim": {"file": "head-wrong-dim.onnx", "dim": 256, "outputs": {"score": [1]}, "salt": 3,
                       "std": 1.0, "bias_std": 0.5, "sigmoid": False},
    "head-two-outputs": {"file": "head-two-outputs.onnx", "dim": 512, "outputs": {"score": [1], "aux": [1]},
                         "salt": 4, "std": 1.0, "bias_std": 0.5, "sigmoid": False},
}
MODEL_ID = {kind: f"clipfn-test-{kind}-v1" for kind in HEAD_KINDS}


def build_head(kind, seed):
    """The head `kind` (see HEAD_KINDS): "embedding" float32 [N, dim] -> its outputs."""
    spec = HEAD_KINDS[kind]
    g = Graph(np.random.default_rng([seed, spec["salt"]]))
    outputs = []
    for i, (name, tail) in enumerate(spec["outputs"].items()):
        w = g.randn(f"head{i}.weight", (spec["dim"], 1), spec["std"])  # W^T, for MatMul
        b = g.randn(f"head{i}.bias", (1,), spec["bias_std"])
        y = g.op("Add", [g.op("MatMul", ["embedding", w]), b])  # [N, 1]
        if spec["sigmoid"]:
            y = g.op("Sigmoid", [y])
        if not tail:
            y = g.op("Squeeze", [y, g.const(f"head{i}.squeeze_axes", np.array([1], np.int64))])  # [N]
        g.nodes.append(helper.make_node("Identity", [y], [name], name=name))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", *tail]))
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.seed": str(seed),
            "clipfn.embedding_dim": str(spec["dim"])}
    model = onnx_model(g, [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", spec["dim"]])],
                       outputs, f"clipfn_{kind}".replace("-", "_"), meta)
    return model, learned_params(g)


def check(path, kind):
    """A batch of 3 random unit vectors through ONNX Runtime: one input of the kind's width,
    the kind's outputs with the right shapes, finite values. Returns the first output."""
    import onnxruntime as ort

    spec = HEAD_KINDS[kind]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    assert inp.name == "embedding" and inp.shape == ["N", spec["dim"]], (inp.name, inp.shape)
    assert [o.name for o in sess.get_outputs()] == list(spec["outputs"]), [o.name for o in sess.get_outputs()]
    x = np.random.default_rng(1).standard_normal((3, spec["dim"])).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sess.run(None, {"embedding": x})  # warm-up
    t = time.perf_counter()
    ys = sess.run(None, {"embedding": x})
    dt = time.perf_counter() - t
    for (name, tail), y in zip(spec["outputs"].items(), ys):
        assert y.shape == (3, *tail) and y.dtype == np.float32 and np.isfinite(y).all(), (name, y.shape)
        if spec["sigmoid"]:
            assert ((y > 0) & (y < 1)).all(), y
    shapes = ", ".join(f"{name} {y.shape}" for name, y in zip(spec["outputs"], ys))
    print(f"  onnxruntime: embedding {x.shape} -> {shapes} in {dt * 1000:.2f} ms; "
          f"scores {[round(float(v), 3) for v in ys[0].ravel()]}")
    return ys[0]
