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
  served   (--served) torchd serving the same repository (`torchd serve --model-repository`,
           one instance, its default threads, requests up to 64 MiB), one request of the batch at a time over REST
           (the binary tensor extension, one kept-alive connection): the forward plus the
           request path, what a client sees at c=1.

Each round runs both, in a new random order; a figure is the median forward of a round (Go's
ns/op over at least --time, Python's median over at least --time), and the table gives the
median over rounds, the ratio torchd/python (< 1: torchd faster), and the load average at each
round's start (the machine may be shared: only the ratio of an interleaved run means anything
then).

Usage: PYTHONPATH=build/pyext .venv/bin/python bench/openvino_forward.py [--rounds 5] [--time 2]
"""
import argparse
import http.client
import json
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


def start_server(zoo):
    binary = os.path.join(ROOT, "build", "torchd-openvino-bench")
    subprocess.run(["go", "build", "-o", binary, "./cmd/torchd"], cwd=ROOT, check=True)
    proc = subprocess.Popen([binary, "serve", "--model-repository", zoo, "--access-log=false", "--enable-snapshots=false",
                             "--inference-address", "127.0.0.1:18680", "--management-address", "127.0.0.1:18681",
                             "--metrics-address", "127.0.0.1:18682", "--max-request-size", "67108864", "--grpc-address=", "--grpc-inference-address=",
                             "--grpc-management-address="], stderr=subprocess.DEVNULL,
                            env=dict(os.environ, TORCHD_OPENVINO_LIB=os.path.join(ROOT, "bin", "libopenvino_c.so.2641")))
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", 18680, timeout=5)
            ready = True
            for name in MODELS:
                c.request("GET", f"/v2/models/{name}/ready")
                r = c.getresponse()
                r.read()
                ready = ready and r.status == 200
            c.close()
            if ready:
                return proc
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("torchd did not become ready")


def served_round(zoo, min_time):
    # A connection a round: the server closes one left idle while the other backends ran.
    conn = http.client.HTTPConnection("127.0.0.1", 18680, timeout=600)
    x8 = np.load(os.path.join(zoo, "ref_input.npy"))
    out = {}
    for name in MODELS:
        for n in BATCHES:
            x = np.ascontiguousarray(np.concatenate([x8] * ((n + 7) // 8))[:n])
            hdr = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                          "parameters": {"binary_data_size": x.nbytes}}],
                              "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
            body = hdr + x.tobytes()
            headers = {"Inference-Header-Content-Length": str(len(hdr)), "Content-Type": "application/octet-stream"}

            def call():
                conn.request("POST", f"/v2/models/{name}/infer", body, headers)
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    sys.exit(f"served {name}: {r.status}")
            call()
            call()
            times, end = [], time.monotonic() + min_time
            while time.monotonic() < end or len(times) < 3:
                t = time.perf_counter()
                call()
                times.append(time.perf_counter() - t)
            out[(name, n)] = statistics.median(times)
    conn.close()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoo", default=os.path.join(ROOT, "models", "out", "openvino"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--time", type=float, default=2.0, help="least seconds per figure")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--served", action="store_true", help="also torchd serving the repository, over REST")
    args = p.parse_args()
    import openvino as ov
    binary = os.path.join(ROOT, "build", "openvino.test")
    subprocess.run(["go", "test", "-c", "-o", binary, "./openvino/"], cwd=ROOT, check=True)
    print(next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
          f"OpenVINO {ov.get_version()}, {args.threads} threads, {args.rounds} rounds", flush=True)
    core = ov.Core()
    results = {"torchd": [], "python": []}
    server = None
    if args.served:
        results["served"] = []
        server = start_server(args.zoo)
    loads = []
    try:
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            order = list(results)
            random.shuffle(order)
            for b in order:
                if b == "torchd":
                    results[b].append(torchd_round(binary, args.threads, args.time))
                elif b == "python":
                    results[b].append(python_round(core, args.zoo, args.threads, args.time))
                else:
                    results[b].append(served_round(args.zoo, args.time))
            print(f"round {r + 1}: load {loads[-1]:.2f}", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    print(f"load average at each round's start: {' '.join(f'{l:.2f}' for l in loads)}")
    print(f"{'model':18} {'batch':>5} " + " ".join(f"{b + ' ms':>10}" for b in results) + " " +
          " ".join(f"{b + '/python':>14} {'(rounds)':>13}" for b in results if b != "python"))
    for name in MODELS:
        for n in BATCHES:
            med = {b: statistics.median(x[(name, n)] for x in rs) for b, rs in results.items()}
            print(f"{name:18} {n:>5} " + " ".join(f"{med[b] * 1e3:>10.2f}" for b in results) + " " +
                  " ".join(f"{med[b] / med['python']:>14.3f} {spread(results[b], results['python'], (name, n)):>13}"
                           for b in results if b != "python"))


def spread(rs, py, key):
    """The lowest and highest ratio of one round's figures (the same round's, interleaved)."""
    ratios = [a[key] / b[key] for a, b in zip(rs, py)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


if __name__ == "__main__":
    main()
