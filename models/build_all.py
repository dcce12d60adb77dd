#!/usr/bin/env python3
"""Build the whole model zoo into OUT/ and verify it: OUT/efficientnet_lite0, OUT/resnet18, OUT/digits, OUT/multiio, OUT/slow, OUT/captioner, OUT/textcls, OUT/attention, OUT/minilm, OUT/hfbert, OUT/detector, OUT/segmenter.

models/pt2.py then exports some of them as AOTInductor packages too (OUT/<name>/model.pt2,
model_bf16.pt2 for digits and MiniLM, model_fp16.pt2 for digits, and the captioner's encoder
as OUT/captioner/encoder.pt2).

A model whose OUT/<name>/ is newer than its script and common.py is skipped (--force
rebuilds it). That is safe because a script only puts OUT/<name>/ in place once it has
finished (common.model_dir). Each script runs in its own interpreter, so one model's seeds
and torch settings cannot leak into another's outputs.

Usage: .venv/bin/python models/build_all.py --out DIR [--force]
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["efficientnet_lite0", "resnet18", "digits", "multiio", "slow", "captioner", "textcls",
          "attention", "minilm", "hfbert", "detector", "segmenter"]
# Scripts not named after the model they build (OUT/<name>/ is built by models/<script>).
SCRIPTS = {"efficientnet_lite0": "efficientnet.py"}
# Scripts that import another model's script (the segmenter draws the detector's scenes).
IMPORTS = {"segmenter": ["detector.py"]}


def script(name):
    return SCRIPTS.get(name, f"{name}.py")


def oldest_output(path):
    """mtime of the oldest file under path, or None if there is none."""
    times = [os.path.getmtime(os.path.join(root, f))
             for root, _, files in os.walk(path) for f in files]
    return min(times, default=None)


def up_to_date(out, name):
    built = oldest_output(os.path.join(out, name))
    sources = [os.path.join(HERE, f) for f in (script(name), "common.py", *IMPORTS.get(name, []))]
    return built is not None and built > max(os.path.getmtime(s) for s in sources)


def run(script, out, *extra):
    # TorchScript emits some generated code (e.g. a module's Final constants) in Python set
    # order, which hash randomization shuffles between runs; a fixed seed makes model.pt
    # byte-identical from run to run (for the same checkout path, which its debug info names).
    env = dict(os.environ, PYTHONHASHSEED="0")
    # sys.executable rather than "python3": the python3 first on PATH has no torch.
    result = subprocess.run([sys.executable, os.path.join(HERE, script), "--out", out, *extra], env=env)
    if result.returncode != 0:
        sys.exit(f"build_all: {script} failed (exit status {result.returncode})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output root")
    parser.add_argument("--force", action="store_true", help="rebuild up-to-date models too")
    args = parser.parse_args()
    if importlib.util.find_spec("torch") is None:
        sys.exit(f"build_all: {sys.executable} has no torch; run it with the project's venv "
                 "(make venv, then .venv/bin/python)")
    os.makedirs(args.out, exist_ok=True)

    start = time.monotonic()
    for name in MODELS:
        if not args.force and up_to_date(args.out, name):
            print(f"{name}: up to date, skipped", flush=True)
            continue
        t = time.monotonic()
        run(script(name), args.out)
        print(f"{name}: built in {time.monotonic() - t:.1f} s", flush=True)
    # Captum's references for torchd's explanations, from the digits and textcls models.
    t = time.monotonic()
    run("explain_ref.py", args.out)
    print(f"explain_ref: {time.monotonic() - t:.1f} s", flush=True)
    # The .pt2 packages come from the models' weights; pt2.py caches them by input hash, so
    # it recompiles only what changed. The bf16 packages of digits and MiniLM are what the
    # tests run in bf16; `make models-bf16` exports the others.
    t = time.monotonic()
    run("pt2.py", args.out)
    run("pt2.py", args.out, "--dtype", "bf16", "--models", "digits,minilm")
    # fp16 is for GPUs; digits' fp16 package for the CPU lets the tests serve precision fp16.
    run("pt2.py", args.out, "--dtype", "fp16", "--models", "digits")
    print(f"pt2: {time.monotonic() - t:.1f} s", flush=True)
    t = time.monotonic()
    run("verify.py", args.out)
    print(f"verify: {time.monotonic() - t:.1f} s", flush=True)
    print(f"total: {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
