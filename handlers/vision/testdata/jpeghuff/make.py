"""Writes the JPEGs TestFastHuffman decodes with both Huffman decoders: the layouts,
sizes, tables and restart intervals a baseline file can have, from a photo's crops.

    .venv/bin/python handlers/vision/testdata/jpeghuff/make.py
"""
import glob
import os
import sys

from PIL import Image

here = os.path.dirname(os.path.abspath(__file__))
photos = sorted(glob.glob(os.path.join(sys.prefix, "lib/python3*/site-packages/ai_benchmark/data/classification/*.jpg")))
photo = Image.open(photos[0]).convert("RGB")


def crop(w, h):
    return photo.resize((max(w, 64), max(h, 64))).crop((0, 0, w, h))


cases = [
    # name, size, mode, save options
    ("444", (96, 64), "RGB", dict(quality=90, subsampling=0)),
    ("422", (96, 64), "RGB", dict(quality=90, subsampling=1)),
    ("420", (96, 64), "RGB", dict(quality=90, subsampling=2)),
    ("gray", (96, 64), "L", dict(quality=90)),
    ("cmyk", (48, 40), "CMYK", dict(quality=90)),
    ("q100", (80, 48), "RGB", dict(quality=100, subsampling=0)),
    ("q5", (80, 48), "RGB", dict(quality=5)),
    ("optimized", (96, 64), "RGB", dict(quality=95, optimize=True)),
    ("optimized-gray", (64, 64), "L", dict(quality=97, optimize=True)),
    ("rst1", (96, 64), "RGB", dict(quality=90, restart_marker_blocks=1)),
    ("rst3-444", (70, 50), "RGB", dict(quality=90, subsampling=0, restart_marker_blocks=3)),
    ("rst-rows", (90, 70), "RGB", dict(quality=90, subsampling=1, restart_marker_rows=1)),
    ("rst-gray", (50, 40), "L", dict(quality=90, restart_marker_blocks=2)),
    ("1x1", (1, 1), "RGB", dict(quality=90)),
    ("17x9", (17, 9), "RGB", dict(quality=90)),
    ("33x65-422", (33, 65), "RGB", dict(quality=90, subsampling=1)),
    ("129x7-444", (129, 7), "RGB", dict(quality=90, subsampling=0)),
    ("progressive", (64, 48), "RGB", dict(quality=90, progressive=True)),
]
for name, (w, h), mode, opts in cases:
    crop(w, h).convert(mode).save(os.path.join(here, name + ".jpg"), "JPEG", **opts)
