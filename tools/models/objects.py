"""Object detector test models in ultralytics' YOLOv8 / YOLO11 ONNX export format (no real YOLO
weights are in any registry we reach), each a FOLDER: model.onnx + classes.txt (one class name a
line, line i + 1 = class index i).

  objects-yolo-drawn        finds the saturated red, green and blue squares tools/draw_objects.py
                            draws; classes.txt: red, green, blue
  objects-bad               a model.onnx with two outputs, [1,7] and [1,3,3]: neither format (refused
                            at start-up); the same classes.txt
  objects-classes-mismatch  objects-yolo-drawn's model.onnx with a classes.txt of 2 lines (refused:
                            the model has 3 classes)

The format (ultralytics' export, what clipfn reads): input "images" float32 [N,3,640,640] (dynamic
N), RGB / 255, the photo letterboxed as ultralytics' LetterBox(auto=False, center=True) does:
r = min(640 / h, 640 / w); new size (round(w r), round(h r)); dw = (640 - new_w) / 2,
dh = (640 - new_h) / 2; left = round(dw - 0.1), top = round(dh - 0.1) (right, bottom the rest);
bilinear resize; fill (114, 114, 114). Output "output0" float32 [N, 4 + C, A]: per anchor a, rows
0..3 = box centre x, centre y, width, height in the 640 canvas's pixels, rows 4.. = the C class
scores in 0..1 (already sigmoid; no objectness). Post-processing: per anchor the best class and its
score; keep score >= the minimum (0.25 here); class-aware greedy NMS at IoU 0.7 (candidates by
descending score); boxes mapped back through the letterbox: x = (cx - w / 2 - left) / r,
y = (cy - h / 2 - top) / r, w / r, h / r, in the photo's pixels (clipped to it).

The drawn design (nothing is learned, no random weights; same bytes every run):
  cells   the canvas in 128 x 128 cells of 5 px (AveragePool 5/5): A = 16,384 anchors, row-major
          (a = row * 128 + column), each cell's mean colour m = (R, G, B) in 0..1
  scores  red = clip(R - max(G, B), 0, 1), green = clip(G - max(R, B), 0, 1), blue likewise:
          grey (the 114 letterbox), black, white, yellow, cyan and magenta score 0
  box     a cell is linked to its right / lower neighbour when their mean colours differ by less
          than LINK (0.15) in every channel; the box spans the cell's run of linked cells along its
          row (left..right) and its column (top..bottom): CumSum + a 1 x 128 MaxPool of the
          cumulative sum at the breaks gives the run lengths. Every cell of a uniformly coloured
          square whose edges lie on cell borders therefore carries the whole square's box, NMS
          keeps one of them, and the box is the square (a bilinear resize's blur on the edge cells
          moves their mean by a few % only). Cells of different colours (>= LINK apart) are
          boxes of one cell, 5 x 5 px, that do not overlap: a photo of 5 px cells of alternating
          saturated colours gives 16,384 detections.
"""
import os
import shutil
import time

import numpy as np
from onnx import TensorProto, helper

from .files import move_folder, save
from .graph import Graph, onnx_model

CANVAS = 640
CELL = 5
GRID = CANVAS // CELL  # 128
ANCHORS = GRID * GRID  # 16,384
CLASSES = ["red", "green", "blue"]
LINK = 0.15  # the largest per-channel difference of mean colour (0..1) that links two cells
MIN_SCORE = 0.25
NMS_IOU = 0.7
FILL = 114
OBJECT_KINDS = ("objects-yolo-drawn", "objects-bad", "objects-classes-mismatch")
MODEL_ID = {"objects-yolo-drawn": "clipfn-test-objects-yolo-drawn-v1", "objects-bad": "clipfn-test-objects-bad-v1"}


