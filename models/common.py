"""Helpers shared by the model-zoo build scripts.

Every script builds one directory, OUT/<name>/, with the project's venv (models/requirements.txt:
the pinned torch, torchvision, scikit-learn, numpy, Pillow, and packages that ship real
weights): no downloads at build time, fixed seeds, a fixed thread count, deterministic
algorithms and the CPU kernels capped at AVX2 (PINNED_KERNELS), so two runs produce the same
outputs, on this machine and, as far as PyTorch allows, on any x86-64 CPU with AVX2
(docs/guide/reproducibility.md says what still varies).
"""
import argparse
import contextlib
import json
import os
import shutil
import sys

import torch

# Matches CI's 2 cores: float reductions may split differently with another thread count,
# changing the last bits of outputs.
THREADS = 2

# The CPU kernels each library picks for the machine's ISA, capped at AVX2, which every
# x86-64 CPU of the last decade has: ATen's vectorized kernels, oneDNN's JIT kernels (its
# convolutions and linear layers), and MKL's (matrix products; MKL_CBWR is its Conditional
# Numerical Reproducibility mode, STRICT also for the operations CNR does not cover by
# default). An AVX-512 or AMX machine would otherwise train other weights than an AVX2 one,
# since wider vectors sum in another order. Each library reads its variable once, when it
# first runs a kernel, so a script restarts itself with them (pin_cpu_kernels).
PINNED_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "AVX2,STRICT",
}


def pin_cpu_kernels():
    """Restart this script with PINNED_KERNELS in its environment, unless they are there."""
    if any(os.environ.get(k) != v for k, v in PINNED_KERNELS.items()):
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **PINNED_KERNELS))


def parse_args(description, add_arguments=None, pin_kernels=True):
    """Parse --out (and any script-specific flags) and pin torch's global settings.

    pin_kernels=False keeps the machine's own kernels, for what is compiled for this CPU
    (pt2.py's AOTInductor packages).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, help="output root; the model goes to OUT/<name>/")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args()
    if pin_kernels:
        pin_cpu_kernels()
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    return args


@contextlib.contextmanager
def model_dir(out, name):
    """Yield a scratch directory that becomes OUT/<name> only once the build has finished.

    An existing OUT/<name> is therefore always complete, which lets build_all.py skip it
    safely, and a failed build (e.g. digits below its accuracy bar) leaves no half-written
    model behind for a test to pick up.
    """
    final = os.path.join(out, name)
    scratch = os.path.join(out, f".{name}.partial")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    try:
        yield scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.rename(scratch, final)


def save_scripted(module, path):
    """Script module in eval mode, save it, and return the module loaded back from path.

    Reference outputs are computed with the reloaded module: that is exactly what the Go
    server loads, so a scripting or serialization difference cannot hide in the refs.
    """
    torch.jit.save(torch.jit.script(module.eval()), path)
    return torch.jit.load(path)


def write_json(path, obj):
    # allow_nan=False: NaN/Infinity are not JSON, and Go's encoding/json rejects them.
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, allow_nan=False)
        f.write("\n")


def index_to_name(names):
    """TorchServe's index_to_name.json form: {"0": "tench", "1": "goldfish", ...}."""
    return {str(i): name for i, name in enumerate(names)}
