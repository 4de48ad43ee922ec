#!/usr/bin/env python3
"""Generate CLIP-shaped ONNX image encoders with seeded random weights.

No model hub is reachable from our machines, so the service is tested against
models built here from scratch with the `onnx` helpers (no torch):

  --kind test     tiny model (~0.8M params, a few ms/image on CPU) whose output
                  depends on *where* each colour is: a 16x16/stride-16 patch conv
                  (3->8 ch) + tanh, flattened (no global pooling) and projected
                  to 512. A wrong EXIF rotation, crop offset or RGB/BGR swap
                  therefore changes the embedding clearly.
  --kind vit-b32  exactly the CLIP ViT-B/32 image tower (87.8M params) for
                  realistic benchmark timings; its outputs are meaningless.
  --kind poison   the test model (same weights, same embeddings) plus a Reshape
                  whose target shape depends on the data: a batch holding an
                  all-white photo fails at run time, as a photo that trips a
                  model bug would. Tests that one bad photo costs only itself.
  --kind fixed-batch  the test model with its batch dimension fixed at 1, which
                  clipfn must refuse at start-up.

  --kind text-test     small CLIP text tower (width 64, 2 layers, 4 heads, 3.3M
                       params, mostly the 49,408-token embedding) with an extra
                       "attention_mask" input, as Hugging Face exports have.
  --kind vit-b32-text  exactly CLIP ViT-B/32's text tower (12 layers, width 512,
                       8 heads, causal mask, pooled at the end token, projection
                       to 512; 63.4M params) for benchmark timings.

Image models: input "pixel_values" float32 [N,3,S,S] (dynamic N; S = 224, or --size
for the test kind), output "image_embeds" float32 [N,512]. Text models: input
"input_ids" int64 [N,77] (+ "attention_mask" int64 [N,77] for text-test), output
"text_embeds" float32 [N,512]. All NOT L2-normalised, like CLIP's projection
output; opset 17, metadata_props "clipfn.model_id". Same seed -> same bytes.

--folder DIR writes a model folder in the transformers.js / Optimum layout
instead of one file: onnx/vision_model.onnx (fp32), onnx/vision_model_fp16.onnx
(fp16 weights, float32 inputs and outputs: cast at the boundary) and
onnx/vision_model_quantized.onnx (int8: ONNX Runtime's dynamic quantization of
the MatMul weights), plus preprocessor_config.json and config.json.
--preprocess clip writes CLIP's own constants; --preprocess other writes
non-CLIP ones (mean/std 0.5, bilinear, shortest edge S+16 then crop S), so
the service's preprocessing can be checked to follow the file.

  --kind text-multilingual  a small BERT-shaped multilingual text tower (width 64, 2 layers,
                       4 heads, vocabulary of the WordPiece trained here) standing in for
                       clip-ViT-B-32-multilingual-v1: input_ids + attention_mask [N, L] with a
                       dynamic L, mean pooling over the mask and a bias-free projection to
                       --dim (512) baked into the graph. Its tokenizer.json, a WordPiece with
                       BERT normalisation built with the `tokenizers` package from
                       tests/fixtures/multilingual.txt, is written beside it as
                       <out without .onnx>.tokenizer.json.


Usage: make_models.py --kind test|vit-b32|poison|fixed-batch|text-test|vit-b32-text|text-multilingual
                      [--out PATH | --folder DIR] [--size S] [--preprocess clip|other] [--seed N]
                      [--dim D] [--check]
"""
import argparse
import hashlib
import json
import logging
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = {
    "test": os.path.join(REPO, ".cache/models/clip-test.onnx"),
    "vit-b32": os.path.join(REPO, ".cache/models/vit-b32-random.onnx"),
    "poison": os.path.join(REPO, ".cache/models/clip-poison.onnx"),
    "fixed-batch": os.path.join(REPO, ".cache/models/clip-fixed-batch.onnx"),
    "text-test": os.path.join(REPO, ".cache/models/clip-text-test.onnx"),
    "vit-b32-text": os.path.join(REPO, ".cache/models/vit-b32-text-random.onnx"),
    "text-multilingual": os.path.join(REPO, ".cache/models/multilingual-text-test.onnx"),
}
MODEL_ID = {"test": "clipfn-test-patchconv-v1", "vit-b32": "clip-vit-b32-random-v1",
            "poison": "clipfn-test-poison-v1", "fixed-batch": "clipfn-test-fixed-batch-v1",
            "text-test": "clipfn-text-test-v1", "vit-b32-text": "clip-vit-b32-text-random-v1",
            "text-multilingual": "clipfn-multilingual-text-test-v1"}
