#!/usr/bin/env python3
"""The converted nsfwjs MobileNetV2Mid (ONNX) equals nsfwjs's own classify() (tfjs), and how often
it flags ordinary photos.

Photos: the ordinary photos the tests already have, each decoded once here by Pillow
(.convert("RGB"), no EXIF rotation) and handed to both sides as the same raw RGB bytes, duplicates
(same pixels) dropped: scikit-image's chelsea, astronaut, coffee, rocket and camera; every .jpg /
.jpeg / .png under .cache/photos/wallpapers, faces and ocr and tests/fixtures (or the --photos-dir
folders given); and the demo's album and burst (tools/exif_reference.py album / burst, written to a
temp folder).

  (a) input: tools/sensitive/reference.cjs --mode raw runs nsfwjs 4.4.0's load('MobileNetV2Mid')
      and classify(photo, 5) on tfjs-backend-cpu and dumps the tensor nsfwjs feeds the model; this
      script's preprocessing (nsfwjs_input, below: a NumPy copy of nsfwjs's infer() and of tfjs's
      CPU ResizeBilinear kernel) is compared with it (max |d|).
  (b) scores: the ONNX model (ONNX Runtime CPU, the photos in batches of --batch) on this script's
      input, each of the 5 class probabilities against classify()'s: max |d| <= 0.01 (the issue's
      bound), and on nsfwjs's own input (the model alone).
  (c) false positives: every photo here is ordinary (no nudity, no drawings of it), so each one a
      rule flags is a false positive. Rules: nsfw = porn + hentai + sexy >= t for several t;
      PhotoPrism's (internal/nsfw: not when neutral > 0.25, else max(porn, sexy, hentai) > t, with
      its ThresholdSafe 0.75 and ThresholdHigh 0.98, the one its indexer uses to flag a photo).

Prints a table; exits 1 when a score or the input is off. --bench N also times the ONNX model
(1 and 2 intra-op threads, batch 1 and 8, N runs each after 2 warm-ups, median ms per photo).

Usage: sensitive_parity.py [--model .cache/models/sensitive-nsfwjs/model.onnx] [--modules DIR]
                           [--node node] [--photos-dir DIR ...] [--no-skimage] [--no-album]
                           [--batch 8] [--bench N] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

# The same photos, read the same way (this script's folder, tools/, is on sys.path).
from objects_parity import finish, load_photos

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, ".cache/models/sensitive-nsfwjs/model.onnx")
MODULES = os.path.join(REPO, ".cache/node-sensitive/node_modules")
PHOTO_DIRS = [os.path.join(REPO, ".cache/photos", d) for d in ("wallpapers", "faces", "ocr")] + \
    [os.path.join(REPO, "tests/fixtures")]
SIZE = 224
TOL_SCORE, TOL_INPUT = 0.01, 1e-6
SUM_THRESHOLDS = [0.5, 0.6, 0.7, 0.8, 0.9]
PHOTOPRISM = {"PhotoPrism ThresholdSafe 0.75": 0.75, "PhotoPrism ThresholdHigh 0.98": 0.98}


def resize_bilinear_align_corners(img, out_h, out_w):
    """tfjs-backend-cpu's ResizeBilinear with align_corners=true, half_pixel_centers=false: source =
    dst * (in - 1) / (out - 1), floor / min(ceil, in - 1), lerp in x then y in float64 from the
    float32 values, stored as float32. img: (H, W, 3) float32."""
    h, w = img.shape[:2]
    x = img.astype(np.float64)
    ry = (h - 1) / (out_h - 1) if out_h > 1 else h / out_h
    rx = (w - 1) / (out_w - 1) if out_w > 1 else w / out_w
    ys, xs = ry * np.arange(out_h), rx * np.arange(out_w)
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


def nsfwjs_input(img):
    """nsfwjs 4.4.0's NSFWJS.infer (dist/cjs/core.js) before model.predict: img.toFloat().div(255)
    (float32 of the double quotient), then, unless the photo is already 224 x 224,
    tf.image.resizeBilinear(normalized, [224, 224], alignCorners = true) (the whole photo stretched,
    no crop, no letterbox), reshaped to [1, 224, 224, 3]; RGB order as given. img: uint8 (H, W, 3)."""
    x = (img.astype(np.float64) / 255.0).astype(np.float32)
    if img.shape[0] != SIZE or img.shape[1] != SIZE:
        x = resize_bilinear_align_corners(x, SIZE, SIZE)
    return x.reshape(1, SIZE, SIZE, 3)


def write_album(folder, python):
    """The demo's generated photos (tools/demo.sh): tools/exif_reference.py album + burst."""
    for what in ("album", "burst"):
        subprocess.run([python, os.path.join(REPO, "tools/exif_reference.py"), what, folder], check=True,
                       stdout=subprocess.DEVNULL)


