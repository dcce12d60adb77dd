"""A custom BaseHandler over an eager model (custom_model.py and its state dict): JSON rows in,
logits and the arg max out. It prints each batch's size, which the differential test logs."""
import json

import torch
from ts.torch_handler.base_handler import BaseHandler


class CustomHandler(BaseHandler):
    def preprocess(self, data):
        print(f"tsdiff: custom batch of {len(data)}", flush=True)
        rows = []
        for d in data:
            body = d.get("data") or d.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            rows.append(torch.tensor(body["x"], dtype=torch.float32))
        return torch.stack(rows)

    def postprocess(self, out):
        return [{"logits": r.tolist(), "class": int(r.argmax())} for r in out]
