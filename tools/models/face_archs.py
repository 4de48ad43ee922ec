"""The real face architectures with seeded random weights, for the bench's cost of faces on CPU
(issue 29): what InsightFace's buffalo_l ships, layer for layer, with nothing learned.

  faces-buffalo-random  folder: detection/model.onnx as det_10g.onnx (SCRFD-10G with landmarks),
                        recognition/model.onnx as w600k_r50.onnx (ArcFace's IResNet-50)

SCRFD-10G (insightface detection/scrfd/configs/scrfd/scrfd_10g_bnkps.py), at 640 x 640:
  backbone  ResNetV1e: deep stem (3x3 convs 3->28 stride 2, 28->28, 28->56, each BN + ReLU) and a
            2x2 max pool; BasicBlock stages of (3, 4, 2, 3) blocks with (56, 88, 88, 224) channels,
            strides (1, 2, 2, 2), the downsampling shortcut a 2x2 average pool + 1x1 conv + BN
  neck      PAFPN on stages 2-4 (strides 8, 16, 32): 1x1 laterals to 56, nearest-upsampled top-down
            sums, 3x3 convs, then the bottom-up path (3x3 stride-2 convs added, 3x3 convs); no
            norms or activations
  head      per stride (not shared): 3 stacked 3x3 convs 56->80->80->80 with BN + ReLU, shared by
            the three 3x3 predictors: scores 2 (2 anchors), boxes 8, landmarks 20
  outputs   as the export: score_8, score_16, score_32 [1,n,1] (sigmoid), bbox_* [1,n,4] and kps_*
            [1,n,10] in strides, n = (640/s)^2 * 2 (see faces.py); input "input.1" [1,3,640,640]
IResNet-50 (insightface recognition/arcface_torch/backbones/iresnet.py, layers [3, 4, 14, 3]):
  stem 3x3 conv 3->64 + BN + PReLU at 112; IBasicBlock stages of 64, 128, 256, 512 channels, each
  stage's first block stride 2 (BN, 3x3 conv, BN, PReLU, 3x3 conv with the stride, BN; shortcut a
  1x1 conv + BN where the shape changes); BN, flatten (512 x 7 x 7), FC to 512, BatchNorm1d.
  Input "input.1" [N,3,112,112], output "683" [N,512] (dropout is a no-op at inference).

Every BN that follows a conv is folded into it (conv with a bias), as the exports have them; the
IResNet's BNs before a conv or after an add stay BatchNormalization nodes. Weights: He-initialised
(std sqrt(gain / fan_in)), the last conv of each residual branch scaled by RESIDUAL so the
residual stream grows by (1 + RESIDUAL^2) a block, not 2x: the embeddings' std is about 3 after
50 layers, finite everywhere (make_models.py --check).

The detector's biases stand in for what training learns: boxes are the anchors' sizes (SCRFD's
anchors 16/32, 64/128, 256/512 px at strides 8/16/32) plus a small jitter from the features,
landmarks the ArcFace template placed in that box, and each stride's score bias (SCORE_BIAS) sets
how many anchors pass the 0.7 threshold. SCORE_BIAS was calibrated on the 34 camera photos of
.cache/photos/wallpapers for the default seed: the score logits without bias (build_scrfd_10g with
score_bias None) on the letterboxed canvases (faces_reference.py's load_photo with draft and
letterbox), then faces_reference.py's decoding and NMS (0.7, IoU 0.4) for a grid of biases: stride
8's kept high (its top logits come in clumps, one of them the letterbox's corner on every landscape
photo, just under the threshold), strides 16 and 32 moved together. The result: 2.6 faces a photo
(0 on 5 photos, at most 8; +-0.05 on every bias moves the mean by about +-0.6). Where they are means
nothing: 85 of the 88 are centred within 32 px of the canvas's top or left edge, where the convs'
zero padding meets the photo (a random net's strongest responses); their number is what the cost
needs.
"""
import numpy as np
from onnx import TensorProto, helper, shape_inference

from .faces import CANVAS, LANDMARKS_IN_BOX, STRIDES, to_rows, write_parts
from .graph import Graph, learned_params, onnx_model

KINDS = ("faces-buffalo-random",)
MODEL_ID = {"scrfd-10g": "scrfd-10g-random-v1", "iresnet50": "arcface-iresnet50-random-v1"}
SALT = {"scrfd-10g": 21, "iresnet50": 22}
RESIDUAL = 0.3  # the last BN's gamma of a residual branch
PRELU = 0.25  # PyTorch's initial PReLU slope
ANCHOR_SIZES = {8: (16, 32), 16: (64, 128), 32: (256, 512)}  # pixels, the 2 anchors of a cell
BOX_JITTER = 0.05  # the box and landmark predictors' weight gain: a few % of a stride's wobble
# the score logits' bias per stride (calibrated for the default seed, see the module doc)
SCORE_BIAS = {8: -2.0, 16: -0.4, 32: 0.6}


