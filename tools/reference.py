#!/usr/bin/env python3
"""Reference CLIP embeddings (Pillow preprocessing + ONNX Runtime on CPU).

This is the oracle the Rust service is compared against. Preprocessing follows
OpenAI CLIP's `_transform(224)` (torchvision Resize/CenterCrop on a PIL image),
plus EXIF orientation and RGB conversion first:

  1. ImageOps.exif_transpose            (CLIP itself ignores EXIF; we don't)
  2. .convert("RGB")                    (alpha is dropped, not composited;
                                         CLIP converts *after* the crop, which
                                         only differs for non-RGB modes)
  3. resize shortest side to 224, BICUBIC, Pillow antialias; the long side is
     int(224 * long / short) (truncated, as torchvision does)
  4. center crop 224: top = int(round((h - 224) / 2.0)), same for left.
     NB: Python's round() is round-half-to-EVEN (round(0.5) == 0, round(1.5) == 2),
     so a Rust port needs f64::round_ties_even, not f64::round.
  5. /255, normalise with CLIP mean/std, NCHW float32
  6. model -> image_embeds, then L2-normalise

Other CLIP-family models preprocess with other numbers (a model folder's
preprocessor_config.json); these flags replace CLIP's, step by step:
  --size N (step 3's 224), --crop N (step 4's; 0: no crop), --squash (step 3
  resizes both sides to N, aspect ratio lost, SigLIP-style), --resample
  bicubic|bilinear, --mean R,G,B and --std R,G,B (step 5).

Usage:
  reference.py --model M.onnx [PREPROCESSING FLAGS] PATH...
                                           JSON {"embeddings": {path: [512 floats]},
                                            "model": M, "errors": {path: msg}}
  reference.py --bench [PATH|DIR...]       Pillow-only photos/s (decode+resize+
                                            crop+normalise), 1 core, median of 3;
                                            default: $CLIPFN_PHOTOS_DIR/wallpapers
Unreadable files go to "errors" (exit status stays 0); truncated images are
errors, as in Pillow by default. HEIC/HEIF decode through pillow-heif.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from PIL import Image, ImageOps

try:  # HEIC/HEIF support (AVIF and WebP are built into Pillow's wheels)
    import pillow_heif

    pillow_heif.register_heif_opener()
except ImportError:
    pass

SIZE = 224
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)
BATCH = 16
RESAMPLE = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}


class Transform:
    """CLIP's preprocessing numbers, or another model's."""

    def __init__(self, size=SIZE, crop=None, squash=False, resample="bicubic", mean=MEAN, std=STD):
        self.size, self.crop, self.squash = size, size if crop is None else crop, squash
        self.resample = RESAMPLE[resample]
        self.mean = np.array(mean, np.float32).reshape(3, 1, 1)
        self.std = np.array(std, np.float32).reshape(3, 1, 1)


def preprocess(path, t=None, draft=False):
    """File -> float32 [3, crop, crop] (CLIP's [3, 224, 224] by default), normalised."""
    t = t or Transform()
    size = t.size
    with Image.open(path) as im:
        if draft:  # let libjpeg decode at 1/2..1/8 scale (not CLIP-exact)
            im.draft("RGB", (size, size))
        im = ImageOps.exif_transpose(im).convert("RGB")
    w, h = im.size
    if t.squash:
        nw, nh = size, size
    elif w <= h:
        nw, nh = size, int(size * h / w)
    else:
        nw, nh = int(size * w / h), size
    im = im.resize((nw, nh), t.resample)
    if t.crop:
        top = int(round((nh - t.crop) / 2.0))
        left = int(round((nw - t.crop) / 2.0))
        im = im.crop((left, top, left + t.crop, top + t.crop))
    x = np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return (x - t.mean) / t.std


def embed(model, paths, t=None):
    import onnxruntime as ort

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    inp, out = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    embeddings, errors = {}, {}
    ok = []
    for p in paths:
        try:
            ok.append((p, preprocess(p, t)))
        except Exception as e:  # noqa: BLE001 - report every decode failure
            errors[p] = f"{type(e).__name__}: {e}"
    for i in range(0, len(ok), BATCH):
        chunk = ok[i:i + BATCH]
        (y,) = sess.run([out], {inp: np.stack([x for _, x in chunk])})
        y = y / np.linalg.norm(y, axis=1, keepdims=True)
        for (p, _), v in zip(chunk, y):
            embeddings[p] = [float(f) for f in v]
    return {"embeddings": embeddings, "model": model, "errors": errors}


def expand(args):
    files = []
    for a in args:
        if os.path.isdir(a):
            for root, _, names in sorted(os.walk(a)):
                files += [os.path.join(root, n) for n in sorted(names)
                          if not n.startswith(".") and n.lower().endswith(
                              (".jpg", ".jpeg", ".png", ".webp", ".heic", ".avif"))]
        else:
            files.append(a)
    return files


def bench(paths):
    # One process, one thread: Pillow's decode/resize are single-threaded anyway.
    data = [open(p, "rb").read() for p in paths]  # keep disk I/O out of the timing
    import io

    def run(draft):
        t = time.perf_counter()
        for d in data:
            preprocess(io.BytesIO(d), draft=draft)
        return len(data) / (time.perf_counter() - t)

    res = {}
    for name, draft in (("exact", False), ("jpeg_draft", True)):
        runs = [run(draft) for _ in range(3)]
        res[name] = {"photos_per_s": round(statistics.median(runs), 2),
                     "runs": [round(r, 2) for r in runs]}
    mp = sum(Image.open(p).size[0] * Image.open(p).size[1] for p in paths) / len(paths) / 1e6
    print(json.dumps({"bench": "pillow-preprocess", "photos": len(paths),
                      "mean_megapixels": round(mp, 2), "threads": 1, **res}, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="ONNX model (pixel_values -> image_embeds)")
    ap.add_argument("--bench", action="store_true", help="time Pillow preprocessing only")
    ap.add_argument("--size", type=int, default=SIZE, help="resize: short side (or both, --squash)")
    ap.add_argument("--crop", type=int, help="center crop side (default: --size; 0: none)")
    ap.add_argument("--squash", action="store_true", help="resize both sides to --size")
    ap.add_argument("--resample", choices=sorted(RESAMPLE), default="bicubic")
    floats = lambda v: tuple(float(x) for x in v.split(","))  # noqa: E731
    ap.add_argument("--mean", type=floats, default=MEAN, help="R,G,B")
    ap.add_argument("--std", type=floats, default=STD, help="R,G,B")
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args()
    if a.bench:
        default = os.path.join(os.environ.get("CLIPFN_PHOTOS_DIR", ".cache/photos"), "wallpapers")
        paths = expand(a.paths or [default])
        if not paths:
            ap.error("no photos to benchmark")
        return bench(paths)
    if not a.model or not a.paths:
        ap.error("--model and at least one PATH are required")
    t = Transform(a.size, a.crop, a.squash, a.resample, a.mean, a.std)
    res = embed(a.model, a.paths, t)
    for p, e in res["errors"].items():
        print(f"reference.py: {p}: {e}", file=sys.stderr)
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    sys.exit(main())
