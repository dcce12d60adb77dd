#!/usr/bin/env python3
"""Check a built model zoo the way its consumers use it: every model.pt is reloaded with
torch.jit.load and must reproduce its stored refs, and every file the Go tests read must be
present and consistent with the others. Exits non-zero on the first problem.

Usage: verify.py --out DIR
"""
import argparse
import json
import os
import sys
import tomllib

import numpy as np
import torch
from PIL import Image

import common
import efficientnet
import multiio

# Loose enough for another thread count's float rounding, far tighter than any real bug.
RTOL, ATOL = 1e-5, 1e-6


def expect(ok, what):
    if not ok:
        raise AssertionError(what)


def load(d, name):
    path = os.path.join(d, name)
    expect(os.path.isfile(path), f"{path}: missing")
    if name.endswith(".npy"):
        return np.load(path)
    if name.endswith(".json"):
        with open(path) as f:
            return json.load(f)
    if name.endswith(".pt"):
        return torch.jit.load(path)
    return Image.open(path)


def expect_close(got, want, what):
    expect(got.dtype == want.dtype and got.shape == want.shape,
           f"{what}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}")
    expect(np.allclose(got, want, rtol=RTOL, atol=ATOL),
           f"{what}: max abs diff {np.abs(got.astype(np.float64) - want).max()}")


def run(model, x):
    with torch.inference_mode():
        return model(torch.from_numpy(x)).numpy()


def verify_resnet18(d):
    model = load(d, "model.pt")
    expect_close(run(model, load(d, "ref_input.npy")), load(d, "ref_output.npy"), "ref_output")
    expect(len(load(d, "index_to_name.json")) == 1000, "index_to_name.json: want 1000 classes")
    for name, size, mode in [("sample_640x480.jpg", (640, 480), "RGB"),
                             ("sample_1920x1080.jpg", (1920, 1080), "RGB"),
                             ("sample_224.png", (224, 224), "RGB")]:
        img = load(d, name)
        expect((img.size, img.mode) == (size, mode), f"{name}: {img.size} {img.mode}")


def normalize_png(path):
    img = Image.open(path)
    expect((img.size, img.mode) == ((28, 28), "L"), f"{path}: {img.size} {img.mode}")
    return (np.asarray(img, np.float32)[None] / np.float32(255) - np.float32(0.5)) / np.float32(0.5)


def verify_digits(d):
    model = load(d, "model.pt")
    heldout, labels = load(d, "heldout.npy"), load(d, "heldout_labels.npy")
    expect(heldout.dtype == np.float32 and heldout.shape[1:] == (1, 28, 28), "heldout.npy shape")
    expect(labels.dtype == np.int64 and labels.shape == (len(heldout),), "heldout_labels.npy")

    # The PNGs are the requests the server will get: decoding and normalizing them must give
    # exactly the tensors the accuracy was measured on.
    names = load(d, "heldout/labels.json")
    expect(sorted(names) == sorted(f for f in os.listdir(os.path.join(d, "heldout"))
                                   if f.endswith(".png")), "heldout/labels.json vs PNGs")
    expect(len(names) == len(heldout), "heldout/labels.json: one entry per held-out row")
    for i, (name, label) in enumerate(sorted(names.items())):
        expect(name == f"{i:04d}_{labels[i]}.png" and label == labels[i], f"{name}: label")
        expect(np.array_equal(normalize_png(os.path.join(d, "heldout", name)), heldout[i]),
               f"{name}: pixels differ from heldout.npy row {i}")

    accuracy = load(d, "accuracy.json")
    measured = (run(model, heldout).argmax(1) == labels).mean()
    expect(accuracy == {"heldout_accuracy": measured, "n": len(labels)},
           f"accuracy.json {accuracy} vs measured {measured}")
    expect(measured >= 0.97, f"held-out accuracy {measured} < 0.97")

    ref_input = load(d, "ref_input.npy")
    expect(np.array_equal(ref_input, heldout[:4]), "ref_input.npy: first 4 held-out rows")
    expect_close(run(model, ref_input), load(d, "ref_output.npy"), "ref_output")
    expect(load(d, "index_to_name.json") == {str(i): str(i) for i in range(10)},
           "index_to_name.json")
    sample = normalize_png(os.path.join(d, "sample.png"))
    expect(np.array_equal(sample, load(d, "sample_tensor.npy")), "sample_tensor.npy vs sample.png")
    expect(np.array_equal(sample, heldout[0]), "sample.png: held-out row 0")


def expect_same(got, want, what):
    """Compare decoded ref values, telling int from float and tuple from list."""
    expect(type(got) is type(want), f"{what}: got {type(got).__name__}, want {type(want).__name__}")
    if isinstance(want, torch.Tensor):
        if want.dtype.is_floating_point:
            expect_close(got.float().numpy(), want.float().numpy(), what)
            expect(got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}")
        else:
            expect(got.dtype == want.dtype and torch.equal(got, want), f"{what}: {got} != {want}")
    elif isinstance(want, (tuple, list)):
        expect(len(got) == len(want), f"{what}: length {len(got)}, want {len(want)}")
        for i, (g, w) in enumerate(zip(got, want)):
            expect_same(g, w, f"{what}[{i}]")
    elif isinstance(want, dict):
        expect(list(got) == list(want), f"{what}: keys {list(got)}, want {list(want)}")
        for k in want:
            expect_same(got[k], want[k], f"{what}[{k!r}]")
    else:
        expect(got == want, f"{what}: {got!r} != {want!r}")


