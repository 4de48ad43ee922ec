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

  --kind text-test     small CLIP text tower (width 64, 2 layers, 4 heads, 3.3M
                       params, mostly the 49,408-token embedding) with an extra
                       "attention_mask" input, as Hugging Face exports have.
  --kind vit-b32-text  exactly CLIP ViT-B/32's text tower (12 layers, width 512,
                       8 heads, causal mask, pooled at the end token, projection
                       to 512; 63.4M params) for benchmark timings.

Image models: input "pixel_values" float32 [N,3,224,224] (dynamic N), output
"image_embeds" float32 [N,512]. Text models: input "input_ids" int64 [N,77]
(+ "attention_mask" int64 [N,77] for text-test), output "text_embeds" float32
[N,512]. All NOT L2-normalised, like CLIP's projection output; opset 17,
metadata_props "clipfn.model_id". Same seed -> same bytes.

  --kind text-multilingual  a small BERT-shaped multilingual text tower (width 64, 2 layers,
                       4 heads, vocabulary of the WordPiece trained here) standing in for
                       clip-ViT-B-32-multilingual-v1: input_ids + attention_mask [N, L] with a
                       dynamic L, mean pooling over the mask and a bias-free projection to
                       --dim (512) baked into the graph. Its tokenizer.json, a WordPiece with
                       BERT normalisation built with the `tokenizers` package from
                       tests/fixtures/multilingual.txt, is written beside it as
                       <out without .onnx>.tokenizer.json.

Usage: make_models.py --kind test|vit-b32|text-test|vit-b32-text|text-multilingual [--out PATH]
       [--seed N] [--dim D] [--check]
