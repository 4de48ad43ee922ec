#!/usr/bin/env python3
"""Reference SigLIP / SigLIP 2 embeddings and scores for a model folder (issue 21).

The oracle clipfn's SigLIP path is compared against. Everything comes from the folder
(transformers.js / Optimum layout: onnx/vision_model.onnx, onnx/text_model.onnx, tokenizer.json,
tokenizer_config.json, preprocessor_config.json, config.json, optionally onnx/model.onnx):

Photos: Pillow opens the file, ImageOps.exif_transpose, convert("RGB") (alpha dropped, as
  tools/reference.py and clipfn do; transformers' own convert_to_rgb would composite RGBA onto
  white), then transformers' SiglipImageProcessor (4.57, numpy + Pillow, no torch) built from the
  folder's preprocessor_config.json: resize to exactly size.height x size.width with `resample`
  (3 = bicubic; Pillow, antialiased), no crop, x rescale_factor (1/255), (x - mean) / std, NCHW.
  ONNX Runtime on the vision file, output `pooler_output` (by name; else the one [N, dim]
  output), L2-normalised.
Texts: the Python `tokenizers` package on tokenizer.json, with the settings clipfn must honour:
  1. lower-case first (str.lower) when tokenizer_config.json has "do_lower_case": true;
  2. padding: tokenizer.json's own "padding" when it has one (SigLIP 2: Fixed 64, pad id 0,
     right); otherwise (SigLIP 1, whose tokenizer.json has none) from tokenizer_config.json:
     pad id = the id of its "pad_token" ("</s>" = 1), length = its "model_max_length" (64),
     side = its "padding_side", "right" when absent (transformers' default);
  3. truncation: tokenizer.json's own "truncation" when it has one, else to that same length
     (the template's "</s>" / "<eos>" stays last);
  A folder where neither file gives a fixed length is refused: a last-token-pooled model needs one.
  Each text then runs ALONE (a batch of 1, input_ids only): its vector must not depend on others.
  ONNX Runtime on the text file, `pooler_output`, L2-normalised.
Scores: probability = sigmoid(exp(logit_scale) * cos + logit_bias) per label, on its own (they do
  not sum to 1), with logit_scale / logit_bias (the raw learned parameters) from config.json, else
  from the initialisers "logit_scale" / "logit_bias" of onnx/model.onnx, else refused. A label's
  vector is the unit mean of its prompts' unit vectors (as text_reference.py does for CLIP).

Usage (texts and requests: JSON on stdin; everything: JSON on stdout):
  siglip_reference.py images --folder F [--file onnx/vision_model.onnx] PATH...
        -> {"embeddings": {path: [dim floats]}, "model": file, "errors": {path: message}}
  siglip_reference.py tokens --folder F [--unpadded]   ["text", ...]
        -> [[ids...], ...]  (padded and truncated as the model is fed: 64 ids each)
  siglip_reference.py embed --folder F [--file onnx/text_model.onnx]   ["text", ...]
        -> [[dim floats], ...]
  siglip_reference.py classify --folder F [--logit-scale S --logit-bias B]
        {"images": [[f]], "prompts": [[[f]]] (label x template), "top_k": K}
        -> [[{"label": i, "score": p}, ...], ...]  (best first, at most K)
  siglip_reference.py scores --folder F   {"images": [[f]], "texts": [[f]]}
        -> {"logit_scale", "logit_bias", "logits_from", "probabilities": [[p]] (image x text)}
  siglip_reference.py info --folder F     -> what the folder says, and where each value came from
  siglip_reference.py corpus              -> >= 1000 strings (fixture lines, Korean, mixes, edge
        cases), the same every run, for the token-id equality test
Unreadable photos go to "errors" (exit status 0), as in reference.py.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BATCH = 16


def read_json(folder, name):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def session(path):
    import onnxruntime as ort

    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def embedding_output(sess):
    """pooler_output by name (image_embeds / text_embeds first, as clipfn prefers), else the only
    [N, dim] output."""
    outputs = sess.get_outputs()
    for name in ("image_embeds", "text_embeds", "pooler_output"):
        if any(o.name == name for o in outputs):
            return name
    two_d = [o.name for o in outputs if len(o.shape) == 2]
    if len(two_d) != 1:
        raise SystemExit(f"no embedding output among {[o.name for o in outputs]}")
    return two_d[0]


def unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# Photos -----------------------------------------------------------------------------------------
def image_processor(folder):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # not "None of PyTorch ... found"
    from transformers import SiglipImageProcessor

    config = read_json(folder, "preprocessor_config.json")
    if config is None:
        raise SystemExit(f"{folder}: no preprocessor_config.json")
    if config.get("do_center_crop"):
        raise SystemExit(f"{folder}/preprocessor_config.json: a centre crop is not SigLIP's preprocessing")
    keys = ("do_resize", "size", "resample", "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std")
    return SiglipImageProcessor(**{k: config[k] for k in keys if k in config})


def load_rgb(path):
    from PIL import Image, ImageOps

    sys.path.insert(0, HERE)
    import reference  # noqa: F401  (registers the HEIF opener, as for CLIP)

    with Image.open(path) as im:
        return ImageOps.exif_transpose(im).convert("RGB")


def embed_images(folder, file, paths):
    processor = image_processor(folder)
    model = os.path.join(folder, file)
    sess = session(model)
    inp, out = sess.get_inputs()[0].name, embedding_output(sess)
    embeddings, errors, ok = {}, {}, []
    for p in paths:
        try:
            ok.append((p, processor(load_rgb(p), return_tensors="np")["pixel_values"][0]))
        except Exception as e:  # noqa: BLE001 - every decode failure is reported
            errors[p] = f"{type(e).__name__}: {e}"
    for i in range(0, len(ok), BATCH):
        chunk = ok[i:i + BATCH]
        (y,) = sess.run([out], {inp: np.stack([x for _, x in chunk]).astype(np.float32)})
        for (p, _), v in zip(chunk, unit(y.astype(np.float64))):
            embeddings[p] = [float(f) for f in v]
    return {"embeddings": embeddings, "model": model, "errors": errors}


# Texts ------------------------------------------------------------------------------------------
class TextSettings:
    """tokenizer.json plus what tokenizer_config.json adds; each value remembers its source."""

    def __init__(self, folder):
        from tokenizers import Tokenizer

        path = os.path.join(folder, "tokenizer.json")
        raw = read_json(folder, "tokenizer.json")
        if raw is None:
            raise SystemExit(f"{folder}: no tokenizer.json")
        config = read_json(folder, "tokenizer_config.json") or {}
        self.tokenizer = Tokenizer.from_file(path)
        self.lower = bool(config.get("do_lower_case", False))
        padding, truncation = raw.get("padding"), raw.get("truncation")
        limit = config.get("model_max_length")
        limit = limit if isinstance(limit, int) and 0 < limit <= 1 << 20 else None  # Gemma's 1e30: no limit
        if padding:
            strategy = padding.get("strategy")
            if not (isinstance(strategy, dict) and "Fixed" in strategy):
                raise SystemExit(f"{path}: padding strategy {strategy!r} is not a fixed length")
            self.length, self.pad_id, self.pad_token = strategy["Fixed"], padding["pad_id"], padding["pad_token"]
            self.side, self.padding_from = padding.get("direction", "Right").lower(), "tokenizer.json"
        else:
            pad_token = config.get("pad_token")
            pad_token = pad_token.get("content") if isinstance(pad_token, dict) else pad_token
            pad_id = self.tokenizer.token_to_id(pad_token) if pad_token else None
            if pad_id is None or limit is None:
                raise SystemExit(f"{folder}: no fixed padding in tokenizer.json, and tokenizer_config.json gives "
                                 f"pad_token={pad_token!r}, model_max_length={config.get('model_max_length')!r}")
            self.length, self.pad_id, self.pad_token = limit, pad_id, pad_token
            self.side, self.padding_from = config.get("padding_side", "right"), "tokenizer_config.json"
        if truncation:
            self.truncation, self.truncation_from = truncation["max_length"], "tokenizer.json"
        else:
            self.truncation, self.truncation_from = self.length, self.padding_from
        self.tokenizer.enable_truncation(self.truncation)
        self.tokenizer.enable_padding(direction=self.side, pad_id=self.pad_id, pad_token=self.pad_token,
                                      length=self.length)

    def encode(self, texts, padded=True):
        if not padded:
            self.tokenizer.no_padding()
        texts = [t.lower() if self.lower else t for t in texts]
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def describe(self):
        return {"do_lower_case": self.lower, "pad_id": self.pad_id, "pad_token": self.pad_token,
                "length": self.length, "side": self.side, "padding_from": self.padding_from,
                "truncation": self.truncation, "truncation_from": self.truncation_from}


def embed_texts(folder, file, texts):
    rows = TextSettings(folder).encode(texts)
    sess = session(os.path.join(folder, file))
    out = embedding_output(sess)
    vectors = [sess.run([out], {"input_ids": np.array([row], np.int64)})[0][0] for row in rows]
    return unit(np.array(vectors, np.float64)).tolist()


# Scores -----------------------------------------------------------------------------------------
def logits(folder, scale=None, bias=None):
    """(logit_scale, logit_bias, where from): config.json, else onnx/model.onnx's initialisers."""
    if scale is not None and bias is not None:
        return float(scale), float(bias), "command line"
    config = read_json(folder, "config.json") or {}
    if isinstance(config.get("logit_scale"), (int, float)) and isinstance(config.get("logit_bias"), (int, float)):
        return float(config["logit_scale"]), float(config["logit_bias"]), "config.json"
    full = os.path.join(folder, "onnx", "model.onnx")
    if os.path.exists(full):
        import onnx
        from onnx import numpy_helper

        inits = {i.name: i for i in onnx.load(full, load_external_data=False).graph.initializer
                 if i.name in ("logit_scale", "logit_bias")}
        if len(inits) == 2:
            values = [float(numpy_helper.to_array(inits[n]).reshape(-1)[0]) for n in ("logit_scale", "logit_bias")]
            return values[0], values[1], "onnx/model.onnx"
    raise SystemExit(f"{folder}: no logit_scale/logit_bias in config.json nor in onnx/model.onnx's initialisers")


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def probabilities(images, texts, scale, bias):
    return sigmoid(math.exp(scale) * unit(np.asarray(images, np.float64)) @ unit(np.asarray(texts, np.float64)).T + bias)


