#!/usr/bin/env python3
"""Holds the served /openapi.json to the server on the rules a field's own schema cannot state:
for each body below, valid by the operation's request schema (JSON Schema 2020-12, as OpenAPI 3.1
reads it) exactly when the server does not refuse it as a bad request (400). The server must have
a text tower, the label set `places`, and KEY in its store.

Usage: document_rules.py BASE_URL KEY
  (prints a JSON summary; exits non-zero on a mismatch)
"""
import json
import sys
import urllib.error
import urllib.request

import jsonschema
import referencing

base, key = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(f"{base}/openapi.json", timeout=30) as response:
    document = json.load(response)
dim = document["components"]["schemas"]["StoredEmbedding"]["maxItems"]
registry = referencing.Registry().with_resource("urn:clipfn", referencing.jsonschema.DRAFT202012.create_resource(document))


def valid(path, body):
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    ref = "urn:clipfn#/components/schemas/" + schema["$ref"].rsplit("/", 1)[1]
    return jsonschema.Draft202012Validator({"$ref": ref}, registry=registry).is_valid(body)


def status(path, body):
    request = urllib.request.Request(base + path, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


stored = [1.0] + [0.0] * (dim - 1)
labels = ["beach", "city"]
CASES = [
    ("/v1/embed", {"images": [key]}),
    ("/v1/embed", {"texts": ["a beach"]}),
    ("/v1/embed", {"images": [key], "texts": ["a beach"]}),
    ("/v1/embed", {}),
    ("/v1/embed", {"images": None, "texts": ["a beach"]}),
    ("/v1/embed", {"images": [key], "texts": None}),
    ("/v1/embed", {"images": None}),
    ("/v1/classify", {"images": [key], "labels": labels}),
    ("/v1/classify", {"images": [key], "label_set": "places"}),
    ("/v1/classify", {"embeddings": [stored], "labels": labels}),
    ("/v1/classify", {"images": [key], "labels": labels, "top_k": 2.0}),
    ("/v1/classify", {"images": [key], "labels": labels, "top_k": 1e30}),
    ("/v1/classify", {"images": [key], "labels": labels, "top_k": 2.5}),
    ("/v1/classify", {"images": [key], "labels": ["beach", "\t\u0085 \u3000"]}),
    ("/v1/classify", {"images": [key], "labels": ["beach", "\ufeff"]}),
    ("/v1/classify", {"images": [key]}),
    ("/v1/classify", {"images": [key], "labels": labels, "label_set": "places"}),
    ("/v1/classify", {"images": [key], "embeddings": [stored], "labels": labels}),
    ("/v1/classify", {"labels": labels}),
    ("/v1/classify", {"images": [key], "label_set": "nope"}),
    ("/v1/classify", {"embeddings": [stored[:3]], "labels": labels}),
    ("/v1/analyze", {"images": [key]}),
    ("/v1/analyze", {"images": [key], "labels": labels}),
    ("/v1/analyze", {"images": [key], "label_set": None, "labels": None}),
    ("/v1/analyze", {"embeddings": [stored], "label_set": "places"}),
    # No heads on this server: stored embeddings with nothing to answer (Schemathesis' find).
    ("/v1/analyze", {"embeddings": [stored]}),
    ("/v1/analyze", {"embeddings": [stored], "labels": None, "label_set": None}),
    ("/v1/analyze", {"images": [key], "labels": labels, "label_set": "places"}),
    ("/v1/analyze", {"images": [key], "embeddings": [stored]}),
    ("/v1/analyze", {"labels": labels}),
    ("/v1/analyze", {"images": [key], "faces": False}),
    ("/v1/analyze", {"embeddings": [stored], "labels": labels, "faces": False}),
    ("/v1/analyze", {"embeddings": [stored], "labels": labels, "faces": True}),
    ("/v1/analyze", {"embeddings": [stored], "labels": labels, "known_people": [{"id": "p", "embeddings": [[1.0]]}]}),
    ("/v1/analyze", {"images": [key], "faces": False, "known_people": [{"id": "p", "embeddings": [[1.0]]}]}),
    ("/v1/analyze", {"embeddings": [stored + [0.0]], "labels": labels}),
    ("/v1/classify", {"embeddings": [[0.0] * dim], "labels": labels}),
    ("/v1/embeddings", {"input": "a beach", "model": "clip", "dimensions": dim}),
    ("/v1/embeddings", {"input": ["a beach"] * 101, "model": "clip"}),
    ("/v1/embeddings", {"input": [key] * 101, "model": "clip", "modality": "image"}),
    ("/v1/embeddings", {"input": [key] * 3, "model": "clip", "modality": "image"}),
    ("/v1/embeddings", {"input": "x" * 2001, "model": "clip", "modality": "text"}),
    ("/v1/embeddings", {"input": ["x" * 2001], "model": "clip", "modality": "image"}),
    ("/v1/embeddings", {"input": "a beach", "model": "clip", "dimensions": dim + 1}),
]

mismatches, counts = [], {"valid": 0, "invalid": 0}
for path, body in CASES:
    is_valid, got = valid(path, body), status(path, body)
    counts["valid" if is_valid else "invalid"] += 1
    if is_valid == (got == 400):
        mismatches.append({"path": path, "body": body, "valid": is_valid, "status": got})
print(json.dumps({**counts, "mismatches": mismatches}))
sys.exit(1 if mismatches else 0)
