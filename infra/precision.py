#!/usr/bin/env python3
"""fp16 and int8 variants of a CLIP image tower, each written only if it passes its quality gate.

Given the fp32 tower (pixel_values -> image_embeds) in a model folder's
onnx/vision_model.onnx, this writes beside it, in the transformers.js / Optimum layout:

  onnx/vision_model_fp16.onnx       fp16 weights and arithmetic, float32 inputs and outputs
  onnx/vision_model_quantized.onnx  int8 weights, by the quantization that measured best

Gates, against the fp32 tower on real photos (Pillow CLIP preprocessing, tools/reference.py):
  cosine of each photo's embedding to fp32's:  min >= 0.999 (fp16), >= 0.99 (int8)
  top-1 zero-shot label agreement with fp32:   >= 0.99 (fp16), >= 0.95 (int8)
A variant that fails is not written, and the script exits non-zero.

int8 candidates compared (ONNX Runtime's quantization tools, no torch needed):
  dynamic  MatMul weights int8, per tensor    (activations quantized at run time)
  dynamic  MatMul weights int8, per channel
  dynamic  MatMul + patch Conv, uint8, per tensor
  static   QDQ, MatMul, int8 per-channel weights, uint8 activations calibrated on photos (MinMax)
Each is measured for quality (as above) and speed (images/s on this CPU, batch 8), and the
fastest one that passes the int8 gate is written; the table and the reason are printed.

Used by infra/export_clip_onnx.py --precision; also runs on its own:

    python infra/precision.py --folder DIR [--precision fp16,int8] [--photos DIR] [--labels FILE.npy]

--labels: L2-normalised text embeddings [labels, dim] for the zero-shot check (the export writes
them from the real text tower). Without it, seeded random unit vectors stand in: enough to see
whether the ranking of labels survives, not a statement about real labels.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
GATES = {"fp16": {"min_cosine": 0.999, "top1": 0.99}, "int8": {"min_cosine": 0.99, "top1": 0.95}}
FILES = {"fp32": "onnx/vision_model.onnx", "fp16": "onnx/vision_model_fp16.onnx", "int8": "onnx/vision_model_quantized.onnx"}


def photo_batch(photos: list[Path], preprocessor: dict | None) -> np.ndarray:
    """Photos preprocessed as the folder's preprocessor_config.json says (CLIP's numbers if absent)."""
    sys.path.insert(0, str(REPO / "tools"))
    import reference  # Pillow preprocessing, the service's reference

    t = reference.Transform()
    if preprocessor:
        size = preprocessor["size"]
        crop = preprocessor.get("crop_size", size)
        side = lambda v: v if isinstance(v, int) else v.get("shortest_edge") or v["height"]  # noqa: E731
        squash = isinstance(size, dict) and "height" in size
        resample = {2: "bilinear", 3: "bicubic"}[preprocessor.get("resample", 3)]
        t = reference.Transform(side(size), side(crop) if preprocessor.get("do_center_crop", True) else 0, squash,
                                resample, preprocessor["image_mean"], preprocessor["image_std"])
    return np.stack([reference.preprocess(p, t) for p in photos])


def session(path: Path, threads: int = 0):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def embedding_output(s) -> str:
    """CLIP's image_embeds, SigLIP's pooler_output (its second output, after last_hidden_state),
    else the first output."""
    names = [o.name for o in s.get_outputs()]
    return next((n for n in ("image_embeds", "pooler_output") if n in names), names[0])


def embed(path: Path, pixels: np.ndarray, batch: int = 8) -> np.ndarray:
    s = session(path)
    name, output = s.get_inputs()[0].name, embedding_output(s)
    out = np.concatenate([s.run([output], {name: pixels[i:i + batch]})[0] for i in range(0, len(pixels), batch)])
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def images_per_s(path: Path, pixels: np.ndarray, batch: int = 8, runs: int = 3) -> float:
    s = session(path)
    name, x = s.get_inputs()[0].name, pixels[:batch]
    s.run(None, {name: x})  # warm-up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, {name: x})
        times.append(time.perf_counter() - t)
    return len(x) / statistics.median(times)


def quality(fp32: np.ndarray, variant: np.ndarray, labels: np.ndarray) -> dict:
    cos = np.sum(fp32 * variant, axis=1)
    agree = np.mean(np.argmax(fp32 @ labels.T, axis=1) == np.argmax(variant @ labels.T, axis=1))
    return {"min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()), "top1": float(agree)}


def passes(precision: str, q: dict) -> bool:
    gate = GATES[precision]
    return q["min_cosine"] >= gate["min_cosine"] and q["top1"] >= gate["top1"]


def make_fp16(src: Path, dst: Path) -> str:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(dst))
    return "fp16 weights and arithmetic, float32 inputs and outputs (onnxruntime float16 converter)"


def int8_candidates(src: Path, work: Path, pixels: np.ndarray) -> dict:
    """Writes each int8 candidate into `work`; returns {name: path}."""
    from onnxruntime.quantization import (
        CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static)

    logging.getLogger().setLevel(logging.ERROR)  # the tools' advice to pre-process first
    out = {}
    for name, ops, weight, per_channel in [
        ("dynamic MatMul int8 per-tensor", ["MatMul", "Gemm"], QuantType.QInt8, False),
        ("dynamic MatMul int8 per-channel", ["MatMul", "Gemm"], QuantType.QInt8, True),
        ("dynamic MatMul+Conv uint8 per-tensor", ["MatMul", "Gemm", "Conv"], QuantType.QUInt8, False),
    ]:
        path = work / (name.replace(" ", "_").replace("+", "_") + ".onnx")
        quantize_dynamic(str(src), str(path), weight_type=weight, per_channel=per_channel, op_types_to_quantize=ops)
        out[name] = path

    class Photos(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"pixel_values": pixels[i:i + 1]} for i in range(len(pixels))])

        def get_next(self):
            return next(self.batches, None)

    name = "static QDQ MatMul int8 per-channel, calibrated"
    path = work / "static_qdq.onnx"
    quantize_static(str(src), str(path), Photos(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8, op_types_to_quantize=["MatMul"],
                    calibrate_method=CalibrationMethod.MinMax)
    out[name] = path
    return out


def write_variants(folder: Path, precisions: list[str], photos: list[Path], labels: np.ndarray | None) -> dict:
    """Writes the variants of `folder`'s fp32 tower that pass their gates; returns the report."""
    src = folder / FILES["fp32"]
    pre_path = folder / "preprocessor_config.json"
    preprocessor = json.loads(pre_path.read_text()) if pre_path.exists() else None
    pixels = photo_batch(photos, preprocessor)
    fp32 = embed(src, pixels)
    if labels is None:
        labels = np.random.default_rng(7).standard_normal((100, fp32.shape[1])).astype(np.float32)
        labels /= np.linalg.norm(labels, axis=1, keepdims=True)
    report = {"photos": len(photos), "labels": len(labels), "fp32_images_per_s": images_per_s(src, pixels),
              "variants": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for precision in precisions:
            if precision == "fp16":
                path = work / "fp16.onnx"
                candidates = {make_fp16(src, path): path}
            else:
                calibration = pixels[: max(8, len(pixels) // 2)]  # calibrate on half, judge on all
                candidates = int8_candidates(src, work, calibration)
            rows = []
            for name, path in candidates.items():
                q = quality(fp32, embed(path, pixels), labels)
                rows.append({"method": name, **q, "images_per_s": images_per_s(path, pixels),
                             "mb": path.stat().st_size / 1e6, "passes": passes(precision, q)})
                print(f"{precision}: {name}: min cos {q['min_cosine']:.5f}, mean {q['mean_cosine']:.5f}, "
                      f"top-1 agreement {q['top1']:.3f}, {rows[-1]['images_per_s']:.1f} img/s, "
                      f"{rows[-1]['mb']:.0f} MB, {'passes' if rows[-1]['passes'] else 'FAILS'}", flush=True)
            passing = [r for r in rows if r["passes"]]
            entry = {"gate": GATES[precision], "candidates": rows}
            if passing:
                best = max(passing, key=lambda r: r["images_per_s"])
                os.replace(candidates[best["method"]], folder / FILES[precision])
                entry["chosen"] = best["method"]
                entry["why"] = (f"fastest of the {len(passing)} candidate(s) that pass the gate "
                                f"({best['images_per_s']:.1f} img/s, min cosine {best['min_cosine']:.5f})")
                print(f"{precision}: wrote {FILES[precision]}: {entry['chosen']}, {entry['why']}")
            else:
                entry["chosen"] = None
                print(f"{precision}: NOT written: no candidate passes {GATES[precision]}")
            report["variants"][precision] = entry
    return report


def default_photos() -> list[Path]:
    root = Path(os.environ.get("CLIPFN_PHOTOS_DIR", REPO / ".cache/photos")) / "wallpapers"
    return sorted(p for p in root.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", type=Path, required=True, help="model folder holding onnx/vision_model.onnx")
    p.add_argument("--precision", default="fp16,int8", help="variants to write (fp16, int8)")
    p.add_argument("--photos", type=Path, help="folder of photos (default: the setup's camera photos)")
    p.add_argument("--labels", type=Path, help="L2-normalised label embeddings, .npy [labels, dim]")
    p.add_argument("--report", type=Path, help="write the measurements as JSON here")
    a = p.parse_args()
    photos = sorted(a.photos.glob("*.jp*g")) if a.photos else default_photos()
    precisions = [x for x in a.precision.split(",") if x != "fp32"]
    report = write_variants(a.folder, precisions, photos, np.load(a.labels) if a.labels else None)
    if a.report:
        a.report.write_text(json.dumps(report, indent=1))
    return 0 if all(v["chosen"] for v in report["variants"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
