"""onnxruntime's own throughput in one Python process: the ceiling a server of the same model
on the same cores is measured against. Two layouts, and the faster counts: one session with
every core, run by one thread; and one session a core, each run by its own thread (ORT
releases the GIL in run). Inputs are the bodies' (the same tensors the servers get).

  .venv/bin/python bench/onnx/inprocess.py MODEL BODY.json SECONDS
prints: <runs/s of the faster layout> <layout>
"""
import json
import os
import sys
import threading
import time

import numpy as np
import onnxruntime as ort

DTYPES = {"FP32": np.float32, "INT64": np.int64}


def session(path, threads):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def rate(sessions, feeds, seconds):
    counts = [0] * len(sessions)
    stop = time.monotonic() + seconds

    def loop(i):
        s = sessions[i]
        while time.monotonic() < stop:
            s.run(None, feeds)
            counts[i] += 1
    for s in sessions:  # warm-up
        s.run(None, feeds)
    ts = [threading.Thread(target=loop, args=(i,)) for i in range(len(sessions))]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def main():
    path, body, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with open(body) as f:
        b = json.load(f)
    feeds = {i["name"]: np.asarray(i["data"], dtype=DTYPES[i["datatype"]]).reshape(i["shape"]) for i in b["inputs"]}
    n = os.cpu_count()
    one = rate([session(path, n)], feeds, seconds)
    each = rate([session(path, 1) for _ in range(n)], feeds, seconds)
    print(f"{max(one, each):.1f} {'one-session-all-cores' if one >= each else 'one-session-per-core'}")


if __name__ == "__main__":
    main()
