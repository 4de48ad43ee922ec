"""`export_clip_onnx.py --tower text-multilingual`: a multilingual student text tower for clipfn.

    pip install torch sentence-transformers onnx onnxruntime tokenizers
    python infra/export_clip_onnx.py --tower text-multilingual --text-out infra/model/text-multilingual.onnx

sentence-transformers/clip-ViT-B-32-multilingual-v1 was distilled to map 50+ languages into the
image space of CLIP ViT-B/32: pair it with the ViT-B/32 image tower and no photo is re-embedded.
It is multilingual DistilBERT, mean pooling over the attention mask, then Dense 768->512 with no
bias and no activation. The export bakes pooling and Dense into the graph, so clipfn does no
model-specific arithmetic:
    input   input_ids       int64   [batch, tokens]   WordPiece ids from tokenizer.json
    input   attention_mask  int64   [batch, tokens]   1 for real tokens, 0 for padding
    output  text_embeds     float32 [batch, 512]      not L2-normalised
The fast tokenizer is written beside it as <out without .onnx>.tokenizer.json
(CLIPFN_TEXT_TOKENIZER). Afterwards the ONNX output, fed by the `tokenizers` package as clipfn
feeds it (a padded batch), is checked against sentence-transformers' own `encode` on texts in
several languages: every cosine must be >= 0.9999.
"""

from __future__ import annotations

from pathlib import Path

MULTILINGUAL_ID = "sentence-transformers/clip-ViT-B-32-multilingual-v1"
CHECK_TEXTS = [
    "a photo of the beach at sunset",
    "바다 일몰",
    "눈 속에서 뛰어노는 강아지",
    "夕日の海辺の写真",
    "海滩上的日落照片",
    "Ein Hund, der im Schnee spielt",
    "🎂 생일 케이크",
]


def export_multilingual(model_id: str, out: Path, opset: int, min_cosine: float = 0.9999) -> None:
    import numpy as np
    import onnxruntime as ort
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    st = SentenceTransformer(model_id, device="cpu").eval()
    transformer, pooling, dense = st[0], st[1], st[2]
    if not pooling.pooling_mode_mean_tokens or dense.linear.bias is not None:
        raise SystemExit(f"{model_id}: expected mean pooling and a bias-free Dense, got {pooling} / {dense}")
    if not isinstance(dense.activation_function, torch.nn.Identity):
        raise SystemExit(f"{model_id}: Dense has activation {dense.activation_function}, expected none")
    backbone, projection = transformer.auto_model, dense.linear

    class Encoder(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return projection(pooled)

    tokenizer_file = out.with_name(out.name.removesuffix(".onnx") + ".tokenizer.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    st.tokenizer.backend_tokenizer.save(str(tokenizer_file))
    example = st.tokenizer(CHECK_TEXTS[:2], padding=True, return_tensors="pt")
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}, "text_embeds": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(
            Encoder().eval(),
            (example["input_ids"], example["attention_mask"]),
            str(out),
            input_names=["input_ids", "attention_mask"],
            output_names=["text_embeds"],
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )

    # Tokenized as clipfn does it: the tokenizer.json, no padding from the file, a batch padded
    # to its longest text with the mask marking real tokens.
    tok = Tokenizer.from_file(str(tokenizer_file))
    tok.no_padding()
    rows = [e.ids for e in tok.encode_batch(CHECK_TEXTS)]
    width = max(map(len, rows))
    ids = np.array([r + [0] * (width - len(r)) for r in rows], np.int64)
    mask = np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows], np.int64)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = session.run(["text_embeds"], {"input_ids": ids, "attention_mask": mask})
    want = st.encode(CHECK_TEXTS, convert_to_numpy=True)
    cosines = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    for text, cosine in zip(CHECK_TEXTS, cosines):
        print(f"  {cosine:.6f}  {text}")
    if cosines.min() < min_cosine:
        raise SystemExit(f"ONNX output disagrees with sentence-transformers: lowest cosine {cosines.min():.6f}")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB) and {tokenizer_file}; "
          f"lowest cosine to sentence-transformers {cosines.min():.6f}")
