#!/usr/bin/env python3
"""What a forward costs an image on an OpenVINO model compiled for its batch size against the
dynamic-batch model, both compiled as backends/openvino compiles a worker's (LATENCY, one
stream, one thread, unpinned; the dynamic batch bounded to [1, 32]), in OpenVINO's own runtime.

  curve     per batch size (1 to 32, constant within a run): ms an image on each model
  sequence  batches of sizes drawn from 8 to 16 (c=50's batches), each run as one forward on
            the dynamic model, or cut into forwards of F rows on the model compiled for F with
            the rest on the dynamic one (forward_batch F), or as whole forwards of F only
            (what the batcher takes beside a running batch with forward_batch F), for F 4 and 8

Each round runs every case in a new random order; medians over the rounds.

Usage: PYTHONPATH=build/pyext .venv/bin/python bench/openvino_static.py \\
         [--model efficientnet_lite0_ov] [--precision bf16] [--rounds 4]
"""
import argparse
import os
import random
import statistics
import time

import numpy as np
import openvino as ov

SIZES = (1, 2, 4, 8, 16, 32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="efficientnet_lite0_ov", help="an IR under models/out/openvino")
    ap.add_argument("--precision", default="bf16", help="INFERENCE_PRECISION_HINT")
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    xml = os.path.join(os.path.dirname(__file__), "..", "models", "out", "openvino", a.model, "1", "model.xml")
    core = ov.Core()
    cfg = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1",
           "INFERENCE_PRECISION_HINT": a.precision, "ENABLE_CPU_PINNING": "NO"}

    def compiled(batch):
        m = core.read_model(xml)
        m.reshape({m.inputs[0].any_name: ov.PartialShape([batch, 3, 224, 224])})
        return core.compile_model(m, "CPU", cfg).create_infer_request()

    dyn = compiled(ov.Dimension(1, 32))
    static = {n: compiled(n) for n in SIZES}
    x = np.random.default_rng(0).random((32, 3, 224, 224), dtype=np.float32)

    def constant(req, n, rows=96):
        req.infer({0: x[:n]})
        calls = max(2, rows // n)
        t0 = time.perf_counter()
        for _ in range(calls):
            req.infer({0: x[:n]})
        return (time.perf_counter() - t0) / (calls * n) * 1e3

    def forwards(b, how):
        if how == "dynamic":
            return [(dyn, b)]
        kind, f = how.split(":")
        f = int(f)
        out = [(static[f], f)] * (b // f)
        if b % f and kind == "cut":
            out.append((dyn, b % f))
        return out

    def sequence(sizes, how):
        t0, n = time.perf_counter(), 0
        for b in sizes:
            for req, rows in forwards(b, how):
                req.infer({0: x[:rows]})
                n += rows
        return (time.perf_counter() - t0) / n * 1e3

    with open("/proc/cpuinfo") as f:
        print(next(line for line in f if line.startswith("model name")).split(":", 1)[1].strip(), a.model, a.precision)
    rng = random.Random(1)
    curve, seq = {}, {}
    hows = ["dynamic", "cut:4", "cut:8", "whole:4", "whole:8"]
    for _ in range(a.rounds):
        cases = [("curve", k, n) for n in SIZES for k in ("dynamic", "static")]
        sizes = [rng.randint(8, 16) for _ in range(40)]
        cases += [("sequence", h, 0) for h in hows]
        for what, k, n in rng.sample(cases, len(cases)):
            if what == "curve":
                curve.setdefault((k, n), []).append(constant(dyn if k == "dynamic" else static[n], n))
            else:
                sequence(sizes[:3], k)
                seq.setdefault(k, []).append(sequence(sizes, k))
    for n in SIZES:
        d, s = statistics.median(curve[("dynamic", n)]), statistics.median(curve[("static", n)])
        print(f"curve batch={n} dynamic_ms_per_image={d:.3f} static_ms_per_image={s:.3f} static/dynamic={s / d:.3f}")
    base = statistics.median(seq["dynamic"])
    for h in hows:
        v = seq[h]
        print(f"sequence 8-16 {h} ms_per_image={statistics.median(v):.3f} /dynamic={statistics.median(v) / base:.3f}"
              f" rounds={' '.join('%.3f' % r for r in v)}")


if __name__ == "__main__":
    main()
