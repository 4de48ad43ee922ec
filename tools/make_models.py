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

  --kind siglip2-test / siglip-test  a SigLIP 2 / SigLIP 1-shaped model FOLDER (issue 21; see the
                       "SigLIP" section below and tools/README.md): onnx/vision_model.onnx
                       (pixel_values -> last_hidden_state, pooler_output), onnx/text_model.onnx
                       (input_ids -> last_hidden_state, pooler_output), their _fp16 and _quantized
                       variants, onnx/model.onnx (both towers + scoring, initialisers logit_scale and
                       logit_bias), tokenizer.json, tokenizer_config.json, special_tokens_map.json,
                       preprocessor_config.json (SiglipImageProcessor's), config.json (with
                       logit_scale and logit_bias unless --no-config-logits).
                       siglip2-test: 224/16, dim 128, Gemma-like BPE padded to 64 with <pad> = 0 by
                       tokenizer.json; siglip-test: 256/32, dim 96, T5-like Unigram, pad </s> = 1
                       and length 64 only in tokenizer_config.json, do_lower_case.
  --kind siglip-base-vision  exactly SigLIP base's vision tower (92.9M params), one file, for the
                       bench.

Usage: make_models.py --kind test|vit-b32|poison|fixed-batch|text-test|vit-b32-text|text-multilingual
                      [--out PATH | --folder DIR] [--size S] [--preprocess clip|other] [--seed N]
                      [--dim D] [--check]
       make_models.py --kind siglip2-test|siglip-test [--folder DIR] [--no-config-logits] [--seed N] [--check]
       make_models.py --kind siglip-base-vision [--out PATH] [--check]
