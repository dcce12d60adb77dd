#!/usr/bin/env python3
"""Build OUT/resnet18/: torchvision's ResNet-18, scripted, plus refs and sample images.

Files:
  model.pt             TorchScript ResNet-18, eval mode. Random weights (torch.manual_seed(0))
                       unless --pretrained, which needs torchvision's ImageNet checkpoint.
  index_to_name.json   ImageNet class names, {"0": "tench", ...} (bundled with torchvision).
  ref_input.npy        float32 [2,3,224,224], torch.manual_seed(1) randn.
  ref_output.npy       float32 [2,1000], model.pt's logits for ref_input (inference_mode).
  sample_640x480.jpg   synthetic RGB request images (JPEG quality 90) whose detail and noise
  sample_1920x1080.jpg give realistic encoded sizes for decode/resize tests and benchmarks.
  sample_224.png       the same kind of image at the model's input size, lossless.
"""
import os
import sys

import numpy as np
import torch
import torchvision
from PIL import Image, ImageDraw, ImageFilter

import common

NAME = "resnet18"
WEIGHTS = torchvision.models.ResNet18_Weights.IMAGENET1K_V1


def build_model(pretrained):
    if not pretrained:
        torch.manual_seed(0)
        return torchvision.models.resnet18(weights=None)
    try:
        return torchvision.models.resnet18(weights=WEIGHTS)
    except OSError as e:  # urllib's URLError is an OSError
        sys.exit(
            f"--pretrained: cannot fetch the ImageNet weights ({e}).\n"
            f"This machine has no internet: put {os.path.basename(WEIGHTS.url)} "
            f"(from {WEIGHTS.url}) into {torch.hub.get_dir()}/checkpoints/, "
            f"or build without --pretrained (random weights)."
        )


def synthetic_photo(width, height, seed):
    """A deterministic stand-in for a photo: smooth colour gradients, overlapping soft-edged
    shapes and sensor-like noise, so JPEG encodes it at a size typical of real photos (a flat
    or purely random image would compress far better or far worse)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    x /= width
    y /= height
    channels = []
    for _ in range(3):
        fx, fy = rng.uniform(0.3, 1.5, 2)
        phase = rng.uniform(0, 2 * np.pi)
        channels.append(127 + 90 * np.sin(2 * np.pi * (fx * x + fy * y) + phase))
    img = Image.fromarray(np.stack(channels, axis=-1).astype(np.uint8), "RGB")

    # Shape sizes scale with the image so every resolution shows the same kind of scene.
    draw = ImageDraw.Draw(img)
    size = min(width, height)
    for _ in range(40):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(0.04, 0.25) * size
        aspect = rng.uniform(0.5, 2.0)
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        box = [cx - r, cy - r * aspect, cx + r, cy + r * aspect]
        kind = rng.integers(3)
        if kind == 0:
            draw.ellipse(box, fill=fill)
        elif kind == 1:
            draw.rectangle(box, fill=fill)
        else:
            angles = np.sort(rng.uniform(0, 2 * np.pi, rng.integers(3, 7)))
            draw.polygon([(cx + r * np.cos(a), cy + r * aspect * np.sin(a)) for a in angles],
                         fill=fill)
    img = img.filter(ImageFilter.GaussianBlur(size / 300))

    noisy = np.asarray(img, np.float32) + 6 * rng.standard_normal((height, width, 3), np.float32)
    return Image.fromarray(np.clip(np.rint(noisy), 0, 255).astype(np.uint8), "RGB")


def main():
    args = common.parse_args(
        __doc__.splitlines()[0],
        lambda p: p.add_argument("--pretrained", action="store_true",
                                 help="use torchvision's ImageNet weights (needs them cached)"))
    with common.model_dir(args.out, NAME) as d:
        model = common.save_scripted(build_model(args.pretrained), os.path.join(d, "model.pt"))
        common.write_json(os.path.join(d, "index_to_name.json"),
                          common.index_to_name(WEIGHTS.meta["categories"]))

        torch.manual_seed(1)
        ref_input = torch.randn(2, 3, 224, 224)
        with torch.inference_mode():
            ref_output = model(ref_input)
        np.save(os.path.join(d, "ref_input.npy"), ref_input.numpy())
        np.save(os.path.join(d, "ref_output.npy"), ref_output.numpy())

        synthetic_photo(640, 480, seed=640).save(os.path.join(d, "sample_640x480.jpg"), quality=90)
        synthetic_photo(1920, 1080, seed=1920).save(os.path.join(d, "sample_1920x1080.jpg"),
                                                    quality=90)
        synthetic_photo(224, 224, seed=224).save(os.path.join(d, "sample_224.png"))


if __name__ == "__main__":
    main()
