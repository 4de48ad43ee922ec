#!/usr/bin/env python3
"""The converted CenterNet (ONNX) equals Human's own object detector (tfjs), raw and final.

Photos: scikit-image's chelsea (a cat), astronaut, coffee, rocket and camera, plus every .jpg /
.jpeg / .png under .cache/photos/wallpapers and .cache/photos/faces (or the --photos-dir folders
given), each decoded once here by Pillow (.convert("RGB"), no EXIF rotation) and handed to both
sides as the same raw RGB bytes, duplicates (same pixels) dropped.

  (a) raw: tools/objects/reference.cjs --mode raw resizes each photo as Human's
      src/object/centernet.ts does (tf.image.resizeBilinear to 512 x 512) and runs the tfjs graph
      model (tfjs-backend-cpu); this script's own resize (a NumPy copy of tfjs's CPU kernel,
      below) is compared with tfjs's 512 input, then the ONNX model runs on tfjs's input in ONNX
      Runtime (CPU) and each output is compared: max |onnx - tfjs| for keypoints and wh; for
      detections, over the rows both put at the same place with the same class (TopK may order
      near-equal low scores differently), and every row above Human's minConfidence must be at
      the same place.
  (b) final: reference.cjs --mode detect runs Human 3.3.6's own human.detect() (defaults:
      minConfidence 0.2, iouThreshold 0.4, maxDetected 10; frame cache off); this script runs
      its own resize -> ONNX -> Human's post-processing re-done in Python (human_objects, below)
      and pairs the objects: same class, IoU of the pixel boxes >= 0.9, |score difference| <=
      0.01, the same number of objects.

Prints a table; exits 1 on any failure. --bench N also times the ONNX model alone (ONNX Runtime
CPU, 1 and 2 intra-op threads, N runs each after 2 warm-ups, median ms per 512 x 512 image);
--bench-only does only that.

Usage: objects_parity.py [--model .cache/models/objects-centernet/model.onnx]
                         [--tfjs-model DIR] [--modules DIR] [--node node]
                         [--photos-dir DIR ...] [--no-skimage] [--bench N] [--json FILE]
"""
import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, ".cache/models/objects-centernet/model.onnx")
TFJS_MODEL = os.path.join(REPO, ".cache/node-objects/node_modules/@vladmandic/human/models")
MODULES = os.path.join(REPO, ".cache/node-objects/node_modules")
PHOTO_DIRS = [os.path.join(REPO, ".cache/photos/wallpapers"), os.path.join(REPO, ".cache/photos/faces")]
SKIMAGE = ["chelsea", "astronaut", "coffee", "rocket", "camera"]
SIZE = 512
# Human 3.3.6's src/config.ts defaults for `object`
MIN_CONFIDENCE, IOU_THRESHOLD, MAX_DETECTED = 0.2, 0.4, 10
TOL_INPUT, TOL_KEYPOINTS, TOL_WH, TOL_DET = 1e-3, 1e-4, 2e-2, 2e-2
MIN_IOU, TOL_SCORE = 0.9, 0.01


def resize_bilinear(img, out_h, out_w):
    """tfjs-backend-cpu's ResizeBilinear (align_corners=false, half_pixel_centers=false), the
    resize Human's centernet.ts does: source = dst * (in / out), floor / min(ceil, in - 1), lerp in
    x then y, in float64, stored as float32. img: (H, W, 3) numbers."""
    h, w = img.shape[:2]
    x = img.astype(np.float64)
    ys = (h / out_h) * np.arange(out_h)
    xs = (w / out_w) * np.arange(out_w)
    y0 = np.maximum(0, np.floor(ys)).astype(np.int64)
    x0 = np.maximum(0, np.floor(xs)).astype(np.int64)
    y1 = np.minimum(h - 1, np.ceil(ys)).astype(np.int64)
    x1 = np.minimum(w - 1, np.ceil(xs)).astype(np.int64)
    fy = (ys - y0)[:, None, None]
    fx = (xs - x0)[None, :, None]
    tl, tr = x[y0][:, x0], x[y0][:, x1]
    bl, br = x[y1][:, x0], x[y1][:, x1]
    top = tl + (tr - tl) * fx
    bottom = bl + (br - bl) * fx
    return (top + (bottom - top) * fy).astype(np.float32)


