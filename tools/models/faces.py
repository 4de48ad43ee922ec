"""Face detection + recognition test models (issue 29): seeded random weights in the layouts of the
real models, so that clipfn's decoding, alignment and clustering run in ONNX Runtime exactly as they
would on InsightFace's buffalo_l (SCRFD det_10g + ArcFace w600k_r50) or OpenCV Zoo's YuNet.

  faces-scrfd-test  folder: detection/model.onnx SCRFD-shaped, recognition/model.onnx ArcFace-shaped
  faces-yunet-test  folder: detection/model.onnx YuNet-shaped (face_detection_yunet_2023mar), the
                    same recognition/model.onnx
  faces-scrfd-drawn, faces-yunet-drawn  folders: the same formats and recognizer, detectors that
                    find the faces tools/draw_faces.py draws ("The drawn-face design" below)
  faces-yolov5-face-drawn  folder: a YOLOv5-face-shaped detector of the drawn-face design, the same
                    recognizer
  face-detector-bad    one file: the SCRFD detector with 7 outputs (no kps_16, kps_32): no format
  face-recognizer-bad  one file: the recognizer at [N,3,96,96] (ArcFace takes 112)

SCRFD: input "input.1" float32 [1,3,640,640] ((RGB - 127.5) / 128); outputs, in this order,
score_8, score_16, score_32 [1,n,1] (probabilities), bbox_8, bbox_16, bbox_32 [1,n,4] (distances
left, top, right, bottom from the anchor centre, in strides), kps_8, kps_16, kps_32 [1,n,10] (5
landmark offsets from the anchor centre, in strides); n = (640/s)^2 * 2: cells row-major, the 2
anchors of a cell consecutive.
YuNet: input "input" float32 [1,3,640,640] (BGR 0-255 as is); outputs cls_8, cls_16, cls_32,
obj_8.., bbox_8.. [1,n,4] (dx, dy, log w, log h in strides), kps_8.. [1,n,10] (offsets from the
cell in strides); n = (640/s)^2, one anchor per cell. cls spans [-0.02, 1.18] (below 0 on the
letterbox, above 1 on the strongest faces) and obj (0.82, 0.98): a decoder that forgets to clamp
cls to [0, 1] scores those faces too high and takes the square root of negative numbers.
YOLOv5-face (drawn only): input "input" float32 [1,3,640,640] (RGB / 255, the photo centred on a
grey 114 letterbox); output "output" [1,N,16], N = 3 * ((640/8)^2 + (640/16)^2 + (640/32)^2) =
25200, decoded as deepcam-cn/yolov5-face's export_cat Detect layer decodes: box centre x, y, width,
height in canvas pixels, objectness, 5 landmarks (x, y) in canvas pixels, class score; rows stride
by stride, each stride's 3 anchors one after another (anchor-major), the anchors of a cell alike.
ArcFace: input "input.1" float32 [N,3,112,112] ((RGB - 127.5) / 127.5), output "683" float32
[N,512], not normalised.

How the detector "finds faces" (nothing is learned; it is arranged so that real photos give a few
well-separated detections with scores spread over [0.7, 0.95], none touching the letterbox, and
the same ones for a resized copy of the photo):
  f    per stride s and anchor, a low-pass random filter over the 2s x 2s pixels around the cell
       (4 x 4 blocks of s/2 pixels; zero-sum per colour channel, so flat patches of ANY colour give
       0; the canvas mirrored at its edges), divided by its typical response on photos
       (FEATURE_SD), so f is in standard deviations
  g    f - 4 * (MaxPool5x5(f) - f)  (local maxima keep their value, their neighbours drop)
         - 10000 * (the cell's field touches a row or column that is black from end to end: the
           letterbox; a few black pixels of a photo never count)
  k    the K-th largest g of the stride and anchor (TopK; K = TOP_K)
  L    min(OFFSET + sign(d) ln(1 + |d|) with d = g - T,  100 * (g - k) + 10):
       above the 0.7 score only where g > T (THRESHOLD) and only for the K best peaks, so about
       sum(K) * anchors detections at most (SCRFD 8, YuNet 7) before NMS
  SCRFD score = sigmoid(L); YuNet cls = 1.2 * sigmoid(L) - 0.02, obj = 0.9 + 0.08 * tanh(..)
Boxes: anchor-sized (BOX_STRIDES) times exp(0.1 * tanh(a low-pass filter)); landmarks: the ArcFace
template placed in the box (box centre + box size * template offsets) plus 0.03 * tanh noise, so
the 5-point alignment is well conditioned and landmarks stay inside the box.
Recognizer: clip.py's test design at 112: a 16x16/stride-16 low-pass patch conv (3->16, zero-sum)
+ tanh, flattened (16 * 7 * 7) and projected to 512: position and colour edges move the embedding.
Figures measured on the camera photos are in tools/README.md ("Face models")."""
import os
import shutil
import time

