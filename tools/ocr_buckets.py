#!/usr/bin/env python3
"""What padding OCR inputs to a few declared shapes costs (the evidence behind clipfn's OCR shape
buckets): on a GPU each new input shape costs cuDNN a search, so the towers run a small set of
shapes, and this measures, with RapidOCR 1.4.4's own models and post-processing (run it with the
`.cache/venv-rapidocr` python, CLIPFN_TEST_OCR_PYTHON), how far the answers move.

1. Detector. Each photo's view sized as clipfn sizes it (src/preprocess/ocr.rs: short side down to
   736, long side at most 4096, each side rounded to a multiple of 32), run as is, against the same
   view placed top-left in a bucket (short side 736; long side the smallest of DETECTOR_SIDES that
   holds it), the rest filled with 0 in normalised space (grey, pixel 127.5) or with -1 (black),
   the probability map cropped back to the view before DB post-processing. Per photo: boxes found,
   the largest corner move (in view pixels and in photo pixels) and box-score move among matched
   boxes, and the largest probability change inside the view.

2. Recognizer. Every line the detector finds in the natural view, cut and turned by RapidOCR
   (`get_crop_img_list`, then its classifier), read at its own width (clipfn's per-line rule:
   ceil(48 w / h), at most 2560, padded with 0 in normalised space to the next multiple of 8, at
   least 320) against the same line padded to the narrowest width of each candidate set that holds
   it. Per set: lines whose text changes, largest and mean score move; the same with the CTC
   decode reading only the first ceil(w / 8) + 1 time steps (the padding's steps dropped); and
   each line alone against the same line in a batch of 4 rows of one width (float noise only?).
   RapidOCR's own reading (one line a batch, its squeeze-to-int width) is shown for context, and
   each set against it on tests/it/ocr.rs's parity photos. Last, a sweep: for each line wider than
   320, the least padding past its own width that changes its text or moves its score.

  ocr_buckets.py [--model FOLDER] [--verbose] [PHOTO_OR_FOLDER...]

Without paths it reads every photo in CLIPFN_TEST_OCR_PHOTOS (the folder tests/it/ocr.rs uses); paths
not set in the environment are taken from .cache/clipfn.env (tools/setup.sh). Prints tables and the
choice: the fewest widths that change no line's text and move no score by more than
SCORE_TOLERANCE, and the detector padding that moves no box by more than BOX_TOLERANCE px (view)
nor any box score by more than SCORE_TOLERANCE.
"""

import argparse
import math
import os
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps
from rapidocr_onnxruntime import RapidOCR

REPO = Path(__file__).resolve().parent.parent

RESOLUTION = 736
MAX_VIEW_SIDE = 4096
DETECTOR_SIDES = [736, 928, 992, 1088, 1312, 1472, 1600, 2048, 2560, 3200, 4096]

LINE_HEIGHT = 48
MAX_LINE_WIDTH = 2560
MIN_LINE_WIDTH = 320
WIDTH_SETS = {
    "W1 x1.33": [320, 424, 568, 760, 1008, 1344, 1792, 2392, 2560],
    "W2 x1.25": [320, 400, 496, 624, 784, 976, 1224, 1528, 1912, 2392, 2560],
    "W3 x1.4": [320, 448, 624, 880, 1232, 1720, 2560],
    "W4 x1.5": [320, 480, 720, 1080, 1616, 2560],
}
BATCH = 4
# The detector's padding: a value in normalised space (0 = grey 127.5, -1 = black), or the view's
# last row and column repeated ("edge").
FILLS = ["0", "-1", "edge"]
# The probability map's change is also shown this far (view px) and more from the padded edges.
MAP_MARGIN = 64
# How far past a line's own width the padding sweep goes (a fraction of that width).
PADDING_REACH = 0.5
# tests/it/ocr.rs's PHOTOS: the photos its parity test reads with RapidOCR.
PARITY_PHOTOS = {"sign.jpg", "colours.png", "tilt.jpg", "upside.jpg", "big.jpg", "exif.jpg", "page.png", "notext.jpg"}

