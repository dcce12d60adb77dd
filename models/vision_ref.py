#!/usr/bin/env python3
"""Make test images and torchvision reference tensors for handlers/vision.

Each case is an image file plus the tensor that torchvision 0.14 computes from it
(Image.open -> exif_transpose -> convert -> Resize -> CenterCrop -> ToTensor ->
Normalize), saved as float32 .npy. manifest.json lists the cases and the transform
parameters, so the Go test builds the same vision.Transform without a second copy
of the table.

TorchServe's image_classifier handler ignores EXIF orientation; torchd honours it,
so the reference is the upright image.

Run with the system Python, which has torch and torchvision:
    .venv/bin/python models/vision_ref.py --out DIR
"""

import argparse
import json
import os

import numpy as np
from PIL import Image, ImageDraw, ImageOps, features
from torchvision import transforms as T

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def photo(w, h, seed):
    """A deterministic RGB picture: gradients, shapes, fine stripes and noise.

    The stripes and noise carry high frequencies, so resampling and JPEG decode
    differences show up instead of hiding in flat areas.
    """
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 255.0 * x / max(w - 1, 1)
    g = 255.0 * y / max(h - 1, 1)
    b = 128.0 + 100.0 * np.sin(x / 17.0) * np.cos(y / 23.0)
    a = np.stack([r, g, b], axis=-1) + rng.normal(0.0, 12.0, (h, w, 3))
    img = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    d.ellipse([w * 0.08, h * 0.1, w * 0.45, h * 0.6], fill=(220, 40, 40),
              outline=(0, 0, 0), width=max(1, w // 200))
    d.rectangle([w * 0.55, h * 0.2, w * 0.9, h * 0.8], fill=(30, 160, 60))
    d.polygon([(w * 0.2, h * 0.95), (w * 0.5, h * 0.65), (w * 0.8, h * 0.95)],
              fill=(40, 60, 200))
    d.line([(0, h - 1), (w - 1, 0)], fill=(255, 255, 0), width=max(1, w // 150))
    # Stripes with a 3-pixel period in a corner patch.
    for i in range(int(w * 0.6), int(w * 0.95), 3):
        d.line([(i, h * 0.05), (i, h * 0.18)], fill=(250, 250, 250))
    return img


def digit(seed):
    """A 28x28 grayscale stroke on black, like an MNIST sample."""
    img = Image.new("L", (28, 28), 0)
    d = ImageDraw.Draw(img)
    d.ellipse([7, 4, 21, 24], outline=255, width=3)
    d.line([(9, 20), (19, 7)], fill=180, width=2)
    rng = np.random.default_rng(seed)
    a = np.asarray(img).astype(np.int16) + rng.integers(0, 20, (28, 28))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "L")


def case(name, file, resize=256, crop=(224, 224), size=None, gray=False,
         mean=IMAGENET_MEAN, std=IMAGENET_STD):
    return {"name": name, "file": file, "resize": resize, "crop": crop,
            "size": size, "gray": gray, "mean": mean, "std": std,
            "ref": name + ".npy"}


def make_images(out):
    """Writes the test images and returns the cases that use them."""
    cases = []

    def save(img, file, **kw):
        img.save(os.path.join(out, file), **kw)

    for w, h, seed in [(640, 480, 1), (1920, 1080, 2), (300, 500, 3)]:
        f = "photo_%dx%d.jpg" % (w, h)
        save(photo(w, h, seed), f, quality=90)
        cases.append(case("jpeg_%dx%d" % (w, h), f))
    # Short side 2100: the only size here that takes the 1/8 DCT scale.
    save(photo(2600, 2100, 4), "photo_2600x2100.jpg", quality=90)
    cases.append(case("jpeg_2600x2100", "photo_2600x2100.jpg"))

    # Restart markers after every MCU row, as many cameras write them.
    save(photo(1920, 1080, 18), "photo_restart.jpg", quality=90, restart_marker_rows=1)
    cases.append(case("jpeg_restart_1920x1080", "photo_restart.jpg"))

    p = photo(640, 480, 5)
    save(p, "photo_444.jpg", quality=90, subsampling=0)
    cases.append(case("jpeg_444_640x480", "photo_444.jpg"))
    save(p, "photo_progressive.jpg", quality=90, progressive=True)
    cases.append(case("jpeg_progressive_640x480", "photo_progressive.jpg"))
    save(p.convert("L"), "gray.jpg", quality=90)
    cases.append(case("jpeg_gray_640x480", "gray.jpg"))
    save(p.convert("CMYK"), "cmyk.jpg", quality=90)
    cases.append(case("jpeg_cmyk_640x480", "cmyk.jpg"))
    cases.append(case("jpeg_to_gray_640x480", "photo_640x480.jpg", gray=True,
                      mean=[0.5], std=[0.5]))

    # EXIF orientation: every value on a small image, and one big rotated photo
    # so that DCT scaling is chosen on the upright dimensions.
    small = photo(320, 240, 6)
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        f = "exif%d.jpg" % o
        save(small, f, quality=90, exif=exif.tobytes())
        cases.append(case("jpeg_exif%d_320x240" % o, f))
    exif = Image.Exif()
    exif[0x0112] = 6
    save(photo(1920, 1080, 7), "exif6_big.jpg", quality=90, exif=exif.tobytes())
    cases.append(case("jpeg_exif6_1920x1080", "exif6_big.jpg"))

    p = photo(400, 300, 8)
    save(p, "rgb.png")
    cases.append(case("png_400x300", "rgb.png"))
    cases.append(case("png_to_gray_400x300", "rgb.png", gray=True,
                      mean=[0.5], std=[0.5]))
    cases.append(case("png_exact_160x120", "rgb.png", resize=0, crop=None,
                      size=(160, 120)))

    rgba = photo(257, 199, 9).convert("RGBA")
    alpha = np.tile(np.linspace(0, 255, 257).astype(np.uint8), (199, 1))
    rgba.putalpha(Image.fromarray(alpha, "L"))
    save(rgba, "rgba.png")
    cases.append(case("png_rgba_257x199", "rgba.png"))

    save(photo(320, 240, 10).convert("L"), "gray.png")
    cases.append(case("png_gray_320x240", "gray.png"))
    save(photo(200, 150, 11).quantize(256), "palette.png")
    cases.append(case("png_palette_200x150", "palette.png"))

    small = photo(100, 80, 12)
    save(small, "small.png")
    cases.append(case("png_upscale_100x80", "small.png"))
    cases.append(case("png_pad_100x80", "small.png", resize=0))

    save(digit(13), "digit.png")
    cases.append(case("png_digit_28x28", "digit.png", resize=0, crop=None,
                      size=(28, 28), gray=True, mean=[0.1307], std=[0.3081]))

    save(photo(256, 256, 14).quantize(256), "palette.gif")
    cases.append(case("gif_256x256", "palette.gif"))
    save(photo(350, 260, 15), "rgb.bmp")
    cases.append(case("bmp_350x260", "rgb.bmp"))

    if features.check("webp"):
        p = photo(400, 300, 16)
        save(p, "lossy.webp", quality=90)
        cases.append(case("webp_lossy_400x300", "lossy.webp"))
        save(p, "lossless.webp", lossless=True)
        cases.append(case("webp_lossless_400x300", "lossless.webp"))
        # Odd sizes exercise the edges of libwebp's chroma upsampling.
        save(photo(401, 301, 17), "odd.webp", quality=90)
        cases.append(case("webp_lossy_401x301", "odd.webp"))
        save(rgba, "alpha.webp", quality=90)
        cases.append(case("webp_lossy_alpha_257x199", "alpha.webp"))
    return cases


def reference(path, c):
    img = ImageOps.exif_transpose(Image.open(path))
    img = img.convert("L" if c["gray"] else "RGB")
    steps = []
    if c["resize"]:
        steps.append(T.Resize(c["resize"]))
    if c["size"]:
        w, h = c["size"]
        steps.append(T.Resize((h, w)))
    if c["crop"]:
        w, h = c["crop"]
        steps.append(T.CenterCrop((h, w)))
    steps += [T.ToTensor(), T.Normalize(c["mean"], c["std"])]
    return T.Compose(steps)(img).numpy().astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for images, .npy and manifest.json")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cases = make_images(args.out)
    for c in cases:
        t = reference(os.path.join(args.out, c["file"]), c)
        np.save(os.path.join(args.out, c["ref"]), np.ascontiguousarray(t))
        c["shape"] = list(t.shape)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(cases, f, indent=1)
    print("wrote %d cases to %s" % (len(cases), args.out))


if __name__ == "__main__":
    main()
