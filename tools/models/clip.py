"""CLIP-shaped image towers (input "pixel_values" [N,3,S,S], output "image_embeds" [N,512]) and
their model folders:

  test         patch conv + tanh + flatten + projection: tiny, position- and colour-sensitive
  poison       the test model plus a Reshape that fails on a batch holding an all-white photo
  fixed-batch  the test model with batch dimension 1 (clipfn must refuse it at start-up)
  vit-b32      exactly CLIP ViT-B/32's image tower, for benchmark timings

`write_folder` writes any of them in the transformers.js / Optimum layout (fp32, fp16, int8 plus
preprocessor_config.json and config.json)."""
import json
import os
import shutil

import numpy as np
from onnx import TensorProto, helper

from .files import fp16_variant, int8_variant, replace_folder, save
from .graph import Graph, learned_params, onnx_model, transformer

MODEL_ID = {"test": "clipfn-test-patchconv-v1", "vit-b32": "clip-vit-b32-random-v1",
            "poison": "clipfn-test-poison-v1", "fixed-batch": "clipfn-test-fixed-batch-v1"}
# Normalised CLIP input of a pure white pixel is at least (1 - 0.4815) / 0.2686 = 1.93 in every
# channel; no real photo has every pixel above 1.9 (RGB >= 253).
WHITE_FLOOR = 1.9


def build_test(g, size=224, poison=False):
    """Patch conv 3->8 (16x16, stride 16) + tanh, flatten 8*G*G (G = size/16), linear -> 512."""
    # Weight scales: each conv output sums 768 normalised pixels, so std 1/sqrt(768)
    # keeps tanh mostly in its linear range; likewise 1/sqrt(1568) for the projection.
    w = g.randn("patch.weight", (8, 3, 16, 16), 1.0 / np.sqrt(3 * 16 * 16))
    b = g.randn("patch.bias", (8,), 0.1)
    x = g.op("Conv", ["pixel_values", w, b], kernel_shape=[16, 16], strides=[16, 16])
    x = g.op("Tanh", [x])
    x = g.op("Flatten", [x], axis=1)  # [N, 8*G*G]: keeps position information
    grid = size // 16
    if poison:
        x = poison_guard(g, x, 8 * grid * grid)
    w2 = g.randn("proj.weight", (8 * grid * grid, 512), 1.0 / np.sqrt(8 * grid * grid))
    b2 = g.randn("proj.bias", (512,), 0.1)
    return g.op("Add", [g.op("MatMul", [x, w2]), b2])


def poison_guard(g, x, width):
    """Reshape x [N, width] to [-1, width + k], k = 1 when some photo in the batch is all white:
    the identity for ordinary batches, a run-time shape error (N * width is never a multiple of
    width + 1 here) for a batch holding a white photo."""
    lowest = g.op("ReduceMin", ["pixel_values"], axes=[1, 2, 3], keepdims=0)  # [N]
    white = g.op("Cast", [g.op("Greater", [lowest, g.const("white_floor", np.array(WHITE_FLOOR, np.float32))])],
                 to=TensorProto.FLOAT)
    k = g.op("Cast", [g.op("ReduceMax", [white], keepdims=1)], to=TensorProto.INT64)  # [1]
    cols = g.op("Add", [g.const("guard_width", np.array([width], np.int64)), k])
    shape = g.op("Concat", [g.const("guard_rows", np.array([-1], np.int64)), cols], axis=0)
    return g.op("Reshape", [x, shape])


def build_vit_b32(g, width=768, layers=12, heads=12, patch=32, out_dim=512):
    """CLIP ViT-B/32 visual tower (openai/CLIP model.py VisionTransformer)."""
    grid = 224 // patch
    w = g.randn("conv1.weight", (width, 3, patch, patch), 0.02)
    x = g.op("Conv", ["pixel_values", w], kernel_shape=[patch, patch], strides=[patch, patch])
    x = g.op("Reshape", [x, g.const("shape_nc_hw", np.array([0, width, -1], np.int64))])
    x = g.op("Transpose", [x], perm=[0, 2, 1])  # [N, 49, 768]
    # class token, broadcast to [N, 1, 768] with the runtime batch size
    n = g.op("Slice", [g.op("Shape", [x]), g.const("i0", np.array([0], np.int64)),
                       g.const("i1", np.array([1], np.int64))])
    cls_shape = g.op("Concat", [n, g.const("one_width", np.array([1, width], np.int64))], axis=0)
    cls = g.op("Expand", [g.randn("class_embedding", (1, 1, width), 0.02), cls_shape])
    x = g.op("Concat", [cls, x], axis=1)  # [N, 50, 768]
    x = g.op("Add", [x, g.randn("positional_embedding", (grid * grid + 1, width), 0.02)])
    x = g.layernorm(x, "ln_pre", width)

    x = transformer(g, x, width, layers, heads)
    cls = g.op("Gather", [x, g.const("cls_index", np.array(0, np.int64))], axis=1)  # [N, 768]
    cls = g.layernorm(cls, "ln_post", width)
    return g.op("MatMul", [cls, g.randn("proj", (width, out_dim), width ** -0.5)])


def build(kind, seed, size=224):
    """An image kind: pixel_values float32 [N,3,size,size] -> image_embeds float32 [N,512]."""
    g = Graph(np.random.default_rng(seed))
    out = build_vit_b32(g) if kind == "vit-b32" else build_test(g, size, poison=kind == "poison")
    batch = 1 if kind == "fixed-batch" else "N"
    g.nodes.append(helper.make_node("Identity", [out], ["image_embeds"], name="image_embeds"))
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.seed": str(seed),
            "clipfn.input_size": str(size), "clipfn.embedding_dim": "512",
            "clipfn.mean": "0.48145466,0.4578275,0.40821073",
            "clipfn.std": "0.26862954,0.26130258,0.27577711"}
    model = onnx_model(
        g, [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, [batch, 512])],
        f"clipfn_{kind}".replace("-", "_"), meta)
    return model, learned_params(g)


def preprocessor_config(kind, size):
    """preprocessor_config.json as Hugging Face's CLIPImageProcessor writes it."""
    if kind == "clip":
        resize, crop, resample = {"shortest_edge": size}, size, 3
        mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    else:  # not CLIP's numbers anywhere: crop inside a larger resize, bilinear, SigLIP-style statistics
        resize, crop, resample, mean, std = {"shortest_edge": size + 16}, size, 2, [0.5] * 3, [0.5] * 3
    return {"crop_size": {"height": crop, "width": crop}, "do_center_crop": True, "do_convert_rgb": True,
            "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": mean,
            "image_processor_type": "CLIPImageProcessor", "image_std": std, "resample": resample,
            "rescale_factor": 1 / 255, "size": resize}


def write_folder(model, folder, kind, model_id, size, preprocess):
    """The transformers.js layout; written beside and renamed into place, so never half there."""
    tmp = folder + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(os.path.join(tmp, "onnx"))
    fp32 = os.path.join(tmp, "onnx/vision_model.onnx")
    save(model, fp32)
    save(fp16_variant(model), os.path.join(tmp, "onnx/vision_model_fp16.onnx"))
    int8_variant(fp32, os.path.join(tmp, "onnx/vision_model_quantized.onnx"))
    with open(os.path.join(tmp, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor_config(preprocess, size), f, indent=2)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump({"model_type": "clip", "clipfn.kind": kind, "clipfn.model_id": model_id,
                   "vision_config": {"image_size": size}, "projection_dim": 512}, f, indent=2)
    return replace_folder(tmp, folder)