def verify_multiio(d):
    model = load(d, "model.pt")
    cases = load(d, "ref.json")["cases"]
    expect({c["method"] for c in cases} >= {"forward", "scalars", "linear"}, "ref.json methods")
    for case in cases:
        inputs = [multiio.decode(v) for v in case["inputs"]]
        try:
            with torch.inference_mode():
                got = getattr(model, case["method"])(*inputs)
        except torch.jit.Error as e:
            expect("error" in case and case["error"] in str(e),
                   f"{case['name']}: unexpected error {e}")
            continue
        expect("error" not in case, f"{case['name']}: no error, want {case.get('error')!r}")
        # Round-trip through the encoder so the comparison also covers ref.json's encoding.
        expect_same(multiio.decode(multiio.encode(got)), multiio.decode(case["output"]),
                    case["name"])


def verify_efficientnet_lite0(d):
    """refs.json is what the e2e test holds torchd to: recompute it from the images with the
    reloaded model, and check that the archive's config asks torchd for the same preprocessing."""
    model = load(d, "model.pt")
    refs = load(d, "refs.json")
    with open(os.path.join(os.path.dirname(__file__), "configs", "efficientnet_lite0.toml"),
              "rb") as f:
        options = tomllib.load(f)["options"]
    for k, v in refs["preprocess"].items():
        expect(options[k] == v, f"configs/efficientnet_lite0.toml: {k} = {options[k]}, refs {v}")
    names = list(refs["images"])
    expect(sorted(names) == sorted(os.listdir(os.path.join(d, "images"))), "images/ vs refs.json")
    got = efficientnet.top_k(model, [os.path.join(d, "images", n) for n in names],
                             [v for _, v in sorted(load(d, "index_to_name.json").items(),
                                                   key=lambda kv: int(kv[0]))])
    for name, g in zip(names, got):
        want = refs["images"][name]
        expect([l for l, _ in g] == [l for l, _ in want], f"{name}: top-5 {g}, refs {want}")
        expect(np.allclose([p for _, p in g], [p for _, p in want], rtol=RTOL, atol=ATOL),
               f"{name}: probabilities {g}, refs {want}")
    # The weights are ImageNet's: the photo of a Chinese palace must come out as one.
    expect(refs["images"]["china.jpg"][0][0] == "palace", f"china.jpg: {refs['images']['china.jpg']}")


def verify_detector(d):
    """The files the Go tests read; torchvision's operators reproduce their outputs; every
    label of the references is one of index_to_name.json's."""
    names = set(load(d, "index_to_name.json").values())
    refs = load(d, "ref_answers.json")
    expect(set(refs) == {"scene_320x240.png", "scene_200x300.png", "batch"} and len(refs["batch"]) == 2,
           f"ref_answers.json: keys {sorted(refs)}")
    for answer in [refs["scene_320x240.png"], refs["scene_200x300.png"], *refs["batch"]]:
        expect(len(answer) > 0, "ref_answers.json: an image without detections")
        for det in answer:
            label = next(k for k in det if k != "score")
            expect(label in names and len(det[label]) == 4, f"ref_answers.json: detection {det}")
    for f in ("model.pt", "not_a_detector.pt", "scene_320x240.png", "scene_200x300.png"):
        expect(os.path.isfile(os.path.join(d, f)), f"{f}: missing")
    ops = load(d, "ops.pt")
    with torch.inference_mode():
        outs = ops(*[torch.from_numpy(load(d, f"ops_in_{i}.npy")) for i in range(5)])
    for i, got in enumerate(outs):
        expect_close(got.numpy(), load(d, f"ops_out_{i}.npy"), f"ops_out_{i}.npy")


def verify_segmenter(d):
    """The references' shapes: [class, p] per pixel of both scenes at 224×224, p in (0, 1]."""
    ref, margin = load(d, "ref_answer.npy"), load(d, "ref_margin.npy")
    expect(ref.shape == (2, 224, 224, 2) and margin.shape == (2, 224, 224),
           f"ref_answer.npy {ref.shape}, ref_margin.npy {margin.shape}")
    expect(((ref[..., 1] > 0) & (ref[..., 1] <= 1)).all(), "ref_answer.npy: a probability out of (0, 1]")
    for f in ("model.pt", "no_out.pt", "scene_320x240.png", "scene_200x300.png"):
        expect(os.path.isfile(os.path.join(d, f)), f"{f}: missing")


VERIFIERS = {"efficientnet_lite0": verify_efficientnet_lite0, "resnet18": verify_resnet18, "digits": verify_digits, "multiio": verify_multiio,
             "detector": verify_detector, "segmenter": verify_segmenter}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the model zoo root the scripts built")
    args = parser.parse_args()
    # The refs were computed with the kernels capped at AVX2; they are reproduced with the
    # same kernels (torchd's tests compare them with the machine's own, within a tolerance).
    common.pin_cpu_kernels()
    torch.set_num_threads(common.THREADS)
    for name, verifier in VERIFIERS.items():
        try:
            verifier(os.path.join(args.out, name))
        except (AssertionError, OSError) as e:
            sys.exit(f"verify {name}: {e}")
        print(f"verify {name}: ok")


if __name__ == "__main__":
    main()
