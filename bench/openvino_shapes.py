#!/usr/bin/env python3
"""What a batch size that changes from call to call costs an OpenVINO model compiled as
backends/openvino compiles a worker's (the batch bounded to [1, 32], LATENCY, one stream, one
thread, unpinned): served at c=50, torchd's batches take whatever is queued, so nearly every
call has another size than the one before, where bench-model's reference runs one size.

Each round runs three call sequences in a new random order, and prints each one's time per
image and its ratio to the fixed size:

  fixed12     batches of 12 (near the mean batch served at c=50)
  varied8-16  sizes drawn from 8 to 16, mean 12
  alt8/16     8 and 16 in turn: two shapes only, each seen before
  static12    batches of 12 on a model compiled for 12
  two12       batches of 12 on two models compiled for 12, in turn: what moving between
              compiled models costs (each has its own stream threads, weights and buffers)

Usage: PYTHONPATH=build/pyext .venv/bin/python bench/openvino_shapes.py \\
         [--model efficientnet_lite0_ov] [--precision bf16] [--rounds 5] [--calls 60]
"""
import argparse
import os
import random
import statistics
import time

import numpy as np
import openvino as ov


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="efficientnet_lite0_ov", help="an IR under models/out/openvino")
    ap.add_argument("--precision", default="bf16", help="INFERENCE_PRECISION_HINT")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=60, help="calls per sequence")
    a = ap.parse_args()
    xml = os.path.join(os.path.dirname(__file__), "..", "models", "out", "openvino", a.model, "1", "model.xml")
    core = ov.Core()
    m = core.read_model(xml)
    m.reshape({m.inputs[0].any_name: ov.PartialShape([ov.Dimension(1, 32), 3, 224, 224])})
    c = core.compile_model(m, "CPU", {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1",
                                     "INFERENCE_PRECISION_HINT": a.precision, "ENABLE_CPU_PINNING": "NO"})
    r = c.create_infer_request()
    fixed = []
    for _ in range(2):
        f = core.read_model(xml)
        f.reshape({f.inputs[0].any_name: ov.PartialShape([12, 3, 224, 224])})
        fixed.append(core.compile_model(f, "CPU", {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1",
                                                   "INFERENCE_PRECISION_HINT": a.precision, "ENABLE_CPU_PINNING": "NO"}).create_infer_request())
    x = np.random.default_rng(0).random((32, 3, 224, 224), dtype=np.float32)

    def per_image_ms(sizes):
        t0, n = time.perf_counter(), 0
        for i, b in enumerate(sizes):
            # A negative size runs on the models compiled for it: -12 on the first, -24 on
            # each in turn.
            req = r if b > 0 else fixed[0] if b == -12 else fixed[i % 2]
            b = b if b > 0 else 12
            req.infer({0: x[:b]})
            n += b
        return (time.perf_counter() - t0) / n * 1e3

    rng = random.Random(1)
    ratios = {"varied8-16": [], "alt8/16": [], "static12": [], "two12": []}
    with open("/proc/cpuinfo") as f:
        print(next(line for line in f if line.startswith("model name")).split(":", 1)[1].strip())
    for rnd in range(a.rounds):
        seqs = {"fixed12": [12] * a.calls, "varied8-16": [rng.randint(8, 16) for _ in range(a.calls)],
                "alt8/16": [8, 16] * (a.calls // 2), "static12": [-12] * a.calls, "two12": [-24] * a.calls}
        ms = {}
        for name in rng.sample(sorted(seqs), len(seqs)):
            per_image_ms(seqs[name][:4])  # the sequence's shapes seen once
            ms[name] = per_image_ms(seqs[name])
        for k in ratios:
            ratios[k].append(ms[k] / ms["fixed12"])
        print(f"round {rnd + 1}: " + ", ".join(f"{k} {v:.3f} ms/image" for k, v in sorted(ms.items())) +
              "; " + ", ".join(f"{k}/fixed12 {ratios[k][-1]:.3f}" for k in ratios))
    for k, v in ratios.items():
        print(f"median {k}/fixed12 {statistics.median(v):.3f} (rounds {min(v):.3f}-{max(v):.3f})")


if __name__ == "__main__":
    main()