"""
import argparse
import hashlib
import json
import logging
import os
import re
import shutil
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



def replace_folder(tmp, folder):
    """Moves the finished folder `tmp` to `folder` (readers never see half a folder) and returns
    its onnx/ files."""
    if os.path.exists(folder):
        os.rename(folder, folder + ".old")
        os.rename(tmp, folder)
        shutil.rmtree(folder + ".old")
    else:
        os.rename(tmp, folder)
    return [os.path.join(folder, "onnx", n) for n in sorted(os.listdir(os.path.join(folder, "onnx")))]

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
    return replace_folder(tmp, folder)


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


# SigLIP / SigLIP 2 model folders (issue 21) -----------------------------------------------------
# Folders in the transformers.js / Optimum layout of a SigLIP export (Xenova/siglip-*,
# onnx-community/siglip2-*): onnx/vision_model*.onnx, onnx/text_model*.onnx, onnx/model.onnx,
# tokenizer.json, tokenizer_config.json, special_tokens_map.json, preprocessor_config.json and
# config.json. The graphs follow transformers' modeling_siglip.py, shrunk:
#   vision  pixel_values [N,3,S,S] -> patch conv (stride P, bias) + position embedding (no class
#           token) -> blocks (LN, attention, LN, MLP with tanh-GELU; LN eps 1e-6) -> post LN =
#           last_hidden_state [N, (S/P)^2, W]; the "MAP" head: a learned probe [1,1,W] attends over
#           all tokens (multi-head), then LN + MLP with a residual -> pooler_output [N, W]
#   text    input_ids [N,L] (L <= 64, no attention_mask) -> token + position embedding ->
#           bidirectional blocks (no mask at all: padding takes part, as in SigLIP) -> final LN =
#           last_hidden_state [N,L,T]; the LAST position (index L-1, a pad token for short texts)
#           through a linear head -> pooler_output [N, W]
#   full    onnx/model.onnx: both towers in one graph plus SiglipModel's scoring, with the raw
#           learned parameters as initialisers "logit_scale" [1] and "logit_bias" [1]:
#           logits_per_text = exp(logit_scale) * unit(text) @ unit(image)^T + logit_bias
# Outputs come in Optimum's order: last_hidden_state first, pooler_output second; pooler_output
# is NOT L2-normalised (SiglipVisionModel / SiglipTextModel's pooler_output).
SIGLIP_CONTEXT = 64
SIGLIP_KINDS = {
    # SigLIP 2 style: Gemma-like byte-fallback BPE whose tokenizer.json pads to 64 with <pad> = 0
    "siglip2-test": dict(family="siglip2", size=224, patch=16, width=128, heads=4, layers=2,
                         text_width=64, text_heads=4, text_layers=2, qk_gain=1.5, text_qk_gain=5.0,
                         logit_scale=2.0, logit_bias=-1.25),
    # SigLIP 1 style: T5-like Unigram, </s> = 1 as pad, padding and lower-casing only in
    # tokenizer_config.json; another input size and dim, so nothing can pass by assuming 224 or 128
    "siglip-test": dict(family="siglip", size=256, patch=32, width=96, heads=4, layers=2,
                        text_width=64, text_heads=4, text_layers=2, qk_gain=1.5, text_qk_gain=5.0,
                        logit_scale=2.5, logit_bias=-3.5),
}
# For the bench only: exactly SigLIP base's vision tower (google/siglip-base-patch16-224 and
# siglip2-base-patch16-224: width 768, 12 layers, 12 heads, MLP 3072, patch 16 at 224, MAP head),
# written as one file; its outputs are meaningless, its timings are the real architecture's.
SIGLIP_BENCH = {"siglip-base-vision": dict(size=224, patch=16, width=768, heads=12, layers=12)}
# string.punctuation less "<", ">" and "/": the Replace step that google/siglip-base-patch16-224's
# tokenizer.json is reported to carry (the slow SiglipTokenizer strips all of string.punctuation)
SIGLIP_PUNCTUATION = "!\"#$%&'()*+,-.:;=?@[\\]^_`{|}~"
# ... as a character class escaping only what a class needs (\\ \] \[ \^ \-): Python's
# re.escape would also write \# \& \~, which the Rust regex engines need not accept
SIGLIP_PUNCTUATION_CLASS = r"""[!"#$%&'()*+,\-.:;=?@\[\\\]\^_`{|}~]"""


class SiglipGraph(Graph):
    """Graph with prefixed constant names, so that two towers can share one graph (model.onnx)."""

    def __init__(self, rng, prefix="", qk_gain=1.0):
        super().__init__(rng)
        self.prefix, self.qk_gain = prefix, qk_gain

    def const(self, name, arr):
        return super().const(self.prefix + name, arr)

    def shared(self, name, arr):
        """A constant made once per graph, however often it is asked for."""
        if self.prefix + name not in {t.name for t in self.inits}:
            self.const(name, arr)
        return self.prefix + name

    def op(self, op_type, inputs, **attrs):
        self.n += 1
        out = f"{self.prefix}{op_type.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def dense(self, x, name, d_in, d_out, std=None):
        """x @ W + b with W ~ N(0, 1/d_in): unit-scale activations, so the content of the input
        (not the biases and position embeddings every input shares) decides the output."""
        w = self.randn(f"{name}.weight", (d_in, d_out), std if std is not None else d_in ** -0.5)
        b = self.randn(f"{name}.bias", (d_out,), 0.02)
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def norm(self, x, name, d):
        g = self.const(f"{name}.weight", (1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32))
        b = self.randn(f"{name}.bias", (d,), 0.02)
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-6)

    def gelu_tanh(self, x):
        """gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); opset 17 has no Gelu."""
        c = self.shared("gelu.c", np.array(np.sqrt(2 / np.pi), np.float32))
        k = self.shared("gelu.k", np.array(0.044715, np.float32))
        half = self.shared("gelu.half", np.array(0.5, np.float32))
        one = self.shared("gelu.one", np.array(1.0, np.float32))
        cube = self.op("Mul", [self.op("Mul", [self.op("Mul", [x, x]), x]), k])
        t = self.op("Tanh", [self.op("Mul", [self.op("Add", [x, cube]), c])])
        return self.op("Mul", [self.op("Mul", [x, half]), self.op("Add", [one, t])])

    def attention(self, q_in, kv_in, name, width, heads):
        """Multi-head attention, separate q/k/v projections (as SiglipAttention), no mask."""
        hd = width // heads
        split = self.const(f"{name}.heads_shape", np.array([0, -1, heads, hd], np.int64))
        merge = self.const(f"{name}.merge_shape", np.array([0, -1, width], np.int64))
        scale = self.const(f"{name}.scale", np.array(hd ** -0.5, np.float32))
        std = self.qk_gain * width ** -0.5  # > 1/sqrt(width): sharper attention, more content-specific
        q = self.op("Transpose", [self.op("Reshape", [self.dense(q_in, f"{name}.q_proj", width, width, std), split])],
                    perm=[0, 2, 1, 3])
        k = self.op("Transpose", [self.op("Reshape", [self.dense(kv_in, f"{name}.k_proj", width, width, std), split])],
                    perm=[0, 2, 3, 1])
        v = self.op("Transpose", [self.op("Reshape", [self.dense(kv_in, f"{name}.v_proj", width, width), split])],
                    perm=[0, 2, 1, 3])
        att = self.op("Softmax", [self.op("Mul", [self.op("MatMul", [q, k]), scale])], axis=-1)
        o = self.op("Reshape", [self.op("Transpose", [self.op("MatMul", [att, v])], perm=[0, 2, 1, 3]), merge])
        return self.dense(o, f"{name}.out_proj", width, width)

    def mlp(self, x, name, width, hidden):
        return self.dense(self.gelu_tanh(self.dense(x, f"{name}.fc1", width, hidden)), f"{name}.fc2", hidden, width)

    def encoder(self, x, name, width, heads, layers):
        for i in range(layers):
            p = f"{name}.layers.{i}"
            h = self.norm(x, f"{p}.layer_norm1", width)
            x = self.op("Add", [x, self.attention(h, h, f"{p}.self_attn", width, heads)])
            x = self.op("Add", [x, self.mlp(self.norm(x, f"{p}.layer_norm2", width), f"{p}.mlp", width, 4 * width)])
        return x

    def batch_expand(self, t, like, shape_tail):
        """Expand t to [N, *shape_tail] with N = like's batch size."""
        n = self.op("Slice", [self.op("Shape", [like]), self.const("i0", np.array([0], np.int64)),
                              self.const("i1", np.array([1], np.int64))])
        return self.op("Expand", [t, self.op("Concat", [n, self.const(f"tail{len(shape_tail)}",
                                                                       np.array(shape_tail, np.int64))], axis=0)])