import numpy as np
from onnx import TensorProto, helper

from .files import move_folder, save
from .graph import Graph, learned_params, onnx_model

CANVAS = 640
STRIDES = (8, 16, 32)
# folder kind: (detector format, the drawn-face design)
FACE_FOLDERS = {"faces-scrfd-test": ("scrfd", False), "faces-yunet-test": ("yunet", False),
                "faces-scrfd-drawn": ("scrfd", True), "faces-yunet-drawn": ("yunet", True),
                "faces-yolov5-face-drawn": ("yolov5-face", True)}
FACE_FILES = {"face-detector-bad": "face-detector-bad.onnx", "face-recognizer-bad": "face-recognizer-bad.onnx"}
MODEL_ID = {"scrfd": "clipfn-test-scrfd-v1", "yunet": "clipfn-test-yunet-v1", "arcface": "clipfn-test-arcface-v1",
            "scrfd-drawn": "clipfn-test-scrfd-drawn-v1", "yunet-drawn": "clipfn-test-yunet-drawn-v1",
            "yolov5-face-drawn": "clipfn-test-yolov5-face-drawn-v1",
            "face-detector-bad": "clipfn-test-face-detector-bad-v1",
            "face-recognizer-bad": "clipfn-test-face-recognizer-bad-v1"}
# rng salts: each part has its own stream, so changing one leaves the others' weights alone
SALT = {"scrfd": 11, "yunet": 12, "arcface": 13, "yolov5-face": 14}

ARCFACE_TEMPLATE = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                             [41.5493, 92.3655], [70.7299, 92.2041]])
# the template as offsets from the face box's centre in box widths / heights (the box's centre a
# little above the nose, as in real detections)
LANDMARKS_IN_BOX = ((ARCFACE_TEMPLATE - [56.0, 62.0]) / 112.0).ravel()

# The std of each unit-norm peak filter's response on the normalised canvases of the 34 camera
# photos of .cache/photos/wallpapers (patches touching the letterbox left out), per format, stride
# and anchor, for the default seed: f is then in stds. Another seed gets other counts.
FEATURE_SD = {"scrfd": {8: (0.1072, 0.1276), 16: (0.1636, 0.3044), 32: (0.1491, 0.2577)},
              "yunet": {8: (0.1185,), 16: (0.166,), 32: (0.2453,)}}
SMALL_SD = {8: 0.09, 16: 0.17, 32: 0.2}  # the same, roughly, for the box and landmark filters
THRESHOLD = {8: 3.0, 16: 3.0, 32: 3.5}  # g above which a peak scores over 0.7, in stds
FIELD = 2  # the peak filters see 2 x 2 strides around their cell (mirrored at the canvas edge)
GRID = {8: 4, 16: 4, 32: 4}  # their 4 x 4 blocks of stride / 2 pixels
PEAK_WINDOW = 5  # a peak is the largest f in its 5 x 5 cells
TOP_K = {"scrfd": {8: 2, 16: 1, 32: 1}, "yunet": {8: 3, 16: 2, 32: 2}}  # per anchor
ANCHORS = {"scrfd": 2, "yunet": 1}
# SCRFD: half-widths (in strides) of anchors 0 and 1; YuNet: width per stride. Chosen so that a
# face inside the next stride's face has IoU <= 0.3 (SCRFD's NMS drops > 0.4, YuNet's > 0.3):
# NMS decisions never hinge on a box's small learned size term
BOX_STRIDES = {"scrfd": (3.0, 3.25), "yunet": {8: 5.0, 16: 6.0, 32: 7.0}}
# the logit at which a peak at exactly THRESHOLD lands: SCRFD's score 0.7; YuNet's cls where
# sqrt(cls * obj) = 0.7 for a typical obj of 0.9 (cls = 1.2 * sigmoid - 0.02 = 0.544)
OFFSET = {"scrfd": float(np.log(0.7 / 0.3)), "yunet": -0.12}

