#!/usr/bin/env python3
"""Export the towers of OpenAI CLIP ViT-B/32 to ONNX for clipfn.

    pip install torch transformers onnx onnxscript onnxruntime
    python infra/export_clip_onnx.py --out clip-vit-b32.onnx                      # image tower
    python infra/export_clip_onnx.py --tower both --out clip-vit-b32.onnx \
        --text-out clip-vit-b32-text.onnx                                          # and the text tower

The models written (opset 17, the batch axis dynamic, one file each):
  image (CLIPFN_MODEL, about 350 MB)
    input   pixel_values  float32 [batch, 3, 224, 224]  RGB, CLIP-normalised
    output  image_embeds  float32 [batch, 512]          visual projection, not L2-normalised
  text (CLIPFN_TEXT_MODEL, about 250 MB)
    input   input_ids     int64   [batch, 77]           CLIP BPE ids: start, text, end, zeros
    output  text_embeds   float32 [batch, 512]          text projection at the end token, not L2-normalised

It downloads openai/clip-vit-base-patch32 from the Hugging Face Hub unless
--model names a local copy (a folder holding config.json and the weights).
After exporting it runs each ONNX model with ONNX Runtime on batches of 1 and 3
and compares with PyTorch, so a file that is written is one that loads.

--tower text-multilingual exports sentence-transformers/clip-ViT-B-32-multilingual-v1 (a
student text tower in ViT-B/32's image space, for non-English apps) with its tokenizer.json;
see infra/export_multilingual.py.

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

--family siglip|siglip2 exports a SigLIP (google/siglip-base-patch16-224) or SigLIP 2
(google/siglip2-base-patch16-224) model folder instead: both towers (last_hidden_state and
pooler_output, in Optimum's order), the checkpoint's tokenizer and preprocessor files, and
config.json with the learned logit_scale and logit_bias, behind parity gates against transformers;
see infra/export_siglip.py. It needs --folder, and takes --model, --precision, --photos, --opset
and --atol as above.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import warnings
from pathlib import Path

MODEL_ID = "openai/clip-vit-base-patch32"
SIGLIP_MODELS = {"siglip": "google/siglip-base-patch16-224", "siglip2": "google/siglip2-base-patch16-224"}
OPSET = 17
IMAGE_SIZE = 224
CONTEXT = 77
START, END = 49406, 49407
# CLIP's preprocessing, recorded in the model's metadata for reference.
PREPROCESS = (
    "resize shortest side to 224 (bicubic), center crop 224x224, RGB scaled to [0,1], "
    "normalise mean=[0.48145466,0.4578275,0.40821073] std=[0.26862954,0.26130258,0.27577711]"
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", choices=["clip", "siglip", "siglip2"], default="clip",
                   help="clip (the default), or a SigLIP / SigLIP 2 model folder (both towers; needs --folder)")
    p.add_argument("--tower", choices=["image", "text", "both", "text-multilingual"], default="image", help="which tower(s) to export")
    p.add_argument("--out", type=Path, default=Path("infra/model/model.onnx"), help="image tower ONNX file")
    p.add_argument("--text-out", type=Path, default=Path("infra/model/text.onnx"), help="text tower ONNX file")
    p.add_argument("--model", help=f"Hub id or local folder (default {MODEL_ID}; with --family siglip "
                   f"{SIGLIP_MODELS['siglip']}, siglip2 {SIGLIP_MODELS['siglip2']})")
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
    if args.family != "clip":
        if not args.folder:
            p.error(f"--family {args.family} writes a model folder: give --folder")
        if args.tower not in ("image", "both"):
            p.error(f"--family {args.family} exports both towers into the folder; --tower {args.tower} is CLIP's")
        if args.random_init:
            p.error("--random-init is for the CLIP export; the SigLIP one needs a checkpoint")
    args.model = args.model or (SIGLIP_MODELS[args.family] if args.family != "clip" else MODEL_ID)
    return args


def load_model(args: argparse.Namespace, tower: str):
    import transformers

    if tower == "text":
        config_class, model_class = transformers.CLIPTextConfig, transformers.CLIPTextModelWithProjection
        shape = {"max_position_embeddings": CONTEXT}
    else:
        config_class, model_class = transformers.CLIPVisionConfig, transformers.CLIPVisionModelWithProjection
        shape = {"image_size": IMAGE_SIZE, "patch_size": 32}
    if args.random_init:
        config = config_class(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            projection_dim=32,
            **shape,
        )
        model = model_class(config)
    else:
        model = model_class.from_pretrained(args.model)
    return model.eval()


# Per tower: graph input, output, and the input shape after the batch axis.
INTERFACE = {
    "image": ("pixel_values", "image_embeds", [3, IMAGE_SIZE, IMAGE_SIZE]),
    "text": ("input_ids", "text_embeds", [CONTEXT]),
}


def wrap(model, tower: str):
    import torch

    class Encoder(torch.nn.Module):
        """One input -> the projected embeddings, nothing else (no hidden states, no dict).
        The text tower pools at the end token, the largest id, as CLIP does."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            if tower == "text":
                return self.inner(input_ids=x).text_embeds
            return self.inner(pixel_values=x).image_embeds

    return Encoder(model).eval()