def build_siglip_vision(g, size, patch, width, heads, layers, **_):
    """pixel_values -> (last_hidden_state [N,T,W], pooler_output [N,W]) as SiglipVisionTransformer."""
    grid = size // patch
    w = g.randn("vision_model.embeddings.patch_embedding.weight", (width, 3, patch, patch), (3 * patch * patch) ** -0.5)
    b = g.randn("vision_model.embeddings.patch_embedding.bias", (width,), 0.02)
    x = g.op("Conv", ["pixel_values", w, b], kernel_shape=[patch, patch], strides=[patch, patch])
    x = g.op("Transpose", [g.op("Reshape", [x, g.const("nc_hw", np.array([0, width, -1], np.int64))])], perm=[0, 2, 1])
    x = g.op("Add", [x, g.randn("vision_model.embeddings.position_embedding.weight", (grid * grid, width), 0.2)])
    x = g.encoder(x, "vision_model.encoder", width, heads, layers)
    hidden = g.norm(x, "vision_model.post_layernorm", width)
    # MAP head (SiglipMultiheadAttentionPoolingHead): probe -> attention over the tokens -> LN -> MLP
    probe = g.batch_expand(g.randn("vision_model.head.probe", (1, 1, width), 1.0), hidden, [1, width])
    h = g.attention(probe, hidden, "vision_model.head.attention", width, heads)
    h = g.op("Add", [h, g.mlp(g.norm(h, "vision_model.head.layernorm", width), "vision_model.head.mlp", width, 4 * width)])
    pooled = g.op("Squeeze", [h, g.const("token_axis", np.array([1], np.int64))])
    return hidden, pooled


def build_siglip_text(g, vocab, width, text_width, text_heads, text_layers, **_):
    """input_ids [N,L] -> (last_hidden_state [N,L,T], pooler_output [N,W]) as SiglipTextTransformer:
    no attention mask, the last position pooled, a linear head to the shared embedding size."""
    t = text_width
    x = g.op("Gather", [g.randn("text_model.embeddings.token_embedding.weight", (vocab, t), 1.0), "input_ids"], axis=0)
    length = g.op("Slice", [g.op("Shape", ["input_ids"]), g.const("i1", np.array([1], np.int64)),
                            g.const("i2", np.array([2], np.int64))])
    positions = g.op("Slice", [g.randn("text_model.embeddings.position_embedding.weight", (SIGLIP_CONTEXT, t), 0.5),
                               g.const("zero", np.array([0], np.int64)), length])  # [L, T]: L <= 64
    x = g.op("Add", [x, positions])
    x = g.encoder(x, "text_model.encoder", t, text_heads, text_layers)
    hidden = g.norm(x, "text_model.final_layer_norm", t)
    last = g.op("Gather", [hidden, g.const("last", np.array(-1, np.int64))], axis=1)  # [N, T]
    return hidden, g.dense(last, "text_model.head", t, width)


def siglip_model(g, inputs, outputs, name, meta):
    graph = helper.make_graph(g.nodes, name, inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="clipfn-tools-make_models", producer_version="1")
    model.ir_version = 8
    helper.set_model_props(model, meta)
    return model


def siglip_params(g):
    return sum(int(np.prod(t.dims)) for t in g.inits if t.data_type == TensorProto.FLOAT and t.dims)