# The drawn-face design (faces-*-drawn), for photos drawn for the purpose (tools/draw_faces.py),
# where the faces are, and what they should answer, is known. A face is a filled ellipse of
# any colours far from the grey background (DRAWN_GREY) and from black (the letterbox). Per anchor,
# the moments of that mask over the DRAWN_WINDOW square centred on the anchor give the face's
# centre and its semi-axes (2 standard deviations of a filled ellipse); the box is DRAWN_BOX times
# the ellipse's, the landmarks the ArcFace template placed in the box (as the peak design places
# them). The score falls with the anchor's distance from the centre (in strides), so the nearest
# anchors score over 0.7, and every anchor whose window holds the whole face gives the same box,
# which NMS keeps once. A face reaching into the window's outer DRAWN_RING pixels, or one of under
# DRAWN_MIN_AREA pixels, scores nothing: faces stay under 40 canvas pixels in semi-axis and 80 +
# their sizes apart.
DRAWN_GREY = 128
YOLO_GREY = 114  # YOLOv5's letterbox: 42 from DRAWN_GREY over the channels, so the mask leaves it out by name
YOLO_ANCHORS = 3  # YOLOv5-face's anchors a cell
DRAWN_WINDOW, DRAWN_RING = 128, 8
DRAWN_BOX = 1.2
DRAWN_MIN_AREA = 50.0


def lowpass_filters(rng, n, s, zero_sum, grid=4):
    """n filters [n,3,s,s]: a grid x grid array of block weights per channel, each block s/grid
    pixels square, unit L2 norm over the block weights (a filter then sums block *means*)."""
    w = rng.standard_normal((n, 3, grid, grid))
    if zero_sum:
        w -= w.mean(axis=(2, 3), keepdims=True)
    w /= np.linalg.norm(w.reshape(n, -1), axis=1)[:, None, None, None]
    b = s // grid
    return (np.repeat(np.repeat(w, b, axis=2), b, axis=3) / (b * b)).astype(np.float32)


def to_rows(g, x, k, rows_shape):
    """[1, A*k, H, W] (channel a*k + j) -> [1, H*W*A, k] (row (y*W + x)*A + a)."""
    t = g.op("Transpose", [x], perm=[0, 2, 3, 1])
    return g.op("Reshape", [t, g.const(g.name("rows_shape"), np.array(rows_shape, np.int64))])


def peak_logits(g, x, black, s, fmt, anchors):
    """L [1, A, H, W] (see the module doc): high only at the TOP_K strongest peaks over THRESHOLD."""
    rng, h = g.rng, CANVAS // s
    sd = np.array(FEATURE_SD[fmt][s], np.float32)[:, None, None, None]
    field = FIELD * s  # the receptive field: FIELD strides square, centred on the cell
    w = lowpass_filters(rng, anchors, field, zero_sum=True, grid=GRID[s]) / sd
    p = (field - s) // 2  # mirrored borders: no step at the canvas edge for the filter to answer
    xp = g.op("Pad", [x, g.const(g.name("pads"), np.array([0, 0, p, p, 0, 0, p, p], np.int64))], mode="reflect")
    f = g.op("Conv", [xp, g.const(f"feature{s}.weight", w)], kernel_shape=[field, field], strides=[s, s])
    r = PEAK_WINDOW // 2
    peak = g.op("MaxPool", [f], kernel_shape=[PEAK_WINDOW] * 2, strides=[1, 1], pads=[r] * 4)
    four = g.const(g.name("c"), np.array(4.0, np.float32))
    gm = g.op("Sub", [f, g.op("Mul", [g.op("Sub", [peak, f]), four])])
    # the letterbox anywhere in the cell's field: [1,1,H,W]
    pb = g.op("MaxPool", [black], kernel_shape=[field, field], strides=[s, s], pads=[p] * 4)
    gm = g.op("Sub", [gm, g.op("Mul", [pb, g.const(g.name("c"), np.array(10000.0, np.float32))])])
    flat = g.op("Reshape", [gm, g.const(g.name("shape"), np.array([1, anchors, h * h], np.int64))])
    k = TOP_K[fmt][s]
    vals = g.name("topk_values")
    g.nodes.append(helper.make_node("TopK", [flat, g.const(g.name("k"), np.array([k], np.int64))],
                                    [vals, g.name("topk_indices")], name=vals, axis=-1, largest=1, sorted=1))
    kth = g.op("Slice", [vals, g.const(g.name("i"), np.array([k - 1], np.int64)),
                         g.const(g.name("i"), np.array([k], np.int64)), g.const(g.name("i"), np.array([2], np.int64))])
    kth = g.op("Unsqueeze", [kth, g.const(g.name("axes"), np.array([3], np.int64))])  # [1,A,1,1]
    # above = OFFSET + sign(d) * ln(1 + |d|), d = g - T: crosses the 0.7 score at g = T, keeps
    # growing (no two peaks share a score) yet stays in sigmoid's unsaturated range
    d = g.op("Sub", [gm, g.const(g.name("c"), np.array(THRESHOLD[s], np.float32))])
    one = g.const(g.name("c"), np.array(1.0, np.float32))
    up = g.op("Log", [g.op("Add", [g.op("Relu", [d]), one])])
    down = g.op("Log", [g.op("Add", [g.op("Relu", [g.op("Neg", [d])]), one])])
    above = g.op("Add", [g.op("Sub", [up, down]), g.const(g.name("c"), np.array(OFFSET[fmt], np.float32))])
    best = g.op("Add", [g.op("Mul", [g.op("Sub", [gm, kth]), g.const(g.name("c"), np.array(100.0, np.float32))]),
                        g.const(g.name("c"), np.array(10.0, np.float32))])
    return g.op("Min", [above, best])


