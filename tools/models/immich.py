"""A CLIP model folder in Immich's model-cache layout, as Immich ML v2.5.6 reads it
(machine-learning/immich_ml/models/clip/ and base.py; no Immich model reaches this machine, so the
weights are the test towers' seeded random ones):

  config.json                  open_clip's model config (embed_dim, vision_cfg, text_cfg)
  visual/model.onnx            input "image" float32 [N,3,S,S] -> "embedding" float32 [N,512]
  visual/preprocess_cfg.json   open_clip's preprocessing (size, mode, mean, std, interpolation,
                               resize_mode, fill_color)
  textual/model.onnx           input "text" int32 [N,77] -> "embedding" float32 [N,512]
  textual/tokenizer.json       CLIP's BPE as Hugging Face's tokenizers writes it, built from the
                               openai-clip sdist's vocabulary (the one clipfn embeds)
  textual/tokenizer_config.json

The preprocessing is not CLIP's (another side, mean and std 0.5), so a reader that ignored
preprocess_cfg.json would answer other embeddings, or refuse the model's input size."""
import gzip
import os
import shutil

import numpy as np
from onnx import TensorProto, helper

from . import clip, clip_text
from .clip_text import openai_clip
from .files import move_folder, save, write_json
from .graph import Graph, onnx_model

SIDE = 192
MEAN = STD = [0.5, 0.5, 0.5]
CONTEXT = 77
TEXT = dict(width=64, layers=2, heads=4)


def visual(seed):
    """The test image tower at SIDE, its input and output named as Immich's exports name them."""
    model, _ = clip.build("test", seed, SIDE)
    rename(model.graph, {"pixel_values": "image", "image_embeds": "embedding"})
    return model


def textual(seed):
    """A small CLIP text tower taking Immich's int32 "text" ids."""
    g = Graph(np.random.default_rng(seed))
    g.nodes.append(helper.make_node("Cast", ["text"], ["input_ids"], to=TensorProto.INT64, name="text_ids"))
    out = clip_text.build_text(g, **TEXT)
    g.nodes.append(helper.make_node("Identity", [out], ["embedding"], name="embedding"))
    return onnx_model(g, [helper.make_tensor_value_info("text", TensorProto.INT32, ["N", CONTEXT])],
                      [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", 512])],
                      "immich_textual_test", {"clipfn.kind": "immich-clip-test", "clipfn.seed": str(seed)})


def rename(graph, names):
    """Renames graph inputs and outputs, and every node edge that uses them."""
    for value in list(graph.input) + list(graph.output):
        value.name = names.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]


def clip_tokenizer():
    """CLIP's BPE (openai-clip's simple_tokenizer.py) as a tokenizers.Tokenizer, in the shape of
    openai/clip-vit-base-patch32's tokenizer.json."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    package, module = openai_clip()
    lines = gzip.open(os.path.join(package, "bpe_simple_vocab_16e6.txt.gz")).read().decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1:49152 - 256 - 2 + 1]]
    symbols = list(module.bytes_to_unicode().values())
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(vocab)}, merges, unk_token="<|endoftext|>",
                                     end_of_word_suffix="</w>", continuing_subword_prefix="", fuse_unk=False))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"),
                             behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.post_processor = processors.RobertaProcessing(
        ("<|endoftext|>", len(vocab) - 1), ("<|startoftext|>", len(vocab) - 2), add_prefix_space=False,
        trim_offsets=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|startoftext|>", "<|endoftext|>"])
    return tokenizer


def write_folder(folder, seed):
    """Writes the folder beside `folder` and moves it into place; returns its two ONNX files."""
    tmp = folder + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    for part in ("visual", "textual"):
        os.makedirs(os.path.join(tmp, part))
    save(visual(seed), os.path.join(tmp, "visual/model.onnx"))
    save(textual(seed + 1), os.path.join(tmp, "textual/model.onnx"))
    write_json(os.path.join(tmp, "config.json"), {
        "embed_dim": 512,
        "vision_cfg": {"image_size": SIDE, "layers": 1, "width": 64, "patch_size": 16},
        "text_cfg": {"context_length": CONTEXT, "vocab_size": 49408, **TEXT}})
    write_json(os.path.join(tmp, "visual/preprocess_cfg.json"), {
        "size": [SIDE, SIDE], "mode": "RGB", "mean": MEAN, "std": STD, "interpolation": "bicubic",
        "resize_mode": "shortest", "fill_color": 0})
    clip_tokenizer().save(os.path.join(tmp, "textual/tokenizer.json"))
    write_json(os.path.join(tmp, "textual/tokenizer_config.json"), {
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "model_max_length": CONTEXT, "do_lower_case": True,
        "tokenizer_class": "CLIPTokenizer"})
    move_folder(tmp, folder)
    return [os.path.join(folder, part, "model.onnx") for part in ("visual", "textual")]


def check(folder, texts=("a photo of a cat", "Two DOGS,  running!", "의자 위의 고양이")):
    """The tokenizer.json gives openai-clip's own ids, and both towers run in ONNX Runtime."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    reference = openai_clip()[1].SimpleTokenizer()
    ours = Tokenizer.from_file(os.path.join(folder, "textual/tokenizer.json"))
    for text in texts:
        want = [49406] + reference.encode(text) + [49407]
        got = ours.encode(text).ids
        assert got == want, f"{text!r}: tokenizer.json gives {got}, openai-clip {want}"
    ids = np.full((2, CONTEXT), 49407, np.int32)
    ids[:, :4] = [[49406, 320, 2368, 49407], [49406, 320, 1929, 49407]]
    text = ort.InferenceSession(os.path.join(folder, "textual/model.onnx"), providers=["CPUExecutionProvider"])
    image = ort.InferenceSession(os.path.join(folder, "visual/model.onnx"), providers=["CPUExecutionProvider"])
    t = text.run(["embedding"], {"text": ids})[0]
    x = np.random.default_rng(1).standard_normal((2, 3, SIDE, SIDE)).astype(np.float32)
    v = image.run(["embedding"], {"image": x})[0]
    assert t.shape == v.shape == (2, 512) and np.isfinite(t).all() and np.isfinite(v).all()
    print(f"  tokenizer.json = openai-clip's ids on {len(texts)} texts; text {t.shape}, image {v.shape}")
