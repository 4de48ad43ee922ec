"""The model families tools/make_models.py builds, one module each (the CLI stays in make_models.py).

Every model here is an ONNX graph written with the `onnx` helpers (no torch, no model hub) from
seeded random weights: the same seed gives the same bytes, so tests can rely on fixed files. The
one exception is dlib_recognizer.py, which rebuilds a real network from real weights fetched from a
registry (the same weights give the same bytes).

  graph.py              Graph (the node/initialiser builder), CLIP's transformer blocks, model wrapping
  files.py              paths, atomic saving, fp16 / int8 variants, folder replacement, JSON writing
  clip.py               CLIP-shaped image towers: test, poison, fixed-batch, vit-b32; CLIP model folders
  clip_text.py          CLIP text towers: text-test, vit-b32-text
  multilingual.py       the BERT-shaped multilingual text tower and its WordPiece tokenizer.json
  siglip.py             SigLIP / SigLIP 2 towers and model folders, the SigLIP base vision tower
  siglip_tokenizers.py  the SigLIP 2 (BPE) and SigLIP 1 (Unigram) tokenizer files
  dlib_recognizer.py    dlib's face-recognition ResNet from @vladmandic/face-api's tfjs weights (real)
  heads.py              score heads (CLIPFN_HEADS): head, head-flat, head-wrong-dim, head-two-outputs
  objects.py            YOLO-format (ultralytics export) object detector folders: objects-yolo-drawn
                        (no random weights), objects-bad, objects-classes-mismatch
  checks.py             the --check self-tests (ONNX Runtime runs of what was written)
"""