# Normalised CLIP input of a pure white pixel is at least (1 - 0.4815) / 0.2686 = 1.93 in every
# channel; no real photo has every pixel above 1.9 (RGB >= 253).
WHITE_FLOOR = 1.9


class Graph:
    """Tiny builder: collects nodes/initializers and hands out unique names."""

    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def name(self, p):
        self.n += 1
        return f"{p}_{self.n}"

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.array(arr, order="C"), name))  # keeps 0-d
        return name

    def randn(self, name, shape, std):
        return self.const(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    # CLIP building blocks -------------------------------------------------
    def linear(self, x, prefix, d_in, d_out, std=0.02):
        w = self.randn(f"{prefix}.weight", (d_in, d_out), std)  # stored as W^T for MatMul
        b = self.const(f"{prefix}.bias", np.zeros(d_out, np.float32))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layernorm(self, x, prefix, d):
        g = self.const(f"{prefix}.weight", np.ones(d, np.float32))
        b = self.const(f"{prefix}.bias", np.zeros(d, np.float32))
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)


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


def transformer(g, x, width, layers, heads, mask=None):
    """CLIP's residual attention blocks (LN, MHA, LN, QuickGELU MLP); `mask` is added to the
    attention logits (the text tower's causal mask)."""
    hd = width // heads
    split = g.const("qkv_split", np.array([width] * 3, np.int64))
    heads_shape = g.const("heads_shape", np.array([0, 0, heads, hd], np.int64))
    merge_shape = g.const("merge_shape", np.array([0, 0, width], np.int64))
    scale = g.const("attn_scale", np.array(1.0 / np.sqrt(hd), np.float32))
    gelu_k = g.const("quickgelu_k", np.array(1.702, np.float32))
    for i in range(layers):
        p = f"transformer.resblocks.{i}"
        h = g.layernorm(x, f"{p}.ln_1", width)
        qkv = g.linear(h, f"{p}.attn.in_proj", width, 3 * width)
        q, k, v = (g.name("qkv") for _ in range(3))
        g.nodes.append(helper.make_node("Split", [qkv, split], [q, k, v], axis=-1))
        q = g.op("Transpose", [g.op("Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])  # N,H,L,D
        k = g.op("Transpose", [g.op("Reshape", [k, heads_shape])], perm=[0, 2, 3, 1])  # N,H,D,L
        v = g.op("Transpose", [g.op("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])
        logits = g.op("Mul", [g.op("MatMul", [q, k]), scale])
        if mask is not None:
            logits = g.op("Add", [logits, mask])
        att = g.op("Softmax", [logits], axis=-1)
        o = g.op("Transpose", [g.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
        o = g.linear(g.op("Reshape", [o, merge_shape]), f"{p}.attn.out_proj", width, width)
        x = g.op("Add", [x, o])
        h = g.layernorm(x, f"{p}.ln_2", width)
        h = g.linear(h, f"{p}.mlp.c_fc", width, 4 * width)
        h = g.op("Mul", [h, g.op("Sigmoid", [g.op("Mul", [h, gelu_k])])])  # QuickGELU
        h = g.linear(h, f"{p}.mlp.c_proj", 4 * width, width)
        x = g.op("Add", [x, h])
    return x


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


def build_text(g, width, layers, heads, out_dim=512, vocab=49408, context=77, attention_mask=False):
    """CLIP's text tower (openai/CLIP model.py encode_text): token + positional embedding,
    causal self-attention, ln_final, the features at the end token (the largest id, as
    `text.argmax(-1)`), projection. With `attention_mask`, padding keys are also masked
    additively, as Hugging Face exports do (under the causal mask it cannot change the result)."""
    x = g.op("Gather", [g.randn("token_embedding.weight", (vocab, width), 0.02), "input_ids"], axis=0)
    x = g.op("Add", [x, g.randn("positional_embedding", (context, width), 0.01)])  # [N, 77, W]
    mask = g.const("causal_mask", np.triu(np.full((context, context), -np.inf, np.float32), 1))
    if attention_mask:
        keep = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
        padding = g.op("Mul", [g.op("Sub", [g.const("one", np.array(1.0, np.float32)), keep]),
                               g.const("padding_logit", np.array(-1e4, np.float32))])
        padding = g.op("Unsqueeze", [padding, g.const("key_axes", np.array([1, 2], np.int64))])  # N,1,1,77
        mask = g.op("Add", [mask, padding])
    x = transformer(g, x, width, layers, heads, mask)
    x = g.layernorm(x, "ln_final", width)
    # x[arange(N), ids.argmax(-1)] as GatherElements with index [N, 1, W]
    end = g.op("ArgMax", [g.op("Cast", ["input_ids"], to=TensorProto.FLOAT)], axis=1, keepdims=1)  # N,1
    end = g.op("Unsqueeze", [end, g.const("last_axis", np.array([2], np.int64))])  # N,1,1
    n = g.op("Slice", [g.op("Shape", [x]), g.const("i0", np.array([0], np.int64)),
                       g.const("i1", np.array([1], np.int64))])
    end = g.op("Expand", [end, g.op("Concat", [n, g.const("one_width", np.array([1, width], np.int64))], axis=0)])
    x = g.op("Squeeze", [g.op("GatherElements", [x, end], axis=1), g.const("token_axis", np.array([1], np.int64))])
    return g.op("MatMul", [x, g.randn("text_projection", (width, out_dim), width ** -0.5)])


# Text towers: the small one for tests (with an attention_mask input, like Hugging Face
# exports), and the exact ViT-B/32 text architecture for the bench.
TEXT_KINDS = {
    "text-test": dict(width=64, layers=2, heads=4, attention_mask=True),
    "vit-b32-text": dict(width=512, layers=12, heads=8),
}


def build_text_model(kind, seed):
    """A text kind: input_ids (+ attention_mask) int64 [N, 77] -> text_embeds float32 [N, 512]."""
    g = Graph(np.random.default_rng(seed))
    out = build_text(g, **TEXT_KINDS[kind])
    g.nodes.append(helper.make_node("Identity", [out], ["text_embeds"], name="text_embeds"))
    names = ["input_ids"] + (["attention_mask"] if TEXT_KINDS[kind].get("attention_mask") else [])
    graph = helper.make_graph(
        g.nodes, f"clipfn_{kind}".replace("-", "_"),
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["N", 77]) for n in names],
        [helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["N", 512])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="clipfn-tools-make_models", producer_version="1")
    model.ir_version = 8
    helper.set_model_props(model, {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind,
                                   "clipfn.seed": str(seed), "clipfn.embedding_dim": "512"})
    params = sum(int(np.prod(t.dims)) for t in g.inits if t.data_type == TensorProto.FLOAT and t.dims)
    return model, params


def build(kind, seed, size=224):
    if kind in TEXT_KINDS:
        return build_text_model(kind, seed)
    g = Graph(np.random.default_rng(seed))
    out = build_vit_b32(g) if kind == "vit-b32" else build_test(g, size, poison=kind == "poison")
    batch = 1 if kind == "fixed-batch" else "N"
    g.nodes.append(helper.make_node("Identity", [out], ["image_embeds"], name="image_embeds"))
    graph = helper.make_graph(
        g.nodes, f"clipfn_{kind}".replace("-", "_"),
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, [batch, 512])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="clipfn-tools-make_models", producer_version="1")
    model.ir_version = 8  # readable by every ONNX Runtime >= 1.10
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.seed": str(seed),
            "clipfn.input_size": str(size), "clipfn.embedding_dim": "512",
            "clipfn.mean": "0.48145466,0.4578275,0.40821073",
            "clipfn.std": "0.26862954,0.26130258,0.27577711"}
    helper.set_model_props(model, meta)
    # learned tensors only: skip 0-d float constants (attention scale, QuickGELU 1.702)
    params = sum(int(np.prod(t.dims)) for t in g.inits if t.data_type == TensorProto.FLOAT and t.dims)
    return model, params


# Multilingual text tower (issue 14) -------------------------------------------------------------
MULTILINGUAL_CORPUS = os.path.join(REPO, "tests/fixtures/multilingual.txt")


def train_wordpiece(max_length=64):
    """A WordPiece tokenizer.json as multilingual DistilBERT's: BERT normalisation (CJK characters
    split, accents kept, so Hangul is not decomposed), [CLS] ... [SEP], its own truncation.
    The vocabulary is counted from the corpus with the package's own normaliser and
    pre-tokenizer: every character, alone and as a "##" continuation, then every word seen twice
    or more. (WordPieceTrainer breaks frequency ties in hash order: its vocabulary differs from
    run to run, and a test model must come out the same every time.)"""
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                            strip_accents=False, lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    words = Counter()
    for line in open(MULTILINGUAL_CORPUS, encoding="utf-8"):
        words.update(w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line)))
    chars = sorted({c for w in words for c in w})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + [f"##{c}" for c in chars]
    tokens += sorted(w for w, n in words.items() if n >= 2 and len(w) > 1)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = normalizer, pre_tokenizer, decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def build_multilingual(g, vocab, width=64, layers=2, heads=4, positions=512, out_dim=512):
    """Token + position embeddings, LayerNorm, encoder layers that attend to real tokens only,
    mean over the attention mask, then a bias-free projection, as sentence-transformers'
    Pooling + Dense layers; the graph's output is the final embedding."""
    ids, keep = "input_ids", g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)  # [N, L]
    x = g.op("Gather", [g.randn("word_embeddings.weight", (vocab, width), 0.5), ids], axis=0)
    length = g.op("Squeeze", [g.op("Slice", [g.op("Shape", [ids]), g.const("m_i1", np.array([1], np.int64)),
                                             g.const("m_i2", np.array([2], np.int64))]),
                              g.const("m_axis0", np.array([0], np.int64))])
    where = g.op("Range", [g.const("m_zero", np.array(0, np.int64)), length, g.const("m_step", np.array(1, np.int64))])
    x = g.op("Add", [x, g.op("Gather", [g.randn("position_embeddings.weight", (positions, width), 0.1), where],
                             axis=0)])
    x = g.layernorm(x, "embeddings.LayerNorm", width)
    padding = g.op("Mul", [g.op("Sub", [g.const("m_one", np.array(1.0, np.float32)), keep]),
                           g.const("m_padding_logit", np.array(-1e4, np.float32))])
    x = transformer(g, x, width, layers, heads, g.op("Unsqueeze", [padding, g.const("m_key_axes",
                                                                                   np.array([1, 2], np.int64))]))
    weights = g.op("Unsqueeze", [keep, g.const("m_last", np.array([2], np.int64))])  # N,L,1
    total = g.op("ReduceSum", [g.op("Mul", [x, weights]), g.const("m_tokens", np.array([1], np.int64))], keepdims=0)
    count = g.op("Max", [g.op("ReduceSum", [weights, g.const("m_tokens2", np.array([1], np.int64))], keepdims=0),
                         g.const("m_eps", np.array(1e-9, np.float32))])
    pooled = g.op("Div", [total, count])  # [N, W]
    return g.op("MatMul", [pooled, g.randn("dense.weight", (width, out_dim), width ** -0.5)])


def build_multilingual_model(seed, out_dim, tokenizer):
    g = Graph(np.random.default_rng(seed))
    out = build_multilingual(g, tokenizer.get_vocab_size(), out_dim=out_dim)
    g.nodes.append(helper.make_node("Identity", [out], ["text_embeds"], name="text_embeds"))
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["N", "L"]) for n in ("input_ids", "attention_mask")]
    graph = helper.make_graph(g.nodes, "clipfn_text-multilingual", inputs,
                              [helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["N", out_dim])],
                              initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="clipfn-tools-make_models", producer_version="1")
    model.ir_version = 8
    helper.set_model_props(model, {"clipfn.model_id": MODEL_ID["text-multilingual"], "clipfn.seed": str(seed),
                                   "clipfn.embedding_dim": str(out_dim)})
    return model, sum(int(np.prod(t.dims)) for t in g.inits if t.data_type == TensorProto.FLOAT and t.dims)


