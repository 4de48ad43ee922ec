#!/usr/bin/env python3
"""Photos drawn for the YOLO-format object tests, with what objects-yolo-drawn must find in each
(make_models.py --kind objects-yolo-drawn; tools/models/objects.py says how it finds a square: 5 px
cells of the 640 canvas, scored by their mean colour, boxed by the run of cells of their colour).

  draw_objects.py --out DIR [--check] [--model FOLDER]
      writes the PNGs and DIR/expected.json; --check runs FOLDER/model.onnx (default
      .cache/models/objects-yolo-drawn) on every photo with the post-processing below (NumPy +
      ONNX Runtime) and asserts that it finds exactly what expected.json says.

Every square's edges fall on cell borders of the letterboxed canvas, so its box is exact: the
photo's square, [x, y, w, h] in its pixels, within TOLERANCE_PX.

  objects-landscape.png  1000 x 600, white: red square 250 px, blue square 125 px, a yellow square
                         (scores 0: not a class); letterboxed top and bottom (r 0.64, top 128)
  objects-portrait.png   601 x 1000, grey 128: green square 250 px, dull red square 125 px;
                         letterboxed left and right with an odd padding (new width 385, left 127,
                         right 128: ultralytics' round(dw -/+ 0.1))
  objects-empty.png      800 x 600, light grey with yellow, cyan, magenta, black and white squares:
                         no object
  objects-noise.png      640 x 640 (no resize, no padding): 128 x 128 cells of 5 px, each one of six
                         saturated colours (3 classes x 2 shades) unlike its left and upper
                         neighbours: 16,384 detections, every box one cell (5 x 5 px)

expected.json:
  {"classes": ["red", "green", "blue"], "min_score": 0.25, "nms_iou": 0.7, "tolerance_px": 2,
   "photos": [{"file": NAME, "width": W, "height": H,
               "letterbox": {"scale": r, "width": new_w, "height": new_h, "left": l, "top": t},
               "count": n,
               "objects": [{"label": "red", "class": 0, "box": [x, y, w, h], "score": s}, ...] | null},
              ...]}
  objects by descending score; the noise photo's "objects" is null (its count says how many).
Post-processing (what clipfn implements): per anchor the best class and its score; keep
score >= min_score; class-aware greedy NMS at nms_iou; boxes mapped back through the letterbox
((x - left) / r, (y - top) / r) and clipped to the photo.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models.objects import CANVAS, CELL, CLASSES, GRID, MIN_SCORE, NMS_IOU, decode, letterbox  # noqa: E402
from models.files import MODELS_DIR  # noqa: E402

TOLERANCE_PX = 2
SCORE_TOLERANCE = 0.02
NOISE_SEED = 20240611
# (file, size, background, [(colour, x, y, side)]): squares of a class colour are expected objects
LANDSCAPE = ("objects-landscape.png", (1000, 600), (255, 255, 255),
             [((255, 0, 0), 125, 50, 250), ((30, 30, 220), 625, 300, 125), ((255, 255, 0), 375, 425, 125)])
PORTRAIT = ("objects-portrait.png", (601, 1000), (128, 128, 128),
            [((0, 200, 0), 200, 375, 250), ((220, 40, 40), 75, 750, 125)])
EMPTY = ("objects-empty.png", (800, 600), (200, 200, 200),
         [((255, 255, 0), 50, 50, 150), ((0, 255, 255), 250, 100, 120), ((255, 0, 255), 450, 200, 200),
          ((0, 0, 0), 100, 350, 100), ((255, 255, 255), 600, 450, 100)])
NOISE = "objects-noise.png"
# the noise's six colours: two shades of each class, shades 85 apart (over the model's LINK)
PALETTE = [(255, 0, 0), (170, 0, 0), (0, 255, 0), (0, 170, 0), (0, 0, 255), (0, 0, 170)]


def colour_score(c):
    """(class, score) of a flat colour, as the model scores a cell: best of clip(c_k - max(others))."""
    v = np.array(c, np.float32) / 255
    s = [float(np.clip(v[k] - max(np.delete(v, k)), 0, 1)) for k in range(3)]
    k = int(np.argmax(s))
    return k, s[k]


def letterbox_of(w, h):
    r = min(CANVAS / h, CANVAS / w)
    nw, nh = int(round(w * r)), int(round(h * r))
    return {"scale": r, "width": nw, "height": nh, "left": int(round((CANVAS - nw) / 2 - 0.1)),
            "top": int(round((CANVAS - nh) / 2 - 0.1))}


def draw_squares(out, name, size, background, squares):
    img = Image.new("RGB", size, background)
    d = ImageDraw.Draw(img)
    lb = letterbox_of(*size)
    objects = []
    for colour, x, y, side in squares:
        d.rectangle([x, y, x + side - 1, y + side - 1], fill=colour)
        k, score = colour_score(colour)
        if score < MIN_SCORE:
            continue
        for v in (lb["left"] + x * lb["scale"], lb["left"] + (x + side) * lb["scale"],
                  lb["top"] + y * lb["scale"], lb["top"] + (y + side) * lb["scale"]):
            assert abs(v / CELL - round(v / CELL)) < 1e-6, (name, colour, v)  # on a cell border
        objects.append({"label": CLASSES[k], "class": k, "box": [x, y, side, side], "score": round(score, 4)})
    img.save(os.path.join(out, name))
    objects.sort(key=lambda o: -o["score"])
    return {"file": name, "width": size[0], "height": size[1], "letterbox": lb, "count": len(objects),
            "objects": objects}


def draw_noise(out):
    rng = np.random.default_rng(NOISE_SEED)
    idx = np.zeros((GRID, GRID), np.int64)
    for i in range(GRID):
        for j in range(GRID):
            taken = {idx[i, j - 1] if j else -1, idx[i - 1, j] if i else -1}
            idx[i, j] = rng.choice([p for p in range(len(PALETTE)) if p not in taken])
    cells = np.array(PALETTE, np.uint8)[idx]
    img = np.repeat(np.repeat(cells, CELL, axis=0), CELL, axis=1)
    Image.fromarray(img).save(os.path.join(out, NOISE))
    return {"file": NOISE, "width": CANVAS, "height": CANVAS, "letterbox": letterbox_of(CANVAS, CANVAS),
            "count": GRID * GRID, "objects": None}


def check(out, expected, model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(model, "model.onnx"), opts, providers=["CPUExecutionProvider"])
    with open(os.path.join(model, "classes.txt"), encoding="utf-8") as f:
        classes = f.read().split()
    assert classes == expected["classes"], classes
    for photo in expected["photos"]:
        rgb = np.asarray(Image.open(os.path.join(out, photo["file"])).convert("RGB"))
        canvas, r, left, top = letterbox(rgb)
        lb = photo["letterbox"]
        assert (r, left, top) == (lb["scale"], lb["left"], lb["top"]), (photo["file"], r, left, top)
        x = (canvas.transpose(2, 0, 1)[None] / 255).astype(np.float32)
        t = time.perf_counter()
        (y,) = sess.run(None, {"images": x})
        dt = time.perf_counter() - t
        dets = decode(y[0], r, left, top, photo["width"], photo["height"], expected["min_score"],
                      expected["nms_iou"])
        assert len(dets) == photo["count"], (photo["file"], len(dets), photo["count"])
        worst_px = worst_score = 0.0
        if photo["objects"] is None:  # the noise: every box one cell
            for _, _, b in dets:
                assert np.allclose(b[2:], [CELL / r] * 2, atol=1e-3), b
        else:
            for (k, s, b), want in zip(dets, photo["objects"]):
                assert CLASSES[k] == want["label"] and k == want["class"], (photo["file"], k, want)
                worst_px = max(worst_px, float(np.abs(np.array(b) - want["box"]).max()))
                worst_score = max(worst_score, abs(s - want["score"]))
            assert worst_px <= expected["tolerance_px"] and worst_score <= SCORE_TOLERANCE, \
                (photo["file"], worst_px, worst_score, dets)
        print(f"draw_objects --check: {photo['file']} ({photo['width']} x {photo['height']}): {len(dets)} "
              f"detections as expected (boxes within {worst_px:.2f} px, scores within {worst_score:.4f}); "
              f"{dt * 1000:.0f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--check", action="store_true", help="run the model on every photo and compare")
    ap.add_argument("--model", default=os.path.join(MODELS_DIR, "objects-yolo-drawn"),
                    help="objects-yolo-drawn's folder (model.onnx + classes.txt)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    photos = [draw_squares(a.out, *p) for p in (LANDSCAPE, PORTRAIT, EMPTY)] + [draw_noise(a.out)]
    expected = {"classes": CLASSES, "min_score": MIN_SCORE, "nms_iou": NMS_IOU, "tolerance_px": TOLERANCE_PX,
                "photos": photos}
    path = os.path.join(a.out, "expected.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    if a.check:
        check(a.out, expected, a.model)
    os.replace(path + ".tmp", path)  # only once checked: a stamp-less reader never sees unchecked answers
    print(f"draw_objects: {len(photos)} photos and {path}")


if __name__ == "__main__":
    sys.exit(main())