"""
import argparse
import hashlib
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
    "text-test": os.path.join(REPO, ".cache/models/clip-text-test.onnx"),
    "vit-b32-text": os.path.join(REPO, ".cache/models/vit-b32-text-random.onnx"),
    "text-multilingual": os.path.join(REPO, ".cache/models/multilingual-text-test.onnx"),
}
MODEL_ID = {"test": "clipfn-test-patchconv-v1", "vit-b32": "clip-vit-b32-random-v1",
            "text-test": "clipfn-text-test-v1", "vit-b32-text": "clip-vit-b32-text-random-v1",
            "text-multilingual": "clipfn-multilingual-text-test-v1"}


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


def build_test(g):
    """Patch conv 3->8 (16x16, stride 16) + tanh, flatten 8*14*14, linear -> 512."""
    # Weight scales: each conv output sums 768 normalised pixels, so std 1/sqrt(768)
    # keeps tanh mostly in its linear range; likewise 1/sqrt(1568) for the projection.
    w = g.randn("patch.weight", (8, 3, 16, 16), 1.0 / np.sqrt(3 * 16 * 16))
    b = g.randn("patch.bias", (8,), 0.1)
    x = g.op("Conv", ["pixel_values", w, b], kernel_shape=[16, 16], strides=[16, 16])
    x = g.op("Tanh", [x])
    x = g.op("Flatten", [x], axis=1)  # [N, 1568]: keeps position information
    w2 = g.randn("proj.weight", (8 * 14 * 14, 512), 1.0 / np.sqrt(8 * 14 * 14))
    b2 = g.randn("proj.bias", (512,), 0.1)
    return g.op("Add", [g.op("MatMul", [x, w2]), b2])


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


def io_specs(kind):
    """(graph inputs, output name) of a kind."""
    if kind not in TEXT_KINDS:
        return [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["N", 3, 224, 224])], "image_embeds"
    names = ["input_ids"] + (["attention_mask"] if TEXT_KINDS[kind].get("attention_mask") else [])
    return [helper.make_tensor_value_info(n, TensorProto.INT64, ["N", 77]) for n in names], "text_embeds"


def build(kind, seed):
    g = Graph(np.random.default_rng(seed))
    if kind in TEXT_KINDS:
        out = build_text(g, **TEXT_KINDS[kind])
    else:
        out = build_test(g) if kind == "test" else build_vit_b32(g)
    inputs, output = io_specs(kind)
    g.nodes.append(helper.make_node("Identity", [out], [output], name=output))
    graph = helper.make_graph(
        g.nodes, f"clipfn_{kind}", inputs,
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N", 512])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="clipfn-tools-make_models", producer_version="1")
    model.ir_version = 8  # readable by every ONNX Runtime >= 1.10
    meta = {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.seed": str(seed),
            "clipfn.input_size": "224", "clipfn.embedding_dim": "512",
            "clipfn.mean": "0.48145466,0.4578275,0.40821073",
            "clipfn.std": "0.26862954,0.26130258,0.27577711"}
    if kind in TEXT_KINDS:
        meta = {k: v for k, v in meta.items() if k.split(".")[1] not in ("input_size", "mean", "std")}
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


def check_feeds(sess):
    """A batch of 2: random pixels, or two different token sequences ending in the end token."""
    names = [i.name for i in sess.get_inputs()]
    if sess.get_inputs()[0].shape[1] == "L":  # the multilingual tower: [CLS] ... [SEP], ragged
        ids = np.array([[2, 40, 41, 3], [2, 50, 3, 0]], np.int64)
        return {"input_ids": ids, "attention_mask": np.array([[1, 1, 1, 1], [1, 1, 1, 0]], np.int64)}
    if names[0] != "input_ids":
        return {names[0]: np.random.default_rng(1).standard_normal((2, 3, 224, 224)).astype(np.float32)}
    ids = np.zeros((2, 77), np.int64)
    ids[0, :6] = [49406, 320, 1125, 539, 2368, 49407]  # "a photo of cat"
    ids[1, :6] = [49406, 320, 1125, 539, 1929, 49407]  # "a photo of dog"
    feeds = {"input_ids": ids}
    if "attention_mask" in names:
        feeds["attention_mask"] = (ids > 0).astype(np.int64)
    return feeds


def check(path):
    """Run a batch of 2 through ONNX Runtime; returns the output and the time."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feeds = check_feeds(sess)
    sess.run(None, feeds)  # warm-up
    t = time.perf_counter()
    (y,) = sess.run(None, feeds)
    dt = time.perf_counter() - t
    assert y.shape[0] == 2 and y.dtype == np.float32 and np.isfinite(y).all(), y.shape
    return y, dt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=list(DEFAULT_OUT), required=True)
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--check", action="store_true", help="run a batch of 2 with onnxruntime")
    ap.add_argument("--dim", type=int, default=512, help="text-multilingual: embedding size")
    a = ap.parse_args()
    out = os.path.abspath(a.out or DEFAULT_OUT[a.kind])
    os.makedirs(os.path.dirname(out), exist_ok=True)

    t0 = time.perf_counter()
    if a.kind == "text-multilingual":
        tokenizer = train_wordpiece()
        tokenizer.save(tokenizer_path(out))
        model, params = build_multilingual_model(a.seed, a.dim, tokenizer)
    else:
        model, params = build(a.kind, a.seed)
    onnx.checker.check_model(model, full_check=True)  # also infers shapes
    tmp = out + ".tmp"
    onnx.save_model(model, tmp)  # < 2 GB, so no external data needed
    os.replace(tmp, out)  # atomic: a crash never leaves a half-written model
    t_build = time.perf_counter() - t0
    sha = hashlib.sha256(open(out, "rb").read()).hexdigest()
    print(f"{a.kind}: {out}\n  params={params:,} size={os.path.getsize(out)/1e6:.1f} MB "
          f"sha256={sha[:16]} built in {t_build:.1f}s")
    if a.check:
        y, dt = check(out)
        cos = float(y[0] @ y[1] / np.linalg.norm(y[0]) / np.linalg.norm(y[1]))
        print(f"  onnxruntime: out {y.shape}, batch of 2 in {dt*1000:.1f} ms (1 thread), "
              f"|y0|={np.linalg.norm(y[0]):.3f} cos(y0,y1)={cos:.3f}")


if __name__ == "__main__":
    sys.exit(main())