def classify(request, scale, bias):
    labels = unit(np.array([unit(np.array(p, np.float64)).mean(axis=0) for p in request["prompts"]]))
    out = []
    for row in probabilities(request["images"], labels, scale, bias):
        order = np.argsort(-row, kind="stable")[: request["top_k"]]
        out.append([{"label": int(i), "score": float(row[i])} for i in order])
    return out


def info(folder):
    config = read_json(folder, "config.json") or {}
    pre = read_json(folder, "preprocessor_config.json") or {}
    try:
        scale, bias, source = logits(folder)
    except SystemExit as e:
        scale = bias = None
        source = str(e)
    return {"family": config.get("model_type"), "logit_scale": scale, "logit_bias": bias, "logits_from": source,
            "preprocessing": {k: pre.get(k) for k in ("size", "resample", "rescale_factor", "image_mean", "image_std",
                                                     "do_center_crop")},
            "text": TextSettings(folder).describe() if os.path.exists(os.path.join(folder, "tokenizer.json")) else None,
            "files": sorted(os.listdir(os.path.join(folder, "onnx")))}


# Corpus -----------------------------------------------------------------------------------------
def corpus():
    """>= 1000 distinct strings, the same every run: the fixture text line by line and recased,
    lines joined in pairs, Korean (syllables, jamo, mixed scripts), punctuation SigLIP 1 strips,
    whitespace of every kind, literal special-token strings, and texts longer than 64 tokens."""
    import unicodedata

    lines = [l.rstrip("\n") for l in open(os.path.join(REPO, "tests/fixtures/multilingual.txt"), encoding="utf-8")
             if l.strip()]
    rng = np.random.default_rng(21)
    out = []
    for line in lines:
        out += [line, line.upper(), line.title(), line.swapcase(), f"A photo of {line}.", f"  {line}\t\n",
                unicodedata.normalize("NFD", line)]
    for i, a in enumerate(lines):
        for sep in (" ", ", ", " / ", "!!! ", "\u3000"):
            out.append(a + sep + lines[(i * 7 + 3) % len(lines)])
    for _ in range(150):  # random Hangul syllables, words of 1-4, and mixed with fixture words
        words = ["".join(chr(0xAC00 + int(c)) for c in rng.integers(0, 11172, rng.integers(1, 5)))
                 for _ in range(rng.integers(1, 6))]
        out.append(" ".join(words))
        out.append(f"{lines[int(rng.integers(len(lines)))]} {words[0]}")
    out += ["ㅋㅋㅋ", "ㅎㅎ", "ㄱㄴㄷ", "한국어 텍스트", "서울 Seoul 서울", "사진-001.jpg", "강아지!!!", "고양이?",
            "\u1100\u1161\u11a8", "ｶﾀｶﾅ", "（テスト）", "°C", "½", "Ⅻ", "ﬁ", "İstanbul", "ΣΑΣ", "Straße"]
    out += ["", " ", "   ", "\n", "\t", "\u00a0", "\u3000", "!!!", "...", "?!", "N/A", "a/b", "<b>bold</b>",
            "a<b>c", "rock'n'roll", "e-mail", "snake_case", "100%", "$5", "#hashtag", "@user", "(parens)", "[x]",
            "{}", "~", "^_^", ":-)", "|", "\\", "</s>", "<pad>", "<unk>", "<eos>", "<bos>", "a photo of </s>",
            "<pad><pad>", "▁", "▁▁x", "😀", "🏖️", "👨‍👩‍👧", "🇰🇷", "👍🏽", "❤️ 사랑", "x" * 300, "바다 " * 100,
            " ".join(lines), "the " * 70, "a" * 64, "ab " * 63]
    out += [lines[i % len(lines)] + " " + str(n) for i, n in enumerate(range(0, 1000, 7))]
    seen, unique = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    assert len(unique) >= 1000, len(unique)
    return unique


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["images", "tokens", "embed", "classify", "scores", "info", "corpus"])
    ap.add_argument("--folder", help="the model folder")
    ap.add_argument("--file", help="ONNX file in the folder (default onnx/vision_model.onnx, onnx/text_model.onnx)")
    ap.add_argument("--unpadded", action="store_true", help="tokens: without the padding")
    ap.add_argument("--logit-scale", type=float, help="classify/scores: instead of the folder's")
    ap.add_argument("--logit-bias", type=float, help="classify/scores: instead of the folder's")
    ap.add_argument("paths", nargs="*", help="images: photo files")
    a = ap.parse_intermixed_args()
    if a.command == "corpus":
        result = corpus()
    elif not a.folder:
        ap.error("--folder is required")
    elif a.command == "images":
        if not a.paths:
            ap.error("images: at least one PATH")
        sys.path.insert(0, HERE)
        from reference import expand

        result = embed_images(a.folder, a.file or "onnx/vision_model.onnx", expand(a.paths))
        for p, e in result["errors"].items():
            print(f"siglip_reference.py: {p}: {e}", file=sys.stderr)
    elif a.command == "info":
        result = info(a.folder)
    else:
        request = json.load(sys.stdin)
        if a.command == "tokens":
            result = TextSettings(a.folder).encode(request, padded=not a.unpadded)
        elif a.command == "embed":
            result = embed_texts(a.folder, a.file or "onnx/text_model.onnx", request)
        else:
            scale, bias, source = logits(a.folder, a.logit_scale, a.logit_bias)
            if a.command == "classify":
                result = classify(request, scale, bias)
            else:
                result = {"logit_scale": scale, "logit_bias": bias, "logits_from": source,
                          "probabilities": probabilities(request["images"], request["texts"], scale, bias).tolist()}
    json.dump(result, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    sys.exit(main())