def build_siglip_bench(kind, seed):
    """A SIGLIP_BENCH vision tower alone: pixel_values -> last_hidden_state, pooler_output."""
    spec = SIGLIP_BENCH[kind]
    g = SiglipGraph(np.random.default_rng(seed))
    hidden, pooled = build_siglip_vision(g, **spec)
    g.nodes += [helper.make_node("Identity", [hidden], ["last_hidden_state"], name="last_hidden_state"),
                helper.make_node("Identity", [pooled], ["pooler_output"], name="pooler_output")]
    size, width, grid = spec["size"], spec["width"], spec["size"] // spec["patch"]
    f = TensorProto.FLOAT
    model = siglip_model(g, [helper.make_tensor_value_info("pixel_values", f, ["batch_size", 3, size, size])], [
        helper.make_tensor_value_info("last_hidden_state", f, ["batch_size", grid * grid, width]),
        helper.make_tensor_value_info("pooler_output", f, ["batch_size", width])],
        f"clipfn_{kind}".replace("-", "_"),
        {"clipfn.model_id": f"{kind}-random-v1", "clipfn.kind": kind, "clipfn.seed": str(seed),
         "clipfn.input_size": str(size), "clipfn.embedding_dim": str(width)})
    return model, siglip_params(g)


def build_siglip_towers(kind, seed, vocab):
    """(vision, text, full) ONNX models of a SigLIP kind. The full model holds the very same weights
    (the same seeds draw them) and the raw logit_scale / logit_bias."""
    spec = SIGLIP_KINDS[kind]
    size, width, grid = spec["size"], spec["width"], spec["size"] // spec["patch"]
    meta = {"clipfn.model_id": f"clipfn-{kind}-v1", "clipfn.kind": kind, "clipfn.seed": str(seed),
            "clipfn.family": spec["family"], "clipfn.embedding_dim": str(width)}
    f = TensorProto.FLOAT
    pixels = helper.make_tensor_value_info("pixel_values", f, ["batch_size", 3, size, size])
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"])

    def towers(prefix_v="", prefix_t=""):
        gv = SiglipGraph(np.random.default_rng(seed), prefix_v, spec.get("qk_gain", 1.0))
        gt = SiglipGraph(np.random.default_rng(seed + 1), prefix_t, spec.get("text_qk_gain", 1.0))
        return gv, build_siglip_vision(gv, **spec), gt, build_siglip_text(gt, vocab, **spec)

    gv, (v_hidden, v_pooled), gt, (t_hidden, t_pooled) = towers()
    gv.nodes += [helper.make_node("Identity", [v_hidden], ["last_hidden_state"], name="last_hidden_state"),
                 helper.make_node("Identity", [v_pooled], ["pooler_output"], name="pooler_output")]
    vision = siglip_model(gv, [pixels], [
        helper.make_tensor_value_info("last_hidden_state", f, ["batch_size", grid * grid, width]),
        helper.make_tensor_value_info("pooler_output", f, ["batch_size", width])],
        f"clipfn_{kind}_vision".replace("-", "_"), meta)
    gt.nodes += [helper.make_node("Identity", [t_hidden], ["last_hidden_state"], name="last_hidden_state"),
                 helper.make_node("Identity", [t_pooled], ["pooler_output"], name="pooler_output")]
    text = siglip_model(gt, [ids], [
        helper.make_tensor_value_info("last_hidden_state", f, ["batch_size", "sequence_length", spec["text_width"]]),
        helper.make_tensor_value_info("pooler_output", f, ["batch_size", width])],
        f"clipfn_{kind}_text".replace("-", "_"), meta)

    # model.onnx: both towers (prefixed names), then SiglipModel.forward's scoring
    gv, (_, v_pooled), gt, (_, t_pooled) = towers("v/", "t/")
    g = SiglipGraph(np.random.default_rng(0), "")
    g.nodes, g.inits = gv.nodes + gt.nodes, gv.inits + gt.inits
    scale = g.const("logit_scale", np.array([spec["logit_scale"]], np.float32))
    bias = g.const("logit_bias", np.array([spec["logit_bias"]], np.float32))

    def unit(x):
        norm = g.op("ReduceL2", [x], axes=[-1], keepdims=1)
        return g.op("Div", [x, norm])
    image_embeds, text_embeds = unit(v_pooled), unit(t_pooled)
    logits_text = g.op("Add", [g.op("Mul", [g.op("MatMul", [text_embeds, g.op("Transpose", [image_embeds], perm=[1, 0])]),
                                            g.op("Exp", [scale])]), bias])
    g.nodes += [helper.make_node("Identity", [logits_text], ["logits_per_text"], name="logits_per_text"),
                helper.make_node("Transpose", [logits_text], ["logits_per_image"], name="logits_per_image", perm=[1, 0]),
                helper.make_node("Identity", [text_embeds], ["text_embeds"], name="text_embeds"),
                helper.make_node("Identity", [image_embeds], ["image_embeds"], name="image_embeds")]
    full = siglip_model(g, [ids, pixels], [
        helper.make_tensor_value_info("logits_per_image", f, ["image_batch_size", "text_batch_size"]),
        helper.make_tensor_value_info("logits_per_text", f, ["text_batch_size", "image_batch_size"]),
        helper.make_tensor_value_info("text_embeds", f, ["text_batch_size", width]),
        helper.make_tensor_value_info("image_embeds", f, ["image_batch_size", width])],
        f"clipfn_{kind}_full".replace("-", "_"), meta)
    params = {"vision": siglip_params(gv), "text": siglip_params(gt)}
    return vision, text, full, params


