#!/usr/bin/env python3
"""tools/gpu-check.sh's comparisons of CUDA's answers with CPU's, read from the replay lines it wrote
into WORK (WORK/NAME.jsonl, one `clipfn replay` line a request):

  gpu_compare.py embeddings WORK   cpu, cuda-host, cuda-model: every photo embedded, cosine >= 0.999
  gpu_compare.py faces WORK        faces-cpu, faces-cuda: the same faces, boxes within 2 px or 2%
                                   of their size, embeddings at cosine >= 0.99
  gpu_compare.py ocr WORK          ocr-cpu, ocr-cuda: the same lines, corners within 2 px, scores
                                   within 0.02, at most 1% of the characters read otherwise
  gpu_compare.py objects WORK      objects-cpu, objects-cuda: the same objects (labels, in order),
                                   boxes within 2 px or 2% of their size, scores within 0.02

Prints what it compared and exits 1 on a mismatch.
"""

import json
import math
import sys


def bodies(work, name):
    """The answers' bodies of WORK/NAME.jsonl, every one a 200."""
    lines = [json.loads(line) for line in open(f"{work}/{name}.jsonl")]
    assert all(line["response"]["statusCode"] == 200 for line in lines), name
    return [json.loads(line["response"]["body"]) for line in lines]


def items(work, name):
    """The first answer's items, its timings printed."""
    body = bodies(work, name)[0]
    print(f"{name}: timings_ms {body['timings_ms']}")
    return body["data"]


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def embeddings(work):
    cpu = bodies(work, "cpu")
    failed = False
    for name in ("cpu", "cuda-host", "cuda-model"):
        answers = bodies(work, name)
        for run, body in enumerate(answers):
            print(f"{name:11s} run {run}: {len(body['data'])} photos, timings_ms {body['timings_ms']}")
        data = answers[-1]["data"]
        missing = [i["image"] for i in data if "embedding" not in i]
        worst = min(cos(i["embedding"], c["embedding"]) for i, c in zip(data, cpu[-1]["data"]) if "embedding" in i)
        print(f"{name:11s} worst cosine to CPU {worst:.6f}, photos without embedding: {missing}")
        failed |= bool(missing) or worst < 0.999
    return not failed


def faces(work):
    bad, total, worst = [], 0, 1.0
    for cpu, cuda in zip(items(work, "faces-cpu"), items(work, "faces-cuda")):
        a, b = cpu.get("faces"), cuda.get("faces")
        if a is None or b is None or len(a) != len(b):
            bad.append((cpu["image"], None if a is None else len(a), None if b is None else len(b)))
            continue
        for fa, fb in zip(a, b):
            total += 1
            size = max(fa["box"][2] - fa["box"][0], fa["box"][3] - fa["box"][1])
            off = max(abs(x - y) for x, y in zip(fa["box"], fb["box"]))
            worst = min(worst, cos(fa["embedding"], fb["embedding"]))
            if off > max(2, 0.02 * size):
                bad.append((cpu["image"], off))
    print(f"faces: {total} on CPU and CUDA alike, worst embedding cosine {worst:.5f}, mismatches {bad}")
    return not bad and worst >= 0.99


def edits(a, b):
    """Levenshtein distance between two strings."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def ocr(work):
    """Each CPU line is matched to the CUDA line whose corners are nearest (the reading order may
    swap two lines whose tops are within a pixel); the texts may differ by at most 1% of their
    characters in all (a character whose two best classes are within float noise of each other, in a
    random string with no word to favour either, may flip: strewn.png's one word of 200 in run 2)."""
    bad, total, chars, edited, worst = [], 0, 0, 0, 0.0
    for cpu, cuda in zip(items(work, "ocr-cpu"), items(work, "ocr-cuda")):
        a, b = cpu.get("ocr"), cuda.get("ocr")
        if a is None or b is None or len(a) != len(b):
            bad.append((cpu["image"], a and len(a), b and len(b)))
            continue
        for la in a:
            apart = lambda lb: max(abs(p - q) for pa, pb in zip(la["box"], lb["box"]) for p, q in zip(pa, pb))
            lb = min(b, key=apart)
            off = apart(lb)
            total += 1
            chars += len(la["text"])
            edited += edits(la["text"], lb["text"])
            gap = max(abs(la["score"] - lb["score"]), abs(la["box_score"] - lb["box_score"]))
            worst = max(worst, gap)
            if off > 2 or gap > 0.02:
                bad.append((cpu["image"], la["text"], lb["text"], off, gap))
    rate = edited / max(chars, 1)
    print(f"ocr: {total} lines matched on CPU and CUDA, {edited} of {chars} characters differ ({rate:.4f}), "
          f"scores within {worst:.4f}, mismatches {bad}")
    return total > 0 and rate <= 0.01 and not bad


def objects(work):
    bad, total, worst = [], 0, 0.0
    for cpu, cuda in zip(items(work, "objects-cpu"), items(work, "objects-cuda")):
        a, b = cpu.get("objects"), cuda.get("objects")
        if a is None or b is None or [o["label"] for o in a] != [o["label"] for o in b]:
            bad.append((cpu["image"], a and [o["label"] for o in a], b and [o["label"] for o in b]))
            continue
        for oa, ob in zip(a, b):
            total += 1
            size = max(oa["box"][2] - oa["box"][0], oa["box"][3] - oa["box"][1])
            off = max(abs(x - y) for x, y in zip(oa["box"], ob["box"]))
            gap = abs(oa["score"] - ob["score"])
            worst = max(worst, gap)
            if off > max(2, 0.02 * size) or gap > 0.02:
                bad.append((cpu["image"], oa["label"], off, gap))
    print(f"objects: {total} on CPU and CUDA alike, scores within {worst:.4f}, mismatches {bad}")
    return total > 0 and not bad


if __name__ == "__main__":
    check = {"embeddings": embeddings, "faces": faces, "ocr": ocr, "objects": objects}[sys.argv[1]]
    sys.exit(0 if check(sys.argv[2]) else 1)
