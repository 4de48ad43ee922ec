"""`export_clip_onnx.py --family siglip|siglip2`: a SigLIP or SigLIP 2 model folder for clipfn.

    pip install torch transformers sentencepiece protobuf onnx onnxruntime tokenizers pillow huggingface_hub
    python infra/export_clip_onnx.py --family siglip2 --folder siglip2-base-patch16-224 --precision fp32,fp16,int8
    python infra/export_clip_onnx.py --family siglip --model google/siglip-base-patch16-224 --folder siglip-base

Not run here: it needs torch and the Hugging Face Hub (or --model naming a local copy of a
checkpoint). Defaults: google/siglip2-base-patch16-224 (SigLIP 2) and
google/siglip-base-patch16-224 (SigLIP 1). SigLIP 2 "NaFlex" checkpoints (variable resolution,
pixel_attention_mask + spatial_shapes inputs) are refused: clipfn feeds fixed-size pixels.

The folder (transformers.js / Optimum layout, what CLIPFN_MODEL takes):
  onnx/vision_model.onnx   pixel_values float32 [batch, 3, S, S]
                           -> last_hidden_state [batch, tokens, width], pooler_output [batch, dim]
  onnx/text_model.onnx     input_ids int64 [batch, sequence] (no attention_mask)
                           -> last_hidden_state [batch, sequence, width], pooler_output [batch, dim]
  onnx/*_fp16.onnx, onnx/*_quantized.onnx   with --precision, each only if it passes its gate
  tokenizer.json, tokenizer_config.json, special_tokens_map.json, preprocessor_config.json:
                           the checkpoint's own files, byte for byte (SigLIP 1's tokenizer.json has
                           no padding: clipfn takes pad_token / model_max_length from
                           tokenizer_config.json; SigLIP 2's pads to 64 with <pad> = 0 itself)
  config.json              the checkpoint's, plus "logit_scale" and "logit_bias": the raw learned
                           parameters (probability = sigmoid(exp(logit_scale) * cos + logit_bias)),
                           "clipfn.family" and "clipfn.source"
pooler_output is what SiglipModel.get_image_features / get_text_features return (not normalised).

Gates (the export fails, and says why, unless all pass):
  1. each tower, torch against ONNX Runtime on random input, batches of 1 and 3: max |diff| <= --atol
  2. the folder as clipfn reads it (tools/siglip_reference.py: transformers' SiglipImageProcessor
     from preprocessor_config.json; tokenizer.json with the padding, truncation and lower-casing
     rule clipfn follows) against transformers' own processor + the torch model, on photos
     (--photos, default the setup's camera photos) and on CHECK_TEXTS (English, Korean, Japanese,
     Chinese, emoji): token ids equal, and cosine >= 0.9999 for every photo and every text
  3. sigmoid scores from those ONNX vectors with config.json's logit_scale / logit_bias against
     torch's sigmoid(logits_per_image): max |diff| <= 1e-4
  4. --precision fp16 / int8: the vision variants through infra/precision.py's gates (zero-shot
     labels from this model's own text tower), the text variants at cosine >= 0.999 / 0.99 to fp32
     on CHECK_TEXTS and the gate's prompts
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "preprocessor_config.json"]
CHECK_TEXTS = [
    "a photo of the beach at sunset",
    "A dog playing in the snow",
    "바다 일몰",
    "눈 속에서 뛰어노는 강아지",
    "해변에서 찍은 가족 사진",
    "夕日の海辺の写真",
    "海滩上的日落照片",
    "🎂 생일 케이크",
    "Mixed: 오늘 Tokyo에서 ramen을 먹었다",
    "a very long caption " * 20,
]
TEXT_GATES = {"fp16": 0.999, "int8": 0.99}


def load_checkpoint(model_id: str, family: str):
    import transformers

    config = transformers.AutoConfig.from_pretrained(model_id)
    pre = checkpoint_file(model_id, "preprocessor_config.json")
    processor_type = json.loads(pre.read_text()).get("image_processor_type", "") if pre else ""
    if processor_type.startswith("Siglip2ImageProcessor") or hasattr(config.vision_config, "num_patches"):
        raise SystemExit(f"{model_id}: a SigLIP 2 NaFlex checkpoint ({processor_type or 'num_patches'}: patchified "
                         "pixels, pixel_attention_mask and spatial_shapes inputs); clipfn feeds fixed-size pixels: "
                         "use a fixed-resolution one, e.g. google/siglip2-base-patch16-224")
    if config.model_type != "siglip":
        # Assumed, not checked here (no Hub): the fixed-resolution SigLIP 2 checkpoints say "siglip" and load as
        # SiglipModel (with a Gemma tokenizer); transformers' Siglip2Model is the NaFlex one. If a FixRes
        # checkpoint says "siglip2", this is the check to revisit.
        raise SystemExit(f"{model_id}: model_type {config.model_type!r}; the export handles SiglipModel "
                         "checkpoints (model_type 'siglip', which the fixed-resolution SigLIP 2 ones also are)")
    model = transformers.AutoModel.from_pretrained(model_id, attn_implementation="eager").eval()
    return model, config


def checkpoint_file(model_id: str, name: str) -> Path | None:
    """A file of the checkpoint: from a local folder, else from the Hub; None if it has none."""
    local = Path(model_id)
    if local.is_dir():
        return local / name if (local / name).exists() else None
    from huggingface_hub import hf_hub_download

    try:
        from huggingface_hub.errors import EntryNotFoundError
    except ImportError:  # huggingface_hub < 0.23
        from huggingface_hub.utils import EntryNotFoundError

    try:
        return Path(hf_hub_download(model_id, name))
    except EntryNotFoundError:
        return None


def towers(model):
    import torch

    class Vision(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model.vision_model

        def forward(self, pixel_values):
            out = self.inner(pixel_values=pixel_values)
            return out.last_hidden_state, out.pooler_output

    class Text(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model.text_model

        def forward(self, input_ids):
            out = self.inner(input_ids=input_ids)
            return out.last_hidden_state, out.pooler_output

    return Vision().eval(), Text().eval()


def example(tower: str, config, batch: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    if tower == "vision":
        size = config.vision_config.image_size
        return torch.randn(batch, 3, size, size, generator=g)
    length = config.text_config.max_position_embeddings
    return torch.randint(0, config.text_config.vocab_size, (batch, length), generator=g)


def export_tower(module, tower: str, config, out: Path, opset: int, atol: float) -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    name = "pixel_values" if tower == "vision" else "input_ids"
    axes = {name: {0: "batch_size"} if tower == "vision" else {0: "batch_size", 1: "sequence_length"},
            "last_hidden_state": {0: "batch_size"} if tower == "vision" else {0: "batch_size", 1: "sequence_length"},
            "pooler_output": {0: "batch_size"}}
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example(tower, config, 2),), str(out), input_names=[name],
                          output_names=["last_hidden_state", "pooler_output"], dynamic_axes=axes,
                          opset_version=opset, do_constant_folding=True, dynamo=False)
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    outputs = [o.name for o in model.graph.output]
    inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    if inputs != [name] or outputs != ["last_hidden_state", "pooler_output"]:
        raise SystemExit(f"{out}: unexpected interface {inputs} -> {outputs}")
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = example(tower, config, batch, seed=batch)
        with torch.no_grad():
            want = module(x)[1].numpy()
        got = session.run(["pooler_output"], {name: x.numpy()})[0]
        diff = float(np.max(np.abs(got - want)))
        print(f"{tower} batch {batch}: pooler_output {tuple(got.shape)}, max |torch - onnxruntime| = {diff:.2e}")
        if got.shape != want.shape or diff > atol:
            raise SystemExit(f"{out}: ONNX Runtime disagrees with PyTorch (max diff {diff:.2e} > {atol})")


def write_folder_files(model, model_id: str, family: str, folder: Path) -> dict:
    """The checkpoint's tokenizer and preprocessor files as they are, and config.json plus the scale
    and bias. SigLIP 1 checkpoints that ship only spiece.model (no tokenizer.json) are refused."""
    for name in FOLDER_FILES:
        path = checkpoint_file(model_id, name)
        if path is None:
            if name == "special_tokens_map.json":
                continue
            raise SystemExit(f"{model_id} has no {name}; clipfn reads it from the folder")
        shutil.copyfile(path, folder / name)
    config = json.loads(checkpoint_file(model_id, "config.json").read_text())
    config["logit_scale"] = float(model.logit_scale.detach().reshape(-1)[0])
    config["logit_bias"] = float(model.logit_bias.detach().reshape(-1)[0])
    config["clipfn.family"], config["clipfn.source"] = family, model_id
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"config.json: logit_scale {config['logit_scale']:.6f} (exp {2.718281828459045 ** config['logit_scale']:.3f}),"
          f" logit_bias {config['logit_bias']:.6f}")
    return config


def features(out):
    """get_*_features' result: a tensor (transformers 4), or an output with pooler_output (5)."""
    return (out.pooler_output if hasattr(out, "pooler_output") else out).numpy()