# SigLIP tokenizers, built from the committed multilingual text (no training randomness) ------
def siglip_corpus_lines():
    return [line.rstrip("\n") for line in open(MULTILINGUAL_CORPUS, encoding="utf-8") if line.strip()]


def learn_bpe(words, max_merges=4000):
    """Plain BPE over a word -> count table: repeatedly merge the most frequent adjacent pair seen
    at least twice, ties broken by the pair itself (so the same corpus always gives the same
    merges; the package's BpeTrainer breaks ties in hash order)."""
    from collections import Counter

    table = {tuple(w): n for w, n in sorted(words.items())}
    merges = []
    for _ in range(max_merges):
        pairs = Counter()
        for symbols, n in table.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best, count = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if count < 2:
            break
        merges.append(best)
        merged = {}
        for symbols, n in table.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        table = merged
    return merges


SIGLIP2_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # Gemma's ids 0..4


def siglip2_tokenizer():
    """A Gemma-shaped tokenizer.json as SigLIP 2 ships it: spaces become "▁" in the normaliser (no
    dummy prefix, no pre-tokenizer), byte-fallback BPE (<0x00>..<0xFF> for anything unseen), no
    <bos>, <eos> = 1 appended, and the file's own truncation to 64 and padding to exactly 64 with
    <pad> = 0 on the right. The vocabulary is learned from the lower-cased fixture text: upper-case
    letters only come out right if the caller lower-cases (tokenizer_config.json's do_lower_case)."""
    from collections import Counter

    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

    words = Counter()
    for line in siglip_corpus_lines():
        words.update(re.findall(r"▁?[^▁]+|▁", line.lower().replace(" ", "▁")))
    merges = learn_bpe(words)
    chars = sorted({c for w in words for c in w})
    vocab = SIGLIP2_SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + chars
    for a, b in merges:
        if a + b not in vocab:
            vocab.append(a + b)
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(vocab)}, merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SIGLIP2_SPECIALS])
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="$A <eos>", pair="$A <eos> $B <eos>",
                                                       special_tokens=[("<eos>", 1)])
    tok.enable_truncation(SIGLIP_CONTEXT)
    tok.enable_padding(direction="right", pad_id=0, pad_token="<pad>", length=SIGLIP_CONTEXT)
    return tok


SIGLIP_SPECIALS = ["<pad>", "</s>", "<unk>"]  # T5's ids 0..2


def siglip_normalizer():
    from tokenizers import Regex, normalizers

    return normalizers.Sequence([
        normalizers.Replace(Regex(SIGLIP_PUNCTUATION_CLASS), ""),
        normalizers.Replace(Regex(r"\s+"), " "),
        normalizers.Strip(left=True, right=True),
        normalizers.NFKC(),  # stands in for the real file's Precompiled (nmt_nfkc) charsmap
        normalizers.Replace(Regex(" {2,}"), " "),
    ])


def siglip_tokenizer():
    """A T5-shaped Unigram tokenizer.json as SigLIP 1's: punctuation removed and whitespace
    collapsed in the normaliser, Metaspace (prefix "▁" always), "$A </s>" with </s> = 1, <unk> = 2,
    and NO padding or truncation in the file (SigLIP 1's come from tokenizer_config.json:
    pad_token "</s>", model_max_length 64, right side; and do_lower_case: the file does not
    lower-case and its vocabulary has no upper-case letters). Pieces: every character, and every
    substring of a "▁word" of the lower-cased fixture text seen at least twice, scored by its log
    frequency, so the Viterbi search has real choices to make."""
    from collections import Counter
    from math import log

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    normalizer = siglip_normalizer()
    counts = Counter()
    for line in siglip_corpus_lines():
        for word in normalizer.normalize_str(line.lower()).split(" "):
            w = "▁" + word
            for i in range(len(w)):
                for j in range(i + 1, min(len(w), i + 8) + 1):
                    counts[w[i:j]] += 1
    pieces = {p: n for p, n in counts.items() if len(p) == 1 or n >= 2}
    total = sum(pieces.values())
    scored = sorted(((p, log(n / total)) for p, n in pieces.items()), key=lambda ps: (-ps[1], ps[0]))
    vocab = [(t, 0.0) for t in SIGLIP_SPECIALS] + scored
    tok = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SIGLIP_SPECIALS])
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return tok


