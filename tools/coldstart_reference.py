#!/usr/bin/env python3
"""The cold-start floor for benches/throughput.rs: what Python ONNX Runtime needs to be ready.

Times, in one fresh process: importing onnxruntime (loads its library), creating the session from
the model file (graph optimisation included, defaults as clipfn's: ORT_ENABLE_ALL), and one run of
black photos at each warm-up batch size. Prints one JSON object, seconds and the peak RSS in bytes.

Usage: coldstart_reference.py --model M.onnx --batches 1,64 [--provider cpu|cuda]
"""
import argparse
import json
import resource
import sys
import time

started = time.perf_counter()
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

library_s = time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--batches", default="1", help="warm-up batch sizes, comma-separated")
    parser.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    providers = ["CUDAExecutionProvider"] if args.provider == "cuda" else ["CPUExecutionProvider"]

    t = time.perf_counter()
    session = ort.InferenceSession(args.model, providers=providers)
    session_s = time.perf_counter() - t
    model_input = session.get_inputs()[0]
    side = model_input.shape[-1]
    runs = {}
    for n in [int(b) for b in args.batches.split(",")]:
        t = time.perf_counter()
        session.run(None, {model_input.name: np.zeros((n, 3, side, side), dtype=np.float32)})
        runs[n] = time.perf_counter() - t
    json.dump(
        {
            "library_s": library_s,
            "session_s": session_s,
            "runs_s": runs,
            # The goal's reference: session creation + one run at each warm-up shape.
            "session_and_runs_s": session_s + sum(runs.values()),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        },
        fp=sys.stdout,
    )


if __name__ == "__main__":
    main()
