"""The models the Python peers serve, with torchd's preprocessing and postprocessing.

Every peer loads the same TorchScript files as torchd (models/out/*/model.pt) and prepares
inputs as the archives' configs say (models/configs/*.toml):

  resnet18       JPEG/PNG -> RGB, Resize(256), CenterCrop(224), ImageNet mean/std; top 5
  digits         PNG -> grayscale 28x28, (x/255 - 0.5) / 0.5; top 3
  digits_tensor  .npy float32 [1,1,28,28] or [1,28,28] -> the same CNN -> .npy logits

Preprocessing is torchvision's, as TorchServe's image_classifier does it.
"""
import io
import json
import os

import numpy as np
import torch
from PIL import Image
from torchvision import transforms

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "models", "out")


def set_threads(n, interop=False):
    """Intra-op threads for the calling thread; with interop, also one inter-op thread, which
    LibTorch allows once per process, before any parallel work."""
    if interop:
        torch.set_num_interop_threads(1)
    torch.set_num_threads(n)


def _labels(zoo):
    p = os.path.join(OUT, zoo, "index_to_name.json")
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return {int(k): (v[-1] if isinstance(v, list) else v) for k, v in json.load(f).items()}


class Model:
    """One served model: preprocess(bytes) -> [N,...] tensor, forward, postprocess(row)."""

    def __init__(self, name, zoo, kind, transform=None, top_k=5):
        self.name, self.kind, self.transform, self.top_k = name, kind, transform, top_k
        self.module = torch.jit.load(os.path.join(OUT, zoo, "model.pt"), map_location="cpu").eval()
        self.labels = _labels(zoo)
        self.gray = kind == "gray"

    def preprocess(self, body):
        if self.kind == "tensor":
            a = np.load(io.BytesIO(body), allow_pickle=False).astype(np.float32, copy=False)
            if a.ndim == 3:
                a = a[None]
            return torch.from_numpy(a)
        img = Image.open(io.BytesIO(body))
        img = img.convert("L" if self.gray else "RGB")
        return self.transform(img).unsqueeze(0)

    def forward(self, x):
        with torch.inference_mode():
            return self.module(x)

    def postprocess(self, y):
        """y: this request's rows of the output. Returns (content type, body bytes)."""
        if self.kind == "tensor":
            buf = io.BytesIO()
            np.save(buf, y.numpy())
            return "application/x-npy", buf.getvalue()
        p = torch.softmax(y.float(), dim=1)[0]
        probs, idx = torch.topk(p, min(self.top_k, p.numel()))
        out = {self.labels.get(int(i), str(int(i))): float(v) for v, i in zip(probs.tolist(), idx.tolist())}
        return "application/json", json.dumps(out, indent=2).encode()


def load_models():
    imagenet = transforms.Compose([
        transforms.Resize(256),
        transforms.CenterCrop(224),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    digits = transforms.Compose([
        transforms.Resize((28, 28)),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.5], std=[0.5]),
    ])
    models = {
        "resnet18": Model("resnet18", "resnet18", "rgb", imagenet, top_k=5),
        "digits": Model("digits", "digits", "gray", digits, top_k=3),
        "digits_tensor": Model("digits_tensor", "digits", "tensor"),
    }
    # Warm-up: TorchScript's profiling executor settles after a few runs per shape.
    for m in models.values():
        shape = (1, 3, 224, 224) if m.kind == "rgb" else (1, 1, 28, 28)
        for _ in range(3):
            m.forward(torch.zeros(shape))
    return models
