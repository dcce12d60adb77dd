"""Builds the differential test's archives with TorchServe's torch-model-archiver, as a
TorchServe user makes them, and the inputs the test sends (frontend/torchserve/tsdiff_test.go).

Usage: python make.py STORE INPUTS   (the interpreter must import model_archiver)

Weights are random (seeded): the test compares two servers on the same archives, not a
model's accuracy. model-config.yaml gives every model one worker and batches of up to 4 (the custom handler, which
prints its batch sizes, waits up to 2 s for a batch to fill).
"""
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
STORE, INPUTS = sys.argv[1], sys.argv[2]
# torch-model-archiver, as its console script runs it.
ARCHIVER = [sys.executable, "-c", "import sys; from model_archiver.model_packaging import generate_model_archive; sys.exit(generate_model_archive())"]
CONFIG = "minWorkers: 1\nmaxWorkers: 1\nbatchSize: 4\nmaxBatchDelay: {delay}\nresponseTimeout: 300\nstartupTimeout: 600\n"
sys.path.insert(0, HERE)


def archive(name, handler, files, model_file=None, serialized=None, weights=None, delay=500):
    """Packs NAME.mar from this folder's files (renamed as the archive holds them)."""
    work = tempfile.mkdtemp(prefix=f"tsdiff-{name}-")
    try:
        extra = []
        for src, dst in files:
            shutil.copy(os.path.join(HERE, src), os.path.join(work, dst))
            extra.append(dst)
        with open(os.path.join(work, "model-config.yaml"), "w") as f:
            f.write(CONFIG.format(delay=delay))
        if weights is not None:
            weights(work)
        args = ARCHIVER + ["--model-name", name, "--version", "1.0", "--handler", handler,
                "--config-file", "model-config.yaml", "--export-path", STORE, "--force"]
        if model_file:
            args += ["--model-file", model_file]
            extra.remove(model_file)
        if serialized:
            args += ["--serialized-file", serialized]
        extra += [f for f in os.listdir(work) if f not in extra and f not in (model_file, serialized, "model-config.yaml")]
        if extra:
            args += ["--extra-files", ",".join(extra)]
        subprocess.run(args, cwd=work, check=True)
    finally:
        shutil.rmtree(work)


def state_dict(module, cls, tweak=None):
    def write(work):
        torch.manual_seed(0)
        m = getattr(__import__(module), cls)().eval()
        if tweak:
            tweak(m)
        torch.save(m.state_dict(), os.path.join(work, "weights.pt"))
    return write


def scripted(module, cls, tweak=None):
    """The state_dict's model, scripted: TorchServe loads it as TorchScript, torchd in-process."""
    def write(work):
        torch.manual_seed(0)
        m = getattr(__import__(module), cls)().eval()
        if tweak:
            tweak(m)
        torch.jit.script(m).save(os.path.join(work, "model.pt"))
    return write


def labels(work, n):
    with open(os.path.join(work, "index_to_name.json"), "w") as f:
        json.dump({str(i): f"class_{i}" for i in range(n)}, f)


def confident_detector(m):
    # An untrained detector scores every class about equally, below object_detector's
    # threshold: one class made likely gives boxes to compare.
    with torch.no_grad():
        m.net.roi_heads.box_predictor.cls_score.bias[1] = 12.0


def decisive_segmenter(m):
    # Untrained, every pixel's classes are nearly tied, where float noise would decide:
    # larger classifier weights keep each pixel's first class ahead.
    with torch.no_grad():
        m.net.classifier[4].weight *= 50


