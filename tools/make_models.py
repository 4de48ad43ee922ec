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

  --kind head / head-flat / head-wrong-dim / head-two-outputs  score heads (CLIPFN_HEADS), graphs
                       on the L2-normalised embedding, input "embedding" float32 [N, dim]:
                       head: [N,512] -> "score" [N,1] (MatMul + Add); head-flat: [N,512] -> "score"
                       [N] (+ Sigmoid, Squeeze; other weights); head-wrong-dim: [N,256] -> [N,1] (a
                       512-dim model refuses it); head-two-outputs: [N,512] -> "score", "aux" (refused:
                       one output only). --check runs a batch of 3 unit vectors.

  --kind faces-scrfd-test / faces-yunet-test  a face model FOLDER (issue 29; tools/README.md "Face
                       models"): detection/model.onnx (SCRFD-shaped: "input.1" [1,3,640,640] -> 9
                       outputs score_8.. [1,n,1], bbox_8.. [1,n,4], kps_8.. [1,n,10], 2 anchors per
                       cell; or YuNet-shaped: "input" [1,3,640,640] BGR 0-255 -> 12 outputs cls_8..,
                       obj_8.., bbox_8.., kps_8.., 1 anchor per cell) and recognition/model.onnx
                       (ArcFace-shaped: "input.1" [N,3,112,112] -> "683" [N,512], not normalised).
                       The detectors are tuned on the camera photos to find a few "faces" each;
                       faces-scrfd-drawn / faces-yunet-drawn find the faces draw_faces.py draws, as
                       does faces-yolov5-face-drawn, YOLOv5-face-shaped: "input" [1,3,640,640] RGB / 255
                       (centred on grey 114) -> "output" [1,25200,16] (export_cat's decoded rows).
  --kind faces-buffalo-random  a face model FOLDER with InsightFace buffalo_l's architectures and seeded
                       random weights, for the bench (tools/models/face_archs.py): detection/model.onnx
                       SCRFD-10G as det_10g.onnx (4.2M params, 13.3 GMACs at 640x640), its score biases
                       set for a few faces a camera photo; recognition/model.onnx IResNet-50 as
                       w600k_r50.onnx (43.6M params, 6.3 GMACs, 174 MB). Same layout as above.
  --kind face-detector-bad / face-recognizer-bad  one file each, refused at start-up: a detector
                       with 7 outputs (neither format), a recognizer taking [N,3,96,96].

  --kind dlib-recognizer  the one kind with REAL weights (issue 35): dlib's face-recognition ResNet
                       (CC0) rebuilt from the tfjs weights in @vladmandic/face-api's model/ folder
                       (--weights DIR: face_recognition_model-weights_manifest.json + .bin; fetched
                       by tools/setup-real-faces.sh, never committed; tools/models/dlib_recognizer.py).
                       Input "input" [N,3,150,150] raw RGB 0-255, (x - mean) / --input-scale in the
                       graph (255: face-api's, the default; 256: dlib's own); output "embedding"
                       [N,128], not normalised. metadata_props clipfn.face_format=dlib.
  --kind immich-clip-test  a CLIP folder in Immich's model-cache layout (issue 39; tools/models/immich.py):
                       visual/model.onnx ("image", side 192) + open_clip's preprocess_cfg.json (mean and
                       std 0.5), textual/model.onnx ("text" int32) + CLIP's BPE as tokenizer.json.

  --kind objects-yolo-drawn  an object detector FOLDER in ultralytics' YOLOv8 / YOLO11 ONNX export format
                       (tools/models/objects.py; tools/README.md "Drawn objects"): model.onnx ("images"
                       [N,3,640,640] RGB / 255 on a centred grey 114 letterbox -> "output0" [N,7,16384]:
                       rows cx, cy, w, h in canvas pixels, then the 3 class scores, already sigmoid) +
                       classes.txt (red, green, blue, one a line). It finds the saturated squares
                       tools/draw_objects.py draws: 128 x 128 cells of 5 px, scores from a cell's mean
                       colour (red = clip(R - max(G, B), 0, 1), ...), each cell's box the run of cells of
                       its colour along its row and column, so a square aligned to the cells is one box
                       after NMS and a photo of cells of alternating colours gives 16,384 detections.
                       Post-processing (clipfn's): best class per anchor, score >= 0.25, class-aware NMS
                       at IoU 0.7, boxes mapped back through the letterbox.
  --kind objects-bad / objects-classes-mismatch  FOLDERs refused at start-up: a model.onnx with outputs
                       [1,7] and [1,3,3] (no format); objects-yolo-drawn's model.onnx with a classes.txt
                       of 2 lines (the model has 3 classes).

Usage: make_models.py --kind test|vit-b32|poison|fixed-batch|text-test|vit-b32-text|text-multilingual
                      [--out PATH | --folder DIR] [--size S] [--preprocess clip|other] [--seed N]
                      [--dim D] [--check]
       make_models.py --kind siglip2-test|siglip-test [--folder DIR] [--no-config-logits] [--seed N] [--check]
       make_models.py --kind siglip-base-vision [--out PATH] [--check]
       make_models.py --kind head|head-flat|head-wrong-dim|head-two-outputs [--out PATH] [--seed N] [--check]
       make_models.py --kind faces-scrfd-test|faces-yunet-test|faces-scrfd-drawn|faces-yunet-drawn|
                      faces-yolov5-face-drawn|faces-buffalo-random [--folder DIR] [--seed N] [--check]
       make_models.py --kind face-detector-bad|face-recognizer-bad [--out PATH] [--seed N] [--check]
       make_models.py --kind immich-clip-test --folder DIR [--seed N] [--check]
       make_models.py --kind objects-yolo-drawn|objects-bad|objects-classes-mismatch [--folder DIR] [--check]
       make_models.py --kind dlib-recognizer --weights DIR [--input-scale 255|256] [--out PATH] [--check]

Code: this file is the command line only; each family has its own module under tools/models/
(graph.py the ONNX builder shared by all, files.py saving and fp16/int8 variants, clip.py the
image kinds and --folder, clip_text.py, multilingual.py, siglip.py + siglip_tokenizers.py,
heads.py the score heads and their --check, faces.py the face models and their --check,
face_archs.py buffalo_l's face architectures, dlib_recognizer.py the real-weight dlib recognizer,
objects.py the YOLO-format object detectors and their --check, checks.py the other --check runs).
"""
import argparse
import hashlib
import os
import sys
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the models package, from any directory
from models import (  # noqa: E402
    checks, clip, clip_text, dlib_recognizer, face_archs, faces, heads, immich, multilingual, objects, siglip)
from models.files import MODELS_DIR, save  # noqa: E402

DEFAULT_OUT = {
    "test": os.path.join(MODELS_DIR, "clip-test.onnx"),
    "vit-b32": os.path.join(MODELS_DIR, "vit-b32-random.onnx"),
    "poison": os.path.join(MODELS_DIR, "clip-poison.onnx"),
    "fixed-batch": os.path.join(MODELS_DIR, "clip-fixed-batch.onnx"),
    "text-test": os.path.join(MODELS_DIR, "clip-text-test.onnx"),
    "vit-b32-text": os.path.join(MODELS_DIR, "vit-b32-text-random.onnx"),
    "text-multilingual": os.path.join(MODELS_DIR, "multilingual-text-test.onnx"),
}
# A CLIP folder in Immich's model-cache layout (tools/models/immich.py).
IMMICH = "immich-clip-test"
MODEL_ID = {**clip.MODEL_ID, **clip_text.MODEL_ID, "text-multilingual": multilingual.MODEL_ID}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=list(MODEL_ID) + list(siglip.SIGLIP_KINDS) + list(siglip.SIGLIP_BENCH)
                    + list(heads.HEAD_KINDS) + list(faces.FACE_FOLDERS) + list(face_archs.KINDS) + list(faces.FACE_FILES)
                    + list(objects.OBJECT_KINDS) + [IMMICH, "dlib-recognizer"], required=True)
    ap.add_argument("--out")
    ap.add_argument("--folder", help="write a model folder (fp32, fp16, int8 + preprocessor_config.json)")
    ap.add_argument("--size", type=int, default=224, help="input side of the test kind (a multiple of 16)")
    ap.add_argument("--preprocess", choices=["clip", "other"], default="clip")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--check", action="store_true", help="run a batch of 2 with onnxruntime")
    ap.add_argument("--dim", type=int, default=512, help="text-multilingual: embedding size")
    ap.add_argument("--no-config-logits", action="store_true",
                    help="siglip kinds: leave logit_scale/logit_bias out of config.json (only onnx/model.onnx has them)")
    ap.add_argument("--weights", help="dlib-recognizer: face-api's model folder (manifest + .bin)")
    ap.add_argument("--input-scale", type=int, choices=[255, 256], default=255,
                    help="dlib-recognizer: divisor after the mean (255 face-api's, 256 dlib's)")
    a = ap.parse_args()
    if a.kind == "dlib-recognizer":
        return main_dlib(ap, a)
    if a.weights or a.input_scale != 255:
        ap.error("--weights and --input-scale are for --kind dlib-recognizer")
    if a.kind in siglip.SIGLIP_KINDS:
        return main_siglip(ap, a)
    if a.kind in siglip.SIGLIP_BENCH:
        return main_siglip_bench(ap, a)
    if a.kind in heads.HEAD_KINDS:
        return main_head(ap, a)
    if a.kind in faces.FACE_FOLDERS or a.kind in face_archs.KINDS or a.kind in faces.FACE_FILES:
        return main_faces(ap, a)
    if a.kind == IMMICH:
        return main_immich(ap, a)
    if a.kind in objects.OBJECT_KINDS:
        return main_objects(ap, a)
    if a.size != 224 and (a.kind == "vit-b32" or a.size % 16):
        ap.error("--size: only the test kind takes another size, a multiple of 16")

    t0 = time.perf_counter()
    if a.kind == "text-multilingual":
        tokenizer = multilingual.train_wordpiece()
        tokenizer.save(multilingual.tokenizer_path(os.path.abspath(a.out or DEFAULT_OUT[a.kind])))
        model, params = multilingual.build_multilingual_model(a.seed, a.dim, tokenizer)
    elif a.kind in clip_text.TEXT_KINDS:
        model, params = clip_text.build_text_model(a.kind, a.seed)
    else:
        model, params = clip.build(a.kind, a.seed, a.size)
    onnx.checker.check_model(model, full_check=True)  # also infers shapes
    if a.folder:
        outs = clip.write_folder(model, os.path.abspath(a.folder), a.kind, MODEL_ID[a.kind], a.size, a.preprocess)
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
            y, dt = checks.check(out, a.size)
            cos = float(y[0] @ y[-1] / np.linalg.norm(y[0]) / np.linalg.norm(y[-1]))
            print(f"  onnxruntime: out {y.shape}, batch of {len(y)} in {dt*1000:.1f} ms (1 thread), "
                  f"|y0|={np.linalg.norm(y[0]):.3f} cos(y0,y_last)={cos:.3f}")
    print(f"  built in {t_build:.1f}s")


def main_immich(ap, a):
    if not a.folder or a.out or a.size != 224 or a.preprocess != "clip":
        ap.error(f"--kind {IMMICH} writes a folder (--folder); its size and preprocessing are fixed")
    t0 = time.perf_counter()
    for out in immich.write_folder(os.path.abspath(a.folder), a.seed):
        print(f"{IMMICH}: {out} size={os.path.getsize(out) / 1e6:.1f} MB")
    if a.check:
        immich.check(os.path.abspath(a.folder))
    print(f"  built in {time.perf_counter() - t0:.1f}s")


def main_objects(ap, a):
    if a.out or a.size != 224 or a.preprocess != "clip":
        ap.error(f"--kind {a.kind} writes a folder (--folder); no --out, --size or --preprocess")
    folder = os.path.abspath(a.folder or os.path.join(MODELS_DIR, a.kind))
    t0 = time.perf_counter()
    outs = objects.write_folder(a.kind, folder)
    print(f"{a.kind}: {folder}")
    for out in outs:
        sha = hashlib.sha256(open(out, "rb").read()).hexdigest()
        print(f"  {os.path.basename(out)}: {os.path.getsize(out) / 1e3:.1f} kB sha256={sha[:16]}")
    if a.check:
        print(f"  onnxruntime: {objects.check(outs[0])}")
    print(f"  built in {time.perf_counter() - t0:.1f}s")


def main_head(ap, a):
    if a.size != 224 or a.folder or a.preprocess != "clip":
        ap.error(f"--kind {a.kind} writes one file (--out); no --size, --folder or --preprocess")
    out = os.path.abspath(a.out or os.path.join(MODELS_DIR, heads.HEAD_KINDS[a.kind]["file"]))
    model, params = heads.build_head(a.kind, a.seed)
    onnx.checker.check_model(model, full_check=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    save(model, out)
    sha = hashlib.sha256(open(out, "rb").read()).hexdigest()
    ins = ", ".join(f"{i.name} {[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]}"
                    for i in model.graph.input)
    outs = ", ".join(f"{o.name} {[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]}"
                     for o in model.graph.output)
    print(f"{a.kind}: {out}\n  {ins} -> {outs}; params={params:,} size={os.path.getsize(out) / 1e3:.1f} kB "
          f"sha256={sha[:16]}")
    if a.check:
        heads.check(out, a.kind)


def main_faces(ap, a):
    if a.size != 224 or a.preprocess != "clip":
        ap.error(f"--kind {a.kind}: no --size or --preprocess (the sizes are the real models')")
    t0 = time.perf_counter()
    is_folder = a.kind in faces.FACE_FOLDERS or a.kind in face_archs.KINDS
    if is_folder:
        if a.out:
            ap.error(f"--kind {a.kind} writes a folder (--folder)")
        folder = os.path.abspath(a.folder or os.path.join(MODELS_DIR, a.kind))
        if a.kind in face_archs.KINDS:
            outs, params, macs = face_archs.write_folder(folder, a.seed)
            cost = f"; GMACs a canvas / a face: {macs['detection'] / 1e9:.2f} / {macs['recognition'] / 1e9:.2f}"
        else:
            (outs, params), cost = faces.write_face_folder(a.kind, folder, a.seed), ""
        print(f"{a.kind}: {folder} (params detection {params['detection']:,}, recognition {params['recognition']:,}"
              f"{cost})")
    else:
        if a.folder:
            ap.error(f"--kind {a.kind} writes one file (--out)")
        out = os.path.abspath(a.out or os.path.join(MODELS_DIR, faces.FACE_FILES[a.kind]))
        model, params = faces.build_file(a.kind, a.seed)
        onnx.checker.check_model(model, full_check=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        save(model, out)
        outs = [out]
        print(f"{a.kind}: {out} (params {params:,})")
    t_build = time.perf_counter() - t0
    for out in outs:
        sha = hashlib.sha256(open(out, "rb").read()).hexdigest()
        name = os.path.relpath(out, folder) if is_folder else os.path.basename(out)
        print(f"  {name}: {os.path.getsize(out) / 1e6:.2f} MB sha256={sha[:16]}")
        if a.check:
            print(f"  onnxruntime: {faces.check(out)}")
    print(f"  built in {t_build:.1f}s")


def main_dlib(ap, a):
    if a.size != 224 or a.folder or a.preprocess != "clip" or not a.weights:
        ap.error("--kind dlib-recognizer takes --weights DIR and writes one file (--out); no --size, --folder, --preprocess")
    out = os.path.abspath(a.out or os.path.join(MODELS_DIR, "dlib-recognizer", "model.onnx"))
    t0 = time.perf_counter()
    model, params = dlib_recognizer.build(a.weights, a.input_scale)
    onnx.checker.check_model(model, full_check=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    save(model, out)
    sha = hashlib.sha256(open(out, "rb").read()).hexdigest()
    print(f"dlib-recognizer: {out} (params {params:,}, input scale {a.input_scale})\n"
          f"  {os.path.getsize(out) / 1e6:.2f} MB sha256={sha[:16]}, built in {time.perf_counter() - t0:.1f}s")
    if a.check:
        print(f"  onnxruntime: {dlib_recognizer.check(out)}")


def main_siglip_bench(ap, a):
    if a.size != 224 or a.folder:
        ap.error(f"--kind {a.kind} writes one file (--out) at 224")
    out = os.path.abspath(a.out or os.path.join(MODELS_DIR, f"{a.kind}-random.onnx"))
    t0 = time.perf_counter()
    model, params = siglip.build_siglip_bench(a.kind, a.seed)
    onnx.checker.check_model(model)  # not full_check: shape inference on 370 MB is slow and adds nothing
    os.makedirs(os.path.dirname(out), exist_ok=True)
    save(model, out)
    print(f"{a.kind}: {out}\n  params={params:,} size={os.path.getsize(out) / 1e6:.1f} MB, "
          f"built in {time.perf_counter() - t0:.1f}s")
    if a.check:
        checks.check_siglip_bench(out)


def main_siglip(ap, a):
    if a.size != 224 or a.preprocess != "clip" or a.out:
        ap.error(f"--kind {a.kind} writes a folder (--folder) with its own size; no --size, --preprocess or --out")
    folder = os.path.abspath(a.folder or os.path.join(MODELS_DIR, a.kind))
    t0 = time.perf_counter()
    outs, params = siglip.write_siglip_folder(a.kind, folder, a.seed, logits_in_config=not a.no_config_logits)
    t_build = time.perf_counter() - t0
    spec = siglip.SIGLIP_KINDS[a.kind]
    print(f"{a.kind}: {folder} (family {spec['family']}, {spec['size']}x{spec['size']}, patch {spec['patch']}, "
          f"dim {spec['width']}; params vision {params['vision']:,}, text {params['text']:,})")
    for out in outs:
        sha = hashlib.sha256(open(out, "rb").read()).hexdigest()
        print(f"  {os.path.relpath(out, folder)}: {os.path.getsize(out) / 1e6:.2f} MB sha256={sha[:16]}")
    if a.check:
        checks.check_siglip_folder(folder, a.kind)
    print(f"  built in {t_build:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