def iou_tfjs(a, b):
    """tfjs-core's intersectionOverUnion for two [y1, x1, y2, x2] boxes (float64 arithmetic)."""
    ya0, xa0, ya1, xa1 = min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])
    yb0, xb0, yb1, xb1 = min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
    area_a, area_b = (ya1 - ya0) * (xa1 - xa0), (yb1 - yb0) * (xb1 - xb0)
    if area_a <= 0 or area_b <= 0:
        return 0.0
    inter = max(min(ya1, yb1) - max(ya0, yb0), 0.0) * max(min(xa1, xb1) - max(xa0, xb0), 0.0)
    return inter / (area_a + area_b - inter)


def nms_tfjs(boxes, scores, max_out, iou_threshold, score_threshold):
    """tf.image.nonMaxSuppressionAsync = tfjs-core's nonMaxSuppressionV3Impl (soft-NMS sigma 0):
    candidates with score > score_threshold, highest score first (ties: lower index first); one is
    dropped when its IoU with an already kept box is >= iou_threshold; at most max_out kept."""
    max_out = min(max_out, len(scores))
    cand = [i for i in range(len(scores)) if float(scores[i]) > score_threshold]
    cand.sort(key=lambda i: (-float(scores[i]), i))
    keep = []
    for i in cand:
        if len(keep) >= max_out:
            break
        if all(iou_tfjs(boxes[i], boxes[j]) < iou_threshold for j in keep):
            keep.append(i)
    return keep


def human_objects(det, width, height, labels, size=SIZE):
    """Human 3.3.6's src/object/centernet.ts process() on `tower_0/detections` [1, 100, 6] (rows
    x1, y1, x2, y2 in the 512 x 512 input's pixels, score, class index): NMS over all classes on
    [y1, x1, y2, x2], then per kept row in NMS order: score truncated to 2 decimals, boxRaw =
    [x1 / 512, y1 / 512, x2 / 512 - x1 / 512, y2 / 512 - y1 / 512], box = trunc(boxRaw * [W, H,
    W, H]) in the photo's pixels, class = the column as is, label = labels[class]."""
    d = np.asarray(det, np.float32).reshape(-1, 6)
    boxes = d[:, [1, 0, 3, 2]].astype(np.float64)
    keep = nms_tfjs(boxes, d[:, 4], MAX_DETECTED, IOU_THRESHOLD, MIN_CONFIDENCE)
    out = []
    for i in keep:
        row = [float(v) for v in d[i]]
        if math.isnan(row[5]):
            continue
        x, y = row[0] / size, row[1] / size
        raw = [x, y, row[2] / size - x, row[3] / size - y]
        box = [math.trunc(raw[0] * width), math.trunc(raw[1] * height), math.trunc(raw[2] * width),
               math.trunc(raw[3] * height)]
        cls = int(row[5])
        out.append({"id": len(out), "score": math.trunc(100 * row[4]) / 100, "class": cls,
                    "label": labels[cls], "box": box, "boxRaw": raw})
    return out


