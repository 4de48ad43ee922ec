"""Writing models to disk, shared by every family: repository paths, atomic saves, the fp16 and
int8 variants a transformers.js / Optimum folder ships, and swapping a finished folder into place
(readers never see half a model or half a folder)."""
import json
import logging
import os
import shutil

import onnx

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS_DIR = os.path.join(REPO, ".cache/models")
# the committed fixture text: the multilingual WordPiece's and the SigLIP tokenizers' corpus
FIXTURE_TEXT = os.path.join(REPO, "tests/fixtures/multilingual.txt")


def save(model, out):
    tmp = out + ".tmp"
    onnx.save_model(model, tmp)  # < 2 GB, so no external data needed
    os.replace(tmp, out)  # atomic: a crash never leaves a half-written model


def move_folder(tmp, folder):
    """Moves the finished folder `tmp` to `folder`: readers never see half a folder."""
    if os.path.exists(folder):
        os.rename(folder, folder + ".old")
        os.rename(tmp, folder)
        shutil.rmtree(folder + ".old")
    else:
        os.rename(tmp, folder)


def replace_folder(tmp, folder):
    """`move_folder`, and the moved folder's onnx/ files."""
    move_folder(tmp, folder)
    return [os.path.join(folder, "onnx", n) for n in sorted(os.listdir(os.path.join(folder, "onnx")))]


def fp16_variant(model):
    """fp16 weights and arithmetic, float32 at the boundary (what transformers.js ships as _fp16)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(model, keep_io_types=True)


def int8_variant(src, dst):
    """Dynamic quantization of the MatMul weights to int8 (activations quantized at run time)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # its "consider pre-processing" advice
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"])


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")
