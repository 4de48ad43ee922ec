#!/usr/bin/env python3
"""Generates a Python client from clipfn's own /openapi.json with openapi-python-client, into a
temporary folder as a backend's build would, and embeds and analyzes photos with it: the typed
answers parse (photo errors as the document's PhotoErrorCode, refusals as its ErrorResponse), the
embeddings are clipfn's own /v1/embed answer, and the analysis has every signal it asked for.

Usage: openapi_client.py BASE_URL LABEL_SET MISSING_KEY KEY...
  (prints a JSON summary; exits non-zero on a failed check)
"""
import atexit
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

base, label_set, missing, keys = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
venv = Path(sys.executable).parent
folder = Path(tempfile.mkdtemp(prefix="clipfn-client."))
atexit.register(shutil.rmtree, folder, True)
# The generator formats its output with ruff, which lies beside it in the venv.
generated = subprocess.run(
    [venv / "openapi-python-client", "generate", "--url", f"{base}/openapi.json", "--meta", "none",
     "--output-path", folder / "clipfn_client", "--fail-on-warning"],
    capture_output=True, text=True, env={**os.environ, "PATH": f"{venv}:{os.environ.get('PATH', '')}"},
)
assert generated.returncode == 0, generated.stdout + generated.stderr
sys.path.insert(0, str(folder))

from clipfn_client import Client  # noqa: E402
from clipfn_client.api.clipfn import analyze, embed  # noqa: E402
from clipfn_client.api.probes import readyz  # noqa: E402
from clipfn_client.models import (  # noqa: E402
    AnalyzeRequest, AnalyzeResponse, EmbedRequest, EmbedResponse, ErrorCode, ErrorResponse, PhotoErrorCode, Ready,
)
from clipfn_client.types import Unset  # noqa: E402

client = Client(base_url=base, timeout=60, raise_on_unexpected_status=True)

ready = readyz.sync(client=client)
assert isinstance(ready, Ready), ready
dim = ready.model["dim"]

# Embed: one item per photo, in order; the missing one as the document's code.
photos = [keys[0], missing, *keys[1:]]
embedded = embed.sync(client=client, body=EmbedRequest(images=photos))
assert isinstance(embedded, EmbedResponse), embedded
assert [item.index for item in embedded.data] == list(range(len(photos)))
assert embedded.data[1].error.code == PhotoErrorCode.NOT_FOUND, embedded.data[1]
request = urllib.request.Request(f"{base}/v1/embed", json.dumps({"images": photos}).encode(),
                                 {"content-type": "application/json"})
with urllib.request.urlopen(request, timeout=60) as response:
    own = json.load(response)["data"]
for item, raw in zip(embedded.data, own):
    if item.index == 1:
        continue
    assert isinstance(item.error, Unset) and len(item.embedding) == dim, item
    cosine = sum(a * b for a, b in zip(item.embedding, raw["embedding"]))
    assert cosine > 0.9999, f"photo {item.index}: cosine {cosine} to /v1/embed's own answer"
    assert abs(math.hypot(*item.embedding) - 1) < 1e-4, item.index

# Analyze, the first photo twice: labels of the set, quality, hash, and the pair as duplicates.
twice = [*keys, keys[0]]
analyzed = analyze.sync(client=client, body=AnalyzeRequest(images=twice, label_set=label_set, top_k=2))
assert isinstance(analyzed, AnalyzeResponse), analyzed
for item in analyzed.data:
    assert len(item.labels) == 2 and item.labels[0].score >= item.labels[1].score, item
    assert item.quality.sharpness > 0 and isinstance(item.quality.blurry, bool), item
    assert len(item.hash_) == 16 and len(item.embedding) == dim, item
duplicates = [group.photos for group in analyzed.album.duplicates]
assert [0, len(keys)] in duplicates, analyzed.album
twin = next(group for group in analyzed.album.duplicates if group.photos == [0, len(keys)])
assert twin.best == 0 and twin.why.value == "first", twin  # the same bytes twice: all tie

# A refusal parses as the document's error body.
refused = embed.sync(client=client, body=EmbedRequest(images=[]))
assert isinstance(refused, ErrorResponse) and refused.error.code == ErrorCode.BAD_REQUEST, refused

print(json.dumps({
    "dim": dim,
    "embedded": sum(isinstance(item.error, Unset) for item in embedded.data),
    "labels": [item.labels[0].label for item in analyzed.data],
    "duplicates": duplicates,
    "refused": refused.error.code.value,
}))