def small_conv(g, x, name, s, n, amp, bias, gain=1.0):
    """[1, n, H, W]: bias + amp * tanh(low-pass conv of about `gain` std on photos): bounded, so a
    box never strays far from its anchor."""
    w = lowpass_filters(g.rng, n, s, zero_sum=True) * (gain / SMALL_SD[s])
    b = np.broadcast_to(np.asarray(bias, np.float32), (n,)).reshape(n, 1, 1).copy()
    amp = np.broadcast_to(np.asarray(amp, np.float32), (n,)).reshape(n, 1, 1).copy()
    y = g.op("Tanh", [g.op("Conv", [x, g.const(f"{name}.weight", w)], kernel_shape=[s, s], strides=[s, s])])
    return g.op("Add", [g.op("Mul", [y, g.const(f"{name}.amp", amp)]), g.const(f"{name}.bias", b)])


def landmarks(g, centre, size, noise, s):
    """[1,n,10]: centre [1,n,2] + size [1,n,2] * (LANDMARKS_IN_BOX + noise [1,n,10])."""
    reps = g.const(g.name("reps"), np.array([1, 1, 5], np.int64))
    tmpl = g.op("Add", [noise, g.const(f"landmarks{s}.template", LANDMARKS_IN_BOX.astype(np.float32))])
    return g.op("Add", [g.op("Tile", [centre, reps]), g.op("Mul", [g.op("Tile", [size, reps]), tmpl])])


def drawn_mask(g, x, grey_letterbox=False):
    """(mask, black), [1,1,640,640] each in [0, 1]. The mask: 1 where a pixel is far from the grey background (the sum of its
    channels' distances from DRAWN_GREY over 70) and not black (the letterbox: every channel
    under 19), nor with `grey_letterbox` YOLO_GREY (every channel within 2 of it; 0 from 8 on); a
    dead zone under 30 keeps JPEG's ringing on the background out. black: 1 on black pixels."""
    grey = g.floats((DRAWN_GREY - 127.5) / 128)
    dist = g.op("Conv", [g.op("Abs", [g.op("Sub", [x, grey])]), g.const(g.name("sum"), np.full((1, 3, 1, 1), 128.0, np.float32))],
                kernel_shape=[1, 1])
    far = g.op("Min", [g.op("Relu", [g.op("Mul", [g.op("Sub", [dist, g.floats(30.0)]), g.floats(1 / 40)])]), g.floats(1.0)])
    top = g.op("ReduceMax", [x], axes=[1], keepdims=1)
    black = g.op("Min", [g.op("Relu", [g.op("Mul", [g.op("Sub", [g.floats(-0.85), top]), g.floats(20.0)])]), g.floats(1.0)])
    mask = g.op("Mul", [far, g.op("Sub", [g.floats(1.0), black])])
    if grey_letterbox:
        off = g.op("ReduceMax", [g.op("Abs", [g.op("Sub", [x, g.floats((YOLO_GREY - 127.5) / 128)])])], axes=[1], keepdims=1)
        pad = g.op("Min", [g.op("Relu", [g.op("Mul", [g.op("Sub", [g.floats(8 / 128), off]), g.floats(20.0)])]), g.floats(1.0)])
        mask = g.op("Mul", [mask, g.op("Sub", [g.floats(1.0), pad])])
    return mask, black