class Net:
    """Convolutional building blocks on a `Graph`: BN folded into each conv (zero bias unless
    given), He-initialised weights."""

    def __init__(self, g):
        self.g = g

    def conv(self, x, cin, cout, k, stride=1, gain=2.0, bias=None):
        g = self.g
        w = g.randn(g.name("conv.weight"), (cout, cin, k, k), np.sqrt(gain / (cin * k * k)))
        b = g.const(g.name("conv.bias"), np.zeros(cout, np.float32) if bias is None else bias.astype(np.float32))
        return g.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)

    def relu(self, x):
        return self.g.op("Relu", [x])

    def prelu(self, x, c):
        return self.g.op("PRelu", [x, self.g.const(self.g.name("prelu.slope"), np.full((c, 1, 1), PRELU, np.float32))])

    def batchnorm(self, x, c):
        """A BN left as a node (eval mode: statistics of a unit-variance input)."""
        g = self.g
        params = [g.const(g.name(f"bn.{p}"), np.full(c, v, np.float32))
                  for p, v in (("weight", 1.0), ("bias", 0.0), ("mean", 0.0), ("var", 1.0))]
        return g.op("BatchNormalization", [x, *params], epsilon=1e-5)


def scrfd_backbone(n, x):
    """ResNetV1e: the outputs of stages 2-4 (strides 8, 16, 32)."""
    x = n.relu(n.conv(x, 3, 28, 3, stride=2))
    x = n.relu(n.conv(x, 28, 28, 3))
    x = n.relu(n.conv(x, 28, 56, 3))
    x = n.g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    outs, cin = [], 56
    for blocks, planes, stride in zip((3, 4, 2, 3), (56, 88, 88, 224), (1, 2, 2, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = n.relu(n.conv(x, cin, planes, 3, stride=s))
            y = n.conv(y, planes, planes, 3, gain=2.0 * RESIDUAL ** 2)
            if s != 1 or cin != planes:  # avg_down: average pool, then a 1x1 conv + BN
                x = n.g.op("AveragePool", [x], kernel_shape=[s, s], strides=[s, s], ceil_mode=1, count_include_pad=0)
                x = n.conv(x, cin, planes, 1)
            x, cin = n.relu(n.g.op("Add", [y, x])), planes
        outs.append(x)
    return outs[1:]


def pafpn(n, feats, channels=(88, 88, 224), out=56):
    """PAFPN (start_level 1, 3 outputs): plain convs with biases, no norms, no activations."""
    g = n.g
    lat = [n.conv(f, c, out, 1, gain=1.0) for f, c in zip(feats, channels)]
    scales = g.const("upsample_scales", np.array([1, 1, 2, 2], np.float32))
    for i in range(len(lat) - 1, 0, -1):
        up = g.op("Resize", [lat[i], "", scales], mode="nearest", nearest_mode="floor",
                  coordinate_transformation_mode="asymmetric")
        lat[i - 1] = g.op("Add", [lat[i - 1], up])
    inter = [n.conv(x, out, out, 3, gain=1.0) for x in lat]
    for i in range(len(inter) - 1):
        inter[i + 1] = g.op("Add", [inter[i + 1], n.conv(inter[i], out, out, 3, stride=2, gain=1.0)])
    return [inter[0]] + [n.conv(x, out, out, 3, gain=1.0) for x in inter[1:]]


def scrfd_head(n, x, s, score_bias, cin=56, feat=80, anchors=2):
    """One stride's head: {name: [1, n, k]} for score, bbox and kps."""
    g, rows = n.g, (CANVAS // s) ** 2 * anchors
    for i in range(3):
        x = n.relu(n.conv(x, cin if i == 0 else feat, feat, 3))
    half = np.array(ANCHOR_SIZES[s], np.float32) / s / 2  # the anchors' half sides, in strides
    score = n.conv(x, feat, anchors, 3, gain=1.0, bias=np.full(anchors, score_bias or 0.0))
    if score_bias is not None:
        score = g.op("Sigmoid", [score])
    bbox = n.conv(x, feat, 4 * anchors, 3, gain=BOX_JITTER, bias=np.repeat(half, 4))
    kps = n.conv(x, feat, 10 * anchors, 3, gain=BOX_JITTER, bias=np.concatenate([2 * h * LANDMARKS_IN_BOX for h in half]))
    return {f"score_{s}": to_rows(g, score, 1, [1, rows, 1]), f"bbox_{s}": to_rows(g, bbox, 4, [1, rows, 4]),
            f"kps_{s}": to_rows(g, kps, 10, [1, rows, 10])}


def build_scrfd_10g(seed, score_bias=SCORE_BIAS):
    """(model, params); score_bias None: the scores are the logits without bias (calibration)."""
    g = Graph(np.random.default_rng([seed, SALT["scrfd-10g"]]))
    n = Net(g)
    outs = {}
    for s, feat in zip(STRIDES, pafpn(n, scrfd_backbone(n, "input.1"))):
        outs.update(scrfd_head(n, feat, s, None if score_bias is None else score_bias[s]))
    outputs = []
    for kind, k in (("score", 1), ("bbox", 4), ("kps", 10)):
        for s in STRIDES:
            name = f"{kind}_{s}"
            g.nodes.append(helper.make_node("Identity", [outs[name]], [name], name=name))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, (CANVAS // s) ** 2 * 2, k]))
    meta = {"clipfn.model_id": MODEL_ID["scrfd-10g"], "clipfn.kind": "scrfd-10g", "clipfn.seed": str(seed),
            "clipfn.input_size": str(CANVAS), "clipfn.strides": ",".join(map(str, STRIDES)), "clipfn.anchors": "2"}
    inp = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, CANVAS, CANVAS])
    return onnx_model(g, [inp], outputs, "clipfn_scrfd_10g", meta), learned_params(g)


def build_iresnet50(seed, layers=(3, 4, 14, 3)):
    """(model, params): ArcFace's IResNet-50, "input.1" [N,3,112,112] -> "683" [N,512]."""
    g = Graph(np.random.default_rng([seed, SALT["iresnet50"]]))
    n = Net(g)
    prelu_gain = 2.0 / (1 + PRELU ** 2)
    x = n.prelu(n.conv("input.1", 3, 64, 3, gain=prelu_gain), 64)
    cin = 64
    for blocks, planes in zip(layers, (64, 128, 256, 512)):
        for i in range(blocks):
            s = 2 if i == 0 else 1
            y = n.conv(n.batchnorm(x, cin), cin, planes, 3, gain=prelu_gain)
            y = n.conv(n.prelu(y, planes), planes, planes, 3, stride=s, gain=RESIDUAL ** 2 * prelu_gain)
            shortcut = n.conv(x, cin, planes, 1, stride=s, gain=1.0) if s != 1 or cin != planes else x
            x, cin = g.op("Add", [y, shortcut]), planes
    x = g.op("Flatten", [n.batchnorm(x, 512)], axis=1)  # [N, 512 * 7 * 7]
    fc = g.op("Gemm", [x, g.randn("fc.weight", (512, 512 * 49), np.sqrt(1.0 / (512 * 49))),
                       g.const("fc.bias", np.zeros(512, np.float32))], transB=1)
    params = [g.const(f"features.{p}", np.full(512, v, np.float32))
              for p, v in (("weight", 1.0), ("bias", 0.0), ("mean", 0.0), ("var", 1.0))]
    g.nodes.append(helper.make_node("BatchNormalization", [fc, *params], ["683"], name="683", epsilon=1e-5))
    meta = {"clipfn.model_id": MODEL_ID["iresnet50"], "clipfn.kind": "iresnet50", "clipfn.seed": str(seed),
            "clipfn.input_size": "112", "clipfn.embedding_dim": "512", "clipfn.mean": "127.5", "clipfn.std": "127.5"}
    inp = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["N", 3, 112, 112])
    out = helper.make_tensor_value_info("683", TensorProto.FLOAT, ["N", 512])
    return onnx_model(g, [inp], [out], "clipfn_iresnet50", meta), learned_params(g)


def macs(model):
    """Multiply-accumulates of one image (batch 1) in the Conv and Gemm nodes: what the papers call
    FLOPs (SCRFD's 10 GFLOPs, ArcFace's 6.3)."""
    inferred = shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            w = weights[node.input[1]]
            total += int(np.prod(shapes[node.output[0]])) * int(np.prod(w[1:]))
    return total


def write_folder(folder, seed):
    """folder/detection/model.onnx + folder/recognition/model.onnx; ([paths], {part: params},
    {part: MACs})."""
    det, rec = build_scrfd_10g(seed), build_iresnet50(seed)
    parts = {"detection": det[0], "recognition": rec[0]}
    paths = write_parts(folder, parts, full_check=False)  # shape inference on 170 MB adds nothing
    return paths, {"detection": det[1], "recognition": rec[1]}, {p: macs(m) for p, m in parts.items()}
