# torchvision's fasterrcnn_mobilenet_v3_large_320_fpn, untrained, for TorchServe's
# object_detector handler: the class in model.py, the weights a state dict.
import torch
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn


class Detector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None)

    def forward(self, images):
        return self.net(images)
