#!/usr/bin/env python3
"""Reference for clipfn's face detection + recognition (issue 29): numpy, ONNX Runtime, Pillow,
OpenCV, scikit-image and scikit-learn, written from the spec below (no InsightFace / OpenCV Zoo /
Immich code), the yardstick the Rust side is held to.

A face model folder holds detection/model.onnx (SCRFD: 9 outputs; YuNet: 12 outputs named cls_8 ...
kps_32; YOLOv5-face: one output [1, N, 16]) and recognition/model.onnx (ArcFace: [N,3,112,112] -> [N,512]; or dlib's ResNet as
tools/models/dlib_recognizer.py rebuilds it: [N,3,150,150] raw RGB 0-255 -> [N,128]).

  1. Photo: Pillow open, ImageOps.exif_transpose, RGB; W, H = the upright size.
  2. Letterbox: ratio = H / W; ratio > 1: new_h = 640, new_w = int(640 / ratio); else new_w = 640,
     new_h = int(640 * ratio). scale = new_h / H. Resize the whole photo to (new_w, new_h) with
     Pillow's BILINEAR (antialiased), paste at the top left of a black 640x640 RGB canvas;
     YOLOv5-face: paste at ((640 - new_w) // 2, (640 - new_h) // 2) of a grey (114) canvas
     (yolov5-face's letterbox with auto=False: the odd pixel of padding after), that offset taken
     off every position before the division by scale.
  3a. SCRFD: input RGB (p - 127.5) / 128, NCHW. Stride s in (8, 16, 32), index i: scores out[i],
     distances out[i + 3] * s, landmarks out[i + 6] * s ([1, n, k] or [n, k]); anchor centres
     (x * s, y * s), cells row-major, each centre twice (2 anchors). Keep score >= min_score;
     box (cx - d0, cy - d1, cx + d2, cy + d3), landmark j (cx + k[2j], cy + k[2j + 1]). Divide by
     scale; greedy NMS at IoU 0.4 over all strides, areas and intersections with +1 (InsightFace).
  3b. YuNet: input BGR raw 0-255, NCHW. Stride s, cell (r, c), idx = r * cols + c: score =
     sqrt(clamp(cls, 0, 1) * clamp(obj, 0, 1)); cx = (c + b0) * s, cy = (r + b1) * s,
     w = exp(b2) * s, h = exp(b3) * s, box (cx - w/2, cy - h/2, cx + w/2, cy + h/2); landmark j
     ((k[2j] + c) * s, (k[2j + 1] + r) * s). Keep score >= min_score, divide by scale, greedy NMS
     at IoU 0.3 with plain areas (w * h).
  3c. YOLOv5-face: input RGB p / 255, NCHW; rows of 16 (deepcam-cn/yolov5-face's Detect with
     export_cat): cx, cy, w, h, obj, landmarks x1, y1 .. x5, y5, cls, in canvas pixels. score =
     obj * cls; box (cx - w/2, cy - h/2, cx + w/2, cy + h/2). Keep score >= min_score, greedy NMS
     at IoU 0.5 (detect_face.py's iou_thres) with plain areas.
     NMS in all: candidates in descending score, ties in decode order (stride 8 first, then row
     order: a stable sort); a candidate is dropped when its IoU with a kept face is > the limit.
  4. Alignment: the 5 landmarks onto the recognizer's template by a similarity transform (Umeyama,
     with scale, no reflection: skimage's SimilarityTransform), cv2.warpAffine to the chip,
     INTER_LINEAR, BORDER_CONSTANT 0. ArcFace: its 112x112 template; dlib: 150x150, the template
     tools/dlib_template.py derives from dlib's mean face. Cut from the canvas (landmarks in canvas
     pixels) where the transform's scale is at most 1; the faces it would enlarge are cut from the
     photo decoded again (landmarks / scale x the decode's width / W): a JPEG at the coarsest DCT
     scale d of 1/8, 1/4, 1/2 whose short side keeps 90% of ceil(short side x the largest such
     scale x scale), else full size.
  5. Recognizer: ArcFace RGB (p - 127.5) / 127.5, dlib raw RGB, NCHW, all faces of a photo in one
     batch; L2-normalised.

Commands (JSON on stdout):
  detect FOLDER PHOTO... [--min-score S] [--draft] [--arcface-template]
      [{"width": W, "height": H, "faces": [{"box": [x1, y1, x2, y2], "score": s,
        "landmarks": [[x, y] x 5], "embedding": [512 floats]}, ...]}, ...]  one per photo, in
      order, faces by descending score, coordinates in pixels of the upright full-size photo.
  people [--eps 0.5] [--min-samples 2]
      stdin: {"embeddings": [[...], ...], "photos": [photo index, ...]} (every face of a request,
      in order) -> {"labels": [...]}: sklearn DBSCAN(eps, min_samples, metric="cosine") labels
      with no photo twice in a group (`people`: clipfn's cannot-link), -1 = noise.
"""
import argparse
import json
import sys

