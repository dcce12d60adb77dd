#!/usr/bin/env python3
"""torchd's OpenVINO forward against OpenVINO's own Python runner, on the same IR, in one run,
interleaved: is the forward torchd serves an OpenVINO IR with OpenVINO's own?

Backends, each on THREADS threads, one synchronous forward at a time, on the zoo's
resnet18 IR (models/openvino_ir.py: int8 from NNCF, and fp32), dynamic batch:
  torchd   package openvino's Infer through one request (BenchmarkInfer: the compile options
           backends/openvino uses for one worker: LATENCY, one stream, f32 precision hint),
           a test binary built once (go test -c), run once a round.
  python   OpenVINO's Python runner: core.compile_model(the same xml, "CPU", the same
           properties), then compiled(x) (engine_spike.py's call), in this process.

Each round runs both, in a new random order; a figure is the median forward of a round (Go's
ns/op over at least --time, Python's median over at least --time), and the table gives the
median over rounds, the ratio torchd/python (< 1: torchd faster), and the load average at each
round's start (the machine may be shared: only the ratio of an interleaved run means anything
then).

Usage: PYTHONPATH=build/pyext .venv/bin/python bench/openvino_forward.py [--rounds 5] [--time 2]
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ["resnet18_ov_int8", "resnet18_ov"]
BATCHES = [1, 32]


def python_round(core, zoo, threads, min_time):
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
              "INFERENCE_PRECISION_HINT": "f32"}
    x8 = np.load(os.path.join(zoo, "ref_input.npy"))
    out = {}
    for name in MODELS:
        compiled = core.compile_model(os.path.join(zoo, name, "1", "model.xml"), "CPU", config)
        for n in BATCHES:
            x = np.ascontiguousarray(np.concatenate([x8] * ((n + 7) // 8))[:n])
            compiled(x)
            compiled(x)
            times, end = [], time.monotonic() + min_time
            while time.monotonic() < end or len(times) < 3:
                t = time.perf_counter()
                compiled(x)
                times.append(time.perf_counter() - t)
            out[(name, n)] = statistics.median(times)
        del compiled
    return out


def torchd_round(binary, threads, min_time):
    r = subprocess.run([binary, "-test.run", "^$", "-test.bench", "BenchmarkInfer", "-test.benchtime", f"{min_time}s"],
                       cwd=os.path.join(ROOT, "openvino"), capture_output=True, text=True,
                       env=dict(os.environ, OV_BENCH_THREADS=str(threads)))
    if r.returncode != 0:
        sys.exit(f"openvino.test: {r.stdout}{r.stderr}")
    out = {}
    for m in re.finditer(r"BenchmarkInfer/(\S+)/batch=(\d+)\S*\s+\d+\s+([\d.]+) ns/op", r.stdout):
        out[(m.group(1), int(m.group(2)))] = float(m.group(3)) / 1e9
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", default=os.path.join(ROOT, "models", "out", "openvino"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--time", type=float, default=2.0, help="least seconds per figure")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args()
    import openvino as ov
    binary = os.path.join(ROOT, "build", "openvino.test")
    subprocess.run(["go", "test", "-c", "-o", binary, "./openvino/"], cwd=ROOT, check=True)
    print(next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
          f"OpenVINO {ov.get_version()}, {args.threads} threads, {args.rounds} rounds", flush=True)
    core = ov.Core()
    results = {"torchd": [], "python": []}
    loads = []
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        order = ["torchd", "python"]
        random.shuffle(order)
        for b in order:
            results[b].append(torchd_round(binary, args.threads, args.time) if b == "torchd"
                              else python_round(core, args.zoo, args.threads, args.time))
        print(f"round {r + 1}: load {loads[-1]:.2f}", flush=True)
    print(f"load average at each round's start: {' '.join(f'{l:.2f}' for l in loads)}")
    print(f"{'model':18} {'batch':>5} {'torchd ms':>10} {'python ms':>10} {'torchd/python':>14} {'img/s torchd':>13} {'img/s python':>13}")
    for name in MODELS:
        for n in BATCHES:
            t = statistics.median(x[(name, n)] for x in results["torchd"])
            py = statistics.median(x[(name, n)] for x in results["python"])
            print(f"{name:18} {n:>5} {t * 1e3:>10.2f} {py * 1e3:>10.2f} {t / py:>14.3f} {n / t:>13.1f} {n / py:>13.1f}")


if __name__ == "__main__":
    main()
