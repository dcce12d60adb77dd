"""The container test's custom handler (deploy/docker/test.sh), written as TorchServe's MNIST
example writes its handler (examples/image_classifier/mnist/mnist_handler.py): an
ImageClassifier subclass over the zoo's TorchScript digits CNN, with the preprocessing the CNN
was trained on, answering each image's class index."""
from torchvision import transforms
from ts.torch_handler.image_classifier import ImageClassifier


class DigitClassifier(ImageClassifier):
    image_processing = transforms.Compose([
        transforms.Grayscale(),
        transforms.Resize((28, 28)),
        transforms.ToTensor(),
        transforms.Normalize((0.5,), (0.5,)),
    ])

    def postprocess(self, data):
        return data.argmax(1).tolist()
