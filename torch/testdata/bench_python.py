#!/usr/bin/env python3
"""The Python side of BenchmarkResNet18Forward: the same TorchScript file, the same input,
the same intra-op threads (2 by default), under inference_mode. Prints one line per batch size in Go's benchmark
format so benchstat-style tools and the Makefile can read both."""
import argparse
import statistics
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--models", default="models/out")
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()

torch.set_num_threads(args.threads)
m = torch.jit.load(f"{args.models}/resnet18/model.pt").eval()
for bs in (1, 32):
    n = bs * 3 * 224 * 224
    x = (torch.arange(n, dtype=torch.float32) % 255 / 255 - 0.5).reshape(bs, 3, 224, 224)
    with torch.inference_mode():
        for _ in range(3):
            m(x)
        times = []
        for _ in range(args.iters if bs == 1 else max(args.iters // 4, 3)):
            t = time.perf_counter()
            m(x)
            times.append(time.perf_counter() - t)
    med = statistics.fmean(times)  # ns/op is a mean, as in Go's testing.B
    print(f"PythonResNet18Forward/batch{bs}\t{len(times)}\t{med * 1e9:.0f} ns/op\t{bs / med:.2f} img/s", flush=True)
