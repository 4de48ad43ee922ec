"""CLIP text towers (input "input_ids" int64 [N,77], output "text_embeds" float32 [N,512]):
text-test, a small tower with an extra "attention_mask" input as Hugging Face exports have, for
the tests; vit-b32-text, exactly CLIP ViT-B/32's text tower, for benchmark timings."""
import importlib.util
import os

import numpy as np
from onnx import TensorProto, helper

from .graph import Graph, learned_params, onnx_model, transformer

MODEL_ID = {"text-test": "clipfn-text-test-v1", "vit-b32-text": "clip-vit-b32-text-random-v1"}


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
    model = onnx_model(
        g, [helper.make_tensor_value_info(n, TensorProto.INT64, ["N", 77]) for n in names],
        [helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["N", 512])],
        f"clipfn_{kind}".replace("-", "_"),
        {"clipfn.model_id": MODEL_ID[kind], "clipfn.kind": kind, "clipfn.seed": str(seed),
         "clipfn.embedding_dim": "512"})
    return model, learned_params(g)


def openai_clip():
    """openai-clip's package folder and its simple_tokenizer module (no torch needed)."""
    package = importlib.util.find_spec("clip").submodule_search_locations[0]
    spec = importlib.util.spec_from_file_location("simple_tokenizer", os.path.join(package, "simple_tokenizer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return package, module