def added_tokens_decoder(specials, strip=()):
    return {str(i): {"content": t, "lstrip": t in strip, "normalized": False, "rstrip": t in strip,
                     "single_word": False, "special": True} for i, t in enumerate(specials)}


def siglip_tokenizer_files(family):
    """(tokenizer, tokenizer_config.json, special_tokens_map.json) of a family, as the hub's."""
    if family == "siglip2":
        config = {"add_bos_token": False, "add_eos_token": True,
                  "added_tokens_decoder": added_tokens_decoder(SIGLIP2_SPECIALS),
                  "bos_token": "<bos>", "clean_up_tokenization_spaces": False,
                  # written by transformers' SigLIP 2 conversion (GemmaTokenizerFast ignores it;
                  # transformers >= 5 lower-cases SigLIP 2 text in its Siglip2Tokenizer class)
                  "do_lower_case": True, "eos_token": "<eos>", "extra_special_tokens": {},
                  "mask_token": "<mask>", "model_input_names": ["input_ids"],
                  # Gemma's "no limit" figure, bigger than any u64: the 64 is in tokenizer.json
                  "model_max_length": 1000000000000000019884624838656,
                  "pad_token": "<pad>", "padding_side": "right", "processor_class": "SiglipProcessor",
                  "sp_model_kwargs": {}, "spaces_between_special_tokens": False,
                  "tokenizer_class": "GemmaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False}
        special = {"bos_token": "<bos>", "eos_token": "<eos>", "mask_token": "<mask>", "pad_token": "<pad>",
                   "unk_token": "<unk>"}
        return siglip2_tokenizer(), config, special
    config = {"added_tokens_decoder": added_tokens_decoder(SIGLIP_SPECIALS, strip=SIGLIP_SPECIALS[1:]),
              "additional_special_tokens": [], "clean_up_tokenization_spaces": True, "do_lower_case": True,
              "eos_token": "</s>", "model_input_names": ["input_ids"], "model_max_length": SIGLIP_CONTEXT,
              "pad_token": "</s>", "processor_class": "SiglipProcessor", "sp_model_kwargs": {},
              "tokenizer_class": "SiglipTokenizer", "unk_token": "<unk>"}  # no padding_side: right
    special = {"eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"}
    return siglip_tokenizer(), config, special


def siglip_preprocessor_config(size):
    """preprocessor_config.json as SiglipImageProcessor writes it: squash to size x size, bicubic,
    /255, mean and std 0.5, no centre crop."""
    return {"do_convert_rgb": None, "do_normalize": True, "do_rescale": True, "do_resize": True,
            "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "SiglipImageProcessor",
            "image_std": [0.5, 0.5, 0.5], "processor_class": "SiglipProcessor", "resample": 3,
            "rescale_factor": 1 / 255, "size": {"height": size, "width": size}}


def siglip_config(kind, vocab, logits_in_config):
    """config.json in transformers' nested layout, plus what infra/export_clip_onnx.py adds: the raw
    learned logit_scale and logit_bias (probability = sigmoid(exp(logit_scale) * cos + logit_bias))."""
    spec = SIGLIP_KINDS[kind]
    family, act = spec["family"], "gelu_pytorch_tanh"
    pad, eos = (0, 1) if family == "siglip2" else (1, 1)
    config = {
        "architectures": ["Siglip2Model" if family == "siglip2" else "SiglipModel"],
        "initializer_factor": 1.0, "model_type": family,
        "text_config": {"model_type": f"{family}_text_model", "hidden_size": spec["text_width"],
                        "intermediate_size": 4 * spec["text_width"], "num_attention_heads": spec["text_heads"],
                        "num_hidden_layers": spec["text_layers"], "max_position_embeddings": SIGLIP_CONTEXT,
                        "vocab_size": vocab, "projection_size": spec["width"], "pad_token_id": pad,
                        "eos_token_id": eos, "hidden_act": act, "layer_norm_eps": 1e-6},
        "vision_config": {"model_type": f"{family}_vision_model", "hidden_size": spec["width"],
                          "image_size": spec["size"], "patch_size": spec["patch"],
                          "intermediate_size": 4 * spec["width"], "num_attention_heads": spec["heads"],
                          "num_hidden_layers": spec["layers"], "num_channels": 3, "hidden_act": act,
                          "layer_norm_eps": 1e-6},
        "clipfn.kind": kind, "clipfn.model_id": f"clipfn-{kind}-v1",
    }
    if logits_in_config:
        config["logit_scale"], config["logit_bias"] = spec["logit_scale"], spec["logit_bias"]
    return config


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_siglip_folder(kind, folder, seed, logits_in_config=True, variants=True):
    """The whole folder, written beside and renamed into place. Returns (files, params)."""
    spec = SIGLIP_KINDS[kind]
    tokenizer, tok_config, special = siglip_tokenizer_files(spec["family"])
    vision, text, full, params = build_siglip_towers(kind, seed, tokenizer.get_vocab_size())
    for m in (vision, text, full):
        onnx.checker.check_model(m, full_check=True)
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "onnx"))
    for name, model in (("vision_model", vision), ("text_model", text)):
        fp32 = os.path.join(tmp, f"onnx/{name}.onnx")
        save(model, fp32)
        if variants:
            save(fp16_variant(model), os.path.join(tmp, f"onnx/{name}_fp16.onnx"))
            int8_variant(fp32, os.path.join(tmp, f"onnx/{name}_quantized.onnx"))
    save(full, os.path.join(tmp, "onnx/model.onnx"))
    tokenizer.save(os.path.join(tmp, "tokenizer.json"))
    write_json(os.path.join(tmp, "tokenizer_config.json"), tok_config)
    write_json(os.path.join(tmp, "special_tokens_map.json"), special)
    write_json(os.path.join(tmp, "preprocessor_config.json"), siglip_preprocessor_config(spec["size"]))
    write_json(os.path.join(tmp, "config.json"), siglip_config(kind, tokenizer.get_vocab_size(), logits_in_config))
    return replace_folder(tmp, folder), params


