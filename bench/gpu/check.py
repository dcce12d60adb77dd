# Sends the reference inputs to torchd's KServe v2 REST (binary input, JSON output) at several
# batch sizes and compares with eager PyTorch's outputs on the same GPU.
import json, sys, urllib.request, urllib.error
import numpy as np

base, model, ref, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
sizes = [int(s) for s in sys.argv[5].split(",")]
x = np.load(f"{ref}_x.npy")
y = np.load(f"{ref}_y.npy")


def infer(batch):
    raw = np.ascontiguousarray(batch, dtype=np.float32).tobytes()
    head = json.dumps({"inputs": [{"name": "input__0", "shape": list(batch.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": len(raw)}}]}).encode()
    req = urllib.request.Request(f"{base}/v2/models/{model}/infer", data=head + raw, method="POST",
                                 headers={"Inference-Header-Content-Length": str(len(head)),
                                          "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=120) as r:
        body = json.loads(r.read())
    o = body["outputs"][0]
    return np.array(o["data"], dtype=np.float32).reshape(o["shape"])


worst = 0.0
ok = True
for n in sizes:
    got = infer(x[:n])
    d = float(np.abs(got - y[:n]).max())
    same_top1 = bool((got.argmax(1) == y[:n].argmax(1)).all())
    worst = max(worst, d)
    print(f"{model} batch {n}: shape {list(got.shape)} max|torchd-eager| {d:.3g} top1 equal {same_top1}")
    ok &= d <= tol and got.shape == (n, y.shape[1])
print(f"{model}: {'PASS' if ok else 'FAIL'} (max diff {worst:.3g}, tolerance {tol})")

if len(sys.argv) > 6:
    n = int(sys.argv[6])
    try:
        infer(np.zeros((n,) + x.shape[1:], dtype=np.float32))
        print(f"{model} batch {n}: answered 200 (expected a refusal)")
    except urllib.error.HTTPError as e:
        print(f"{model} batch {n}: {e.code} {e.read()[:200]!r}")