def letterbox_objects(sess, img, labels):
    """Informational, not Human: the upstream repository's own preprocessing geometry (its
    face_detector.py preprocess: scale = min(512 / H, 512 / W), the photo resized by that scale and
    centred on a black 512 x 512 canvas) instead of Human's stretch to 512 x 512,
    with this script's tfjs-style resize and Human's thresholds and NMS; boxes mapped back by
    (v - offset) / scale, truncated as Human truncates."""
    h, w = img.shape[:2]
    scale = min(SIZE / h, SIZE / w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    dy, dx = (SIZE - nh) // 2, (SIZE - nw) // 2
    canvas = np.zeros((SIZE, SIZE, 3), np.float32)
    canvas[dy:dy + nh, dx:dx + nw] = resize_bilinear(img, nh, nw)
    d = sess.run(["tower_0/detections"], {"tower_0/images": canvas[None]})[0].reshape(-1, 6)
    keep = nms_tfjs(d[:, [1, 0, 3, 2]].astype(np.float64), d[:, 4], MAX_DETECTED, IOU_THRESHOLD, MIN_CONFIDENCE)
    out = []
    for i in keep:
        x1, y1, x2, y2, score, cls = (float(v) for v in d[i])
        x1, x2 = (x1 - dx) / scale, (x2 - dx) / scale
        y1, y2 = (y1 - dy) / scale, (y2 - dy) / scale
        out.append({"score": math.trunc(100 * score) / 100, "class": int(cls), "label": labels[int(cls)],
                    "box": [math.trunc(x1), math.trunc(y1), math.trunc(x2 - x1), math.trunc(y2 - y1)]})
    return out


def iou_xywh(a, b):
    ax1, ay1, ax2, ay2 = a[0], a[1], a[0] + a[2], a[1] + a[3]
    bx1, by1, bx2, by2 = b[0], b[1], b[0] + b[2], b[1] + b[3]
    inter = max(0, min(ax2, bx2) - max(ax1, bx1)) * max(0, min(ay2, by2) - max(ay1, by1))
    union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union > 0 else 0.0


def match(ref, ours):
    """Pairs each reference object with an unused one of ours of the same class and the best IoU.
    Returns (pairs [(ref, ours, iou)], unmatched ref, unmatched ours)."""
    used, pairs, lost = set(), [], []
    for r in ref:
        best, best_iou = None, -1.0
        for j, o in enumerate(ours):
            if j in used or o["class"] != r["class"]:
                continue
            v = iou_xywh(r["box"], o["box"])
            if v > best_iou:
                best, best_iou = j, v
        if best is None:
            lost.append(r)
        else:
            used.add(best)
            pairs.append((r, ours[best], best_iou))
    return pairs, lost, [o for j, o in enumerate(ours) if j not in used]


def load_photos(dirs, use_skimage, names=None, who="objects_parity"):
    """[(name, uint8 (H, W, 3))], duplicates by pixels dropped; a photo is named `folder/file`, the
    folder by `names` where it has one there (tools/sensitive_parity.py shares this), and one that
    does not decode is skipped, saying so (`who`: the script, in the message)."""
    names = names or {}
    from PIL import Image

    out, seen = [], set()

    def add(name, img):
        img = np.ascontiguousarray(img[..., :3] if img.ndim == 3 else np.stack([img] * 3, -1), np.uint8)
        key = hashlib.sha256(img.tobytes() + str(img.shape).encode()).hexdigest()
        if key not in seen:
            seen.add(key)
            out.append((name, img))

    if use_skimage:
        import skimage.data

        for n in SKIMAGE:
            add(f"skimage/{n}", np.asarray(getattr(skimage.data, n)()))
    for d in dirs:
        if not os.path.isdir(d):
            print(f"{who}: no {d}, skipped", file=sys.stderr)
            continue
        for f in sorted(os.listdir(d)):
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                try:
                    with Image.open(os.path.join(d, f)) as im:
                        img = np.asarray(im.convert("RGB"))
                except OSError as e:  # tests/fixtures/truncated_jpeg.jpg
                    print(f"{who}: {f}: {e}, skipped", file=sys.stderr)
                    continue
                add(f"{names.get(d, os.path.basename(d))}/{f}", img)
    return out


def reference(mode, photos, tmp, a, out=None):
    manifest = []
    for i, (name, img) in enumerate(photos):
        path = os.path.join(tmp, f"{i}.rgb")
        if not os.path.exists(path):
            img.tofile(path)
        manifest.append({"name": name, "rgb": path, "width": img.shape[1], "height": img.shape[0]})
    mpath = os.path.join(tmp, "photos.json")
    with open(mpath, "w") as f:
        json.dump(manifest, f)
    cmd = [a.node, os.path.join(REPO, "tools/objects/reference.cjs"), "--model", a.tfjs_model, "--photos", mpath,
           "--mode", mode, "--modules", a.modules] + (["--out", out] if out else [])
    t = time.time()
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"objects_parity: reference.cjs --mode {mode} failed:\n{r.stderr[-4000:]}")
    print(f"objects_parity: reference.cjs --mode {mode}: {len(photos)} photos in {time.time() - t:.0f}s",
          file=sys.stderr)
    return json.loads(r.stdout)