def _runs(g, link, axis, reverse):
    """Run lengths of ones in `link` ([N,1,128,128] of 0/1, 0 at the start of each run's direction)
    along `axis` (2 or 3): for each cell, how many consecutive links lead away from it (towards
    index 0 unless `reverse`). CumSum s; at the breaks (link 0) keep s; the nearest break's s is
    the max over a 128-long window (s is monotonic); the run is s minus it."""
    s = g.op("CumSum", [link, g.ints(axis)], reverse=int(reverse))
    at_breaks = g.op("Mul", [s, g.op("Sub", [g.floats(1.0), link])])
    kernel = [GRID, 1] if axis == 2 else [1, GRID]
    # pads [top, left, bottom, right]: the window reaches back (or ahead) 127 cells
    before, after = ([GRID - 1, 0], [0, 0]) if not reverse else ([0, 0], [GRID - 1, 0])
    if axis == 3:
        before, after = before[::-1], after[::-1]
    nearest = g.op("MaxPool", [at_breaks], kernel_shape=kernel, pads=before + after)
    return g.op("Sub", [s, nearest])


def build_yolo_drawn():
    g = Graph(np.random.default_rng(0))  # nothing random is drawn
    m = g.op("AveragePool", ["images"], kernel_shape=[CELL, CELL], strides=[CELL, CELL])  # [N,3,128,128]
    r, gr, b = (g.name("ch") for _ in range(3))
    g.nodes.append(helper.make_node("Split", [m, g.ints([1, 1, 1])], [r, gr, b], axis=1))
    zero, one = g.floats(0.0), g.floats(1.0)
    scores = [g.op("Clip", [g.op("Sub", [c, g.op("Max", others)]), zero, one])
              for c, others in ((r, [gr, b]), (gr, [r, b]), (b, [r, gr]))]
    scores = g.op("Reshape", [g.op("Concat", scores, axis=1), g.ints([0, len(CLASSES), -1])])  # [N,3,A]

    # links: |m(cell) - m(next cell)| < LINK in every channel, padded with 0 (no link) at the ends
    def links(axis):
        n = GRID - 1
        a = g.op("Slice", [m, g.ints([0]), g.ints([n]), g.ints([axis])])
        nxt = g.op("Slice", [m, g.ints([1]), g.ints([GRID]), g.ints([axis])])
        diff = g.op("ReduceMax", [g.op("Abs", [g.op("Sub", [nxt, a])])], axes=[1], keepdims=1)
        link = g.op("Cast", [g.op("Less", [diff, g.floats(LINK)])], to=TensorProto.FLOAT)  # [N,1,..,127 on axis]
        pad_before = [0] * 4
        pad_after = [0] * 4
        pad_before[axis] = 1
        with_prev = g.op("Pad", [link, g.ints(pad_before + [0] * 4)])  # cell i: linked to i - 1
        pad_after[axis] = 1
        with_next = g.op("Pad", [link, g.ints([0] * 4 + pad_after)])  # cell i: linked to i + 1
        return with_prev, with_next

    prev_x, next_x = links(3)
    prev_y, next_y = links(2)
    left, right = _runs(g, prev_x, 3, False), _runs(g, next_x, 3, True)
    up, down = _runs(g, prev_y, 2, False), _runs(g, next_y, 2, True)
    ys, xs = np.mgrid[0:GRID, 0:GRID].astype(np.float32)
    col, row = g.const("grid_x", xs[None, None]), g.const("grid_y", ys[None, None])
    cell = g.floats(float(CELL))
    half = g.floats(0.5)
    # in cells: x1 = col - left, x2 = col + 1 + right; cx = (x1 + x2) / 2, w = x2 - x1
    cx = g.op("Mul", [g.op("Add", [col, g.op("Mul", [g.op("Add", [g.op("Sub", [right, left]), one]), half])]), cell])
    cy = g.op("Mul", [g.op("Add", [row, g.op("Mul", [g.op("Add", [g.op("Sub", [down, up]), one]), half])]), cell])
    w = g.op("Mul", [g.op("Add", [g.op("Add", [left, right]), one]), cell])
    h = g.op("Mul", [g.op("Add", [g.op("Add", [up, down]), one]), cell])
    boxes = g.op("Reshape", [g.op("Concat", [cx, cy, w, h], axis=1), g.ints([0, 4, -1])])  # [N,4,A]
    g.nodes.append(helper.make_node("Concat", [boxes, scores], ["output0"], name="output0", axis=1))
    kind = "objects-yolo-drawn"
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.input_size": str(CANVAS),
            "clipfn.cell": str(CELL), "clipfn.classes": ",".join(CLASSES), "clipfn.link": str(LINK)}
    return onnx_model(g, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, CANVAS, CANVAS])],
                      [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + len(CLASSES), ANCHORS])],
                      "clipfn_objects_yolo_drawn", meta)