SCORE_TOLERANCE = 0.005
BOX_TOLERANCE = 1
PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp"}


def setting(name):
    """An environment variable, else its line in .cache/clipfn.env."""
    if os.environ.get(name):
        return os.environ[name]
    env = REPO / ".cache" / "clipfn.env"
    for line in env.read_text().splitlines() if env.exists() else []:
        key, _, value = line.partition("=")
        if key.strip() == name:
            return value.strip()
    raise SystemExit(f"{name} is not set (nor in {env})")


def photo_paths(args):
    paths = []
    for given in args or [setting("CLIPFN_TEST_OCR_PHOTOS")]:
        given = Path(given)
        found = sorted(given.iterdir()) if given.is_dir() else [given]
        paths += [p for p in found if p.suffix.lower() in PHOTO_SUFFIXES]
    return paths


def upright_bgr(path):
    """The photo with its EXIF orientation applied, as RapidOCR's BGR array (tools/ocr_reference.py)."""
    image = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
    return np.ascontiguousarray(np.asarray(image)[:, :, ::-1])


def normalised(bgr):
    """(p / 255 - 0.5) / 0.5, channels first: the detector's and the recognizer's input."""
    return ((bgr.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


# ---------------------------------------------------------------------------------------------
# Detector


def view_size(width, height):
    """clipfn's view_size (src/preprocess/ocr.rs)."""
    ratio = min(RESOLUTION / min(width, height), MAX_VIEW_SIDE / max(width, height), 1.0)
    side = lambda s: max(32, round(math.trunc(s * ratio) / 32) * 32)
    return side(width), side(height)


def detector_bucket(width, height):
    """The short side padded to 736, the long side to the narrowest of DETECTOR_SIDES that holds it."""
    long_side = next(s for s in DETECTOR_SIDES if s >= max(width, height))
    short_side = max(RESOLUTION, min(width, height))
    return (long_side, short_side) if width >= height else (short_side, long_side)


def detect(engine, x, view_hw, photo_hw):
    """DB post-processing of the map for `x`, cropped to the view: boxes (in view and in photo
    pixels, RapidOCR's filtering) with their scores, and the map itself."""
    det = engine.text_det
    pred = det.infer(x[None])[0][:, :, : view_hw[0], : view_hw[1]]
    found = {}
    for name, shape in (("view", view_hw), ("photo", photo_hw)):
        boxes, scores = det.postprocess_op(pred, shape)
        kept = []
        for box, score in zip(boxes, scores):
            one = det.filter_tag_det_res(np.array([box]), shape)
            if len(one):
                kept.append((one[0].astype(np.float64), float(score)))
        found[name] = kept
    return found, pred[0, 0]


def match(before, after):
    """Pairs each box of `before` with the nearest unused box of `after` (by its largest corner
    move): [(box before, box after, corner move, score move)], and how many boxes of either side
    are left unmatched."""
    pairs, free = [], list(range(len(after)))
    for box, score in before:
        if not free:
            break
        moves = [np.abs(box - after[j][0]).max() for j in free]
        k = int(np.argmin(moves))
        pairs.append(((box, score), after[free[k]], moves[k], abs(score - after[free[k]][1])))
        free.pop(k)
    return pairs, len(before) - len(pairs) + len(free)


def measure_detector(engine, photos):
    rows = []
    for path, bgr in photos:
        h, w = bgr.shape[:2]
        vw, vh = view_size(w, h)
        view = cv2.resize(bgr, (vw, vh))
        x = normalised(view)
        natural, natural_map = detect(engine, x, (vh, vw), (h, w))
        bw, bh = detector_bucket(vw, vh)
        row = {"photo": path.name, "view": (vw, vh), "bucket": (bw, bh), "boxes": len(natural["view"])}
        for fill in FILLS:
            pad = ((0, 0), (0, bh - vh), (0, bw - vw))
            padded = np.pad(x, pad, mode="edge") if fill == "edge" else np.pad(x, pad, constant_values=float(fill))
            found, pad_map = detect(engine, padded, (vh, vw), (h, w))
            view_pairs, view_odd = match(natural["view"], found["view"])
            photo_pairs, photo_odd = match(natural["photo"], found["photo"])
            far = np.abs(pad_map - natural_map)[: vh - MAP_MARGIN if bh > vh else vh, : vw - MAP_MARGIN if bw > vw else vw]
            row[fill] = {
                "boxes": len(found["view"]),
                "unmatched": max(view_odd, photo_odd),
                "view_px": max((p[2] for p in view_pairs), default=0.0),
                "photo_px": max((p[2] for p in photo_pairs), default=0.0),
                "score": max((p[3] for p in photo_pairs), default=0.0),
                "map": float(np.abs(pad_map - natural_map).max()),
                "far": float(far.max()) if far.size else 0.0,
                "moved": [(b, a) for b, a, move, score in photo_pairs
                          if move > BOX_TOLERANCE or score > SCORE_TOLERANCE],
            }
        rows.append((row, natural["photo"]))
    return rows


# ---------------------------------------------------------------------------------------------
# Recognizer


class Line:
    def __init__(self, photo, index, crop):
        self.photo, self.index, self.crop = photo, index, crop
        h, w = crop.shape[:2]
        self.wanted = min(MAX_LINE_WIDTH, max(1, math.ceil(LINE_HEIGHT * w / h)))
        self.own = max(MIN_LINE_WIDTH, -(-self.wanted // 8) * 8)
        self.x = normalised(cv2.resize(crop, (self.wanted, LINE_HEIGHT)))
        self.steps = {}  # input width -> the recognizer's output, [T, classes]

    def padded(self, width):
        row = np.zeros((3, LINE_HEIGHT, width), dtype=np.float32)
        row[:, :, : self.wanted] = self.x
        return row

    def read(self, engine, width):
        if width not in self.steps:
            self.steps[width] = engine.text_rec.session(self.padded(width)[None])[0][0]
        return self.steps[width]


def decode(engine, steps, keep=None):
    """RapidOCR's CTC decode of `steps` ([T, classes]), of its first `keep` steps when given."""
    text, score = engine.text_rec.postprocess_op(steps[None, :keep])[0]
    return text, float(score)


def lines_of(engine, photos, detections):
    """Each photo's lines as RapidOCR cuts them from the full-size photo: its reading order, its
    perspective crop, its classifier's half turn."""
    lines = []
    for (path, bgr), (_, boxes) in zip(photos, detections):
        if not boxes:
            continue
        ordered = engine.sorted_boxes(np.array([b for b, _ in boxes], dtype=np.float32))
        crops = engine.get_crop_img_list(bgr, ordered)
        crops, _, _ = engine.text_cls(crops)
        lines += [Line(path.name, i, crop) for i, crop in enumerate(crops)]
    return lines


def readings(engine, lines):
    """Every line's (text, score) under each way of reading it, by name: "own" (clipfn's 8 px rule),
    "RapidOCR" (its own recognizer, one line a batch), each width set, and each with the decode
    cut to the line's own steps ("... cut")."""
    cut = lambda line, width: decode(engine, line.read(engine, width), -(-line.wanted // 8) + 1)
    read = {
        "own": [decode(engine, line.read(engine, line.own)) for line in lines],
        "own cut": [cut(line, line.own) for line in lines],
        "RapidOCR": [(t, float(s)) for t, s in engine.text_rec([line.crop for line in lines])[0]],
    }
    for name, widths in WIDTH_SETS.items():
        bucket = [next(w for w in widths if w >= line.own) for line in lines]
        read[name] = [decode(engine, line.read(engine, w)) for line, w in zip(lines, bucket)]
        read[name + " cut"] = [cut(line, w) for line, w in zip(lines, bucket)]
    return read


def compare(lines, before, after, only=None):
    """How `after` moves from `before` over the lines `only` keeps (all when None): the lines whose
    text changes, all |score moves| with their line, and those among lines kept at 0.5 (RapidOCR's
    text_score) either way."""
    picked = [(line, b, a) for line, b, a in zip(lines, before, after) if only is None or only(line)]
    kept = [(line, b, a) for line, b, a in picked if max(b[1], a[1]) >= 0.5]
    moves = sorted(((abs(a[1] - b[1]), line, b, a) for line, b, a in picked), key=lambda m: -m[0])
    return {
        "changed": [(line, b, a) for line, b, a in picked if a[0] != b[0]],
        "kept_changed": sum(a[0] != b[0] for _, b, a in kept),
        "kept_max": max((abs(a[1] - b[1]) for _, b, a in kept), default=0.0),
        "moves": moves,
        "max": moves[0][0] if moves else 0.0,
        "mean": float(np.mean([m[0] for m in moves])) if moves else 0.0,
        "over": sum(m[0] > SCORE_TOLERANCE for m in moves),
    }


def measure_batches(engine, lines, widths):
    """Each line alone against the same line first in a batch of BATCH rows of its bucket's width
    (the other rows: lines of that bucket, else copies): largest output change, text changes."""
    bucket = {line: next(w for w in widths if w >= line.own) for line in lines}
    largest, changed = 0.0, 0
    for line in lines:
        width = bucket[line]
        mates = [m for m in lines if m is not line and bucket[m] == width][: BATCH - 1]
        mates += [line] * (BATCH - 1 - len(mates))
        batch = np.stack([line.padded(width)] + [m.padded(width) for m in mates])
        together = engine.text_rec.session(batch)[0][0]
        alone = line.read(engine, width)
        largest = max(largest, float(np.abs(together - alone).max()))
        changed += decode(engine, together) != decode(engine, alone)
    return largest, changed


def measure_padding(engine, lines, base):
    """For each line wider than the narrowest input: the least padding past its own width (in
    steps of 8 px, up to PADDING_REACH of its width) that changes its text, and that moves its
    score by more than SCORE_TOLERANCE (None: none within reach)."""
    rows = []
    for line, (text, score) in zip(lines, base):
        if line.own <= MIN_LINE_WIDTH:
            continue
        first_text = first_score = None
        for width in range(line.own + 8, min(MAX_LINE_WIDTH, int(line.own * (1 + PADDING_REACH))) + 1, 8):
            t, s = decode(engine, line.read(engine, width))
            if first_text is None and t != text:
                first_text = width - line.own
            if first_score is None and abs(s - score) > SCORE_TOLERANCE:
                first_score = width - line.own
            if first_text is not None and first_score is not None:
                break
        rows.append((line, score, first_text, first_score))
    return rows


# ---------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="folder with detection/ classification/ recognition/")
    parser.add_argument("--verbose", action="store_true", help="every line's reading")
    parser.add_argument("photos", nargs="*")
    args = parser.parse_args()

    model = Path(args.model or setting("CLIPFN_TEST_OCR"))
    engine = RapidOCR(
        det_model_path=str(model / "detection" / "model.onnx"),
        cls_model_path=str(model / "classification" / "model.onnx"),
        rec_model_path=str(model / "recognition" / "model.onnx"),
        rec_batch_num=1,
        max_side_len=10**6,
    )
    photos = [(p, upright_bgr(p)) for p in photo_paths(args.photos)]

    print("## Detector: natural view vs padded to the bucket (map cropped back)\n")
    print("fill 0: grey (0 normalised); -1: black; edge: the view's last row and column repeated. px: the")
    print("largest corner move of a matched box. map: largest probability change in the view; far: more than")
    print(f"{MAP_MARGIN} px from the padded edges.\n")
    print(f"{'photo':14} {'view':>10} {'bucket':>10} {'boxes':>5} {'fill':>5} | {'boxes':>5} {'view px':>7} "
          f"{'photo px':>8} {'score':>7} {'map':>6} {'far':>6}")
    detections = measure_detector(engine, photos)
    worst = {fill: [0, 0.0, 0.0] for fill in FILLS}
    for row, _ in detections:
        for fill in FILLS:
            r, w = row[fill], worst[fill]
            boxes = f"{r['boxes']}" + (f" ({r['unmatched']} odd)" if r["unmatched"] else "")
            print(f"{row['photo']:14} {'{}x{}'.format(*row['view']):>10} {'{}x{}'.format(*row['bucket']):>10} {row['boxes']:>5} "
                  f"{fill:>5} | {boxes:>5} {r['view_px']:7.0f} {r['photo_px']:8.0f} {r['score']:7.4f} "
                  f"{r['map']:6.3f} {r['far']:6.3f}")
            w[0] += r["unmatched"] + abs(r["boxes"] - row["boxes"])
            w[1], w[2] = max(w[1], r["view_px"]), max(w[2], r["score"])
            if args.verbose:
                for (bb, bs), (ab, as_) in r["moved"]:
                    print(f"    {bb.astype(int).tolist()} {bs:.3f} -> {ab.astype(int).tolist()} {as_:.3f}")

    lines = lines_of(engine, photos, detections)
    read = readings(engine, lines)
    base = read["own"]
    own_widths = sorted({line.own for line in lines})
    print(f"\n## Recognizer: {len(lines)} lines ({sum(s >= 0.5 for _, s in base)} at score >= 0.5 at their "
          f"own width) from {len({l.photo for l in lines})} photos\n")
    print(f"Own widths (8 px rule): {len(own_widths)} distinct: {own_widths}")
    for name, widths in WIDTH_SETS.items():
        used = sorted({next(w for w in widths if w >= line.own) for line in lines})
        print(f"  {name}: the lines use {len(used)} of its {len(widths)} widths: {used}")
    if args.verbose:
        for line, (text, score) in zip(lines, base):
            print(f"  {line.photo}#{line.index} w={line.wanted}->{line.own} {score:.4f} {text!r}")
    parity = lambda line: line.photo in PARITY_PHOTOS
    print(f"\n'cut': the CTC decode reads only the first ceil(w/8)+1 steps. 'kept': lines scoring >= 0.5 "
          f"either way. 'parity': vs RapidOCR's own reading on tests/it/ocr.rs's parity photos "
          f"({sum(map(parity, lines))} lines; the test allows 0.02).\n")
    print(f"{'reading':14} {'widths':>6} | {'vs own: text':>12} {'(kept)':>6} {'max |ds|':>8} {'(kept)':>7} "
          f"{'mean |ds|':>9} {'>0.005':>6} | {'parity: text':>12} {'max |ds|':>8}")
    results, parities = {}, {}
    rapid = compare(lines, read["RapidOCR"], base, parity)
    print(f"{'own':14} {'-':>6} | {'':>12} {'':>6} {'':>8} {'':>7} {'':>9} {'':>6} | "
          f"{len(rapid['changed']):>12} {rapid['max']:8.4f}")
    for name, after in read.items():
        if name == "own":
            continue
        own, rapid = compare(lines, base, after), compare(lines, read["RapidOCR"], after, parity)
        results[name], parities[name] = own, rapid
        widths = WIDTH_SETS.get(name.removesuffix(" cut"))
        print(f"{name:14} {len(widths) if widths else '-':>6} | {len(own['changed']):>12} {own['kept_changed']:>6} "
              f"{own['max']:8.4f} {own['kept_max']:7.4f} {own['mean']:9.5f} {own['over']:>6} | "
              f"{len(rapid['changed']):>12} {rapid['max']:8.4f}")
    print("\nText changes against the own width (before | after), and the largest score moves:")
    for name, own in results.items():
        for line, (bt, bs), (at, as_) in own["changed"]:
            print(f"  {name}: {line.photo}#{line.index} (w {line.wanted}) {bt!r} {bs:.3f} | {at!r} {as_:.3f}")
        for move, line, (bt, bs), (at, as_) in own["moves"][:3]:
            if move > SCORE_TOLERANCE and at == bt:
                print(f"  {name}: {line.photo}#{line.index} (w {line.wanted}) {bt!r} {bs:.4f} -> {as_:.4f}")

    print("\nAgainst RapidOCR's own reading on the parity photos: text changes, and the largest score move:")
    for name, rapid in parities.items():
        for line, (bt, bs), (at, as_) in rapid["changed"]:
            print(f"  {name}: {line.photo}#{line.index} {bt!r} {bs:.3f} | {at!r} {as_:.3f}")
        move, line, (bt, bs), (at, as_) = rapid["moves"][0]
        print(f"  {name}: largest: {line.photo}#{line.index} {bt!r} {bs:.4f} -> {at!r} {as_:.4f}")

    print(f"\n## Batching: alone vs first of a batch of {BATCH} rows at the bucket's width\n")
    name = next(iter(WIDTH_SETS))
    largest, changed = measure_batches(engine, lines, WIDTH_SETS[name])
    print(f"{name} (every line at its bucket; on CPU this does not depend on the set): largest output "
          f"change {largest:.2e}, readings changed: {changed}")

    print(f"\n## Padding sweep: the least padding past the own width (8 px steps, up to "
          f"{PADDING_REACH:.0%}) that changes a line's text / moves its score > {SCORE_TOLERANCE}\n")
    swept = measure_padding(engine, lines, base)
    show = lambda px, line: "-" if px is None else f"{px} ({px / line.own:.0%})"
    for line, score, first_text, first_score in swept:
        print(f"  {line.photo + '#' + str(line.index):16} own {line.own:>4} score {score:.3f}: text {show(first_text, line):>10}, "
              f"score {show(first_score, line):>10}")
    for what, k in (("text", 2), ("score", 3)):
        hits = [r[k] for r in swept if r[k] is not None]
        print(f"  {what}: {len(hits)} of {len(swept)} lines move within reach; the least padding that moves one: "
              f"{min(hits) if hits else '-'} px")

    print("\n## Choice\n")
    for cut in ("", " cut"):
        fits = [name for name in WIDTH_SETS if not results[name + cut]["changed"]
                and results[name + cut]["max"] <= SCORE_TOLERANCE]
        if fits:
            best = min(fits, key=lambda name: len(WIDTH_SETS[name]))
            print(f"Recognizer{cut}: {best} ({len(WIDTH_SETS[best])} widths), max |ds| {results[best + cut]['max']:.4f}")
        else:
            print(f"Recognizer{cut}: no set keeps every line's text and every score within {SCORE_TOLERANCE}")
    full = [row for row, _ in detections if min(row["view"]) == RESOLUTION]
    for fill, (odd, px, score) in worst.items():
        ok = odd == 0 and px <= BOX_TOLERANCE and score <= SCORE_TOLERANCE
        print(f"Detector fill {fill}: boxes gained/lost/unmatched {odd}, largest move {px:.0f} view px, "
              f"score {score:.4f}: {'within' if ok else 'outside'} {BOX_TOLERANCE} px / {SCORE_TOLERANCE}")
        print(f"  on the {len(full)} photos whose view's short side is {RESOLUTION}: largest move "
              f"{max(r[fill]['view_px'] for r in full):.0f} view px, score {max(r[fill]['score'] for r in full):.4f}")


if __name__ == "__main__":
    main()
