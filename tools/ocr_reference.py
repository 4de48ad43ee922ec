#!/usr/bin/env python3
"""Reference for clipfn's OCR (issue 36): RapidOCR 1.4.4's own pipeline (`rapidocr-onnxruntime`,
installed by tools/setup-ocr.sh in .cache/venv-rapidocr, away from the test venv's headless
OpenCV), run on the same photos with the detector sized as clipfn sizes it.

Three changes from RapidOCR's defaults, so that both read the same pixels:
  - the detector's input: the short side scaled down to RESOLUTION (736, never up), each side then
    rounded to a multiple of 32 (Immich's rule, clipfn's CLIPFN_OCR_RESOLUTION); RapidOCR's own
    `limit_type: min` scales the short side up to 736 and never down;
  - no 2,000 px cap on the photo (`max_side_len`): the lines are cut from the full-size photo;
  - the recognizer reads one line a batch (`--rec-batch 1`; RapidOCR's default is 6): RapidOCR pads
    a batch to its widest line, so a line's reading moves with its batch-mates (docs/ocr.md,
    "Widths"), where clipfn's never does.
Everything else is RapidOCR's defaults (DB post-process, classifier at 0.9, recognizer, text
score 0.5). EXIF orientation is applied first (RapidOCR's loader ignores it).

  ocr_reference.py [--resolution 736] [--rec-batch 1] PHOTO...

prints JSON: one entry per photo, in order: {"width": W, "height": H, "lines": [{"box": [[x, y] x 4],
"text": "...", "score": s, "box_score": b}, ...]} in RapidOCR's reading order.
"""

import argparse
import json

import numpy as np
from PIL import Image, ImageOps
from rapidocr_onnxruntime import RapidOCR
from rapidocr_onnxruntime.ch_ppocr_det import text_detect
from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess


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
    parser.add_argument("photos", nargs="+")
    args = parser.parse_args()

    DetPreProcess.resize = sized_down(args.resolution)
    engine = RapidOCR(max_side_len=10**6, rec_batch_num=args.rec_batch)
    scores = keeping_box_scores(engine.text_det)
    assert isinstance(engine.text_det, text_detect.TextDetector)

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