def example_input(tower: str, batch: int, seed: int = 0):
    """Random pixels, or random token ids laid out as clipfn sends them: start, text, end, zeros."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    if tower == "image":
        return torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    ids = torch.zeros(batch, CONTEXT, dtype=torch.int64)
    for row in range(batch):
        length = int(torch.randint(0, CONTEXT - 1, (1,), generator=generator))
        ids[row, 0] = START
        ids[row, 1 : length + 1] = torch.randint(0, START, (length,), generator=generator)
        ids[row, length + 1] = END
    return ids


def export(encoder, tower: str, out: Path, opset: int) -> None:
    import torch

    input_name, output_name, _ = INTERFACE[tower]
    example = example_input(tower, 2)
    params = inspect.signature(torch.onnx.export).parameters
    common = {"input_names": [input_name], "output_names": [output_name], "opset_version": opset}
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
                dynamic_shapes={"x": {0: batch}},
                **common,
            )
            # One file: each ViT-B/32 tower (~350 and ~250 MB) is far below protobuf's 2 GB.
            save = inspect.signature(program.save).parameters
            program.save(str(out), **({"external_data": False} if "external_data" in save else {}))
        else:
            torch.onnx.export(
                encoder,
                (example,),
                str(out),
                dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
                do_constant_folding=True,
                **common,
            )


def finish(out: Path, tower: str, model_id: str, opset: int) -> None:
    """Check the graph's interface and record where it came from."""
    import onnx

    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    default_opsets = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if default_opsets != [opset]:
        raise SystemExit(f"exported opset {default_opsets}, wanted {opset}")
    input_name, output_name, shape = INTERFACE[tower]
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    if [i.name for i in inputs] != [input_name] or [o.name for o in model.graph.output] != [output_name]:
        raise SystemExit(f"unexpected interface: {[i.name for i in inputs]} -> {[o.name for o in model.graph.output]}")
    dims = inputs[0].type.tensor_type.shape.dim
    if dims[0].dim_value or [d.dim_value for d in dims[1:]] != shape:
        raise SystemExit(f"{input_name} shape is {dims}, wanted [batch, {', '.join(map(str, shape))}]")
    preprocess = PREPROCESS if tower == "image" else "CLIP BPE (bpe_simple_vocab_16e6), 77 ids: start, text, end, zeros"
    for key, value in {"source": model_id, "preprocess": preprocess, "output": f"{output_name} (not L2-normalised)"}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(out))


def verify(encoder, tower: str, out: Path, atol: float) -> None:
    import numpy as np
    import onnxruntime as ort
    import torch

    input_name, output_name, _ = INTERFACE[tower]
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = example_input(tower, batch, seed=batch)
        with torch.no_grad():
            expected = encoder(x).numpy()
        (got,) = session.run([output_name], {input_name: x.numpy()})
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
    if args.family != "clip":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from export_siglip import export_siglip

        return export_siglip(args)
    if args.tower == "text-multilingual":
        from export_multilingual import MULTILINGUAL_ID, export_multilingual

        export_multilingual(args.model if args.model != MODEL_ID else MULTILINGUAL_ID, args.text_out, args.opset)
        return 0
    towers = ["image", "text"] if args.tower == "both" else [args.tower]
    status = 0
    if "image" in towers:
        status = export_image(args)
    if "text" in towers:
        # In a model folder the text tower goes where transformers.js keeps it.
        export_tower(args, "text", args.folder / "onnx" / "text_model.onnx" if args.folder else args.text_out)
    return status


def export_tower(args: argparse.Namespace, tower: str, out: Path):
    """Exports, checks and verifies one tower; returns the PyTorch model."""
    model = load_model(args, tower)
    encoder = wrap(model, tower)
    if out.exists():
        out.unlink()
    export(encoder, tower, out, args.opset)
    finish(out, tower, "random-init (self-test)" if args.random_init else args.model, args.opset)
    verify(encoder, tower, out, args.atol)
    input_name, output_name, shape = INTERFACE[tower]
    size_mb = out.stat().st_size / 1e6
    print(f"wrote {out} ({size_mb:.1f} MB): {input_name} [batch,{','.join(map(str, shape))}] -> {output_name}, opset {args.opset}")
    return model


def export_image(args: argparse.Namespace) -> int:
    """The image tower: one file, or a model folder with its reduced-precision variants."""
    model = export_tower(args, "image", args.folder / "onnx" / "vision_model.onnx" if args.folder else args.out)
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
