#!/usr/bin/env python3
"""Build OUT/onnx_digits/: the zoo's trained digits CNN (OUT/digits/model.pt) exported to ONNX.

The same weights as the TorchScript archive, so that an ONNX archive of it behind the built-in
image_classifier handler can be checked against the TorchScript one on real digits: the same
labels, and probabilities within ONNX Runtime's rounding. The batch dimension is dynamic.

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


if __name__ == "__main__":
    main()