def tokenizer_path(model_path):
    return model_path.removesuffix(".onnx") + ".tokenizer.json"


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


def fp16_variant(model):
    """fp16 weights and arithmetic, float32 at the boundary (what transformers.js ships as _fp16)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(model, keep_io_types=True)


def int8_variant(src, dst):
    """Dynamic quantization of the MatMul weights to int8 (activations quantized at run time)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # its "consider pre-processing" advice
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"])


def save(model, out):
    tmp = out + ".tmp"
    onnx.save_model(model, tmp)  # < 2 GB, so no external data needed
    os.replace(tmp, out)  # atomic: a crash never leaves a half-written model


def write_folder(model, folder, kind, size, preprocess):
    """The transformers.js layout; written beside and renamed into place, so never half there."""
    tmp = folder + ".tmp"
    if os.path.exists(tmp):
        import shutil

        shutil.rmtree(tmp)
    os.makedirs(os.path.join(tmp, "onnx"))
    fp32 = os.path.join(tmp, "onnx/vision_model.onnx")
    save(model, fp32)
    save(fp16_variant(model), os.path.join(tmp, "onnx/vision_model_fp16.onnx"))
    int8_variant(fp32, os.path.join(tmp, "onnx/vision_model_quantized.onnx"))
    with open(os.path.join(tmp, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor_config(preprocess, size), f, indent=2)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump({"model_type": "clip", "clipfn.kind": kind, "clipfn.model_id": MODEL_ID[kind],
                   "vision_config": {"image_size": size}, "projection_dim": 512}, f, indent=2)
    if os.path.exists(folder):
        os.rename(folder, folder + ".old")
        os.rename(tmp, folder)
        import shutil

        shutil.rmtree(folder + ".old")
    else:
        os.rename(tmp, folder)
    return [os.path.join(folder, "onnx", n) for n in sorted(os.listdir(os.path.join(folder, "onnx")))]


def text_feeds(sess):
    """Two different token sequences ending in the end token."""
    if sess.get_inputs()[0].shape[1] == "L":  # the multilingual tower: [CLS] ... [SEP], ragged
        ids = np.array([[2, 40, 41, 3], [2, 50, 3, 0]], np.int64)
        return {"input_ids": ids, "attention_mask": np.array([[1, 1, 1, 1], [1, 1, 1, 0]], np.int64)}
    ids = np.zeros((2, 77), np.int64)
    ids[0, :6] = [49406, 320, 1125, 539, 2368, 49407]  # "a photo of cat"
    ids[1, :6] = [49406, 320, 1125, 539, 1929, 49407]  # "a photo of dog"
    feeds = {"input_ids": ids}
    if any(i.name == "attention_mask" for i in sess.get_inputs()):
        feeds["attention_mask"] = (ids > 0).astype(np.int64)
    return feeds


def check(path, size=224):
    """Run a batch of 2 (1 for fixed-batch) through ONNX Runtime; returns the output and the time."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    batch = sess.get_inputs()[0].shape[0]
    n = batch if isinstance(batch, int) else 2
    x = np.random.default_rng(1).standard_normal((n, 3, size, size)).astype(np.float32)
    feeds = text_feeds(sess) if sess.get_inputs()[0].name == "input_ids" else {"pixel_values": x}
    sess.run(None, feeds)  # warm-up
    t = time.perf_counter()
    (y,) = sess.run(None, feeds)
    dt = time.perf_counter() - t
    assert y.shape[0] == n and y.dtype == np.float32 and np.isfinite(y).all(), y.shape
    if sess.get_modelmeta().custom_metadata_map.get("clipfn.kind") == "poison":
        white = np.full((1, 3, size, size), 2.0, np.float32)  # above WHITE_FLOOR everywhere
        try:
            sess.run(None, {"pixel_values": np.concatenate([x, white])})
        except Exception:  # onnxruntime raises its own Fail/RuntimeException types
            pass
        else:
            raise AssertionError("the poison model ran a batch holding a white photo")
    return y, dt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=list(MODEL_ID), required=True)
    ap.add_argument("--out")
    ap.add_argument("--folder", help="write a model folder (fp32, fp16, int8 + preprocessor_config.json)")
    ap.add_argument("--size", type=int, default=224, help="input side of the test kind (a multiple of 16)")
    ap.add_argument("--preprocess", choices=["clip", "other"], default="clip")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--check", action="store_true", help="run a batch of 2 with onnxruntime")
    ap.add_argument("--dim", type=int, default=512, help="text-multilingual: embedding size")
    a = ap.parse_args()
    if a.size != 224 and (a.kind == "vit-b32" or a.size % 16):
        ap.error("--size: only the test kind takes another size, a multiple of 16")

    t0 = time.perf_counter()
    if a.kind == "text-multilingual":
        tokenizer = train_wordpiece()
        tokenizer.save(tokenizer_path(os.path.abspath(a.out or DEFAULT_OUT[a.kind])))
        model, params = build_multilingual_model(a.seed, a.dim, tokenizer)
    else:
        model, params = build(a.kind, a.seed, a.size)
    onnx.checker.check_model(model, full_check=True)  # also infers shapes
    if a.folder:
        outs = write_folder(model, os.path.abspath(a.folder), a.kind, a.size, a.preprocess)
    else:
        out = os.path.abspath(a.out or DEFAULT_OUT[a.kind])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        save(model, out)
        outs = [out]
    t_build = time.perf_counter() - t0
    for out in outs:
        sha = hashlib.sha256(open(out, "rb").read()).hexdigest()
        print(f"{a.kind}: {out}\n  params={params:,} size={os.path.getsize(out)/1e6:.1f} MB "
              f"sha256={sha[:16]}")
        if a.check:
            y, dt = check(out, a.size)
            cos = float(y[0] @ y[-1] / np.linalg.norm(y[0]) / np.linalg.norm(y[-1]))
            print(f"  onnxruntime: out {y.shape}, batch of {len(y)} in {dt*1000:.1f} ms (1 thread), "
                  f"|y0|={np.linalg.norm(y[0]):.3f} cos(y0,y_last)={cos:.3f}")
    print(f"  built in {t_build:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