def bench(model, runs):
    import onnxruntime as ort

    x = resize_bilinear(np.asarray(__import__("skimage.data").data.chelsea()), SIZE, SIZE)[None]
    res = {}
    for threads in (1, 2):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        feed = {s.get_inputs()[0].name: x}
        for _ in range(2):
            s.run(None, feed)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            s.run(None, feed)
            times.append(1000 * (time.perf_counter() - t))
        res[threads] = {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
                        "runs": runs}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--tfjs-model", default=TFJS_MODEL, help="the folder with centernet.json + .bin")
    ap.add_argument("--modules", default=MODULES)
    ap.add_argument("--node", default="node")
    ap.add_argument("--photos-dir", action="append", help=f"folders of photos (default: {PHOTO_DIRS})")
    ap.add_argument("--no-skimage", action="store_true")
    ap.add_argument("--bench", type=int, default=0, help="time the ONNX model: N runs per thread count")
    ap.add_argument("--bench-only", action="store_true", help="only the timing (--bench N, default 7)")
    ap.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads for the parity runs")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--letterbox", action="store_true",
                    help="also list what the ONNX model finds with the upstream repository's letterboxed input "
                         "(informational: not Human's preprocessing, not checked)")
    a = ap.parse_args()
    import onnxruntime as ort

    if a.bench_only:
        runs = a.bench or 7
        for t, b in bench(a.model, runs).items():
            print(f"ONNX Runtime {ort.__version__} CPU, {t} thread(s): median {b['median_ms']:.1f} ms per 512x512 image "
                  f"(min {b['min_ms']:.1f}, max {b['max_ms']:.1f}, {b['runs']} runs)")
        load = os.getloadavg()
        print(f"  load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
        return
    for p in (a.model, a.tfjs_model, a.modules):
        if not os.path.exists(p):
            sys.exit(f"objects_parity: no {p} (run tools/setup-objects.sh)")
    classes_path = os.path.join(os.path.dirname(a.model), "classes.txt")
    with open(classes_path, encoding="utf-8") as fh:
        labels = fh.read().splitlines()
    photos = load_photos(a.photos_dir or PHOTO_DIRS, not a.no_skimage)
    if not photos:
        sys.exit("objects_parity: no photos")
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]

    with tempfile.TemporaryDirectory(prefix="objects-parity-") as tmp:
        raw = reference("raw", photos, tmp, a, out=os.path.join(tmp, "raw"))
        det = reference("detect", photos, tmp, a)
        rows, failures = [], []
        for (name, img), r, h in zip(photos, raw["photos"], det["photos"]):
            assert r["name"] == name == h["name"]
            f = r["files"]

            def load(k, f=f):
                return np.fromfile(f[k]["file"], np.float32).reshape(f[k]["shape"])

            tf_in = load("input")
            ours_in = resize_bilinear(img, SIZE, SIZE)[None]
            out = dict(zip(names, sess.run(None, {"tower_0/images": tf_in})))
            row = {"photo": name, "size": f"{img.shape[1]}x{img.shape[0]}",
                   "input": float(np.abs(ours_in - tf_in).max())}
            for k in ("keypoints", "wh"):
                row[k] = float(np.abs(out[f"tower_0/{k}"] - load(k)).max())
            td, od = load("detections")[0], out["tower_0/detections"][0]
            same = (td[:, 5] == od[:, 5]) & (np.abs(td[:, :4] - od[:, :4]).max(1) <= 1.0)
            row["det_rows_same"] = int(same.sum())
            row["det"] = float(np.abs(td[same] - od[same]).max()) if same.any() else float("nan")
            strong = td[:, 4] > MIN_CONFIDENCE
            row["det_strong_same"] = bool(same[strong].all())
            # (b) final: ours end to end vs Human's own detect()
            ours_out = sess.run(["tower_0/detections"], {"tower_0/images": ours_in})[0]
            ours = human_objects(ours_out, img.shape[1], img.shape[0], labels)
            pairs, lost, extra = match(h["objects"], ours)
            row["human"] = len(h["objects"])
            row["onnx"] = len(ours)
            row["paired"] = sum(1 for r_, o, v in pairs if v >= MIN_IOU and abs(r_["score"] - o["score"]) <= TOL_SCORE)
            row["exact"] = sum(1 for r_, o, v in pairs if r_["box"] == o["box"] and r_["score"] == o["score"])
            row["min_iou"] = min((v for _, _, v in pairs), default=float("nan"))
            row["max_dscore"] = max((abs(r_["score"] - o["score"]) for r_, o, _ in pairs), default=float("nan"))
            row["objects"] = ", ".join(f"{o['label']} {o['score']:.2f}" for o in h["objects"])
            if a.letterbox:
                lb = letterbox_objects(sess, img, labels)
                row["letterbox"] = ", ".join(f"{o['label']} {o['score']:.2f}" for o in lb)
            bad = []
            if row["input"] > TOL_INPUT:
                bad.append(f"input {row['input']:.2g}")
            if row["keypoints"] > TOL_KEYPOINTS:
                bad.append(f"keypoints {row['keypoints']:.2g}")
            if row["wh"] > TOL_WH:
                bad.append(f"wh {row['wh']:.2g}")
            if not row["det_strong_same"] or not row["det"] <= TOL_DET:
                bad.append(f"detections {row['det']:.2g} (strong rows same: {row['det_strong_same']})")
            if lost or extra or row["paired"] != len(pairs):
                bad.append(f"objects: {len(lost)} of Human's unpaired, {len(extra)} extra, "
                           f"{len(pairs) - row['paired']} off")
            row["ok"] = not bad
            if bad:
                failures.append(f"{name}: " + "; ".join(bad))
            rows.append(row)

    print(f"\nONNX {os.path.relpath(a.model, REPO)} (ONNX Runtime {ort.__version__} CPU) vs Human {det['human']} "
          f"/ tfjs {raw['tfjs']} ({raw['backend']}); Human config {det['config']}")
    hdr = (f"{'photo':44} {'size':>9} {'input':>8} {'keypts':>8} {'wh':>8} {'det':>8} {'rows':>4} "
           f"{'H':>2} {'O':>2} {'pair':>4} {'exact':>5} {'minIoU':>6} {'dscore':>6}  objects (Human)")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['photo'][:44]:44} {r['size']:>9} {r['input']:8.1e} {r['keypoints']:8.1e} {r['wh']:8.1e} "
              f"{r['det']:8.1e} {r['det_rows_same']:4d} {r['human']:2d} {r['onnx']:2d} {r['paired']:4d} "
              f"{r['exact']:5d} {r['min_iou']:6.3f} {r['max_dscore']:6.3f}  {r['objects'] or '-'}"
              + ("" if r["ok"] else "  FAIL"))
        if a.letterbox:
            print(f"{'':44} {'':>9} letterboxed (upstream's geometry, not Human's): {r['letterbox'] or '-'}")
    n_obj = sum(r["human"] for r in rows)
    print(f"\n{len(rows)} photos, {n_obj} Human objects, {sum(r['paired'] for r in rows)} paired "
          f"(same class, IoU >= {MIN_IOU}, |dscore| <= {TOL_SCORE}), {sum(r['exact'] for r in rows)} identical; "
          f"max |d| input {max(r['input'] for r in rows):.2g}, keypoints {max(r['keypoints'] for r in rows):.2g}, "
          f"wh {max(r['wh'] for r in rows):.2g}, detections {np.nanmax([r['det'] for r in rows]):.2g} "
          f"(rows at the same place: min {min(r['det_rows_same'] for r in rows)}/100)")
    result = {"rows": rows, "human": det["human"], "tfjs": raw["tfjs"], "onnxruntime": ort.__version__,
              "failures": failures}
    if a.bench:
        result["bench"] = bench(a.model, a.bench)
        for t, b in result["bench"].items():
            print(f"ONNX Runtime CPU, {t} thread(s): median {b['median_ms']:.1f} ms per 512x512 image "
                  f"(min {b['min_ms']:.1f}, max {b['max_ms']:.1f}, {b['runs']} runs)")
    finish("objects_parity", result, a.json)


def finish(who, result, json_path):
    """The end of a parity run (tools/sensitive_parity.py shares it): the load average after a
    bench, `result` to `json_path` where given, then its failures (exit 1) or OK."""
    if "bench" in result:
        load = os.getloadavg()
        print(f"  load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
        result["loadavg"] = load
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    if result["failures"]:
        print("\nFAIL:\n  " + "\n  ".join(result["failures"]))
        sys.exit(1)
    print(f"{who}: OK")


if __name__ == "__main__":
    main()
