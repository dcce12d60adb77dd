#!/usr/bin/env python3
"""Build OUT/detector/: torchvision's Faster R-CNN (MobileNetV3-Large 320 FPN), scripted, with
random weights, its references as TorchServe's object_detector answers them, and torchvision's
operators (nms, roi_align, ...) on fixed inputs for the runtime's operator test.

Files:
  model.pt             torch.jit.script(fasterrcnn_mobilenet_v3_large_320_fpn(weights=None,
                       weights_backbone=None, num_classes=4)), eval mode: forward takes
                       List[Tensor] images of any size and returns (losses, detections).
  index_to_name.json   {"0": "__background__", "1": "circle", "2": "square", "3": "triangle"}.
  scene_320x240.png    two synthetic scenes of different sizes (lossless, so torchd's decode
  scene_200x300.png    equals PIL's bit for bit).
  ref_answers.json     TorchServe's ObjectDetector.postprocess (threshold 0.5, the labels above)
                       applied to model.pt's output: "scene_320x240.png" and "scene_200x300.png"
                       each run alone, and "batch": both in one forward, in that order.
  ops.pt               a scripted module calling torchvision.ops on its inputs (forward's
                       outputs: nms, batched_nms, roi_align, roi_align aligned, roi_pool,
                       ps_roi_align); ops_in_<i>.npy its inputs and ops_out_<i>.npy its outputs.
  not_a_detector.pt    forward(List[Tensor]) -> Dict[str, Tensor] of each image's mean: a model
                       that object_detector must refuse with a clear message.

Random weights give degenerate activations: the backbone's output vanishes (about 1e-8, all
boxes alike, every score tied, and denormal floats slow every convolution). So its batch
norms take their statistics from synthetic scenes first (train mode, a cumulative average),
and the class logits are scaled up, so that a few boxes clear the 0.5 threshold with distinct
scores. The references must have no score near the threshold and no near-tie in their order,
so that a comparison with a tolerance is meaningful: the build takes the first scale of
LOGIT_SCALES that gives such references.
"""
import os
from typing import Dict, List

import numpy as np
import torch
import torchvision
from PIL import Image, ImageDraw
from torchvision.transforms import functional as F

import common

NAME = "detector"
LABELS = ["__background__", "circle", "square", "triangle"]
THRESHOLD = 0.5  # TorchServe's ObjectDetector.threshold
SCENES = {"scene_320x240.png": (320, 240, 1), "scene_200x300.png": (200, 300, 2)}
# The class logits' scale, tried in turn until the references are well conditioned: another
# CPU's float rounding may put a score near the threshold, and the build then takes the next.
LOGIT_SCALES = [16.0, 20.0, 12.0, 24.0, 14.0, 18.0]


def scene(w, h, seed):
    """A flat background with a few filled circles, squares and triangles."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (w, h), tuple(int(c) for c in rng.integers(0, 256, 3)))
    d = ImageDraw.Draw(img)
    for _ in range(6):
        x, y, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(12, 50)
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        kind = rng.integers(3)
        if kind == 0:
            d.ellipse([x - r, y - r, x + r, y + r], fill=fill)
        elif kind == 1:
            d.rectangle([x - r, y - r, x + r, y + r], fill=fill)
        else:
            d.polygon([(x, y - r), (x - r, y + r), (x + r, y + r)], fill=fill)
    return img


def build_model(logit_scale):
    torch.manual_seed(0)
    m = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=len(LABELS))
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = None  # a cumulative average over the calibration batch
            mod.reset_running_stats()
    m.backbone.train()
    with torch.no_grad():
        calib = [F.to_tensor(scene(320, 320, 100 + i)) for i in range(8)]
        m.backbone(m.transform(calib)[0].tensors)
    m.eval()
    # The class logits: scaled up, and centred on the calibration scenes' boxes, so that no
    # class wins every box through the bias of all-positive features.
    feats = []
    hook = m.roi_heads.box_head.register_forward_hook(lambda _m, _i, out: feats.append(out))
    with torch.no_grad():
        m(calib)
        hook.remove()
        cls = m.roi_heads.box_predictor.cls_score
        cls.weight.mul_(logit_scale)
        cls.bias.copy_(-cls(torch.cat(feats)).mean(0) + cls.bias)
    return m


def torchserve_answer(detections, mapping):
    """ts/torch_handler/object_detector.py's postprocess for one image."""
    keep = detections["scores"] >= THRESHOLD
    boxes, classes, scores = (detections[k][keep].tolist() for k in ("boxes", "labels", "scores"))
    return [{mapping[str(c)]: b, "score": s} for c, b, s in zip(classes, boxes, scores)]


