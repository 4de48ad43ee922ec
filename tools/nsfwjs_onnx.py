#!/usr/bin/env python3
"""nsfwjs 4.4.0's MobileNetV2Mid (a TensorFlow.js graph model) to ONNX, node by node.

nsfwjs ships the model inside its npm package as JavaScript bundles (dist/models/mobilenet_v2_mid:
model.min.js, the graph of 178 nodes; group1-shard1of2.min.js + group1-shard2of2.min.js, its 108
weights quantised to uint8 as base64). tools/sensitive/reference.cjs --mode export writes them as
nsfwjs's own loaders give them (model.json, group1-shard1of2, group1-shard2of2, classes.json); this
converts that graph with tools/tfjs_onnx.py (the converter Human's CenterNet shares):

  - every uint8 weight is dequantised as tfjs-core does on load: q * scale + min in float64,
    stored as float32;
  - the input keeps its tfjs name and layout: `input` float32 [N, 224, 224, 3], NHWC RGB in 0-1,
    a free batch N (the graph's own -1); the graph itself maps it to -1..1 (hub_input: x * 2 - 1)
    before MobileNetV2 (depth multiplier 1.4: 1792 features), a dense layer and a softmax;
  - the output keeps its tfjs name: `Identity` float32 [N, 5], softmax probabilities in
    nsfw_classes.js's order (drawing, hentai, neutral, porn, sexy).

Ops: Placeholder, Const, Mul, Sub, _FusedConv2D (BiasAdd[+Relu6]), FusedDepthwiseConv2dNative
(BiasAdd+Relu6), AddV2, AvgPool, Squeeze, _FusedMatMul (BiasAdd), Softmax, Identity.

Usage: nsfwjs_onnx.py --model model.json --classes classes.json --out model.onnx
                      [--classes-out classes.txt] [--check]
--classes-out writes the 5 class names lower-cased, one a line, line i + 1 = output column i.
--check runs the result once in ONNX Runtime on a fixed batch of 2 and checks the shapes and that
each row sums to 1.
"""
import argparse
import json
import os
import sys

import numpy as np

from tfjs_onnx import (
    ConvertError,
    Converter,
    read_bytes,
    read_graph_model,
    save_checked,
    sha256,
    write_classes_and_report,
)

SIZE = 224


def read_classes(path):
    """classes.json (nsfw_classes.js's NSFW_CLASSES, {"0": "Drawing", ...}): names by index."""
    c = json.loads(read_bytes(path))
    if sorted(int(k) for k in c) != list(range(len(c))):
        raise ConvertError(f"{path}: indices {sorted(c)} are not 0..{len(c) - 1}")
    return [c[str(i)] for i in range(len(c))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model.json written by reference.cjs --mode export")
    ap.add_argument("--classes", required=True, help="classes.json written beside it")
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes-out", help="where to write the class names, lower-cased, one a line")
    ap.add_argument("--check", action="store_true", help="run it once in ONNX Runtime")
    a = ap.parse_args()

    mj, weights = read_graph_model(a.model)
    sig = mj.get("signature") or (mj.get("userDefinedMetadata") or {}).get("signature", {})
    outputs = [o.partition(":")[0] for o in sig.get("outputs", {})]
    if outputs != ["Identity"]:
        raise ConvertError(f"{a.model}: outputs {outputs}, expected nsfwjs's one Identity")
    classes = read_classes(a.classes)
    conv = Converter(mj, weights)
    model = conv.convert(outputs, "nsfwjs_mobilenet_v2_mid", "clipfn tools/nsfwjs_onnx.py")
    out_dims = [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    if out_dims[1:] != [len(classes)]:
        raise ConvertError(f"output dims {out_dims}, but {len(classes)} classes")
    model_dir = os.path.dirname(os.path.abspath(a.model))
    shards = [os.path.join(model_dir, p) for g in mj["weightsManifest"] for p in g["paths"]]
    meta = {
        "source": "nsfwjs 4.4.0 (npm, MIT) dist/models/mobilenet_v2_mid: MobileNetV2Mid, GantMan/nsfw_model "
                  "(MIT) mobilenet_v2_140_224 fine-tuned; weights uint8-quantised by the tfjs converter",
        "source_json_sha256": sha256(a.model),
        "source_weights_sha256": ",".join(sha256(p) for p in shards),
        "converter": "clipfn tools/nsfwjs_onnx.py (tools/tfjs_onnx.py node by node; uint8 weights "
                     "dequantised as tfjs does: q * scale + min, float32)",
        "input": f"input float32 [N,{SIZE},{SIZE},3] NHWC RGB 0-1: the photo as float32 / 255, then "
                 f"tf.image.resizeBilinear to {SIZE}x{SIZE} with align_corners=true (half_pixel_centers "
                 "false), no crop (stretched), skipped when the photo is already 224x224",
        "outputs": f"Identity float32 [N,{len(classes)}] softmax probabilities, columns "
                   + ",".join(c.lower() for c in classes),
        "classes": ",".join(c.lower() for c in classes),
    }
    feed = None
    if a.check:
        x = np.random.default_rng(0).uniform(0, 1, (2, SIZE, SIZE, 3)).astype(np.float32)
        feed = {model.graph.input[0].name: x}
    declared = save_checked(model, meta, a.out, feed)
    if a.check:
        import onnxruntime as ort

        p = ort.InferenceSession(a.out, providers=["CPUExecutionProvider"]).run(None, feed)[0]
        if p.shape != (2, len(classes)) or np.abs(p.sum(1) - 1).max() > 1e-5:
            raise ConvertError(f"ONNX Runtime: probabilities {p.shape} with row sums {p.sum(1)}")
    names = [c.lower() for c in classes]
    write_classes_and_report("nsfwjs_onnx", (mj, conv, model, a.out), names, a.classes_out, declared)


if __name__ == "__main__":
    try:
        main()
    except ConvertError as e:
        print(f"nsfwjs_onnx: {e}", file=sys.stderr)
        sys.exit(1)
