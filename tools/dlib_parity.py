#!/usr/bin/env python3
"""The rebuilt dlib recognizer equals face-api's own pipeline (issue 35).

Eight 150x150 RGB chips (real faces from scikit-image's bundled photos where that package is
installed: astronaut.png, camera.png, lfw_subset.npy; the rest, or all eight without it,
deterministic synthetic images), run through
  - the ONNX model tools/setup-real-faces.sh built (.cache/models/dlib-recognizer/model.onnx) in
    ONNX Runtime, and
  - face-api 1.7.15's own FaceRecognitionNet.computeFaceDescriptor under node (tfjs CPU backend;
    tools/faceapi/reference.cjs), from the same manifest and .bin,
compared before any L2 normalisation: per chip, max |ours - face-api| <= --tol (1e-4) and cosine
>= --min-cos (0.9999). Then the same model rebuilt with dlib's own divisor 256 instead of
face-api's 255 must NOT pass that check: it shows the check can fail. (It fails by a small margin:
256 moves the descriptors by 2-4e-4, cosine 0.999999, so a tolerance of 1e-3 could not tell the two
divisors apart; measured figures in docs/faces-real-weights.md.) Prints the figures; exits 1 on
any failure.

Usage: dlib_parity.py [--model PATH] [--weights DIR] [--modules DIR] [--node node] [--tol 1e-4]
                      [--min-cos 0.9999]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import dlib_recognizer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(REPO, ".cache/models/dlib-recognizer")
SIZE = dlib_recognizer.SIZE


def resize(img, box):
    """img (H, W, 3) uint8 cropped to box (left, top, right, bottom), bilinear to 150 x 150."""
    from PIL import Image

    return np.asarray(Image.fromarray(img).crop(box).resize((SIZE, SIZE), Image.BILINEAR), np.float32)


def synthetic(seed):
    """A smooth colour field with fine noise, fractional values in [0, 255]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE] / SIZE
    chip = np.stack([128 + 100 * np.sin(2 * np.pi * (rng.uniform(0.5, 2) * xx + rng.uniform(0.5, 2) * yy
                                                        + rng.uniform())) for _ in range(3)], axis=-1)
    return np.clip(chip + rng.normal(0, 12, chip.shape), 0, 255).astype(np.float32)


def chips():
    """(names, float32 [8, 150, 150, 3] RGB 0-255)."""
    out = []
    try:
        import skimage.data
        from PIL import Image

        d = os.path.dirname(skimage.data.__file__)
        astro = np.asarray(Image.open(os.path.join(d, "astronaut.png")).convert("RGB"))
        camera = np.asarray(Image.open(os.path.join(d, "camera.png")).convert("RGB"))
        lfw = np.load(os.path.join(d, "lfw_subset.npy"))  # 200 x 25 x 25 grey faces in [0, 1]
        face = (lfw[0] * 255).round().astype(np.uint8)
        out += [("astronaut face", resize(astro, (165, 45, 285, 165))),
                ("astronaut tight", resize(astro, (180, 62, 270, 152))),
                ("astronaut wide", resize(astro, (140, 20, 310, 190))),
                ("astronaut mirrored", resize(astro[:, ::-1].copy(), (227, 45, 347, 165))),
                ("camera man", resize(camera, (150, 70, 270, 190))),
                ("lfw_subset[0] x6", resize(np.stack([face] * 3, axis=-1), (0, 0, 25, 25))),
                ("coffee (no face)", resize(np.asarray(Image.open(os.path.join(d, "coffee.png")).convert("RGB")),
                                            (150, 50, 450, 350)))]
    except ImportError:
        pass
    seed = 0
    while len(out) < 8:
        out.append((f"synthetic {seed}", synthetic(seed)))
        seed += 1
    return [n for n, _ in out], np.stack([c for _, c in out])


def faceapi(x, weights, modules, node):
    """face-api's descriptors of chips x [N, 150, 150, 3]."""
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        f.write(np.ascontiguousarray(x, "<f4").tobytes())
        f.flush()
        cmd = [node, os.path.join(REPO, "tools/faceapi/reference.cjs"), "--model", weights, "--chips", f.name,
               "--n", str(len(x)), "--modules", modules]
        r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"dlib_parity: face-api's reference failed ({' '.join(cmd)}):\n{r.stderr}")
    out = json.loads(r.stdout)
    return out, np.array(out["descriptors"], np.float64)


def onnx_run(model, x):
    import onnxruntime as ort

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess, sess.run(None, {"input": x.transpose(0, 3, 1, 2).copy()})[0].astype(np.float64)


def compare(ours, ref):
    diff = np.abs(ours - ref).max(axis=1)
    cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    return diff, cos


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(MODEL_DIR, "model.onnx"))
    ap.add_argument("--weights", default=os.path.join(MODEL_DIR, "faceapi"))
    ap.add_argument("--modules", default=os.path.join(REPO, ".cache/node/node_modules"))
    ap.add_argument("--node", default="node")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--min-cos", type=float, default=0.9999)
    a = ap.parse_args()
    for p in (a.model, a.weights, a.modules):
        if not os.path.exists(p):
            sys.exit(f"dlib_parity: {p} is missing: run tools/setup-real-faces.sh")

    names, x = chips()
    info, ref = faceapi(x, a.weights, a.modules, a.node)
    sess, ours = onnx_run(a.model, x)
    meta = sess.get_modelmeta().custom_metadata_map
    ok = meta.get("clipfn.face_format") == "dlib" and meta.get("clipfn.input_scale") == "255"
    print(f"dlib_parity: {os.path.relpath(a.model, REPO)} (face_format={meta.get('clipfn.face_format')}, "
          f"input_scale={meta.get('clipfn.input_scale')}) vs face-api {info['faceapi']} "
          f"(tfjs {info['tfjs']}, backend {info['backend']}), {len(x)} chips, tolerance {a.tol:g}, "
          f"cosine >= {a.min_cos}")
    diff, cos = compare(ours, ref)
    for n, d, c, r in zip(names, diff, cos, ref):
        bad = d > a.tol or c < a.min_cos
        ok &= not bad
        print(f"  {n:22s} max|diff| {d:.2e}  cosine {c:.9f}  |face-api| {np.linalg.norm(r):.4f}"
              f"{'  FAIL' if bad else ''}")
    print(f"  all chips: max|diff| {diff.max():.2e}, min cosine {cos.min():.9f}")
    model256, _ = dlib_recognizer.build(a.weights, 256)
    _, ours256 = onnx_run(model256.SerializeToString(), x)
    diff256, cos256 = compare(ours256, ref)
    caught = bool((diff256 > a.tol).all())
    print(f"  divisor 256 (dlib's own) against face-api: max|diff| {diff256.min():.2e}..{diff256.max():.2e}, "
          f"cosine {cos256.min():.6f}..{cos256.max():.6f}: "
          f"{'fails the check on every chip, as it must' if caught else 'PASSES on some chip: the check is blind'}")
    ok &= caught
    print("dlib_parity: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