import numpy as np
from PIL import Image, ImageOps

CANVAS = 640
STRIDES = (8, 16, 32)
ARCFACE_TEMPLATE = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                             [41.5493, 92.3655], [70.7299, 92.2041]], np.float64)
SCRFD_NMS, YUNET_NMS, YOLO_NMS = 0.4, 0.3, 0.5
# each format's minimum score where none is asked: Immich's; detect_face.py's conf_thres
DEFAULT_MIN_SCORE = {"scrfd": 0.7, "yunet": 0.7, "yolov5-face": 0.6}


def dct_denom(width, height, short_side=224, long_side=CANVAS):
    """The JPEG DCT scale clipfn decodes at (src/decode/jpeg.rs): the coarsest of 1/8, 1/4, 1/2
    whose short side keeps 90% of `short_side` (CLIP's 224) and whose long side 90% of
    `long_side` (the canvas's; None: no long side asked)."""
    short, long_ = min(width, height), max(width, height)
    least = lambda target: -(-target * 9 // 10)
    covers = lambda d: -(-short // d) >= least(short_side) and (long_side is None or -(-long_ // d) >= least(long_side))
    return next((d for d in (8, 4, 2) if covers(d)), 1)


def load_photo(path, draft=False, denom=None):
    """(the upright RGB photo, its upright full size). With `draft`, a JPEG is decoded at clipfn's
    DCT scale for the canvas (Pillow's draft mode, libjpeg's scaling), as clipfn decodes it; with
    `denom`, a JPEG at 1/denom."""
    with Image.open(path) as im:
        full = im.size
        if im.format == "JPEG" and (draft or denom):
            d = denom or dct_denom(*im.size)
            im.draft("RGB", (-(-im.width // d), -(-im.height // d)))
        im.load()
        upright = ImageOps.exif_transpose(im).convert("RGB")
        turned = upright.size != im.size
        return upright, ((full[1], full[0]) if turned else full)


def letterbox(photo, full_size, centred=False):
    """(canvas uint8 [640, 640, 3] RGB, scale, offset [x, y]): the photo resized into the top-left
    corner of a black canvas, or `centred` on a grey one; the arithmetic on the upright full-size
    `full_size`, whatever size `photo` was decoded at."""
    w, h = full_size
    ratio = h / w
    if ratio > 1:
        new_h, new_w = CANVAS, int(CANVAS / ratio)
    else:
        new_w, new_h = CANVAS, int(CANVAS * ratio)
    scale = new_h / h
    x, y = ((CANVAS - new_w) // 2, (CANVAS - new_h) // 2) if centred else (0, 0)
    canvas = np.full((CANVAS, CANVAS, 3), 114 if centred else 0, np.uint8)
    canvas[y:y + new_h, x:x + new_w] = np.asarray(photo.resize((new_w, new_h), Image.BILINEAR))
    return canvas, scale, np.array([x, y], np.float64)


def session(path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def detector_format(sess):
    names = [o.name for o in sess.get_outputs()]
    if len(names) == 1 and sess.get_outputs()[0].shape[-1] == 16:
        return "yolov5-face"
    if len(names) == 9:
        return "scrfd"
    if len(names) == 12 and set(names) == {f"{k}_{s}" for k in ("cls", "obj", "bbox", "kps") for s in STRIDES}:
        return "yunet"
    raise SystemExit(f"detection model: {len(names)} outputs {names}: not SCRFD (9), YuNet (12) nor YOLOv5-face (1)")


def rows(a, k):
    """[1, n, k] or [n, k] -> float64 [n, k]."""
    a = np.asarray(a, np.float64)
    return a.reshape(-1, k)


def decode_scrfd(outs, min_score):
    """Candidates in decode order: (scores [m], boxes [m, 4], landmarks [m, 5, 2]), canvas pixels."""
    scores, boxes, kps = [], [], []
    for i, s in enumerate(STRIDES):
        n = CANVAS // s
        sc = rows(outs[i], 1)[:, 0]
        d = rows(outs[i + 3], 4) * s
        k = rows(outs[i + 6], 10) * s
        ys, xs = np.mgrid[0:n, 0:n]
        centres = np.repeat(np.stack([xs.ravel() * s, ys.ravel() * s], axis=1).astype(np.float64), 2, axis=0)
        assert len(sc) == len(centres) == len(d) == len(k), (s, len(sc), len(centres))
        keep = sc >= min_score
        c = centres[keep]
        scores.append(sc[keep])
        boxes.append(np.concatenate([c - d[keep][:, :2], c + d[keep][:, 2:]], axis=1))
        kps.append(c[:, None, :] + k[keep].reshape(-1, 5, 2))
    return np.concatenate(scores), np.concatenate(boxes), np.concatenate(kps)


def decode_yunet(named, min_score):
    scores, boxes, kps = [], [], []
    for s in STRIDES:
        n = CANVAS // s
        cls = np.clip(rows(named[f"cls_{s}"], 1)[:, 0], 0, 1)
        obj = np.clip(rows(named[f"obj_{s}"], 1)[:, 0], 0, 1)
        b = rows(named[f"bbox_{s}"], 4)
        k = rows(named[f"kps_{s}"], 10).reshape(-1, 5, 2)
        sc = np.sqrt(cls * obj)
        r, c = np.divmod(np.arange(n * n), n)
        cell = np.stack([c, r], axis=1).astype(np.float64)
        keep = sc >= min_score
        centre = (cell[keep] + b[keep, :2]) * s
        wh = np.exp(b[keep, 2:]) * s
        scores.append(sc[keep])
        boxes.append(np.concatenate([centre - wh / 2, centre + wh / 2], axis=1))
        kps.append((k[keep] + cell[keep][:, None, :]) * s)
    return np.concatenate(scores), np.concatenate(boxes), np.concatenate(kps)


def decode_yolov5_face(out, min_score):
    r = rows(out, 16)
    sc = r[:, 4] * r[:, 15]
    keep = sc >= min_score
    centre, half = r[keep, 0:2], r[keep, 2:4] / 2
    return sc[keep], np.concatenate([centre - half, centre + half], axis=1), r[keep, 5:15].reshape(-1, 5, 2)


def nms(scores, boxes, limit, plus_one):
    """Indices kept, best first: greedy, stable in decode order for equal scores."""
    one = 1.0 if plus_one else 0.0
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1 + one) * (y2 - y1 + one)
    kept = []
    while order.size:
        i, rest = order[0], order[1:]
        kept.append(int(i))
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]) + one)
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]) + one)
        inter = w * h
        iou = inter / (areas[i] + areas[rest] - inter)
        order = rest[iou <= limit]
    return kept