def bert(work):
    from transformers import BertConfig, BertForSequenceClassification
    words = "the a movie was good bad great awful plot actors and not very fine".split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + list("abcdefghijklmnopqrstuvwxyz")
    with open(os.path.join(work, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, num_labels=3,
                     id2label={0: "negative", 1: "neutral", 2: "positive"}, label2id={"negative": 0, "neutral": 1, "positive": 2})
    BertForSequenceClassification(cfg).eval().save_pretrained(work)


def images():
    os.makedirs(INPUTS, exist_ok=True)
    g = torch.Generator().manual_seed(1)
    for i, (w, h) in enumerate([(96, 80), (64, 64), (120, 90), (80, 100)]):
        px = (torch.rand(h, w, 3, generator=g) * 255).to(torch.uint8).numpy()
        Image.fromarray(px, "RGB").save(os.path.join(INPUTS, f"rgb{i}.png"))
        # object_detector stacks a batch's images as they come: one size.
        px = (torch.rand(80, 96, 3, generator=g) * 255).to(torch.uint8).numpy()
        Image.fromarray(px, "RGB").save(os.path.join(INPUTS, f"scene{i}.png"))
        d = (torch.rand(28, 28, generator=g) * 255).to(torch.uint8).numpy()
        Image.fromarray(d, "L").save(os.path.join(INPUTS, f"digit{i}.png"))
    # Photo-sized JPEGs, over twice the 256-pixel resize on both sides (kitten.jpg's 720×720 and
    # a street photo's 810×1080 among them), which TorchServe's handlers decode whole: smooth
    # shapes with noise, so that a decode that is not PIL's would show in the answers.
    for i, (w, h) in enumerate([(720, 720), (810, 1080), (1080, 810), (1920, 1080)]):
        y = torch.linspace(0, 1, h).view(h, 1, 1)
        x = torch.linspace(0, 1, w).view(1, w, 1)
        rgb = torch.cat([x.expand(h, w, 1), y.expand(h, w, 1), (x * y).expand(h, w, 1)], 2)
        rgb = rgb * 200 + (torch.sin(x * 40 + y * 25 + i) > 0) * 40 + torch.rand(h, w, 3, generator=g) * 15
        Image.fromarray(rgb.clamp(0, 255).to(torch.uint8).numpy(), "RGB").save(
            os.path.join(INPUTS, f"photo{i}.jpg"), quality=90)


def main():
    os.makedirs(STORE, exist_ok=True)
    images()
    archive("custom", "custom_handler.py", [("custom_handler.py", "custom_handler.py"), ("custom_model.py", "custom_model.py")],
            model_file="custom_model.py", serialized="weights.pt", weights=state_dict("custom_model", "CustomNet"), delay=2000)
    archive("resnet18", "image_classifier", [("resnet_model.py", "model.py")], model_file="model.py", serialized="weights.pt",
            weights=lambda w: (state_dict("resnet_model", "ImageClassifier")(w), labels(w, 1000)))
    archive("mnist", "mnist_handler.py", [("mnist_model.py", "mnist.py"), ("mnist_handler.py", "mnist_handler.py")],
            model_file="mnist.py", serialized="weights.pt", weights=state_dict("mnist_model", "Net"))
    archive("detector", "object_detector", [("detector_model.py", "model.py")], model_file="model.py", serialized="weights.pt",
            weights=lambda w: (state_dict("detector_model", "Detector", confident_detector)(w), labels(w, 91)))
    archive("segmenter", "image_segmenter", [("segmenter_model.py", "model.py")], model_file="model.py", serialized="weights.pt",
            weights=state_dict("segmenter_model", "Segmenter", decisive_segmenter))
    # The same models scripted: torchd runs these in-process, with its own image decoding.
    archive("resnet18_ts", "image_classifier", [], serialized="model.pt",
            weights=lambda w: (scripted("resnet_model", "ImageClassifier")(w), labels(w, 1000)))
    archive("segmenter_ts", "image_segmenter", [], serialized="model.pt",
            weights=scripted("segmenter_model", "Segmenter", decisive_segmenter))
    archive("hfcls", "hf_handler.py", [("hf_handler.py", "hf_handler.py")], serialized="model.safetensors", weights=bert)
    archive("streamer", "stream_handler.py", [("stream_handler.py", "stream_handler.py")])
    archive("mms", "mms_service:handle", [("mms_service.py", "mms_service.py")])


if __name__ == "__main__":
    main()
