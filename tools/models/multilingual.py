"""The multilingual text tower (issue 14): a small BERT-shaped encoder standing in for
clip-ViT-B-32-multilingual-v1 (input_ids + attention_mask [N, L] with a dynamic L, mean pooling
over the mask, a bias-free projection to --dim baked into the graph), and the WordPiece
tokenizer.json it is paired with, built deterministically from the committed fixture text."""
import numpy as np
from onnx import TensorProto, helper

from .files import FIXTURE_TEXT
from .graph import Graph, learned_params, onnx_model, transformer

MODEL_ID = "clipfn-multilingual-text-test-v1"


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
    for line in open(FIXTURE_TEXT, encoding="utf-8"):
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
    model = onnx_model(g, inputs, [helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["N", out_dim])],
                       "clipfn_text-multilingual",
                       {"clipfn.model_id": MODEL_ID, "clipfn.seed": str(seed), "clipfn.embedding_dim": str(out_dim)})
    return model, learned_params(g)


def tokenizer_path(model_path):
    return model_path.removesuffix(".onnx") + ".tokenizer.json"
