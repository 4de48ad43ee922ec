#!/usr/bin/env python3
"""Reference for clipfn's OCR (issue 36): RapidOCR 1.4.4's own pipeline (`rapidocr-onnxruntime`,
installed by tools/setup-ocr.sh in .cache/venv-rapidocr, away from the test venv's headless
OpenCV), run on the same photos with the detector sized as clipfn sizes it.

Four changes from RapidOCR's defaults, so that both read the same pixels:
  - the detector's input: the short side scaled down to RESOLUTION (736, never up), each side then
    rounded to a multiple of 32 (Immich's rule, clipfn's CLIPFN_OCR_RESOLUTION); RapidOCR's own
    `limit_type: min` scales the short side up to 736 and never down;
  - no 2,000 px cap on the photo (`max_side_len`): the lines are cut from the full-size photo;
  - the recognizer reads one line a batch (`--rec-batch 1`; RapidOCR's default is 6): RapidOCR pads
    a batch to its widest line, so a line's reading moves with its batch-mates (docs/ocr.md,
    "Widths"), where clipfn's never does;
  - clipfn's declared sizes (issue 47; CLIPFN_OCR_SIZES=declared, as on CUDA): the detector's
    view padded at the top-left with zeros (normalised) to the smallest of clipfn's declared view
    sizes that holds it, the map cropped back, and each line padded to the narrowest of clipfn's
    recognizer widths that holds it (src/model/ocr/detector.rs `view_sizes`, src/preprocess/ocr.rs
    `RECOGNIZER_WIDTHS`; a difference between the two copies shows as a failed tests/it/ocr.rs). Padding moves what PP-OCRv4 reads; `--own-widths` reads as
    RapidOCR does, each line at its own width and the view unpadded, the reference for clipfn's
    exact sizes, the CPU's default (docs/ocr.md, "Shapes").
Everything else is RapidOCR's defaults (DB post-process, classifier at 0.9, recognizer, text
score 0.5). EXIF orientation is applied first (RapidOCR's loader ignores it).

  ocr_reference.py [--resolution 736] [--rec-batch 1] [--own-widths] PHOTO...

prints JSON: one entry per photo, in order: {"width": W, "height": H, "lines": [{"box": [[x, y] x 4],
"text": "...", "score": s, "box_score": b}, ...]} in RapidOCR's reading order.
"""

import argparse
import json
import math

import numpy as np
from PIL import Image, ImageOps
from rapidocr_onnxruntime import RapidOCR
from rapidocr_onnxruntime.ch_ppocr_det import text_detect
from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess
from rapidocr_onnxruntime.ch_ppocr_rec.text_recognize import TextRecognizer

# clipfn's shapes (see the docstring).
MAX_VIEW_SIDE = 4096
ASPECTS = [1.0, 1.25, 4 / 3, 1.5, 1.6, 16 / 9, 2.0, 19.5 / 9]
SMALL = [(256, 256), (256, 512), (480, 480), (480, 960)]
RECOGNIZER_WIDTHS = [320, 400, 496, 624, 784, 976, 1224, 1528, 1912, 2560]


def view_size(width, height, resolution):
    """clipfn's `preprocess::view_size`: (width, height) of a photo's detector view."""
    ratio = min(resolution / min(width, height), MAX_VIEW_SIDE / max(width, height), 1.0)
    return tuple(max(32, round(int(side * ratio) / 32) * 32) for side in (width, height))