def drawn_cells(g, mask, s):
    """Per cell of stride s: (logit [1,1,H,W], centre [1,2,H,W], size [1,2,H,W]), the centre
    and the box's size in strides from the anchor (x * s, y * s). The mask's moments over the
    DRAWN_WINDOW square centred on the anchor, separably (a row pass, then a column pass): sum m,
    sum m dx, sum m dy, sum m dx^2, sum m dy^2 (dx, dy from the anchor to pixel centres) and sum m
    inside the ring."""
    k, h = DRAWN_WINDOW, CANVAS // s
    t = np.arange(k) + 0.5 - k / 2
    inner = (np.abs(t) < k / 2 - DRAWN_RING).astype(np.float64)
    ones = np.ones(k)
    rows_w = np.stack([ones, t, t * t, inner])[:, None, None, :].astype(np.float32)  # [4,1,1,k]
    r = g.op("Conv", [mask, g.const(f"drawn{s}.rows", rows_w)], kernel_shape=[1, k], strides=[1, s],
             pads=[0, k // 2, 0, k // 2])
    cols_w = np.zeros((6, 4, k, 1), np.float32)  # out channel: (row pass channel, column kernel)
    for i, (ch, v) in enumerate([(0, ones), (1, ones), (0, t), (2, ones), (0, t * t), (3, inner)]):
        cols_w[i, ch, :, 0] = v
    m = g.op("Conv", [r, g.const(f"drawn{s}.cols", cols_w)], kernel_shape=[k, 1], strides=[s, 1],
             pads=[k // 2, 0, k // 2, 0])
    m = g.op("Slice", [m, g.ints([0, 0]), g.ints([h, h]), g.ints([2, 3])])  # the padding's extra row and column
    parts = [g.name("moment") for _ in range(6)]
    g.nodes.append(helper.make_node("Split", [m, g.ints([1] * 6)], parts, name=parts[0], axis=1))
    m00, m10, m01, m20, m02, m_inner = parts
    area = g.op("Max", [m00, g.floats(1.0)])
    centre = g.op("Div", [g.op("Concat", [m10, m01], axis=1), area])  # pixels from the anchor
    var = g.op("Sub", [g.op("Div", [g.op("Concat", [m20, m02], axis=1), area]), g.op("Mul", [centre, centre])])
    size = g.op("Mul", [g.op("Sqrt", [g.op("Max", [var, g.floats(1.0)])]), g.floats(4 * DRAWN_BOX / s)])  # 2 x 2 std
    d2 = g.op("ReduceSum", [g.op("Mul", [centre, centre]), g.ints([1])], keepdims=1)
    ring = g.op("Relu", [g.op("Sub", [g.op("Sub", [m00, m_inner]), g.floats(0.5)])])
    small = g.op("Relu", [g.op("Sub", [g.floats(1.0), g.op("Div", [m00, g.floats(DRAWN_MIN_AREA)])])])
    logit = g.op("Sub", [g.floats(2.5), g.op("Add", [g.op("Mul", [d2, g.floats(2 / (s * s))]),
                                               g.op("Mul", [g.op("Add", [ring, small]), g.floats(1000.0)])])])
    return logit, g.op("Mul", [centre, g.floats(1 / s)]), size


def per_anchor(g, x, anchors, k, n):
    """[1,k,H,W] -> rows [1,n,k], the same values for each of the cell's anchors."""
    return to_rows(g, g.op("Concat", [x] * anchors, axis=1) if anchors > 1 else x, k, [1, n, k])


def build_detector(fmt, seed, kps_strides=STRIDES, drawn=False):
    """SCRFD- or YuNet-shaped detector (see the module doc): the peak design, or with `drawn` the
    drawn-face design; kps_strides drops kps outputs (the bad detector)."""
    g = Graph(np.random.default_rng([seed, SALT[fmt]]))
    a_n = ANCHORS[fmt]
    inp = "input.1" if fmt == "scrfd" else "input"
    if fmt == "scrfd":
        x = inp
    else:  # raw BGR 0-255: the same normalisation inside the graph
        x = g.op("Mul", [g.op("Sub", [inp, g.const("mean", np.array(127.5, np.float32))]),
                         g.const("inv_std", np.array(1 / 128, np.float32))])
    if drawn:
        mask, _ = drawn_mask(g, x)
    else:
        # > 0 on every pixel of a column or row that is black from end to end (max of all its
        # pixels and channels < 0.77 of 255): the letterbox padding, never a few dark pixels
        level = g.const("black_level", np.array(-0.99, np.float32))
        cols = g.op("Relu", [g.op("Sub", [level, g.op("ReduceMax", [x], axes=[1, 2], keepdims=1)])])  # [1,1,1,640]
        rows = g.op("Relu", [g.op("Sub", [level, g.op("ReduceMax", [x], axes=[1, 3], keepdims=1)])])  # [1,1,640,1]
        black = g.op("Max", [cols, rows])  # [1,1,640,640]
    outs = {}
    for s in STRIDES:
        n = (CANVAS // s) ** 2 * a_n
        if drawn:
            logit, centre, size = drawn_cells(g, mask, s)
            logit = g.op("Concat", [logit] * a_n, axis=1) if a_n > 1 else logit
            centre, size = per_anchor(g, centre, a_n, 2, n), per_anchor(g, size, a_n, 2, n)
        else:
            logit = peak_logits(g, x, black, s, fmt, a_n)
        if fmt == "scrfd":
            score = to_rows(g, g.op("Sigmoid", [logit]), 1, [1, n, 1])
            if drawn:  # distances (left, top, right, bottom) = size / 2 -+ centre
                d = g.op("MatMul", [g.op("Concat", [centre, size], axis=-1), g.const(f"bbox{s}.distances", np.array(
                    [[-1, 0, 1, 0], [0, -1, 0, 1], [0.5, 0, 0.5, 0], [0, 0.5, 0, 0.5]], np.float32))])
            else:
                log_d = np.repeat(np.log(BOX_STRIDES[fmt]), 4)  # anchor a's 4 distances: channels 4a..4a+3
                d = to_rows(g, g.op("Exp", [small_conv(g, x, f"bbox{s}", s, 4 * a_n, 0.1, log_d)]), 4, [1, n, 4])
                centre = g.op("MatMul", [d, g.const(f"bbox{s}.centre", np.array(
                    [[-0.5, 0], [0, -0.5], [0.5, 0], [0, 0.5]], np.float32))])  # ((d2 - d0) / 2, (d3 - d1) / 2)
                size = g.op("MatMul", [d, g.const(f"bbox{s}.size", np.array(
                    [[1, 0], [0, 1], [1, 0], [0, 1]], np.float32))])  # (d0 + d2, d1 + d3)
            outs[f"score_{s}"], outs[f"bbox_{s}"] = score, d
        else:
            cls = g.op("Sub", [g.op("Mul", [g.op("Sigmoid", [logit]), g.const(g.name("c"), np.array(1.2, np.float32))]),
                               g.const(g.name("c"), np.array(0.02, np.float32))])
            if drawn:
                obj = g.op("Add", [g.op("Mul", [logit, g.floats(0.0)]), g.floats(0.95)])
                b = g.op("Concat", [centre, g.op("Log", [size])], axis=-1)
            else:
                # obj in (0.82, 0.98), never saturated: a face whose cls clamps to 1 scores sqrt(obj), unique
                obj = small_conv(g, x, f"obj{s}", s, 1, 0.08, 0.9, gain=0.3)
                log_w = np.log(BOX_STRIDES[fmt][s])
                b = to_rows(g, small_conv(g, x, f"bbox{s}", s, 4, [0.3, 0.3, 0.1, 0.1], [0.5, 0.5, log_w, log_w]),
                            4, [1, n, 4])
                split = g.const(g.name("split"), np.array([2, 2], np.int64))
                centre, log_size = g.name("centre"), g.name("log_size")
                g.nodes.append(helper.make_node("Split", [b, split], [centre, log_size], name=centre, axis=-1))
                size = g.op("Exp", [log_size])
            outs[f"cls_{s}"] = to_rows(g, cls, 1, [1, n, 1])
            outs[f"obj_{s}"] = to_rows(g, obj, 1, [1, n, 1])
            outs[f"bbox_{s}"] = b
        if s in kps_strides:
            noise = (g.const(g.name("no_noise"), np.zeros(10, np.float32)) if drawn else
                     to_rows(g, small_conv(g, x, f"kps{s}", s, 10 * a_n, 0.03, 0.0), 10, [1, n, 10]))
            outs[f"kps_{s}"] = landmarks(g, centre, size, noise, s)
    order = ([f"{k}_{s}" for k in ("score", "bbox", "kps") for s in STRIDES] if fmt == "scrfd" else
             [f"{k}_{s}" for k in ("cls", "obj", "bbox", "kps") for s in STRIDES])
    outputs = []
    for name in order:
        if name not in outs:
            continue
        g.nodes.append(helper.make_node("Identity", [outs[name]], [name], name=name))
        k = {"score": 1, "cls": 1, "obj": 1, "bbox": 4, "kps": 10}[name.split("_")[0]]
        n = (CANVAS // int(name.split("_")[1])) ** 2 * a_n
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, n, k]))
    kind = ("face-detector-bad" if kps_strides != STRIDES else f"{fmt}-drawn" if drawn else fmt)
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.seed": str(seed),
            "clipfn.input_size": str(CANVAS), "clipfn.strides": ",".join(map(str, STRIDES)),
            "clipfn.anchors": str(a_n)}
    model = onnx_model(g, [helper.make_tensor_value_info(inp, TensorProto.FLOAT, [1, 3, CANVAS, CANVAS])],
                       outputs, f"clipfn_{kind}".replace("-", "_"), meta)
    return model, learned_params(g)


def build_yolov5_face_drawn(seed):
    """YOLOv5-face-shaped (see the module doc) with the drawn-face design: per cell the drawn
    centre and box (drawn_cells) made absolute, objectness sigmoid(L), class score sigmoid(L + 2)
    (so that the score is a product: obj alone is higher), the landmarks the template in the box.
    A black pixel in a cell's window kills its score: YOLOv5-face's letterbox is grey, so a face
    beside black padding (the photo in the top-left of a black canvas, the wrong letterbox) is
    missed, and the drawn faces tell the letterboxes apart."""
    g = Graph(np.random.default_rng([seed, SALT["yolov5-face"]]))
    # RGB / 255 -> the (p - 127.5) / 128 the drawn design is written for
    x = g.op("Sub", [g.op("Mul", ["input", g.floats(255 / 128)]), g.floats(127.5 / 128)])
    mask, black = drawn_mask(g, x, grey_letterbox=True)
    rows = []
    for s in STRIDES:
        h = CANVAS // s
        n = h * h
        logit, centre, size = drawn_cells(g, mask, s)
        k = DRAWN_WINDOW  # the window drawn_cells' moments see: pixels i * s - k / 2 .. i * s + k / 2 - 1
        seen = g.op("MaxPool", [black], kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)
        seen = g.op("Slice", [seen, g.ints([0, 0]), g.ints([h, h]), g.ints([2, 3])])
        logit = g.op("Sub", [logit, g.op("Mul", [seen, g.floats(1000.0)])])
        ys, xs = np.mgrid[0:h, 0:h]
        cells = g.const(f"grid{s}", np.stack([xs, ys])[None].astype(np.float32))  # the anchor, in strides
        centre = to_rows(g, g.op("Add", [centre, cells]), 2, [1, n, 2])
        size = to_rows(g, size, 2, [1, n, 2])
        kps = landmarks(g, centre, size, g.const(g.name("no_noise"), np.zeros(10, np.float32)), s)
        obj = to_rows(g, g.op("Sigmoid", [logit]), 1, [1, n, 1])
        cls = to_rows(g, g.op("Sigmoid", [g.op("Add", [logit, g.floats(2.0)])]), 1, [1, n, 1])
        pixels = g.floats(float(s))
        row = g.op("Concat", [g.op("Mul", [centre, pixels]), g.op("Mul", [size, pixels]), obj,
                              g.op("Mul", [kps, pixels]), cls], axis=-1)
        rows += [row] * YOLO_ANCHORS
    g.nodes.append(helper.make_node("Concat", rows, ["output"], name="output", axis=1))
    n = YOLO_ANCHORS * sum((CANVAS // s) ** 2 for s in STRIDES)
    kind = "yolov5-face-drawn"
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.seed": str(seed),
            "clipfn.input_size": str(CANVAS), "clipfn.strides": ",".join(map(str, STRIDES)),
            "clipfn.anchors": str(YOLO_ANCHORS)}
    model = onnx_model(g, [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, CANVAS, CANVAS])],
                       [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, n, 16])],
                       f"clipfn_{kind}".replace("-", "_"), meta)
    return model, learned_params(g)


