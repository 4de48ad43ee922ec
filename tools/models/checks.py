"""The --check self-tests of make_models.py: each written file is loaded and run in ONNX Runtime
(CPU, one thread), its outputs' names and shapes asserted, and a line of figures printed (timing,
cosines between variants and inputs) so that a reader can see the weights behave."""
import os
import time

import numpy as np
import onnx
from onnx import numpy_helper

from .siglip import SIGLIP_KINDS
from .siglip_tokenizers import SIGLIP_CONTEXT


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
        white = np.full((1, 3, size, size), 2.0, np.float32)  # above clip.WHITE_FLOOR everywhere
        try:
            sess.run(None, {"pixel_values": np.concatenate([x, white])})
        except Exception:  # onnxruntime raises its own Fail/RuntimeException types
            pass
        else:
            raise AssertionError("the poison model ran a batch holding a white photo")
    return y, dt


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


def check_siglip_bench(out):
    """The bench vision tower: Optimum's output names, and the time of one image after a warm-up."""
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