def view_sizes(resolution):
    """clipfn's declared (width, height) views, smallest first."""
    short = view_size(resolution, resolution, resolution)[0]
    longs = [view_size(int(short * aspect), short, resolution)[0] for aspect in ASPECTS]
    while longs[-1] * 4 // 3 < MAX_VIEW_SIDE:
        longs.append(math.ceil(longs[-1] * 4 // 3 / 32) * 32)
    longs.append(MAX_VIEW_SIDE)
    pairs = [(short, long) for long in longs] + SMALL
    sizes = {size for s, l in pairs for size in ((l, s), (s, l))}
    return sorted(sizes, key=lambda wh: (wh[0] * wh[1], wh[0], wh[1]))


def padded_views(detector, resolution):
    """The detector run on its view padded to the smallest declared size that holds it."""
    run, sizes = detector.infer, view_sizes(resolution)

    def infer(view):
        _, channels, height, width = view.shape
        padded_width, padded_height = next(((w, h) for w, h in sizes if w >= width and h >= height), (width, height))
        padded = np.zeros((1, channels, padded_height, padded_width), dtype=np.float32)
        padded[:, :, :height, :width] = view
        return [run(padded)[0][:, :, :height, :width]]

    detector.infer = infer


def padded_lines(img, max_wh_ratio):
    """TextRecognizer.resize_norm_img with each line padded to the narrowest recognizer width that
    holds it (clipfn's `recognizer_input`), whatever its batch-mates."""
    import cv2

    height, width = img.shape[:2]
    wanted = min(max(1, math.ceil(48 * width / height)), RECOGNIZER_WIDTHS[-1])
    padded_width = next(w for w in RECOGNIZER_WIDTHS if w >= wanted)
    line = cv2.resize(img, (wanted, 48)).astype("float32").transpose((2, 0, 1)) / 255
    padded = np.zeros((3, 48, padded_width), dtype=np.float32)
    padded[:, :, :wanted] = (line - 0.5) / 0.5
    return padded


def sized_down(resolution):
    """DetPreProcess.resize with clipfn's rule in place of RapidOCR's `limit_type`."""
    import cv2

    def resize(self, img):
        h, w = img.shape[:2]
        ratio = min(1.0, resolution / min(h, w))
        resize_h = max(32, int(round(int(h * ratio) / 32) * 32))
        resize_w = max(32, int(round(int(w * ratio) / 32) * 32))
        return cv2.resize(img, (resize_w, resize_h))

    return resize


def keeping_box_scores(detector):
    """Wraps the detector so that each box kept keeps its DB score: RapidOCR drops them."""
    post, filtered = detector.postprocess_op, detector.filter_tag_det_res
    scores = {}

    def postprocess(pred, shape):
        boxes, box_scores = post(pred, shape)
        kept = []
        for box, score in zip(boxes, box_scores):
            one = filtered(np.array([box]), shape)
            if len(one):
                kept.append(one[0])
                scores[tuple(np.round(one[0], 3).ravel())] = float(score)
        return np.array(kept), box_scores

    detector.postprocess_op = postprocess
    detector.filter_tag_det_res = lambda boxes, shape: boxes
    return scores


def upright_bgr(path):
    """The photo with its EXIF orientation applied (RapidOCR's loader ignores it), as the BGR array
    RapidOCR takes."""
    image = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
    return np.ascontiguousarray(np.asarray(image)[:, :, ::-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--resolution", type=int, default=736)
    parser.add_argument("--rec-batch", type=int, default=1)
    parser.add_argument("--own-widths", action="store_true", help="RapidOCR's own widths, no padded views")
    parser.add_argument("photos", nargs="+")
    args = parser.parse_args()

    DetPreProcess.resize = sized_down(args.resolution)
    if not args.own_widths:
        TextRecognizer.resize_norm_img = lambda self, img, max_wh_ratio: padded_lines(img, max_wh_ratio)
    engine = RapidOCR(max_side_len=10**6, rec_batch_num=args.rec_batch)
    scores = keeping_box_scores(engine.text_det)
    assert isinstance(engine.text_det, text_detect.TextDetector)
    if not args.own_widths:
        padded_views(engine.text_det, args.resolution)

    answers = []
    for path in args.photos:
        bgr = upright_bgr(path)
        scores.clear()
        result, _ = engine(bgr)
        lines = []
        for box, text, score in result or []:
            key = tuple(np.round(np.array(box, dtype=np.float32), 3).ravel())
            lines.append({"box": box, "text": text, "score": float(score), "box_score": scores.get(key)})
        answers.append({"width": bgr.shape[1], "height": bgr.shape[0], "lines": lines})
    print(json.dumps(answers))


if __name__ == "__main__":
    main()
