# An eager resnet18, as TorchServe's examples/image_classifier/resnet_18 archives it: the class
# in model.py, the weights a state dict.
from torchvision.models.resnet import BasicBlock, ResNet


class ImageClassifier(ResNet):
    def __init__(self):
        super().__init__(BasicBlock, [2, 2, 2, 2])
