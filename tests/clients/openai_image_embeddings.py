#!/usr/bin/env python3
"""Calls clipfn's /v1/embeddings with photo references, through the official `openai` client
(`extra_body={"modality": "image"}`, as Infinity's clients do), and checks the answers against
clipfn's own /v1/embed for the same photos.

Usage: openai_image_embeddings.py BASE_URL MISSING_KEY KEY...
  (prints a JSON summary; exits non-zero on a failed check)
"""
import json
import sys
import urllib.request

import numpy as np
import openai

base, missing, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
image = {"modality": "image"}


def own(images):
    request = urllib.request.Request(f"{base}/v1/embed", json.dumps({"images": images}).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return np.array([d["embedding"] for d in json.load(response)["data"]])


expected = own(keys)
# The client asks for base64 unless told otherwise, and decodes it itself.
default = client.embeddings.create(model="siglip", input=keys, extra_body=image)
floats = client.embeddings.create(model="siglip", input=keys, encoding_format="float", extra_body=image)

checks = {
    "count": len(default.data) == len(keys) == len(floats.data),
    "order": [d.index for d in default.data] == list(range(len(keys))),
    "base64_matches_embed": bool(np.abs(np.array([d.embedding for d in default.data]) - expected).max() < 1e-6),
    "float_matches_embed": bool(np.abs(np.array([d.embedding for d in floats.data]) - expected).max() < 1e-6),
    "model_named": bool(floats.model),
}
try:
    client.embeddings.create(model="siglip", input=[keys[0], missing], extra_body=image)
    checks["failed_photo_refused"] = False
    message = None
except openai.BadRequestError as e:
    message = e.body["message"] if isinstance(e.body, dict) and "message" in e.body else str(e)
    checks["failed_photo_refused"] = e.status_code == 400 and "input[1]" in message
print(json.dumps({"checks": checks, "dim": len(floats.data[0].embedding), "model": floats.model,
                  "refusal": message}))
sys.exit(0 if all(checks.values()) else 1)
