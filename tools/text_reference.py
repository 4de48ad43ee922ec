#!/usr/bin/env python3
"""Reference CLIP text side: OpenAI's own tokenizer, ONNX Runtime, NumPy scoring.

The oracle the Rust service's text path is compared against. The tokenizer is
`clip/simple_tokenizer.py` from PyPI's openai-clip 1.0.1 (with its vocabulary),
loaded by path: the package's __init__ imports torch, which we do not install.
Context 77, truncation as clip.tokenize(truncate=True): cut to 77, last = end.

With --tokenizer T (a Hugging Face tokenizer.json), texts are tokenized by the Python
`tokenizers` package instead, with the file's own truncation and no padding, and `embed` runs
each text alone at its own length (input_ids + attention_mask of ones): what a padded batch
gives must not differ.

Usage (JSON on stdin, JSON on stdout):
  text_reference.py tokens [--tokenizer T]            ["text", ...]  -> [[ids...], ...]  (unpadded)
  text_reference.py embed --model M [--tokenizer T]   ["text", ...]  -> [[dim floats], ...]  (L2-normalised)
  text_reference.py classify          {"images": [[f]], "prompts": [[[f]]] (label x template),
                                       "top_k": K}
                                      -> [[{"label": i, "score": s}, ...], ...]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the models package, from any directory
from models.clip_text import openai_clip  # noqa: E402

CONTEXT = 77
EOT = 49407
LOGIT_SCALE = 100.0


def reference_tokenizer():
    return openai_clip()[1].SimpleTokenizer()


def tokenize(texts):
    tok = reference_tokenizer()
    sot, eot = tok.encoder["<|startoftext|>"], tok.encoder["<|endoftext|>"]
    rows = []
    for text in texts:
        ids = [sot] + tok.encode(text) + [eot]
        if len(ids) > CONTEXT:
            ids = ids[:CONTEXT]
            ids[-1] = eot
        rows.append(ids)
    return rows


def tokenize_json(texts, path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_padding()
    return [e.ids for e in tok.encode_batch(texts)]


def embed_json(texts, model, path):
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    out = []
    for row in tokenize_json(texts, path):
        ids = np.array([row], np.int64)
        (y,) = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        out.append(y[0])
    return unit(np.array(out, np.float64)).tolist()


def unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def embed(texts, model):
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ids = np.zeros((len(texts), CONTEXT), np.int64)
    for i, row in enumerate(tokenize(texts)):
        ids[i, : len(row)] = row
    feeds = {"input_ids": ids}
    if any(i.name == "attention_mask" for i in session.get_inputs()):
        last_end = CONTEXT - 1 - (ids[:, ::-1] == EOT).argmax(axis=1)  # 1 up to the last end token
        feeds["attention_mask"] = (np.arange(CONTEXT)[None, :] <= last_end[:, None]).astype(np.int64)
    (out,) = session.run(None, feeds)
    return unit(out.astype(np.float64)).tolist()


def classify(request):
    """CLIP's zero-shot recipe: label = unit(mean of unit prompt embeddings); softmax(100 * cos)."""
    images = unit(np.array(request["images"], np.float64))
    labels = unit(np.array([unit(np.array(p, np.float64)).mean(axis=0) for p in request["prompts"]]))
    logits = LOGIT_SCALE * images @ labels.T
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    out = []
    for row in probs:
        order = np.argsort(-row, kind="stable")[: request["top_k"]]
        out.append([{"label": int(i), "score": float(row[i])} for i in order])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["tokens", "embed", "classify"])
    ap.add_argument("--model")
    ap.add_argument("--tokenizer")
    a = ap.parse_args()
    request = json.load(sys.stdin)
    if a.command == "tokens":
        result = tokenize_json(request, a.tokenizer) if a.tokenizer else tokenize(request)
    elif a.command == "embed":
        result = embed_json(request, a.model, a.tokenizer) if a.tokenizer else embed(request, a.model)
    else:
        result = classify(request)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
