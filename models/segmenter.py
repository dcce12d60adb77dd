#!/usr/bin/env python3
"""Build OUT/segmenter/: torchvision's DeepLabV3 (MobileNetV3-Large), scripted, with random
weights, and its references as TorchServe's image_segmenter answers them.

Files:
  model.pt           torch.jit.script(deeplabv3_mobilenet_v3_large(weights=None,
                     weights_backbone=None, num_classes=4, aux_loss=True)), eval mode: forward
                     takes float32 [N, 3, H, W] and returns Dict[str, Tensor] with "out" and
                     "aux", each [N, 4, H, W].
  scene_320x240.png  two synthetic scenes (lossless, so torchd's decode equals PIL's).
  scene_200x300.png
  ref_answer.npy     float32 [2, 224, 224, 2]: TorchServe's ImageSegmenter.postprocess (softmax
                     over the classes of "out", then per pixel [class, probability]) applied to
                     model.pt's output for both scenes, preprocessed as its image_processing
                     does (Resize(256), CenterCrop(224), ToTensor, ImageNet's Normalize).
  ref_margin.npy     float32 [2, 224, 224]: per pixel, the top probability less the second, so
                     that a test can allow a near-tie to go either way.
  no_out.pt          forward(Tensor) -> Dict[str, Tensor] without "out": a model that
                     image_segmenter must refuse with a clear message.

Random weights shrink the activations to nothing through the backbone, so its batch norms take
their statistics from synthetic scenes first (train mode, a cumulative average), which gives
each pixel a distinct class distribution.
"""
import os
from typing import Dict

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision import transforms as T

import common
from detector import scene

NAME = "segmenter"
CLASSES = 4
SCENES = {"scene_320x240.png": (320, 240, 1), "scene_200x300.png": (200, 300, 2)}
# ts/torch_handler/image_segmenter.py's image_processing.
PREPROCESS = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])


def build_model():
    torch.manual_seed(0)
    m = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=CLASSES, aux_loss=True)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = None  # a cumulative average over the calibration batch
            mod.reset_running_stats()
    m.train()
    with torch.no_grad():
        m(torch.stack([PREPROCESS(scene(256, 256, 100 + i)) for i in range(8)]))
    return m.eval()


class NoOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"logits": x.mean(1, keepdim=True)}


def torchserve_answer(out):
    """ts/torch_handler/image_segmenter.py's postprocess, before tolist()."""
    data = torch.nn.functional.softmax(out["out"], dim=1)
    data = torch.max(data, dim=1)
    return torch.stack([data.indices.type(data.values.dtype), data.values], dim=3)


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    with common.model_dir(args.out, NAME) as d:
        model = common.save_scripted(build_model(), os.path.join(d, "model.pt"))
        common.save_scripted(NoOut(), os.path.join(d, "no_out.pt"))
        images = []
        for name, (w, h, seed) in SCENES.items():
            scene(w, h, seed).save(os.path.join(d, name))
            images.append(PREPROCESS(Image.open(os.path.join(d, name)).convert("RGB")))
        with torch.inference_mode():
            out = model(torch.stack(images))
        top2 = torch.softmax(out["out"], dim=1).topk(2, dim=1).values
        np.save(os.path.join(d, "ref_answer.npy"), torchserve_answer(out).numpy())
        np.save(os.path.join(d, "ref_margin.npy"), (top2[:, 0] - top2[:, 1]).numpy())
        counts = torch.bincount(out["out"].argmax(1).flatten(), minlength=CLASSES).tolist()
        if sum(c > 0 for c in counts) < 2:
            raise SystemExit(f"segmenter: the references show one class only ({counts})")
        print(f"segmenter: pixels per class {counts}")


if __name__ == "__main__":
    main()
