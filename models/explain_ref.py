#!/usr/bin/env python3
"""Write OUT/digits/ig_ref.json and OUT/textcls/ig_ref.json: Captum's Integrated Gradients on
the zoo's scripted models, the reference that torchd's explanations are tested against
(daemon/explain_test.go).

digits: IntegratedGradients(model).attribute(x, target, n_steps=15), TorchServe's vision
  handler call, with Captum's default zero baseline and Gauss-Legendre path; x is a held-out
  PNG prepared as the image_classifier handler prepares it (gray, /255, mean 0.5, std 0.5).
textcls: Integrated Gradients with respect to the token embeddings (model.embed), from the
  embeddings of an all-[PAD] text (TorchServe's TokenReferenceBase), 50 steps (Captum's
  default, as TorchServe's LayerIntegratedGradients), through model.forward_embedded: what
  LayerIntegratedGradients on the token embedding computes. Importances are the attributions
  summed over the embedding and scaled to unit norm.

Needs captum (models/requirements.txt). Run after digits.py and textcls.py.
"""
import glob
import json
import os

import numpy as np
import torch
from captum.attr import IntegratedGradients
from PIL import Image

import common


def digits(out):
    d = os.path.join(out, "digits")
    model = torch.jit.load(os.path.join(d, "model.pt"))
    labels = json.load(open(os.path.join(d, "index_to_name.json")))
    index = {v if isinstance(v, str) else v[-1]: int(k) for k, v in labels.items()}
    ig = IntegratedGradients(model)
    refs = []
    for i, path in enumerate(sorted(glob.glob(os.path.join(d, "heldout", "*.png")))[:3]):
        img = np.asarray(Image.open(path).convert("L"), dtype=np.float32) / 255
        x = torch.from_numpy((img - 0.5) / 0.5).reshape(1, 1, 28, 28)
        label = os.path.basename(path)[:-4].split("_", 1)[1]
        # The first explains TorchServe's default target, 0; the others their own digit.
        target = 0 if i == 0 else index[label]
        attr = ig.attribute(x, target=target, n_steps=15)
        refs.append({"file": os.path.basename(path), "target": target,
                     "attributions": attr.reshape(-1).tolist()})
    common.write_json(os.path.join(d, "ig_ref.json"), refs)


def textcls(out):
    d = os.path.join(out, "textcls")
    model = torch.jit.load(os.path.join(d, "model.pt"))
    vocab = open(os.path.join(d, "vocab.txt"), encoding="utf-8").read().split("\n")
    pad_id = vocab.index("[PAD]")
    items = json.load(open(os.path.join(d, "heldout.json")))["items"][:3]
    # A plain function: Captum inspects the signature, which a ScriptMethod lacks.
    ig = IntegratedGradients(lambda tokens, attention_mask: model.forward_embedded(tokens, attention_mask))
    refs = []
    for i, it in enumerate(items):
        ids = torch.tensor([it["ids"]])
        mask = torch.ones_like(ids)
        with torch.no_grad():
            x = model.embed(ids)
            base = model.embed(torch.full_like(ids, pad_id))
        target = i % 2
        attr = ig.attribute(x, baselines=base, additional_forward_args=(mask,), target=target)
        imp = attr.sum(-1)[0]
        imp = imp / torch.norm(imp)
        refs.append({"text": it["text"], "target": target, "importances": imp.tolist(),
                     "words": [vocab[j] for j in it["ids"]]})
    common.write_json(os.path.join(d, "ig_ref.json"), refs)


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    digits(args.out)
    textcls(args.out)


if __name__ == "__main__":
    main()
