#!/usr/bin/env python3
"""Calls clipfn's /v1/embeddings with the official `openai` client, as vector-database tooling
does, and checks the answers against clipfn's own /v1/embed for the same inputs: texts, or, given
photo keys, photos (`extra_body={"modality": "image"}`, as Infinity's clients send them).

Usage: openai_embeddings.py BASE_URL                      texts
       openai_embeddings.py BASE_URL MISSING_KEY KEY...   photos; MISSING_KEY must be refused
  (prints a JSON summary; exits non-zero on a failed check)
"""
import json
import sys
import urllib.request

import numpy as np
import openai

base, photos = sys.argv[1], sys.argv[2:]
client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
if photos:
    missing, inputs = photos[0], photos[1:]
    field, extra = "images", {"extra_body": {"modality": "image"}}
else:
    inputs = ["beach at sunset", "a photo of a cat.", "서울의 밤", "富士山の写真 🗻", ""]
    field, extra = "texts", {}


def own(inputs):
    request = urllib.request.Request(f"{base}/v1/embed", json.dumps({field: inputs}).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return np.array([d["embedding"] for d in json.load(response)["data"]])


expected = own(inputs)
# The client asks for base64 unless told otherwise, and decodes it itself.
default = client.embeddings.create(model="clip", input=inputs, **extra)
floats = client.embeddings.create(model="clip", input=inputs, encoding_format="float", **extra)
single = client.embeddings.create(model="clip", input=inputs[0], **extra)

checks = {
    "count": len(default.data) == len(inputs) and len(floats.data) == len(inputs) and len(single.data) == 1,
    "order": [d.index for d in default.data] == list(range(len(inputs))),
    "base64_matches_embed": bool(np.abs(np.array([d.embedding for d in default.data]) - expected).max() < 1e-6),
    "float_matches_embed": bool(np.abs(np.array([d.embedding for d in floats.data]) - expected).max() < 1e-6),
    "single_matches_embed": bool(np.abs(np.array(single.data[0].embedding) - expected[0]).max() < 1e-6),
    "model_named": bool(floats.model),
}
if photos:
    checks["no_tokens"] = floats.usage.prompt_tokens == floats.usage.total_tokens == 0
else:
    checks["usage"] = floats.usage.prompt_tokens == floats.usage.total_tokens > 2 * len(inputs)
refusal = None
try:
    client.embeddings.create(model="clip", input=[inputs[0], missing] if photos else [], **extra)
    checks["bad_input_refused"] = False
except openai.APIStatusError as e:
    refusal = e.message
    # An empty input is a bad request; a photo that fails is its own status (404: no object),
    # named by its index.
    checks["bad_input_refused"] = e.status_code == 404 and "input[1]" in refusal if photos else e.status_code == 400
print(json.dumps({"checks": checks, "dim": len(floats.data[0].embedding), "model": floats.model,
                  "prompt_tokens": floats.usage.prompt_tokens, "refusal": refusal}))
sys.exit(0 if all(checks.values()) else 1)