def build_bad():
    """Input "images" [1,3,640,640]; outputs "output0" [1,7] (the mean colour and 4 zeros) and
    "output1" [1,3,3] (its outer product): neither a YOLO output [N, 4 + C, A] nor two of them."""
    g = Graph(np.random.default_rng(0))
    m = g.op("ReduceMean", ["images"], axes=[2, 3], keepdims=0)  # [1,3]
    g.nodes.append(helper.make_node("Concat", [m, g.floats(np.zeros((1, 4)))], ["output0"], name="output0", axis=1))
    col = g.op("Unsqueeze", [m, g.ints([2])])  # [1,3,1]
    g.nodes.append(helper.make_node("MatMul", [col, g.op("Unsqueeze", [m, g.ints([1])])], ["output1"], name="output1"))
    kind = "objects-bad"
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind}
    return onnx_model(g, [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, CANVAS, CANVAS])],
                      [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 7]),
                       helper.make_tensor_value_info("output1", TensorProto.FLOAT, [1, 3, 3])],
                      "clipfn_objects_bad", meta)


def write_folder(kind, folder):
    """folder/model.onnx + folder/classes.txt, written beside and renamed into place. Returns [paths]."""
    import onnx

    model = build_bad() if kind == "objects-bad" else build_yolo_drawn()
    onnx.checker.check_model(model, full_check=True)
    classes = CLASSES[:2] if kind == "objects-classes-mismatch" else CLASSES
    tmp = folder + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    save(model, os.path.join(tmp, "model.onnx"))
    with open(os.path.join(tmp, "classes.txt"), "w", encoding="utf-8") as f:
        f.write("".join(c + "\n" for c in classes))
    move_folder(tmp, folder)
    return [os.path.join(folder, "model.onnx"), os.path.join(folder, "classes.txt")]


def letterbox(rgb):
    """ultralytics' LetterBox(auto=False, center=True) of an HxWx3 uint8 array (Pillow BILINEAR for
    the resize): (canvas HxWx3 uint8, r, left, top)."""
    from PIL import Image

    h, w = rgb.shape[:2]
    r = min(CANVAS / h, CANVAS / w)
    nw, nh = int(round(w * r)), int(round(h * r))
    dw, dh = (CANVAS - nw) / 2, (CANVAS - nh) / 2
    left, top = int(round(dw - 0.1)), int(round(dh - 0.1))
    canvas = np.full((CANVAS, CANVAS, 3), FILL, np.uint8)
    img = Image.fromarray(rgb)
    if (nw, nh) != (w, h):
        img = img.resize((nw, nh), Image.Resampling.BILINEAR)
    canvas[top:top + nh, left:left + nw] = np.asarray(img)
    return canvas, r, left, top


