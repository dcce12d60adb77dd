"""The OpenMP wait policy of a handler process at c=1: bench/handlerproc/handler.py's request
(decode, Resize/CenterCrop/Normalize, resnet18 forward at batch 1, top-5) in a fresh process
per policy, each request after an idle gap (the server's maxBatchDelay of 10 ms, during which
a worker waits), the policies in a shuffled order each round. libgomp reads its settings as it
loads, so each runs in a process of its own. Prints per policy the medians over the rounds of
each round's median wall and CPU (all threads) milliseconds a request.
Usage: python omp_wait.py [rounds] [requests per round]"""
import os
import random
import subprocess
import sys

POLICIES = {
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},  # torchd's handler processes now
    "passive+spin2000": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "2000"},
    "unset": {},  # TorchServe's workers: libgomp's default, a spin of 300000 before sleeping
}

CHILD = r"""
import io, sys, time, torch, torchvision
from PIL import Image
sys.path.insert(0, sys.argv[1])
from handler import PREPROCESS
n = int(sys.argv[2])
torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None).eval()
body = open(sys.argv[3], "rb").read()
def request():
    x = torch.stack([PREPROCESS(Image.open(io.BytesIO(body)).convert("RGB"))])
    with torch.inference_mode():
        torch.topk(torch.softmax(model(x), dim=1), 5, dim=1)
for _ in range(10):
    request()
wall, cpu = [], []
for _ in range(n):
    time.sleep(0.010)
    w, c = time.perf_counter(), time.process_time()
    request()
    wall.append((time.perf_counter() - w) * 1000)
    cpu.append((time.process_time() - c) * 1000)
wall.sort(); cpu.sort()
print(wall[n // 2], cpu[n // 2])
"""


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    here = os.path.dirname(os.path.abspath(__file__))
    img = os.path.join(here, "..", "..", "models", "out", "resnet18", "sample_640x480.jpg")
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    res = {p: [] for p in POLICIES}
    for r in range(rounds):
        order = list(POLICIES)
        random.shuffle(order)
        for p in order:
            load = open("/proc/loadavg").read().split()[0]
            out = subprocess.run([sys.executable, "-c", CHILD, here, str(n), img], env={**base, **POLICIES[p]},
                                 capture_output=True, text=True, check=True).stdout.split()
            res[p].append((float(out[0]), float(out[1])))
            print("round %d policy=%s wall_ms=%.1f cpu_ms=%.1f load=%s" % (r + 1, p, res[p][-1][0], res[p][-1][1], load), flush=True)
    for p, v in res.items():
        w = sorted(x[0] for x in v)
        c = sorted(x[1] for x in v)
        print("median policy=%s wall_ms=%.1f cpu_ms=%.1f (wall %.1f-%.1f)" % (p, w[len(w) // 2], c[len(c) // 2], w[0], w[-1]))


if __name__ == "__main__":
    main()
