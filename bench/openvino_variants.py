#!/usr/bin/env python3
"""Compile variants of one of the zoo's OpenVINO IRs, called in turn, call by call: which
compile options make the forward faster at a batch size? Each variant is the IR compiled as
backends/openvino compiles it for one worker (LATENCY, one stream, --threads threads, the
config's precision hint) with one change:

  dyn            a dynamic batch (-1), as torchd compiled every model before #68's change
  bound          the batch bounded to [1, 32] (torchd's dynamic model now, batch size 32)
  static         compiled for exactly --batch (torchd's full-batch model)
  dyn+denorm     CPU_DENORMALS_OPTIMIZATION on
  dyn+pin        ENABLE_CPU_PINNING on
  dyn+tput       the THROUGHPUT hint (one stream still)

Every round calls each variant once, in a new random order, so that a shared machine's load
falls on all alike; the table gives each variant's median, and its speed against the first
variant as the median of the per-round ratios, with the rounds it was faster in. Also
--rss: each variant's resident memory after compiling and running the batch, one process each.

Usage: PYTHONPATH=build/pyext .venv/bin/python bench/openvino_variants.py \\
         [--model efficientnet_lite0_ov] [--batch 32] [--time 60] [--variants dyn,bound,static]
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_variant(core, ov, xml, name, batch, threads, hint):
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
              "INFERENCE_PRECISION_HINT": hint}
    shape = {"bound": [ov.Dimension(1, 32), 3, 224, 224], "static": [batch, 3, 224, 224]}.get(name, [-1, 3, 224, 224])
    config.update({"dyn+denorm": {"CPU_DENORMALS_OPTIMIZATION": True}, "dyn+pin": {"ENABLE_CPU_PINNING": True},
                   "dyn+tput": {"PERFORMANCE_HINT": "THROUGHPUT"}}.get(name, {}))
    m = core.read_model(xml)
    m.reshape({m.inputs[0]: ov.PartialShape(shape)})
    return core.compile_model(m, "CPU", config)


def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", default=os.path.join(ROOT, "models", "out", "openvino"))
    p.add_argument("--model", default="efficientnet_lite0_ov")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--time", type=float, default=60, help="seconds of rounds")
    p.add_argument("--variants", default="dyn,bound,static,dyn+denorm,dyn+pin,dyn+tput")
    p.add_argument("--rss", action="store_true", help="resident memory of each variant, one process each")
    p.add_argument("--one", help=argparse.SUPPRESS)  # --rss's child: the variants, comma-separated
    args = p.parse_args()
    import openvino as ov
    xml = os.path.join(args.zoo, args.model, "1", "model.xml")
    config = open(os.path.join(args.zoo, args.model, "config.pbtxt")).read()
    hint = "bf16" if '"INFERENCE_PRECISION_HINT" value: { string_value: "bf16"' in config else "f32"
    x = np.random.RandomState(0).rand(args.batch, 3, 224, 224).astype(np.float32)
    names = args.variants.split(",")
    if args.rss:
        for v in names + ["dyn,static"]:
            out = subprocess.run([sys.executable, __file__, "--zoo", args.zoo, "--model", args.model,
                                  "--batch", str(args.batch), "--threads", str(args.threads), "--one", v],
                                 capture_output=True, text=True, check=True).stdout
            print(f"{v:15s} {out.strip()}")
        return
    core = ov.Core()
    if args.one:
        base = rss_mb()
        keep = []
        for v in args.one.split(","):
            c = compile_variant(core, ov, xml, v, args.batch, args.threads, hint)
            r = c.create_infer_request()
            r.infer({0: x})
            keep.append((c, r))
        print(f"RSS {rss_mb():.0f} MB ({rss_mb() - base:.0f} MB over the process with OpenVINO loaded)")
        return
    reqs = {v: compile_variant(core, ov, xml, v, args.batch, args.threads, hint).create_infer_request() for v in names}
    for r in reqs.values():
        r.infer({0: x})
        r.infer({0: x})
    times = {v: [] for v in names}
    load0, end = os.getloadavg()[0], time.monotonic() + args.time
    while time.monotonic() < end or len(times[names[0]]) < 3:
        for v in random.sample(names, len(names)):
            t = time.perf_counter()
            reqs[v].infer({0: x})
            times[v].append(time.perf_counter() - t)
    ref = times[names[0]]
    print(f"{args.model}, hint {hint}, batch {args.batch}, {args.threads} threads, {len(ref)} rounds, "
          f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"| variant | ms | img/s | speed against {names[0]} | faster in |")
    print("|---|---|---|---|---|")
    for v, ts in times.items():
        med = statistics.median(ts)
        ratio = statistics.median([a / b for a, b in zip(ref, ts)])
        wins = sum(a > b for a, b in zip(ref, ts))
        print(f"| {v} | {med * 1e3:.2f} | {args.batch / med:.1f} | {ratio:.3f} | {wins}/{len(ts)} |")


if __name__ == "__main__":
    main()
