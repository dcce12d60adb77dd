#!/usr/bin/env python3
"""Build OUT/slow/: a TorchScript model whose run time and failures the request controls, for
the daemon's timeout, queue, fault and batching tests.

forward(x: float32 [N, 2]) -> float32 [N, 2]
  x[i, 0]  milliseconds of work for row i; the batch takes about the sum of its rows
  x[i, 1]  a negative value makes the whole forward raise "negative input"
  returns  x * 2, so each response can be matched to its own request

The work is a loop of tiny tensor ops, calibrated here to about 1 ms per unit, because
TorchScript has no sleep. Calibration is approximate: tests use it only for "much longer
than" comparisons, never exact timings.
"""
import json
import os
import time

import torch
from torch import Tensor

import common

NAME = "slow"


class Slow(torch.nn.Module):
    def __init__(self, iters_per_ms: int):
        super().__init__()
        self.iters_per_ms = iters_per_ms

    def forward(self, x: Tensor) -> Tensor:
        if bool((x[:, 1] < 0).any()):
            raise ValueError("negative input")
        iters = int(x[:, 0].clamp(min=0).sum().item() * self.iters_per_ms)
        y = torch.zeros(1)
        for _ in range(iters):
            y = y + 1.0
        return x * 2 + y * 0


def calibrate():
    """Loop iterations per millisecond of the scripted loop on this machine, at its fastest.

    The best of several timings: a calibration taken while the machine is busy would make
    the model run several times faster than its nominal milliseconds once the machine is
    quiet, and the tests rely on "at least this long"."""
    m = torch.jit.script(Slow(1000))
    x = torch.tensor([[50.0, 0.0]])
    m(x)
    m(x)
    best = float("inf")
    for _ in range(9):
        t = time.perf_counter()
        m(x)
        best = min(best, (time.perf_counter() - t) * 1e3)
    return max(int(1000 * 50 / best), 1)


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    with common.model_dir(args.out, NAME) as d:
        per_ms = calibrate()
        common.save_scripted(Slow(per_ms), os.path.join(d, "model.pt"))
        common.write_json(os.path.join(d, "calibration.json"), {"iters_per_ms": per_ms})
        print(f"slow: {per_ms} loop iterations per ms")


if __name__ == "__main__":
    main()
