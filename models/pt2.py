#!/usr/bin/env python3
"""Export zoo models as AOTInductor packages: OUT/<name>/model.pt2 beside model.pt.

Each package is exported with torch.export from the module class and the weights of the
TorchScript model.pt already in OUT/<name>/, with a dynamic batch dimension
[1, BATCH_MAX], and compiled by torch._inductor.aoti_compile_and_package for a stated CPU
baseline instead of the building machine (-march=native): MARCH (x86-64-v3: AVX2, FMA, BMI2,
F16C) with AVX2 vectorization (SIMDLEN 256), so a package built on an AVX-512 machine serves on
any x86-64-v3 one. torchd refuses a package whose baseline the host lacks.

The package's metadata carries what torchd needs and AOTInductor does not expose: the input
specs with each dimension's bounds (torchd.inputs), the output specs (torchd.outputs) and the
-march (torchd.march).

Compiling takes about a minute per small model on 2 cores, so packages are cached in CACHE
(default build/pt2-cache), keyed by a hash of this script, common.py, the torch version, the
model's weights file and the compile settings: an unchanged model is copied, not recompiled.

Files, per model:
  model.pt2                 the package.
  pt2_ref_input.npy         BATCH_MAX rows of inputs, from the model's own reference data.
  pt2_ref_output_bN.npy     eager PyTorch's output for the first N rows, N in 1, 2, 7, BATCH_MAX.

Usage: .venv/bin/python models/pt2.py --out DIR [--models digits,resnet18] [--cache DIR]
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

import common

HERE = os.path.dirname(os.path.abspath(__file__))
MARCH = "x86-64-v3"
SIMDLEN = 256
REF_BATCHES = (1, 2, 7)


def digits():
    from digits import DigitsCNN
    return DigitsCNN(), "heldout.npy"


def resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None), "ref_input.npy"


# name -> (factory returning (module, input .npy in OUT/<name>), batch max, input name).
# The batch max is at least the model config's batch_size (models/configs/<name>.toml).
MODELS = {
    "digits": (digits, 64, "input__0"),
    "resnet18": (resnet18, 32, "input__0"),
}


def file_hash(h, path):
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def cache_key(name, batch_max):
    h = hashlib.sha256()
    for f in (os.path.abspath(__file__), os.path.join(HERE, "common.py")):
        file_hash(h, f)
    h.update(f"{torch.__version__} {MARCH} {SIMDLEN} {batch_max}".encode())
    return h


def rows(x, n):
    """The first n rows of x, repeating x when it has fewer."""
    reps = -(-n // len(x))
    return np.concatenate([x] * reps)[:n]


def compile_package(module, example, batch_max, input_name, path):
    import torch._inductor.config as inductor_config
    batch = torch.export.Dim("batch", min=1, max=batch_max)
    ep = torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
    shape = list(example.shape)
    spec = [{"name": input_name, "dtype": str(example.dtype).removeprefix("torch."),
             "shape": [-1] + shape[1:], "min": [1] + shape[1:], "max": [batch_max] + shape[1:]}]
    with torch.inference_mode():
        out = module(example)
    outputs = [{"name": "output__0", "dtype": str(out.dtype).removeprefix("torch."),
                "shape": [-1] + list(out.shape[1:])}]
    inductor_config.cpp.march = MARCH
    inductor_config.cpp.simdlen = SIMDLEN
    metadata = {"torchd.inputs": json.dumps(spec), "torchd.outputs": json.dumps(outputs),
                "torchd.march": MARCH}
    torch._inductor.aoti_compile_and_package(
        ep, package_path=path, inductor_configs={"aot_inductor.metadata": metadata})


def build(out, cache, name):
    factory, batch_max, input_name = MODELS[name]
    d = os.path.join(out, name)
    weights = os.path.join(d, "model.pt")
    if not os.path.exists(weights):
        sys.exit(f"pt2: {weights} is missing; build the zoo first (models/build_all.py)")
    module, input_file = factory()
    module.load_state_dict(torch.jit.load(weights).state_dict())
    module.eval()
    x = torch.from_numpy(rows(np.load(os.path.join(d, input_file)), batch_max))

    h = cache_key(name, batch_max)
    file_hash(h, weights)
    cached = os.path.join(cache, f"{name}-{h.hexdigest()[:24]}.pt2")
    if os.path.exists(cached):
        print(f"pt2 {name}: cached {cached}", flush=True)
    else:
        t = time.monotonic()
        # The package's folder inside the zip is named after the file: compile to NAME.pt2.
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            partial = os.path.join(tmp, f"{name}.pt2")
            compile_package(module, x[:2].clone(), batch_max, input_name, partial)
            os.replace(partial, cached)
        print(f"pt2 {name}: compiled in {time.monotonic() - t:.1f} s", flush=True)
    shutil.copyfile(cached, os.path.join(d, "model.pt2"))

    np.save(os.path.join(d, "pt2_ref_input.npy"), x.numpy())
    for n in REF_BATCHES + (batch_max,):
        with torch.inference_mode():
            y = module(x[:n].clone())
        np.save(os.path.join(d, f"pt2_ref_output_b{n}.npy"), y.numpy())


def main():
    def flags(p):
        p.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo names")
        p.add_argument("--cache", default=os.path.normpath(os.path.join(HERE, "..", "build", "pt2-cache")),
                       help="compiled packages, by input hash")
    args = common.parse_args(__doc__.splitlines()[0], flags)
    os.makedirs(args.cache, exist_ok=True)
    for name in args.models.split(","):
        build(args.out, args.cache, name)


if __name__ == "__main__":
    main()