def reference_module():
    sys.path.insert(0, str(REPO / "tools"))
    import siglip_reference

    return siglip_reference


def hf_inputs(processor, family: str, texts=None, images=None):
    """transformers' own preprocessing, as its SigLIP docs prescribe: padding="max_length" (64),
    and for SigLIP 2 the text lower-cased by the caller (the model was trained on lower-cased text)."""
    kwargs = {}
    if texts is not None:
        kwargs.update(text=[t.lower() for t in texts] if family == "siglip2" else texts, padding="max_length",
                      max_length=64, truncation=True)
    if images is not None:
        kwargs["images"] = images
    return processor(return_tensors="pt", **kwargs)


def parity_gates(model, model_id: str, family: str, folder: Path, photos: list[Path], config: dict) -> dict:
    import numpy as np
    import torch
    from transformers import AutoProcessor

    ref = reference_module()
    processor = AutoProcessor.from_pretrained(model_id)
    report = {}

    # texts: token ids, then embeddings (each text alone through the ONNX tower)
    ours = ref.TextSettings(str(folder)).encode(CHECK_TEXTS)
    theirs = hf_inputs(processor, family, texts=CHECK_TEXTS)["input_ids"].tolist()
    differ = [(t, a, b) for t, a, b in zip(CHECK_TEXTS, ours, theirs) if a != b]
    for t, a, b in differ:
        print(f"  token ids differ for {t!r}:\n    folder  {a}\n    transformers {b}")
    if differ:
        raise SystemExit(f"{len(differ)} of {len(CHECK_TEXTS)} texts tokenize differently from transformers'")
    onnx_text = np.array(ref.embed_texts(str(folder), "onnx/text_model.onnx", CHECK_TEXTS))
    with torch.no_grad():
        torch_text = features(model.get_text_features(input_ids=torch.tensor(theirs)))
    torch_text /= np.linalg.norm(torch_text, axis=1, keepdims=True)
    text_cos = np.sum(onnx_text * torch_text, axis=1)
    report["text_min_cosine"] = float(text_cos.min())

    # photos: the folder's SiglipImageProcessor path against transformers' processor + torch
    result = ref.embed_images(str(folder), "onnx/vision_model.onnx", [str(p) for p in photos])
    if result["errors"]:
        raise SystemExit(f"photos that did not decode: {result['errors']}")
    onnx_images = np.array([result["embeddings"][str(p)] for p in photos])
    images = [ref.load_rgb(str(p)) for p in photos]
    with torch.no_grad():
        pixels = hf_inputs(processor, family, images=images)["pixel_values"]
        torch_images = features(model.get_image_features(pixel_values=pixels))
        logits = model(input_ids=torch.tensor(theirs), pixel_values=pixels).logits_per_image.numpy()
    torch_images /= np.linalg.norm(torch_images, axis=1, keepdims=True)
    image_cos = np.sum(onnx_images * torch_images, axis=1)
    report["image_min_cosine"], report["image_mean_cosine"] = float(image_cos.min()), float(image_cos.mean())

    # scores from the folder's numbers against the model's own
    ours_p = ref.probabilities(onnx_images, onnx_text, config["logit_scale"], config["logit_bias"])
    theirs_p = 1 / (1 + np.exp(-logits))
    report["score_max_abs_diff"] = float(np.max(np.abs(ours_p - theirs_p)))
    print(f"parity: {len(photos)} photos cosine min {image_cos.min():.6f} mean {image_cos.mean():.6f}; "
          f"{len(CHECK_TEXTS)} texts cosine min {text_cos.min():.6f}; sigmoid scores max |diff| "
          f"{report['score_max_abs_diff']:.2e}")
    if image_cos.min() < 0.9999 or text_cos.min() < 0.9999 or report["score_max_abs_diff"] > 1e-4:
        raise SystemExit(f"the folder does not reproduce transformers' SigLIP: {report}")
    return report


