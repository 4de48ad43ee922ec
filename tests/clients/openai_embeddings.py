#!/usr/bin/env python3
"""Calls clipfn's /v1/embeddings with the official `openai` client, as vector-database tooling
does, and checks the answers against clipfn's own /v1/embed for the same texts.

Usage: openai_embeddings.py BASE_URL   (prints a JSON summary; exits non-zero on a failed check)
"""
import json
import sys
import urllib.request

import numpy as np
import openai

base = sys.argv[1]
texts = ["beach at sunset", "a photo of a cat.", "서울의 밤", "富士山の写真 🗻", ""]
client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)


def own(texts):
    request = urllib.request.Request(f"{base}/v1/embed", json.dumps({"texts": texts}).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return np.array([d["embedding"] for d in json.load(response)["data"]])


expected = own(texts)
# The client asks for base64 unless told otherwise, and decodes it itself.
default = client.embeddings.create(model="clip", input=texts)
floats = client.embeddings.create(model="clip", input=texts, encoding_format="float")
single = client.embeddings.create(model="clip", input=texts[0])

checks = {
    "count": len(default.data) == len(texts) and len(floats.data) == len(texts) and len(single.data) == 1,
    "order": [d.index for d in default.data] == list(range(len(texts))),
    "base64_matches_embed": bool(np.abs(np.array([d.embedding for d in default.data]) - expected).max() < 1e-6),
    "float_matches_embed": bool(np.abs(np.array([d.embedding for d in floats.data]) - expected).max() < 1e-6),
    "single_matches_embed": bool(np.abs(np.array(single.data[0].embedding) - expected[0]).max() < 1e-6),
    "usage": floats.usage.prompt_tokens == floats.usage.total_tokens > 2 * len(texts),
    "model_named": bool(floats.model),
}
try:
    client.embeddings.create(model="clip", input=[])
    checks["empty_refused"] = False
except openai.BadRequestError as e:
    checks["empty_refused"] = e.status_code == 400
print(json.dumps({"checks": checks, "dim": len(floats.data[0].embedding), "model": floats.model,
                  "prompt_tokens": floats.usage.prompt_tokens}))
sys.exit(0 if all(checks.values()) else 1)
