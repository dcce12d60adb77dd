#!/usr/bin/env python3
"""Build OUT/onnx_digits/: the zoo's trained digits CNN (OUT/digits/model.pt) exported to ONNX; and OUT/onnx_head/.

The same weights as the TorchScript archive, so that an ONNX archive of it behind the built-in
image_classifier handler can be checked against the TorchScript one on real digits: the same
labels, and probabilities within ONNX Runtime's rounding. The batch dimension is dynamic.

OUT/onnx_head/model.onnx is a classifier head for the ONNX image encoder's embeddings
(OUT/onnx/encoder: [N,64] -> softmax [N,10], random weights, seeded): the second step of the
ensemble that bench/ensemble.sh chains after the encoder.

Usage: .venv/bin/python models/onnx_digits.py --out DIR   (make models-onnx, a few seconds)
"""
import os
import shutil

import numpy as np
import onnxruntime as ort
import torch

import common

NAME = "onnx_digits"


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    src = os.path.join(args.out, "digits")
    model = torch.jit.load(os.path.join(src, "model.pt")).eval()
    with common.model_dir(args.out, NAME) as d:
        path = os.path.join(d, "model.onnx")
        x = torch.zeros(1, 1, 28, 28)
        # The legacy exporter takes a TorchScript module as it is.
        torch.onnx.export(model, (x,), path, input_names=["input__0"], output_names=["output__0"],
                          dynamic_axes={"input__0": {0: "batch"}, "output__0": {0: "batch"}}, dynamo=False)
        for f in ("index_to_name.json",):
            if os.path.exists(os.path.join(src, f)):
                shutil.copy(os.path.join(src, f), d)
        # The exported graph answers as the TorchScript module does.
        probe = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        want = model(probe).detach().numpy()
        got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input__0": probe.numpy()})[0]
        diff = float(np.max(np.abs(got - want)))
        if diff > 1e-4:
            raise SystemExit(f"onnx_digits: the exported graph differs from the TorchScript module by {diff}")
    print(f"onnx_digits: {os.path.join(args.out, NAME)} (max |diff| vs TorchScript {diff:.2g})", flush=True)
    torch.manual_seed(65)
    head = torch.nn.Sequential(torch.nn.Linear(64, 10), torch.nn.Softmax(dim=1)).eval()
    with common.model_dir(args.out, "onnx_head") as d:
        torch.onnx.export(head, (torch.zeros(2, 64),), os.path.join(d, "model.onnx"), input_names=["embedding"],
                          output_names=["scores"], dynamic_axes={"embedding": {0: "batch"}, "scores": {0: "batch"}}, dynamo=False)
    print(f"onnx_head: {os.path.join(args.out, 'onnx_head')}", flush=True)


if __name__ == "__main__":
    main()
