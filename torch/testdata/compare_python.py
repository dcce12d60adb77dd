#!/usr/bin/python3
"""Compare the Go binding's ResNet-18 forward with Python's, in one run.

Alternates rounds of `go test -bench BenchmarkResNet18Forward` and bench_python.py, so both
see the same machine load, and prints a markdown table of the medians over rounds and the
Go/Python throughput ratio. Run from the repository root (make bench-binding)."""
import argparse
import re
import statistics
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--models", default="models/out")
args = ap.parse_args()

line = re.compile(r"(?:Benchmark|Python)ResNet18Forward/batch(\d+)\S*\s+\d+\s+([\d.]+) ns/op")
go, py = {}, {}
for r in range(args.rounds):
    out = subprocess.run(["go", "test", "-run=^$", "-bench=BenchmarkResNet18Forward", "-benchtime=20x", "./torch/"],
                         capture_output=True, text=True, check=True).stdout
    for bs, ns in line.findall(out):
        go.setdefault(int(bs), []).append(float(ns))
    out = subprocess.run([sys.executable, "torch/testdata/bench_python.py", "--models", args.models, "--iters", "20"],
                         capture_output=True, text=True, check=True).stdout
    for bs, ns in line.findall(out):
        py.setdefault(int(bs), []).append(float(ns))
    print(f"round {r + 1}: go {[(b, v[-1]) for b, v in go.items()]} python {[(b, v[-1]) for b, v in py.items()]}",
          file=sys.stderr, flush=True)

print("| batch | Go ms/forward (median) | Python ms/forward (median) | Go img/s | Python img/s | Go / Python throughput |")
print("|---|---|---|---|---|---|")
for bs in sorted(go):
    g, p = statistics.median(go[bs]) / 1e6, statistics.median(py[bs]) / 1e6
    print(f"| {bs} | {g:.1f} | {p:.1f} | {bs / g * 1e3:.1f} | {bs / p * 1e3:.1f} | {p / g:.3f} |")