def ill_conditioned(detections):
    """Why a reference is unfit for a comparison with a tolerance, or None: no detection over
    the threshold, a score within 1e-4 of it, or kept scores less than 1e-5 apart."""
    s = detections["scores"]
    near = (s - THRESHOLD).abs().min().item() if len(s) else 1.0
    kept = s[s >= THRESHOLD]
    gap = (kept[:-1] - kept[1:]).min().item() if len(kept) > 1 else 1.0
    if near < 1e-4 or gap < 1e-5 or len(kept) == 0:
        return (f"{len(kept)} kept, nearest score {near:.2e} from the threshold, smallest gap "
                f"{gap:.2e}")
    return None


def references(model, images, mapping):
    """TorchServe's answers on model's output for each scene alone and both in one forward,
    or None when one of them is ill-conditioned."""
    refs = {}
    with torch.inference_mode():
        dets = [model([img])[1][0] for img in images] + list(model(images)[1])
    names = list(SCENES) + ["batch " + n for n in SCENES]
    for name, det in zip(names, dets):
        why = ill_conditioned(det)
        if why:
            print(f"detector: {name}: ill-conditioned ({why})")
            return None
    for name, det in zip(SCENES, dets):
        refs[name] = torchserve_answer(det, mapping)
    refs["batch"] = [torchserve_answer(det, mapping) for det in dets[len(SCENES):]]
    for name, answer in [*((n, refs[n]) for n in SCENES), *zip(names[len(SCENES):], refs["batch"])]:
        print(f"detector: {name}: {len(answer)} detections at or over {THRESHOLD}")
    return refs


class Ops(torch.nn.Module):
    def forward(self, boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor,
                feats: torch.Tensor, rois: torch.Tensor):
        return (torchvision.ops.nms(boxes, scores, 0.5),
                torchvision.ops.batched_nms(boxes, scores, idxs, 0.5),
                torchvision.ops.roi_align(feats, rois, [7, 7], 0.5, 2, False),
                torchvision.ops.roi_align(feats, rois, [5, 3], 0.25, -1, True),
                torchvision.ops.roi_pool(feats, rois, [4, 4], 0.5),
                torchvision.ops.ps_roi_align(feats, rois, 3, 0.5, 2))


class NotADetector(torch.nn.Module):
    def forward(self, images: List[torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {"mean": torch.stack([x.mean() for x in images])}


def ops_inputs():
    g = torch.Generator().manual_seed(7)
    xy = torch.rand(200, 2, generator=g) * 100
    wh = torch.rand(200, 2, generator=g) * 40 + 1
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.rand(200, generator=g)
    idxs = torch.randint(0, 3, (200,), generator=g)
    feats = torch.randn(2, 9, 24, 32, generator=g)  # ps_roi_align: channels = 9 x out_channels
    rxy = torch.rand(16, 2, generator=g) * 40
    rwh = torch.rand(16, 2, generator=g) * 20 + 2
    rois = torch.cat([torch.randint(0, 2, (16, 1), generator=g).float(), rxy, rxy + rwh], 1)
    return boxes, scores, idxs, feats, rois


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    with common.model_dir(args.out, NAME) as d:
        mapping = common.index_to_name(LABELS)
        common.write_json(os.path.join(d, "index_to_name.json"), mapping)

        images = []
        for name, (w, h, seed) in SCENES.items():
            img = scene(w, h, seed)
            img.save(os.path.join(d, name))
            # TorchServe's object_detector: Image.open, then ToTensor.
            images.append(F.to_tensor(Image.open(os.path.join(d, name))))
        for scale in LOGIT_SCALES:
            model = common.save_scripted(build_model(scale), os.path.join(d, "model.pt"))
            refs = references(model, images, mapping)
            if refs is not None:
                print(f"detector: class logits scaled by {scale}")
                break
        else:
            raise SystemExit("detector: no scale of LOGIT_SCALES gives well-conditioned references")
        common.write_json(os.path.join(d, "ref_answers.json"), refs)

        common.save_scripted(NotADetector(), os.path.join(d, "not_a_detector.pt"))
        ops = common.save_scripted(Ops(), os.path.join(d, "ops.pt"))
        ins = ops_inputs()
        with torch.inference_mode():
            outs = ops(*ins)
        for i, t in enumerate(ins):
            np.save(os.path.join(d, f"ops_in_{i}.npy"), t.numpy())
        for i, t in enumerate(outs):
            np.save(os.path.join(d, f"ops_out_{i}.npy"), t.numpy())


if __name__ == "__main__":
    main()
