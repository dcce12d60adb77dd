# torchvision's deeplabv3_mobilenet_v3_large, untrained, for TorchServe's image_segmenter
# handler: the class in model.py, the weights a state dict.
import torch
from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large


class Segmenter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21)

    def forward(self, images):
        return self.net(images)