def reference(photos, tmp, a):
    manifest = []
    for i, (name, img) in enumerate(photos):
        path = os.path.join(tmp, f"{i}.rgb")
        img.tofile(path)
        manifest.append({"name": name, "rgb": path, "width": img.shape[1], "height": img.shape[0]})
    mpath = os.path.join(tmp, "photos.json")
    with open(mpath, "w") as f:
        json.dump(manifest, f)
    cmd = [a.node, os.path.join(REPO, "tools/sensitive/reference.cjs"), "--mode", "raw", "--photos", mpath,
           "--out", os.path.join(tmp, "raw"), "--modules", a.modules]
    t = time.time()
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sensitive_parity: reference.cjs failed:\n{r.stderr[-4000:]}")
    print(f"sensitive_parity: reference.cjs --mode raw: {len(photos)} photos in {time.time() - t:.0f}s",
          file=sys.stderr)
    return json.loads(r.stdout)


def session(model, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def run_batched(sess, x, batch):
    return np.concatenate([sess.run(None, {"input": x[i:i + batch]})[0] for i in range(0, len(x), batch)])


def bench(model, x, runs):
    res = {}
    for threads in (1, 2):
        s = session(model, threads)
        for batch in (1, 8):
            feed = {"input": np.repeat(x[:1], batch, 0)}
            for _ in range(2):
                s.run(None, feed)
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                s.run(None, feed)
                times.append(1000 * (time.perf_counter() - t) / batch)
            res[f"{threads}t_b{batch}"] = {"threads": threads, "batch": batch, "median_ms_per_photo": statistics.median(times),
                                           "min_ms": min(times), "max_ms": max(times), "runs": runs}
    return res


def flags(p, classes):
    """{rule: flagged} for one photo's probabilities p (class order)."""
    s = dict(zip(classes, (float(v) for v in p)))
    nsfw = s["porn"] + s["hentai"] + s["sexy"]
    out = {f"porn+hentai+sexy >= {t}": nsfw >= t for t in SUM_THRESHOLDS}
    for name, t in PHOTOPRISM.items():
        out[name] = s["neutral"] <= 0.25 and max(s["porn"], s["sexy"], s["hentai"]) > t
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--modules", default=MODULES)
    ap.add_argument("--node", default="node")
    ap.add_argument("--photos-dir", action="append", help=f"folders of photos (default: {PHOTO_DIRS})")
    ap.add_argument("--no-skimage", action="store_true")
    ap.add_argument("--no-album", action="store_true", help="leave out the demo's generated album and burst")
    ap.add_argument("--batch", type=int, default=8, help="ONNX Runtime batch for the parity runs")
    ap.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads for the parity runs")
    ap.add_argument("--bench", type=int, default=0, help="time the ONNX model: N runs per setting")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()
    import onnxruntime as ort

    for p in (a.model, a.modules):
        if not os.path.exists(p):
            sys.exit(f"sensitive_parity: no {p} (run tools/setup-sensitive.sh)")
    with open(os.path.join(os.path.dirname(a.model), "classes.txt"), encoding="utf-8") as fh:
        classes = fh.read().splitlines()
    with tempfile.TemporaryDirectory(prefix="sensitive-parity-") as tmp:
        album = None
        if not a.no_album:
            album = os.path.join(tmp, "album")
            write_album(album, sys.executable)
        dirs = (a.photos_dir or PHOTO_DIRS) + ([album] if album else [])
        photos = load_photos(dirs, not a.no_skimage, {album: "album"}, "sensitive_parity")
        if not photos:
            sys.exit("sensitive_parity: no photos")
        t = time.perf_counter()
        ours_in = np.concatenate([nsfwjs_input(img) for _, img in photos])
        prep_ms = 1000 * (time.perf_counter() - t) / len(photos)
        ref = reference(photos, tmp, a)
        js_in = np.concatenate([np.fromfile(r["input"]["file"], np.float32).reshape(r["input"]["shape"])
                                for r in ref["photos"]])
    js_classes = [c.lower() for c in ref["classes"]]
    if js_classes != classes:
        sys.exit(f"sensitive_parity: nsfwjs's classes {js_classes}, classes.txt {classes}")
    js = np.array([[r["scores"][c] for c in ref["classes"]] for r in ref["photos"]], np.float64)
    sess = session(a.model, a.threads)
    t = time.perf_counter()
    ours = run_batched(sess, ours_in, a.batch).astype(np.float64)
    onnx_ms = 1000 * (time.perf_counter() - t) / len(photos)
    model_only = run_batched(sess, js_in, a.batch).astype(np.float64)

    rows, failures = [], []
    for i, ((name, img), r) in enumerate(zip(photos, ref["photos"])):
        assert r["name"] == name
        row = {"photo": name, "size": f"{img.shape[1]}x{img.shape[0]}",
               "input": float(np.abs(ours_in[i] - js_in[i]).max()),
               "score": float(np.abs(ours[i] - js[i]).max()), "model_only": float(np.abs(model_only[i] - js[i]).max()),
               "nsfwjs": dict(zip(classes, js[i].tolist())), "onnx": dict(zip(classes, ours[i].tolist())),
               "js_ms": r["ms"], "flags": flags(ours[i], classes)}
        if row["input"] > TOL_INPUT or row["score"] > TOL_SCORE:
            failures.append(f"{name}: input {row['input']:.2g}, score {row['score']:.2g}")
        rows.append(row)

    print(f"\nONNX {os.path.relpath(a.model, REPO)} (ONNX Runtime {ort.__version__} CPU) vs nsfwjs "
          f"MobileNetV2Mid classify() / tfjs {ref['tfjs']} ({ref['backend']})")
    hdr = f"{'photo':40} {'size':>9} {'input':>7} {'score':>7} {'model':>7}  " + " ".join(f"{c:>7}" for c in classes) + \
        "  p+h+s"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        o = r["onnx"]
        print(f"{r['photo'][:40]:40} {r['size']:>9} {r['input']:7.1e} {r['score']:7.1e} {r['model_only']:7.1e}  "
              + " ".join(f"{o[c]:7.4f}" for c in classes) + f"  {o['porn'] + o['hentai'] + o['sexy']:.4f}"
              + ("" if r["input"] <= TOL_INPUT and r["score"] <= TOL_SCORE else "  FAIL"))
    n = len(rows)
    nsfw = sorted(((r["onnx"]["porn"] + r["onnx"]["hentai"] + r["onnx"]["sexy"], r["photo"]) for r in rows), reverse=True)
    print(f"\n{n} photos: max |d| input {max(r['input'] for r in rows):.2g}, class scores {max(r['score'] for r in rows):.2g} "
          f"(tolerance {TOL_SCORE}), model alone on nsfwjs's input {max(r['model_only'] for r in rows):.2g}")
    print("false positives on these ordinary photos, by rule:")
    fp = {}
    for rule in rows[0]["flags"]:
        hit = [r["photo"] for r in rows if r["flags"][rule]]
        fp[rule] = {"flagged": len(hit), "of": n, "photos": hit}
        print(f"  {rule:32} {len(hit):3d} of {n} ({100 * len(hit) / n:.1f}%)" + (f": {', '.join(hit)}" if hit else ""))
    print("highest porn+hentai+sexy: " + ", ".join(f"{p} {v:.3f}" for v, p in nsfw[:6]))
    top = {c: sum(1 for r in rows if max(r["onnx"], key=r["onnx"].get) == c) for c in classes}
    print("top class: " + ", ".join(f"{c} {k}" for c, k in top.items()))
    js_ms = statistics.median(r["js_ms"] for r in rows)
    print(f"times: nsfwjs classify() median {js_ms:.0f} ms a photo (tfjs-backend-cpu, load {ref['loadMs']} ms); "
          f"NumPy preprocessing {prep_ms:.1f} ms a photo; ONNX Runtime {a.threads} threads, batch {a.batch}: "
          f"{onnx_ms:.1f} ms a photo")
    result = {"rows": rows, "tfjs": ref["tfjs"], "onnxruntime": ort.__version__, "false_positives": fp,
              "top_class": top, "times": {"js_classify_median_ms": js_ms, "js_load_ms": ref["loadMs"],
                                          "numpy_preprocess_ms": prep_ms, "onnx_ms_per_photo": onnx_ms},
              "failures": failures}
    if a.bench:
        result["bench"] = bench(a.model, ours_in, a.bench)
        for b in result["bench"].values():
            print(f"ONNX Runtime CPU, {b['threads']} thread(s), batch {b['batch']}: median "
                  f"{b['median_ms_per_photo']:.1f} ms a photo (min {b['min_ms']:.1f}, max {b['max_ms']:.1f}, {b['runs']} runs)")
    finish("sensitive_parity", result, a.json)


if __name__ == "__main__":
    main()