def build_recognizer(seed, size=112):
    """ArcFace-shaped: "input.1" [N,3,size,size] -> "683" [N,512]: a 16x16/stride-16 low-pass patch
    conv (3->16; 4x4 blocks, zero-sum per channel) + tanh, flattened (16 * 7 * 7) and projected to 512.
    Zero-sum: a crop's overall colour cast moves nothing, its layout of colour edges does (so crops
    of different places differ, a blurred or re-encoded copy of the same crop hardly moves)."""
    g = Graph(np.random.default_rng([seed, SALT["arcface"]]))
    grid = size // 16
    w = lowpass_filters(g.rng, 16, 16, zero_sum=True) * 3.0  # gain 3: tanh saturated (|t| > 0.95) for a few % of units
    x = g.op("Conv", ["input.1", g.const("patch.weight", w), g.randn("patch.bias", (16,), 0.1)],
             kernel_shape=[16, 16], strides=[16, 16])
    x = g.op("Flatten", [g.op("Tanh", [x])], axis=1)  # [N, 16*grid*grid]: position matters
    w2 = g.randn("proj.weight", (16 * grid * grid, 512), 1.0 / np.sqrt(16 * grid * grid))
    b2 = g.randn("proj.bias", (512,), 0.01)
    g.nodes.append(helper.make_node("Add", [g.op("MatMul", [x, w2]), b2], ["683"], name="683"))
    kind = "arcface" if size == 112 else "face-recognizer-bad"
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.seed": str(seed),
            "clipfn.input_size": str(size), "clipfn.embedding_dim": "512", "clipfn.mean": "127.5",
            "clipfn.std": "127.5"}
    model = onnx_model(g, [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["N", 3, size, size])],
                       [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["N", 512])],
                       f"clipfn_{kind}".replace("-", "_"), meta)
    return model, learned_params(g)


