"""Helpers shared by the model-zoo build scripts.

Every script builds one directory, OUT/<name>/, with the project's venv (models/requirements.txt:
the pinned torch, torchvision, scikit-learn, numpy, Pillow, and packages that ship real
weights): no downloads at build time, fixed seeds and a fixed thread count, so two runs on
this machine produce the same outputs.
"""
import argparse
import contextlib
import json
import os
import shutil

import torch

# Matches CI's 2 cores: float reductions may split differently with another thread count,
# changing the last bits of outputs.
THREADS = 2


def parse_args(description, add_arguments=None):
    """Parse --out (and any script-specific flags) and pin torch's global settings."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, help="output root; the model goes to OUT/<name>/")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args()
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
