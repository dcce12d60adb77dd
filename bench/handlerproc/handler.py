"""The handler-process benchmark's custom handler (bench/handlerproc.sh): an eager resnet18
from torchvision, its weights the archive's state dict, with TorchServe's image_classifier
preprocessing (Resize(256), CenterCrop(224), ToTensor, Normalize) and top-5 softmax out."""
import io
import os

import torch
import torchvision
from PIL import Image
from torchvision import transforms
from ts.torch_handler.base_handler import BaseHandler

PREPROCESS = transforms.Compose([
    transforms.Resize(256),
    transforms.CenterCrop(224),
    transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
])


class ResNetHandler(BaseHandler):
    def initialize(self, context):
        model_dir = context.system_properties["model_dir"]
        self.model = torchvision.models.resnet18(weights=None)
        self.model.load_state_dict(torch.load(os.path.join(model_dir, "resnet18.pt"), weights_only=True))
        self.model.eval()
        self.initialized = True

    def preprocess(self, data):
        images = []
        for row in data:
            body = row.get("data") or row.get("body")
            images.append(PREPROCESS(Image.open(io.BytesIO(body)).convert("RGB")))
        return torch.stack(images)

    def inference(self, x):
        with torch.inference_mode():
            return self.model(x)

    def postprocess(self, logits):
        probs, classes = torch.topk(torch.softmax(logits, dim=1), 5, dim=1)
        return [{str(c): p for p, c in zip(ps, cs)} for ps, cs in zip(probs.tolist(), classes.tolist())]
