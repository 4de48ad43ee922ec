"""SigLIP / SigLIP 2-shaped models (issue 21): the test folders siglip2-test and siglip-test
(vision and text towers with fp16 / int8 variants, onnx/model.onnx with both towers and the
scoring, tokenizer and processor files, config.json), and siglip-base-vision, exactly SigLIP
base's vision tower in one file for the bench. The tokenizers live in siglip_tokenizers.py."""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper

from .files import fp16_variant, int8_variant, replace_folder, save, write_json
from .graph import Graph, learned_params, onnx_model
from .siglip_tokenizers import SIGLIP_CONTEXT, siglip_tokenizer_files

# Test folders in the transformers.js / Optimum layout of a SigLIP export (Xenova/siglip-*,
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


def build_siglip_bench(kind, seed):
    """A SIGLIP_BENCH vision tower alone: pixel_values -> last_hidden_state, pooler_output."""
    spec = SIGLIP_BENCH[kind]
    g = SiglipGraph(np.random.default_rng(seed))
    hidden, pooled = build_siglip_vision(g, **spec)
    g.nodes += [helper.make_node("Identity", [hidden], ["last_hidden_state"], name="last_hidden_state"),
                helper.make_node("Identity", [pooled], ["pooler_output"], name="pooler_output")]
    size, width, grid = spec["size"], spec["width"], spec["size"] // spec["patch"]
    f = TensorProto.FLOAT
    model = onnx_model(g, [helper.make_tensor_value_info("pixel_values", f, ["batch_size", 3, size, size])], [
        helper.make_tensor_value_info("last_hidden_state", f, ["batch_size", grid * grid, width]),
        helper.make_tensor_value_info("pooler_output", f, ["batch_size", width])],
        f"clipfn_{kind}".replace("-", "_"),
        {"clipfn.model_id": f"{kind}-random-v1", "clipfn.kind": kind, "clipfn.seed": str(seed),
         "clipfn.input_size": str(size), "clipfn.embedding_dim": str(width)})
    return model, learned_params(g)


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
    vision = onnx_model(gv, [pixels], [
        helper.make_tensor_value_info("last_hidden_state", f, ["batch_size", grid * grid, width]),
        helper.make_tensor_value_info("pooler_output", f, ["batch_size", width])],
        f"clipfn_{kind}_vision".replace("-", "_"), meta)
    gt.nodes += [helper.make_node("Identity", [t_hidden], ["last_hidden_state"], name="last_hidden_state"),
                 helper.make_node("Identity", [t_pooled], ["pooler_output"], name="pooler_output")]
    text = onnx_model(gt, [ids], [
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
    full = onnx_model(g, [ids, pixels], [
        helper.make_tensor_value_info("logits_per_image", f, ["image_batch_size", "text_batch_size"]),
        helper.make_tensor_value_info("logits_per_text", f, ["text_batch_size", "image_batch_size"]),
        helper.make_tensor_value_info("text_embeds", f, ["text_batch_size", width]),
        helper.make_tensor_value_info("image_embeds", f, ["image_batch_size", width])],
        f"clipfn_{kind}_full".replace("-", "_"), meta)
    params = {"vision": learned_params(gv), "text": learned_params(gt)}
    return vision, text, full, params


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