def gate_labels(model, model_id: str, family: str):
    """Unit text embeddings of precision.py's zero-shot labels from this model's text tower."""
    import numpy as np
    import torch
    from export_clip_onnx import GATE_LABELS
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model_id)
    ids = hf_inputs(processor, family, texts=[f"a photo of a {label}." for label in GATE_LABELS])["input_ids"]
    with torch.no_grad():
        embeds = features(model.get_text_features(input_ids=ids))
    return embeds / np.linalg.norm(embeds, axis=1, keepdims=True)


def text_variants(folder: Path, precisions: list[str]) -> dict:
    """fp16 / int8 text towers, written only at cosine >= TEXT_GATES to fp32 on the check texts."""
    import numpy as np
    from export_clip_onnx import GATE_LABELS
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from precision import make_fp16

    ref = reference_module()
    texts = CHECK_TEXTS + [f"a photo of a {label}." for label in GATE_LABELS]
    fp32 = np.array(ref.embed_texts(str(folder), "onnx/text_model.onnx", texts))
    report = {}
    names = {"fp16": "onnx/text_model_fp16.onnx", "int8": "onnx/text_model_quantized.onnx"}
    for p in precisions:
        dst = folder / names[p]
        if p == "fp16":
            make_fp16(folder / "onnx/text_model.onnx", dst)
        else:
            quantize_dynamic(str(folder / "onnx/text_model.onnx"), str(dst), weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul", "Gemm"])
        cos = float(np.min(np.sum(fp32 * np.array(ref.embed_texts(str(folder), names[p], texts)), axis=1)))
        report[p] = {"min_cosine": cos, "gate": TEXT_GATES[p], "written": cos >= TEXT_GATES[p]}
        print(f"text {p}: min cosine to fp32 {cos:.6f} over {len(texts)} texts: "
              f"{'written' if cos >= TEXT_GATES[p] else 'NOT written'}")
        if cos < TEXT_GATES[p]:
            dst.unlink()
    return report


def export_siglip(args) -> int:
    """The whole folder; returns the exit status (non-zero when a precision variant failed its gate)."""
    family, folder, model_id = args.family, args.folder, args.model
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import precision

    model, config = load_checkpoint(model_id, family)
    (folder / "onnx").mkdir(parents=True, exist_ok=True)
    vision, text = towers(model)
    export_tower(vision, "vision", config, folder / "onnx" / "vision_model.onnx", args.opset, args.atol)
    export_tower(text, "text", config, folder / "onnx" / "text_model.onnx", args.opset, args.atol)
    folder_config = write_folder_files(model, model_id, family, folder)
    photos = sorted(args.photos.glob("*.jp*g")) if args.photos else precision.default_photos()
    report = {"model": model_id, "family": family, "parity": parity_gates(model, model_id, family, folder, photos,
                                                                        folder_config)}
    reduced = [p for p in args.precisions if p != "fp32"]
    status = 0
    if reduced:
        vision_report = precision.write_variants(folder, reduced, photos, gate_labels(model, model_id, family))
        report["vision_variants"] = vision_report
        report["text_variants"] = text_variants(folder, reduced)
        ok = all(v["chosen"] for v in vision_report["variants"].values()) and all(
            v["written"] for v in report["text_variants"].values())
        status = 0 if ok else 1
    (folder / "export_report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {folder}: {sorted(p.name for p in (folder / 'onnx').iterdir())}")
    return status
