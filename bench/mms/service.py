"""MMS (multi-model-server) custom service for the benchmark: the zoo's three models with
the same preprocessing and postprocessing as torchd and the other peers (bench/peers/zoo.py,
copied into each archive as zoo.py by the harness, with the model's files).
The model kind comes from the archive's model name: resnet18, digits, digits_tensor.
"""
import json
import os

import torch

_service = None


class Service:
    def __init__(self, context):
        import zoo  # next to this file in the extracted archive
        from torchvision import transforms
        props = context.system_properties
        name = context.manifest["model"]["modelName"]
        threads = os.environ.get("BENCH_TORCH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        print(f"bench: {name}: torch intra-op threads {torch.get_num_threads()}", flush=True)
        zoo.OUT = os.path.dirname(props["model_dir"])  # zoo.Model reads OUT/<zoo>/model.pt
        sub = os.path.basename(props["model_dir"])
        if name == "resnet18":
            t = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                                    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
            self.m = zoo.Model(name, sub, "rgb", t, top_k=5)
        elif name == "digits":
            t = transforms.Compose([transforms.Resize((28, 28)), transforms.ToTensor(),
                                    transforms.Normalize(mean=[0.5], std=[0.5])])
            self.m = zoo.Model(name, sub, "gray", t, top_k=3)
        else:
            self.m = zoo.Model(name, sub, "tensor")

    def handle(self, data):
        xs = [self.m.preprocess(row.get("data") or row.get("body")) for row in data]
        y = self.m.forward(torch.cat(xs))
        out, off = [], 0
        for x in xs:
            n = x.shape[0]
            ctype, body = self.m.postprocess(y[off:off + n])
            out.append(json.loads(body) if ctype == "application/json" else body)
            off += n
        return out


def handle(data, context):
    global _service
    if _service is None:
        _service = Service(context)
    if data is None:
        return None
    return _service.handle(data)
