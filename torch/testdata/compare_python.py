#!/usr/bin/env python3
"""Compare the Go binding's ResNet-18 forward with Python's, in one run.

Alternates rounds of `go test -bench BenchmarkResNet18Forward` and bench_python.py, so both
see the same machine load, and prints a markdown table of the medians over rounds and the
Go/Python throughput ratio. Run from the repository root (make bench-binding)."""
import argparse
import os
import re
import statistics
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--models", default="models/out")
ap.add_argument("--pinned", action="store_true",
                help="1 thread each, Go and Python at the same time on cores 0 and 1, then swapped: "
                     "both see the same moment's machine, which cancels most of a shared host's noise")
args = ap.parse_args()

GO = ["go", "test", "-run=^$", "-bench=BenchmarkResNet18Forward", "-benchtime=20x", "./torch/"]
PY = [sys.executable, "torch/testdata/bench_python.py", "--models", args.models, "--iters", "20"]

line = re.compile(r"(?:Benchmark|Python)ResNet18Forward/batch(\d+)\S*\s+\d+\s+([\d.]+) ns/op")
def steal():
    """Jiffies the hypervisor gave to other guests (the 8th field of /proc/stat's cpu line)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


go, py = {}, {}
steal0 = steal()
if args.pinned:
    subprocess.run(["go", "test", "-c", "-o", "torch/torch.test", "./torch/"], check=True)
for r in range(args.rounds):
    if args.pinned:
        gcore, pcore = (0, 1) if r % 2 == 0 else (1, 0)
        env = dict(os.environ, TORCHD_BENCH_THREADS="1", OMP_NUM_THREADS="1")
        g = subprocess.Popen(["taskset", "-c", str(gcore), "./torch.test", "-test.run=^$",
                              "-test.bench=BenchmarkResNet18Forward", "-test.benchtime=20x"],
                             cwd="torch", env=env, stdout=subprocess.PIPE, text=True)
        p = subprocess.Popen(["taskset", "-c", str(pcore)] + PY + ["--threads", "1"], env=env,
                             stdout=subprocess.PIPE, text=True)
        gout, pout = g.communicate()[0], p.communicate()[0]
    else:
        gout = subprocess.run(GO, capture_output=True, text=True, check=True).stdout
        pout = subprocess.run(PY, capture_output=True, text=True, check=True).stdout
    for bs, ns in line.findall(gout):
        go.setdefault(int(bs), []).append(float(ns))
    for bs, ns in line.findall(pout):
        py.setdefault(int(bs), []).append(float(ns))
    print(f"round {r + 1}: go {[(b, v[-1]) for b, v in go.items()]} python {[(b, v[-1]) for b, v in py.items()]}",
          file=sys.stderr, flush=True)

mode = "1 thread each, run at the same time on swapped cores" if args.pinned else "2 threads, interleaved"
print(f"Rounds: {args.rounds}, {mode}. CPU time stolen by the hypervisor during the run: "
      f"{(steal() - steal0) / 100:.1f} s.\n")
print("| batch | Go ms/forward (median) | Python ms/forward (median) | Go img/s | Python img/s | Go / Python throughput |")
print("|---|---|---|---|---|---|")
for bs in sorted(go):
    g, p = statistics.median(go[bs]) / 1e6, statistics.median(py[bs]) / 1e6
    print(f"| {bs} | {g:.1f} | {p:.1f} | {bs / g * 1e3:.1f} | {bs / p * 1e3:.1f} | {p / g:.3f} |")
