#!/usr/bin/env python3
"""Human's CenterNet (a TensorFlow.js graph model) to ONNX, node by node.

@vladmandic/human 3.3.6 ships models/centernet.json (the graph, 544 nodes) and models/centernet.bin
(its weights, float32 tensors stored as float16 and int32 constants). This reads both and writes the
same graph with the `onnx` helper API:

  - every float16 weight is widened to float32 exactly as tfjs does on load (IEEE half to single,
    no other rounding); int32 constants stay int32;
  - the input stays NHWC, `tower_0/images` float32 [1, 512, 512, 3]; inside, 4-D activations run
    NCHW (ONNX's convolutions), with one Transpose in after the input and one back wherever an op
    needs the TensorFlow layout (the Reshape before TopK, the graph outputs);
  - the three outputs keep their tfjs names, shapes and layouts: `tower_0/detections` [1, 100, 6],
    `tower_0/keypoints` [1, 128, 128, 80] (NHWC), `tower_0/wh` [1, 128, 128, 4] (NHWC);
  - the decoding inside the graph (3x3 max-pool peak test, TopKV2 k=100, floor div/mod of the flat
    index, the gather of wh) maps one to one: ONNX TopK (largest, sorted; ties to the lower index,
    as tfjs's CPU kernel breaks them), its int64 indices cast to int32 as TensorFlow's, FloorDiv on
    integers as Div(a - Mod(a, b), b) (exact floor division), FloorMod as Mod(fmod=0).

The graph is converted by tools/tfjs_onnx.py (shared with tools/nsfwjs_onnx.py), whose docstring
lists op by op what each TensorFlow op becomes. Anything else, or any attribute outside what is
handled, stops the conversion with a message.

Usage: centernet_onnx.py --model centernet.json [--weights centernet.bin] --out model.onnx
                         [--labels labels.ts --classes-out classes.txt] [--check]
--labels reads Human's src/object/labels.ts ({ class: N, label: 'name' }, N = index + 1) and writes
the 80 names one a line in the model's class-index order (the `detections` column 5 value i is
line i + 1). --check runs the result once in ONNX Runtime on a fixed input and checks the shapes.
"""

import argparse
import os
import re
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


def read_labels(path):
    """Human's src/object/labels.ts: 80 names, entry i = class i + 1."""
    text = read_bytes(path).decode("utf-8")
    pairs = re.findall(r"\{\s*class:\s*(\d+),\s*label:\s*'([^']*)'\s*\}", text)
    if len(pairs) != 80 or [int(c) for c, _ in pairs] != list(range(1, 81)):
        raise ConvertError(f"{path}: expected 80 entries class 1..80, found {len(pairs)}")
    return [label for _, label in pairs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the tfjs graph model JSON (centernet.json)")
    ap.add_argument("--weights", help="its weights (default: the manifest's paths beside the JSON)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--labels", help="Human's src/object/labels.ts")
    ap.add_argument("--classes-out", help="where to write the 80 class names (needs --labels)")
    ap.add_argument("--check", action="store_true", help="run it once in ONNX Runtime")
    a = ap.parse_args()
    if bool(a.labels) != bool(a.classes_out):
        ap.error("--labels and --classes-out go together")

    mj, weights = read_graph_model(a.model, a.weights)
    sig_out = list(mj.get("signature", {}).get("outputs", {}))
    order = ["tower_0/detections", "tower_0/keypoints", "tower_0/wh"]
    outputs = [o for o in order if o in sig_out] + [o for o in sig_out if o not in order]
    conv = Converter(mj, weights)
    model = conv.convert(outputs, "centernet", "clipfn tools/centernet_onnx.py")
    wpath = a.weights or os.path.join(os.path.dirname(os.path.abspath(a.model)), mj["weightsManifest"][0]["paths"][0])
    meta = {
        "source": "@vladmandic/human 3.3.6 models/centernet.json + centernet.bin "
                  "(MB3-CenterNet, github.com/610265158/mobilenetv3_centernet; COCO 80 classes)",
        "source_json_sha256": sha256(a.model),
        "source_bin_sha256": sha256(wpath),
        "converter": "clipfn tools/centernet_onnx.py (node by node; float16 weights widened to float32)",
        "input": "tower_0/images float32 [1,512,512,3] NHWC RGB 0-255 (tf.image.resizeBilinear of the photo, "
                 "align_corners=false, half_pixel_centers=false; no normalisation)",
        "outputs": "tower_0/detections [1,100,6] = x1,y1,x2,y2 (512-px input space), score, class index 0-79; "
                   "tower_0/keypoints [1,128,128,80] NHWC sigmoid heatmap; tower_0/wh [1,128,128,4] NHWC",
    }
    if a.labels:
        labels = read_labels(a.labels)
        meta["classes"] = ",".join(labels)
    feed = None
    if a.check:
        feed = {model.graph.input[0].name: np.random.default_rng(0).uniform(0, 255, (1, 512, 512, 3)).astype(np.float32)}
    declared = save_checked(model, meta, a.out, feed)
    write_classes_and_report("centernet_onnx", (mj, conv, model, a.out), labels, a.classes_out, declared)


if __name__ == "__main__":
    try:
        main()
    except ConvertError as e:
        print(f"centernet_onnx: {e}", file=sys.stderr)
        sys.exit(1)