def build_file(kind, seed):
    """The bad models: (model, params)."""
    if kind == "face-detector-bad":
        return build_detector("scrfd", seed, kps_strides=(8,))
    return build_recognizer(seed, size=96)


def write_face_folder(kind, folder, seed):
    """folder/detection/model.onnx + folder/recognition/model.onnx. Returns ([paths], {part: params})."""
    fmt, drawn = FACE_FOLDERS[kind]
    det, det_params = build_yolov5_face_drawn(seed) if fmt == "yolov5-face" else build_detector(fmt, seed, drawn=drawn)
    rec, rec_params = build_recognizer(seed)
    paths = write_parts(folder, {"detection": det, "recognition": rec})
    return paths, {"detection": det_params, "recognition": rec_params}


def write_parts(folder, parts, full_check=True):
    """folder/PART/model.onnx for each {part: model}, written beside and renamed into place (readers
    never see half a folder). Returns [paths]."""
    import onnx

    tmp = folder + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    paths = []
    for part, model in parts.items():
        onnx.checker.check_model(model, full_check=full_check)
        os.makedirs(os.path.join(tmp, part))
        save(model, os.path.join(tmp, part, "model.onnx"))
        paths.append(os.path.join(folder, part, "model.onnx"))
    move_folder(tmp, folder)
    return paths