def check_siglip_folder(folder, kind):
    """Every file loads and runs in ONNX Runtime; outputs in Optimum's order with the right shapes;
    a text's embedding does not depend on its batch-mates; model.onnx agrees with the two towers
    and holds logit_scale / logit_bias. Prints what a reader should know about the weights."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    spec = SIGLIP_KINDS[kind]
    size, width, grid = spec["size"], spec["width"], spec["size"] // spec["patch"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    run = lambda f: ort.InferenceSession(os.path.join(folder, "onnx", f), opts, providers=["CPUExecutionProvider"])  # noqa: E731
    unit = lambda v: v / np.linalg.norm(v, axis=-1, keepdims=True)  # noqa: E731
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    if spec["family"] == "siglip":  # padding from tokenizer_config.json, as clipfn must do it
        tok.enable_truncation(SIGLIP_CONTEXT)
        tok.enable_padding(pad_id=1, pad_token="</s>", length=SIGLIP_CONTEXT)
    texts = ["a photo of the beach at sunset", "바다 일몰", "my dog playing in the snow " * 8]
    ids = np.array([e.ids for e in tok.encode_batch([t.lower() for t in texts])], np.int64)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, size, size)).astype(np.float32)
    images, words = {}, {}
    for f in sorted(os.listdir(os.path.join(folder, "onnx")), key=lambda f: (f == "model.onnx", f)):  # towers first
        sess = run(f)
        outs = [o.name for o in sess.get_outputs()]
        t = time.perf_counter()
        if f.startswith("vision_model"):
            assert outs == ["last_hidden_state", "pooler_output"], outs
            hidden, pooled = sess.run(None, {"pixel_values": x})
            assert hidden.shape == (2, grid * grid, width) and pooled.shape == (2, width), (hidden.shape, pooled.shape)
            images[f] = pooled
        elif f.startswith("text_model"):
            assert [i.name for i in sess.get_inputs()] == ["input_ids"] and outs == ["last_hidden_state", "pooler_output"]
            hidden, pooled = sess.run(None, {"input_ids": ids})
            assert hidden.shape == (3, SIGLIP_CONTEXT, spec["text_width"]) and pooled.shape == (3, width)
            alone = sess.run(None, {"input_ids": ids[1:2]})[1][0]
            mates = float(unit(alone) @ unit(pooled[1]))
            # int8 (dynamic quantization) takes each activation's range over the whole batch, so
            # its vectors move a little with the batch-mates; fp32 and fp16 must not move at all
            assert mates > (0.995 if "quantized" in f else 0.999999), f"{f}: alone vs in a batch, cosine {mates}"
            words[f] = pooled
        else:
            inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(os.path.join(folder, "onnx", f)).graph.initializer}
            assert inits["logit_scale"].shape == (1,) and inits["logit_bias"].shape == (1,)
            logits, _, text_embeds, image_embeds = sess.run(None, {"input_ids": ids, "pixel_values": x})
            want = np.exp(inits["logit_scale"][0]) * unit(words["text_model.onnx"]) @ unit(images["vision_model.onnx"]).T \
                + inits["logit_bias"][0]
            assert np.allclose(logits.T, want, atol=1e-4), "model.onnx disagrees with the two towers"
        dt = time.perf_counter() - t
        ref = images.get("vision_model.onnx") if f.startswith("vision") else words.get("text_model.onnx")
        if f.startswith(("vision", "text")):
            got = images.get(f) if f.startswith("vision") else words.get(f)
            cos = np.sum(unit(got) * unit(ref), axis=1)
            extra = f", alone vs in a batch {mates:.6f}" if f.startswith("text") else ""
            print(f"  {f}: outputs {outs}, {dt * 1000:.1f} ms (1 thread), cosine to fp32 {cos.min():.5f}{extra}")
        else:
            print(f"  {f}: logits_per_image {logits.T.shape}, logit_scale {inits['logit_scale'][0]}, "
                  f"logit_bias {inits['logit_bias'][0]}, {dt * 1000:.1f} ms")
    t = unit(words["text_model.onnx"])
    print(f"  text: cosine between the 3 texts {np.round(t @ t.T, 3)[np.triu_indices(3, 1)]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=list(MODEL_ID) + list(SIGLIP_KINDS) + list(SIGLIP_BENCH), required=True)
    ap.add_argument("--out")
    ap.add_argument("--folder", help="write a model folder (fp32, fp16, int8 + preprocessor_config.json)")
    ap.add_argument("--size", type=int, default=224, help="input side of the test kind (a multiple of 16)")
    ap.add_argument("--preprocess", choices=["clip", "other"], default="clip")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--check", action="store_true", help="run a batch of 2 with onnxruntime")
    ap.add_argument("--dim", type=int, default=512, help="text-multilingual: embedding size")
    ap.add_argument("--no-config-logits", action="store_true",
                    help="siglip kinds: leave logit_scale/logit_bias out of config.json (only onnx/model.onnx has them)")
    a = ap.parse_args()
    if a.kind in SIGLIP_KINDS:
        return main_siglip(ap, a)
    if a.kind in SIGLIP_BENCH:
        return main_siglip_bench(ap, a)
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


def main_siglip_bench(ap, a):
    if a.size != 224 or a.folder:
        ap.error(f"--kind {a.kind} writes one file (--out) at 224")
    out = os.path.abspath(a.out or os.path.join(REPO, ".cache/models", f"{a.kind}-random.onnx"))
    t0 = time.perf_counter()
    model, params = build_siglip_bench(a.kind, a.seed)
    onnx.checker.check_model(model)  # not full_check: shape inference on 370 MB is slow and adds nothing
    os.makedirs(os.path.dirname(out), exist_ok=True)
    save(model, out)
    print(f"{a.kind}: {out}\n  params={params:,} size={os.path.getsize(out) / 1e6:.1f} MB, "
          f"built in {time.perf_counter() - t0:.1f}s")
    if a.check:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(out, opts, providers=["CPUExecutionProvider"])
        assert [o.name for o in sess.get_outputs()] == ["last_hidden_state", "pooler_output"]
        x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
        sess.run(None, {"pixel_values": x})
        t = time.perf_counter()
        hidden, pooled = sess.run(None, {"pixel_values": x})
        print(f"  onnxruntime: last_hidden_state {hidden.shape}, pooler_output {pooled.shape}, "
              f"{(time.perf_counter() - t) * 1000:.0f} ms per image (1 thread)")


def main_siglip(ap, a):
    if a.size != 224 or a.preprocess != "clip" or a.out:
        ap.error(f"--kind {a.kind} writes a folder (--folder) with its own size; no --size, --preprocess or --out")
    folder = os.path.abspath(a.folder or os.path.join(REPO, ".cache/models", a.kind))
    t0 = time.perf_counter()
    outs, params = write_siglip_folder(a.kind, folder, a.seed, logits_in_config=not a.no_config_logits)
    t_build = time.perf_counter() - t0
    spec = SIGLIP_KINDS[a.kind]
    print(f"{a.kind}: {folder} (family {spec['family']}, {spec['size']}x{spec['size']}, patch {spec['patch']}, "
          f"dim {spec['width']}; params vision {params['vision']:,}, text {params['text']:,})")
    for out in outs:
        sha = hashlib.sha256(open(out, "rb").read()).hexdigest()
        print(f"  {os.path.relpath(out, folder)}: {os.path.getsize(out) / 1e6:.2f} MB sha256={sha[:16]}")
    if a.check:
        check_siglip_folder(folder, a.kind)
    print(f"  built in {t_build:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
