"""An SCRFD detector whose graph fixes its input side, rewritten to take any side (issue 35).

InsightFace's SCRFD exports size their two FPN upsamplings (Resize) by the fixed input's feature
maps, as `sizes`; this rewrites them to `scales` of 2 (what the network's nearest upsampling is),
names the input's height and width and the outputs' anchor counts instead of fixing them, and
checks that at the original side the rewritten graph answers as the original does.

    dynamic_detector.py IN.onnx OUT.onnx
"""

import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

SCALES = "upsample_by_2"


def rewrite(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = model.graph
    dims = graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    for i, output in enumerate(graph.output):
        output.type.tensor_type.shape.dim[1].dim_param = f"anchors_{i}"
    del graph.value_info[:]
    resizes = [node for node in graph.node if node.op_type == "Resize"]
    assert resizes, "no Resize node: not an SCRFD export of the expected shape"
    graph.initializer.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), SCALES))
    sizes = set()
    for node in resizes:
        x, roi, *rest = node.input
        sizes.update(name for name in rest[1:] if name)
        del node.input[:]
        node.input.extend([x, roi, SCALES])
    # The fixed sizes are used by nothing else now.
    used = {name for node in graph.node for name in node.input}
    keep = [init for init in graph.initializer if init.name not in sizes or init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    keep_nodes = [node for node in graph.node if not (set(node.output) & sizes) or set(node.output) & used]
    del graph.node[:]
    graph.node.extend(keep_nodes)
    onnx.checker.check_model(model)
    return model


def main(source: str, target: str) -> None:
    original = onnx.load(source)
    side = original.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    onnx.save(rewrite(original), target)
    name = onnx.load(source).graph.input[0].name
    pixels = np.random.default_rng(0).random((1, 3, side, side), np.float32)
    was = ort.InferenceSession(source).run(None, {name: pixels})
    now = ort.InferenceSession(target).run(None, {name: pixels})
    diff = max(float(np.abs(a - b).max()) for a, b in zip(was, now))
    assert diff < 1e-4, f"the rewritten detector differs at {side}: {diff}"
    for other in (320, 480):
        ort.InferenceSession(target).run(None, {name: np.zeros((1, 3, other, other), np.float32)})
    print(f"{target}: dynamic input, equal to {source} at {side} within {diff:.1e}")


if __name__ == "__main__":
    main(*sys.argv[1:])
