#!/usr/bin/env python3
"""Export the image tower of OpenAI CLIP ViT-B/32 to ONNX for clipfn.

    pip install torch transformers onnx onnxscript onnxruntime
    python infra/export_clip_onnx.py --out clip-vit-b32.onnx

The model written:
  input   pixel_values  float32 [batch, 3, 224, 224]  RGB, CLIP-normalised
  output  image_embeds  float32 [batch, 512]          visual projection, not L2-normalised
  opset 17, the batch axis dynamic, one file (about 350 MB).

It downloads openai/clip-vit-base-patch32 from the Hugging Face Hub unless
--model names a local copy (a folder holding config.json and the weights).
After exporting it runs the ONNX model with ONNX Runtime on batches of 1 and 3
and compares with PyTorch, so a file that is written is one that loads.

--random-init exports the same architecture, shrunk and with random weights,
without any download: it tests this script, not CLIP.

A model folder (transformers.js / Optimum layout, what clipfn's CLIPFN_MODEL
takes, picking the precision by CLIPFN_PRECISION):

    python infra/export_clip_onnx.py --folder clip-vit-b32 --precision fp32,fp16,int8

writes onnx/vision_model.onnx (fp32), onnx/vision_model_fp16.onnx and
onnx/vision_model_quantized.onnx, preprocessor_config.json and config.json.
Each reduced-precision variant passes a quality gate against fp32 on real
photos (--photos; cosine min >= 0.999 fp16 / >= 0.99 int8, and top-1
agreement of zero-shot labels from the real text tower) or is not written
(infra/precision.py, which also compares the int8 quantization methods and
says which one it picked and why).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import warnings
from pathlib import Path

MODEL_ID = "openai/clip-vit-base-patch32"
OPSET = 17
IMAGE_SIZE = 224
# CLIP's preprocessing, recorded in the model's metadata for reference.
PREPROCESS = (
    "resize shortest side to 224 (bicubic), center crop 224x224, RGB scaled to [0,1], "
    "normalise mean=[0.48145466,0.4578275,0.40821073] std=[0.26862954,0.26130258,0.27577711]"
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("infra/model/model.onnx"), help="ONNX file to write")
    p.add_argument("--model", default=MODEL_ID, help=f"Hub id or local folder (default {MODEL_ID})")
    p.add_argument("--opset", type=int, default=OPSET)
    p.add_argument("--random-init", action="store_true", help="small random model, no download (self-test)")
    p.add_argument("--atol", type=float, default=1e-3, help="largest |torch - onnxruntime| accepted")
    p.add_argument("--folder", type=Path, help="write a model folder here instead of --out")
    p.add_argument("--precision", default="fp32", help="with --folder: fp32 plus any of fp16, int8 (comma-separated)")
    p.add_argument("--photos", type=Path, help="photos for the quality gates (default: the setup's camera photos)")
    args = p.parse_args()
    args.precisions = [x.strip() for x in args.precision.split(",") if x.strip()]
    unknown = set(args.precisions) - {"fp32", "fp16", "int8"}
    if unknown or "fp32" not in args.precisions:
        p.error(f"--precision: fp32 plus any of fp16, int8 (got {args.precision})")
    if args.precisions != ["fp32"] and not args.folder:
        p.error("--precision fp16/int8 writes a model folder: give --folder")
    return args


def load_vision_model(args: argparse.Namespace):
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    if args.random_init:
        config = CLIPVisionConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            projection_dim=32,
            image_size=IMAGE_SIZE,
            patch_size=32,
        )
        model = CLIPVisionModelWithProjection(config)
    else:
        model = CLIPVisionModelWithProjection.from_pretrained(args.model)
    return model.eval()


def wrap(model):
    import torch

    class ImageEncoder(torch.nn.Module):
        """pixel_values -> image_embeds, nothing else (no hidden states, no dict)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values):
            return self.inner(pixel_values=pixel_values).image_embeds

    return ImageEncoder(model).eval()


def export(encoder, out: Path, opset: int) -> None:
    import torch

    example = torch.randn(2, 3, IMAGE_SIZE, IMAGE_SIZE)
    params = inspect.signature(torch.onnx.export).parameters
    common = {"input_names": ["pixel_values"], "output_names": ["image_embeds"], "opset_version": opset}
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "dynamo" in params:
            # torch >= 2.5: the torch.export-based exporter (the default from 2.9
            # on). It builds opset 18 and converts down to the requested 17;
            # finish() checks that the conversion happened.
            batch = torch.export.Dim("batch", min=1, max=4096)
            program = torch.onnx.export(
                encoder,
                (example,),
                dynamo=True,
                dynamic_shapes={"pixel_values": {0: batch}},
                **common,
            )
            # One file: the ViT-B/32 tower (~350 MB) is far below protobuf's 2 GB.
            save = inspect.signature(program.save).parameters
            program.save(str(out), **({"external_data": False} if "external_data" in save else {}))
        else:
            torch.onnx.export(
                encoder,
                (example,),
                str(out),
                dynamic_axes={"pixel_values": {0: "batch"}, "image_embeds": {0: "batch"}},
                do_constant_folding=True,
                **common,
            )


