#!/usr/bin/env python3
"""RapidOCR 1.4.4's own pipeline timed on photos, for `cargo bench --bench ocr` (run with
.cache/venv-rapidocr's Python): the photos decoded once (Pillow, EXIF applied, as BGR arrays), then
`RapidOCR()` called on them in turns for SECONDS, sized as tools/ocr_reference.py sizes it (clipfn's
detector view), with its own recognizer batching (6) and ONNX Runtime on THREADS intra-op threads.

  ocr_bench.py --seconds S --threads T PHOTO...

prints JSON: {"photos": n, "cpu_s": process CPU seconds, "wall_s": ..., "lines": lines read}.
"""

import argparse
import json
import time

from rapidocr_onnxruntime import RapidOCR
from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess

from ocr_reference import sized_down, upright_bgr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--resolution", type=int, default=736)
    parser.add_argument("photos", nargs="+")
    args = parser.parse_args()

    DetPreProcess.resize = sized_down(args.resolution)
    engine = RapidOCR(max_side_len=10**6, intra_op_num_threads=args.threads)
    images = [upright_bgr(path) for path in args.photos]
    for image in images:  # the sessions' first runs
        engine(image)
    photos = lines = 0
    cpu, wall = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < args.seconds:
        result, _ = engine(images[photos % len(images)])
        photos += 1
        lines += len(result or [])
    print(json.dumps({"photos": photos, "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                      "lines": lines}))


if __name__ == "__main__":
    main()