def chip_of(side):
    """The recognizer's chip by its input's side: (template, normalisation of the 0-255 pixels)."""
    if side == 112:
        return ARCFACE_TEMPLATE, lambda x: (x - 127.5) / 127.5
    if side == 150:
        from dlib_template import template

        return np.asarray(template(), np.float64), lambda x: x
    raise ValueError(f"a recognizer taking {side}x{side} faces is neither ArcFace's nor dlib's")


def similarity(landmarks, template):
    from skimage.transform import SimilarityTransform

    t = SimilarityTransform.from_estimate(landmarks, template)
    if not t:
        raise ValueError(f"no similarity transform for landmarks {landmarks.tolist()}")
    return t


def align(pixels, landmarks, template, side):
    """The side x side RGB crop: landmarks (pixels of `pixels`) onto the template."""
    import cv2

    return cv2.warpAffine(pixels, similarity(landmarks, template).params[:2], (side, side),
                          flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def finer_photo(path, full_size, enlargement):
    """The photo decoded again for faces the canvas would enlarge `enlargement` x (chip pixels
    per full-size pixel): a JPEG at the coarsest DCT scale keeping 90% of that over its short
    side, anything else at full size; as RGB uint8, with its pixels per full-size pixel."""
    short = min(full_size)
    target = int(np.ceil(short * enlargement))
    denom = 1 if target >= short else dct_denom(*full_size, short_side=target, long_side=None)
    photo, _ = load_photo(path, denom=denom)
    return np.asarray(photo), photo.width / full_size[0]


class Faces:
    def __init__(self, folder, arcface_template=False):
        self.det = session(f"{folder}/detection/model.onnx")
        self.rec = session(f"{folder}/recognition/model.onnx")
        self.format = detector_format(self.det)
        self.det_input = self.det.get_inputs()[0].name
        self.rec_input = self.rec.get_inputs()[0].name
        self.side = self.rec.get_inputs()[0].shape[2]
        self.template, self.normalize = chip_of(self.side)
        if arcface_template:  # a wrong chip on purpose, for tests that must tell chips apart
            self.template = ARCFACE_TEMPLATE * self.side / 112

    def detect_canvas(self, canvas, min_score):
        """Candidates after NMS, best first, in canvas pixels: (scores, boxes, landmarks)."""
        if self.format == "scrfd":
            x = ((canvas.astype(np.float32) - 127.5) / 128.0).transpose(2, 0, 1)[None]
            outs = self.det.run(None, {self.det_input: np.ascontiguousarray(x)})
            scores, boxes, kps = decode_scrfd(outs, min_score)
            limit, plus_one = SCRFD_NMS, True
        elif self.format == "yolov5-face":
            x = (canvas.astype(np.float32) / 255).transpose(2, 0, 1)[None]
            (out,) = self.det.run(None, {self.det_input: np.ascontiguousarray(x)})
            scores, boxes, kps = decode_yolov5_face(out, min_score)
            limit, plus_one = YOLO_NMS, False
        else:
            x = canvas[:, :, ::-1].astype(np.float32).transpose(2, 0, 1)[None]
            outs = self.det.run(None, {self.det_input: np.ascontiguousarray(x)})
            named = {o.name: v for o, v in zip(self.det.get_outputs(), outs)}
            scores, boxes, kps = decode_yunet(named, min_score)
            limit, plus_one = YUNET_NMS, False
        return scores, boxes, kps, limit, plus_one

    def embed(self, crops):
        x = self.normalize(np.stack(crops).astype(np.float32)).transpose(0, 3, 1, 2)
        (y,) = self.rec.run(None, {self.rec_input: np.ascontiguousarray(x)})
        return y / np.linalg.norm(y, axis=1, keepdims=True)

    def detect(self, path, min_score=None, draft=False):
        """The answer for the photo at `path` (see the module doc); boxes clipped to the photo.
        min_score: None, the format's default. draft: a JPEG decoded at clipfn's DCT scale."""
        photo, full_size = load_photo(path, draft)
        canvas, scale, offset = letterbox(photo, full_size, centred=self.format == "yolov5-face")
        w, h = full_size
        if min_score is None:
            min_score = DEFAULT_MIN_SCORE[self.format]
        scores, boxes, kps, limit, plus_one = self.detect_canvas(canvas, min_score)
        # on the photo's coordinates (the offset off and the division by scale first, as the spec says)
        boxes, points = (boxes - np.tile(offset, 2)) / scale, (kps - offset) / scale
        kept = nms(scores, boxes, limit, plus_one)
        faces = []
        if kept:
            grow = {i: similarity(kps[i], self.template).scale for i in kept}
            small = [i for i in kept if grow[i] > 1]
            if small:
                finer, finer_scale = finer_photo(path, full_size, max(grow[i] for i in small) * scale)
            emb = self.embed([align(finer, points[i] * finer_scale, self.template, self.side) if i in small
                              else align(canvas, kps[i], self.template, self.side) for i in kept])
            for j, i in enumerate(kept):
                box = np.clip(boxes[i], 0, [w, h, w, h])
                faces.append({"box": [float(v) for v in box], "score": float(scores[i]),
                              "landmarks": [[float(x), float(y)] for x, y in points[i]],
                              "embedding": [float(v) for v in emb[j]]})
        return {"width": w, "height": h, "faces": faces}


def people(embeddings, photos, eps, min_samples):
    """sklearn's DBSCAN labels, then the cannot-link on each cluster that holds two faces of one
    photo (src/album/clusters.rs): its core faces are joined again nearest link first, the links
    being each face's to its nearest core face of each other photo within eps, two parts only
    where they share no photo; then its other faces, nearest first, each join the part of its
    nearest linked core face that lacks its photo; parts of fewer than min_samples faces are
    noise. -1 = noise."""
    from sklearn.cluster import DBSCAN

    n = len(embeddings)
    if n == 0:
        return []
    x = np.asarray(embeddings, np.float64)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    fitted = DBSCAN(eps=eps, min_samples=min_samples, metric="cosine").fit(x)
    labels, core = fitted.labels_, set(int(i) for i in fitted.core_sample_indices_)
    distance = 1.0 - x @ x.T

    def nearest(i, cores):
        best = {}
        for c in cores:
            if photos[c] != photos[i] and distance[i, c] <= eps:
                best[photos[c]] = min(best.get(photos[c], (np.inf, c)), (float(distance[i, c]), c))
        return sorted(best.values())

    def apart(members):
        cores = [i for i in members if i in core]
        parent = {i: i for i in cores}
        held = {i: {photos[i]} for i in cores}

        def root(i):
            while parent[i] != i:
                i = parent[i]
            return i

        links = sorted({(d, min(i, c), max(i, c)) for i in cores for d, c in nearest(i, cores)})
        for _, a, b in links:
            ra, rb = root(a), root(b)
            if ra != rb and not held[ra] & held[rb]:
                keep, join = min(ra, rb), max(ra, rb)
                parent[join] = keep
                held[keep] |= held.pop(join)
        part = {i: root(i) for i in cores}
        others = [i for i in members if i not in core]
        others.sort(key=lambda i: (next(iter(nearest(i, cores)), (np.inf, 0))[0], i))
        for i in others:
            for _, c in nearest(i, cores):
                if photos[i] not in held[root(c)]:
                    held[root(c)].add(photos[i])
                    part[i] = root(c)
                    break
        parts = {}
        for i in sorted(part):
            parts.setdefault(part[i], []).append(i)
        return [p for p in parts.values() if len(p) >= max(min_samples, 1)]

    groups = []
    for k in range(labels.max() + 1):
        members = [i for i in range(n) if labels[i] == k]
        if len({photos[i] for i in members}) == len(members):
            groups.append(members)
        else:
            groups.extend(apart(members))
    out = [-1] * n
    # Numbered by their first face, as scikit-learn numbers its clusters.
    for k, group in enumerate(sorted(groups, key=min)):
        for i in group:
            out[i] = k
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("detect", help="faces of each photo")
    d.add_argument("folder")
    d.add_argument("photos", nargs="+")
    d.add_argument("--min-score", type=float, help="default: the format's (0.7 SCRFD and YuNet, 0.6 YOLOv5-face)")
    d.add_argument("--draft", action="store_true", help="decode JPEGs at clipfn's DCT scale")
    d.add_argument("--arcface-template", action="store_true",
                   help="align to ArcFace's template scaled to the recognizer's side, whatever its format")
    p = sub.add_parser("people", help="DBSCAN labels of the embeddings on stdin")
    p.add_argument("--eps", type=float, default=0.5)
    p.add_argument("--min-samples", type=int, default=2)
    a = ap.parse_args()
    if a.cmd == "detect":
        faces = Faces(a.folder, a.arcface_template)
        out = [faces.detect(path, a.min_score, a.draft) for path in a.photos]
    else:
        faces = json.load(sys.stdin)
        out = {"labels": people(faces["embeddings"], faces["photos"], a.eps, a.min_samples)}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    sys.exit(main())
