# The handler of TorchServe's MNIST example: TorchServe's ImageClassifier with MNIST's
# normalization, answering each image's digit.
from torchvision import transforms
from ts.torch_handler.image_classifier import ImageClassifier


class MNISTDigitClassifier(ImageClassifier):
    image_processing = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])

    def postprocess(self, data):
        return data.argmax(1).tolist()
