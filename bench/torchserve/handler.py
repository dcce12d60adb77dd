"""TorchServe handler for the benchmark: the zoo's three models, with the preprocessing and
postprocessing of torchd's built-in handlers and of TorchServe's image_classifier.

It subclasses BaseHandler instead of TorchServe's ImageClassifier only because the latter's
VisionHandler imports captum (for explanations), which pip would install with a newer torch
than Debian's; the transforms are the same (Resize(256), CenterCrop(224), ToTensor,
Normalize), as is the postprocessing (softmax, top-k, index_to_name.json).
The model kind comes from the archive name: resnet18, digits, digits_tensor.
"""
import io
import json
import os

import numpy as np
import torch
from PIL import Image
from torchvision import transforms

from ts.torch_handler.base_handler import BaseHandler

IMAGENET = transforms.Compose([
    transforms.Resize(256),
    transforms.CenterCrop(224),
    transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
])
DIGITS = transforms.Compose([
    transforms.Resize((28, 28)),
    transforms.ToTensor(),
    transforms.Normalize(mean=[0.5], std=[0.5]),
])


class ZooHandler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        name = context.manifest["model"]["modelName"]
        self.kind = {"resnet18": "rgb", "digits": "gray", "digits_tensor": "tensor"}[name]
        self.topk = 5 if self.kind == "rgb" else 3
        threads = os.environ.get("BENCH_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        print(f"bench: {name}: torch intra-op threads {torch.get_num_threads()}", flush=True)

    def preprocess(self, data):
        xs = []
        for row in data:
            body = row.get("data") or row.get("body")
            if self.kind == "tensor":
                a = np.load(io.BytesIO(body), allow_pickle=False).astype(np.float32, copy=False)
                xs.append(torch.from_numpy(a[None] if a.ndim == 3 else a))
                continue
            img = Image.open(io.BytesIO(body))
            if self.kind == "gray":
                xs.append(DIGITS(img.convert("L")).unsqueeze(0))
            else:
                xs.append(IMAGENET(img.convert("RGB")).unsqueeze(0))
        return torch.cat(xs)

    def inference(self, data, *args, **kwargs):
        with torch.inference_mode():
            return self.model(data)

    def postprocess(self, data):
        if self.kind == "tensor":
            out = []
            for row in data:
                buf = io.BytesIO()
                np.save(buf, row[None].numpy())
                out.append(buf.getvalue())
            return out
        ps = torch.softmax(data, dim=1)
        probs, classes = torch.topk(ps, self.topk, dim=1)
        res = []
        for p, c in zip(probs.tolist(), classes.tolist()):
            res.append({(self.mapping or {}).get(str(i), str(i)): v for v, i in zip(p, c)})
        return res