def finish(out: Path, model_id: str, opset: int) -> None:
    """Check the graph's interface and record where it came from."""
    import onnx

    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    default_opsets = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if default_opsets != [opset]:
        raise SystemExit(f"exported opset {default_opsets}, wanted {opset}")
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    if [i.name for i in inputs] != ["pixel_values"] or [o.name for o in model.graph.output] != ["image_embeds"]:
        raise SystemExit(f"unexpected interface: {[i.name for i in inputs]} -> {[o.name for o in model.graph.output]}")
    dims = inputs[0].type.tensor_type.shape.dim
    if dims[0].dim_value or [d.dim_value for d in dims[1:]] != [3, IMAGE_SIZE, IMAGE_SIZE]:
        raise SystemExit(f"pixel_values shape is {dims}, wanted [batch, 3, {IMAGE_SIZE}, {IMAGE_SIZE}]")
    for key, value in {"source": model_id, "preprocess": PREPROCESS, "output": "image_embeds (not L2-normalised)"}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(out))


def verify(encoder, out: Path, atol: float) -> None:
    import numpy as np
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        pixels = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE)
        with torch.no_grad():
            expected = encoder(pixels).numpy()
        (got,) = session.run(["image_embeds"], {"pixel_values": pixels.numpy()})
        diff = float(np.max(np.abs(got - expected)))
        print(f"batch {batch}: output {tuple(got.shape)}, max |torch - onnxruntime| = {diff:.2e}")
        if got.shape != expected.shape or diff > atol:
            raise SystemExit(f"ONNX Runtime disagrees with PyTorch (max diff {diff:.2e} > {atol})")


# Zero-shot labels for the int8/fp16 gate: everyday photo-album categories.
GATE_LABELS = [
    "beach", "mountain", "forest", "city street", "building", "bridge", "car", "bicycle", "boat", "airplane",
    "dog", "cat", "bird", "horse", "flower", "tree", "sunset", "snow", "lake", "river", "desert", "field",
    "food", "cake", "coffee", "person", "child", "group of people", "wedding", "concert", "sports", "computer",
    "phone", "book", "painting", "text document", "night sky", "stars", "waterfall", "garden",
]


def label_embeddings(args: argparse.Namespace):
    """L2-normalised text embeddings of the gate's labels from the model's own text tower."""
    import numpy as np
    import torch
    from transformers import CLIPTextModelWithProjection, CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(args.model)
    text = CLIPTextModelWithProjection.from_pretrained(args.model).eval()
    tokens = tokenizer([f"a photo of a {label}." for label in GATE_LABELS], padding=True, return_tensors="pt")
    with torch.no_grad():
        embeds = text(**tokens).text_embeds.numpy()
    return embeds / np.linalg.norm(embeds, axis=1, keepdims=True)


def write_folder_files(model, args: argparse.Namespace) -> None:
    """preprocessor_config.json (the model's own) and config.json beside onnx/."""
    from transformers import CLIPImageProcessor

    processor = CLIPImageProcessor() if args.random_init else CLIPImageProcessor.from_pretrained(args.model)
    processor.save_pretrained(str(args.folder))
    model.config.to_json_file(str(args.folder / "config.json"))


def main() -> int:
    args = parse_args()
    model = load_vision_model(args)
    encoder = wrap(model)
    out = args.folder / "onnx" / "vision_model.onnx" if args.folder else args.out
    if out.exists():
        out.unlink()
    export(encoder, out, args.opset)
    finish(out, "random-init (self-test)" if args.random_init else args.model, args.opset)
    verify(encoder, out, args.atol)
    size_mb = out.stat().st_size / 1e6
    print(f"wrote {out} ({size_mb:.1f} MB): pixel_values [batch,3,{IMAGE_SIZE},{IMAGE_SIZE}] -> image_embeds, opset {args.opset}")
    if not args.folder:
        return 0
    write_folder_files(model, args)
    reduced = [p for p in args.precisions if p != "fp32"]
    if not reduced:
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import precision

    photos = sorted(args.photos.glob("*.jp*g")) if args.photos else precision.default_photos()
    labels = None if args.random_init else label_embeddings(args)
    report = precision.write_variants(args.folder, reduced, photos, labels)
    (args.folder / "precision_report.json").write_text(json.dumps(report, indent=1))
    return 0 if all(v["chosen"] for v in report["variants"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