def check(path):
    """Runs the file in ONNX Runtime on a synthetic letterboxed canvas (smooth colour blobs on the
    top 400 rows, black below) or a batch of 2 crops; asserts names and shapes; returns a line."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    outs = sess.get_outputs()
    rng = np.random.default_rng(5)
    if inp.shape[0] == "N":  # a recognizer
        size = inp.shape[2]
        assert inp.name == "input.1" and inp.shape == ["N", 3, size, size], inp.shape
        x = rng.uniform(-1, 1, (2, 3, size, size)).astype(np.float32)
        t = time.perf_counter()
        (y,) = sess.run(None, {inp.name: x})
        dt = time.perf_counter() - t
        assert y.shape == (2, 512) and np.isfinite(y).all(), y.shape
        y = y / np.linalg.norm(y, axis=1, keepdims=True)
        return f"{inp.name} {inp.shape} -> {outs[0].name} {outs[0].shape}; batch of 2 in {dt * 1000:.1f} ms, " \
               f"cos(y0, y1) = {float(y[0] @ y[1]):.3f}"
    assert inp.shape == [1, 3, CANVAS, CANVAS], inp.shape
    small = rng.uniform(0, 255, (3, 10, 16))  # blobs: a 10x16 grid, upsampled 40x
    img = np.zeros((3, CANVAS, CANVAS), np.float32)
    img[:, :400] = np.repeat(np.repeat(small, 40, axis=1), 40, axis=2)
    yolo = len(outs) == 1  # YOLOv5-face: RGB / 255
    x = (img - 127.5) / 128 if inp.name == "input.1" else img / 255 if yolo else img
    t = time.perf_counter()
    ys = sess.run(None, {inp.name: x[None].astype(np.float32)})
    dt = time.perf_counter() - t
    for o, y in zip(outs, ys):
        assert list(y.shape) == o.shape and np.isfinite(y).all(), (o.name, y.shape, o.shape)
    return f"{inp.name} {inp.shape} -> {len(outs)} outputs " \
           f"{', '.join(f'{o.name} {o.shape}' for o in outs)}; one canvas in {dt * 1000:.1f} ms"
