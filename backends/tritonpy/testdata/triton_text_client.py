"""Triton's own Python clients (HTTP and gRPC) against torchd serving transformer-deploy's
layout (models/triton_text.py): a Python backend tokenizer, the ONNX classifier and their
ensemble, unchanged.

For every reference case (each text alone and the three together), over HTTP and gRPC:
transformer_tokenize's ids equal the tokenizer's in Python exactly, and transformer_inference's
logits equal the tokenizer plus onnxruntime in Python within 1e-5. Exits non-zero on the first
difference, naming it.

Usage: python triton_text_client.py HTTP_HOST:PORT GRPC_HOST:PORT TRITON_TEXT_DIR
"""
import json
import os
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

TOL = 1e-5
TOKENS = ["input_ids", "token_type_ids", "attention_mask"]


def infer(mod, client, model, texts, outputs):
    i = mod.InferInput("TEXT", [len(texts)], "BYTES")
    i.set_data_from_numpy(np.array([t.encode("utf-8") for t in texts], dtype=np.object_))
    r = client.infer(model, [i], outputs=[mod.InferRequestedOutput(n) for n in outputs])
    return {n: r.as_numpy(n) for n in outputs}


def main():
    http_url, grpc_url, d = sys.argv[1:4]
    with open(os.path.join(d, "refs.json")) as f:
        cases = json.load(f)["cases"]
    clients = [("http", httpclient, httpclient.InferenceServerClient(http_url)),
               ("grpc", grpcclient, grpcclient.InferenceServerClient(grpc_url))]
    for proto, mod, client in clients:
        for m in ("transformer_tokenize", "transformer_onnx_model", "transformer_inference"):
            if not client.is_model_ready(m):
                sys.exit(f"{proto}: {m} is not ready")
        for c in cases:
            what = f"{proto} {c['name']}"
            got = infer(mod, client, "transformer_tokenize", c["texts"], TOKENS)
            for k in TOKENS:
                want = np.load(os.path.join(d, c["tokens"][k]))
                if got[k].dtype != np.int64 or not np.array_equal(got[k], want):
                    sys.exit(f"{what}: transformer_tokenize's {k} {got[k].tolist()}, the tokenizer's {want.tolist()}")
            want = np.load(os.path.join(d, c["output"]))
            out = infer(mod, client, "transformer_inference", c["texts"], ["output"])["output"]
            if out.shape != want.shape:
                sys.exit(f"{what}: transformer_inference's output shape {out.shape}, want {want.shape}")
            diff = float(np.max(np.abs(out.astype(np.float64) - want.astype(np.float64))))
            if diff > TOL:
                sys.exit(f"{what}: transformer_inference differs from tokenizer+onnxruntime by {diff:.3g} (> {TOL})")
            print(f"{what}: ids equal, output {list(out.shape)} max |diff| {diff:.2g}")


if __name__ == "__main__":
    main()
