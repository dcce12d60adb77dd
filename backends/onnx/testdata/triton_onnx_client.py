"""Triton's own Python clients (HTTP and gRPC) against torchd serving ONNX models from a Triton
repository, unchanged, as their authors published them (models/onnx_zoo.py builds them).

Each model's answers must equal onnxruntime's in Python (the references beside each model,
refs.json) within 1e-5: every reference case over HTTP and over gRPC, and for the dynamically
batched encoder, single rows sent concurrently (so that torchd batches them) against the rows of
the batched reference. Exits non-zero on the first difference, naming it.

Usage: python triton_onnx_client.py HTTP_HOST:PORT GRPC_HOST:PORT ONNX_DIR
"""
import json
import os
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

TOL = 1e-5
# The repository's models and the zoo directory whose references they answer.
MODELS = {"onnx-mnist-cpu": "mnist", "image_encoder": "encoder", "transformer_onnx_model": "bert"}
DATATYPES = {np.dtype("float32"): "FP32", np.dtype("int64"): "INT64", np.dtype("float16"): "FP16",
             np.dtype("int32"): "INT32", np.dtype("int8"): "INT8", np.dtype("uint8"): "UINT8",
             np.dtype("bool"): "BOOL", np.dtype("float64"): "FP64"}


def cases(onnx_dir, zoo):
    d = os.path.join(onnx_dir, zoo)
    with open(os.path.join(d, "refs.json")) as f:
        refs = json.load(f)["cases"]
    for c in refs:
        ins = {k: np.load(os.path.join(d, v)) for k, v in c["inputs"].items()}
        outs = {k: np.load(os.path.join(d, v)) for k, v in c["outputs"].items()}
        yield c["name"], ins, outs


def infer(mod, client, model, ins, out_names):
    inputs = []
    for name, x in ins.items():
        i = mod.InferInput(name, list(x.shape), DATATYPES[x.dtype])
        i.set_data_from_numpy(x)
        inputs.append(i)
    outputs = [mod.InferRequestedOutput(n) for n in out_names]
    r = client.infer(model, inputs, outputs=outputs)
    return {n: r.as_numpy(n) for n in out_names}


def check(what, got, want):
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            sys.exit(f"{what}: no output {name!r}")
        if g.shape != w.shape:
            sys.exit(f"{what}: output {name!r} shape {g.shape}, want {w.shape}")
        diff = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if w.size else 0.0
        if diff > TOL:
            sys.exit(f"{what}: output {name!r} differs from onnxruntime by {diff:.3g} (> {TOL})")
        print(f"{what}: {name} {list(g.shape)} max |diff| {diff:.2g}")


def check_types(http, grpc):
    """onnx-types: a config of one line (platform only), completed from the graph; each type
    goes in and comes back out unchanged, strings included, over both protocols."""
    meta = http.get_model_metadata("onnx-types")
    got = sorted((i["name"], i["datatype"]) for i in meta["inputs"])
    print(f"onnx-types: completed inputs {got}")
    rng = np.random.default_rng(1)
    values = {
        "fp32": ("FP32", rng.standard_normal((2, 3)).astype(np.float32)),
        "fp16": ("FP16", rng.standard_normal((2, 3)).astype(np.float16)),
        "bf16": ("BF16", np.array([[1.0, -2.5, 0.15625], [3.0, 0.0, -1.0]], dtype=np.float32)),
        "fp64": ("FP64", rng.standard_normal((2, 3))),
        "int64": ("INT64", np.array([[1, -2, 3], [2**40, -(2**40), 0]], dtype=np.int64)),
        "int32": ("INT32", np.array([[1, -2, 3], [2**30, -(2**30), 0]], dtype=np.int32)),
        "int16": ("INT16", np.array([[1, -2, 3], [32767, -32768, 0]], dtype=np.int16)),
        "int8": ("INT8", np.array([[1, -2, 3], [127, -128, 0]], dtype=np.int8)),
        "uint8": ("UINT8", np.array([[1, 2, 3], [255, 0, 7]], dtype=np.uint8)),
        "bool": ("BOOL", np.array([[True, False, True], [False, False, True]])),
        "string": ("BYTES", np.array([[b"a", b"", "\u00e9t\u00e9".encode()], [b"x" * 300, b"\x00\x01", b"z"]], dtype=np.object_)),
    }
    for mod, client, proto in ((httpclient, http, "HTTP"), (grpcclient, grpc, "gRPC")):
        inputs, outputs = [], []
        for t, (dt, x) in values.items():
            i = mod.InferInput(f"in_{t}", list(x.shape), dt)
            i.set_data_from_numpy(x)
            inputs.append(i)
            outputs.append(mod.InferRequestedOutput(f"out_{t}"))
        r = client.infer("onnx-types", inputs, outputs=outputs)
        for t, (dt, x) in values.items():
            y = r.as_numpy(f"out_{t}")
            if y is None or y.shape != x.shape or not np.array_equal(y.astype(x.dtype) if dt != "BYTES" else y, x):
                sys.exit(f"onnx-types {proto}: out_{t} is {y!r}, want {x!r}")
        print(f"onnx-types {proto}: every type round-trips")


def main():
    http_url, grpc_url, onnx_dir = sys.argv[1:4]
    http = httpclient.InferenceServerClient(http_url, concurrency=8)
    grpc = grpcclient.InferenceServerClient(grpc_url)
    index = {m["name"]: m.get("state") for m in http.get_model_repository_index()}
    gindex = {m.name: m.state for m in grpc.get_model_repository_index().models}
    for model in MODELS:
        if index.get(model) != "READY" or gindex.get(model) != "READY":
            sys.exit(f"{model}: index says {index.get(model)} over HTTP, {gindex.get(model)} over gRPC; want READY")
        meta = http.get_model_metadata(model)
        print(f"{model}: platform {meta['platform']}, inputs {[(i['name'], i['datatype'], i['shape']) for i in meta['inputs']]}")
        if meta["platform"] != "onnxruntime_onnx":
            sys.exit(f"{model}: platform {meta['platform']}, want onnxruntime_onnx")
    for model, zoo in MODELS.items():
        for name, ins, outs in cases(onnx_dir, zoo):
            check(f"{model} {name} HTTP", infer(httpclient, http, model, ins, list(outs)), outs)
            check(f"{model} {name} gRPC", infer(grpcclient, grpc, model, ins, list(outs)), outs)
    # The encoder batches dynamically: its batch case's rows, sent one a request at once,
    # must each equal their row of the batched reference.
    for name, ins, outs in cases(onnx_dir, "encoder"):
        (iname, x), = ins.items()
        if x.shape[0] < 2:
            continue
        # tritonclient.http's async_infer sends them at once over its connection pool.
        reqs = []
        for i in range(x.shape[0]):
            inp = httpclient.InferInput(iname, [1] + list(x.shape[1:]), DATATYPES[x.dtype])
            inp.set_data_from_numpy(x[i:i + 1])
            reqs.append(http.async_infer("image_encoder", [inp], outputs=[httpclient.InferRequestedOutput(n) for n in outs]))
        for i, rq in enumerate(reqs):
            r = rq.get_result()
            check(f"image_encoder {name} row {i} alone, concurrently", {n: r.as_numpy(n) for n in outs},
                  {k: v[i:i + 1] for k, v in outs.items()})
    check_types(http, grpc)
    stats = http.get_inference_statistics("image_encoder")["model_stats"][0]
    print(f"image_encoder: {stats['inference_count']} inferences in {stats['execution_count']} executions")
    print("OK")


if __name__ == "__main__":
    main()