def nms(boxes, scores, classes, iou):
    """Class-aware greedy NMS over [x1, y1, x2, y2] boxes: indices kept, by descending score (ties in
    anchor order)."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    by_class = {}
    for k in order:
        by_class.setdefault(int(classes[k]), []).append(int(k))
    for idx in by_class.values():  # greedy NMS per class, vectorised over the class's candidates
        idx = np.array(idx)
        b, a = boxes[idx], area[idx]
        alive = np.ones(len(idx), bool)
        for i in range(len(idx)):
            if not alive[i]:
                continue
            keep.append(int(idx[i]))
            rest = np.nonzero(alive[i + 1:])[0] + i + 1
            if len(rest) == 0:
                break
            ix1 = np.maximum(b[i, 0], b[rest, 0])
            iy1 = np.maximum(b[i, 1], b[rest, 1])
            ix2 = np.minimum(b[i, 2], b[rest, 2])
            iy2 = np.minimum(b[i, 3], b[rest, 3])
            inter = np.clip(ix2 - ix1, 0, None) * np.clip(iy2 - iy1, 0, None)
            ious = inter / (a[i] + a[rest] - inter)
            alive[rest[ious > iou]] = False
    return sorted(keep, key=lambda k: (-scores[k], k))


def decode(output, r, left, top, width, height, min_score=MIN_SCORE, iou=NMS_IOU):
    """One image's output [4 + C, A] -> [(class, score, [x, y, w, h] in the photo's pixels)], by
    descending score: best class per anchor, score >= min_score, class-aware NMS, letterbox undone,
    clipped to the photo."""
    cls = output[4:].argmax(0)
    score = output[4:].max(0)
    sel = np.nonzero(score >= min_score)[0]
    cx, cy, w, h = output[:4, sel]
    xyxy = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    kept = nms(xyxy, score[sel], cls[sel], iou)
    out = []
    for k in kept:
        x1, y1, x2, y2 = xyxy[k]
        x1, x2 = np.clip([(x1 - left) / r, (x2 - left) / r], 0, width)
        y1, y2 = np.clip([(y1 - top) / r, (y2 - top) / r], 0, height)
        out.append((int(cls[sel][k]), float(score[sel][k]), [float(x1), float(y1), float(x2 - x1), float(y2 - y1)]))
    return out


def check(path):
    """Runs model.onnx on a synthetic canvas (a red square on the 114 grey) or, for objects-bad, any
    canvas; asserts names and shapes; returns a line."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    outs = sess.get_outputs()
    assert inp.name == "images" and inp.shape[1:] == [3, CANVAS, CANVAS], (inp.name, inp.shape)
    img = np.full((CANVAS, CANVAS, 3), FILL, np.uint8)
    img[100:200, 300:420] = (255, 0, 0)  # 20 x 24 cells
    x = (img.transpose(2, 0, 1)[None] / 255).astype(np.float32)
    t = time.perf_counter()
    ys = sess.run(None, {"images": x})
    dt = time.perf_counter() - t
    shapes = [list(y.shape) for y in ys]
    if len(outs) != 1:
        assert shapes == [[1, 7], [1, 3, 3]], shapes
        return f"images {inp.shape} -> {', '.join(f'{o.name} {s}' for o, s in zip(outs, shapes))} in {dt * 1000:.1f} ms"
    (y,) = ys
    assert outs[0].name == "output0" and y.shape == (1, 4 + len(CLASSES), ANCHORS), y.shape
    dets = decode(y[0], 1.0, 0, 0, CANVAS, CANVAS)
    assert [(c, round(s, 4), b) for c, s, b in dets] == [(0, 1.0, [300.0, 100.0, 120.0, 100.0])], dets
    xs = np.concatenate([x, x[:, :, ::-1]])  # a batch of 2: the second upside down
    (y2,) = sess.run(None, {"images": np.ascontiguousarray(xs)})
    assert y2.shape == (2, 4 + len(CLASSES), ANCHORS) and np.array_equal(y2[0], y[0])
    return f"images {inp.shape} -> output0 {outs[0].shape}; a red square found at [300, 100, 120, 100] " \
           f"(x, y, w, h), score 1.0; {dt * 1000:.1f} ms a canvas"
